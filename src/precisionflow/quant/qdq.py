"""int8 graphs for the runtime that runs them: one set of ranges, two placements of Q/DQ.

* `tensorrt`: TensorRT's explicit quantization wants int8 with zero point 0 for activations,
  per-output-channel symmetric weights, biases left in float, and Q/DQ on the inputs of the ops it
  can run in int8 (Conv, MatMul/Gemm, both inputs of a residual Add); a checker holds graphs to it.
* `onnxruntime_cpu`: ONNX Runtime's CPU provider computes in integers only where it can fuse
  DQ -> op -> Q into QLinearConv / QLinearMatMul / QLinearAdd ..., so op outputs are quantized too
  (ONNX Runtime's own QDQ placement), with uint8 activations and int8 per-channel weights (U8S8,
  the fast kernels on x86: measured in benchmarks/cpu_int8_placement.py).
Both quantize the same compute ops (the output layer and any op kept in float stay float).
"""

import math
import shutil
import tempfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

import numpy as np

from precisionflow.placements import ORT_CPU, PLACEMENTS, TENSORRT  # noqa: F401 (read from here too)

COMPUTE_OPS = ("Conv", "MatMul", "Gemm")
# Ops walked through when looking for the layer that produces a graph output (bias add, reshapes).
PASS_THROUGH = (
    "Add",
    "Identity",
    "Reshape",
    "Flatten",
    "Softmax",
    "Cast",
    "Squeeze",
    "Transpose",
    "QuantizeLinear",
    "DequantizeLinear",
)


def initializers_of(model) -> Set[str]:
    return {init.name for init in model.graph.initializer}


def output_layer_nodes(model) -> Set[str]:
    """Names of the nodes forming the final layer: from each graph output back to its Conv/MatMul/Gemm."""
    producers = {out: node for node in model.graph.node for out in node.output}
    constants = initializers_of(model)
    found, pending = set(), [out.name for out in model.graph.output]
    while pending:
        node = producers.get(pending.pop())
        if node is None or node.name in found:
            continue
        found.add(node.name)
        if node.op_type not in COMPUTE_OPS and node.op_type in PASS_THROUGH:
            pending.extend(name for name in node.input if name not in constants)
    return found


def is_residual_add(node, constants: Set[str]) -> bool:
    return node.op_type == "Add" and len(node.input) == 2 and not any(name in constants for name in node.input)


def quantizable_nodes(model, exclude: Iterable[str] = (), keep_output_layer: bool = True) -> List[str]:
    constants = initializers_of(model)
    skip = set(exclude) | (output_layer_nodes(model) if keep_output_layer else set())
    return [
        node.name
        for node in model.graph.node
        if node.name not in skip and (node.op_type in COMPUTE_OPS or is_residual_add(node, constants))
    ]


def float_neighbourhood(model, int8_nodes: Set[str]) -> List[str]:
    """CPU placement: the other ops (pads, pools, activations, reshapes) with no int8 compute op
    on either side -- walking up through their producers and down through their readers, a compute
    op (or residual Add) ends the walk -- so float in, float out. ONNX Runtime would quantize them
    all the same: int8_mixed's "61 op(s) fp" engine ran Q/DQ around the Pads between float
    convolutions and a QLinearGlobalAveragePool before its float head. They stay float now."""
    producers = {out: node for node in model.graph.node for out in node.output}
    readers, constants = _readers(model), initializers_of(model)

    def is_compute(node) -> bool:
        return node.op_type in COMPUTE_OPS or is_residual_add(node, constants)

    def reaches_int8(start, step) -> bool:
        seen, pending = set(), [start]
        while pending:
            for neighbour in step(pending.pop()):
                if neighbour.name in seen:
                    continue
                seen.add(neighbour.name)
                if is_compute(neighbour):
                    if neighbour.name in int8_nodes:
                        return True
                else:
                    pending.append(neighbour)
        return False

    up = lambda node: [producers[name] for name in node.input if name in producers]  # noqa: E731
    down = lambda node: [reader for out in node.output for reader in readers.get(out, [])]  # noqa: E731
    return [
        node.name
        for node in model.graph.node
        if not is_compute(node) and not reaches_int8(node, up) and not reaches_int8(node, down)
    ]


def cpu_placement(model, ranges, nodes: Sequence[str], trained, weight_bits: Optional[int]):
    """(quantize_static's options, the ranges, the trained tensors) for ONNX Runtime's CPU placement:
    every op it can fuse is quantized, less the compute ops that stay float and what must stay float
    around them; ranges within the activations' own, on symmetric steps."""
    from onnxruntime.quantization import QuantType

    left_float = [name for name in quantizable_nodes(model, keep_output_layer=False) if name not in set(nodes)]
    # A float output layer is float to the graph's output: its bias Add (tf2onnx's Dense is
    # MatMul -> Add) would otherwise run as a QLinearAdd and hand out int8 logits, with
    # ties fp32 never has (2 of 180 test images on photo patches).
    head = output_layer_nodes(model)
    if not head & set(nodes):
        left_float += sorted(head - set(left_float))
    left_float += [name for name in float_neighbourhood(model, set(nodes)) if name not in set(left_float)]
    ranges = ranges_within_activations(model, ranges)
    if trained is not None:
        ranges, trained = through_layout_ops(model, ranges, trained)
    ranges = symmetric_steps_in_uint8(ranges)
    options = dict(
        nodes_to_exclude=left_float,
        activation_type=QuantType.QUInt8,
        reduce_range=weight_bits == 7,
        extra_options={**ORT_CPU_PLACEMENT, "TensorQuantOverrides": depthwise_weights_in_8_bits(model)},
    )
    return options, ranges, trained


def quantize_int8(
    fp32_path: Path,
    out_path: Path,
    ranges: Dict[str, Tuple[float, float]],
    nodes: Sequence[str],
    placement: str = TENSORRT,
    trained: Optional[Iterable[str]] = None,
    weight_bits: Optional[int] = None,
) -> List[str]:
    """Write the QDQ graph of `nodes` using the cache's ranges (no calibration happens here), with
    Q/DQ placed for `placement`'s runtime. `trained` (int8_qat on the CPU placement): the tensors
    QAT put a fake-quant on; a Q/DQ the placement would add anywhere else is left out, so the
    engine rounds where QAT trained and nowhere else. Returns the tensors the CPU placement leaves
    unrounded: those (int8_qat), or the float output layer's input (post-training ranges).
    `weight_bits` (CPU placement, required there): 7 or 8 for the GEMM kernels' weights, as the
    CPU that runs them accumulates (cpu_weight_bits)."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    if placement not in PLACEMENTS:
        raise ValueError(f"int8 placement: expected one of {PLACEMENTS}, found '{placement}'")
    if placement == ORT_CPU and weight_bits not in (7, 8):
        raise ValueError(f"the CPU placement's weight bits: expected 7 or 8 (cpu_weight_bits), found {weight_bits!r}")
    with tempfile.TemporaryDirectory(prefix="pf-quant-") as scratch:
        # quantize_static writes model-inferred.onnx next to its input: quantize a copy in scratch,
        # never the upstream node's own file.
        source = shutil.copy(fp32_path, Path(scratch) / "source.onnx")
        if placement == TENSORRT:
            options = dict(
                op_types_to_quantize=list(COMPUTE_OPS) + ["Add"],
                nodes_to_quantize=list(nodes),
                activation_type=QuantType.QInt8,
                extra_options=TRT_PLACEMENT,
            )
        else:  # every op ONNX Runtime can fuse, less the compute ops that stay float
            options, ranges, trained = cpu_placement(onnx.load(str(source)), ranges, nodes, trained, weight_bits)
        quantize_static(
            str(source),
            str(out_path),
            calibration_data_reader=None,
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
            calibration_cache_path=str(_ranges_file(ranges, Path(scratch))),
            **options,
        )
    if placement == TENSORRT:
        return []
    if trained is not None:
        return drop_untrained_qdq(out_path, trained)
    return float_output_layer_reads_float(out_path, onnx.load(str(fp32_path)))


def _ranges_file(ranges: Dict[str, Tuple[float, float]], folder: Path) -> Path:
    """The ranges in ONNX Runtime's calibration-cache file, which quantize_static reads instead of calibrating."""
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import TensorData, TensorsData, save_tensors_data

    path = folder / "tensors.json"
    save_tensors_data(
        TensorsData(
            CalibrationMethod.MinMax,
            {name: TensorData(lowest=np.float32(lo), highest=np.float32(hi)) for name, (lo, hi) in ranges.items()},
        ),
        path,
    )
    return path


# TensorRT's explicit-quantization placement: Q/DQ on the inputs of weighted layers (and of residual
# Adds), never on their outputs, so no Q/DQ sits between a Conv and its ReLU and TensorRT fuses
# each Q into the layer before it. This is also what QAT simulates (a quantizer after the
# activation). ONNX Runtime's CPU provider cannot fuse this layout into QLinear kernels: it runs such
# graphs as fp32 compute with Q/DQ, and the engine's `executed` label says so.
TRT_PLACEMENT = {
    "ActivationSymmetric": True,
    "WeightSymmetric": True,
    "QuantizeBias": False,
    "OpTypesToExcludeOutputQuantization": list(COMPUTE_OPS) + ["Add"],
    "QDQKeepRemovableActivations": True,
    "DedicatedQDQPair": True,
}


# ONNX Runtime's own placement for its CPU provider: Q/DQ on op outputs as well as inputs, so the
# graph transformers fuse each DQ -> op -> Q into an integer kernel; activations uint8 with their
# calibrated zero point, weights int8 symmetric per channel. A symmetric range becomes zero point 128
# with QAT's (and TensorRT's) step (symmetric_steps_in_uint8).
ORT_CPU_PLACEMENT = {"WeightSymmetric": True, "ActivationSymmetric": False}


def symmetric_steps_in_uint8(ranges: Dict[str, Tuple[float, float]]) -> Dict[str, Tuple[float, float]]:
    """Each symmetric range [-a, a] as the uint8 range [-128a/127, a]: zero point 128 and step a/127,
    the grid QAT trains on (narrow-range int8) and TensorRT runs. Given [-a, a], ONNX Runtime steps
    it by 2a/255, a grid 0.4% off QAT's, so values round to other codes than QAT rounded them to:
    ResNet-50's CPU int8_qat engine agreed with its QAT model on 98.7% of 1,728 images on that
    grid, and on 99.48% on QAT's (benchmarks/results/qat_agreement_large_before_qat_grids_stdout.txt). The one difference
    left: values between -128a/127 and -a are not clamped at -a."""
    return {
        tensor: (-high * 128 / 127, high) if low < 0 < high and math.isclose(-low, high, rel_tol=1e-6) else (low, high)
        for tensor, (low, high) in ranges.items()
    }


# Weights in 7 bits (ONNX Runtime's reduce_range) on the CPU placement, only where the CPU needs it.
# On an x86 CPU without VNNI, ONNX Runtime's U8S8 kernels add pairs of uint8 x int8 products in
# int16 (vpmaddubsw), which saturates when activations sit high in their uint8 range -- every tensor
# with a symmetric range (zero point 128), so QAT's ranges most of all. MobileNetV2's int8_qat engine
# on an AVX2 CPU agreed with its QAT model on 96.1% of images with 8-bit weights and 100% with 7-bit
# weights (benchmarks/results/cpu_qat_placement.json); 7-bit weights cannot saturate (2 x 255 x 64 <
# 32768). VNNI (vpdpbusd) and ARM's dot product accumulate in 32 bits: there 7 bits only cost
# precision (resnet_mini int8_qat on photo patches at 32 px, on an AVX-512 VNNI CPU: 298 of 304
# images agree with the QAT model with 7-bit weights, 303 with 8-bit; ../shared REFERENCE).
def cpu_weight_bits(dot_flag: Optional[str]) -> int:
    """8 where the CPU's integer kernels accumulate in 32 bits (`dot_flag`, cpu_features.
    integer_dot_product), else 7."""
    return 8 if dot_flag else 7


def depthwise_weights_in_8_bits(model) -> Dict[str, list]:
    """ONNX Runtime tensor overrides giving every depthwise conv's weights all 8 bits.

    The int16 saturation behind cpu_weight_bits's 7 is in the GEMM kernels; ONNX Runtime's depthwise
    kernel accumulates in 32 bits (a constructed depthwise sum at activation code 247 and weight
    code 127 came out exact here). A depthwise kernel has 9 weights per channel, so a seventh bit
    costs it most: MobileNetV2's CPU int8_qat engine agreed with its QAT model on 98.6% of 1,728
    images with 7-bit depthwise weights, 99.6% with 8-bit ones."""
    constants = {init.name: init for init in model.graph.initializer}
    overrides = {}
    for node in model.graph.node:
        group = next((a.i for a in node.attribute if a.name == "group"), 1)
        weight = constants.get(node.input[1]) if node.op_type == "Conv" and len(node.input) > 1 else None
        if weight is not None and group > 1 and len(weight.dims) == 4 and weight.dims[1] == 1:
            channels = weight.dims[0]  # per output channel: the first dict says so, the others may be empty
            overrides[weight.name] = [{"axis": 0, "reduce_range": False}] + [{} for _ in range(channels - 1)]
    return overrides


# ONNX Runtime's graph optimizer "WeightBiasQuantization" quantizes the float weights of an op that
# reads a DQ and feeds a Q, then fuses it into an integer kernel: every op int8_mixed keeps in float
# sits between its quantized neighbours' Q/DQ, so it ran in int8 anyway (an EfficientNetB0 graph
# "keeping 89 of 90 ops float" ran 49 QLinearConv). Every session that runs one of these graphs
# turns it off, so an op the graph keeps in float runs in float.
ORT_DISABLED_OPTIMIZERS = ["WeightBiasQuantization"]


def clip_bounds(model, node) -> Tuple[float, float]:
    """(min, max) of a Clip node: constant inputs (opset 11 and later) or attributes (earlier)."""
    low, high = -np.inf, np.inf
    for position, attribute in ((1, "min"), (2, "max")):
        if len(node.input) > position and node.input[position]:
            value = constant_of(model, node.input[position])
            bound = float(np.asarray(value).reshape(-1)[0]) if value is not None else None
        else:
            bound = next((a.f for a in node.attribute if a.name == attribute), None)
        if bound is not None:
            low, high = (bound, high) if attribute == "min" else (low, bound)
    return low, high


def activation_bounds(model, node) -> Optional[Tuple[float, float]]:
    """The values an activation can output, where it bounds them: Relu [0, inf), Clip [min, max]
    (ReLU6 is Clip(0, 6)), Sigmoid and HardSigmoid [0, 1]; None for any other op."""
    if node.op_type == "Relu":
        return 0.0, np.inf
    if node.op_type == "Clip":
        return clip_bounds(model, node)
    if node.op_type in ("Sigmoid", "HardSigmoid"):
        return 0.0, 1.0
    return None


def ranges_within_activations(model, ranges: Dict[str, Tuple[float, float]]) -> Dict[str, Tuple[float, float]]:
    """Each bounded activation's output range cut to what the activation can give.

    ONNX Runtime's quantizer removes a Relu or Clip that feeds an asymmetric quantizer and lets the
    Q's range do the clamping: exact only when that range starts at the activation's floor (and ends
    at its ceiling). A symmetric range (QAT learns [-6, 6] for a ReLU6 output, [-a, a] for a ReLU's)
    would let negatives through; [0, 6] holds every value the activation can give, at a finer step."""
    adjusted = dict(ranges)
    for node in model.graph.node:
        bounds = activation_bounds(model, node)
        if bounds is None or node.output[0] not in adjusted:
            continue
        low, high = adjusted[node.output[0]]
        floor, ceiling = bounds
        low, high = max(low, floor), min(high, ceiling)
        adjusted[node.output[0]] = (low, max(high, low + 1e-8))
    return adjusted


def placement_for(backend: str, on_gpu: bool) -> str:
    """The Q/DQ placement of a target's int8 graphs: ONNX Runtime on a CPU gets its own; TensorRT,
    and ONNX Runtime's CUDA provider (it has no int8 convolution kernels either way: int8 on a GPU
    is TensorRT's), get TensorRT's, so the graph measured there is the one TensorRT would build."""
    return ORT_CPU if backend == "onnxruntime" and not on_gpu else TENSORRT


def constant_of(model, name: str):
    from onnx import numpy_helper

    for init in model.graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    return None


# Ops whose output holds the same values as their input, rearranged (or a zero pad / a max):
# a range learned on the input holds for the output, and quantization commutes with them.
RANGE_PRESERVING = ("Reshape", "Transpose", "Flatten", "MaxPool", "Identity", "Squeeze", "Unsqueeze", "Pad")


def through_layout_ops(model, ranges: Dict[str, Tuple[float, float]], trained: Iterable[str]):
    """(ranges, trained tensors), each trained range carried through range-preserving ops, both ways.

    Forward: a Pad or MaxPool after a ReLU6 holds values on the grid QAT trained, so its output
    gets that range instead of a measured one (a second rounding on another grid). Backward: ONNX
    Runtime quantizes a Squeeze or Reshape with its input's parameters, so where QAT's range landed
    on the Squeeze after a pooling (tf2onnx's GlobalAveragePool -> Squeeze), the pooling's output
    takes it -- a measured range there, taken on the float export of a QAT model that relies on
    its clipping, reached 33,546 on ResNet-50 and rounded every pooled value to 0."""
    ranges, trained = dict(ranges), set(trained)
    for node in model.graph.node:  # topological order
        if node.op_type in RANGE_PRESERVING and node.input and node.input[0] in trained and node.input[0] in ranges:
            ranges[node.output[0]] = ranges[node.input[0]]
            trained.add(node.output[0])
    constants = initializers_of(model)
    for node in reversed(model.graph.node):
        source = node.input[0] if node.input else None
        if node.op_type in RANGE_PRESERVING and node.output[0] in trained and source not in trained and source not in constants:
            ranges[source] = ranges[node.output[0]]
            trained.add(source)
    return ranges, trained


def drop_untrained_qdq(path: Path, trained: Iterable[str]) -> List[str]:
    """Remove every activation Q/DQ pair on a tensor QAT did not fake-quantize (a global average
    pool's output, the float output layer's logits): its consumers read the float tensor, and ONNX
    Runtime runs the op before in float. Returns the tensors freed."""
    import onnx
    from onnx import helper

    model = onnx.load(str(path))
    constants, trained = initializers_of(model), set(trained)
    untrained = {
        node.output[0]: node.input[0]
        for node in model.graph.node
        if node.op_type == "QuantizeLinear" and node.input[0] not in constants and node.input[0] not in trained
    }
    kept, freed = [], []
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear" and node.output[0] in untrained:
            freed.append(node.input[0])
        elif node.op_type == "DequantizeLinear" and node.input[0] in untrained:
            # an Identity keeps the DQ's output name (it may be a graph output); the optimiser removes it
            kept.append(helper.make_node("Identity", [untrained[node.input[0]]], [node.output[0]], name=f"{node.name}_float"))
        else:
            kept.append(node)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return sorted(freed)


def activation_inputs(model, nodes: Sequence[str]) -> Dict[str, str]:
    """{activation tensor that gets a Q/DQ: the node it feeds} for the nodes to quantize."""
    constants = initializers_of(model)
    wanted = set(nodes)
    found = {}
    for node in model.graph.node:
        if node.name in wanted:
            inputs = node.input if node.op_type == "Add" else node.input[:1]
            found.update({name: node.name for name in inputs if name not in constants})
    return found


def learned_ranges_of(model, tensors: Iterable[str], learned: Dict[str, Tuple[float, float]]) -> Dict[str, Optional[tuple]]:
    """{tensor: the learned range of the tensor it copies (walking back through layout ops), or None}."""
    producers = {out: node for node in model.graph.node for out in node.output}
    found = {}
    for tensor in tensors:
        source = tensor
        while source is not None and source not in learned:
            node = producers.get(source)
            source = node.input[0] if node is not None and node.op_type in RANGE_PRESERVING else None
        found[tensor] = learned.get(source) if source is not None else None
    return found


def fake_quantize_inputs(path: Path, node_names: Sequence[str], ranges: Dict[str, Tuple[float, float]]) -> List[str]:
    """Put a symmetric int8 Q/DQ pair on the activation input of each named node (weights stay float).

    For int8_qat's float output layer: QAT quantized the activation feeding it, so the deployed
    graph rounds and clips it the same way. Returns the tensors treated."""
    import onnx

    model = onnx.load(str(path))
    treated = []
    for node in list(model.graph.node):
        tensor = node.input[0] if node.name in node_names else None
        if tensor is None or tensor not in ranges:
            continue
        scale = max(abs(ranges[tensor][0]), abs(ranges[tensor][1])) / 127.0
        stem = f"{tensor}_qat_fq"
        _insert_fake_quant(model, tensor, stem, scale, list(model.graph.node).index(node))
        node.input[0] = f"{stem}_dq"
        treated.append(tensor)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return treated


def unrounded_learned_tensors(model, learned: Iterable[str]) -> List[str]:
    """The tensors QAT fake-quantized that some op of `model` reads unrounded.

    TensorRT's placement puts Q/DQ on the inputs of the ops it runs in int8, so a learned tensor
    feeding only another kind of op (ResNet-50's last block output, read by the global average
    pool) is never rounded or clipped there, though QAT rounded and clipped it at every step.
    A learned tensor read through range-preserving ops (a Pad, a MaxPool) counts as rounded when
    a Q follows them. A compute op's input is the placement's own decision (quantized with the op,
    or kept float on purpose), so only other readers count."""
    consumers = _readers(model)

    def read_unrounded(tensor: str) -> bool:
        for node in consumers.get(tensor, []):
            if node.op_type == "QuantizeLinear" or node.op_type in COMPUTE_OPS:
                continue
            if node.op_type not in RANGE_PRESERVING or read_unrounded(node.output[0]):
                return True
        return False

    return [tensor for tensor in learned if read_unrounded(tensor)]


def fake_quantize_tensors(path: Path, ranges: Dict[str, Tuple[float, float]]) -> List[str]:
    """Round each named tensor on its learned symmetric int8 grid (a Q/DQ pair every reader then
    reads), for every tensor QAT fake-quantized that the placement left unrounded. Returns them."""
    import onnx

    model = onnx.load(str(path))
    treated = unrounded_learned_tensors(model, [t for t in ranges if not _is_graph_output(model, t)])
    for tensor in treated:
        low, high = ranges[tensor]
        stem = f"{tensor}_qat_fq"
        for node in model.graph.node:  # every reader of the tensor reads the rounded copy
            node.input[:] = [f"{stem}_dq" if name == tensor else name for name in node.input]
        position = next((i for i, node in enumerate(model.graph.node) if tensor in node.output), -1) + 1
        _insert_fake_quant(model, tensor, stem, max(abs(low), abs(high)) / 127.0, position)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return treated


def _readers(model) -> Dict[str, list]:
    """{tensor: the nodes that read it}."""
    readers: Dict[str, list] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return readers


def _is_graph_output(model, tensor: str) -> bool:
    return any(output.name == tensor for output in model.graph.output)


def float_output_layer_reads_float(path: Path, fp32_model) -> List[str]:
    """CPU placement, post-training ranges: the float output layer reads its input unrounded, as
    in TensorRT's placement. Returns the tensors freed.

    ONNX Runtime's placement quantizes every op output, so the features a float output layer reads
    were rounded and clipped to a calibrated range all the same. For a detector that is fatal with
    entropy ranges: a heatmap's peaks come from rare, large features, which the entropy threshold
    cuts (CenterNet's CPU int8 scored mAP@.5 0.57 where the TensorRT placement of the same ranges
    scored 0.97). Where the quantizer had dropped a Relu or Clip into that Q's range, the activation
    is put back, since nothing clamps the tensor any more."""
    import onnx

    model = onnx.load(str(path))
    producers = {out: node for node in model.graph.node for out in node.output}
    readers = _readers(model)
    constants, final_layer = initializers_of(model), output_layer_nodes(fp32_model)
    output_layer = {  # its compute ops, where they kept float weights (int8.keep_output_layer)
        n.name for n in model.graph.node if n.name in final_layer and n.op_type in COMPUTE_OPS and n.input[1] in constants
    }
    source_producers = {out: node for node in fp32_model.graph.node for out in node.output}
    freed = []
    for node in [n for n in model.graph.node if n.name in output_layer]:
        dq = producers.get(node.input[0])
        q = producers.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
        if q is None or q.op_type != "QuantizeLinear" or any(r.name not in output_layer for r in readers[dq.output[0]]):
            continue
        tensor = q.input[0]
        for reader in readers[dq.output[0]]:
            reader.input[:] = [tensor if name == dq.output[0] else name for name in reader.input]
        model.graph.node.remove(dq)  # read by nobody now
        if [r.name for r in readers[q.output[0]]] == [dq.name]:
            model.graph.node.remove(q)
        _restore_dropped_activation(model, fp32_model, tensor, producers, source_producers)
        freed.append(tensor)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return freed


def _restore_dropped_activation(model, fp32_model, tensor: str, producers, source_producers) -> None:
    """Put back the Relu or Clip that produced `tensor` in the float graph, if the quantizer dropped it."""
    from onnx import helper

    original = source_producers.get(tensor)
    if original is None or activation_bounds(fp32_model, original) is None or producers[tensor].op_type == original.op_type:
        return
    before = f"{tensor}_before_{original.op_type.lower()}"
    producers[tensor].output[:] = [before if name == tensor else name for name in producers[tensor].output]
    constants = initializers_of(model)
    model.graph.initializer.extend(
        init for init in fp32_model.graph.initializer if init.name in original.input[1:] and init.name not in constants
    )
    restored = helper.make_node(original.op_type, [before, *original.input[1:]], [tensor], name=f"{original.name}_restored")
    restored.attribute.extend(original.attribute)
    position = list(model.graph.node).index(producers[tensor]) + 1
    model.graph.node.insert(position, restored)


def _insert_fake_quant(model, tensor: str, stem: str, scale: float, position: int) -> None:
    """A symmetric int8 Q -> DQ pair on `tensor` at `position` in the node list; its output is
    f"{stem}_dq" (the caller points the readers at it)."""
    from onnx import helper, numpy_helper

    model.graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(scale, np.float32), f"{stem}_scale"),
            numpy_helper.from_array(np.array(0, np.int8), f"{stem}_zero_point"),
        ]
    )
    parameters = [f"{stem}_scale", f"{stem}_zero_point"]
    model.graph.node.insert(
        position, helper.make_node("DequantizeLinear", [f"{stem}_q", *parameters], [f"{stem}_dq"], name=f"{stem}_dq")
    )
    model.graph.node.insert(position, helper.make_node("QuantizeLinear", [tensor, *parameters], [f"{stem}_q"], name=f"{stem}_q"))
