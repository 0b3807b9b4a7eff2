"""Issue 30: does the line under the table change its winner from one timing to the next?

The default experiment (`precisionflow run`, nothing overridden) once, then its side-by-side
ratio jobs (compare_speed) and the report timed again: twice on a quiet machine and twice while
two busy-loop processes load both cores. Each time the headline lines (summary.txt's lines after
the table) and each engine's speed-up at bmax with its interval are kept.

    .venv/bin/python benchmarks/headline_stability.py
        -> benchmarks/results/headline_stability.json
"""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, ROOT, save  # noqa: E402

BUSY = "while True: pass"


def run(results: Path) -> float:
    command = [sys.executable, "-m", "precisionflow.cli", "run", f"results_dir={results}", "tracking.enabled=false"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(done.stdout[-3000:] + done.stderr[-3000:])
    return time.perf_counter() - started


def retime(results: Path) -> None:
    """Forget the ratio jobs and the report so the next run times the ratios again (nothing else reruns)."""
    for stage in ("compare_speed", "report"):
        for folder in results.glob(f"{stage}/*"):
            shutil.rmtree(folder)


def table(results: Path):
    report = max(results.glob("report/*/summary.txt"), key=lambda path: path.stat().st_mtime)
    verdicts = json.loads((report.parent / "verdicts.json").read_text())
    headline = [line for line in report.read_text().splitlines() if line.startswith("local:")]
    speeds = {
        f"{entry['precision']} ({entry['ran']})": entry.get("speed")
        or ("fp32 kernels" if entry.get("ran_reference_kernels") else None)
        for entry in verdicts
        if entry["precision"] != "fp32"
    }
    return {"headline": headline, "x_fp32_bmax_with_95_interval": speeds}


def main() -> None:
    results = OUT / "headline-stability"
    shutil.rmtree(results, ignore_errors=True)
    found = {"first_run_s": round(run(results), 1), "timings": []}
    for load in ("quiet", "quiet", "loaded", "loaded"):
        retime(results)
        busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2 if load == "loaded" else 0)]
        try:
            seconds = run(results)
        finally:
            for process in busy:
                process.kill()
        found["timings"].append({"machine": load, "seconds": round(seconds, 1), **table(results)})
        print(json.dumps(found["timings"][-1], indent=1), flush=True)
    save("headline_stability.json", found)


if __name__ == "__main__":
    main()
