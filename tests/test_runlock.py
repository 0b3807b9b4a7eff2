"""A run killed with SIGKILL mid-way is resumed by a plain `precisionflow run` (stale locks and
staging folders cleared, half-made outputs rerun, nothing duplicated in MLflow); a second run on a
live run's folder fails at once with a clear message."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from precisionflow.pipeline import runlock

from tests.conftest import FAST_TIMING

TINY = [
    "model=small_cnn",
    "int8.simulate_tensorrt=false",
    "dataset.max_samples=400",
    "train.epochs=20",  # long enough to be killed mid-training (at epoch 2), short for the runs that finish it
    "precisions=[fp32,fp16]",
    *FAST_TIMING,
    "evaluate.accept_undecided=true",
]  # 100 test images decide no default budget: not what is tested here


def test_a_second_run_on_a_live_run_s_folder_fails_at_once(tmp_path):
    with runlock.exclusive_run(tmp_path):
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                "from precisionflow.pipeline import runlock; import sys\nwith runlock.exclusive_run(sys.argv[1]): pass",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
        )
        assert child.returncode != 0 and "Another precisionflow run is using" in child.stderr
        assert f"pid {os.getpid()}" in child.stderr
    with runlock.exclusive_run(tmp_path):  # released when the holder is done (or dies)
        pass


def test_recovery_stops_a_live_job_of_the_dead_run_and_leaves_others_alone(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    orphan = subprocess.Popen(["sleep", "300"], env={**os.environ, **{runlock.RESULTS_VARIABLE: str(results.resolve())}})
    other = subprocess.Popen(["sleep", "300"], env={**os.environ, **{runlock.RESULTS_VARIABLE: str(tmp_path / "elsewhere")}})
    try:
        notes = runlock.recover(results, tmp_path)
        assert notes == [f"stopped 1 job process(es) a run that died left running (pids [{orphan.pid}])"]
        assert orphan.wait(5) is not None and other.poll() is None  # ended (psutil reaped it), the other runs on
    finally:
        other.kill()
        orphan.kill()


def test_what_a_dead_run_left_is_cleared(tmp_path):
    results, workdir = tmp_path / "results", tmp_path
    (results / "train_model" / ".small-abc.tmp-x1").mkdir(parents=True)
    (workdir / ".snakemake" / "locks").mkdir(parents=True)
    (workdir / ".snakemake" / "locks" / "0.input.lock").write_text("x")
    notes = runlock.recover(results, workdir)
    assert len(notes) == 2 and not list(results.glob("*/.*.tmp-*"))
    assert not list((workdir / ".snakemake" / "locks").iterdir())
    assert runlock.recover(results, workdir) == []


def start_run(results: Path):
    command = [sys.executable, "-m", "precisionflow.cli", "run", "--cores", "2", f"results_dir={results}", *TINY]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=results.parent, start_new_session=True
    )


@pytest.mark.slow
def test_kill_9_mid_training_then_a_plain_run_completes(tmp_path):
    import mlflow

    results = tmp_path / "results"
    first = start_run(results)
    deadline = time.time() + 300
    while time.time() < deadline:  # wait until training is under way
        logs = list(results.glob("logs/train_model/*.log"))
        if logs and "Epoch 2" in logs[0].read_text(errors="replace"):
            break
        time.sleep(0.5)
    else:
        pytest.fail("training never started")
    # the live run is respected (checked in-process: a second CLI run's planning outlasted the training)
    with pytest.raises(runlock.RunLockedError, match="Another precisionflow run is using"):
        with runlock.exclusive_run(results):
            pass
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert not list(results.glob("train_model/*/node.json"))  # killed before training finished

    resumed = subprocess.run(
        [sys.executable, "-m", "precisionflow.cli", "run", "--cores", "2", f"results_dir={results}", *TINY],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "cleared the directory lock" in resumed.stdout
    assert not list(results.glob("*/.*.tmp-*"))
    mlflow.set_tracking_uri(f"sqlite:///{results / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["precisionflow"])
    nodes = runs["tags.precisionflow.node"].dropna()
    assert len(nodes) == len(set(nodes)) > 0  # no duplicated runs


def _unfinished_job_of(results: Path, stage: str) -> bool:
    """A job of `stage` has started (Snakemake opened its log) and not finished (no node.json)."""
    started = {log.stem for log in results.glob(f"logs/{stage}/*.log")}
    finished = {node.parent.name for node in results.glob(f"{stage}/*/node.json")}
    return bool(started - finished)


STAGES_KILLED = ("export_onnx", "calibrate", "build_engine", "evaluate_engine", "track_mlflow")  # in the order they run


@pytest.mark.slow
def test_kill_9_at_each_stage_in_turn_then_a_plain_run_completes(tmp_path):
    """Each kind of job killed mid-way (its process group, SIGKILL, as a crash or an OOM kill would),
    one stage after another on the same results folder -- each run resumes what the last one left --
    then a plain run finishes everything: nothing half-written is kept, MLflow has no duplicated or
    orphaned runs and no metric logged twice. (One folder for all five kills: a fresh folder per stage
    trained the same model five times and cost the suite six minutes.)"""
    import mlflow

    results = tmp_path / "results"
    overrides = [o for o in TINY if not o.startswith("train.epochs")] + [
        "train.epochs=2",
        "precisions=[fp32,fp16,int8]",
        "calibration.num_samples=128",
    ]
    command = [sys.executable, "-m", "precisionflow.cli", "run", "--cores", "2", f"results_dir={results}", *overrides]
    for stage in STAGES_KILLED:
        first = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path, start_new_session=True
        )
        deadline = time.time() + 300
        while time.time() < deadline and first.poll() is None and not _unfinished_job_of(results, stage):
            time.sleep(0.02)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        assert _unfinished_job_of(results, stage), f"no {stage} job was running when the run was killed"

    resumed = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "planned jobs executed" in resumed.stdout and not list(results.glob("*/.*.tmp-*"))
    assert not any(_unfinished_job_of(results, stage) for stage in STAGES_KILLED)
    mlflow.set_tracking_uri(f"sqlite:///{results / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["precisionflow"])
    nodes = runs["tags.precisionflow.node"].dropna()
    assert len(nodes) == len(set(nodes)) and len(runs[runs["tags.precision"].notna()]) == 3  # each node's run once
    parents = runs["tags.mlflow.parentRunId"].dropna()
    assert set(parents) <= set(runs["run_id"])  # no orphaned child
    child = runs[runs["tags.precision"].notna()].iloc[0]["run_id"]
    assert len(mlflow.MlflowClient().get_metric_history(child, "agreement")) == 1  # logged once


@pytest.mark.slow
def test_two_sibling_results_folders_run_at_the_same_time(tmp_path):
    """results_dir=/data/a and /data/b once shared one .snakemake (Snakemake ran in their parent)
    and the second run was refused; each folder now holds its own."""
    small = [
        "dataset.max_samples=300",
        "train.epochs=1",
        "precisions=[fp32]",
        "tracking.enabled=false",
        "target_defs.local.framework=false",
        *TINY[3:],
    ]
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "precisionflow.cli",
                "run",
                "--cores",
                "1",
                f"results_dir={tmp_path / name}",
                *small,
                f"train.seed={seed}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=tmp_path,
        )
        for seed, name in enumerate(["a", "b"])
    ]
    outputs = [run.communicate(timeout=600)[0] for run in runs]
    for run, output in zip(runs, outputs, strict=True):
        assert run.returncode == 0, output[-3000:]
        assert "planned jobs executed" in output and "running in" not in output
    assert (tmp_path / "a" / ".snakemake").is_dir() and (tmp_path / "b" / ".snakemake").is_dir()
    assert not (tmp_path / ".snakemake").exists()


def describe(process) -> str:
    """A process's command line for the log; one that died meanwhile (a zombie, or gone) says so."""
    import psutil

    try:
        return " ".join(process.cmdline())[:80]
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied) as gone:
        return f"({type(gone).__name__})"


@pytest.mark.slow
def test_killing_only_the_run_and_snakemake_leaves_no_job_racing_the_rerun(tmp_path):
    """kill -9 of `precisionflow run` and Snakemake alone (not their jobs): the training job lives
    on after them; the next run completes with one training node and no job of the dead run alive."""
    import psutil

    results = tmp_path / "results"
    # the console is a file here, as a terminal would be: a job's output outlives Snakemake (no pipe to break)
    console = open(tmp_path / "first-run.txt", "w")  # noqa: SIM115 -- held for the run's lifetime
    command = [sys.executable, "-m", "precisionflow.cli", "run", "--cores", "2", f"results_dir={results}", *TINY]
    first = subprocess.Popen(command, stdout=console, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and not any(
        "Epoch 2" in log.read_text(errors="replace") for log in results.glob("logs/train_model/*.log")
    ):
        time.sleep(0.5)
    parents = [first.pid] + [p.pid for p in psutil.Process(first.pid).children() if "snakemake" in " ".join(p.cmdline())]
    assert len(parents) == 2, parents
    for pid in parents:
        os.kill(pid, signal.SIGKILL)
    first.wait()
    time.sleep(2)
    # The jobs may outlive them (until their next line of output breaks the pipe to the dead run):
    # whatever is left, the rerun must stop before it touches a folder.
    left = runlock.orphans_of(results)
    print("alive before the rerun:", [(p.pid, describe(p)) for p in left])

    resumed = subprocess.run(
        [sys.executable, "-m", "precisionflow.cli", "run", "--cores", "2", f"results_dir={results}", *TINY],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    console.close()
    print(resumed.stdout[:2000])  # the log the closing note quotes
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    # Here the orphans die on their own within seconds (their output went to Snakemake, now gone:
    # the next epoch's line breaks the pipe); a job that outlives that is stopped by the rerun's
    # recovery before it touches a folder (test_recovery_stops_a_live_job_of_the_dead_run...).
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in left)
    assert len(list(results.glob("train_model/*/node.json"))) == 1


@pytest.mark.slow
def test_sigterm_to_the_run_stops_snakemake_and_every_job(tmp_path):
    """A plain `kill` (SIGTERM, what CI and `timeout` send) of `precisionflow run` alone: Snakemake
    and its running training job once lived on under PID 1; now none of them outlives the run."""
    results = tmp_path / "results"
    first = start_run(results)
    deadline = time.time() + 300
    while time.time() < deadline and not any(
        "Epoch 2" in log.read_text(errors="replace") for log in results.glob("logs/train_model/*.log")
    ):
        time.sleep(0.5)
    assert runlock.orphans_of(results), "no job of the run was alive to stop"
    os.kill(first.pid, signal.SIGTERM)
    output, _ = first.communicate(timeout=60)
    assert first.returncode == 128 + signal.SIGTERM, output[-2000:]
    assert "SIGTERM: stopping Snakemake and its jobs" in output
    assert [p for p in runlock.orphans_of(results) if p.status() != "zombie"] == []
    assert not list(results.glob("train_model/*/node.json"))


def test_a_job_whose_run_is_gone_does_not_publish(tmp_path, monkeypatch):
    """A job left alone after its controller died once published its node, so its work ran twice."""
    import platform

    from precisionflow.errors import StageError
    from precisionflow.nodeio import staged_node_dir, write_json_atomic

    gone = subprocess.Popen(["true"])
    gone.wait()
    monkeypatch.setenv(runlock.CONTROLLER_VARIABLE, f"{platform.node()}:{gone.pid}:1.000")
    with pytest.raises(StageError, match="is gone"):
        with staged_node_dir(tmp_path / "train_model" / "abc") as folder:
            write_json_atomic(folder / "node.json", {"stage": "train_model"})
    assert not (tmp_path / "train_model" / "abc").exists() and not list((tmp_path / "train_model").iterdir())
    monkeypatch.setenv(runlock.CONTROLLER_VARIABLE, runlock.controller_id())  # a live controller: published
    with staged_node_dir(tmp_path / "train_model" / "abc") as folder:
        write_json_atomic(folder / "node.json", {"stage": "train_model"})
    assert (tmp_path / "train_model" / "abc" / "node.json").is_file()
