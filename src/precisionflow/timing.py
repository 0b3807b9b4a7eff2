"""Latency measurement the way trtexec does it (numpy only, no framework imports).

Warm up for `warmup_s`, then time back-to-back runs for at least `duration_s` seconds and at
least `min_iterations` runs; percentiles use trtexec's rule:
pXX = sorted[max(N - 1 - int((1 - XX/100) * N), 0)].
"""

import time
from typing import Callable, Dict, List, Sequence

import numpy as np

PERCENTILES = (50, 90, 95, 99)


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    count = len(sorted_values)
    # Rounded before truncation so 0.1 * 100 counts as 10, not 9.999999999999998.
    tail = int(round((1 - pct / 100.0) * count, 9))
    return float(sorted_values[max(count - 1 - tail, 0)])


def time_runs(run_once: Callable[[], object], warmup_s: float, duration_s: float, min_iterations: int) -> List[float]:
    """Seconds per call of run_once, after a warm-up."""
    warm_until = time.perf_counter() + warmup_s
    run_once()
    while time.perf_counter() < warm_until:
        run_once()
    latencies = []
    window_end = time.perf_counter() + duration_s
    while time.perf_counter() < window_end or len(latencies) < min_iterations:
        start = time.perf_counter()
        run_once()
        latencies.append(time.perf_counter() - start)
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
