"""How much of an Offline run's time the SUT's own Python takes between engine calls, with LoadGen
answered on the worker (as before) and aside (BatchingSUT complete_aside, the serve stage's Offline).

The engine is a stand-in for a GPU call: a b128 batch that sleeps the H100's fp16 ResNet-50 call
time (7.96 ms, docs/hardware.md) with the GIL released, as ONNX Runtime's run does while the GPU
works. The figure is Offline's samples/s over 128 / the mean engine call the SUT's timeline measured
(a sleep overshoots its request a little): the share of each batch's turn the engine call took,
what the SUT's own work between calls costs. Modes alternate, rounds of one Offline run each.

    python benchmarks/serving_offline_aside.py [--call-ms 7.96] [--rounds 5] [--seconds 2]
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from precisionflow.measure import serving  # noqa: E402


def offline_rate(call_s: float, aside: bool, seconds: float, folder: Path) -> float:
    """Offline's samples/s over what its engine calls alone would serve (128 / their mean time)."""
    runners = {128: lambda: time.sleep(call_s)}
    settings = {"min_duration_ms": int(1000 * seconds), "min_query_count": 1, "seed": 1, "samples": 1024, "latency_bound_ms": 15}
    settings["percentile"] = 0.99
    make = lambda scenario: serving.BatchingSUT(runners, 128, 0.0, 1, 10**9, complete_aside=aside)  # noqa: E731
    found = serving.run_scenario(make, "Offline", settings, folder, rate=2 * 128 / call_s)
    mean_call_s = found["where_time_went"]["engine_call_ms"]["mean"] / 1000
    return found["samples_per_second"] / (128 / mean_call_s)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--call-ms", type=float, default=7.96)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    call_s = args.call_ms / 1000
    found = {"on the worker": [], "aside": []}
    with tempfile.TemporaryDirectory() as folder:
        for index in range(args.rounds):
            for mode in ("on the worker", "aside") if index % 2 == 0 else ("aside", "on the worker"):
                share = offline_rate(call_s, mode == "aside", args.seconds, Path(folder) / f"{index}-{mode}")
                found[mode].append(round(share, 4))
    for mode, ratios in found.items():
        print(f"{mode:14s} Offline / engine: median {statistics.median(ratios):.4f}  rounds {ratios}")
    print(json.dumps({"call_ms": args.call_ms, "rounds": args.rounds, "seconds": args.seconds, "ratios": found}))


if __name__ == "__main__":
    main()
