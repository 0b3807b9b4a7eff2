"""One calibration, two placements: int8 graphs for the runtime that runs them (quant/qdq.py)."""

from pathlib import Path

import onnx
import pytest

from precisionflow.backends import get_backend
from precisionflow.cpu_features import integer_dot_product
from precisionflow.quant import qdq, qdq_check
from tests.quant.test_qdq_and_calibration import _calibrate, _quantize, data_dir, export_dir  # noqa: F401 (fixtures)

ORT_CPU = {"backend": "onnxruntime", "optimization_level": "all", "intra_op_threads": 1}
# the weights' bits for this machine's CPU: the graphs below run on it
HERE_BITS = qdq.cpu_weight_bits(integer_dot_product())


def engine_ops(graph_dir, out_dir):
    """Op types of the optimised graph ONNX Runtime's CPU provider really runs (the engine file)."""
    description = get_backend("onnxruntime").build(
        graph_dir / "model.onnx", out_dir, ORT_CPU, {"device": "cpu", "expect_device": ""}, "int8"
    )
    ops = [node.op_type for node in onnx.load(str(out_dir / description["engine_file"])).graph.node]
    return ops, description["executed"]


def test_the_cpu_placement_runs_integer_convolutions_and_the_tensorrt_one_stays_legal(tmp_path, export_dir, data_dir):  # noqa: F811 -- fixtures
    calibration = _calibrate(tmp_path, export_dir, data_dir)
    cpu_graph, cpu = _quantize(
        tmp_path, export_dir, data_dir, calibration, placement="onnxruntime_cpu", cpu_dot_product="avx512_vnni"
    )
    trt_graph, trt = _quantize(tmp_path, export_dir, data_dir, calibration, placement="tensorrt")
    assert cpu["placement"] == "onnxruntime_cpu" and trt["placement"] == "tensorrt"
    assert cpu["quantized_nodes"] == trt["quantized_nodes"] == 1  # the same op quantized; the classifier stays float
    assert qdq_check.check_qdq(onnx.load(str(trt_graph / "model.onnx"))) == []  # TensorRT's stays TensorRT-legal
    (tmp_path / "cpu-engine").mkdir()
    (tmp_path / "trt-engine").mkdir()
    cpu_ops, cpu_label = engine_ops(cpu_graph, tmp_path / "cpu-engine")
    trt_ops, trt_label = engine_ops(trt_graph, tmp_path / "trt-engine")
    assert "QLinearConv" in cpu_ops and "Conv" not in cpu_ops  # the convolution runs in an integer kernel
    assert cpu_label["executed_precision"] == "int8 1/2" and cpu_label["integer_fraction"] == 0.5  # + the float classifier
    assert "QLinearConv" not in trt_ops and trt_label["executed_precision"] == "fp32" and not trt_label["as_requested"]


def test_relu_outputs_quantize_from_zero_so_the_fused_relu_stays_exact():
    from tests.conftest import make_tiny_cnn

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        model = onnx.load(str(make_tiny_cnn(Path(folder) / "m.onnx")))
    ranges = {"relu": (-5.7, 5.7), "conv": (-1.0, 2.0)}  # QAT learns a symmetric range for a ReLU output
    adjusted = qdq.ranges_within_activations(model, ranges)
    assert adjusted["relu"] == (0.0, 5.7) and adjusted["conv"] == (-1.0, 2.0)


def save_graph(path, name, nodes, weights, graph_input, graph_output):
    """Write a float32 opset-17 graph of `nodes` with `weights` as initializers; (name, shape) in and out."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(graph_input[0], TensorProto.FLOAT, graph_input[1])],
        [helper.make_tensor_value_info(graph_output[0], TensorProto.FLOAT, graph_output[1])],
        [numpy_helper.from_array(value, key) for key, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def conv_relu6_conv(path):
    """Conv -> Clip(0, 6) (tf2onnx's ReLU6) -> 1x1 Conv of weight 1: the output is the Clip's, quantized."""
    import numpy as np
    from onnx import helper

    rng = np.random.default_rng(0)
    weights = {
        "w1": rng.normal(0, 1.5, (2, 1, 3, 3)).astype(np.float32),
        "w2": np.eye(2, dtype=np.float32).reshape(2, 2, 1, 1),
        "zero": np.array(0.0, np.float32),
        "six": np.array(6.0, np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["image", "w1"], ["conv"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Clip", ["conv", "zero", "six"], ["relu6"], name="relu6"),
        helper.make_node("Conv", ["relu6", "w2"], ["out"], name="conv2"),
    ]
    return save_graph(path, "relu6", nodes, weights, ("image", ["N", 1, 6, 6]), ("out", ["N", 2, 6, 6]))


def test_relu6_keeps_its_floor_in_the_cpu_placement_with_symmetric_qat_ranges(tmp_path):
    import numpy as np
    import onnxruntime as ort

    fp32 = conv_relu6_conv(tmp_path / "fp32.onnx")
    # QAT's symmetric ranges: [-6, 6] on the ReLU6 output, as tfmot learns them
    ranges = {"image": (-1.0, 1.0), "conv": (-8.0, 8.0), "relu6": (-6.0, 6.0), "out": (-6.0, 6.0)}
    qdq.quantize_int8(
        fp32, tmp_path / "int8.onnx", ranges, ["conv1", "conv2"], placement="onnxruntime_cpu", weight_bits=HERE_BITS
    )
    images = np.random.default_rng(1).uniform(-1, 1, (8, 1, 6, 6)).astype(np.float32)
    outputs = {}
    for name in ("fp32", "int8"):
        session = ort.InferenceSession(str(tmp_path / f"{name}.onnx"), providers=["CPUExecutionProvider"])
        outputs[name] = session.run(None, {"image": images})[0]
    zero = outputs["fp32"] == 0
    assert zero.mean() > 0.2  # the ReLU6 zeroes a good part of the outputs
    assert outputs["int8"][zero].min() >= 0.0  # never negative where fp32 is zero (it was down to -6.02)
    assert np.median(np.abs(outputs["int8"] - outputs["fp32"])) < 0.05  # it was 0.38: every zero became a negative


def wide_sum(path, channels=16):
    """One 1x1 Conv summing `channels` input channels, every weight 1: fp32's output is their sum."""
    import numpy as np
    from onnx import helper

    nodes = [helper.make_node("Conv", ["image", "w"], ["out"], name="conv")]
    weights = {"w": np.ones((1, channels, 1, 1), np.float32)}
    return save_graph(path, "wide_sum", nodes, weights, ("image", ["N", channels, 4, 4]), ("out", ["N", 1, 4, 4]))


def test_the_cpu_placement_cannot_saturate_on_a_cpu_without_vnni(tmp_path):
    """A symmetric input range (QAT's) puts uint8 codes of positive values at 128-255; with 8-bit
    weights, ONNX Runtime's AVX2 kernels (no VNNI) add pairs of products in int16 and saturate:
    with 8-bit weights this sum came out as 1.0 where fp32 says 96 (on an AVX2 machine). 7-bit weights --
    what the placement gives a CPU without VNNI (qdq.cpu_weight_bits(None)) -- cannot, whatever CPU runs
    this test (one with VNNI accumulates in 32 bits and is right either way)."""
    import numpy as np
    import onnxruntime as ort

    fp32 = wide_sum(tmp_path / "fp32.onnx")
    ranges = {"image": (-8.0, 8.0), "out": (-128.0, 128.0)}
    bits = qdq.cpu_weight_bits(None)
    qdq.quantize_int8(fp32, tmp_path / "int8.onnx", ranges, ["conv"], placement="onnxruntime_cpu", weight_bits=bits)
    weights = [
        onnx.numpy_helper.to_array(init)
        for init in onnx.load(str(tmp_path / "int8.onnx")).graph.initializer
        if init.data_type == onnx.TensorProto.INT8 and onnx.numpy_helper.to_array(init).ndim == 4
    ]
    assert weights and max(int(np.abs(w).max()) for w in weights) <= 64  # 2 x 255 x 64 < 32768: no int16 overflow
    images = np.full((2, 16, 4, 4), 6.0, np.float32)  # high in the symmetric range: uint8 code 224
    outputs = {}
    for name in ("fp32", "int8"):
        session = ort.InferenceSession(str(tmp_path / f"{name}.onnx"), providers=["CPUExecutionProvider"])
        outputs[name] = session.run(None, {"image": images})[0]
    assert np.allclose(outputs["int8"], outputs["fp32"], rtol=0.02), (outputs["int8"].min(), outputs["fp32"].max())


@pytest.mark.parametrize(
    "backend, on_gpu, placement",
    [("onnxruntime", False, "onnxruntime_cpu"), ("onnxruntime", True, "tensorrt"), ("tensorrt", True, "tensorrt")],
)
def test_placement_follows_the_runtime_of_the_target(backend, on_gpu, placement):
    assert qdq.placement_for(backend, on_gpu) == placement


def test_a_sweep_over_a_cpu_and_a_tensorrt_target_plans_two_int8_graphs_over_one_calibration(tmp_path):
    from collections import Counter

    from precisionflow.config.compose import expand
    from precisionflow.pipeline.plan import build_plan

    plan = build_plan(expand(["targets=[local,h200]", "precisions=[fp32,int8]"]), str(tmp_path / "results"))
    nodes = plan["nodes"]
    graphs = {key: node for key, node in nodes.items() if key.startswith("quantize_onnx/int8")}
    assert Counter(node["params"]["int8"]["placement"] for node in graphs.values()) == {"onnxruntime_cpu": 1, "tensorrt": 1}
    assert len({node["inputs"]["calibration"] for node in graphs.values()}) == 1
    engines = {
        node["params"]["target"]: nodes[node["inputs"]["graph"]]["params"]["int8"]["placement"]
        for key, node in nodes.items()
        if key.startswith("build_engine/int8") and node["params"]["target"] == "h200"
    }
    assert engines == {"h200": "tensorrt"}
    # the CPU target's int8 engine runs the CPU placement, and its TensorRT-placed twin is a simulation row
    local = [
        node for key, node in nodes.items() if key.startswith("evaluate_engine/int8") and node["params"]["target"] == "local"
    ]
    assert sorted(node["params"].get("simulates", "") for node in local) == ["", "tensorrt"]


def three_convs(path):
    """Conv -> Relu, three times, then Flatten -> Gemm: NCHW 1x6x6 input, 4 classes."""
    import numpy as np
    from onnx import helper

    rng = np.random.default_rng(0)
    weights, nodes, current = {}, [], "image"
    for index, channels_in in enumerate((1, 3, 3)):
        weights[f"w{index}"] = rng.normal(0, 0.5, (3, channels_in, 3, 3)).astype(np.float32)
        nodes += [
            helper.make_node("Conv", [current, f"w{index}"], [f"conv{index}"], pads=[1, 1, 1, 1], name=f"conv{index}"),
            helper.make_node("Relu", [f"conv{index}"], [f"relu{index}"], name=f"relu{index}"),
        ]
        current = f"relu{index}"
    weights["fc"] = rng.normal(0, 0.2, (3 * 36, 4)).astype(np.float32)
    nodes += [
        helper.make_node("Flatten", [current], ["flat"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["flat", "fc"], ["logits"], name="logits"),
    ]
    return save_graph(path, "three", nodes, weights, ("image", ["N", 1, 6, 6]), ("logits", ["N", 4]))


@pytest.mark.parametrize("kept", [["conv1"], ["conv0", "conv2"]])
def test_ops_kept_in_float_run_in_float_in_the_cpu_engine(tmp_path, kept):
    from collections import Counter

    fp32 = three_convs(tmp_path / "fp32.onnx")
    names = ["image", "flat", "logits"] + [f"{kind}{i}" for kind in ("conv", "relu") for i in range(3)]
    ranges = {name: (0.0 if name.startswith("relu") else -4.0, 4.0) for name in names}
    quantized = [name for name in ("conv0", "conv1", "conv2") if name not in kept]
    (tmp_path / "graph").mkdir()
    qdq.quantize_int8(
        fp32, tmp_path / "graph" / "model.onnx", ranges, quantized, placement="onnxruntime_cpu", weight_bits=HERE_BITS
    )
    (tmp_path / "engine").mkdir()
    ops, label = engine_ops(tmp_path / "graph", tmp_path / "engine")
    counts = Counter(ops)
    assert counts["QLinearConv"] == len(quantized) and counts["Conv"] + counts.get("FusedConv", 0) == len(kept)
    assert label["executed_precision"] == f"int8 {len(quantized)}/4"  # the float classifier counts too


def pooled_classifier(path):
    """Conv -> Relu -> GlobalAveragePool -> Squeeze -> MatMul -> Add(bias): tf2onnx's head."""
    import numpy as np
    from onnx import helper

    rng = np.random.default_rng(0)
    weights = {
        "w": rng.normal(0, 0.5, (4, 1, 3, 3)).astype(np.float32),
        "axes": np.array([2, 3], np.int64),
        "dense": rng.normal(0, 0.5, (4, 3)).astype(np.float32),
        "bias": np.zeros(3, np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["image", "w"], ["conv"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["conv"], ["relu"], name="relu"),
        helper.make_node("GlobalAveragePool", ["relu"], ["pool"], name="pool"),
        helper.make_node("Squeeze", ["pool", "axes"], ["squeezed"], name="squeeze"),
        helper.make_node("MatMul", ["squeezed", "dense"], ["matmul"], name="logits/MatMul"),
        helper.make_node("Add", ["matmul", "bias"], ["logits"], name="logits/BiasAdd"),
    ]
    return save_graph(path, "pooled", nodes, weights, ("image", ["N", 1, 6, 6]), ("logits", ["N", 3]))


def quantize_pooled_classifier_for_the_cpu(tmp_path):
    """fp32.onnx and its int8_qat graph for the CPU placement (int8.onnx) in tmp_path: QAT's learned
    ranges on the input, the ReLU and the pooled features; measured ones elsewhere. Returns the
    tensors left unquantized."""
    fp32 = pooled_classifier(tmp_path / "fp32.onnx")
    learned = {"image": (-1.0, 1.0), "relu": (-4.0, 4.0), "squeezed": (-2.0, 2.0)}
    measured = {"conv": (-3.0, 3.0), "pool": (0.0, 30000.0), "matmul": (-9000.0, 9000.0), "logits": (-9000.0, 9000.0)}
    return qdq.quantize_int8(
        fp32, tmp_path / "int8.onnx", {**measured, **learned}, ["conv"], "onnxruntime_cpu", learned, HERE_BITS
    )


def test_a_qat_graph_on_the_cpu_rounds_only_where_qat_trained(tmp_path):
    """QAT's range for the pooled features lands on tf2onnx's Squeeze; ONNX Runtime quantizes a
    Squeeze with its input's parameters, so the pooling's output must take that range (a measured
    one, from a float export that never clipped, rounded ResNet-50's pooled features to 0). The
    float output layer's logits get no Q/DQ: QAT never rounded them."""
    import numpy as np
    import onnxruntime as ort

    quantize_pooled_classifier_for_the_cpu(tmp_path)
    model = onnx.load(str(tmp_path / "int8.onnx"))
    rounded = {node.input[0] for node in model.graph.node if node.op_type == "QuantizeLinear"}
    assert not rounded & {"matmul", "logits"}  # the float output layer is never rounded, so nothing to drop there
    scales = {init.name: onnx.numpy_helper.to_array(init) for init in model.graph.initializer}
    pool_q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "pool")
    assert float(scales[pool_q.input[1]]) == pytest.approx(2.0 / 127)  # the learned [-2, 2] on QAT's grid, not 30,000
    images = np.random.default_rng(1).uniform(0, 1, (8, 1, 6, 6)).astype(np.float32)
    outputs = {}
    for name in ("fp32", "int8"):
        session = ort.InferenceSession(str(tmp_path / f"{name}.onnx"), providers=["CPUExecutionProvider"])
        outputs[name] = session.run(None, {"image": images})[0]
    assert np.abs(outputs["int8"] - outputs["fp32"]).max() < 0.1 and np.abs(outputs["fp32"]).max() > 0.1


def test_a_symmetric_range_on_the_cpu_is_stepped_as_qat_steps_it(tmp_path):
    """QAT rounds a symmetric [-a, a] in steps of a/127 (narrow-range int8). ONNX Runtime would
    step [-a, a] in uint8 by 2a/255, and values would round to other codes than QAT's (ResNet-50:
    98.7% agreement with its QAT model instead of 99.5%). The CPU graph must use QAT's grid."""
    import numpy as np

    quantize_pooled_classifier_for_the_cpu(tmp_path)
    model = onnx.load(str(tmp_path / "int8.onnx"))
    constants = {init.name: onnx.numpy_helper.to_array(init) for init in model.graph.initializer}
    image_q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "image")
    scale, zero = float(constants[image_q.input[1]]), int(constants[image_q.input[2]])
    assert scale == pytest.approx(1.0 / 127) and zero == 128
    qat_values = np.arange(-127, 128) / 127.0  # every value QAT's fake-quant gives on [-1, 1]
    assert np.allclose((np.clip(np.round(qat_values / scale) + zero, 0, 255) - zero) * scale, qat_values)


def test_a_qat_tensor_only_a_pooling_reads_is_rounded_on_qats_grid_in_the_tensorrt_placement(tmp_path):
    """TensorRT's placement rounds the inputs of int8 ops; the ReLU output here feeds only the
    pooling, so it went unrounded and unclipped though QAT rounded it at every step (ResNet-50's
    last block: 0.2% of predictions differed from the QAT model). The pooling must read the ReLU
    output rounded and clipped on QAT's grid: what QAT's fake-quant computes."""
    import numpy as np
    import onnxruntime as ort

    fp32 = pooled_classifier(tmp_path / "fp32.onnx")
    learned = {"image": (-1.0, 1.0), "relu": (-1.5, 1.5), "squeezed": (-2.0, 2.0)}
    qdq.quantize_int8(fp32, tmp_path / "int8.onnx", learned, ["conv"], "tensorrt")
    assert qdq.fake_quantize_tensors(tmp_path / "int8.onnx", learned) == ["relu"]
    assert qdq_check.check_qdq(onnx.load(str(tmp_path / "int8.onnx")), output_layer_float=False) == []
    assert qdq.fake_quantize_tensors(tmp_path / "int8.onnx", learned) == []  # rounded once, not twice

    model = onnx.load(str(tmp_path / "int8.onnx"))
    pool = next(node for node in model.graph.node if node.op_type == "GlobalAveragePool")
    model.graph.output.append(onnx.helper.make_tensor_value_info(pool.input[0], onnx.TensorProto.FLOAT, None))
    model.graph.output.append(onnx.helper.make_tensor_value_info("conv", onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    images = np.random.default_rng(2).uniform(-1, 1, (8, 1, 6, 6)).astype(np.float32)
    _, pooled_input, conv = session.run(None, {"image": images})
    step = 1.5 / 127
    assert np.abs(conv).max() > 1.5  # the clip matters
    expected = np.clip(np.round(np.maximum(conv, 0) / step), -127, 127) * step  # QAT's fake-quant of the ReLU
    assert np.allclose(pooled_input, expected, atol=1e-6)


def test_the_float_output_layer_reads_unclipped_features_in_the_cpu_placement(tmp_path):
    """ONNX Runtime's placement quantizes every op output, so the features a float output layer
    reads were clipped to their calibrated range; an entropy range cuts the rare large features a
    detector's heatmap peaks come from (CenterNet: mAP@.5 0.57 on the CPU against 0.97 in TensorRT's
    placement of the same ranges). The output layer must read them as TensorRT's placement leaves
    them: float, the ReLU6 the quantizer had folded into that Q put back."""
    import numpy as np

    fp32 = conv_relu6_conv(tmp_path / "fp32.onnx")
    ranges = {"image": (-1.0, 1.0), "conv": (-8.0, 8.0), "relu6": (0.0, 2.0), "out": (0.0, 2.0)}  # 2.0: a clipping range
    freed = qdq.quantize_int8(fp32, tmp_path / "int8.onnx", ranges, ["conv1"], placement="onnxruntime_cpu", weight_bits=HERE_BITS)
    assert freed == ["relu6"]
    images = np.random.default_rng(1).uniform(-1, 1, (8, 1, 6, 6)).astype(np.float32)
    outputs = fp32_and_int8_outputs(tmp_path, images)
    assert outputs["fp32"].max() > 4.0 and outputs["int8"].max() > 4.0  # not clipped at the calibrated 2.0
    assert outputs["int8"].min() >= 0.0 and outputs["int8"].max() <= 6.0  # the ReLU6 clamps again
    assert np.abs(outputs["int8"] - outputs["fp32"]).max() < 0.2  # conv1's int8 rounding only


def depthwise_conv(path, channels=8):
    """One depthwise 3x3 conv of weight 1: every output sums 9 inputs."""
    import numpy as np
    from onnx import helper

    weights = {"w": np.ones((channels, 1, 3, 3), np.float32)}
    nodes = [helper.make_node("Conv", ["image", "w"], ["out"], group=channels, pads=[1, 1, 1, 1], name="dw")]
    return save_graph(path, "depthwise", nodes, weights, ("image", ["N", channels, 4, 4]), ("out", ["N", channels, 4, 4]))


def test_depthwise_weights_keep_8_bits_on_the_cpu_and_cannot_saturate(tmp_path):
    """Only the GEMM kernels saturate in 16 bits; a depthwise kernel keeps its 8th bit (9 weights a
    channel: 7 bits cost MobileNetV2 1 point of agreement with its QAT model), and its sum at high
    activation codes stays exact. Ordinary convs keep 7 bits (the saturation test above)."""
    import numpy as np
    import onnxruntime as ort

    fp32 = depthwise_conv(tmp_path / "fp32.onnx")
    ranges = {"image": (-8.0, 8.0), "out": (-128.0, 128.0)}
    qdq.quantize_int8(fp32, tmp_path / "int8.onnx", ranges, ["dw"], placement="onnxruntime_cpu", weight_bits=HERE_BITS)
    [weight] = [
        onnx.numpy_helper.to_array(init)
        for init in onnx.load(str(tmp_path / "int8.onnx")).graph.initializer
        if init.data_type == onnx.TensorProto.INT8 and init.dims and len(init.dims) == 4
    ]
    assert int(np.abs(weight).max()) == 127  # 8 bits, not 7
    images = np.full((2, 8, 4, 4), 7.5, np.float32)  # uint8 code 247 under the symmetric range
    outputs = {}
    for name in ("fp32", "int8"):
        session = ort.InferenceSession(str(tmp_path / f"{name}.onnx"), providers=["CPUExecutionProvider"])
        outputs[name] = session.run(None, {"image": images})[0]
    assert np.allclose(outputs["int8"], outputs["fp32"], rtol=0.02), (outputs["int8"].max(), outputs["fp32"].max())


def test_a_float_output_layer_hands_out_float_logits_in_the_cpu_placement(tmp_path):
    """Post-training ranges, output layer kept float (int8.keep_output_layer): no integer op and no
    Q/DQ between the float MatMul and the logits, and no tie among the logits that fp32 lacks."""
    import numpy as np

    fp32 = pooled_classifier(tmp_path / "fp32.onnx")
    ranges = {"image": (-1.0, 1.0), "conv": (-3.0, 3.0), "relu": (0.0, 3.0), "pool": (0.0, 3.0), "squeezed": (0.0, 3.0)}
    ranges.update({"matmul": (-4.0, 4.0), "logits": (-4.0, 4.0)})
    qdq.quantize_int8(fp32, tmp_path / "int8.onnx", ranges, ["conv"], placement="onnxruntime_cpu", weight_bits=HERE_BITS)
    graph = onnx.load(str(tmp_path / "int8.onnx")).graph
    producers = {out: node for node in graph.node for out in node.output}
    head = [producers["logits"], producers[producers["logits"].input[0]]]
    assert [node.op_type for node in head] == ["Add", "MatMul"]  # float to the output: no DequantizeLinear there
    images = np.random.default_rng(3).uniform(-1, 1, (64, 1, 6, 6)).astype(np.float32)
    logits = fp32_and_int8_outputs(tmp_path, images)
    top_two = np.sort(logits["int8"], axis=1)[:, -2:]
    assert not np.any(top_two[:, 0] == top_two[:, 1])  # no ties: the logits are not on an int8 grid
    assert len(np.unique(np.round(logits["int8"] / (8.0 / 255), 6))) > 16  # ... nor on the logits range's steps


def fp32_and_int8_outputs(folder, images):
    """{"fp32", "int8"}: the outputs of folder's fp32.onnx and int8.onnx on the CPU, as engines run them."""
    import onnxruntime as ort

    outputs = {}
    for name in ("fp32", "int8"):
        session = ort.InferenceSession(
            str(folder / f"{name}.onnx"), providers=["CPUExecutionProvider"], disabled_optimizers=qdq.ORT_DISABLED_OPTIMIZERS
        )
        outputs[name] = session.run(None, {"image": images})[0]
    return outputs


def padded_convs(path):
    """Conv0 -> Relu -> Pad -> Conv1 -> Relu -> Pad -> Conv2 -> Relu -> GlobalAveragePool -> Flatten -> Gemm."""
    import numpy as np
    from onnx import helper

    rng = np.random.default_rng(0)
    weights, nodes, current = {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)}, [], "image"
    for index, channels_in in enumerate((1, 3, 3)):
        weights[f"w{index}"] = rng.normal(0, 0.5, (3, channels_in, 3, 3)).astype(np.float32)
        if index:
            nodes.append(helper.make_node("Pad", [current, "pads"], [f"pad{index}"], name=f"pad{index}"))
            current = f"pad{index}"
        nodes += [
            helper.make_node(
                "Conv",
                [current, f"w{index}"],
                [f"conv{index}"],
                pads=[0, 0, 0, 0] if index else [1, 1, 1, 1],
                name=f"conv{index}",
            ),
            helper.make_node("Relu", [f"conv{index}"], [f"relu{index}"], name=f"relu{index}"),
        ]
        current = f"relu{index}"
    weights["fc"] = rng.normal(0, 0.2, (3, 4)).astype(np.float32)
    nodes += [
        helper.make_node("GlobalAveragePool", [current], ["pool"], name="pool"),
        helper.make_node("Flatten", ["pool"], ["flat"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["flat", "fc"], ["logits"], name="logits"),
    ]
    return save_graph(path, "padded", nodes, weights, ("image", ["N", 1, 6, 6]), ("logits", ["N", 4]))


def test_ops_between_float_convolutions_get_no_qdq_in_the_cpu_placement(tmp_path):
    """int8_mixed keeps conv1 and conv2 in float: the Pad between them and the pooling after conv2
    have no int8 neighbour, so no Q/DQ is placed around them and the engine runs them in float; the
    Pad after the int8 conv0 may stay quantized (its producer is int8)."""
    from collections import Counter

    fp32 = padded_convs(tmp_path / "fp32.onnx")
    tensors = ["image", "conv0", "relu0", "pad1", "conv1", "relu1", "pad2", "conv2", "relu2", "pool", "flat", "logits"]
    ranges = {name: (-4.0, 4.0) for name in tensors}
    (tmp_path / "graph").mkdir()
    qdq.quantize_int8(
        fp32, tmp_path / "graph" / "model.onnx", ranges, ["conv0"], placement="onnxruntime_cpu", weight_bits=HERE_BITS
    )
    graph = onnx.load(str(tmp_path / "graph" / "model.onnx")).graph
    rounded = {node.input[0] for node in graph.node if node.op_type == "QuantizeLinear"}
    assert not rounded & {"relu1", "pad2", "relu2", "pool", "flat", "logits"}, rounded
    (tmp_path / "engine").mkdir()
    ops, label = engine_ops(tmp_path / "graph", tmp_path / "engine")
    counts = Counter(ops)
    assert counts["QLinearConv"] == 1 and "QLinearGlobalAveragePool" not in counts and label["executed_precision"] == "int8 1/4"


def test_the_cpu_placement_stores_8_bit_weights_where_the_target_cpu_accumulates_in_32_bits(monkeypatch):
    """7-bit weights are for CPUs without VNNI or a dot product (int16 accumulation saturates); on
    an AVX-512 VNNI CPU they once cost int8_qat 5 of 304 images against its QAT model. The CPU is the
    target's: declared, or read where the graph is made -- never the planner's."""
    from precisionflow import cpu_features as devices
    from precisionflow.precisions.static_int8 import cpu_of
    from precisionflow.quant import qdq
    from precisionflow.cpu_features import READ_WHERE_MADE

    assert devices.integer_dot_product() in (*devices.INTEGER_DOT_FLAGS, None)  # this machine's /proc/cpuinfo parsed
    assert qdq.cpu_weight_bits("avx512_vnni") == qdq.cpu_weight_bits("asimddp") == 8
    assert qdq.cpu_weight_bits(None) == 7
    cpu = {"int8": {"placement": "onnxruntime_cpu"}}
    for here, bits in (("avx_vnni", 8), (None, 7)):
        monkeypatch.setattr(devices, "integer_dot_product", lambda here=here: here)
        read = cpu_of(dict(cpu, cpu_dot_product=READ_WHERE_MADE))
        assert read["cpu_weight_bits"] == bits and read["cpu_dot_product_from"] == "this machine"
        # a declared CPU wins over this machine's, either way
        assert cpu_of(dict(cpu, cpu_dot_product="none"))["cpu_weight_bits"] == 7
        declared = cpu_of(dict(cpu, cpu_dot_product="asimddp"))
        assert declared["cpu_weight_bits"] == 8 and declared["cpu_dot_product_from"] == "the target"
    assert cpu_of({"int8": {"placement": "tensorrt"}}) == {}
    with pytest.raises(ValueError, match="expected 7 or 8"):  # never a default standing in for the CPU's answer
        qdq.quantize_int8(Path("unused.onnx"), Path("unused-int8.onnx"), {}, [], "onnxruntime_cpu")
