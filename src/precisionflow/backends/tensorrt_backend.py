"""TensorRT backend, written against the public Python API of TensorRT 10.x and 11.x.

The network is strongly typed: the engine runs in the types of the precision graph (TensorRT 11
has no other mode; 10.x gets the STRONGLY_TYPED flag), so fp16/int8 come from quantize_onnx, not
from builder flags. TF32 is cleared so the fp32 engine is a true fp32 baseline. One optimisation
profile per input (min/opt/max batch, and spatial size where the graph leaves it dynamic); a
timing cache per (GPU, TensorRT version), shared by every build on that target (locked to read
and to merge, not during the build);
the engine inspector's layer information saved as JSON.

Everything above `build` is pure logic, tested without TensorRT; build/load need `tensorrt` and
`cuda-python` (pip install tensorrt cuda-python, from NVIDIA's index) and an NVIDIA GPU.
"""

import json
import re
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from precisionflow.backends import executed
from precisionflow.backends.devices import check_device, gpu_facts
from precisionflow.errors import ConfigError, EngineMismatchError, PrecisionflowError

ENGINE_FILE = "engine.plan"
INSPECTOR_FILE = "inspector.json"
SUPPORTED_MAJORS = (10, 11)


class TensorRTUnavailable(PrecisionflowError):
    """tensorrt (or cuda-python) does not import here."""


def parse_version(version: str) -> Tuple[int, int, int]:
    parts = [int(p) for p in re.findall(r"\d+", version)[:3]]
    return tuple(parts + [0] * (3 - len(parts)))  # type: ignore[return-value]


def check_version(version: str) -> Tuple[int, int, int]:
    parsed = parse_version(version)
    if parsed[0] not in SUPPORTED_MAJORS:
        raise EngineMismatchError(
            f"TensorRT {version} found; expected 10.x or 11.x (explicit quantization, strongly typed "
            "networks). Install tensorrt 10 or 11, or use engine=onnxruntime."
        )
    return parsed


def int8_over_fp16(precision: str, engine_params: Dict[str, Any], version: str) -> bool:
    """An int8 engine whose unquantized layers may run in fp16 (what `trtexec --int8 --fp16` builds):
    TensorRT 10 only, in a weakly typed network; TensorRT 11 is always strongly typed, so there
    those layers run in the graph's own types (fp32)."""
    return (precision.startswith("int8") and bool(engine_params.get("trt_int8_fp16"))
            and check_version(version)[0] == 10)


def network_flag_names(version: str, precision: str = "fp32", engine_params: Optional[Dict[str, Any]] = None) -> List[str]:
    """NetworkDefinitionCreationFlag names to set: STRONGLY_TYPED on 10.x (11.x is always strongly
    typed), except for an int8 engine allowed fp16 layers."""
    if check_version(version)[0] != 10 or int8_over_fp16(precision, engine_params or {}, version):
        return []
    return ["STRONGLY_TYPED"]


def builder_flag_changes(precision: str, engine_params: Dict[str, Any], version: str = "10") -> Dict[str, bool]:
    """BuilderFlag name -> set (True) / clear (False). In a strongly typed network the graph carries
    the types (no FP16/INT8 flags); an int8 engine allowed fp16 layers sets both."""
    changes = {"TF32": precision != "fp32"}  # TF32 is on by default; a true fp32 baseline clears it
    if int8_over_fp16(precision, engine_params, version):
        changes.update(INT8=True, FP16=True)
    if engine_params.get("sparse_weights"):
        changes["SPARSE_WEIGHTS"] = True
    return changes


def profile_shapes(input_shape: Sequence, engine_params: Dict[str, Any]) -> Dict[str, Tuple[int, ...]]:
    """min/opt/max shapes of one input whose dims are ints or symbolic (None/-1/str).

    The first dim is the batch (min_batch/opt_batch/max_batch); other dynamic dims take the
    matching entry of min/opt/max_spatial (e.g. [H, W] for NHWC images).
    """
    shapes = {}
    for which in ("min", "opt", "max"):
        spatial = list(engine_params.get(f"{which}_spatial") or [])
        dims = [engine_params[f"{which}_batch"]]
        for dim in input_shape[1:]:
            if isinstance(dim, int) and dim > 0:
                dims.append(dim)
            elif spatial:
                dims.append(int(spatial.pop(0)))
            else:
                raise ConfigError(f"engine.{which}_spatial: the graph input {list(input_shape)} has a dynamic "
                                  "non-batch dimension; list its sizes in engine.min/opt/max_spatial.")
        shapes[which] = tuple(dims)
    if not shapes["min"] <= shapes["opt"] <= shapes["max"] or not all(
            a <= b <= c for a, b, c in zip(shapes["min"], shapes["opt"], shapes["max"])):
        raise ConfigError(f"engine profile: expected min <= opt <= max in every dimension, found {shapes}.")
    return shapes


def timing_cache_path(cache_root: Path, device_name: str, version: str) -> Path:
    """One timing cache per (GPU model, exact TensorRT version): caches are tied to both."""
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", device_name).strip("-")
    return Path(cache_root) / "trt-timing" / f"{slug}-trt{version}.cache"


def describe(version: str, gpu: Dict[str, str], precision: str, profiles, engine_params, seconds: float, size: int) -> Dict[str, Any]:
    return {"backend": "tensorrt", "backend_version": version, "device": "cuda", **gpu, "precision": precision,
            "profiles": {name: {k: list(v) for k, v in shapes.items()} for name, shapes in profiles.items()},
            "builder_optimization_level": engine_params["trt_builder_optimization_level"],
            "builder_flags": builder_flag_changes(precision, engine_params, version),
            "network_flags": network_flag_names(version, precision, engine_params), "engine_file": ENGINE_FILE,
            "engine_bytes": size, "build_seconds": round(seconds, 3)}


def check_provenance(description: Dict[str, Any], current_version: str, current_gpu: Dict[str, str], engine_dir) -> None:
    """TensorRT engines run only on the GPU model and TensorRT version they were built with."""
    for key, found in (("backend_version", current_version), ("device_name", current_gpu["device_name"])):
        if description[key] != found:
            raise EngineMismatchError(
                f"TensorRT engine {engine_dir} was built with {key} '{description[key]}', this machine has "
                f"'{found}'. Rebuild it here (precisionflow run with this machine's target) or run it where it was built."
            )


# ---- runtime: needs tensorrt + cuda-python + a GPU -------------------------------------------

def _trt():
    """The tensorrt module, or an actionable error. (Callers import it by name afterwards so that
    mypy checks their use of the API against tensorrt-stubs: `make typecheck`.)"""
    try:
        import tensorrt

        return tensorrt
    except ImportError as err:
        raise TensorRTUnavailable(
            "engine.backend=tensorrt needs the tensorrt package (pip install tensorrt from NVIDIA's index; "
            f"PyPI alone ships only a stub) and an NVIDIA GPU; import failed: {err}"
        ) from err


def _graph_inputs(graph_path: Path) -> Dict[str, list]:
    import onnx

    model = onnx.load(str(graph_path), load_external_data=False)
    return {i.name: [d.dim_value if d.HasField("dim_value") else None for d in i.type.tensor_type.shape.dim]
            for i in model.graph.input}


def _network(builder, logger, graph_path: Path, version: str, precision: str, engine_params: Dict[str, Any]):
    import tensorrt as trt

    flags = 0
    for name in network_flag_names(version, precision, engine_params):
        flags |= 1 << int(getattr(trt.NetworkDefinitionCreationFlag, name))
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(graph_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise EngineMismatchError(f"TensorRT {version} could not parse {graph_path}: {errors}")
    return network, parser


def _config(builder, precision: str, engine_params, profiles, version: str):
    import tensorrt as trt

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, engine_params["trt_workspace_mb"] << 20)
    config.builder_optimization_level = engine_params["trt_builder_optimization_level"]
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    for name, enable in builder_flag_changes(precision, engine_params, version).items():
        (config.set_flag if enable else config.clear_flag)(getattr(trt.BuilderFlag, name))
    profile = builder.create_optimization_profile()
    for name, shapes in profiles.items():
        profile.set_shape(name, shapes["min"], shapes["opt"], shapes["max"])
    config.add_optimization_profile(profile)
    return config


def build(graph_path: Path, out_dir: Path, engine_params: Dict[str, Any], target_def: Dict[str, Any],
          precision: str = "fp32", cache_root: Optional[Path] = None) -> Dict[str, Any]:
    _trt()
    import tensorrt as trt

    version = trt.__version__
    check_version(version)
    gpu = gpu_facts()
    check_device({**gpu, "device": "cuda"}, target_def)
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network, _parser = _network(builder, logger, graph_path, version, precision, engine_params)
    profiles = {name: profile_shapes(shape, engine_params) for name, shape in _graph_inputs(graph_path).items()}
    config = _config(builder, precision, engine_params, profiles, version)
    cache_file = timing_cache_path(cache_root or Path(out_dir).parent.parent / ".cache", gpu["device_name"], version)
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    # Builds on one GPU model share (and grow) one cache, read before the build and merged into
    # after it: parallel builds (a sweep on a cluster) do not wait for each other's builds, and
    # none loses the others' timings.
    cache = config.create_timing_cache(read_shared(cache_file))
    config.set_timing_cache(cache, ignore_mismatch=False)
    started = time.perf_counter()
    serialized = builder.build_serialized_network(network, config)
    seconds = time.perf_counter() - started
    if serialized is None:
        raise EngineMismatchError(f"TensorRT {version} failed to build {graph_path} (see the log above).")
    merge_shared(cache_file, lambda current: _with_build_timings(config, current))
    engine_path = Path(out_dir) / ENGINE_FILE
    engine_path.write_bytes(bytes(serialized))
    inspector = _save_inspector(logger, bytes(serialized), Path(out_dir) / INSPECTOR_FILE)
    description = describe(version, gpu, precision, profiles, engine_params, seconds, engine_path.stat().st_size)
    return {**description, "executed": executed.label(precision, executed.trt_layer_types(inspector), "TensorRT")}


def _with_build_timings(config, current: bytes) -> bytes:
    """The shared cache as it is now, with this build's timings combined in."""
    merged = config.create_timing_cache(current)
    merged.combine(config.get_timing_cache(), False)
    return bytes(merged.serialize())


def read_shared(path: Path) -> bytes:
    """A file several jobs update (the timing cache), read under its lock: never half-written."""
    from filelock import FileLock

    with FileLock(str(path) + ".lock"):
        return path.read_bytes() if path.exists() else b""


def merge_shared(path: Path, merge: Callable[[bytes], bytes]) -> None:
    """Replace a shared file by merge(its current contents) under its lock, in one rename: concurrent
    writers take turns, and each merges into what the previous one wrote (none is lost)."""
    from filelock import FileLock

    with FileLock(str(path) + ".lock"):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(merge(path.read_bytes() if path.exists() else b""))
        tmp.replace(path)


def _save_inspector(logger, plan: bytes, path: Path) -> Dict[str, Any]:
    import tensorrt as trt

    engine = trt.Runtime(logger).deserialize_cuda_engine(plan)
    info = json.loads(engine.create_engine_inspector().get_engine_information(trt.LayerInformationFormat.JSON))
    path.write_text(json.dumps(info, indent=1))
    return info


def _cudart():
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        try:
            from cuda import cudart  # cuda-python < 12.6
        except ImportError as err:
            raise TensorRTUnavailable(f"the TensorRT backend needs cuda-python (pip install cuda-python): {err}") from err
    return cudart


def _check(result):
    error, *values = result
    if int(error) != 0:
        raise EngineMismatchError(f"CUDA call failed: {error}")
    return values[0] if len(values) == 1 else values


class _Context:
    """One execution context with its own CUDA stream and device buffers, allocated once per input
    shape and kept (a timing loop or a stream reuses them; they are freed with the context)."""

    def __init__(self, engine, description: Dict[str, Any], input_name: str, output_name: str):
        import tensorrt as trt

        self.trt, self.engine, self.description = trt, engine, description
        self.cudart = _cudart()
        self.context = engine.create_execution_context()
        self.stream = _check(self.cudart.cudaStreamCreate())
        self.input_name, self.output_name = input_name, output_name
        self.buffers: Dict[Tuple[int, ...], Tuple[int, int, np.ndarray]] = {}

    def __del__(self):
        for device_in, device_out, _ in getattr(self, "buffers", {}).values():
            self.cudart.cudaFree(device_in)
            self.cudart.cudaFree(device_out)

    def activate(self, shape: Tuple[int, ...]) -> Tuple[int, int, np.ndarray]:
        """Set the input shape (checked against the engine's profile) and bind that shape's buffers."""
        if not self.context.set_input_shape(self.input_name, shape):
            raise EngineMismatchError(
                f"TensorRT refused input shape {shape} for '{self.input_name}': outside the engine's profile "
                f"{self.description.get('profiles')}. Rebuild with engine.min/opt/max_batch covering it.")
        if shape not in self.buffers:
            out_shape = tuple(self.context.get_tensor_shape(self.output_name))
            host_out = np.empty(out_shape, dtype=self.trt.nptype(self.engine.get_tensor_dtype(self.output_name)))
            in_bytes = int(np.prod(shape)) * np.dtype(self.trt.nptype(self.engine.get_tensor_dtype(self.input_name))).itemsize
            self.buffers[shape] = (_check(self.cudart.cudaMalloc(in_bytes)), _check(self.cudart.cudaMalloc(host_out.nbytes)), host_out)
        device_in, device_out, host_out = self.buffers[shape]
        self.context.set_tensor_address(self.input_name, int(device_in))
        self.context.set_tensor_address(self.output_name, int(device_out))
        return device_in, device_out, host_out

    def _copy(self, dst, src, nbytes, kind):
        _check(self.cudart.cudaMemcpyAsync(dst, src, nbytes, kind, self.stream))

    def prepare(self, batch: np.ndarray, include_copies: bool = False):
        batch = np.ascontiguousarray(batch, dtype=self.trt.nptype(self.engine.get_tensor_dtype(self.input_name)))
        shape = tuple(batch.shape)
        device_in, device_out, host_out = self.activate(shape)
        to_device, to_host = self.cudart.cudaMemcpyKind.cudaMemcpyHostToDevice, self.cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self._copy(device_in, batch.ctypes.data, batch.nbytes, to_device)
        _check(self.cudart.cudaStreamSynchronize(self.stream))

        def run_once():
            self.activate(shape)  # another batch size may have been run on this context meanwhile
            if include_copies:
                self._copy(device_in, batch.ctypes.data, batch.nbytes, to_device)
            if not self.context.execute_async_v3(self.stream):
                raise EngineMismatchError(f"TensorRT could not enqueue the engine for input shape {shape}.")
            if include_copies:
                self._copy(host_out.ctypes.data, device_out, host_out.nbytes, to_host)
            _check(self.cudart.cudaStreamSynchronize(self.stream))
            return host_out

        return run_once


class TrtEngine:
    """A deserialized engine: one execution context for accuracy and batch timing, and one more
    context per concurrent stream on the same engine (trtexec --streams), never a second engine."""

    has_device_copies = True

    def __init__(self, engine, description):
        import tensorrt as trt

        self.engine, self.description = engine, description
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self.input_name = next(n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT)
        self.output_name = next(n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT)
        self.main = self.new_context()

    def new_context(self) -> _Context:
        return _Context(self.engine, self.description, self.input_name, self.output_name)

    def prepare(self, batch: np.ndarray, include_copies: bool = False):
        return self.main.prepare(batch, include_copies)

    def run(self, batch: np.ndarray) -> np.ndarray:
        return self.main.prepare(batch, include_copies=True)().copy()

    def stream_runners(self, batch: np.ndarray, count: int):
        contexts = [self.new_context() for _ in range(count)]
        self.stream_contexts = contexts  # kept alive (their buffers) while the streams run
        return [context.prepare(batch) for context in contexts], f"one engine, {count} execution contexts"


def load(engine_dir: Path, description: Dict[str, Any], target_def: Dict[str, Any], threads: Optional[int] = None) -> TrtEngine:
    _trt()
    import tensorrt as trt

    check_provenance(description, trt.__version__, gpu_facts(), engine_dir)
    logger = trt.Logger(trt.Logger.WARNING)
    engine = trt.Runtime(logger).deserialize_cuda_engine((Path(engine_dir) / description["engine_file"]).read_bytes())
    return TrtEngine(engine, description)


def describe_runtime(target_def: Dict[str, Any]) -> Dict[str, Any]:
    _trt()
    import tensorrt as trt

    return {"backend": "tensorrt", "backend_version": trt.__version__, "device": "cuda", **gpu_facts()}
