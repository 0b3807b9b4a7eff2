"""Issue 31: which cause was worth how many of int8_qat's last disagreements (1,728 test images).

Reads the nodes benchmarks/qat_agreement_large.py left in benchmarks/out/qat_agreement_large and
rebuilds graphs from their caches; nothing is trained. The BatchNorm folding is checked first
(the exported int8 weight codes against QAT's fake-quant of the unfolded kernel), then three causes:

1. Stale weight ranges. The QAT model (ResNet-50) is rebuilt in TensorFlow from its stripped
   weights and learned activation ranges, its weight ranges set from the final weights
   (qat.refresh_weight_ranges); its predictions against the qat_logits.npy its fine-tune wrote.
2. A QAT tensor TensorRT's placement left float. The TensorRT-placed int8_qat graph of a run made
   before the fix, as it was and with qdq.fake_quantize_tensors applied, run in float with its
   Q/DQ, against the QAT logits as written and against the rebuilt model of (1).
3. 7-bit depthwise weights. MobileNetV2's CPU int8_qat graph rebuilt from this run's cache with
   7-bit and with 8-bit depthwise weights, in ONNX Runtime's integer kernels.

    .venv/bin/python benchmarks/qat_agreement_attribution.py RESNET50_QAT_NODE RESNET50_TRT_GRAPH_NODE
        e.g. finetune_model/qat-e2-1aa1d1c4b013 quantize_onnx/int8_qat-b656c3823dfe (the run before the fixes)
        -> benchmarks/results/qat_agreement_attribution.json
"""

import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, save  # noqa: E402


def test_images(results: Path):
    from precisionflow.datasets.store import Split

    test = Split(next((results / "prepare_dataset").iterdir()), "test")
    return test.images(np.arange(len(test))).astype(np.float32)


def run_graph(path: Path, images: np.ndarray, integer_kernels: bool) -> np.ndarray:
    """Logits of an ONNX graph: in ONNX Runtime's integer kernels, or in float with its Q/DQ."""
    import onnxruntime as ort

    from precisionflow.quant.qdq import ORT_DISABLED_OPTIMIZERS

    options = ort.SessionOptions()
    if not integer_kernels:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        str(path), options, providers=["CPUExecutionProvider"], disabled_optimizers=ORT_DISABLED_OPTIMIZERS
    )
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: images[i : i + 64]})[0] for i in range(0, len(images), 64)])


def compared(logits: np.ndarray, reference: np.ndarray) -> dict:
    differ = int(np.sum(logits.argmax(1) != reference.argmax(1)))
    return {
        "predictions_differing": differ,
        "of": len(reference),
        "max_abs_logit_diff": round(float(np.abs(logits - reference).max()), 4),
    }


def rebuilt_qat_logits(node: Path, images: np.ndarray) -> np.ndarray:
    """The QAT model of a finetune node, rebuilt, with its weight ranges from the final weights."""
    from precisionflow.modeling import qat
    from precisionflow.modeling.tfenv import import_tensorflow

    _, keras = import_tensorflow()
    learned = json.loads((node / "qat_ranges.json").read_text())["ranges"]
    model, _ = qat.quantize_model(keras, keras.models.load_model(node / "model.keras", compile=False), [])
    for layer in model.layers:
        owner = qat.INPUT_KEY if type(layer).__name__ == "QuantizeLayer" else getattr(getattr(layer, "layer", None), "name", None)
        for variable in layer.weights:
            short = variable.name.split("/")[-1].split(":")[0]
            if short.endswith(("_min", "_max")) and "kernel" not in short and owner in learned:
                low, high = learned[owner]
                variable.assign(np.full(variable.shape, low if short.endswith("_min") else high, np.float32))
    qat.refresh_weight_ranges(model)
    return model, np.concatenate([model.predict_on_batch(images[i : i + 64]) for i in range(0, len(images), 64)])


def folded_weight_codes(model, graph: Path) -> dict:
    """The BatchNorm folding, checked: each conv's int8 weight codes in the exported graph (folded
    weights, quantized per channel) against QAT's fake-quant of the unfolded kernel times the
    folding factor, in steps of the graph's weight scale."""
    import onnx
    import tensorflow as tf
    from onnx import numpy_helper

    onnx_model = onnx.load(str(graph))
    constants = {init.name: numpy_helper.to_array(init) for init in onnx_model.graph.initializer}
    producers = {out: node for node in onnx_model.graph.node for out in node.output}
    layers = {getattr(layer, "layer", layer).name: layer for layer in model.layers}
    compared, differing, largest = 0, 0, 0.0
    for node in (n for n in onnx_model.graph.node if n.op_type == "Conv" and "/" in n.name):
        stem = node.name.split("/")[1].rsplit("_", 1)[0]  # resnet50/conv2_block1_1_conv/BiasAdd -> conv2_block1_1
        conv, norm = layers.get(f"{stem}_conv"), layers.get(f"{stem}_bn")
        dequantize = producers[node.input[1]]
        if conv is None or norm is None or dequantize.op_type != "DequantizeLinear":
            continue
        scale = constants[dequantize.input[1]].reshape(-1, 1, 1, 1)
        codes = constants[dequantize.input[0]].astype(np.float32)
        weights = {v.name.split("/")[-1].split(":")[0]: v.numpy() for v in conv.weights}
        trained = tf.quantization.fake_quant_with_min_max_vars_per_channel(
            weights["kernel"], weights["kernel_min"], weights["kernel_max"], num_bits=8, narrow_range=True
        ).numpy()
        gamma, _, _, variance = (v.numpy() for v in getattr(norm, "layer", norm).weights)
        factor = gamma / np.sqrt(variance + getattr(norm, "layer", norm).epsilon)
        steps = np.abs(codes - (trained * factor).transpose(3, 2, 0, 1) / scale)
        compared, differing, largest = (
            compared + steps.size,
            differing + int(np.sum(steps > 0.5)),
            max(largest, float(steps.max())),
        )
    return {"weights compared": compared, "codes differing": differing, "largest difference in steps": round(largest, 4)}


def unrounded_tensor(results: Path, graph_node: Path, images, written, rebuilt) -> dict:
    from precisionflow.hashing import file_hash
    from precisionflow.quant import cache, qdq

    node = json.loads((graph_node / "node.json").read_text())
    source = results / node["inputs"]["onnx"] / "model.onnx"
    ranges, lineage = cache.load_cache(results / node["inputs"]["calibration"], file_hash(source))
    found = {}
    with tempfile.TemporaryDirectory() as folder:
        fixed = Path(shutil.copy(graph_node / "model.onnx", Path(folder) / "fixed.onnx"))
        treated = qdq.fake_quantize_tensors(fixed, {t: ranges[t] for t in lineage["ranges"]["learned_tensors"]})
        for name, path in (("as built", graph_node / "model.onnx"), ("with the learned tensors rounded", fixed)):
            logits = run_graph(path, images, integer_kernels=False)
            found[name] = {
                "vs QAT logits as written": compared(logits, written),
                "vs refreshed QAT model": compared(logits, rebuilt),
            }
    return {"graph": str(graph_node.relative_to(results)), "tensors rounded": treated, **found}


def depthwise_bits(results: Path, images) -> dict:
    import onnx

    from precisionflow.hashing import file_hash
    from precisionflow.quant import cache, qdq

    graph = max(results.glob("quantize_onnx/int8_qat-ortcpu-*/node.json"), key=lambda path: path.stat().st_mtime)
    node = json.loads(graph.read_text())
    source = results / node["inputs"]["onnx"] / "model.onnx"
    export = json.loads((results / node["inputs"]["onnx"] / "node.json").read_text())
    written = np.load(results / export["inputs"]["model"] / "qat_logits.npy")
    ranges, lineage = cache.load_cache(results / node["inputs"]["calibration"], file_hash(source))
    nodes = qdq.quantizable_nodes(onnx.load(str(source)), (), True)
    workflow, found = qdq.depthwise_weights_in_8_bits, {"graph of": graph.parent.name}
    with tempfile.TemporaryDirectory() as folder:
        for name, overrides in (("7-bit depthwise weights", lambda model: {}), ("8-bit depthwise weights (now)", workflow)):
            qdq.depthwise_weights_in_8_bits = overrides
            try:
                qdq.quantize_int8(
                    source, Path(folder) / "g.onnx", ranges, nodes, "onnxruntime_cpu", lineage["ranges"]["learned_tensors"]
                )
            finally:
                qdq.depthwise_weights_in_8_bits = workflow
            found[name] = compared(run_graph(Path(folder) / "g.onnx", images, integer_kernels=True), written)
    return found


def main() -> None:
    qat_node, trt_graph = sys.argv[1], sys.argv[2]
    resnet50 = OUT / "qat_agreement_large" / "resnet50"
    images = test_images(resnet50)
    written = np.load(resnet50 / qat_node / "qat_logits.npy")
    model, rebuilt = rebuilt_qat_logits(resnet50 / qat_node, images)
    found = {
        "command": " ".join(["benchmarks/qat_agreement_attribution.py", *sys.argv[1:]]),
        "0 BatchNorm folding (ResNet-50's convs)": folded_weight_codes(model, resnet50 / trt_graph / "model.onnx"),
        "1 refreshed weight ranges (ResNet-50)": {"qat model": qat_node, **compared(rebuilt, written)},
        "2 QAT tensor left float by TensorRT's placement (ResNet-50)": unrounded_tensor(
            resnet50, resnet50 / trt_graph, images, written, rebuilt
        ),
    }
    print(json.dumps(found, indent=1), flush=True)
    mobilenet = OUT / "qat_agreement_large" / "mobilenet_v2"
    found["3 depthwise weights on the CPU (MobileNetV2)"] = depthwise_bits(mobilenet, test_images(mobilenet))
    print(json.dumps(found["3 depthwise weights on the CPU (MobileNetV2)"], indent=1))
    save("qat_agreement_attribution.json", found)


if __name__ == "__main__":
    main()
