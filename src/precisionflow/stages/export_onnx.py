"""export_onnx: Keras model -> ONNX (tf2onnx), verified against Keras on the test split.

Also saves the Keras model's logits on the test split (reference_logits.npy): every engine's
"agreement with fp32" is measured against these, the true framework fp32 reference.
"""

from pathlib import Path
from typing import Any, Dict

import numpy as np

from precisionflow.errors import StageError
from precisionflow.datasets.store import Split, predict_in_batches
from precisionflow.stages import NodeContext

PACKAGES = ("tensorflow", "tf-keras", "tf2onnx", "onnx", "onnxruntime", "numpy")


def node_params(at: NodeContext) -> Dict[str, Any]:
    cfg = at.cfg
    return {"opset": cfg["export"]["opset"]}


def limits(at: NodeContext) -> Dict[str, Any]:
    """Thresholds: checked against the node's summary, not part of its id (a changed threshold
    re-checks the existing export, it does not export again)."""
    return {"max_abs_diff": at.cfg["export"]["max_abs_diff"], "rtol": at.cfg["export"]["rtol"]}


def allowed_diff(limits: Dict[str, Any], summary: Dict[str, Any]) -> float:
    """max_abs_diff + rtol * the largest |logit| Keras gave on the test split."""
    return limits["max_abs_diff"] + limits.get("rtol", 0.0) * summary.get("max_abs_keras_logit", 0.0)


def check(limits: Dict[str, Any], summary: Dict[str, Any]) -> None:
    found, allowed = summary["max_abs_diff_vs_keras"], allowed_diff(limits, summary)
    if found > allowed:
        raise StageError(
            f"The exported graph disagrees with the Keras model: max |logit difference| {found:.3g} on the test split, "
            f"expected <= {allowed:.3g} (export.max_abs_diff={limits['max_abs_diff']} + export.rtol={limits.get('rtol', 0.0)} "
            f"x max |logit| {summary.get('max_abs_keras_logit', 0.0):.3g}). Check for ops tf2onnx converts approximately, "
            "try another export.opset, or raise export.max_abs_diff / export.rtol."
        )


def _convert(tf, model, opset: int, path: Path):
    import tf2onnx

    signature = (tf.TensorSpec((None,) + tuple(model.input_shape[1:]), tf.float32, name="image"),)
    model_proto, _ = tf2onnx.convert.from_keras(model, input_signature=signature, opset=opset, output_path=str(path))
    return model_proto


BATCH = 64


def _onnx_logits(path: Path, split: Split) -> np.ndarray:
    import onnxruntime as ort

    # Without the CPU arena: with it, 12 batches of a 224x224 test split grew this job's memory from
    # 1.5 to 3.5 GB (benchmarks/data_scale.py); a verification pass does not need its speed.
    options = ort.SessionOptions()
    options.enable_cpu_mem_arena = False
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return predict_in_batches(lambda batch: session.run(None, {name: batch})[0], split, BATCH)


def _map_qat_ranges(model_dir: Path, model_proto, out: Path):
    """QAT ranges learned per Keras layer -> per tensor of this graph (qat_tensor_ranges.json)."""
    from precisionflow.nodeio import read_json, write_json_atomic
    from precisionflow.quant.onnx_names import map_ranges

    source = model_dir / "qat_ranges.json"
    if not source.exists():
        return None
    learned = read_json(source)
    mapped, unmapped = map_ranges(model_proto, learned["model_name"], learned["ranges"], learned["input_key"])
    write_json_atomic(out / "qat_tensor_ranges.json", {"ranges": mapped, "unmapped_layers": unmapped})
    return len(mapped)


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    from precisionflow.modeling.tfenv import import_tensorflow

    tf, keras = import_tensorflow()
    model = keras.models.load_model(inputs["model"] / "model.keras", compile=False)
    graph_path = out / "model.onnx"
    model_proto = _convert(tf, model, params["opset"], graph_path)
    test = Split(inputs["data"], "test")
    keras_logits = predict_in_batches(lambda batch: model.predict_on_batch(batch), test, BATCH)
    onnx_logits = _onnx_logits(graph_path, test)
    max_diff = float(np.max(np.abs(keras_logits - onnx_logits)))  # checked by check() against the threshold
    np.save(out / "reference_logits.npy", keras_logits)
    qat_tensors = _map_qat_ranges(inputs["model"], model_proto, out)
    return {
        "qat_ranges_mapped": qat_tensors,
        "max_abs_diff_vs_keras": max_diff,
        "max_abs_keras_logit": float(np.max(np.abs(keras_logits))),
        "input_name": model_proto.graph.input[0].name,
        "output_name": model_proto.graph.output[0].name,
        "opset": params["opset"],
        "graph_bytes": graph_path.stat().st_size,
    }
