"""Rerun ratio: jobs Snakemake would run ÷ planned nodes with no finished output, per config key.

After one default run, each key of the identity table (tests/test_identity.py: every leaf of the
schema, flipped to another valid value) is set on the command line; the plan for it is made
and Snakemake is asked for a dry run over the finished results. The nodes that have no finished
output are the ones whose declared inputs (params, files, versions, code, upstream) changed or
that are new; the ratio is 1.00 when Snakemake would run exactly those -- no unchanged job rerun
by a file's mtime, a rule's code or params, and nothing missed.

    python benchmarks/rerun_ratio.py          # ~1 default run + ~100 dry runs
"""

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
from _common import OUT, save  # noqa: E402

from precisionflow.cli import snakemake_command  # noqa: E402
from precisionflow.config.compose import expand  # noqa: E402
from precisionflow.pipeline.plan import build_plan, write_plan  # noqa: E402
from tests.test_identity import EXPECTED, flipped, leaves  # noqa: E402


def hydra_value(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def dry_run_jobs(plan_file: Path, workdir: Path) -> int:
    done = subprocess.run(snakemake_command(plan_file, "2", True, []), cwd=workdir, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stdout[-2000:] + done.stderr[-2000:])
    match = re.search(r"^total\s+(\d+)", done.stdout, re.MULTILINE)
    jobs = int(match.group(1)) if match else 0
    return jobs - 1 if jobs else 0  # the `all` target is not a node


def missing_nodes(plan: dict) -> int:
    results = Path(plan["results_dir"])
    return sum(1 for key in plan["nodes"] if not (results / key / "node.json").is_file())


def main() -> None:
    workdir = OUT / "rerun_ratio"
    results = workdir / "results"
    workdir.mkdir(parents=True, exist_ok=True)
    if not list(results.glob("report/*/node.json")):
        subprocess.run(
            [sys.executable, "-m", "precisionflow.cli", "run", f"results_dir={results}"],
            cwd=workdir,
            check=True,
            capture_output=True,
        )
    base = dict(leaves(expand([])[0]))
    rows = []
    for key in sorted(k for k, v in EXPECTED.items() if v is not None and k != "results_dir"):
        override = f"{key}={hydra_value(flipped(key, base[key]))}"
        points = expand([override, f"results_dir={results}"])
        plan = build_plan(points, str(results), [override])
        expected = missing_nodes(plan)
        jobs = dry_run_jobs(write_plan(plan), workdir)
        rows.append(
            {
                "override": override,
                "nodes_without_output": expected,
                "snakemake_jobs": jobs,
                "ratio": round(jobs / expected, 3) if expected else (1.0 if jobs == 0 else float("inf")),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    overall = sum(r["snakemake_jobs"] for r in rows) / max(sum(r["nodes_without_output"] for r in rows), 1)
    save(
        "rerun_ratio.json",
        {
            "keys": len(rows),
            "all_ratios_one": all(r["ratio"] == 1.0 for r in rows),
            "overall_ratio": round(overall, 4),
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
