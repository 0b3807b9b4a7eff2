"""ONNX Runtime backend: CPU, or CUDA where onnxruntime-gpu is installed.

"Building" an engine means letting ONNX Runtime optimise the precision graph for this device and
saving the optimised graph (engine.onnx); loading runs that file with the same settings, so the
measured engine is the built artifact. Imports only numpy and onnxruntime (and, on a GPU, the CUDA
runtime through ctypes), so a lean GPU node (no TensorFlow there) runs it.

On CUDA the provider options that decide speed (engine.onnxruntime: NHWC layout, CUDA graphs,
cuDNN algorithm search, TF32) are part of the engine: recorded in engine.json and its node id.
Inputs and outputs live in device buffers bound once per batch size (IO binding); with CUDA
graphs, one graph is captured per batch size and replayed. Latency is timed on the device with
CUDA events (cuda_clock.py); concurrent streams share one loaded engine, each thread with its own
bound buffers (without CUDA graphs there: ONNX Runtime's graphs are not for concurrent use).
"""

import functools
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from precisionflow.devices import check_device, cpu_name, gpu_identity
from precisionflow.errors import ConfigError, EngineMismatchError

ENGINE_FILE = "engine.onnx"
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


def _ort():
    import onnxruntime

    return onnxruntime


@functools.lru_cache(maxsize=None)
def _load_gpu_libraries() -> None:
    """onnxruntime-gpu finds CUDA/cuDNN from pip's nvidia-* packages only after preload_dlls();
    where they are installed system-wide (LD_LIBRARY_PATH), it finds them either way."""
    preload = getattr(_ort(), "preload_dlls", None)
    if preload is not None:
        try:
            preload()
        except Exception:  # noqa: S110 -- best effort; a missing library surfaces when the session starts
            pass


def resolve_device(target_def: Dict[str, Any]) -> str:
    """cpu or cuda: 'auto' takes CUDA when this onnxruntime build offers it."""
    available = _ort().get_available_providers()
    if PROVIDERS["cuda"] in available:
        _load_gpu_libraries()
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
    facts = gpu_identity() if device == "cuda" else {"device_name": cpu_name(), "compute_capability": "n/a", "driver": "n/a"}
    return {"backend": "onnxruntime", "backend_version": _ort().__version__, "device": device, **facts}


ALGO_SEARCH = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")


def cuda_provider_options(cuda: Optional[Dict[str, Any]], stream_pointer: int = 0) -> Dict[str, str]:
    """CUDAExecutionProvider options from engine.onnxruntime (None: the provider's defaults)."""
    options = {"device_id": "0"}
    if cuda:
        if cuda["cudnn_conv_algo_search"] not in ALGO_SEARCH:
            raise ConfigError(
                f"engine.onnxruntime.cudnn_conv_algo_search: expected one of {list(ALGO_SEARCH)}, "
                f"found '{cuda['cudnn_conv_algo_search']}'."
            )
        options.update(
            prefer_nhwc=str(int(cuda["prefer_nhwc"])),
            enable_cuda_graph=str(int(cuda["cuda_graph"])),
            cudnn_conv_algo_search=cuda["cudnn_conv_algo_search"],
            use_tf32=str(int(cuda["use_tf32"])),
        )
        if cuda.get("fuse_conv_bias"):  # only when on: engines built before the option keep their options
            options["fuse_conv_bias"] = "1"
    if stream_pointer:
        options.update(has_user_compute_stream="1", user_compute_stream=str(stream_pointer))
    return options


def _providers(device: str, cuda: Optional[Dict[str, Any]] = None, stream_pointer: int = 0):
    if device != "cuda":
        return [PROVIDERS["cpu"]]
    return [(PROVIDERS["cuda"], cuda_provider_options(cuda, stream_pointer)), PROVIDERS["cpu"]]


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


def build(
    graph_path: Path, out_dir: Path, engine_params: Dict[str, Any], target_def: Dict[str, Any], precision: str = "fp32"
) -> Dict[str, Any]:
    runtime = describe_runtime(target_def)
    check_device(runtime, target_def)
    engine_path = Path(out_dir) / ENGINE_FILE
    options = _session_options(engine_params["optimization_level"], engine_params["intra_op_threads"], engine_path)
    started = time.perf_counter()
    cuda = engine_params.get("cuda") if runtime["device"] == "cuda" else None
    graph_refused = None

    def attempt(settings):
        nonlocal graph_refused
        settings, graph_refused = _optimise_and_save(graph_path, options, runtime["device"], settings)
        return settings, _first_inference_error(engine_path, engine_params["optimization_level"], runtime["device"], settings)

    cuda, nhwc_refused = built_without_refused_nhwc(attempt, cuda, engine_path)
    largest = int(engine_params.get("max_batch") or 128)  # the engine's largest batch (the H200 evidence: b128)
    rate = lambda settings: images_per_second(  # noqa: E731
        engine_path, engine_params["optimization_level"], settings, batch=largest
    )
    cuda, fusion_search = kept_conv_bias_fusion(attempt, cuda, rate, largest)
    build_seconds = time.perf_counter() - started
    return {
        **runtime,
        "engine_file": ENGINE_FILE,
        "engine_bytes": engine_path.stat().st_size,
        "build_seconds": round(build_seconds, 4),
        "optimization_level": engine_params["optimization_level"],
        "intra_op_threads": engine_params["intra_op_threads"],
        "cuda_options": cuda_provider_options(cuda) if runtime["device"] == "cuda" else None,
        "cuda_settings": cuda,
        "cuda_graph_refused": graph_refused,
        "nhwc_refused": nhwc_refused,
        "conv_bias_fusion": fusion_search,
        "executed": executed_types(engine_path, precision, PROVIDERS[runtime["device"]]),
    }


def _session(path: Path, options, providers):
    """Every session of an engine: ops its graph keeps in float stay float (qdq.ORT_DISABLED_OPTIMIZERS)."""
    from precisionflow.quant.qdq import ORT_DISABLED_OPTIMIZERS

    return _ort().InferenceSession(str(path), options, providers=providers, disabled_optimizers=ORT_DISABLED_OPTIMIZERS)


def _optimise_and_save(graph_path: Path, options, device: str, cuda: Optional[Dict[str, Any]]):
    """Let ONNX Runtime optimise the graph and save it; (the CUDA settings the engine really has,
    why CUDA graphs were refused or None). A graph with nodes left to the CPU provider (e.g. Q/DQ
    pairs the CUDA provider has no kernel for) cannot be captured: that engine is built without
    a CUDA graph and says so in engine.json and the table, instead of failing the sweep."""
    try:
        _session(graph_path, options, _providers(device, cuda))
        return cuda, None
    except Exception as err:  # noqa: BLE001 -- onnxruntime raises its own exception types
        if not (cuda and cuda["cuda_graph"] and "graph capture" in str(err)):
            raise
        reason = str(err).split(" : ")[-1].strip()
        cuda = dict(cuda, cuda_graph=False)
        _session(graph_path, options, _providers(device, cuda))
        return cuda, reason


def _first_inference_error(engine_path: Path, level: str, device: str, cuda) -> Optional[str]:
    """Load the saved engine as it will be measured and run one batch of zeros: some layouts load
    but fail at their first run (MobileNetV2's int8 graph with NHWC on the H200: "Input channels C
    is not equal to kernel channels * group"). None when it runs; else ONNX Runtime's message."""
    import numpy as np

    try:
        session = _session(engine_path, _session_options(level, 1), _providers(device, cuda))
        model_input = session.get_inputs()[0]
        if model_input.type != "tensor(float)":  # images reach every engine as float32: settings cannot fix this
            return input_type_problem(model_input.name, model_input.type)
        shape = [dim if isinstance(dim, int) and dim > 0 else 1 for dim in model_input.shape]
        session.run(None, {model_input.name: np.zeros(shape, dtype=np.float32)})
        return None
    except Exception as err:  # noqa: BLE001 -- onnxruntime raises its own exception types
        return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


INPUT_TYPE_PROBLEM = "takes"  # the first word after the input's name in input_type_problem's message


def input_type_problem(name: str, found: str) -> str:
    return (
        f"input '{name}' {INPUT_TYPE_PROBLEM} {found}, but precisionflow feeds every engine float32 images (tensor(float)); "
        "export the graph with float32 inputs and outputs (an fp16 graph converted with keep_io_types=True, as "
        "precisions/fp16.py does), or insert a Cast after the input"
    )


def built_without_refused_nhwc(attempt, cuda, engine_path: Path):
    """(CUDA settings the engine has, why NHWC was refused or None): build with the settings asked
    for; if the engine fails at its first inference with prefer_nhwc on, build it again without
    NHWC and record why (as CUDA graphs refused are), instead of failing the evaluation later."""
    cuda, failure = attempt(cuda)
    refused = None
    if failure and f"' {INPUT_TYPE_PROBLEM} tensor(" in failure:  # no build setting changes an input's type
        raise EngineMismatchError(f"The engine ONNX Runtime saved ({engine_path}) cannot take images: {failure}.")
    if failure and cuda and cuda.get("prefer_nhwc"):
        refused = failure
        cuda, failure = attempt(dict(cuda, prefer_nhwc=False))
    if failure:
        raise EngineMismatchError(
            f"The engine ONNX Runtime saved ({engine_path}) fails when loaded and run with the "
            f"settings it was built with: {failure}. Try engine.optimization_level=basic, or "
            "without engine.onnxruntime.prefer_nhwc."
        )
    return cuda, refused


# Conv+bias fusion is kept when its speed-up's interval at this confidence lies above 1 (an engine's
# build decision, made before any verdict: evaluate.confidence is the verdicts').
FUSION_CONFIDENCE = 0.95
FUSION_ORDER = (True, False, False, True, True, False)  # three rounds, each side first in turn: 3 rebuilds


def kept_conv_bias_fusion(attempt, cuda, rate: Callable[[Dict[str, Any]], float], batch: int = 128):
    """(CUDA settings kept, what the search measured or None): cuDNN's fused Conv+bias kernels are
    asked for, but kept only where this engine runs faster with them beyond doubt: they speed some
    graphs up and slow others down on the same GPU (a fixed setting is wrong for one of them).

    Timed at `batch` (the engine's largest, where that evidence is) in three rounds per side in
    alternating order (FUSION_ORDER); kept only when the interval of the per-round ratio
    (stats.ratio_interval) lies above 1 -- an undecided search leaves it off, the runtime's
    default, so noise cannot flip the choice back and forth. The engine is rebuilt with the settings
    kept and the rebuild's own outcome is what is returned (a rebuild that refused CUDA graphs says
    so), with its error, if any, in the record."""
    from precisionflow.stats import ratio_interval

    if not (cuda and cuda.get("fuse_conv_bias")):
        return cuda, None
    sides = {True: cuda, False: dict(cuda, fuse_conv_bias=False)}
    rates: Dict[bool, list] = {True: [], False: []}
    built = True  # the engine file on disk was built with fusion
    for fused in FUSION_ORDER:
        if fused != built:
            attempt(sides[fused])
            built = fused
        rates[fused].append(rate(sides[fused]))
    ratios = [with_ / without for with_, without in zip(rates[True], rates[False], strict=True)]
    bounds = ratio_interval(ratios, FUSION_CONFIDENCE)
    kept = bool(bounds and bounds[1] > bounds[0] > 1.0)
    settings, error = attempt(sides[kept])  # the saved engine is the kept one, as this rebuild made it
    search = {
        "batch": batch,
        "with_per_s": [round(r) for r in rates[True]],
        "without_per_s": [round(r) for r in rates[False]],
        "ratio_interval": [round(b, 3) for b in bounds] if bounds else None,
        "kept": kept,
        "rebuilt_with": settings,
    }
    if error:
        search["rebuild_error"] = str(error)
    return settings, search


RATE_BATCH = 32


def images_per_second(
    engine_path: Path, level: str, cuda: Dict[str, Any], seconds: float = 0.5, batch: int = RATE_BATCH
) -> float:
    """Images/s of the saved engine at `batch` with these CUDA settings: device buffers, one
    bound batch of zeros, calls back to back after a warm-up (what the timing stages measure)."""
    session = _session(engine_path, _session_options(level, 1), _providers("cuda", cuda))
    slot = _BoundSlot(session, batch, 1, bool(cuda.get("cuda_graph")))
    for _ in range(5):
        slot.run()
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        slot.run()
        calls += 1
    return batch * calls / (time.perf_counter() - started)


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
    """A loaded engine. run() takes and returns host arrays (accuracy); prepare() gives the
    no-argument callable that timing calls; stream_runners() the callables of N concurrent streams."""

    def __init__(self, session, description: Dict[str, Any], reload: Callable[..., Any], clock=None, cuda_graph: bool = False):
        self.session = session
        self.description = description
        self.reload = reload  # another session on the same engine file (streams with CUDA graphs)
        self.clock = clock  # CudaClock: latency from CUDA events on the engine's own stream
        self.input_name = session.get_inputs()[0].name
        self.output_name = session.get_outputs()[0].name
        self.on_gpu = description["device"] == "cuda"
        self.has_device_copies = self.on_gpu
        self.cuda_graph = cuda_graph
        self.slots: Dict[int, "_BoundSlot"] = {}
        self.graph_sessions: List["OrtEngine"] = []  # with CUDA graphs: the sessions of the other batch sizes
        self.graph_batch: Optional[int] = None  # run() with CUDA graphs: the one batch size it captures

    @property
    def device_timed(self) -> bool:
        return self.clock is not None

    def clock_name(self) -> str:
        return "device (CUDA events on the engine's stream)" if self.clock else "host (perf_counter around each call)"

    def slot(self, batch_size: int) -> "_BoundSlot":
        """Device buffers for one batch size, bound once (a CUDA graph replays fixed addresses).

        With CUDA graphs, each batch size after the first gets a session of its own: one captured
        graph per session. On the H200 (ONNX Runtime 1.31.1, cuDNN 9) MobileNetV2's fp16 engine
        faulted (CUDA error 700 in cuda_graph.cc) whenever its batch-1 graph was replayed after
        the same session had captured batch 32 and 128 -- alone or beside other processes, with
        cuDNN's exhaustive or heuristic algorithm choice -- and never when each graph had a session
        of its own (benchmarks/cuda_fault_probe.py, results/h200/cuda_fault_probe*.json).

        Without CUDA graphs on a GPU each batch size gets its own session too: ONNX Runtime's CUDA
        Conv keeps the cuDNN plan of the last input shape only, so one session serving a mix of
        batch sizes would re-plan at every switch, inside the timed calls."""
        if batch_size not in self.slots:
            if (self.cuda_graph or self.on_gpu) and self.slots:
                own = self.reload()
                self.slots[batch_size] = own.slot(batch_size)
                self.graph_sessions.append(own)  # kept alive with its graph
            else:
                self.slots[batch_size] = _BoundSlot(self.session, batch_size, 1, self.cuda_graph, self.clock)
        return self.slots[batch_size]

    def run(self, batch: np.ndarray) -> np.ndarray:
        if not self.cuda_graph:
            return self.session.run([self.output_name], {self.input_name: batch})[0]
        # A captured graph has one batch size: a short last batch is padded, its padding dropped.
        self.graph_batch = size = self.graph_batch or len(batch)
        padded = np.zeros((size,) + batch.shape[1:], dtype=np.float32)
        padded[: len(batch)] = batch
        return self.slot(size).run_with_copies(padded)[: len(batch)]

    def prepare(self, batch: np.ndarray, include_copies: bool = False) -> Callable[[], object]:
        """A no-argument callable running one inference on `batch`, for timing. On a GPU the input
        stays in device memory (trtexec's figure) unless include_copies; device-timed callables
        return the seconds the GPU took."""
        if not self.on_gpu:
            feeds = {self.input_name: batch}
            return lambda: self.session.run([self.output_name], feeds)
        slot = self.slot(len(batch))
        slot.load(batch)
        if include_copies:
            return lambda: slot.run_with_copies(batch)
        if slot.clock is not None:  # the clock of the session (and stream) that runs this batch size
            from precisionflow.backends.cuda_clock import QueuedRun

            return QueuedRun(slot.clock, slot.queue)  # timed as before when called; serving may queue it
        return slot.run

    def instance_runner(self, batch: np.ndarray) -> Callable[[], object]:
        """prepare(batch) on a session of its own -- its own CUDA stream, device buffers and graph:
        another instance of the engine, for a serving thread that must not share this one's."""
        own = self.reload()
        self.graph_sessions.append(own)  # kept alive with its graph
        return own.prepare(batch)

    def stream_runners(self, batch: np.ndarray, count: int) -> Tuple[List[Callable[[], object]], str]:
        """`count` callables for concurrent threads, and how they share the engine."""
        if not self.on_gpu:
            feeds = {self.input_name: batch}
            return (
                [lambda: self.session.run([self.output_name], feeds) for _ in range(count)],
                f"one session shared by {count} threads",
            )
        # A session of its own for the threads: the timing session's single stream would serialise
        # them, and ONNX Runtime's CUDA graphs are neither shareable between threads nor safe to
        # capture while other threads launch work, so the streams run the engine without one.
        shared = self.reload(timed=False, cuda_graph=False)
        slots = [_BoundSlot(shared.session, len(batch), 0, False) for _ in range(count)]
        for each in slots:
            each.load(batch)
        without = " (without CUDA graphs)" if self.cuda_graph else ""
        return [each.run for each in slots], f"one session shared by {count} threads, each with its own device buffers{without}"


class _BoundSlot:
    """Input and output buffers on the GPU for one batch size, bound to one IO binding."""

    def __init__(self, session, batch_size: int, graph_id: int, cuda_graph: bool, clock=None):
        ort = _ort()
        self.session = session
        self.clock = clock
        model_input, model_output = session.get_inputs()[0], session.get_outputs()[0]
        input_shape = [batch_size] + [int(d) for d in model_input.shape[1:]]
        output_shape = [batch_size] + [int(d) for d in model_output.shape[1:]]
        self.input = ort.OrtValue.ortvalue_from_shape_and_type(input_shape, np.float32, "cuda", 0)
        self.output = ort.OrtValue.ortvalue_from_shape_and_type(output_shape, np.float32, "cuda", 0)
        self.binding = session.io_binding()
        self.binding.bind_ortvalue_input(model_input.name, self.input)
        self.binding.bind_ortvalue_output(model_output.name, self.output)
        self.sync_options = ort.RunOptions()
        self.queue_options = ort.RunOptions()  # returns once the work is queued (device timing)
        self.queue_options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        if cuda_graph:
            for options in (self.sync_options, self.queue_options):
                options.add_run_config_entry("gpu_graph_id", str(graph_id))

    def load(self, batch: np.ndarray) -> None:
        self.input.update_inplace(np.ascontiguousarray(batch, dtype=np.float32))

    def run(self) -> None:
        self.session.run_with_iobinding(self.binding, self.sync_options)

    def queue(self) -> None:
        self.session.run_with_iobinding(self.binding, self.queue_options)

    def run_with_copies(self, batch: np.ndarray) -> np.ndarray:
        self.load(batch)
        self.run()
        return self.output.numpy()


def load(
    engine_dir: Path,
    description: Dict[str, Any],
    target_def: Dict[str, Any],
    threads: int = None,
    timed: bool = True,
    cuda_graph: bool = True,
) -> OrtEngine:
    """A session on the built engine file; on a GPU with `timed`, on a CUDA stream of its own with
    event timing (where the CUDA runtime library loads; else host timing, said in the figures)."""
    check_provenance(description, target_def, engine_dir)
    threads = threads or description.get("intra_op_threads", 1)
    # The saved graph is loaded at the level it was built with: on CUDA, some fusions ONNX Runtime
    # applies are not serialisable, and a saved graph run with optimisations off was measured
    # up to 40% slower than the same graph optimised at load (benchmarks/results/engines_cuda.json).
    options = _session_options(description.get("optimization_level", "all"), threads)
    clock = _cuda_clock() if timed and description["device"] == "cuda" else None
    cuda = description.get("cuda_settings")
    if cuda and not cuda_graph:
        cuda = dict(cuda, cuda_graph=False)
    session = _session(
        Path(engine_dir) / description["engine_file"],
        options,
        _providers(description["device"], cuda, clock.stream_pointer if clock else 0),
    )
    reload = lambda timed=True, cuda_graph=True: load(engine_dir, description, target_def, threads, timed, cuda_graph)  # noqa: E731
    return OrtEngine(session, description, reload, clock, cuda_graph=bool(cuda and cuda["cuda_graph"]))


def _cuda_clock():
    from precisionflow.backends.cuda_clock import CudaClock, load_cudart

    cudart = load_cudart()
    return CudaClock(cudart) if cudart is not None else None
