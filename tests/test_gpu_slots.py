"""Devices are slots (pipeline/gpuslots.py): with fake device lists on the CPU -- two jobs never
share a GPU, a killed job's GPU comes back, a job waits while every GPU is held."""

import os
import signal
import subprocess
import sys

import pytest

from precisionflow.pipeline import gpuslots

DEVICES = [gpuslots.Device(f"GPU-{i}", str(i), f"00000000:{i:02d}:00.0", "NVIDIA H200") for i in range(2)]

HOLD = """
import sys, time
from pathlib import Path
from precisionflow.pipeline import gpuslots
devices = [gpuslots.Device(f"GPU-{i}", str(i), "bus", "NVIDIA H200") for i in range(int(sys.argv[2]))]
with gpuslots.slot(Path(sys.argv[1]), devices) as taken:
    print(taken.device.uuid, flush=True)
    time.sleep(300)
"""


def hold_in_process(folder, count=2):
    """A process holding a slot until killed; (process, the UUID it got)."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), str(count)], stdout=subprocess.PIPE, text=True)
    return process, process.stdout.readline().strip()


def test_two_jobs_never_share_a_gpu_and_a_killed_jobs_gpu_returns(tmp_path):
    first, got_first = hold_in_process(tmp_path)
    second, got_second = hold_in_process(tmp_path)
    try:
        assert {got_first, got_second} == {"GPU-0", "GPU-1"}
        assert sorted(gpuslots.held(tmp_path, DEVICES)) == ["GPU-0", "GPU-1"]
        with pytest.raises(TimeoutError):  # every GPU held: a third job waits
            with gpuslots.slot(tmp_path, DEVICES, poll_s=0.05, give_up_s=0.3):
                pass
        os.kill(first.pid, signal.SIGKILL)  # kill -9: the kernel releases its lock
        first.wait()
        with gpuslots.slot(tmp_path, DEVICES, poll_s=0.05, give_up_s=5) as taken:
            assert taken.device.uuid == got_first and taken.busy_others == [got_second]
    finally:
        for process in (first, second):
            process.kill()
            process.wait()


def test_a_slot_is_released_when_its_job_ends(tmp_path):
    with gpuslots.slot(tmp_path, DEVICES[:1]) as taken:
        assert taken.device.uuid == "GPU-0" and gpuslots.held(tmp_path, DEVICES) == ["GPU-0"]
    assert gpuslots.held(tmp_path, DEVICES) == []


def test_the_user_chooses_the_gpus_by_uuid_or_index():
    assert [d.uuid for d in gpuslots.allowed_devices(DEVICES, {"PRECISIONFLOW_GPUS": "GPU-1"})] == ["GPU-1"]
    assert [d.uuid for d in gpuslots.allowed_devices(DEVICES, {"PRECISIONFLOW_GPUS": "0"})] == ["GPU-0"]
    assert len(gpuslots.allowed_devices(DEVICES, {})) == 2


def test_which_jobs_take_a_slot():
    gpu_eval = {"stage": "evaluate_engine", "runs_engine": True, "params": {"target_def": {"device": "cuda"}}}
    assert gpuslots.needs_slot(gpu_eval, {}) and not gpuslots.needs_slot(gpu_eval, {"SLURM_JOB_ID": "7"})
    assert not gpuslots.needs_slot({"stage": "train_model", "params": {}}, {})
    assert not gpuslots.needs_slot(
        {"stage": "evaluate_engine", "runs_engine": True, "params": {"target_def": {"device": "cpu"}}}, {}
    )


def test_a_node_sees_only_its_gpu_and_records_it(tmp_path, monkeypatch):
    monkeypatch.setattr(gpuslots, "host_devices", lambda: DEVICES)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    spec = {"stage": "build_engine", "runs_engine": True, "params": {"target_def": {"device": "cuda"}}}
    with gpuslots.for_node(spec, tmp_path) as record:
        assert os.environ["CUDA_VISIBLE_DEVICES"] == record["uuid"] == "GPU-0" and record["gpus_allowed"] == 2
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    with gpuslots.for_node({"stage": "train_model", "params": {}}, tmp_path) as record:
        assert record is None  # a stage that runs no engine takes no slot (and waits for none)
