"""What this machine has: CPU model and, through nvidia-smi, GPU name, compute capability, driver.

Neither ONNX Runtime nor TensorRT reports the device name or compute capability, so engines
record what nvidia-smi says; an engine is refused on a machine that says something else.
"""

import functools
import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from precisionflow.errors import EngineMismatchError


@functools.lru_cache(maxsize=None)
def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def visible_gpu(environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """The GPU this job was given, as nvidia-smi's `-i` takes it: the first entry of
    CUDA_VISIBLE_DEVICES (an index or a GPU-/MIG- UUID; SLURM sets it for the job's allocation),
    else SLURM's own list of the job's GPUs, else GPU 0. None when the job was given no GPU
    (CUDA_VISIBLE_DEVICES empty or -1). nvidia-smi numbers GPUs physically, as these variables do."""
    for variable in ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        if variable in environ:
            first = environ[variable].split(",")[0].strip()
            return None if first in ("", "-1") else first
    return "0"


def gpu_facts(selector: Optional[str] = None) -> Dict[str, str]:
    """Name, compute capability and driver of the job's GPU (visible_gpu()); 'unknown' fields where
    nvidia-smi is absent or the job has no GPU. `gpu` records which one was asked for."""
    chosen = visible_gpu() if selector is None else selector
    return {**_gpu_facts(chosen), "gpu": chosen or "none"}  # a copy: callers may add keys


@functools.lru_cache(maxsize=None)
def _gpu_facts(selector: Optional[str]) -> Dict[str, str]:
    unknown = {"device_name": "unknown CUDA device", "compute_capability": "unknown", "driver": "unknown"}
    if selector is None:
        return unknown
    query = ["nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader", "-i", selector]
    try:
        name, capability, driver = [s.strip() for s in subprocess.check_output(query, text=True, timeout=20).split(",")]
        return {"device_name": name, "compute_capability": capability, "driver": driver}
    except (OSError, subprocess.SubprocessError, ValueError):
        return unknown


def local_device_name(device: str) -> str:
    """The device an engine for `device` (auto/cpu/cuda) would be built on here."""
    if device == "cpu":
        return cpu_name()
    gpu = gpu_facts()["device_name"]
    return gpu if gpu != "unknown CUDA device" or device == "cuda" else cpu_name()


def has_nvidia_gpu() -> bool:
    return gpu_facts()["device_name"] != "unknown CUDA device"


def check_device(runtime: Dict[str, Any], target_def: Dict[str, Any]) -> None:
    """Refuse to build for a target whose expected device is not the one found here."""
    expected = target_def.get("expect_device") or ""
    if expected and expected.lower() not in runtime["device_name"].lower():
        raise EngineMismatchError(
            f"This target expects a device named like '{expected}', found '{runtime['device_name']}' "
            f"({runtime['device']}). Run the build on such a machine (see the target's resources) or use target 'local'."
        )
