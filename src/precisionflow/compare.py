"""Speed-ups: an engine's throughput over the framework baseline's, setting by setting."""

from typing import Any, Dict


def speedups(engine_speed: Dict[str, Any], framework_speed: Dict[str, Any]) -> Dict[str, float]:
    """{"b<N>": ratio at batch N, "s<N>": ratio with N streams} for settings both measured."""
    ratios = {}
    for kind, prefix in (("batch", "b"), ("streams", "s")):
        for key, stats in engine_speed.get(kind, {}).items():
            baseline = framework_speed.get(kind, {}).get(key)
            if baseline:
                ratios[f"{prefix}{key}"] = stats["throughput_sps"] / baseline["throughput_sps"]
    return ratios
