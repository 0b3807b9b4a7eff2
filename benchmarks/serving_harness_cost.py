"""Issue 40 on this CPU: what the serving harness itself costs per query. The serve stage's system
under test (measure.serving.BatchingSUT, the Server choices of serve_engine) around an engine that
does nothing, so every CPU second the process spends (LoadGen's threads, its Python callbacks, the
worker) is the harness's. Offline, and Server at fixed rates of the default's CPU Server range, with
the default's CPU settings (batches of 8, 1-ms wait, coalescing); `ROUNDS` times each.

    .venv/bin/python benchmarks/serving_harness_cost.py -> $OUT (default benchmarks/results/serving_harness_cost.json)

`bare` rows: a system under test that answers every query inside LoadGen's callback (no queue, no
worker, no batch): LoadGen's own cost with the least Python a SUT can have, the floor under ours.

Read: at R queries/s the harness takes R x (CPU us per query) / 1e6 of a core, cores the engine
of a 2-core machine no longer has while serving.
"""

import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from serving_cpu_ratio import BASE, load_average, written  # noqa: E402  (the default's CPU settings)

ROUNDS = int(os.environ.get("ROUNDS", "2"))
SERVER_RATES = (40_000, 60_000, 80_000)
SECONDS = 5


class AnswerAtOnce:
    """The least a system under test can do: answer each query in LoadGen's callback."""

    def __init__(self, scenario: str):
        import collections

        import mlperf_loadgen as lg

        from precisionflow.measure.serving import Timeline

        self.lg, self.queue_limit, self.overloaded = lg, 0, False
        self.batches, self.timeline = collections.Counter(), Timeline()
        self.handle = lg.ConstructSUT(self.issue, lambda: None)

    def issue(self, queries) -> None:
        self.batches[1] += len(queries)
        self.lg.QuerySamplesComplete([self.lg.QuerySampleResponse(query.id, 0, 0) for query in queries])

    def close(self) -> None:
        self.lg.DestroySUT(self.handle)


def main() -> None:
    from precisionflow.measure import serving
    from precisionflow.stages import serve_engine

    nothing = {size: (lambda: None) for size in serving.powers_of_two(BASE["max_batch"])}
    settings = dict(BASE, min_duration_ms=SECONDS * 1000)
    side = serve_engine.ServedSide(nothing, {size: 2e-6 for size in nothing}, settings, None)
    runs = [("Offline", 500_000)] + [("Server", rate) for rate in SERVER_RATES]
    designs = {"stage": side.make_sut, "bare": AnswerAtOnce}
    rows = []
    for round_index in range(ROUNDS):
        for (scenario, rate), design in [
            (run, design) for run in runs for design in os.environ.get("DESIGNS", "stage,bare").split(",")
        ]:
            load, wall, cpu = load_average(), time.perf_counter(), time.process_time()
            found = serving.run_scenario(designs[design], scenario, settings, Path(tempfile.mkdtemp()), rate)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            spent = found["where_time_went"]
            served = sum(found["batches"].values())
            queries = served if design == "bare" else round(served * spent.get("queries_per_batch", 0))
            row = {
                "round": round_index,
                "design": design,
                "scenario": scenario,
                "target_qps": rate,
                "valid": found["valid"],
                "queries": queries,
                "wall_s": round(wall, 2),
                "cpu_s": round(cpu, 2),
                "cpu_us_per_query": round(1e6 * cpu / max(queries, 1), 2),
                "cores_busy": round(cpu / wall, 2),
                "load_before": load,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    written({"settings": BASE, "seconds": SECONDS, "rows": rows}, "serving_harness_cost.json")


if __name__ == "__main__":
    main()
