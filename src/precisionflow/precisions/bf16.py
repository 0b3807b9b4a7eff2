"""bf16: bfloat16 weights, and bfloat16 compute where the runtime executes it.

Its graph depends on the placement, because runtimes differ: ONNX Runtime's CPU provider has no
bfloat16 kernels at all (MatMul, Add, Relu: NOT_IMPLEMENTED, onnxruntime 1.32), so the CPU graph
stores the weights in bfloat16 and rounds every compute op's operands to bfloat16, then computes in
fp32 -- what a bf16 model computes with fp32 accumulation, minus the speed; its label says "ran
fp32". On a GPU placement every op whose ONNX schema (at the graph's opset) takes bfloat16 runs in
it; the others (Conv before opset 22) stay fp32 with the same rounding, and the label counts each.
ONNX Runtime's CUDA provider has no bfloat16 convolution: it runs such a graph almost entirely in
fp32, slower than fp32, and refuses a bfloat16 Conv outright at opset 22 -- so planning says so.
"""

from typing import Dict

from precisionflow.precisions.spec import GraphRecipe, Judging, PrecisionSpec, Support
from precisionflow.quant import qdq

COMPUTE_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")
# ops the GPU placement may run in bfloat16 when their schema allows it (float operands only)
BF16_CANDIDATES = COMPUTE_OPS + ("Add", "Mul", "Sub", "Relu", "BatchNormalization", "GlobalAveragePool", "Softmax")


def bf16_params(cfg, placement):
    return {"bf16": {"placement": placement}}


def takes_bf16(op_type: str, opset: int) -> bool:
    from onnx import defs

    try:
        schema = defs.get_schema(op_type, opset)
    except Exception:  # an op ONNX does not know at this opset (a contrib op): leave it fp32
        return False
    return any("tensor(bfloat16)" in constraint.allowed_type_strs for constraint in schema.type_constraints)


def store_weights_in_bf16(model, stored: Dict[str, str], nodes: list) -> None:
    """The graph with `nodes` as its nodes, each weight in `stored` ({fp32 name: bf16 name}) added
    in bfloat16 and its fp32 original dropped where no node reads it any more."""
    from onnx import TensorProto, helper, numpy_helper

    for init in list(model.graph.initializer):
        if init.name in stored:
            values = numpy_helper.to_array(init)
            bits = float32_bits_to_bf16(values).tobytes()
            bf16 = helper.make_tensor(stored[init.name], TensorProto.BFLOAT16, values.shape, bits, raw=True)
            model.graph.initializer.append(bf16)
    still_read = {name for node in nodes for name in node.input}
    kept = [init for init in model.graph.initializer if init.name in still_read or init.name not in stored]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    del model.graph.value_info[:]  # shapes stay, types changed: let the runtime infer them again


def to_bf16(job):
    import onnx
    from onnx import TensorProto, helper

    params = job.params
    model = onnx.load(str(job.source))
    opset = next(entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx"))
    on_gpu = params["bf16"]["placement"] != qdq.ORT_CPU
    floats = {init.name for init in model.graph.initializer if init.data_type == TensorProto.FLOAT}
    in_bf16 = {op for op in BF16_CANDIDATES if on_gpu and takes_bf16(op, opset)}
    nodes, stored, counts = [], {}, {"bf16_ops": 0, "fp32_ops_with_bf16_operands": 0}
    casts = {}  # (tensor, type) -> its cast: a tensor several ops read is cast once

    def cast(name: str, to: int, suffix: str) -> str:
        if (name, to) not in casts:
            casts[(name, to)] = f"{name}__{suffix}"
            nodes.append(helper.make_node("Cast", [name], [casts[(name, to)]], to=to, name=f"{name}__{suffix}_cast"))
        return casts[(name, to)]

    def as_bf16(name: str) -> str:
        """The tensor in bfloat16: a weight stored so, an activation cast."""
        if name in floats:
            stored[name] = f"{name}__bf16"
            return stored[name]
        return cast(name, TensorProto.BFLOAT16, "to_bf16")

    def to_float(name: str) -> str:
        return cast(name, TensorProto.FLOAT, "to_fp32")

    for node in model.graph.node:
        float_inputs = [i for i, name in enumerate(node.input) if name and (i < 2 or node.op_type != "BatchNormalization")]
        if node.op_type in in_bf16:
            for i in float_inputs:
                node.input[i] = as_bf16(node.input[i])
            outputs = list(node.output)
            for i, name in enumerate(outputs):
                node.output[i] = f"{name}__bf16_out"
            nodes.append(node)
            for name in outputs:
                nodes.append(
                    helper.make_node("Cast", [f"{name}__bf16_out"], [name], to=TensorProto.FLOAT, name=f"{name}_to_fp32")
                )
            counts["bf16_ops"] += 1
        elif node.op_type in COMPUTE_OPS:  # rounded operands, fp32 arithmetic
            for i in float_inputs:
                node.input[i] = to_float(as_bf16(node.input[i]))
            nodes.append(node)
            counts["fp32_ops_with_bf16_operands"] += 1
        else:
            nodes.append(node)
    store_weights_in_bf16(model, stored, nodes)
    onnx.checker.check_model(model)
    onnx.save(model, str(job.target))
    return {**counts, "weights_in_bf16": len(stored), "placement": params["bf16"]["placement"], "opset": opset}


def float32_bits_to_bf16(values):
    """bfloat16 bit patterns (uint16, rounded to nearest even) of float32 values."""
    import numpy as np

    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def gpu_warning(params, split_sizes):
    """bf16 on an ONNX Runtime GPU placement buys no speed: said at planning, before anything runs."""
    if params["bf16"]["placement"] == qdq.ORT_CPU:
        return None
    return (
        "precisionflow: warning: bf16 on a GPU through ONNX Runtime: its CUDA provider has no bfloat16 "
        "convolution (onnxruntime-gpu 1.31.1 on the H200 ran 'fp32 53 + bf16 1' at 0.23-0.80x fp32's speed, "
        "CHANGELOG.md), so the row will say it ran fp32 and be slower than fp32. fp16 is the GPU's "
        "half precision here."
    )


SPEC = PrecisionSpec(
    name="bf16",
    summary="bfloat16 weights and compute where the runtime has bf16 kernels (ONNX Runtime's CPU provider has none: fp32 on bf16 operands)",
    graph=GraphRecipe(make=to_bf16, params=bf16_params, per_placement=True, planning_warning=gpu_warning),
    judging=Judging(runs_in="bf16"),
    support=Support(
        backends=("onnxruntime",),
        why_not_tensorrt="its graph's bf16 placement has been run on ONNX Runtime only; TensorRT's bf16 path is not written yet",
    ),
)
