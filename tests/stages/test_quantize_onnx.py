import numpy as np
import onnx

from precisionflow.stages import quantize_onnx

FP16 = {"op_block_list": ["Softmax"]}


def _run(tiny_onnx, tmp_path, precision):
    source = tmp_path / "export"
    source.mkdir()
    (source / "model.onnx").write_bytes(tiny_onnx.read_bytes())
    out = tmp_path / precision
    out.mkdir()
    summary = quantize_onnx.run({"precision": precision, "fp16": FP16}, {"onnx": source}, out)
    return out / "model.onnx", summary


def test_fp32_is_the_exported_graph(tiny_onnx, tmp_path):
    graph, summary = _run(tiny_onnx, tmp_path, "fp32")
    assert summary["graph_sha256"] == summary["source_sha256"]


def test_fp16_keeps_float_io_and_stores_half_weights(tiny_onnx, tmp_path, tiny_images):
    import onnxruntime as ort

    graph, summary = _run(tiny_onnx, tmp_path, "fp16")
    model = onnx.load(str(graph))
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert {init.data_type for init in model.graph.initializer} == {onnx.TensorProto.FLOAT16}
    run = lambda path: ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"image": tiny_images})[0]
    np.testing.assert_allclose(run(graph), run(tiny_onnx), atol=0.05)
