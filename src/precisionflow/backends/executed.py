"""What an engine really executes, as opposed to what its graph asked for.

ONNX Runtime's CPU provider has no fp16 kernels for most ops: it wraps them in Casts and runs
them in fp32, and an int8 Q/DQ graph only computes in int8 where the optimiser fused Q/DQ into
QLinear ops. So the label of an engine comes from its optimised graph (the saved engine file):
the data type each compute op (conv, matmul, gemm and their fused forms) runs in. For TensorRT the
engine inspector's per-layer input types say the same.
"""

from collections import Counter
from typing import Any, Dict, Optional

# Ops that carry the model's weights and nearly all of its arithmetic.
FLOAT_COMPUTE_OPS = {
    "Conv",
    "ConvTranspose",
    "MatMul",
    "Gemm",
    "FusedConv",
    "FusedMatMul",
    "FusedGemm",
    "NhwcConv",
    "NhwcFusedConv",
}
INTEGER_COMPUTE_OPS = {
    "QLinearConv",
    "QLinearMatMul",
    "QGemm",
    "ConvInteger",
    "MatMulInteger",
    "MatMulIntegerToFloat",
    "DynamicQuantizeMatMul",
}
TYPE_NAMES = {1: "fp32", 10: "fp16", 16: "bf16", 3: "int8", 2: "uint8", 11: "fp64", 7: "int64", 6: "int32"}


def _known_types(model) -> Dict[str, int]:
    graph = model.graph
    types = {init.name: init.data_type for init in graph.initializer}
    for info in list(graph.input) + list(graph.value_info) + list(graph.output):
        if info.type.tensor_type.elem_type:
            types[info.name] = info.type.tensor_type.elem_type
    return types


def _output_type(node, types: Dict[str, int]) -> Optional[int]:
    """The element type a node produces, from its op and the types of its inputs."""
    if node.op_type == "Cast":
        return next(attr.i for attr in node.attribute if attr.name == "to")
    if node.op_type == "QuantizeLinear":
        return types.get(node.input[2]) if len(node.input) > 2 else 2
    if node.op_type == "DequantizeLinear":
        return types.get(node.input[1])
    if node.op_type.startswith("QLinear") or node.op_type == "QGemm":
        return types.get(node.input[-1]) or types.get(node.input[7] if len(node.input) > 7 else "")
    if node.op_type in ("Shape", "Size"):
        return 7
    return next((types[name] for name in node.input if name in types), None)


def compute_op_types(model) -> Counter:
    """{data type name: number of compute ops running in it} in an (optimised) ONNX graph."""
    types = _known_types(model)
    for _ in range(len(model.graph.node)):  # fixed point; one pass for a topologically sorted graph
        before = len(types)
        for node in model.graph.node:
            produced = _output_type(node, types)
            for name in node.output:
                if produced and name not in types:
                    types[name] = produced
        if len(types) == before:
            break
    counts: Counter = Counter()
    for node in model.graph.node:
        if node.op_type in INTEGER_COMPUTE_OPS:
            # 8-bit integer arithmetic; on x86 ONNX Runtime shifts int8 activations to uint8
            # (zero point 128), the same arithmetic, so both count as int8.
            counts["int8"] += 1
        elif node.op_type in FLOAT_COMPUTE_OPS:
            counts[TYPE_NAMES.get(types.get(node.input[0]), "unknown")] += 1
    return counts


# TensorRT's words for data types: in 10.x's "Format/Datatype" strings ("Row major linear FP32",
# "Thirty-two wide channel vectorized row major Int8 format") and in the DataType fields and weight
# types ("Float", "Half", "Int8") of both majors.
TRT_TYPE_WORDS = {
    "fp32": "fp32",
    "float": "fp32",
    "fp16": "fp16",
    "half": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "int8": "int8",
    "fp8": "fp8",
    "int4": "int4",
    "fp4": "fp4",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "bool": "bool",
}
# Layers that carry the weights and the arithmetic (what the ONNX label counts as compute ops).
TRT_COMPUTE_PARAMETERS = {"Convolution", "Deconvolution", "MatrixMultiply", "FullyConnected", "Gemm"}


def trt_type(described: Any) -> str:
    """The data type a TensorRT inspector string or field names ("other" when none)."""
    for word in str(described).replace("/", " ").replace("(", " ").replace(")", " ").split():
        if word.lower() in TRT_TYPE_WORDS:
            return TRT_TYPE_WORDS[word.lower()]
    return "other"


def trt_tensor_type(tensor: Dict[str, Any]) -> str:
    """A layer input's data type: TensorRT 11 gives it its own field (DataType, beside Format);
    10.x folds it into Format/Datatype."""
    if "DataType" in tensor:
        return trt_type(tensor["DataType"])
    return trt_type(tensor.get("Format/Datatype", ""))


def trt_is_compute(layer: Dict[str, Any]) -> bool:
    kind = str(layer.get("ParameterType", ""))
    return kind in TRT_COMPUTE_PARAMETERS or any(
        word in str(layer.get("LayerType", "")) for word in ("Convolution", "Gemm", "MatrixMultiply")
    )


def trt_layer_types(inspector: Dict[str, Any]) -> Counter:
    """{data type: compute layers} from TensorRT's detailed engine inspector JSON: convolutions and
    matrix products only (reformats, Q/DQ scales, pooling, shape tensors and fp32 engine I/O say
    nothing of the arithmetic), each by the type of its activation input, else its weights."""
    counts: Counter = Counter()
    for layer in inspector.get("Layers", []):
        if not isinstance(layer, dict) or not trt_is_compute(layer):
            continue
        inputs = [trt_tensor_type(tensor) for tensor in layer.get("Inputs", []) if isinstance(tensor, dict)]
        kind = inputs[0] if inputs and inputs[0] != "other" else trt_type(layer.get("Weights", {}).get("Type", ""))
        counts[kind] += 1
    return counts


def executed_precision(counts: Counter) -> str:
    """fp32 / fp16 / int8 when every compute op runs in one type, else e.g. 'int8 4 + fp32 1'."""
    if not counts:
        return "unknown"
    if len(counts) == 1:
        return next(iter(counts))
    return " + ".join(f"{name} {count}" for name, count in counts.most_common())


def label(graph_precision: str, counts: Counter, provider: str, typing: str = "") -> Dict[str, Any]:
    """What ran, and whether it is what the graph asked for: every compute op in fp32 (fp32 graph),
    most in fp16 (an fp16 graph keeps its blocked ops in fp32), or some in int8 (int8 graphs keep the
    output layer in float). `typing`: how TensorRT chose the types (strongly typed: the graph's)."""
    from precisionflow import precisions

    runs_in = precisions.get(graph_precision).judging.runs_in
    ran = executed_precision(counts)
    notes = []
    if runs_in == "integer":
        as_requested = counts.get("int8", 0) > 0
        if as_requested:  # "int8 5/6": the share of compute ops in integer kernels (the rest stayed float)
            total = sum(counts.values())
            ran = "int8" if counts["int8"] == total else f"int8 {counts['int8']}/{total}"
        if provider.startswith("CUDA"):
            notes.append(
                "ONNX Runtime's CUDA provider has no int8 convolution kernels: this engine runs Q/DQ around "
                "float convolutions, so its speed is not int8's; int8 speed on a GPU needs TensorRT"
            )
    elif runs_in != "fp32":  # a lower float type: most compute ops in it (blocked ops stay fp32)
        as_requested = bool(counts) and counts.most_common(1)[0][0] == runs_in
    else:
        as_requested = ran == runs_in
    where = f"{provider}, {typing}" if typing else provider
    found = {
        "graph_precision": graph_precision,
        "executed_precision": ran,
        "compute_op_types": dict(counts),
        "provider": provider,
        "as_requested": as_requested,
        "label": f"{graph_precision} graph, ran {ran} on {where}" + "".join(f" -- {note}" for note in notes),
    }
    if counts:
        found["integer_fraction"] = round(counts.get("int8", 0) / sum(counts.values()), 4)
    if typing:
        found["typing"] = typing
    return found
