import numpy as np
import pytest

from precisionflow.backends import get_backend
from precisionflow.errors import ConfigError, EngineMismatchError

ENGINE = {"backend": "onnxruntime", "optimization_level": "all", "intra_op_threads": 1}
LOCAL = {"device": "auto", "expect_device": "", "resources": {}}


def _built(tiny_onnx, tmp_path):
    backend = get_backend("onnxruntime")
    description = backend.build(tiny_onnx, tmp_path, ENGINE, LOCAL)
    return backend, description


def test_build_saves_an_engine_with_provenance(tiny_onnx, tmp_path):
    _, description = _built(tiny_onnx, tmp_path)
    assert (tmp_path / description["engine_file"]).stat().st_size == description["engine_bytes"] > 0
    for key in ("backend_version", "device", "device_name", "build_seconds"):
        assert description[key] not in (None, "")


def test_loaded_engine_matches_plain_onnxruntime(tiny_onnx, tmp_path, tiny_images):
    import onnxruntime as ort

    backend, description = _built(tiny_onnx, tmp_path)
    engine = backend.load(tmp_path, description, LOCAL)
    expected = ort.InferenceSession(str(tiny_onnx), providers=["CPUExecutionProvider"]).run(None, {"image": tiny_images})[0]
    np.testing.assert_allclose(engine.run(tiny_images), expected, rtol=1e-5, atol=1e-5)
    engine.prepare(tiny_images[:1])()


@pytest.mark.parametrize("key, fake", [("backend_version", "0.0.1"), ("device_name", "NVIDIA A100-SXM4-80GB")])
def test_engine_from_another_runtime_or_device_is_refused(tiny_onnx, tmp_path, key, fake):
    backend, description = _built(tiny_onnx, tmp_path)
    with pytest.raises(EngineMismatchError) as caught:
        backend.load(tmp_path, dict(description, **{key: fake}), LOCAL)
    assert f"{key} '{fake}'" in str(caught.value) and "Rebuild" in str(caught.value)


def test_target_expecting_another_device_is_refused(tiny_onnx, tmp_path):
    with pytest.raises(EngineMismatchError, match="expects a device named like 'H100'"):
        get_backend("onnxruntime").build(tiny_onnx, tmp_path, ENGINE, dict(LOCAL, expect_device="H100"))


def test_unknown_backend_and_level_are_config_errors(tiny_onnx, tmp_path):
    with pytest.raises(ConfigError, match="engine.backend"):
        get_backend("tensorflow-lite")
    with pytest.raises(ConfigError, match="engine.optimization_level"):
        get_backend("onnxruntime").build(tiny_onnx, tmp_path, dict(ENGINE, optimization_level="max"), LOCAL)


def test_an_fp16_graph_on_the_cpu_provider_is_labelled_as_the_fp32_it_runs(tiny_onnx, tmp_path):
    from precisionflow.precisions.fp16 import to_fp16
    from precisionflow.precisions.spec import GraphJob

    (tmp_path / "fp16").mkdir()
    to_fp16(GraphJob(tiny_onnx, tmp_path / "fp16" / "model.onnx", {"fp16": {"op_block_list": []}}, {}, tmp_path))
    backend = get_backend("onnxruntime")
    executed = backend.build(tmp_path / "fp16" / "model.onnx", tmp_path / "fp16", ENGINE, dict(LOCAL, device="cpu"), "fp16")[
        "executed"
    ]
    assert executed["graph_precision"] == "fp16" and executed["executed_precision"] == "fp32"
    assert executed["as_requested"] is False
    assert executed["label"] == "fp16 graph, ran fp32 on CPUExecutionProvider"


def test_an_fp32_graph_is_labelled_as_requested(tiny_onnx, tmp_path):
    executed = get_backend("onnxruntime").build(tiny_onnx, tmp_path, ENGINE, dict(LOCAL, device="cpu"), "fp32")["executed"]
    assert executed["as_requested"] is True and executed["compute_op_types"] == {"fp32": 2}


def test_cuda_provider_options_come_from_the_engine_settings():
    from precisionflow.backends.onnxruntime_backend import cuda_provider_options

    tuned = {"prefer_nhwc": True, "cuda_graph": True, "cudnn_conv_algo_search": "HEURISTIC", "use_tf32": False}
    assert cuda_provider_options(tuned, stream_pointer=1234) == {
        "device_id": "0",
        "prefer_nhwc": "1",
        "enable_cuda_graph": "1",
        "cudnn_conv_algo_search": "HEURISTIC",
        "use_tf32": "0",
        "has_user_compute_stream": "1",
        "user_compute_stream": "1234",
    }
    assert cuda_provider_options(None) == {"device_id": "0"}
    with pytest.raises(ConfigError, match="cudnn_conv_algo_search: expected one of"):
        cuda_provider_options(dict(tuned, cudnn_conv_algo_search="FASTEST"))


def test_the_table_names_the_cuda_options_an_engine_ran_with():
    from precisionflow.reporting.report_rows import engine_options

    options = {"use_tf32": "0", "prefer_nhwc": "1", "enable_cuda_graph": "0"}
    assert (
        engine_options({"cuda_options": options, "cuda_graph_refused": "nodes on CPU"})
        == "no TF32, NHWC, no CUDA graph (nodes on CPU)"
    )
    assert engine_options({"cuda_options": dict(options, use_tf32="1", enable_cuda_graph="1")}) == "TF32, NHWC, CUDA graph"
    assert engine_options({"cuda_options": None}) == ""


def test_an_engine_that_fails_its_first_run_with_nhwc_is_built_without_it_and_says_why(tmp_path):
    """MobileNetV2's int8 engine with prefer_nhwc built on the H200 and failed at its first inference;
    the build now runs one batch, and on such a failure builds again without NHWC."""
    from precisionflow.backends.onnxruntime_backend import built_without_refused_nhwc
    from precisionflow.errors import EngineMismatchError

    message = "Input channels C is not equal to kernel channels * group. C: 32 kernel channels: 3 group: 1"
    tried = []

    def attempt(cuda):
        tried.append(dict(cuda))
        return cuda, message if cuda["prefer_nhwc"] else None

    cuda, refused = built_without_refused_nhwc(attempt, {"prefer_nhwc": True, "cuda_graph": False}, tmp_path / "engine.onnx")
    assert cuda["prefer_nhwc"] is False and refused == message and [t["prefer_nhwc"] for t in tried] == [True, False]
    assert built_without_refused_nhwc(attempt, {"prefer_nhwc": False}, tmp_path / "e.onnx") == ({"prefer_nhwc": False}, None)
    with pytest.raises(EngineMismatchError, match="fails when loaded and run"):
        built_without_refused_nhwc(lambda cuda: (cuda, "broken"), {"prefer_nhwc": False}, tmp_path / "e.onnx")


def test_a_graph_with_fp16_inputs_gets_the_right_advice(tmp_path):
    """Its self-check once advised a lower optimization level or no NHWC; the cause is float32
    images fed to an fp16 input, which no build setting changes."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["image"], ["out"])],
        "fp16_inputs",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT16, [1, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT16, [1, 4])],
    )
    path = tmp_path / "fp16_inputs.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    (tmp_path / "engine").mkdir()
    with pytest.raises(EngineMismatchError) as refused:
        get_backend("onnxruntime").build(path, tmp_path / "engine", ENGINE, LOCAL, "fp16")
    message = str(refused.value)
    assert "takes tensor(float16)" in message and "keep_io_types" in message
    assert "optimization_level" not in message
