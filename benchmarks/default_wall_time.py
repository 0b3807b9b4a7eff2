"""Wall time of the embedded default experiment, before and after a change, in alternating rounds.

    python benchmarks/default_wall_time.py BEFORE_COMMIT [--rounds 2]

Checks BEFORE_COMMIT out into a git worktree and runs `precisionflow run` from a fresh results
folder with that tree's code, then with this tree's, alternately (same interpreter and packages:
PYTHONPATH selects the code; Snakemake's jobs inherit it). Writes
benchmarks/results/default_wall_time.json. Run it alone on the machine.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_default(tree: Path, results: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    command = [sys.executable, "-m", "precisionflow.cli", "run", f"results_dir={results}"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):  # 1 = finished with a budget verdict
        raise SystemExit(f"{tree}: run failed\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    after_commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="pf-before-") as scratch:
        before_tree = Path(scratch) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(before_tree), args.before], cwd=ROOT, check=True, capture_output=True
        )
        try:
            times = {"before": [], "after": []}
            for round_index in range(args.rounds):
                for side, tree in (("before", before_tree), ("after", ROOT)):
                    seconds = run_default(tree, Path(scratch) / f"results-{side}-{round_index}")
                    times[side].append(round(seconds, 1))
                    print(f"round {round_index + 1}: {side} {seconds:.1f} s", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before_tree)], cwd=ROOT, capture_output=True)
    medians = {side: statistics.median(values) for side, values in times.items()}
    result = {
        "before_commit": args.before,
        "after_commit": after_commit,
        "seconds": times,
        "median_seconds": medians,
        "after_over_before": round(medians["after"] / medians["before"], 3),
        "loadavg_at_end": os.getloadavg()[0],
    }
    out = ROOT / "benchmarks" / "results" / "default_wall_time.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
