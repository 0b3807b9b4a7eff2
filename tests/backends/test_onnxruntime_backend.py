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
    from precisionflow.stages import quantize_onnx

    (tmp_path / "fp16").mkdir()
    quantize_onnx.to_fp16(tiny_onnx, tmp_path / "fp16" / "model.onnx", [])
    backend = get_backend("onnxruntime")
    executed = backend.build(tmp_path / "fp16" / "model.onnx", tmp_path / "fp16", ENGINE, dict(LOCAL, device="cpu"), "fp16")["executed"]
    assert executed["graph_precision"] == "fp16" and executed["executed_precision"] == "fp32"
    assert executed["as_requested"] is False
    assert executed["label"] == "fp16 graph, ran fp32 on CPUExecutionProvider"


def test_an_fp32_graph_is_labelled_as_requested(tiny_onnx, tmp_path):
    executed = get_backend("onnxruntime").build(tiny_onnx, tmp_path, ENGINE, dict(LOCAL, device="cpu"), "fp32")["executed"]
    assert executed["as_requested"] is True and executed["compute_op_types"] == {"fp32": 2}
