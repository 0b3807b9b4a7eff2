"""Issue 40 on this CPU: does the Server ratio to fp32 hold from one run to the next when the two
sides' searches take turns? The default experiment's built engines (a results folder of `make run`)
under the default's CPU serving settings, each engine against the fp32 engine two ways, alternating:
"one after the other" (the engine's whole side, then fp32's: the serve stage before) and "in turns"
(serve_engine.serve_sides: each side's search 1, then each side's search 2). Each row is one serve
job's Server ratio, formed by serve_engine.server_ratio; the question is whether rows of the same
pair and way agree (their intervals overlap).

    .venv/bin/python benchmarks/serving_ratio_turns.py RESULTS_DIR FP32_ENGINE ENGINE [ENGINE ...]
        -> $OUT (default benchmarks/results/serving_ratio_turns.json); ROUNDS (default 3)
"""

import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from serving_cpu_ratio import BASE, load_average, written  # noqa: E402  (the default's CPU settings)

ROUNDS = int(os.environ.get("ROUNDS", "3"))
WAYS = ("one after the other", "in turns")


def served(way: str, engine, fp32, settings, logs: Path):
    from precisionflow.stages import serve_engine

    if way == "in turns":
        return serve_engine.serve_sides({"engine": (*engine, logs / "engine"), "fp32": (*fp32, logs / "fp32")}, settings)
    return {
        "engine": serve_engine.serve_with(*engine, settings, logs / "engine"),
        "fp32": serve_engine.serve_with(*fp32, settings, logs / "fp32"),
    }


def overlapping(rows) -> bool:
    intervals = [(row["ratio"]["low"], row["ratio"]["high"]) for row in rows if row["ratio"]]
    return len(intervals) == len(rows) and all(
        max(a[0], b[0]) <= min(a[1], b[1]) for a, b in itertools.combinations(intervals, 2)
    )


def main(results: Path, fp32_name: str, engine_names) -> None:
    from precisionflow.datasets.store import Split
    from precisionflow.stages import serve_engine

    data = next((results / "prepare_dataset").iterdir())
    images = Split(data, "test").head(64)  # as serve_engine.run takes them: max(64, max_batch)
    loaded = {
        name: serve_engine.runners_of(results / "build_engine" / name, images, BASE["max_batch"])[1:]
        for name in [fp32_name, *engine_names]
    }
    rows = []
    for round_index in range(ROUNDS):
        ways = WAYS if round_index % 2 == 0 else WAYS[::-1]  # neither way always first
        for name in engine_names:
            for way in ways:
                started, load = time.time(), load_average()
                found = served(way, loaded[name], loaded[fp32_name], BASE, Path(tempfile.mkdtemp()))
                row = {
                    "round": round_index,
                    "engine": name,
                    "way": way,
                    "ratio": serve_engine.server_ratio(found),
                    "rates": {side: [each["rate"] for each in found[side]["Server"].get("repeats", [])] for side in found},
                    "server_over_offline": {side: found[side].get("server_over_offline") for side in found},
                    "seconds": round(time.time() - started, 1),
                    "load_before": load,
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    summary = {
        f"{name}, {way}": {
            "medians": [row["ratio"] and row["ratio"]["median"] for row in chosen],
            "intervals_overlap": overlapping(chosen),
        }
        for name in engine_names
        for way in WAYS
        for chosen in [[row for row in rows if row["engine"] == name and row["way"] == way]]
    }
    print(json.dumps(summary, indent=1))
    written({"results": str(results), "settings": BASE, "rows": rows, "summary": summary}, "serving_ratio_turns.json")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
