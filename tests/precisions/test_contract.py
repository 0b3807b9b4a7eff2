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
    assert [name for name in NAMES if precisions.get(name).judging.is_reference] == ["fp32"]


@pytest.mark.parametrize("name", NAMES)
def test_a_spec_is_complete_and_consistent(name):
    spec = precisions.get(name)
    assert spec.name == name and spec.summary and callable(spec.make_graph)
    assert spec.judging.runs_in in RUNS_IN and spec.graph.calibration in (None, "ptq", "qat")
    assert set(spec.support.backends) <= {"onnxruntime", "tensorrt"} and spec.support.backends
    assert "tensorrt" in spec.support.backends or spec.support.why_not_tensorrt  # a refusal says why
    assert "detection" in spec.support.tasks or spec.support.why_not_detection
    if spec.graph.builds_on:
        assert (
            spec.graph.builds_on in NAMES and precisions.get(spec.graph.builds_on).graph.per_placement == spec.graph.per_placement
        )
    if spec.graph.from_qat_finetune:
        assert spec.graph.calibration == "qat"  # QAT's ranges travel as a calibration cache
    if spec.tensorrt.simulated_on_cpu:
        assert spec.graph.per_placement and "tensorrt" in spec.support.backends


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
        assert ("calibration" in graph.inputs) == bool(spec.graph.calibration)
        if spec.graph.builds_on:
            assert builder.nodes[graph.inputs[spec.graph.builds_on]].params["precision"] == spec.graph.builds_on
    evaluations = [n for n in measured if n.stage == "evaluate_engine" and n.params["precision"] == name]
    assert evaluations and all(("qat_model" in n.inputs) == spec.judging.against_trained_model for n in evaluations)
    twins = [n for n in measured if n.stage == "evaluate_engine" and n.params.get("twin_of")]
    assert bool(twins) == spec.judging.against_twin


def without_calibration():
    return [name for name in NAMES if not precisions.get(name).graph.calibration and not precisions.get(name).graph.builds_on]


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
    if spec.judging.runs_in == "integer":  # some compute in integer kernels, counted from the optimised engine
        assert executed["as_requested"] and executed["compute_op_types"].get("int8", 0) >= 1
    if spec.judging.is_reference:
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
        "from precisionflow.precisions.spec import GraphRecipe, PrecisionSpec\n"
        "SPEC = PrecisionSpec(name='copied_fp32', summary='a toy', graph=GraphRecipe(make=copy_graph))\n"
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
    from precisionflow.precisions.spec import GraphJob

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
        job = GraphJob(tmp_path / "in.onnx", tmp_path / f"{placement}.onnx", {"bf16": {"placement": placement}}, {}, tmp_path)
        made = to_bf16(job)
        casts = [
            n for n in onnx.load(str(tmp_path / f"{placement}.onnx")).graph.node if n.op_type == "Cast" and n.input[0] == "shared"
        ]
        assert len(casts) == 1 and made["weights_in_bf16"] == 2


def test_bf16_warns_at_planning_on_a_gpu_placement_only():
    """Measured on the H200: ONNX Runtime's CUDA provider runs no bf16 convolution, so a bf16 row there
    is slower than fp32; planning says so, and stays quiet on the CPU placement (whose label says fp32)."""
    spec = precisions.get("bf16")
    gpu = spec.graph.planning_warning({"bf16": {"placement": "tensorrt"}}, lambda: {})
    assert gpu and "no bfloat16 convolution" in gpu and "slower than fp32" in gpu
    assert spec.graph.planning_warning({"bf16": {"placement": "onnxruntime_cpu"}}, lambda: {}) is None


def test_a_recipe_with_settings_reads_its_section_and_makes_its_graph_from_them_typed(tmp_path):
    """A precision that declares settings and no params of its own: its graph node's params are its
    configuration section (so they are in its id), and `make` gets them as the dataclass, not a dict."""
    from dataclasses import dataclass

    from precisionflow.precisions.spec import GraphRecipe, PrecisionSpec

    @dataclass
    class Lean:
        alpha: float = 1.0

    handed = []
    spec = PrecisionSpec(
        name="leaning", summary="a toy", graph=GraphRecipe(make=lambda job: handed.append(job) or {}, settings=Lean)
    )
    params = spec.graph_params({"leaning": {"alpha": 3.0}, "fp16": {"op_block_list": []}}, "onnxruntime_cpu")
    assert params == {"leaning": {"alpha": 3.0}}
    spec.make_graph(tmp_path / "in.onnx", tmp_path / "out.onnx", params, {}, tmp_path)
    assert handed[0].settings == Lean(alpha=3.0) and handed[0].params == params


def test_a_plug_in_written_for_the_flat_spec_is_refused_with_where_to_look(tmp_path, monkeypatch):
    """PrecisionSpec's fields were flat before it had parts: such a plug-in gets a ConfigError naming
    the module and the shape expected, not a traceback from its import."""
    from precisionflow.errors import ConfigError

    (tmp_path / "flat_precision.py").write_text(
        "from precisionflow.precisions.fp32 import copy_graph\n"
        "from precisionflow.precisions.spec import PrecisionSpec\n"
        "SPEC = PrecisionSpec(name='flat', summary='old shape', make_graph=copy_graph, runs_in='fp32')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(precisions.PLUGIN_VARIABLE, "flat_precision")
    with pytest.raises(ConfigError, match=r"module 'flat_precision' could not define its SPEC .*make_graph.*add-a-precision"):
        precisions._register_plugins()
    assert "flat" not in precisions.REGISTRY
