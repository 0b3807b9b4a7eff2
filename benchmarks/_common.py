"""Helpers shared by the benchmark scripts: run a sweep through the CLI, read node summaries."""

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
RESULTS = ROOT / "benchmarks" / "results"


# The shortest timing a benchmark about accuracy or graphs can use: its speed figures are not the point.
QUICK_TIMING = [
    "evaluate.duration_s=0.05",
    "evaluate.warmup_s=0.01",
    "evaluate.repeats=2",
    "evaluate.ratio_rounds=2",
    "evaluate.ratio_window_s=0.02",
    "evaluate.timing_batch_sizes=[1]",
    "evaluate.streams=[]",
    "evaluate.serving.enabled=false",
    "evaluate.accept_undecided=true",
    "tracking.enabled=false",
]


def shapes_folder(name: str = "shapes64", per_class: int = 150, size: int = 64) -> Path:
    """A generated shapes image folder under benchmarks/out (benchmarks/make_shapes.py), made once."""
    folder = OUT / name
    if not folder.exists():
        command = [sys.executable, str(ROOT / "benchmarks" / "make_shapes.py"), str(folder)]
        subprocess.run([*command, "--per-class", str(per_class), "--size", str(size)], check=True)
    return folder


def run_sweep(results: Path, overrides: List[str]) -> float:
    """Run `precisionflow run -m` into `results`; return its wall time in seconds."""
    command = [sys.executable, "-m", "precisionflow.cli", "run", "-m", f"results_dir={results}", *overrides]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    # Exit 1 with a budget verdict means the run finished and an engine broke its budget (or the
    # test split could not tell): its
    # figures are what the benchmark reads (the verdict is part of what it reports).
    if done.returncode == 1 and ("broke it" in done.stdout or "undecided" in done.stdout):
        print(done.stdout[done.stdout.index("Budgets (") :], flush=True)
    elif done.returncode != 0:
        raise SystemExit(f"sweep failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def nodes(results: Path, stage: str) -> List[Dict]:
    return [json.loads(p.read_text()) for p in sorted(results.glob(f"{stage}/*/node.json"))]


def newest_summary(results: Path) -> str:
    report = max(results.glob("report/*/summary.csv"), key=lambda p: p.stat().st_mtime)
    return report.read_text()


def save(name: str, data) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / name).write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(json.dumps(data, indent=2, default=str))
