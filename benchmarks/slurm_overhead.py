"""The tiny experiment (experiment=slurm_smoke) locally and on the local SLURM cluster, from empty
results folders: wall time, jobs, SLURM submissions with and without grouping the light graph
jobs, and the scheduling overhead per job. Needs tools/local_slurm.sh start (root).

    python benchmarks/slurm_overhead.py > benchmarks/results/slurm_overhead.json
"""

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUBMITTED = re.compile(r"submitted with SLURM jobid \d+")
NO_GROUPS = ["--groups", "export_onnx=export", "calibrate=calibration", "quantize_onnx=graph"]


def timed_run(profile: str, extra=()) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        results = Path(folder) / "results"
        command = [
            sys.executable,
            "-m",
            "precisionflow.cli",
            "run",
            "--profile",
            profile,
            "--cores",
            "2",
            f"results_dir={results}",
            "experiment=slurm_smoke",
        ] + (["--", *extra] if extra else [])
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, cwd=folder)
        wall = time.perf_counter() - started
        output = done.stdout + done.stderr
        if done.returncode != 0:
            raise SystemExit(output[-3000:])
        jobs = int(re.search(r"(\d+) of \d+ planned jobs executed", output).group(1))
        return {
            "profile": profile,
            "extra": list(extra),
            "wall_s": round(wall, 1),
            "jobs": jobs,
            "slurm_submissions": len(SUBMITTED.findall(output)),
        }


def main() -> None:
    runs = [timed_run("local"), timed_run("slurm"), timed_run("slurm", NO_GROUPS)]
    local, grouped = runs[0], runs[1]
    report = {
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "runs": runs,
        "overhead_per_job_s": round((grouped["wall_s"] - local["wall_s"]) / grouped["jobs"], 2),
        "note": "one 2-core machine as the whole cluster: SLURM jobs queue behind each other; "
        "overhead = (SLURM wall - local wall) / jobs, grouped run",
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
