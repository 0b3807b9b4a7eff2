"""Devices are slots: on a node with several GPUs, each GPU job holds one GPU for its lifetime.

Snakemake's `gpu` resource only limits how many jobs run at once; it never says which GPU a job
gets (Snakemake issue #281). Here a GPU job takes a lock file per GPU (<results>/.gpu-slots/
<uuid>.lock, an flock through filelock, released by the kernel when the holder dies: kill -9 a job
and the next one gets the GPU), then sees only that GPU (CUDA_VISIBLE_DEVICES=<uuid>). One job per
GPU: a timing job has its GPU to itself, the other GPUs keep working. Under SLURM the scheduler
assigns devices and nothing here runs.

Which GPUs: PRECISIONFLOW_GPUS (comma-separated UUIDs or indices the user allows), else every GPU
nvidia-smi lists. Devices are named by UUID: CUDA's index order and nvidia-smi's differ on hosts
with two GPU models.
"""

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional

ALLOWED_ENV = "PRECISIONFLOW_GPUS"
SLOT_FOLDER = ".gpu-slots"


@dataclass(frozen=True)
class Device:
    uuid: str
    index: str
    pci_bus: str
    name: str


def host_devices() -> List[Device]:
    """The GPUs nvidia-smi lists (none where it is absent)."""
    from precisionflow.devices import query_gpus

    fields = ("uuid", "index", "pci.bus_id", "name")
    return [Device(*(gpu[field] for field in fields)) for gpu in query_gpus(fields)]


def allowed_devices(found: Optional[List[Device]] = None, environ=os.environ) -> List[Device]:
    """The host's GPUs, less those PRECISIONFLOW_GPUS leaves out (by UUID or nvidia-smi index)."""
    found = host_devices() if found is None else found
    allowed = [entry.strip() for entry in environ.get(ALLOWED_ENV, "").split(",") if entry.strip()]
    return [device for device in found if not allowed or device.uuid in allowed or device.index in allowed]


@dataclass
class Slot:
    device: Device
    waited_s: float
    busy_others: List[str]  # the other GPUs' UUIDs held by jobs when this one started


def _lock(folder: Path, device: Device):
    from filelock import FileLock

    return FileLock(folder / f"{device.uuid}.lock", timeout=0)


def held(folder: Path, devices: List[Device]) -> List[str]:
    """UUIDs of the devices some process holds now (their lock cannot be taken)."""
    from filelock import Timeout

    busy = []
    for device in devices:
        lock = _lock(folder, device)
        try:
            lock.acquire()
            lock.release()
        except Timeout:
            busy.append(device.uuid)
    return busy


@contextlib.contextmanager
def slot(folder: Path, devices: List[Device], poll_s: float = 0.5, give_up_s: Optional[float] = None) -> Iterator[Slot]:
    """Hold one free device of `devices` while the block runs: the first whose lock can be taken;
    waits (polling) while all are held. The lock goes with the process if it dies."""
    from filelock import Timeout

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    while True:
        for device in devices:
            lock = _lock(folder, device)
            try:
                lock.acquire()
            except Timeout:
                continue
            try:
                others = [uuid for uuid in held(folder, [d for d in devices if d.uuid != device.uuid])]
                yield Slot(device, round(time.monotonic() - started, 3), others)
            finally:
                lock.release()
            return
        if give_up_s is not None and time.monotonic() - started > give_up_s:
            raise TimeoutError(f"no GPU of {[d.uuid for d in devices]} came free within {give_up_s} s")
        time.sleep(poll_s)


def needs_slot(spec: Dict, environ=os.environ) -> bool:
    """A node that runs an engine (its plan entry's `runs_engine`, from the stage table) of a
    target that runs on a GPU (devices.runs_on_gpu), outside SLURM (whose scheduler assigns devices)."""
    from precisionflow.devices import runs_on_gpu

    target_def = spec.get("params", {}).get("target_def")
    if not spec.get("runs_engine") or not target_def or "SLURM_JOB_ID" in environ:
        return False
    return runs_on_gpu(target_def)


@contextlib.contextmanager
def for_node(spec: Dict, results: Path) -> Iterator[Optional[Dict[str, object]]]:
    """Around a node's run: its GPU slot (and CUDA_VISIBLE_DEVICES) where it needs one and the host
    has GPUs; yields what to record in the node (device, wait, the GPUs busy beside it), or None."""
    devices = allowed_devices() if needs_slot(spec) else []
    if not devices:
        yield None
        return
    with slot(Path(results) / SLOT_FOLDER, devices) as taken:
        before = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = taken.device.uuid
        try:
            yield {
                "uuid": taken.device.uuid,
                "index": taken.device.index,
                "pci_bus": taken.device.pci_bus,
                "name": taken.device.name,
                "waited_s": taken.waited_s,
                "gpus_busy_beside": taken.busy_others,
                "gpus_allowed": len(devices),
            }
        finally:
            if before is None:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = before
