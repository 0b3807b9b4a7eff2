"""How far the table's ratios move between identical runs of the default experiment.

Runs the default experiment `--runs` times from scratch (empty results folder each time), then once
more while a second process keeps one core busy (numpy work, the whole run long), and collects
every ratio of the table (x_fp32_*, x_tf_*) from each run's compare_speed nodes. Reports, per
engine and ratio, each run's median and the spread across runs: max/min - 1.
Writes benchmarks/results/ratio_stability.json (and the four summary tables). The previous
version's tables (ratio_stability_before_run*.txt: three `make run`s of commit c094483, the first
of them the `make run` that also set up nothing but ran everything at once) give the spread
before, parsed the same way.

    python benchmarks/ratio_stability.py [--runs 3]
"""

import argparse
import json
import multiprocessing
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, RESULTS, save  # noqa: E402

from precisionflow.reporting.compare import ratio_values  # noqa: E402


def busy(stop) -> None:
    import numpy as np

    values = np.random.default_rng(0).random(1_000_000)
    while not stop.is_set():
        np.sqrt(values).sum()


def run_default(results: Path) -> float:
    import subprocess

    shutil.rmtree(results, ignore_errors=True)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "precisionflow.cli", "run", f"results_dir={results}"],
        cwd=results.parent,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(done.stdout[-3000:] + done.stderr[-3000:])
    return time.perf_counter() - started


def ratios(results: Path) -> dict:
    """{engine precision: {ratio column: median}} of one run."""
    found = {}
    for folder in sorted(results.glob("compare_speed/*")):
        precision = folder.name.split("-local-")[0]
        metrics = json.loads((folder / "metrics.json").read_text())
        found[precision] = {column: round(stats["median"], 4) for column, stats in ratio_values(metrics).items()}
    return found


def spread(runs: list) -> dict:
    """Per engine and ratio: the values across runs and max/min - 1 in percent."""
    table = {}
    for precision in runs[0]["ratios"]:
        for column in runs[0]["ratios"][precision]:
            values = [run["ratios"][precision][column] for run in runs]
            table[f"{precision} {column}"] = {"values": values, "spread_pct": round(100 * (max(values) / min(values) - 1), 1)}
    return table


def parse_table(text: str) -> list:
    """Rows of a printed summary table (columns located by the dashes line)."""
    header, dashes, *lines = text.splitlines()
    spans, start = [], 0
    for part in dashes.split("  "):
        if part:
            spans.append((dashes.index(part, start), dashes.index(part, start) + len(part)))
            start = spans[-1][1]
    names = [header[a:b].strip() for a, b in spans]
    return [{name: line[a:b].strip() for name, (a, b) in zip(names, spans, strict=True)} for line in lines if line.strip()]


def before_ratios(text: str) -> dict:
    """The previous version's table: x_tf_* from separate jobs, and the precision-vs-fp32 ratios a
    reader had to form by dividing two engines' figures (taken in different jobs)."""
    rows = {row["precision"]: row for row in parse_table(text)}
    found = {}
    for precision, row in rows.items():
        if precision == "tensorflow":
            continue
        found[precision] = {column: float(row[column]) for column in ("x_tf_b1", "x_tf_bmax", "x_tf_streams")}
        if precision != "fp32":
            for column, sps in (("x_fp32_b1", "sps_b1"), ("x_fp32_bmax", "sps_bmax"), ("x_fp32_streams", "sps_streams")):
                found[precision][column] = round(float(row[sps]) / float(rows["fp32"][sps]), 4)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    workdir = OUT / "ratio_stability"
    workdir.mkdir(parents=True, exist_ok=True)
    runs = []
    for index in range(args.runs + 1):
        loaded = index == args.runs
        stop = multiprocessing.Event()
        loader = multiprocessing.Process(target=busy, args=(stop,)) if loaded else None
        if loader:
            loader.start()
        try:
            seconds = run_default(workdir / "results")
        finally:
            if loader:
                stop.set()
                loader.join()
        summary = max((workdir / "results").glob("report/*/summary.txt"))
        name = f"ratio_stability_run{index + 1}{'_loaded' if loaded else ''}.txt"
        (RESULTS / name).write_text(summary.read_text())
        runs.append({"run": index + 1, "loaded": loaded, "wall_s": round(seconds, 1), "ratios": ratios(workdir / "results")})
    quiet = [run for run in runs if not run["loaded"]]
    before = [
        {"ratios": before_ratios(path.read_text()), "table": path.name}
        for path in sorted(RESULTS.glob("ratio_stability_before_run*.txt"))
    ]
    save(
        "ratio_stability.json",
        {
            "runs": runs,
            "spread_quiet_runs": spread(quiet),
            "spread_all_runs": spread(runs),
            "before": {"runs": before, "spread": spread(before) if before else {}},
        },
    )


if __name__ == "__main__":
    main()
