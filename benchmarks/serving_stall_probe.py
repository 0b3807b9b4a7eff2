"""Where do the H200 serving runs' 10-20 ms stalls come from? (benchmarks/results/h200/serving_run_2026-12-02)

SingleStream there had a p90 of 1.8 ms and a maximum of 12-14 ms, so the p99 bound of 15 ms was
missed at every rate. This builds the bundle's fp16 ResNet-50 engine the way build_engine does and
times batch-1 calls in four settings, a few seconds each, counting calls over 5 ms:

1. one thread calling the prepared engine back to back (the engine and the GPU alone);
2. the same with Python's garbage collector off;
3. the SUT's hand-off: a producer thread queues a query every 1 ms through a Condition and the
   worker thread takes and runs it (what measure/serving.BatchingSUT does), latency from queueing
   to completion;
4. that hand-off with Python's thread switch interval at 0.1 ms instead of 5 ms.

    python3 benchmarks/serving_stall_probe.py BUNDLE OUT.json [--seconds 4]
(on the GPU node, the lean runtime on PYTHONPATH, as benchmarks/gpu_bundles.sh sets it up)
"""

import argparse
import collections
import gc
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np


def summary(latencies_s) -> dict:
    ms = np.asarray(latencies_s) * 1000
    return {
        "calls": int(ms.size),
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
        "max_ms": round(float(ms.max()), 3),
        "over_5_ms": int(np.sum(ms > 5)),
    }


def back_to_back(run_once, seconds: float) -> dict:
    latencies, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        started = time.perf_counter()
        run_once()
        latencies.append(time.perf_counter() - started)
    return summary(latencies)


def hand_off(run_once, seconds: float, interval_s: float = 0.001) -> dict:
    """A producer queues (arrival time) every interval_s; one worker takes each and runs it."""
    waiting, ready, latencies, stop = collections.deque(), threading.Condition(), [], threading.Event()

    def work():
        while not stop.is_set() or waiting:
            with ready:
                while not waiting and not stop.is_set():
                    ready.wait(0.05)
                if not waiting:
                    continue
                arrived = waiting.popleft()
            run_once()
            latencies.append(time.perf_counter() - arrived)

    worker = threading.Thread(target=work)
    worker.start()
    next_at, end = time.perf_counter(), time.perf_counter() + seconds
    while next_at < end:
        time.sleep(max(0.0, next_at - time.perf_counter()))
        with ready:
            waiting.append(time.perf_counter())
            ready.notify()
        next_at += interval_s
    stop.set()
    worker.join()
    return summary(latencies)


def fp16_engine(bundle: Path, folder: Path):
    from precisionflow.backends import onnxruntime_backend as backend
    from precisionflow.nodeio import write_json_atomic

    plan = json.loads((bundle / "plan.json").read_text())
    name = next(key for key in plan["nodes"] if key.startswith("build_engine/fp16"))
    node = plan["nodes"][name]
    graph = bundle / "results" / node["inputs"]["graph"] / "model.onnx"
    description = backend.build(graph, folder, node["params"]["engine"], node["params"]["target_def"], "fp16")
    write_json_atomic(folder / "engine.json", description)
    engine = backend.load(folder, description, node["params"]["target_def"])
    shape = [1 if not isinstance(d, int) else d for d in engine.session.get_inputs()[0].shape]
    return engine.prepare(np.random.default_rng(0).random(shape, dtype=np.float32)), description["executed"]["label"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        run_once, label = fp16_engine(args.bundle, Path(folder))
        for _ in range(200):
            run_once()
        found = {"engine": label, "switch_interval_s": sys.getswitchinterval()}
        found["1_back_to_back"] = back_to_back(run_once, args.seconds)
        gc.disable()
        found["2_back_to_back_gc_off"] = back_to_back(run_once, args.seconds)
        gc.enable()
        found["3_hand_off_1ms"] = hand_off(run_once, args.seconds)
        sys.setswitchinterval(0.0001)
        found["4_hand_off_1ms_switch_0.1ms"] = hand_off(run_once, args.seconds)
    print(json.dumps(found, indent=1))
    args.out.write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
