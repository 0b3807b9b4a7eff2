"""compare_speed: the ratios of the table, measured side by side in one job.

For one engine: the engine itself, the fp32 engine of the same target and model, and the
TensorFlow model are timed in alternating rounds (engine, fp32, TensorFlow, then the reverse, ...)
at each timing batch size and stream count. Every round gives one ratio per pair; the table
shows their median and the spread of the rounds, so drift of the machine cancels instead of
landing in one side's figure. One node per engine: changing an engine re-times its own ratios
(and the references they need), nothing more.
"""

from pathlib import Path
from typing import Any, Callable, Dict

import numpy as np

from precisionflow import speed, timing
from precisionflow.backends import get_backend
from precisionflow.nodeio import read_json, read_node, write_json_atomic
from precisionflow.stages import prepare_dataset

PACKAGES = ("numpy", "tensorflow", "tf-keras")  # the engine backend's version is in params["runtime"]
RATIO_KEYS = ("timing_batch_sizes", "streams", "stream_batch_size", "warmup_s", "ratio_rounds", "ratio_window_s")


def reads(cfg: Dict[str, Any], target: str, runtime: Dict[str, str]) -> Dict[str, Any]:
    from precisionflow.stages.build_engine import device_params
    from precisionflow.stages.evaluate_engine import timing_settings

    return {"ratio": timing_settings(cfg, target, RATIO_KEYS), "threads": cfg["engine"]["intra_op_threads"],
            **device_params(cfg, target, runtime)}


def engine_loader(engine_dir: Path) -> Callable[[], Any]:
    """A function loading a fresh instance of a built engine (one per extra stream)."""
    node = read_node(engine_dir)
    description = read_json(engine_dir / "engine.json")
    backend = get_backend(description["backend"])
    return lambda: backend.load(engine_dir, description, node["params"]["target_def"])


def keras_loader(model_dir: Path, threads: int) -> Callable[[], Any]:
    from precisionflow.stages.benchmark_framework import KerasRunner
    from precisionflow.tfenv import import_tensorflow

    tf, keras = import_tensorflow()
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return lambda: KerasRunner(tf, keras.models.load_model(model_dir / "model.keras", compile=False))


def side_timers(loader: Callable[[], Any], images: np.ndarray, settings: Dict[str, Any]) -> Dict[str, Callable[[float], float]]:
    """{setting: function timing one window of this side} for every batch size and stream count."""
    first = loader()
    timers = {}
    for size in settings["timing_batch_sizes"]:
        run_once = first.prepare(speed.timing_batch(images, size))
        timing.warm_up(run_once, settings["warmup_s"])
        timers[f"b{size}"] = lambda seconds, run_once=run_once, size=size: timing.window_throughput(run_once, size, seconds)
    stream_batch = speed.timing_batch(images, settings["stream_batch_size"])
    for count in settings["streams"]:
        runners = [first.prepare(stream_batch)] + [loader().prepare(stream_batch) for _ in range(count - 1)]
        for run_once in runners:
            timing.warm_up(run_once, settings["warmup_s"])
        timers[f"s{count}"] = lambda seconds, runners=runners: timing.concurrent_streams(
            runners, settings["stream_batch_size"], 0.0, seconds)["throughput_sps"]
    return timers


def compare(loaders: Dict[str, Callable[[], Any]], images: np.ndarray, settings: Dict[str, Any]) -> Dict[str, Any]:
    """Per setting: median throughput of each side and the per-round ratios engine/fp32, engine/tf."""
    timers = {side: side_timers(loader, images, settings) for side, loader in loaders.items()}
    results = {}
    for setting in timers["engine"]:
        measured = timing.alternating_rounds({side: timers[side][setting] for side in timers},
                                             settings["ratio_rounds"], settings["ratio_window_s"])
        entry: Dict[str, Any] = {"throughput_sps": {side: float(np.median(values)) for side, values in measured.items()}}
        for reference, key in (("fp32", "vs_fp32"), ("tensorflow", "vs_tf")):
            if reference in measured:
                entry[key] = timing.ratio_stats(measured["engine"], measured[reference])
        results[setting] = entry
    return results


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    loaders = {"engine": engine_loader(inputs["engine"])}
    if "fp32_engine" in inputs:
        loaders["fp32"] = engine_loader(inputs["fp32_engine"])
    loaders["tensorflow"] = keras_loader(inputs["model"], params["threads"])
    images, _ = prepare_dataset.load(inputs["data"], "test")
    conditions = speed.conditions()
    results = compare(loaders, images, params["ratio"])
    metrics = {"target": params["target"], "sides": {side: inputs[role].name for side, role in
                                                     (("engine", "engine"), ("fp32", "fp32_engine"), ("tensorflow", "model"))
                                                     if role in inputs},
               "settings": results, "conditions": {**conditions, "finished_loadavg_1m": speed.conditions()["loadavg_1m"]},
               "rounds": params["ratio"]["ratio_rounds"], "window_s": params["ratio"]["ratio_window_s"]}
    write_json_atomic(out / "metrics.json", metrics)
    return {setting: {key: round(entry[key]["median"], 3) for key in ("vs_fp32", "vs_tf") if key in entry}
            for setting, entry in results.items()}
