"""TensorRT backend, written against the public Python API of TensorRT 10.x and 11.x.

The network is strongly typed by default: the engine runs in the types of the precision graph
(TensorRT 11 has no other mode; 10.x gets the STRONGLY_TYPED flag), so fp16/int8 come from
quantize_onnx, not from builder flags; `engine.trt_int8_fp16` asks 10.x for weak typing of int8 /
int8_qat engines, and the label says so. TF32 is cleared so the fp32 engine is a true fp32
baseline. One optimisation profile per input (min/opt/max batch where the batch is dynamic, and
spatial size where the graph leaves it dynamic; fixed dimensions are kept). A timing cache per
(GPU, TensorRT version) is shared by every build on that target (locked to read and to merge, not
during the build); each engine records the cache state it was built with. The engine inspector's
layer information is saved as JSON and labels the engine from its compute layers.

Timing mirrors the ONNX Runtime backend: shapes and addresses are set once per batch size, outside
the timed region; the work is queued on the context's own CUDA stream and CUDA events around it
give the device's time. Every TensorRT call that can fail is checked. CUDA is reached through the
runtime library by ctypes (cuda_clock.py), so no cuda-python is needed.

Everything above `build` is pure logic, tested without TensorRT; build/load need `tensorrt`
(pip install tensorrt, from NVIDIA's index) and an NVIDIA GPU.
"""

import json
import re
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from precisionflow.backends import executed
from precisionflow.devices import check_device, gpu_facts, gpu_identity
from precisionflow.errors import ConfigError, EngineMismatchError, PrecisionflowError, StageError

ENGINE_FILE = "engine.plan"
INSPECTOR_FILE = "inspector.json"
SUPPORTED_MAJORS = (10, 11)


class TensorRTUnavailable(PrecisionflowError):
    """tensorrt (or the CUDA runtime library) cannot be loaded here."""


class TensorRTCallFailed(StageError):
    """A TensorRT call returned its failure value (None, False, -1): what failed and what to do."""


def checked(result, call: str, advice: str):
    """`result` unless it is a failure value of TensorRT's API (None, False or a negative index)."""
    if result is None or result is False or (isinstance(result, int) and not isinstance(result, bool) and result < 0):
        raise TensorRTCallFailed(f"TensorRT's {call} failed (returned {result!r}). {advice}")
    return result


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
    only when asked (engine.trt_int8_fp16), only TensorRT 10 (a weakly typed network), never
    int8_mixed. TensorRT 11 is always strongly typed: those layers run in the graph's types."""
    from precisionflow import precisions

    weak = precisions.get(precision).tensorrt.weak_typing  # never int8_mixed: its float ops were chosen in fp32
    return weak and bool(engine_params.get("trt_int8_fp16")) and check_version(version)[0] == 10


def typing_of(precision: str, engine_params: Dict[str, Any], version: str) -> str:
    """What the engine's label says about how its layer types were chosen."""
    if int8_over_fp16(precision, engine_params, version):
        return "weakly typed (TensorRT 10, int8 + fp16 allowed: unquantized layers may run fp16)"
    return "strongly typed (the graph's types)"


def network_flag_names(version: str, precision: str = "fp32", engine_params: Optional[Dict[str, Any]] = None) -> List[str]:
    """NetworkDefinitionCreationFlag names to set: STRONGLY_TYPED on 10.x (11.x is always strongly
    typed), except for an int8 engine allowed fp16 layers."""
    if check_version(version)[0] != 10 or int8_over_fp16(precision, engine_params or {}, version):
        return []
    return ["STRONGLY_TYPED"]


TRT10_WEAK_TYPING_FLAGS = ("INT8", "FP16")  # removed in TensorRT 11: set only on 10.x, by int8_over_fp16


def builder_flag_changes(precision: str, engine_params: Dict[str, Any], version: str = "10") -> Dict[str, bool]:
    """BuilderFlag name -> set (True) / clear (False). In a strongly typed network the graph carries
    the types (no FP16/INT8 flags); an int8 engine allowed fp16 layers sets both."""
    from precisionflow import precisions

    changes = {
        "TF32": not precisions.get(precision).tensorrt.clears_tf32
    }  # TF32 is on by default; a true fp32 baseline clears it
    if int8_over_fp16(precision, engine_params, version):
        changes.update({name: True for name in TRT10_WEAK_TYPING_FLAGS})
    if engine_params.get("sparse_weights"):
        changes["SPARSE_WEIGHTS"] = True
    return changes


def profile_shapes(input_shape: Sequence, engine_params: Dict[str, Any]) -> Dict[str, Tuple[int, ...]]:
    """min/opt/max shapes of one input whose dims are ints or symbolic (None/-1/str).

    The first dim is the batch: a dynamic batch takes min_batch/opt_batch/max_batch, a fixed one
    stays what the graph says (a profile may not change a fixed dimension: set_shape would fail).
    Other dynamic dims take the matching entry of min/opt/max_spatial (e.g. [H, W] for NHWC images).
    """
    shapes = {}
    fixed_batch = input_shape[0] if input_shape and isinstance(input_shape[0], int) and input_shape[0] > 0 else None
    for which in ("min", "opt", "max"):
        spatial = list(engine_params.get(f"{which}_spatial") or [])
        dims = [fixed_batch or engine_params[f"{which}_batch"]]
        for dim in input_shape[1:]:
            if isinstance(dim, int) and dim > 0:
                dims.append(dim)
            elif spatial:
                dims.append(int(spatial.pop(0)))
            else:
                raise ConfigError(
                    f"engine.{which}_spatial: the graph input {list(input_shape)} has a dynamic "
                    "non-batch dimension; list its sizes in engine.min/opt/max_spatial."
                )
        shapes[which] = tuple(dims)
    if not shapes["min"] <= shapes["opt"] <= shapes["max"] or not all(
        a <= b <= c for a, b, c in zip(shapes["min"], shapes["opt"], shapes["max"], strict=True)
    ):
        raise ConfigError(f"engine profile: expected min <= opt <= max in every dimension, found {shapes}.")
    return shapes


def timing_cache_path(cache_root: Path, device_name: str, version: str) -> Path:
    """One timing cache per (GPU model, exact TensorRT version): caches are tied to both."""
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", device_name).strip("-")
    return Path(cache_root) / "trt-timing" / f"{slug}-trt{version}.cache"


def timing_cache_state(cache_file: Path, contents: bytes) -> Dict[str, Any]:
    """What a build read from the shared timing cache, recorded in its engine.json: the cache lives
    outside node folders (results/.cache, shared by one GPU model and TensorRT version), so the
    node says which state of it the build saw."""
    import hashlib

    return {
        "file": f".cache/{cache_file.parent.name}/{cache_file.name}",
        "bytes_read": len(contents),
        "sha256_read": hashlib.sha256(contents).hexdigest() if contents else None,
    }


def describe(
    version: str, gpu: Dict[str, str], precision: str, profiles, engine_params, seconds: float, size: int
) -> Dict[str, Any]:
    return {
        "backend": "tensorrt",
        "backend_version": version,
        "device": "cuda",
        **gpu,
        "precision": precision,
        "typing": typing_of(precision, engine_params, version),
        "profiles": {name: {k: list(v) for k, v in shapes.items()} for name, shapes in profiles.items()},
        "builder_optimization_level": engine_params["trt_builder_optimization_level"],
        "builder_flags": builder_flag_changes(precision, engine_params, version),
        "network_flags": network_flag_names(version, precision, engine_params),
        "engine_file": ENGINE_FILE,
        "engine_bytes": size,
        "build_seconds": round(seconds, 3),
    }


def check_provenance(description: Dict[str, Any], current_version: str, current_gpu: Dict[str, str], engine_dir) -> None:
    """TensorRT engines run only on the GPU model and TensorRT version they were built with."""
    for key, found in (("backend_version", current_version), ("device_name", current_gpu["device_name"])):
        if description[key] != found:
            raise EngineMismatchError(
                f"TensorRT engine {engine_dir} was built with {key} '{description[key]}', this machine has "
                f"'{found}'. Rebuild it here (precisionflow run with this machine's target) or run it where it was built."
            )


# ---- runtime: needs tensorrt + the CUDA runtime library + a GPU ---------------------------------


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


def _cudart():
    from precisionflow.backends.cuda_clock import load_cudart

    cudart = load_cudart()
    if cudart is None:
        raise TensorRTUnavailable(
            "the TensorRT backend needs the CUDA runtime library (libcudart.so.12/13 on the "
            "library path, e.g. pip install nvidia-cuda-runtime-cu12); none could be loaded."
        )
    return cudart


def _graph_inputs(graph_path: Path) -> Dict[str, list]:
    import onnx

    model = onnx.load(str(graph_path), load_external_data=False)
    initializers = {init.name for init in model.graph.initializer}
    return {
        i.name: [d.dim_value if d.HasField("dim_value") else None for d in i.type.tensor_type.shape.dim]
        for i in model.graph.input
        if i.name not in initializers
    }


def _network(builder, logger, graph_path: Path, version: str, precision: str, engine_params: Dict[str, Any]):
    import tensorrt as trt

    flags = 0
    for name in network_flag_names(version, precision, engine_params):
        flags |= 1 << int(getattr(trt.NetworkDefinitionCreationFlag, name))
    network = checked(builder.create_network(flags), "Builder.create_network", "Check the TensorRT installation.")
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
    checked(
        config.add_optimization_profile(profile),
        "BuilderConfig.add_optimization_profile",
        f"The profile {profiles} is not valid for this graph: check engine.min/opt/max_batch and *_spatial "
        "against the graph's input shapes.",
    )
    return config


def build(
    graph_path: Path,
    out_dir: Path,
    engine_params: Dict[str, Any],
    target_def: Dict[str, Any],
    precision: str = "fp32",
    cache_root: Optional[Path] = None,
) -> Dict[str, Any]:
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
    cached = read_shared(cache_file)
    cache = checked(
        config.create_timing_cache(cached),
        "BuilderConfig.create_timing_cache",
        f"The shared timing cache {cache_file} may be damaged: delete it (it only saves build time).",
    )
    checked(
        config.set_timing_cache(cache, ignore_mismatch=False),
        "BuilderConfig.set_timing_cache",
        f"{cache_file} was made by another GPU or TensorRT version: delete it (it only saves build time).",
    )
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
    description["timing_cache"] = timing_cache_state(cache_file, cached)
    return {
        **description,
        "executed": executed.label(precision, executed.trt_layer_types(inspector), "TensorRT", description["typing"]),
    }


def _with_build_timings(config, current: bytes) -> bytes:
    """The shared cache as it is now, with this build's timings combined in."""
    merged = checked(
        config.create_timing_cache(current),
        "BuilderConfig.create_timing_cache",
        "Delete the shared timing cache (it only saves build time) and build again.",
    )
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


def deserialized(runtime, plan: bytes, where: str):
    """An engine from its bytes; None from TensorRT means the plan does not fit this runtime or GPU."""
    return checked(
        runtime.deserialize_cuda_engine(plan),
        "Runtime.deserialize_cuda_engine",
        f"{where} was not built by this TensorRT version for this GPU (or is damaged): delete the "
        "engine folder and run again to rebuild it here.",
    )


def _save_inspector(logger, plan: bytes, path: Path) -> Dict[str, Any]:
    import tensorrt as trt

    engine = deserialized(trt.Runtime(logger), plan, "the engine just built")
    inspector = checked(
        engine.create_engine_inspector(), "ICudaEngine.create_engine_inspector", "Check the TensorRT installation."
    )
    info = json.loads(inspector.get_engine_information(trt.LayerInformationFormat.JSON))
    path.write_text(json.dumps(info, indent=1))
    return info


class _Buffers:
    """Device memory and host arrays for every input and output of one set of input shapes."""

    def __init__(self, cudart, shapes: Dict[str, Tuple[int, ...]], dtypes: Dict[str, Any]):
        from precisionflow.backends.cuda_clock import DeviceBuffer

        self.host = {name: np.empty(shape, dtype=dtypes[name]) for name, shape in shapes.items()}
        self.device = {name: DeviceBuffer(cudart, array.nbytes) for name, array in self.host.items()}

    def close(self) -> None:
        for buffer in self.device.values():
            buffer.close()


class _Context:
    """One execution context with its own CUDA stream (and events), and device buffers per set of
    input shapes, allocated once and kept: a timing loop or a stream reuses them, close() frees them."""

    def __init__(self, engine, description: Dict[str, Any], inputs: List[str], outputs: List[str]):
        import tensorrt as trt

        from precisionflow.backends.cuda_clock import CudaClock

        self.trt, self.engine, self.description = trt, engine, description
        self.inputs, self.outputs = inputs, outputs
        self.cudart = _cudart()
        self.context = checked(
            engine.create_execution_context(),
            "ICudaEngine.create_execution_context",
            "The GPU may be out of memory (other jobs on it?): see nvidia-smi.",
        )
        self.clock = CudaClock(self.cudart)  # the context's stream, and the events that time its work
        self.buffers: Dict[tuple, _Buffers] = {}
        self.bound: Optional[tuple] = None

    def dtype(self, name: str):
        return self.trt.nptype(self.engine.get_tensor_dtype(name))

    def bind(self, shapes: Dict[str, Tuple[int, ...]]) -> _Buffers:
        """Set the input shapes (checked against the profile) and every tensor's address. Called
        when the shapes change, never inside a timed run."""
        key = tuple(sorted(shapes.items()))
        for name, shape in shapes.items():
            if not self.context.set_input_shape(name, shape):
                raise EngineMismatchError(
                    f"TensorRT refused input shape {shape} for '{name}': outside the engine's profile "
                    f"{self.description.get('profiles')}. Rebuild with engine.min/opt/max_batch covering it."
                )
        if key not in self.buffers:
            every = {**shapes, **{name: tuple(self.context.get_tensor_shape(name)) for name in self.outputs}}
            self.buffers[key] = _Buffers(self.cudart, every, {name: self.dtype(name) for name in every})
        buffers = self.buffers[key]
        for name, device in buffers.device.items():
            checked(
                self.context.set_tensor_address(name, device.address),
                "IExecutionContext.set_tensor_address",
                f"TensorRT did not accept the device buffer of '{name}'.",
            )
        self.bound = key
        return buffers

    def feeds(self, batch) -> Dict[str, np.ndarray]:
        """{input name: contiguous array of its type}: a single input takes an array, several a dict."""
        given = batch if isinstance(batch, dict) else {self.inputs[0]: batch}
        if set(given) != set(self.inputs):
            raise ConfigError(f"this TensorRT engine has inputs {self.inputs}; expected one array each, found {sorted(given)}.")
        return {name: np.ascontiguousarray(array, dtype=self.dtype(name)) for name, array in given.items()}

    def _enqueue(self) -> None:
        if not self.context.execute_async_v3(self.clock.stream_pointer):
            raise TensorRTCallFailed(
                "TensorRT's IExecutionContext.execute_async_v3 could not enqueue the engine "
                f"(bound shapes {self.bound}); see TensorRT's log above."
            )

    def prepare(self, batch, include_copies: bool = False):
        """A callable running one inference. Without copies the inputs stay on the device and the
        callable returns the device's seconds (CUDA events on this context's stream); with copies
        it returns the outputs, timed by the host clock."""
        feeds = self.feeds(batch)
        shapes = {name: tuple(array.shape) for name, array in feeds.items()}
        key = tuple(sorted(shapes.items()))
        buffers = self.bind(shapes)
        stream = self.clock.stream

        def upload() -> None:
            for name, array in feeds.items():
                buffers.device[name].copy_from_host(array.ctypes.data, array.nbytes, stream)

        upload()
        self.clock.synchronize()

        def rebind_if_needed() -> None:  # another batch size ran on this context meanwhile
            if self.bound != key:
                self.bind(shapes)

        def timed_on_device() -> float:
            rebind_if_needed()
            return self.clock.time(self._enqueue)

        def with_copies() -> Dict[str, np.ndarray]:
            rebind_if_needed()
            upload()
            self._enqueue()
            for name in self.outputs:
                host = buffers.host[name]
                buffers.device[name].copy_to_host(host.ctypes.data, host.nbytes, stream)
            self.clock.synchronize()
            return buffers.host

        return with_copies if include_copies else timed_on_device

    def close(self) -> None:
        for buffers in self.buffers.values():
            buffers.close()
        self.buffers = {}
        self.clock.close()


class TrtEngine:
    """A deserialized engine: one execution context for accuracy and batch timing, and one more
    context per concurrent stream on the same engine (trtexec --streams), never a second engine.
    Every input and output is bound; run() returns the first output."""

    has_device_copies = True
    device_timed = True

    def __init__(self, engine, description):
        import tensorrt as trt

        self.engine, self.description = engine, description
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self.inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        self.main = self.new_context()
        self.stream_contexts: List[_Context] = []

    def clock_name(self) -> str:
        return "device (CUDA events on the engine's stream)"

    def new_context(self) -> _Context:
        return _Context(self.engine, self.description, self.inputs, self.outputs)

    def prepare(self, batch, include_copies: bool = False):
        return self.main.prepare(batch, include_copies)

    def run(self, batch) -> np.ndarray:
        return self.main.prepare(batch, include_copies=True)()[self.outputs[0]].copy()

    def stream_runners(self, batch, count: int):
        self.close_streams()
        self.stream_contexts = [self.new_context() for _ in range(count)]  # kept alive while the streams run
        return [context.prepare(batch) for context in self.stream_contexts], f"one engine, {count} execution contexts"

    def close_streams(self) -> None:
        for context in self.stream_contexts:
            context.close()
        self.stream_contexts = []

    def close(self) -> None:
        self.close_streams()
        self.main.close()


def load(engine_dir: Path, description: Dict[str, Any], target_def: Dict[str, Any], threads: Optional[int] = None) -> TrtEngine:
    _trt()
    import tensorrt as trt

    check_provenance(description, trt.__version__, gpu_facts(), engine_dir)
    logger = trt.Logger(trt.Logger.WARNING)
    plan = (Path(engine_dir) / description["engine_file"]).read_bytes()
    return TrtEngine(deserialized(trt.Runtime(logger), plan, f"{engine_dir}/{description['engine_file']}"), description)


def describe_runtime(target_def: Dict[str, Any]) -> Dict[str, Any]:
    _trt()
    import tensorrt as trt

    return {"backend": "tensorrt", "backend_version": trt.__version__, "device": "cuda", **gpu_identity()}
