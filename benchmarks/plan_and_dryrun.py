"""Plan + dry-run time of large sweeps, no-op rerun time, and jobs vs a per-point pipeline.

    .venv/bin/python benchmarks/plan_and_dryrun.py [--results DIR]

Writes benchmarks/results/plan_and_dryrun.json. The no-op rerun needs a finished default run in
DIR (make run does one).
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from precisionflow.config.compose import expand
from precisionflow.pipeline.plan import build_plan, write_plan

ROOT = Path(__file__).resolve().parents[1]


def seconds(command, cwd) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True)
    return time.perf_counter() - started


def sweep_case(seeds: int, results: Path) -> dict:
    overrides = [f"train.seed=range(0,{seeds})", f"results_dir={results}"]
    started = time.perf_counter()
    points = expand(overrides, multirun=True)
    plan = build_plan(points, str(results))
    write_plan(plan)
    plan_s = time.perf_counter() - started
    cli = [sys.executable, "-m", "precisionflow.cli", "run", "-n", "-m", *overrides]
    total_s = seconds(cli, results.parent)
    return {
        "points": len(points),
        "nodes": len(plan["nodes"]),
        "plan_seconds_in_process": round(plan_s, 3),
        "cli_plan_plus_dry_run_seconds": round(total_s, 3),
    }


def per_point_comparison() -> dict:
    points = expand(["train.epochs=2,4", "precisions=[fp32,fp16]"], multirun=True)
    ours = build_plan(points, "/tmp/unused")["nodes"]
    # A per-point pipeline (Hydra multirun launching the whole workflow once per point) runs the
    # full chain -- data, training, export, graph, engine, evaluation, report, tracking -- for
    # each of the 2 x 2 (epochs, precision) points.
    [one_point] = expand(["train.epochs=2", "precisions=[fp32]"])
    chain = len(build_plan([one_point], "/tmp/unused")["nodes"])
    trainings = sum(1 for key in ours if key.startswith("train_model/"))
    return {"dag_jobs": len(ours), "dag_trainings": trainings, "per_point_jobs": 4 * chain, "per_point_trainings": 4}


def noop_rerun(results: Path) -> dict:
    command = [sys.executable, "-m", "precisionflow.cli", "run", f"results_dir={results}"]
    runs = [seconds(command, results.parent) for _ in range(3)]
    return {"noop_rerun_seconds": [round(s, 3) for s in runs]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    args = parser.parse_args()
    scratch = ROOT / "benchmarks" / "out" / "sweep-results"
    scratch.mkdir(parents=True, exist_ok=True)
    report = {
        "sweep_100": sweep_case(5, scratch),
        "sweep_1000": sweep_case(53, scratch),
        "jobs_2_trainings_x_2_precisions": per_point_comparison(),
    }
    if any(args.results.glob("report/*/node.json")):
        report.update(noop_rerun(args.results.resolve()))
    out = ROOT / "benchmarks" / "results" / "plan_and_dryrun.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
