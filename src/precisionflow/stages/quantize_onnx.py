"""quantize_onnx: the precision-specific graph every backend builds from.

TensorRT 11 builds an engine exactly in the types its ONNX graph carries, so precision lives in
the graph: each precision's spec (precisions/) says how its graph is made from the exported one
and what of the configuration that reads.
"""

from pathlib import Path
from typing import Any, Dict

from precisionflow import precisions
from precisionflow.cpu_features import READ_WHERE_MADE
from precisionflow.hashing import file_hash
from precisionflow.quant import qdq
from precisionflow.stages import NodeContext

PACKAGES = ("onnx", "onnxconverter-common", "onnxruntime", "matplotlib", "numpy")


def node_params(at: NodeContext) -> Dict[str, Any]:
    """`placement`: the runtime int8 Q/DQ is placed for (qdq.placement_for the target)."""
    cfg, precision, placement = at.cfg, at.precision, at.placement
    params = {"precision": precision, **precisions.get(precision).graph_params(cfg, placement)}
    if placement == qdq.ORT_CPU:  # the CPU's kernels decide the weights' bits: its targets' fact
        params["cpu_dot_product"] = at.cpu_dot_product or READ_WHERE_MADE
    if precision in precisions.PLUGIN_SOURCES:  # its code is outside this package's import closure
        params["plugin_sha256"] = precisions.PLUGIN_SOURCES[precision]
    return params


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    source = inputs["onnx"] / "model.onnx"
    target = out / "model.onnx"
    precision = params["precision"]
    details = precisions.get(precision).make_graph(source, target, params, inputs, out)
    if details.get("declined"):  # nothing worth building (int8_mixed): no graph, and the reason
        return {"precision": precision, "source_sha256": file_hash(source), **details}
    return {
        "precision": precision,
        "graph_sha256": file_hash(target),
        "source_sha256": file_hash(source),
        "graph_bytes": target.stat().st_size,
        **details,
    }
