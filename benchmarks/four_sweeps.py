"""Every sweep reads itself (docs/getting-started.md, "Sweeps into one results folder"): the four
sweeps a user runs from the docs, into one results folder, at small sizes, then read everywhere a
user reads -- the console, `compare`, `plan --why`, and MLflow's runs view and trade-off chart in
headless Chromium at 1400x900 (a real `mlflow server`).

    python benchmarks/four_sweeps.py            # ~15 min on 2 cores

Writes benchmarks/results/four_sweeps.json (per view: the rows' names and whether they are distinct,
compare's column set per sweep, the chart's points against the engine runs) and
benchmarks/results/four_sweeps_console.txt; the screenshots go to docs/images/.
"""

import json
import os
import re
import signal
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, RESULTS, ROOT  # noqa: E402

sys.path.insert(0, str(ROOT))
from tests.conftest import start_mlflow_server, wait_for_mlflow  # noqa: E402
from tests.test_end_to_end import TINY  # noqa: E402 -- the small sizes the end-to-end tests run

SMALL = [o for o in TINY if not o.startswith(("precisions=", "calibration"))]
SWEEPS = {  # name: (overrides, multirun)
    "calibration": (["calibration=entropy,minmax", "precisions=[fp32,int8]"], True),
    "num_samples": (["calibration.num_samples=128,256", "precisions=[fp32,int8]"], True),
    "epochs": (["train.epochs=2,4", "precisions=[fp32,fp16]"], True),
    "n64": (["calibration.num_samples=64", "precisions=[fp32,int8]"], False),
}
IMAGES = ROOT / "docs" / "images"


def cli(*args: str, check_exit=(0, 1)) -> str:
    done = subprocess.run([sys.executable, "-m", "precisionflow.cli", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode not in check_exit:
        raise SystemExit(f"precisionflow {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


ROW = re.compile(r"^(fp32_twin|fp32|fp16|bf16|int8\w*|tensorflow)\s")


def table_rows(console: str) -> list:
    """The console table's rows as "precision | variant", every block (the model block's heading too)."""
    rows, header, model = [], None, ""
    for line in console.splitlines():
        if line.startswith("model:"):
            model = line.split()[1]
        elif line.startswith("precision "):
            header = line
        elif header and ROW.match(line):
            variant = line[header.index("variant") :].split("  ")[0].strip()
            rows.append(f"{model} | {ROW.match(line).group(1)} | {variant}")
    return rows


def compare_rows(table: str) -> list:
    """compare's rows as 'precision | model | variant | target' (what names a row)."""
    lines = [line for line in table.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[2:]:
        cells = dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        rows.append(" | ".join(cells.get(name, "") for name in ("precision", "model", "variant", "target")))
    return rows


def chromium(flags: list, url: str, budget_ms: int, screenshot: Path = None) -> str:
    command = [*flags, f"--virtual-time-budget={budget_ms}"]
    dom = subprocess.run([*command, "--dump-dom", url], capture_output=True, text=True, timeout=300).stdout
    if screenshot:
        subprocess.run([*command, f"--screenshot={screenshot}", url], capture_output=True, timeout=300)
    return dom


def mlflow_views(results: Path, runs_link: str, chart_link: str) -> dict:
    """The runs view and the chart at 1400x900: screenshots, and the chart's points."""
    server, base = start_mlflow_server(results / "mlflow.db")
    profile = OUT / "four_sweeps" / "chromium"
    flags = [shutil.which("chromium"), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    flags += ["--disable-background-networking", f"--user-data-dir={profile}", "--window-size=1400,900"]
    try:
        wait_for_mlflow(base)
        runs_url, chart_url = (link.replace("http://127.0.0.1:5000", base) for link in (runs_link, chart_link))
        chromium(flags, runs_url, 60000, IMAGES / "sweeps_mlflow_runs_1400px.png")
        chart = chromium(flags, chart_url, 90000, IMAGES / "sweeps_mlflow_chart_1400px.png")
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and its workers (their own session)
        server.wait(30)
    heading = re.search(r"precisionflow: accuracy change[^<]*", chart)
    scatter = chart[chart.index("precisionflow: accuracy change") :] if heading else ""
    scatter = scatter[: scatter.index('class="g-ytitle"')] if 'class="g-ytitle"' in scatter else scatter
    return {"chart_heading": heading.group(0) if heading else None, "chart_points": len(re.findall(r'class="point[ "]', scatter))}


def engine_runs(results: Path) -> dict:
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{results / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["precisionflow"], filter_string="tags.precision LIKE '%'", max_results=5000)
    names = list(runs["tags.mlflow.runName"])
    return {
        "engine_runs": len(runs),
        "with_accuracy_change": int(runs["metrics.accuracy_change_points"].notna().sum()),
        "run_names": sorted(names),
        "run_names_distinct": len(set(names)) == len(names),
    }


def main() -> None:
    results = OUT / "four_sweeps" / "results"
    shutil.rmtree(results.parent, ignore_errors=True)
    results.mkdir(parents=True)
    found, console, printed = {"sweeps": {}}, [], ""
    for name, (overrides, multirun) in SWEEPS.items():
        if name == "n64":  # before it runs: what it would rerun, each node against its lineage's own
            why = cli("plan", "--why", f"results_dir={results}", *SMALL, *overrides)
            console += [f"$ precisionflow plan --why {' '.join(overrides)}", why]
            found["plan_why_calibrate"] = [line.strip() for line in why.splitlines() if "calibrat" in line]
        started = time.perf_counter()
        printed = cli("run", *(["-m"] if multirun else []), f"results_dir={results}", *SMALL, *overrides)
        compared = cli("compare", "--uri", f"sqlite:///{results / 'mlflow.db'}")
        header = compared.splitlines()[0]
        rows = table_rows(printed)
        found["sweeps"][name] = {
            "overrides": overrides,
            "seconds": round(time.perf_counter() - started),
            "console_rows": rows,
            "console_rows_distinct": len(set(rows)) == len(rows),
            "compare_columns": [cell.strip() for cell in header.strip("|").split("|")],
        }
        console += [
            f"$ precisionflow run {'-m ' if multirun else ''}{' '.join(overrides)}",
            printed,
            "$ precisionflow compare",
            compared,
        ]
    found["compare_rows"] = compare_rows(compared)
    found["compare_rows_distinct"] = len(set(found["compare_rows"])) == len(found["compare_rows"])
    # the same columns in every compare, the model column added once the store holds several models
    columns = {tuple(c for c in sweep["compare_columns"] if c != "model") for sweep in found["sweeps"].values()}
    found["compare_same_columns_every_sweep"] = len(columns) == 1
    links = {key: re.search(rf"^MLflow {key}:\s+(\S+)", printed, re.MULTILINE) for key in ("runs", "chart")}
    found["mlflow"] = {**engine_runs(results), **mlflow_views(results, links["runs"].group(1), links["chart"].group(1))}
    (RESULTS / "four_sweeps_console.txt").write_text("\n".join(console) + "\n")
    (RESULTS / "four_sweeps.json").write_text(json.dumps(found, indent=1) + "\n")
    print(json.dumps({k: v for k, v in found.items() if k != "sweeps"}, indent=1))


if __name__ == "__main__":
    main()
