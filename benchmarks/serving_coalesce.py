"""Server over Offline on this CPU with and without LoadGen's query coalescing (evaluate.serving.
coalesce_queries), through the serve stage's own SUT, on a constructed engine of the default
experiment's size: 20 us + 8 us per image, busy on a core as ONNX Runtime's CPU calls are.

    .venv/bin/python benchmarks/serving_coalesce.py > benchmarks/results/serving_coalesce/cpu.txt
"""

import tempfile
import time
from pathlib import Path

from precisionflow.measure import serving


def runner(batch: int):
    seconds = 0.00002 + batch * 0.000008

    def run():
        until = time.perf_counter() + seconds
        while time.perf_counter() < until:  # busy, as an engine call is
            pass

    return run


def main() -> None:
    runners = {size: runner(size) for size in serving.powers_of_two(8)}
    for coalesce in (False, True):
        settings = dict(
            coalesce_queries=coalesce, latency_bound_ms=33.0, min_duration_ms=2000, min_query_count=500, seed=1,
            percentile=0.99, samples=64,
        )  # fmt: skip

        def make(scenario):
            return serving.BatchingSUT(runners, 8, 0.001 if scenario == "Server" else 0.0, 1, 10**9)

        out = Path(tempfile.mkdtemp())
        offline = serving.run_scenario(make, "Offline", settings, out / "offline", rate=200000)
        print(f"coalesce_queries={coalesce}: Offline {offline['samples_per_second']:.0f}/s valid={offline['valid']}", flush=True)
        for fraction in (0.5, 0.65, 0.8):
            found = serving.run_scenario(
                make, "Server", settings, out / f"s{fraction}", rate=fraction * offline["samples_per_second"]
            )
            print(
                f"  Server at {fraction}x Offline: valid={found['valid']} p99 {found.get('p99_ns', 0) / 1e6:.2f} ms, "
                f"queries per batch {found['where_time_went'].get('queries_per_batch')}",
                flush=True,
            )


if __name__ == "__main__":
    main()
