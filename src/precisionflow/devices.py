"""What this machine has: CPU model and, through nvidia-smi, GPU name, compute capability, driver.

Neither ONNX Runtime nor TensorRT reports the device name or compute capability, so engines
record what nvidia-smi says; an engine is refused on a machine that says something else.
"""

import functools
import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

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
    """Name, compute capability, driver, UUID and PCI bus of the job's GPU (visible_gpu()); 'unknown'
    fields where nvidia-smi is absent or the job has no GPU. `gpu` records which one was asked for.

    An index is CUDA's (fastest first, unless CUDA_DEVICE_ORDER=PCI_BUS_ID) while nvidia-smi numbers
    GPUs by PCI bus: on a host with two GPU models the same index names two GPUs. So the job's GPU
    is matched by UUID: CUDA's own device 0 of this process (the first visible one) is asked for it."""
    chosen = visible_gpu() if selector is None else selector
    matched = cuda_uuid_of(chosen) if selector is None and chosen is not None and chosen.isdigit() else None
    return {**_gpu_facts(matched or chosen), "gpu": chosen or "none"}  # a copy: callers may add keys


@functools.lru_cache(maxsize=None)
def cuda_uuid_of(index: str) -> Optional[str]:
    """'GPU-xxxxxxxx-...' of the first device CUDA shows this process (CUDA_VISIBLE_DEVICES=`index`
    makes that one the job's), from the driver library itself; None where there is no driver."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        device, raw = ctypes.c_int(), ctypes.create_string_buffer(16)
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(device), 0) != 0:
            return None
        if cuda.cuDeviceGetUuid(raw, device) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return uuid_text(raw.raw)


def uuid_text(raw: bytes) -> str:
    """CUDA's 16 UUID bytes as nvidia-smi writes them: GPU-8-4-4-4-12 hex digits."""
    text = raw.hex()
    return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def query_gpus(fields: Tuple[str, ...], selector: Optional[str] = None) -> List[Dict[str, str]]:
    """nvidia-smi's answer for `fields` (its --query-gpu names), one dict per GPU (only `selector`'s,
    an index or UUID, when given); [] where nvidia-smi is absent, fails or names no GPU. The one
    place that runs and parses nvidia-smi."""
    query = ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader"]
    if selector is not None:
        query += ["-i", selector]
    try:
        text = subprocess.check_output(query, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    rows = [[part.strip() for part in line.split(",", len(fields) - 1)] for line in text.splitlines() if line.strip()]
    return [dict(zip(fields, row, strict=True)) for row in rows if len(row) == len(fields)]


UNKNOWN_GPU = "unknown CUDA device"


@functools.lru_cache(maxsize=None)
def _gpu_facts(selector: Optional[str]) -> Dict[str, str]:
    unknown = {"device_name": UNKNOWN_GPU, "compute_capability": "unknown", "driver": "unknown"}
    found = query_gpus(("name", "compute_cap", "driver_version", "uuid", "pci.bus_id"), selector) if selector else []
    if not found:
        return unknown
    gpu = found[0]
    return {
        "device_name": gpu["name"],
        "compute_capability": gpu["compute_cap"],
        "driver": gpu["driver_version"],
        "uuid": gpu["uuid"],
        "pci_bus": gpu["pci.bus_id"],
    }


# What a node id may read of a GPU: the model and software it ran with -- never which of a node's
# GPUs it was (index, UUID, PCI bus), so an engine built on GPU 3 has the id it would have on GPU 0.
IDENTITY_FACTS = ("device_name", "compute_capability", "driver")


def gpu_identity() -> Dict[str, str]:
    """The job's GPU as node ids see it (IDENTITY_FACTS)."""
    facts = gpu_facts()
    return {key: facts[key] for key in IDENTITY_FACTS}


def gpu_record() -> Dict[str, str]:
    """Which GPU a job ran on, for its node's record (not its id): index asked for, UUID, PCI bus."""
    facts = gpu_facts()
    return {"index": facts["gpu"], "uuid": facts.get("uuid", "unknown"), "pci_bus": facts.get("pci_bus", "unknown")}


def local_device_name(device: str) -> str:
    """The device an engine for `device` (auto/cpu/cuda) would be built on here."""
    if device == "cpu":
        return cpu_name()
    gpu = gpu_facts()["device_name"]
    return gpu if gpu != UNKNOWN_GPU or device == "cuda" else cpu_name()


def runs_on_gpu(target_def: Mapping[str, Any]) -> bool:
    """Whether a target's engines run on a GPU -- the one rule every part of precisionflow asks
    (engine settings, serving bound and batches, timing shares, GPU slots): `cuda` always, `cpu`
    never, `auto` where the machine asking has an NVIDIA GPU (for `local`, the machine that plans
    and runs it)."""
    device = target_def["device"]
    return device == "cuda" or (device == "auto" and has_nvidia_gpu())


def has_nvidia_gpu() -> bool:
    return gpu_facts()["device_name"] != UNKNOWN_GPU


def check_device(runtime: Dict[str, Any], target_def: Dict[str, Any]) -> None:
    """Refuse to build for a target whose expected device is not the one found here."""
    expected = target_def.get("expect_device") or ""
    if expected and expected.lower() not in runtime["device_name"].lower():
        raise EngineMismatchError(
            f"This target expects a device named like '{expected}', found '{runtime['device_name']}' "
            f"({runtime['device']}). Run the build on such a machine (see the target's resources) or use target 'local'."
        )
