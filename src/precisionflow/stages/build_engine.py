"""build_engine: one engine per (precision graph, target, engine settings).

The engine JSON records backend and version, device name, compute capability, driver, precision,
build time, size and the hash of the graph it was built from; loading checks them."""

from pathlib import Path
from typing import Any, Dict

from precisionflow.backends import check_runtime, get_backend
from precisionflow.errors import EngineMismatchError
from precisionflow.nodeio import read_node, write_json_atomic
from precisionflow.measure.targets import device_params
from precisionflow.stages import NodeContext

PACKAGES = ("onnx", "numpy")  # the backend's own version is in params["runtime"]
# The engine settings each backend reads; the others do not enter its engines' ids.
BACKEND_SETTINGS = {
    "onnxruntime": ("backend", "optimization_level", "intra_op_threads"),
    "tensorrt": (
        "backend",
        "intra_op_threads",
        "trt_builder_optimization_level",
        "trt_workspace_mb",
        "min_batch",
        "opt_batch",
        "max_batch",
        "min_spatial",
        "opt_spatial",
        "max_spatial",
        "sparse_weights",
        "trt_int8_fp16",
    ),
}


def engine_settings(engine: Dict[str, Any], target_def: Dict[str, Any]) -> Dict[str, Any]:
    from precisionflow.devices import runs_on_gpu

    settings = {key: engine[key] for key in BACKEND_SETTINGS[engine["backend"]]}  # compose refuses another backend
    if engine["backend"] == "onnxruntime" and runs_on_gpu(target_def):
        settings["cuda"] = dict(engine["onnxruntime"])  # CUDA provider options: read only where a GPU runs it
    return settings


def node_params(at: NodeContext) -> Dict[str, Any]:
    cfg, target, runtime = at.cfg, at.target, at.runtime
    settings = engine_settings(cfg["engine"], cfg["target_defs"][target])
    if settings["backend"] == "tensorrt" and cfg.get("prune", {}).get("method") == "sparse24":
        settings["sparse_weights"] = True  # 2:4-sparse weights: let TensorRT pick its sparse tensor-core kernels
    return {"engine": settings, **device_params(cfg, target, runtime)}


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    backend = get_backend(params["engine"]["backend"])
    check_runtime(params["runtime"], backend.describe_runtime(params["target_def"]), params["target"])
    graph_node = read_node(inputs["graph"])
    precision = graph_node["summary"]["precision"]
    check_weight_bits(graph_node["summary"], params)
    description = backend.build(inputs["graph"] / "model.onnx", out, params["engine"], params["target_def"], precision)
    description.update(
        {"target": params["target"], "precision": precision, "graph_sha256": graph_node["summary"]["graph_sha256"]}
    )
    if description.get("device") == "cuda":  # which of the node's GPUs built it: recorded, never in the id
        from precisionflow.devices import gpu_record

        description["ran_on"] = gpu_record()
    write_json_atomic(out / "engine.json", description)
    return description


def check_weight_bits(graph: Dict[str, Any], params: Dict[str, Any]) -> None:
    """An int8 graph with 8-bit weights made for a CPU with an integer dot product (read where it was
    made, or declared) would saturate in this CPU's 16-bit sums if it has none: refused, not measured."""
    from precisionflow.cpu_features import integer_dot_product
    from precisionflow.devices import runs_on_gpu

    if graph.get("cpu_weight_bits") != 8 or runs_on_gpu(params["target_def"]) or integer_dot_product():
        return
    raise EngineMismatchError(
        f"target '{params['target']}': its int8 graph has 8-bit weights for a CPU with "
        f"{graph.get('cpu_dot_product')} ({graph.get('cpu_dot_product_from')}), but this CPU has no integer dot "
        "product: ONNX Runtime's 16-bit sums would saturate. Declare the target's CPU "
        f"(target_defs.{params['target']}.cpu_dot_product=none) or run it on the CPU it was made for."
    )
