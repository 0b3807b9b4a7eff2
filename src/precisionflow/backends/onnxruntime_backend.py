"""ONNX Runtime backend: CPU, or CUDA where onnxruntime-gpu is installed.

"Building" an engine means letting ONNX Runtime optimise the precision graph for this device and
saving the optimised graph (engine.onnx); loading runs that file with optimisations off, so the
measured engine is exactly the built artifact. Imports only numpy and onnxruntime, so the GPU
machine (no TensorFlow there) can drive it from a small script.
"""

import time
from pathlib import Path
from typing import Any, Callable, Dict

import numpy as np

from precisionflow.backends.devices import check_device, cpu_name, gpu_facts
from precisionflow.errors import ConfigError, EngineMismatchError

ENGINE_FILE = "engine.onnx"
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


def _ort():
    import onnxruntime

    return onnxruntime


def resolve_device(target_def: Dict[str, Any]) -> str:
    """cpu or cuda: 'auto' takes CUDA when this onnxruntime build offers it."""
    available = _ort().get_available_providers()
    device = target_def.get("device", "auto")
    if device == "auto":
        return "cuda" if PROVIDERS["cuda"] in available else "cpu"
    if device not in PROVIDERS:
        raise ConfigError(f"target device: expected auto, cpu or cuda, found '{device}'.")
    if PROVIDERS[device] not in available:
        raise EngineMismatchError(
            f"The target asks for {device}, but this onnxruntime offers only {available}. "
            "Install onnxruntime-gpu (for cuda) or choose another target."
        )
    return device


def describe_runtime(target_def: Dict[str, Any]) -> Dict[str, Any]:
    device = resolve_device(target_def)
    facts = gpu_facts() if device == "cuda" else {"device_name": cpu_name(), "compute_capability": "n/a", "driver": "n/a"}
    return {"backend": "onnxruntime", "backend_version": _ort().__version__, "device": device, **facts}


def _providers(device: str):
    return [(PROVIDERS["cuda"], {"device_id": 0}), PROVIDERS["cpu"]] if device == "cuda" else [PROVIDERS["cpu"]]


def _session_options(level: str, threads: int, save_to: Path = None):
    ort = _ort()
    levels = {
        "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    if level not in levels:
        raise ConfigError(f"engine.optimization_level: expected one of {sorted(levels)}, found '{level}'.")
    options = ort.SessionOptions()
    options.graph_optimization_level = levels[level]
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    if save_to is not None:
        options.optimized_model_filepath = str(save_to)
    return options


def build(graph_path: Path, out_dir: Path, engine_params: Dict[str, Any], target_def: Dict[str, Any],
          precision: str = "fp32") -> Dict[str, Any]:
    runtime = describe_runtime(target_def)
    check_device(runtime, target_def)
    engine_path = Path(out_dir) / ENGINE_FILE
    options = _session_options(engine_params["optimization_level"], engine_params["intra_op_threads"], engine_path)
    started = time.perf_counter()
    _ort().InferenceSession(str(graph_path), options, providers=_providers(runtime["device"]))
    build_seconds = time.perf_counter() - started
    return {**runtime, "engine_file": ENGINE_FILE, "engine_bytes": engine_path.stat().st_size,
            "build_seconds": round(build_seconds, 4), "optimization_level": engine_params["optimization_level"],
            "intra_op_threads": engine_params["intra_op_threads"],
            "executed": executed_types(engine_path, precision, PROVIDERS[runtime["device"]])}


def executed_types(engine_path: Path, precision: str, provider: str) -> Dict[str, Any]:
    """The data types the optimised engine graph computes in (an fp16 graph on the CPU provider runs fp32)."""
    import onnx

    from precisionflow.backends import executed

    return executed.label(precision, executed.compute_op_types(onnx.load(str(engine_path))), provider)


def check_provenance(description: Dict[str, Any], target_def: Dict[str, Any], engine_dir: Path) -> None:
    """Refuse an engine built by another onnxruntime version or for another device."""
    current = describe_runtime({**target_def, "device": description["device"]})
    for key in ("backend_version", "device_name"):
        if description[key] != current[key]:
            raise EngineMismatchError(
                f"Engine {engine_dir} was built with {key} '{description[key]}', this machine has "
                f"'{current[key]}'. Rebuild it here (precisionflow run rebuilds it under a new "
                "target, or delete the engine folder), or run it where it was built."
            )


class OrtEngine:
    """A loaded engine: run() includes host<->device copies; prepare() times without them on GPU."""

    def __init__(self, session, description: Dict[str, Any]):
        self.session = session
        self.description = description
        self.input_name = session.get_inputs()[0].name
        self.output_name = session.get_outputs()[0].name
        self.has_device_copies = description["device"] == "cuda"

    def run(self, batch: np.ndarray) -> np.ndarray:
        return self.session.run([self.output_name], {self.input_name: batch})[0]

    def prepare(self, batch: np.ndarray, include_copies: bool = False) -> Callable[[], object]:
        """A no-argument callable running one inference on `batch`, for timing."""
        if self.description["device"] != "cuda" or include_copies:
            feeds = {self.input_name: batch}
            return lambda: self.session.run([self.output_name], feeds)
        ort = _ort()
        binding = self.session.io_binding()
        binding.bind_ortvalue_input(self.input_name, ort.OrtValue.ortvalue_from_numpy(batch, "cuda", 0))
        binding.bind_output(self.output_name, "cuda", 0)
        return lambda: self.session.run_with_iobinding(binding)


def load(engine_dir: Path, description: Dict[str, Any], target_def: Dict[str, Any], threads: int = None) -> OrtEngine:
    check_provenance(description, target_def, engine_dir)
    threads = threads or description.get("intra_op_threads", 1)
    # The saved graph is loaded at the level it was built with: on CUDA, some fusions ONNX Runtime
    # applies are not serialisable, and a saved graph run with optimisations off was measured
    # up to 40% slower than the same graph optimised at load (benchmarks/results/engines_cuda.json).
    options = _session_options(description.get("optimization_level", "all"), threads)
    session = _ort().InferenceSession(
        str(Path(engine_dir) / description["engine_file"]), options, providers=_providers(description["device"])
    )
    return OrtEngine(session, description)
