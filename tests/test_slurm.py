"""The workflow on a real SLURM scheduler (Debian's slurm-wlm on this machine, tools/local_slurm.sh):
jobs are SLURM jobs, GPU targets' engine and timing jobs ask for their GPU and partition while
the others do not, MLflow logging stays on the submitting host, the nodes are the ones a local
plan names, and a params change resubmits exactly the affected jobs. Slow; .ci/run installs Slurm."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
SUBMITTED = re.compile(r"submitted with SLURM jobid (\d+) \(log: \S*/slurm_logs/(rule|group)_(\w+)/(?:([^/]+)/)?\d+\.log\)")


def slurm_up() -> bool:
    return shutil.which("scontrol") is not None and subprocess.run(["scontrol", "ping"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def cluster():
    if shutil.which("slurmctld") is None:
        pytest.skip("Slurm is not installed (apt-get install slurm-wlm munge; .ci/run does)")
    if os.geteuid() != 0:
        pytest.skip("a local SLURM cluster needs root to start its daemons")
    started = False
    if not slurm_up():
        subprocess.run([str(ROOT / "tools" / "local_slurm.sh"), "start"], check=True, timeout=120)
        started = True
    yield
    if started:
        subprocess.run([str(ROOT / "tools" / "local_slurm.sh"), "stop"], check=False)


# One engine per target, and TensorFlow timed on fakegpu only: what this checks is where the scheduler
# puts each kind of job (the tiny experiment's full run is benchmarks/slurm_overhead.py's).
SMALLER = ["precisions=[fp32]", "target_defs.local.framework=false"]


def run_on_slurm(results: Path, *overrides: str) -> str:
    command = [
        sys.executable,
        "-m",
        "precisionflow.cli",
        "run",
        "--profile",
        "slurm",
        "--cores",
        "2",
        f"results_dir={results}",
        "experiment=slurm_smoke",
        *SMALLER,
        *overrides,
        # the users' profile, polling sooner after a job ends (1 s, not its 5): this experiment's jobs
        # take seconds, and the plugin's next check after a miss comes 10 s later still
        "--",
        "--slurm-init-seconds-before-status-checks",
        "1",
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=results.parent, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout + done.stderr


def submissions(output: str):
    """[(SLURM job id, rule or group name, node id or '')] of one run."""
    return [(int(jobid), name, node or "") for jobid, _, name, node in SUBMITTED.findall(output)]


def job_info(jobid: int) -> str:
    return subprocess.run(["scontrol", "show", "job", str(jobid)], capture_output=True, text=True, check=True).stdout


def test_the_workflow_runs_as_slurm_jobs_with_each_target_s_resources(cluster, tmp_path):
    results = tmp_path / "results"
    output = run_on_slurm(results)
    jobs = submissions(output)
    assert jobs, output[-3000:]
    gpu_jobs = {(name, node) for jobid, name, node in jobs if "gres:gpu" in job_info(jobid)}
    expected = {
        (name, node)
        for _, name, node in jobs
        if name in ("build_engine", "evaluate_engine", "compare_speed", "benchmark_framework") and "fakegpu" in node
    }
    assert gpu_jobs == expected and len(expected) == 4  # its engine, evaluation and ratio job, and the TF baseline
    for jobid, name, node in jobs:
        info = job_info(jobid)
        assert ("Partition=gpu" in info) == ((name, node) in expected), (name, node)
        if name in ("evaluate_engine", "compare_speed", "benchmark_framework"):
            assert "OverSubscribe=NO" in info  # timing jobs hold their node alone (--exclusive)
    assert any(name.startswith("graphs_") for _, name, _ in jobs)  # export + graph conversions: one submission
    full_log = Path(re.search(r"Snakemake's full output: (\S+)", output).group(1)).read_text()
    assert "localrule track_mlflow" in full_log and "track_mlflow" not in {name for _, name, _ in jobs}  # on the submit host

    # The same nodes a plan made here names (ids do not depend on where jobs run).
    plan = subprocess.run(
        [sys.executable, "-m", "precisionflow.cli", "plan", f"results_dir={results}", "experiment=slurm_smoke", *SMALLER],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    planned = set(re.findall(r"^(\w+/[^\s/]+-[0-9a-f]{12})$", plan, re.MULTILINE))
    finished = {f"{p.parent.parent.name}/{p.parent.name}" for p in results.glob("*/*/node.json")}
    assert planned and planned == finished

    # An evaluation-only change resubmits the evaluations and the report, nothing else.
    again = submissions(run_on_slurm(results, "evaluate.batch_size=32"))
    assert sorted(name for _, name, _ in again) == ["evaluate_engine"] * 2 + ["report"]
