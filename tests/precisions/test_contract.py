"""Every registered precision through the same checks (issue 41): its spec is complete and
consistent, it plans with the default configuration, and -- where its graph needs no calibration --
its graph is made, built by ONNX Runtime and labelled by what ran."""

import json

import numpy as np
import pytest

from precisionflow import precisions
from precisionflow.config.compose import expand
from precisionflow.pipeline import plan as planning

NAMES = precisions.names()
RUNS_IN = {"integer", "fp32", "fp16", "bf16"}


def test_the_registry_holds_the_builtins_and_one_reference():
    assert {"fp32", "fp16", "int8", "int8_qat", "int8_mixed", "int8_dynamic"} <= set(NAMES)
    assert [name for name in NAMES if precisions.get(name).is_reference] == ["fp32"]


@pytest.mark.parametrize("name", NAMES)
def test_a_spec_is_complete_and_consistent(name):
    spec = precisions.get(name)
    assert spec.name == name and spec.summary and callable(spec.make_graph)
    assert spec.runs_in in RUNS_IN and spec.calibration in (None, "ptq", "qat")
    assert set(spec.backends) <= {"onnxruntime", "tensorrt"} and spec.backends
    assert "tensorrt" in spec.backends or spec.why_not_tensorrt  # a refusal says why
    assert "detection" in spec.tasks or spec.why_not_detection
    if spec.builds_on:
        assert spec.builds_on in NAMES and precisions.get(spec.builds_on).placement_dependent == spec.placement_dependent
    if spec.qat_finetune:
        assert spec.calibration == "qat"  # QAT's ranges travel as a calibration cache
    if spec.simulate_tensorrt:
        assert spec.placement_dependent and "tensorrt" in spec.backends


@pytest.mark.parametrize("name", NAMES)
def test_graph_params_are_plain_data_read_from_the_config(name):
    cfg = expand([f"precisions=[fp32,{name}]" if name != "fp32" else "precisions=[fp32]"])[0]
    params = precisions.get(name).graph_params(cfg, "onnxruntime_cpu")
    assert json.loads(json.dumps(params, sort_keys=True)) == params  # plain JSON data: it round-trips unchanged
    assert params == precisions.get(name).graph_params(cfg, "onnxruntime_cpu")  # deterministic: it is hashed


@pytest.mark.parametrize("name", NAMES)
def test_every_precision_plans_with_the_default_experiment(name):
    overrides = [f"precisions=[fp32,{name}]" if name != "fp32" else "precisions=[fp32]", "int8.mixed_max_val_drop=null"]
    builder = planning.PlanBuilder()
    measured = [node for point in expand(overrides) for node in builder.add_point(point)]
    spec = precisions.get(name)
    graphs = [
        node for key, node in builder.nodes.items() if key.startswith("quantize_onnx/") and node.params["precision"] == name
    ]
    assert graphs
    for graph in graphs:
        assert ("calibration" in graph.inputs) == bool(spec.calibration)
        if spec.builds_on:
            assert builder.nodes[graph.inputs[spec.builds_on]].params["precision"] == spec.builds_on
    evaluations = [n for n in measured if n.stage == "evaluate_engine" and n.params["precision"] == name]
    assert evaluations and all(("qat_model" in n.inputs) == spec.compared_with_trained_model for n in evaluations)
    twins = [n for n in measured if n.stage == "evaluate_engine" and n.params.get("twin_of")]
    assert bool(twins) == spec.judged_against_twin


def without_calibration():
    return [name for name in NAMES if not precisions.get(name).calibration and not precisions.get(name).builds_on]


@pytest.mark.parametrize("name", without_calibration())
def test_its_graph_is_made_built_and_labelled_by_what_ran(name, tiny_onnx, tmp_path):
    import onnxruntime as ort

    from precisionflow.backends import get_backend

    cfg = expand([f"precisions=[fp32,{name}]" if name != "fp32" else "precisions=[fp32]"])[0]
    spec = precisions.get(name)
    params = {"precision": name, **spec.graph_params(cfg, "onnxruntime_cpu")}
    (tmp_path / "graph").mkdir()
    spec.make_graph(tiny_onnx, tmp_path / "graph" / "model.onnx", params, {}, tmp_path / "graph")
    images = np.random.default_rng(0).random((8, 8, 8, 1), dtype=np.float32)
    made = ort.InferenceSession(str(tmp_path / "graph" / "model.onnx"), providers=["CPUExecutionProvider"])
    fp32 = ort.InferenceSession(str(tiny_onnx), providers=["CPUExecutionProvider"])
    agree = made.run(None, {"image": images})[0].argmax(1) == fp32.run(None, {"image": images})[0].argmax(1)
    assert agree.mean() >= 0.75  # a graph of the same model, not another one
    engine = {"backend": "onnxruntime", "optimization_level": "all", "intra_op_threads": 1}
    built = get_backend("onnxruntime").build(
        tmp_path / "graph" / "model.onnx", tmp_path / "graph", engine, {"device": "cpu", "expect_device": ""}, name
    )
    executed = built["executed"]
    assert executed["graph_precision"] == name and executed["label"].startswith(f"{name} graph, ran ")
    if spec.runs_in == "integer":  # some compute in integer kernels, counted from the optimised engine
        assert executed["as_requested"] and executed["compute_op_types"].get("int8", 0) >= 1
    if spec.is_reference:
        assert executed["as_requested"] and executed["executed_precision"] == "fp32"


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_a_lower_float_type_the_cpu_provider_lacks_is_labelled_as_the_fp32_it_ran(name, tiny_onnx, tmp_path):
    """ONNX Runtime's CPU provider has no fp16 kernels for most ops and no bf16 kernels at all."""
    from precisionflow.backends import get_backend

    spec = precisions.get(name)
    params = {"precision": name, **spec.graph_params(expand([f"precisions=[fp32,{name}]"])[0], "onnxruntime_cpu")}
    spec.make_graph(tiny_onnx, tmp_path / "model.onnx", params, {}, tmp_path)
    engine = {"backend": "onnxruntime", "optimization_level": "all", "intra_op_threads": 1}
    executed = get_backend("onnxruntime").build(tmp_path / "model.onnx", tmp_path, engine, {"device": "cpu"}, name)["executed"]
    assert executed["executed_precision"] == "fp32" and not executed["as_requested"]
    assert executed["label"].startswith(f"{name} graph, ran fp32 on CPUExecutionProvider")


def test_bf16_rounds_the_weights_it_stores():
    from precisionflow.precisions.bf16 import float32_bits_to_bf16

    values = np.array([1.0, 1.00390625, 3.14159265, -2.5e-3], dtype=np.float32)
    back = (float32_bits_to_bf16(values).astype(np.uint32) << 16).view(np.float32)
    assert back[0] == 1.0 and back[1] == 1.0 and back[2] == np.float32(3.140625)  # 8 bits of mantissa, nearest even
    assert np.all(np.abs(back - values) <= np.abs(values) * 2**-8)


def test_a_plug_in_precision_needs_no_edit_of_the_package(tmp_path):
    """PRECISIONFLOW_PRECISIONS names a module defining SPEC; a new interpreter registers it, and its
    source hash is part of its graph node's params (editing it rebuilds its engines)."""
    import os
    import subprocess
    import sys

    (tmp_path / "toy_precision.py").write_text(
        "from precisionflow.precisions.fp32 import copy_graph\n"
        "from precisionflow.precisions.spec import PrecisionSpec\n"
        "SPEC = PrecisionSpec(name='copied_fp32', summary='a toy', make_graph=copy_graph)\n"
    )
    env = {**os.environ, "PRECISIONFLOW_PRECISIONS": "toy_precision", "PYTHONPATH": str(tmp_path)}
    code = (
        "from precisionflow.config.compose import expand\n"
        "from precisionflow.stages import NodeContext, quantize_onnx\n"
        "cfg = expand(['precisions=[fp32,copied_fp32]'])[0]\n"
        "print(sorted(quantize_onnx.node_params(NodeContext(cfg, precision='copied_fp32'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "['plugin_sha256', 'precision']" in done.stdout
    env["PRECISIONFLOW_PRECISIONS"] = "no_such_module"
    done = subprocess.run([sys.executable, "-c", "import precisionflow.precisions"], env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "PRECISIONFLOW_PRECISIONS: expected importable modules" in done.stderr


def test_bf16_casts_a_tensor_two_ops_read_once(tmp_path):
    """resnet_mini's block outputs feed two convolutions: one cast each, not two (an ONNX graph
    names each tensor once -- the first default-data run failed there)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from precisionflow.precisions.bf16 import to_bf16

    weights = [numpy_helper.from_array(np.ones((4, 4), np.float32), name) for name in ("w1", "w2")]
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["shared"]),
            helper.make_node("MatMul", ["shared", "w1"], ["a"]),
            helper.make_node("MatMul", ["shared", "w2"], ["b"]),
            helper.make_node("Add", ["a", "b"], ["y"]),
        ],
        "shared",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        weights,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "in.onnx"))
    for placement in ("onnxruntime_cpu", "tensorrt"):
        made = to_bf16(tmp_path / "in.onnx", tmp_path / f"{placement}.onnx", {"bf16": {"placement": placement}}, {}, tmp_path)
        casts = [
            n for n in onnx.load(str(tmp_path / f"{placement}.onnx")).graph.node if n.op_type == "Cast" and n.input[0] == "shared"
        ]
        assert len(casts) == 1 and made["weights_in_bf16"] == 2


def test_bf16_warns_at_planning_on_a_gpu_placement_only():
    """Measured on the H200: ONNX Runtime's CUDA provider runs no bf16 convolution, so a bf16 row there
    is slower than fp32; planning says so, and stays quiet on the CPU placement (whose label says fp32)."""
    spec = precisions.get("bf16")
    gpu = spec.planning_warning({"bf16": {"placement": "tensorrt"}}, lambda: {})
    assert gpu and "no bfloat16 convolution" in gpu and "slower than fp32" in gpu
    assert spec.planning_warning({"bf16": {"placement": "onnxruntime_cpu"}}, lambda: {}) is None
