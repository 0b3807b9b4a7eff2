"""What the engine and timing stages read of a target, shared by them below the stage layer (a
stage importing another stage would put that stage's code -- and its backends -- into its id)."""

from typing import Any, Dict

TIMING_KEYS = ("timing_batch_sizes", "warmup_s", "duration_s", "min_iterations", "repeats", "streams", "stream_batch_size")
# Timing keys a target (or on_gpu) may also set: compare_speed's rounds (stages/compare_speed.py).
TIMING_OVERRIDE_KEYS = ("ratio_rounds", "ratio_window_s")


def on_gpu(cfg: Dict[str, Any], target: str) -> bool:
    """Whether `target`'s engines run on a GPU (the one rule: devices.runs_on_gpu)."""
    from precisionflow.devices import runs_on_gpu

    return runs_on_gpu(cfg["target_defs"][target])


def gpu_layer(cfg: Dict[str, Any], target: str, section: str) -> Dict[str, Any]:
    """`on_gpu.<section>` (timing or serving) where the target runs on a GPU, else nothing: a GPU's
    settings are the default on a GPU, whether the target is named or `local` on a GPU machine."""
    return dict((cfg.get("on_gpu") or {}).get(section) or {}) if on_gpu(cfg, target) else {}


def timing_settings(cfg: Dict[str, Any], target: str, keys=TIMING_KEYS) -> Dict[str, Any]:
    """`evaluate`'s timing settings, a GPU's (on_gpu.timing) on top where the target runs on one,
    then the target's own (e.g. trtexec's 3 s windows)."""
    merged = {**cfg["evaluate"], **gpu_layer(cfg, target, "timing"), **cfg["target_defs"][target].get("timing", {})}
    return {key: merged[key] for key in keys}


def serving_settings(cfg: Dict[str, Any], target: str) -> Dict[str, Any]:
    """`evaluate.serving`, a GPU's (on_gpu.serving) on top where the target runs on one, then the
    target's own serving settings."""
    return {**cfg["evaluate"]["serving"], **gpu_layer(cfg, target, "serving"), **cfg["target_defs"][target].get("serving", {})}


def device_params(cfg: Dict[str, Any], target: str, runtime: Dict[str, str]) -> Dict[str, Any]:
    """Where engines are built and timed: the target's device (its scheduler resources and timing
    settings are not read here), and the runtime found there."""
    target_def = cfg["target_defs"][target]
    return {
        "target": target,
        "target_def": {"device": target_def["device"], "expect_device": target_def["expect_device"]},
        "runtime": runtime,
    }
