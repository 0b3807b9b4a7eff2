"""Train here, build and measure there: ship a target's engine nodes, run them in another process
with the plan's results elsewhere (as a GPU node would), land them, finish the report here."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from precisionflow.pipeline import remote
from precisionflow.errors import LineageError, StageError

from tests.conftest import FAST_TIMING

TINY = [
    "model=small_cnn",
    "dataset.max_samples=400",
    "train.epochs=2",
    "precisions=[fp32,fp16]",
    "targets=[cpu]",
    "target_defs.cpu.framework=false",
    *FAST_TIMING,
    "tracking.enabled=false",
    "evaluate.accept_undecided=true",
]  # 100 test images decide no default budget: not what is tested here


def cli(results: Path, *args: str, snakemake_args=()) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "precisionflow.cli", *args, f"results_dir={results}", *TINY]
    command += ["--", *snakemake_args] if snakemake_args else []
    return subprocess.run(command, capture_output=True, text=True, cwd=results.parent)


def test_target_nodes_come_in_dependency_order_and_a_missing_target_is_named():
    plan = {
        "nodes": {
            "compare_speed/a": {"stage": "compare_speed", "params": {"target": "h200"}, "inputs": {}},
            "evaluate_engine/a": {"stage": "evaluate_engine", "params": {"target": "h200"}, "inputs": {}},
            "build_engine/a": {"stage": "build_engine", "params": {"target": "h200"}, "inputs": {}},
            "build_engine/b": {"stage": "build_engine", "params": {"target": "local"}, "inputs": {}},
        }
    }
    assert remote.target_nodes(plan, "h200") == ["build_engine/a", "evaluate_engine/a", "compare_speed/a"]
    with pytest.raises(StageError, match=r"no engine nodes for target 'a100'.*\['h200', 'local'\]"):
        remote.target_nodes(plan, "a100")


@pytest.mark.slow
def test_ship_run_elsewhere_land_and_finish_here(tmp_path):
    results = tmp_path / "here" / "results"
    results.parent.mkdir()
    upstream = cli(results, "run", "--cores", "2", snakemake_args=("--omit-from", "build_engine"))
    assert upstream.returncode == 0, upstream.stdout[-2000:] + upstream.stderr[-2000:]
    assert "not done" in upstream.stdout and "no report yet" in upstream.stdout
    assert not (results / "build_engine").exists()

    bundle = tmp_path / "bundle"
    shipped = cli(results, "ship", "--target", "cpu", "--to", str(bundle))
    assert shipped.returncode == 0, shipped.stderr
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert len(manifest["nodes"]) == 6 and any(f.endswith("/x_test.npy") for f in manifest["upstream_files"])
    assert not list(bundle.glob("results/prepare_dataset/*/x_train.npy"))  # the test split only travels
    assert not any("model.keras" in f for f in manifest["upstream_files"])  # the GPU stages never open it

    # There: the runner reads the bundle's copy of the plan, with the results folder moved.
    env = dict(os.environ, PYTHONPATH=str(Path(remote.__file__).parents[1]))
    there = subprocess.run(
        [sys.executable, "-m", "precisionflow.pipeline.remote", "run", str(bundle)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert there.returncode == 0, there.stderr[-2000:]
    collected = tmp_path / "collected"
    assert len(remote.collect(bundle, collected, without_engine_files=True)) == 6
    assert not list(collected.glob("build_engine/*/engine.onnx"))

    landed = cli(results, "land", "--from", str(collected))
    assert landed.returncode == 0 and "6 node folders landed" in landed.stdout, landed.stderr
    again = cli(results, "land", "--from", str(collected))
    assert "0 node folders landed" in again.stdout  # never overwritten
    finished = cli(results, "run", "--cores", "2")
    assert finished.returncode == 0, finished.stdout[-2000:] + finished.stderr[-2000:]
    assert "1 of" in finished.stdout and "planned jobs executed" in finished.stdout  # the report alone


def test_land_refuses_folders_of_another_plan(tmp_path):
    foreign = tmp_path / "collected" / "evaluate_engine" / "fp32-cpu-000000000000"
    foreign.mkdir(parents=True)
    (foreign / "node.json").write_text(json.dumps({"id": "fp32-cpu-000000000000"}))
    with pytest.raises(LineageError, match="not a node of this plan"):
        remote.land(tmp_path / "collected", {"results_dir": str(tmp_path / "results"), "nodes": {}})


def test_keep_going_reports_every_failure_and_runs_the_rest(tmp_path, monkeypatch, capsys):
    """A node whose exception has no message (a timing worker's EOFError) once crashed the batch."""
    from precisionflow.pipeline import runner

    bundle = tmp_path / "bundle"
    (bundle / "results").mkdir(parents=True)
    keys = ["build_engine/a", "compare_speed/a", "evaluate_engine/b", "compare_speed/b"]
    (bundle / "plan.json").write_text(json.dumps({"nodes": {key: {} for key in keys}}))
    (bundle / "manifest.json").write_text(json.dumps({"nodes": keys}))
    ran = []

    def run_node(plan, key, results):
        ran.append(key)
        if key == "compare_speed/a":
            raise EOFError()  # what a dead worker's pipe gives
        if key == "evaluate_engine/b":
            raise StageError("first line\nsecond line")
        return {"timings": {"seconds": 0.1}}

    monkeypatch.setattr(runner, "run_node", run_node)
    with pytest.raises(StageError, match=r"2 nodes failed: \['compare_speed/a', 'evaluate_engine/b'\]"):
        remote.run_bundle(bundle, keep_going=True)
    assert ran == keys  # every node after a failure still ran
    printed = capsys.readouterr().out
    assert "compare_speed/a: FAILED: EOFError (no message)" in printed
    assert "evaluate_engine/b: FAILED: StageError: first line" in printed and "second line" not in printed


def test_a_timing_worker_that_dies_mid_round_fails_its_node_with_a_clear_message():
    import multiprocessing

    from precisionflow.stages import compare_speed

    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    worker = context.Process(target=os._exit, args=(3,))  # dies as a CUDA fault would: at once, no message
    worker.start()
    child.close()
    with pytest.raises(StageError, match=r"engine side's timing process died while timing b8 \(exit code 3\)"):
        compare_speed._compare_setting(
            {"engine": (parent, worker), "fp32": (FakeSide(), None)}, "b8", {"ratio_rounds": 2, "ratio_window_s": 0.01}
        )


class FakeSide:
    """A side that always answers (the fp32 engine's worker)."""

    def send(self, message):
        self.last = message

    def recv(self):
        return 100.0


def test_a_detection_bundle_names_the_module_its_evaluations_lack_before_anything_runs(monkeypatch):
    import importlib.util

    from precisionflow.pipeline import remote

    plan = {
        "nodes": {
            "evaluate_engine/a": {"stage": "evaluate_engine", "params": {"task": "detection"}},
            "evaluate_engine/b": {"stage": "evaluate_engine", "params": {"task": "classification"}},
            "build_engine/c": {"stage": "build_engine", "params": {}},
        }
    }
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "pycocotools" else real(name))
    missing = remote.missing_modules(plan, list(plan["nodes"]))
    assert missing == {"pycocotools": ["evaluate_engine/a"]}
    assert "pycocotools (needed by 1 node(s), e.g. evaluate_engine/a): install it there" in remote.missing_text(missing)
