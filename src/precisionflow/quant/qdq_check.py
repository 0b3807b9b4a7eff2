"""The checker of a Q/DQ graph: every compute op reads its quantized inputs through a Q/DQ pair of
constant scale and zero point, and a TensorRT target gets only what TensorRT accepts -- said before
an engine is built from it."""

from pathlib import Path
from typing import List

import numpy as np

from precisionflow.errors import StageError
from precisionflow.quant.qdq import COMPUTE_OPS, constant_of, initializers_of, output_layer_nodes


def check_qdq(model, output_layer_float: bool = True) -> List[str]:
    """Problems that would stop TensorRT from building (or running as trained) this int8 graph."""
    import onnx

    problems = []
    producers = {out: node for node in model.graph.node for out in node.output}
    for node in model.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            problems += _check_qdq_node(model, node, onnx)
    constants = initializers_of(model)
    for name in output_layer_nodes(model) if output_layer_float else ():
        node = next(n for n in model.graph.node if n.name == name)
        weights = [producers.get(i) for i in node.input[1:]]
        if node.op_type in COMPUTE_OPS and any(
            getattr(w, "op_type", "") == "DequantizeLinear" and w.input[0] in constants for w in weights
        ):
            problems.append(f"output layer {name} has quantized weights; expected it left in floating point")
    if not any(node.op_type == "QuantizeLinear" for node in model.graph.node):
        problems.append("no QuantizeLinear node: the graph is not quantized")
    return problems


def _check_qdq_node(model, node, onnx) -> List[str]:
    problems = []
    zero_point = constant_of(model, node.input[2]) if len(node.input) > 2 else None
    if zero_point is None:
        return [f"{node.name}: zero point missing; expected an int8 zero point of 0"]
    if zero_point.dtype != np.int8:
        problems.append(f"{node.name}: zero point type {zero_point.dtype}, expected int8 (TensorRT has no uint8 Q/DQ)")
    if np.any(zero_point != 0):
        problems.append(f"{node.name}: zero point {zero_point.flatten()[:4]} is not 0 (asymmetric); TensorRT needs symmetric")
    weight = constant_of(model, node.input[0])
    if weight is not None and weight.dtype == np.int32:
        problems.append(f"{node.name}: dequantizes an int32 bias; expected the bias left in float")
    elif weight is not None and weight.ndim == 4 and np.size(constant_of(model, node.input[1])) == 1:
        problems.append(f"{node.name}: conv weight quantized per tensor; expected per output channel")
    return problems


def assert_trt_legal(path: Path, output_layer_float: bool = True) -> None:
    import onnx

    problems = check_qdq(onnx.load(str(path)), output_layer_float)
    if problems:
        raise StageError(f"The int8 graph {path} is not TensorRT-legal: " + "; ".join(problems))
