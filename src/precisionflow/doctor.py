"""`precisionflow doctor` and `precisionflow status`: what this machine can build and run, and
which existing engines no longer match it."""

import importlib.metadata
import os
from pathlib import Path
from typing import Any, Dict, List

from precisionflow.backends import BACKENDS, get_backend
from precisionflow.devices import cpu_name, gpu_facts
from precisionflow.errors import PrecisionflowError
from precisionflow.nodeio import read_json


def backend_lines() -> List[str]:
    lines = []
    for name in BACKENDS:
        try:
            runtime = get_backend(name).describe_runtime({"device": "auto"})
            extra = ""
            if name == "onnxruntime":
                import onnxruntime

                extra = f", providers {onnxruntime.get_available_providers()}"
            lines.append(f"  {name:<12} {runtime['backend_version']} -> {runtime['device']} ({runtime['device_name']}){extra}")
        except (PrecisionflowError, ImportError, OSError) as err:
            lines.append(f"  {name:<12} not usable: {err}")
    for package in ("tensorflow", "tf2onnx", "tensorflow-model-optimization", "mlflow", "snakemake"):
        try:
            lines.append(f"  {package:<12} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            lines.append(f"  {package:<12} not installed")
    return lines


def target_lines(cfg: Dict[str, Any]) -> List[str]:
    from precisionflow.devices import check_device

    backend = get_backend(cfg["engine"]["backend"]) if cfg["engine"]["backend"] in BACKENDS else None
    lines = []
    for name, target in cfg["target_defs"].items():
        try:
            runtime = backend.describe_runtime(target)
            check_device(runtime, target)
            lines.append(f"  {name:<8} {cfg['engine']['backend']} on {runtime['device']}: {runtime['device_name']}")
        except (PrecisionflowError, ImportError) as err:
            lines.append(f"  {name:<8} not buildable here: {err}")
    return lines


def doctor(cfg: Dict[str, Any]) -> str:
    gpu = gpu_facts()
    devices = [
        f"  CPU: {cpu_name()} ({os.cpu_count()} cores)",
        f"  GPU: {gpu['device_name']} (compute {gpu['compute_capability']}, driver {gpu['driver']})"
        if gpu["device_name"] != "unknown CUDA device"
        else "  GPU: none visible (nvidia-smi absent or no device)",
    ]
    return "\n".join(
        [
            "Devices:",
            *devices,
            "Backends and frameworks:",
            *backend_lines(),
            f"Targets (engine.backend={cfg['engine']['backend']}):",
            *target_lines(cfg),
        ]
    )


def engine_status(results: Path) -> List[Dict[str, str]]:
    """Every built engine under results/, with 'ok' or why it is stale for this machine's runtime."""
    rows = []
    for engine_json in sorted(Path(results).glob("build_engine/*/engine.json")):
        description = read_json(engine_json)
        state = "ok"
        try:
            backend = get_backend(description["backend"])
            current = backend.describe_runtime({"device": description["device"]})
            for key in ("backend_version", "device_name"):
                if current[key] != description[key]:
                    state = f"STALE: built with {key} {description[key]}, this machine has {current[key]}"
        except (PrecisionflowError, ImportError) as err:
            state = f"STALE: {err}"
        rows.append(
            {
                "engine": engine_json.parent.name,
                "backend": f"{description['backend']} {description['backend_version']}",
                "device": description["device_name"],
                "state": state,
            }
        )
    return rows
