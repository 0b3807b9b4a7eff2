"""A no-op rerun's cost (issue 53, item 4): `precisionflow run` on a finished results folder against
a trivial Snakemake no-op of the same number of jobs, in CPU seconds (user + system of the command
and every process it started), timed in alternating pairs; the median of each side and their ratio.

    .venv/bin/python benchmarks/noop_rerun.py <finished results folder> [pairs] > benchmarks/results/noop_rerun.json

The trivial workflow: one rule per job that touches its output, all outputs present (made by a
first run that is not timed), so Snakemake plans and finds nothing to do -- what a no-op costs it."""

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).parent


def cpu_seconds(command, cwd) -> float:
    """User + system CPU seconds of `command` and its children (they are waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{command[0]} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def trivial_workflow(folder: Path, jobs: int) -> None:
    (folder / "Snakefile").write_text(
        f"rule all:\n    input: expand('out/{{i}}.txt', i=range({jobs}))\n\n"
        "rule make:\n    output: 'out/{i}.txt'\n    shell: 'touch {output}'\n"
    )
    subprocess.run([str(BIN / "snakemake"), "--cores", "1", "--quiet"], cwd=folder, check=True, capture_output=True)


def main() -> None:
    results = Path(sys.argv[1]).resolve()
    pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    jobs = len(list(results.glob("*/*/node.json")))
    ours = [str(BIN / "precisionflow"), "run", f"results_dir={results}"]
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        trivial_workflow(folder, jobs)
        theirs = [str(BIN / "snakemake"), "--cores", "1", "--quiet"]
        found = {"precisionflow": [], "snakemake": []}
        for index in range(pairs):  # alternating: each side first in turn
            order = [("precisionflow", ours, results.parent), ("snakemake", theirs, folder)]
            for name, command, cwd in order if index % 2 == 0 else reversed(order):
                found[name].append(round(cpu_seconds(command, cwd), 3))
    medians = {name: statistics.median(values) for name, values in found.items()}
    print(
        json.dumps(
            {
                "jobs": jobs,
                "cpu_seconds": found,
                "median": medians,
                "ratio": round(medians["precisionflow"] / medians["snakemake"], 2),
                "load_1min": os.getloadavg()[0],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
