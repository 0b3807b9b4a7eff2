"""Speed of anything with prepare(batch) -> run-once callable: engines and the framework baseline.

Per batch size: repeated timed windows (timing.repeated_windows). Per stream count: that many
threads sharing one loaded engine where the backend allows it (timing.concurrent_streams). On a
GPU the main figures exclude host<->device copies (inputs already on the device, as trtexec
reports) and come from the device's clock where the engine has one; `batch_with_copies` repeats
them with the copies included, on the host's clock.
"""

import os
import platform
import time
from typing import Any, Callable, Dict

import numpy as np

from precisionflow.measure import timing


def conditions() -> Dict[str, Any]:
    """When, where and under what load a figure was taken: it travels with every absolute figure."""
    return {
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "run": os.environ.get("PRECISIONFLOW_RUN", "outside a workflow run"),
        "cpu_sample": cpu_sample(),
    }


def cpu_sample() -> Dict[str, float]:
    """CPU seconds the whole machine was busy (/proc/stat) and this process with its finished
    children used, at a monotonic time: two samples tell what OTHER processes used in between."""
    sample = {"at": time.monotonic()}
    times = os.times()
    sample["own_s"] = times.user + times.system + times.children_user + times.children_system
    try:
        with open("/proc/stat") as handle:
            fields = [int(value) for value in handle.readline().split()[1:8]]
        sample["busy_s"] = (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait
    except (OSError, ValueError):
        pass
    return sample


def other_cores(start: Dict[str, float], end: Dict[str, float]) -> float:
    """Cores other processes kept busy on average between two samples (-1: unknown). The 1-minute
    load average lags (a training that just ended still counts), this does not."""
    if "busy_s" not in start or "busy_s" not in end or end["at"] <= start["at"]:
        return -1.0
    others = (end["busy_s"] - start["busy_s"]) - (end["own_s"] - start["own_s"])
    return round(max(0.0, others) / (end["at"] - start["at"]), 2)


def finished(taken: Dict[str, Any]) -> Dict[str, Any]:
    """The conditions at the end of a timing job: load, and the cores others used while it timed."""
    now, taken = conditions(), dict(taken)
    started = taken.pop("cpu_sample", {})
    return {**taken, "finished_loadavg_1m": now["loadavg_1m"], "other_cores": other_cores(started, now["cpu_sample"])}


OTHERS_LOADED = 0.5  # cores of CPU time other processes used on average while a job timed


def loaded(taken: Dict[str, Any]) -> bool:
    """Whether a timing job shared the machine: other processes kept more than half a core busy
    while it timed (measured from /proc/stat); without that sample, the 1-min load above the cores."""
    if taken.get("other_cores", -1) >= 0:
        return taken["other_cores"] > OTHERS_LOADED
    cores = taken.get("cpu_count") or 0
    return bool(cores) and max(taken.get("loadavg_1m", 0), taken.get("finished_loadavg_1m", 0)) > cores


def timing_images(split, settings: Dict[str, Any]) -> np.ndarray:
    """The first test images, as many as the largest timed batch needs (never the whole split)."""
    sizes = list(settings.get("timing_batch_sizes", [])) + [settings.get("stream_batch_size") or 1]
    return split.head(max(sizes))


def timing_batch(images: np.ndarray, batch_size: int) -> np.ndarray:
    """`batch_size` test images (repeated if the split is smaller), contiguous float32."""
    repeats = -(-batch_size // len(images))
    return np.ascontiguousarray(np.concatenate([images] * repeats)[:batch_size], dtype=np.float32)


def stream_runners(engine: Any, load: Callable[[], Any], batch: np.ndarray, count: int):
    """(callables for `count` concurrent streams, how they share the engine): one loaded engine
    shared by the threads where the backend allows it, else one instance per stream."""
    if hasattr(engine, "stream_runners"):
        return engine.stream_runners(batch, count)
    return [engine.prepare(batch)] + [load().prepare(batch) for _ in range(count - 1)], f"{count} instances, one per thread"


def measure(load: Callable[[], Any], images: np.ndarray, settings: Dict[str, Any], engine: Any = None) -> Dict[str, Any]:
    """`load` makes a fresh instance (one per extra stream where the backend cannot share one);
    `engine`, if given, is the first."""
    engine = engine or load()
    copies = getattr(engine, "has_device_copies", False)
    device_timed = getattr(engine, "device_timed", False)
    report: Dict[str, Any] = {
        "batch": {},
        "streams": {},
        "copies_included": not copies,
        "conditions": conditions(),
        "clock": engine.clock_name() if hasattr(engine, "clock_name") else "host (perf_counter around each call)",
    }
    if copies:
        report["batch_with_copies"] = {}
    for size in settings["timing_batch_sizes"]:
        batch = timing_batch(images, size)
        report["batch"][str(size)] = timing.repeated_windows(engine.prepare(batch), size, settings, device_timed)
        if copies:
            report["batch_with_copies"][str(size)] = timing.repeated_windows(
                engine.prepare(batch, include_copies=True), size, settings
            )
    stream_batch = timing_batch(images, settings["stream_batch_size"])
    for count in settings["streams"]:
        runners, sharing = stream_runners(engine, load, stream_batch, count)
        report["streams"][str(count)] = timing.concurrent_streams(
            runners, settings["stream_batch_size"], settings["warmup_s"], settings["duration_s"]
        )
        report["streams"][str(count)]["engines"] = sharing
    report["conditions"] = finished(report["conditions"])
    return report
