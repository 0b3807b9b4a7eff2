"""export_onnx: Keras model -> ONNX (tf2onnx), verified against Keras on the test split.

Also saves the Keras model's logits on the test split (reference_logits.npy): every engine's
"agreement with fp32" is measured against these, the true framework fp32 reference.
"""

import sys
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
    import onnx

    graph_path = out / "model.onnx"
    _keras_side(inputs["model"], inputs["data"], graph_path, params["opset"])
    keras_logits = np.load(out / "reference_logits.npy", allow_pickle=False)
    onnx_logits = _onnx_logits(graph_path, Split(inputs["data"], "test"))
    max_diff = float(np.max(np.abs(keras_logits - onnx_logits)))  # checked by check() against the threshold
    model_proto = onnx.load(str(graph_path))
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


def _keras_side(model_dir: Path, data_dir: Path, graph_path: Path, opset: int) -> None:
    """The conversion and the Keras logits (reference_logits.npy beside the graph), in a Python of
    their own whose CUDA sees no GPU (CUDA_VISIBLE_DEVICES=-1). So the reference every engine is
    compared with is plain fp32 on any machine (a GPU's TensorFlow may run convolutions in TF32), and
    a GPU machine whose TensorFlow cannot load its CUDA libraries (a driver newer than the CUDA
    TensorFlow was built for) still converts: there grappler's Cluster, which the conversion creates,
    raises "Error loading CUDA libraries" unless the process sees no GPU. A process of its own because
    CUDA reads that variable once per process: set in this one, it would hide the GPU from every node
    run after this one in it (`remote run` runs a bundle's nodes in one process)."""
    import os
    import subprocess

    command = [sys.executable, *(["-S"] if sys.flags.no_site else []), "-m", __name__]
    arguments = [str(model_dir / "model.keras"), str(data_dir), str(graph_path), str(opset)]
    ended = subprocess.run([*command, *arguments], env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1"})
    if ended.returncode != 0:
        raise StageError(
            f"The Keras side of the export (conversion to ONNX and the Keras logits) failed with exit "
            f"{ended.returncode}; its messages are above in this node's log."
        )


def convert_and_predict(model_file: Path, data_dir: Path, graph_path: Path, opset: int) -> None:
    """Keras model -> graph_path (tf2onnx) and its logits on the test split -> reference_logits.npy."""
    import tf2onnx

    from precisionflow.modeling.tfenv import import_tensorflow

    tf, keras = import_tensorflow()
    model = keras.models.load_model(model_file, compile=False)
    signature = (tf.TensorSpec((None,) + tuple(model.input_shape[1:]), tf.float32, name="image"),)
    tf2onnx.convert.from_keras(model, input_signature=signature, opset=opset, output_path=str(graph_path))
    keras_logits = predict_in_batches(lambda batch: model.predict_on_batch(batch), Split(data_dir, "test"), BATCH)
    np.save(graph_path.parent / "reference_logits.npy", keras_logits)


if __name__ == "__main__":  # _keras_side's process: MODEL_FILE DATA_DIR GRAPH_PATH OPSET
    model_file, data_dir, graph_path, opset = sys.argv[1:]
    convert_and_predict(Path(model_file), Path(data_dir), Path(graph_path), int(opset))
