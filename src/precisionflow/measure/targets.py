"""What the engine and timing stages read of a target, shared by them below the stage layer (a
stage importing another stage would put that stage's code -- and its backends -- into its id)."""

from typing import Any, Dict

TIMING_KEYS = ("timing_batch_sizes", "warmup_s", "duration_s", "min_iterations", "repeats", "streams", "stream_batch_size")


def timing_settings(cfg: Dict[str, Any], target: str, keys=TIMING_KEYS) -> Dict[str, Any]:
    """`evaluate`'s timing settings, with the target's own (e.g. trtexec's 3 s windows) on top."""
    merged = {**cfg["evaluate"], **cfg["target_defs"][target].get("timing", {})}
    return {key: merged[key] for key in keys}


def device_params(cfg: Dict[str, Any], target: str, runtime: Dict[str, str]) -> Dict[str, Any]:
    """Where engines are built and timed: the target's device (its scheduler resources and timing
    settings are not read here), and the runtime found there."""
    target_def = cfg["target_defs"][target]
    return {
        "target": target,
        "target_def": {"device": target_def["device"], "expect_device": target_def["expect_device"]},
        "runtime": runtime,
    }
