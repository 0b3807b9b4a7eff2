"""serve_engine: how many requests per second an engine serves within a latency bound.

One job per engine, like compare_speed: the engine and its target's fp32 engine are served one
after the other under the same bound, driven by MLPerf LoadGen (measure/serving.py is the system
under test and the search). Per side: SingleStream latency; the largest valid Server rate (Poisson
arrivals, latency from the scheduled arrival, the chosen percentile within the bound), found by
search and re-verified; Offline throughput where asked; the Server/Offline ratio. LoadGen's logs
stay in the node folder (loadgen/<side>/<run>/).
"""

import math
import time
from pathlib import Path
from typing import Any, Dict

import numpy as np

from precisionflow.pipeline.nodeio import write_json_atomic

PACKAGES = ("numpy", "mlcommons-loadgen")
GPU_BOUND_MS, CPU_BOUND_MS = 15.0, 33.0
MLPERF_MIN_DURATION_MS = 600_000


def reads(cfg: Dict[str, Any], target: str, runtime: Dict[str, str]) -> Dict[str, Any]:
    from precisionflow.measure.targets import device_params

    settings = {**cfg["evaluate"]["serving"], **cfg["target_defs"][target].get("serving", {})}
    settings.pop("enabled", None)
    settings["scenarios"] = [str(getattr(s, "value", s)) for s in settings["scenarios"]]
    if settings["latency_bound_ms"] is None:  # by where the engine runs (see ServingConf)
        on_gpu = (
            runtime.get("device_name", "").lower().startswith(("nvidia", "tesla"))
            or cfg["target_defs"][target]["device"] == "cuda"
        )
        settings["latency_bound_ms"] = GPU_BOUND_MS if on_gpu else CPU_BOUND_MS
    return {
        "serving": settings,
        "threads": cfg["engine"]["intra_op_threads"],
        "backend": cfg["engine"]["backend"],
        **device_params(cfg, target, runtime),
    }


def runners_of(engine_dir: Path, images: np.ndarray, max_batch: int):
    """{batch size: the engine's prepared callable} for the powers of two up to max_batch, and the
    seconds the largest one takes (it sets how long a queue may grow)."""
    from precisionflow.backends import engine_loader
    from precisionflow.measure import serving, speed, timing

    engine = engine_loader(engine_dir)()
    runners = {size: engine.prepare(speed.timing_batch(images, size)) for size in serving.powers_of_two(max_batch)}
    for run_once in runners.values():
        timing.warm_up(run_once, 0.2)
    largest = runners[max(runners)]
    started = time.perf_counter()
    for _ in range(5):
        largest()
    return engine, runners, (time.perf_counter() - started) / 5


def serve_side(engine_dir: Path, images: np.ndarray, settings: Dict[str, Any], logs: Path) -> Dict[str, Any]:
    """Every scenario the settings name, for one engine; the Server rate by search."""
    from precisionflow.measure import serving

    _engine, runners, largest_s = runners_of(engine_dir, images, settings["max_batch"])
    bound_s = settings["latency_bound_ms"] / 1000
    limit = serving.queue_limit(bound_s, largest_s, settings["max_batch"], settings["workers"])

    def make_sut(scenario: str):
        queue = 10**9 if scenario == "Offline" else limit  # Offline queues everything by design
        return serving.BatchingSUT(runners, settings["max_batch"], settings["max_wait_ms"] / 1000, settings["workers"], queue)

    counter = iter(range(10**6))
    run = lambda scenario, rate=0.0: serving.run_scenario(
        make_sut, scenario, settings, logs / f"{next(counter):02d}-{scenario}", rate
    )  # noqa: E731
    found: Dict[str, Any] = {"largest_batch_s": round(largest_s, 6), "queue_limit": limit}
    single = run("SingleStream")
    found["SingleStream"] = single
    if "Server" in settings["scenarios"]:
        found["Server"] = server_search(run, single, settings)
    if "Offline" in settings["scenarios"]:
        found["Offline"] = run("Offline", rate=settings["max_batch"] / max(largest_s, 1e-6))
        rate = found.get("Server", {}).get("rate")
        if rate and found["Offline"].get("samples_per_second"):
            found["server_over_offline"] = round(rate / found["Offline"]["samples_per_second"], 3)
    if "MultiStream" in settings["scenarios"]:
        found["MultiStream"] = run("MultiStream")
    return found


def server_search(run, single: Dict[str, Any], settings: Dict[str, Any]) -> Dict[str, Any]:
    """The largest valid Server rate, or the reason there is none (batch-1 latency over the bound)."""
    from precisionflow.measure import serving

    bound_ms, percentile = settings["latency_bound_ms"], settings["percentile"]
    tail_ns = single.get("p99_ns") or single.get("p90_ns") or 0
    if tail_ns / 1e6 > bound_ms:
        return {
            "rate": None,
            "why": f"no rate meets p{100 * percentile:g} <= {bound_ms:g} ms: batch-1 p99 is {tail_ns / 1e6:.2f} ms",
            "curve": [],
        }
    curve = []

    def valid_at(rate: float) -> bool:
        result = run("Server", rate)
        curve.append(
            {
                k: result.get(k)
                for k in ("target_qps", "valid", "p50_ns", "p90_ns", "p99_ns", "max_ns", "overloaded", "early_stopping")
            }
        )
        return bool(result["valid"])

    start = 0.5 * 1e9 / max(single.get("mean_ns", 1e6), 1.0)  # half of what one stream completes
    searched = serving.max_server_rate(valid_at, start, settings["search_precision"])
    valid_runs = [
        point for point in curve if point["valid"] and math.isclose(point["target_qps"], searched["rate"] or -1, rel_tol=1e-6)
    ]
    return {**searched, "curve": curve, "at_rate": valid_runs[-1] if valid_runs else None}


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    from precisionflow.datasets.store import Split
    from precisionflow.measure import speed

    settings = {**params["serving"], "samples": 64}
    images = Split(inputs["data"], "test").head(max(64, settings["max_batch"]))
    taken = speed.conditions()
    sides = {"engine": inputs["engine"], **({"fp32": inputs["fp32_engine"]} if "fp32_engine" in inputs else {})}
    results = {side: serve_side(folder, images, settings, out / "loadgen" / side) for side, folder in sides.items()}
    mlperf_valid = settings["min_duration_ms"] >= MLPERF_MIN_DURATION_MS
    metrics = {
        "target": params["target"],
        "settings": settings,
        "sides": {side: folder.name for side, folder in sides.items()},
        "results": results,
        "server_ratio": server_ratio(results),
        "mlperf_length": mlperf_valid,
        "note": ""
        if mlperf_valid
        else f"runs of {settings['min_duration_ms']} ms: shorter than MLPerf's 600 s minimum, not an MLPerf-valid result",
        "conditions": speed.finished(taken),
    }
    write_json_atomic(out / "metrics.json", metrics)
    return {"server_qps": results["engine"].get("Server", {}).get("rate"), "server_ratio": metrics["server_ratio"]}


def server_ratio(results: Dict[str, Any]):
    """The engine's largest valid Server rate over the fp32 engine's, with the interval the two search
    brackets allow: [engine's valid / fp32's failed, engine's failed / fp32's valid]."""
    engine, fp32 = results.get("engine", {}).get("Server"), results.get("fp32", {}).get("Server")
    if not engine or not fp32 or not engine.get("rate") or not fp32.get("rate"):
        return None
    (engine_low, engine_high), (fp32_low, fp32_high) = engine["bracket"], fp32["bracket"]
    return {
        "median": round(engine["rate"] / fp32["rate"], 3),
        "low": round(engine_low / fp32_high, 3),
        "high": round(engine_high / fp32_low, 3),
    }
