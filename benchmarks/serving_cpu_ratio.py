"""Issue 40 on this CPU: does the default's Server search undersell the engine? The default
experiment's built engines (a results folder of `make run`) served by the serve stage's own code
(stages.serve_engine.serve_side) under settings that differ only in how the search's answer is
made: today's 1-s runs, or 1-s probes whose answer is confirmed -- and climbed from 0.8x Offline --
in longer runs (the GPU targets' search_duration_ms / full_length_climb, here 5 s). Each setting
`ROUNDS` times per engine, alternating, so both meet the same load on this shared machine.

    .venv/bin/python benchmarks/serving_cpu_ratio.py RESULTS_DIR [ENGINE ...] -> $OUT (default benchmarks/results/serving_cpu_ratio.json)
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

ROUNDS = int(os.environ.get("ROUNDS", "2"))
BASE = {
    "scenarios": ["SingleStream", "Server"],
    "latency_bound_ms": 33.0,
    "percentile": 0.99,
    "min_duration_ms": 1000,
    "min_query_count": 500,
    "max_batch": 8,
    "max_wait_ms": 1.0,
    "workers": 1,
    "server_next_batch": "when_ready",
    "search_precision": 0.1,
    "search_repeats": 2,
    "coalesce_queries": True,
    "seed": 1,
    "samples": 64,
}
SETTINGS = {
    "today: max_batch 8, 1-s runs": BASE,
    "max_batch 64": dict(BASE, max_batch=64),
    "precision 0.05": dict(BASE, search_precision=0.05),
    "max_batch 64, 1-s probes confirmed + climbed in 5-s runs": dict(
        BASE, max_batch=64, min_duration_ms=5000, search_duration_ms=1000, full_length_climb=2
    ),
}
CHOSEN = os.environ.get("SETTINGS")  # a comma-separated subset of SETTINGS' labels' first words


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def main(results: Path, engines) -> None:
    from precisionflow.datasets.store import Split
    from precisionflow.stages import serve_engine

    data = next((results / "prepare_dataset").iterdir())
    images = Split(data, "test").head(64)  # as serve_engine.run takes them: max(64, max_batch)
    engines = engines or sorted(
        p.name for p in (results / "build_engine").iterdir() if "ortcpu" in p.name or p.name.startswith("fp32")
    )
    rows = []
    for round_index in range(ROUNDS):
        for engine in engines:
            for label, settings in SETTINGS.items():
                if CHOSEN and not any(label.startswith(word) for word in CHOSEN.split(",")):
                    continue
                started, load = time.time(), load_average()
                _engine, found = serve_engine.serve_side(
                    results / "build_engine" / engine, images, settings, Path(tempfile.mkdtemp())
                )
                server = found["Server"]
                row = {
                    "round": round_index,
                    "engine": engine,
                    "settings": label,
                    "offline": found["Offline"].get("samples_per_second"),
                    "server": server.get("rate"),
                    "server_over_offline": found.get("server_over_offline"),
                    "repeats": server.get("repeats"),
                    "why": server.get("why"),
                    "seconds": round(time.time() - started, 1),
                    "load_before": load,
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    written({"results": str(results), "settings": SETTINGS, "rows": rows}, "serving_cpu_ratio.json")


def written(record: dict, default_name: str) -> None:
    """The record, with the commit it ran at, to $OUT (default benchmarks/results/DEFAULT_NAME)."""
    out = Path(os.environ.get("OUT", Path(__file__).parent / "results" / default_name))
    code = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()
    out.write_text(json.dumps({"code": code, **record}, indent=1) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
