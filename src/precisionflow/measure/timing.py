"""Latency measurement the way trtexec does it (numpy only, no framework imports).

Warm up for `warmup_s`, then time back-to-back runs for at least `duration_s` seconds and at
least `min_iterations` runs; percentiles use trtexec's rule:
pXX = sorted[max(N - 1 - int((1 - XX/100) * N), 0)].
"""

import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

PERCENTILES = (50, 90, 95, 99)
# Every host time below is read through this name, so a test can drive the measurement with a clock
# of its own (tests/test_timing.py): a wall-clock assertion on a shared machine fails under load.
clock = time.perf_counter
NOISY_CV_PERCENT = 5.0


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    count = len(sorted_values)
    # Rounded before truncation so 0.1 * 100 counts as 10, not 9.999999999999998.
    tail = int(round((1 - pct / 100.0) * count, 9))
    return float(sorted_values[max(count - 1 - tail, 0)])


def warm_up(run_once: Callable[[], object], seconds: float) -> None:
    """At least one call, then calls until `seconds` have passed (caches, lazy allocations, clocks)."""
    warm_until = clock() + seconds
    run_once()
    while clock() < warm_until:
        run_once()


def time_runs(
    run_once: Callable[[], object],
    warmup_s: float,
    duration_s: float,
    min_iterations: int,
    device_times: Optional[List[float]] = None,
) -> List[float]:
    """Host seconds per call of run_once, after a warm-up. A device-timed run_once returns the
    seconds the device took: those are appended to `device_times`."""
    warm_up(run_once, warmup_s)
    latencies = []
    window_end = clock() + duration_s
    while clock() < window_end or len(latencies) < min_iterations:
        start = clock()
        device_seconds = run_once()
        latencies.append(clock() - start)
        if device_times is not None:
            device_times.append(float(device_seconds))
    return latencies


def summarize(latencies_s: Sequence[float], batch_size: int) -> Dict[str, float]:
    """Mean/median/pXX latency in ms and throughput in samples/s of one timed window."""
    ordered = sorted(latencies_s)
    total = float(np.sum(ordered))
    stats = {
        "iterations": len(ordered),
        "mean_ms": 1000 * total / len(ordered),
        "min_ms": 1000 * ordered[0],
        "max_ms": 1000 * ordered[-1],
        "throughput_sps": batch_size * len(ordered) / total,
    }
    stats.update({f"p{pct}_ms": 1000 * percentile(ordered, pct) for pct in PERCENTILES})
    return stats


def repeated_windows(
    run_once: Callable[[], object], batch_size: int, settings: Dict, device_timed: bool = False
) -> Dict[str, float]:
    """`repeats` timed windows after one warm-up: percentiles over all runs, plus the spread.

    cv_percent is the coefficient of variation of the windows' mean latencies; a comparison
    whose difference is within a few CVs is noise, and `noisy` flags CV above NOISY_CV_PERCENT.
    With `device_timed` (run_once returns the device's seconds) the figures are the device's and
    the host's own clock is kept beside them under "host" (launch and synchronisation included).
    """
    windows, host_times = [], []
    for index in range(settings["repeats"]):
        warmup = settings["warmup_s"] if index == 0 else 0.0
        device_times: Optional[List[float]] = [] if device_timed else None
        host = time_runs(run_once, warmup, settings["duration_s"], settings["min_iterations"], device_times)
        windows.append(device_times if device_timed else host)
        host_times += host
    pooled = summarize([t for window in windows for t in window], batch_size)
    pooled["clock"] = "device" if device_timed else "host"
    if device_timed:
        host_stats = summarize(host_times, batch_size)
        pooled["host"] = {key: host_stats[key] for key in ("mean_ms", "p50_ms", "p99_ms", "throughput_sps")}
    means = np.array([np.mean(window) for window in windows])
    pooled["window_mean_ms"] = [round(1000 * float(m), 5) for m in means]
    pooled["cv_percent"] = float(100 * means.std() / means.mean()) if len(means) > 1 else 0.0
    pooled["noisy"] = pooled["cv_percent"] > NOISY_CV_PERCENT
    return pooled


def concurrent_streams(
    run_fns: List[Callable[[], object]], batch_size: int, warmup_s: float, duration_s: float
) -> Dict[str, float]:
    """Aggregate throughput of len(run_fns) streams, each a thread driving its own engine instance.

    The backends release the GIL while they compute, so the threads run concurrently -- the
    "N video streams on one GPU/CPU" case. Every stream warms up, then all run for the same window.
    """
    import threading

    counts = [0] * len(run_fns)
    latencies: List[List[float]] = [[] for _ in run_fns]
    barrier = threading.Barrier(len(run_fns) + 1)

    failures: List[BaseException] = []
    # Each stream's own window (first start, last end): the concurrent window is theirs, not the
    # main thread's, which may wake from the barrier late on a loaded machine.
    spans: List[Tuple[float, float]] = [(0.0, 0.0)] * len(run_fns)

    def stream(index: int) -> None:
        run_once = run_fns[index]
        try:
            warm_up(run_once, warmup_s)
            barrier.wait()
            began = clock()
            window_end = began + duration_s
            while clock() < window_end:
                start = clock()
                run_once()
                latencies[index].append(clock() - start)
                counts[index] += 1
            spans[index] = (began, clock())
        except threading.BrokenBarrierError:
            pass
        except Exception as err:  # noqa: BLE001 -- re-raised below: a failed stream must not hang the others
            failures.append(err)
            barrier.abort()

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(len(run_fns))]
    for thread in threads:
        thread.start()
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    wall = max(end for _, end in spans) - min(start for start, _ in spans)
    every = sorted(t for stream_latencies in latencies for t in stream_latencies)
    return {
        "streams": len(run_fns),
        "throughput_sps": batch_size * sum(counts) / wall,
        "p50_ms": 1000 * percentile(every, 50),
        "p99_ms": 1000 * percentile(every, 99),
        "iterations": sum(counts),
    }


def window_throughput(run_once: Callable[[], object], batch_size: int, seconds: float) -> float:
    """Samples/s of back-to-back calls over one window (at least one call)."""
    calls, started = 0, clock()
    while True:
        run_once()
        calls += 1
        elapsed = clock() - started
        if elapsed >= seconds:
            return batch_size * calls / elapsed


def alternating_rounds(sides: Dict[str, Callable[[float], float]], rounds: int, window_s: float) -> Dict[str, List[float]]:
    """Throughput of every side in each round, the sides taking turns (A B C, then C B A, ...).

    `sides` maps a name to a function timing one window of that many seconds and returning its
    throughput. Each round measures every side close together in time, so a per-round ratio
    cancels what the machine did meanwhile (other load, clocks, caches); reversing the order each
    round cancels the advantage of going first or last.
    """
    names = list(sides)
    measured: Dict[str, List[float]] = {name: [] for name in names}
    for index in range(rounds):
        for name in names if index % 2 == 0 else names[::-1]:
            measured[name].append(sides[name](window_s))
    return measured
