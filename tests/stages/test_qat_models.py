"""QAT end to end on every built-in architecture (slow): train, QAT fine-tune, export, learned-range
cache, int8_qat graph -- and the graph computes what the QAT model computed in TensorFlow."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from precisionflow.config.compose import expand
from precisionflow.datasets.store import Split, write_arrays
from precisionflow.nodeio import write_json_atomic
from precisionflow.pipeline.runner import run_node
from precisionflow.stages import NodeContext, calibrate, export_onnx, finetune_model, quantize_onnx, train_model

pytestmark = pytest.mark.slow
CLASSES = 4


def quadrant_images(count: int, seed: int):
    """Class k: a bright square in quadrant k on noise -- learnable in one epoch."""
    rng = np.random.default_rng(seed)
    labels = np.arange(count) % CLASSES
    images = rng.random((count, 32, 32, 3), dtype=np.float32) * 0.3
    for index, label in enumerate(labels):
        row, col = divmod(int(label), 2)
        images[index, row * 16 + 4 : row * 16 + 12, col * 16 + 4 : col * 16 + 12, :] += 0.7
    return np.round(np.minimum(images, 1.0) * 255).astype(np.uint8), labels.astype(np.int64)


@pytest.fixture(scope="module")
def data_plan(tmp_path_factory):
    results = tmp_path_factory.mktemp("qat-models") / "results"
    folder = results / "prepare_dataset" / "quadrants"
    splits = {"train": quadrant_images(192, 0), "val": quadrant_images(32, 1), "test": quadrant_images(64, 2)}
    write_arrays(folder, splits, ["a", "b", "c", "d"])
    write_json_atomic(folder / "node.json", {"stage": "prepare_dataset", "id": "quadrants", "params": {}, "inputs": {}})
    return {"results_dir": str(results), "nodes": {}}


def run(plan, stage, name, params, inputs):
    key = f"{stage}/{name}"
    plan["nodes"][key] = {"stage": stage, "id": name, "params": params, "inputs": inputs}
    return run_node(plan, key)["summary"]


# ResNet-50's export (tf2onnx on the fine-tuned 25M-parameter model) peaks at 9 GB in one process:
# over the suite's 4 GB on a shared machine, so it runs only when asked (measured: README).
HEAVY = pytest.mark.skipif(
    os.environ.get("PRECISIONFLOW_HEAVY_TESTS") != "1",
    reason="ResNet-50's export needs 9 GB; set PRECISIONFLOW_HEAVY_TESTS=1 to run it",
)


@pytest.mark.parametrize("model", ["small_cnn", "resnet_mini", "mobilenet_v2", pytest.param("resnet50", marks=HEAVY)])
def test_int8_qat_graph_reproduces_the_qat_model(data_plan, model):
    overrides = [
        f"model={model}",
        "train.epochs=1",
        "finetune=qat",
        "finetune.epochs=1",
        "train.batch_size=32",
        "calibration.num_samples=64",
        "int8.report_samples=16",
    ]
    if model == "mobilenet_v2":
        overrides.append("model.width=0.35")
    [cfg] = expand(overrides)
    data = {"data": "prepare_dataset/quadrants"}
    run(data_plan, "train_model", model, train_model.node_params(NodeContext(cfg)), data)
    tuned = run(
        data_plan,
        "finetune_model",
        f"{model}-qat",
        finetune_model.node_params(NodeContext(cfg, finetune=cfg["finetune"])),
        {"model": f"train_model/{model}", **data},
    )
    assert tuned["activations_symmetric"] is True and tuned["learned_ranges"] > 3
    run(
        data_plan,
        "export_onnx",
        f"{model}-qat",
        export_onnx.node_params(NodeContext(cfg)),
        {"model": f"finetune_model/{model}-qat", **data},
    )
    run(
        data_plan,
        "calibrate",
        f"{model}-qat",
        calibrate.node_params(NodeContext(cfg, source="qat")),
        {"onnx": f"export_onnx/{model}-qat", **data},
    )
    graph = run(
        data_plan,
        "quantize_onnx",
        f"{model}-int8_qat",
        quantize_onnx.node_params(NodeContext(cfg, precision="int8_qat")),
        {"onnx": f"export_onnx/{model}-qat", "calibration": f"calibrate/{model}-qat", **data},
    )
    assert graph["qat_coverage"] == 1.0 and graph["quantized_nodes"] >= 3

    import onnxruntime as ort

    results = Path(data_plan["results_dir"])
    session = ort.InferenceSession(
        str(results / f"quantize_onnx/{model}-int8_qat/model.onnx"), providers=["CPUExecutionProvider"]
    )
    images = Split(results / "prepare_dataset" / "quadrants", "test").array()
    deployed = session.run(None, {session.get_inputs()[0].name: images})[0]
    trained = np.load(results / f"finetune_model/{model}-qat/qat_logits.npy")
    agreement = float(np.mean(deployed.argmax(1) == trained.argmax(1)))
    max_diff = float(np.abs(deployed - trained).max())
    print(
        json.dumps(
            {
                "model": model,
                "agreement_with_qat_model": agreement,
                "max_abs_logit_diff": max_diff,
                "logit_range": float(np.ptp(trained)),
            }
        )
    )
    # One epoch leaves near-ties (a barely trained model's logits are close together): every sample the
    # QAT model decides by a clear margin must be decided the same way, and no logit may move much.
    ordered = np.sort(trained, axis=1)
    clear = ordered[:, -1] - ordered[:, -2] > 0.25
    # int8 steps are a fraction of each tensor's range: the allowed logit change scales with the logits' range
    # (resnet50's one-epoch logits span ~15, where 1/255 steps through 50 layers add up to ~0.56).
    assert max_diff < max(0.5, 0.05 * float(np.ptp(trained))) and np.all(deployed.argmax(1)[clear] == trained.argmax(1)[clear])


def test_a_layer_tfmot_cannot_quantize_stays_float_with_a_note():
    from precisionflow.modeling import qat
    from precisionflow.modeling.tfenv import import_tensorflow

    _, keras = import_tensorflow()
    inputs = keras.Input((16, 16, 3), name="image")
    x = keras.layers.Rescaling(1 / 255.0, name="rescale")(inputs)
    x = keras.layers.Conv2D(4, 3, activation="relu", name="conv")(x)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    model = keras.Model(inputs, keras.layers.Dense(3, name="logits")(x))
    quantized, left_float = qat.quantize_model(keras, model, [])
    assert left_float == ["rescale (Rescaling)"]
    assert any(type(layer).__name__ == "QuantizeWrapperV2" and layer.layer.name == "conv" for layer in quantized.layers)


@pytest.mark.parametrize("model", ["small_cnn", "resnet_mini"])
def test_int8_qat_placed_for_the_cpu_reproduces_the_qat_model_in_integer_kernels(data_plan, model):
    """The same learned ranges, ONNX Runtime's CPU placement: the engine computes in QLinearConv
    kernels and still decides as the QAT model does."""
    import onnxruntime as ort

    [cfg] = expand(
        [
            f"model={model}",
            "train.epochs=1",
            "finetune=qat",
            "finetune.epochs=1",
            "train.batch_size=32",
            "calibration.num_samples=64",
            "int8.report_samples=16",
        ]
    )
    data = {"data": "prepare_dataset/quadrants"}
    results = Path(data_plan["results_dir"])
    if not (results / f"calibrate/{model}-qat/node.json").exists():  # the TensorRT-placement test made them
        test_int8_qat_graph_reproduces_the_qat_model(data_plan, model)
    graph = run(
        data_plan,
        "quantize_onnx",
        f"{model}-int8_qat-cpu",
        quantize_onnx.node_params(NodeContext(cfg, precision="int8_qat", placement="onnxruntime_cpu")),
        {"onnx": f"export_onnx/{model}-qat", "calibration": f"calibrate/{model}-qat", **data},
    )
    assert graph["placement"] == "onnxruntime_cpu"
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(results / f"{model}-cpu-optimised.onnx")
    session = ort.InferenceSession(
        str(results / f"quantize_onnx/{model}-int8_qat-cpu/model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    ops = [node.op_type for node in __import__("onnx").load(options.optimized_model_filepath).graph.node]
    assert "QLinearConv" in ops
    images = Split(results / "prepare_dataset" / "quadrants", "test").array()
    deployed = session.run(None, {session.get_inputs()[0].name: images})[0]
    trained = np.load(results / f"finetune_model/{model}-qat/qat_logits.npy")
    ordered = np.sort(trained, axis=1)
    clear = ordered[:, -1] - ordered[:, -2] > 0.25
    agreement = float(np.mean(deployed.argmax(1) == trained.argmax(1)))
    print(json.dumps({"model": model, "placement": "onnxruntime_cpu", "agreement_with_qat_model": agreement}))
    assert np.all(deployed.argmax(1)[clear] == trained.argmax(1)[clear]) and agreement >= 0.95


def test_qat_ranges_a_depthwise_kernel_per_output_channel_and_from_its_final_weights():
    """Deployed depthwise convs are quantized per output channel, so QAT must train that grid
    (tfmot's own quantizer gives the whole depthwise kernel one range). And after training, the
    weight ranges are brought to the final weights: tfmot records them before each step's update."""
    from precisionflow.modeling import qat
    from precisionflow.modeling.tfenv import import_tensorflow

    _, keras = import_tensorflow()
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 4), name="image")
    x = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(inputs)
    x = keras.layers.BatchNormalization(name="bn")(x)
    x = keras.layers.ReLU(6.0, name="relu")(x)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    model = keras.Model(inputs, keras.layers.Dense(3, name="logits")(x))
    kernel, bias = model.get_layer("dw").get_weights()
    kernel[..., 0, 0] *= 10  # one channel far wider than the rest: one shared range would be wrong
    model.get_layer("dw").set_weights([kernel, bias])
    quantized, _ = qat.quantize_model(keras, model, [])
    quantized.compile(optimizer=keras.optimizers.SGD(0.5), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    quantized.fit(rng.normal(size=(16, 8, 8, 4)).astype("float32"), rng.integers(0, 3, 16), batch_size=16, epochs=1, verbose=0)

    wrapper = next(layer for layer in quantized.layers if getattr(layer, "layer", None) is not None and layer.layer.name == "dw")
    ranges = {v.name.split("/")[-1].split(":")[0]: v.numpy() for v in wrapper.weights if "kernel_m" in v.name}
    final = np.abs(next(v for v in wrapper.weights if v.name.endswith("depthwise_kernel:0")).numpy()).max(axis=(0, 1, 3))
    assert ranges["depthwise_kernel_max"].shape == (4,)
    assert not np.allclose(ranges["depthwise_kernel_max"], final, rtol=1e-6)  # one step behind the final kernel
    assert qat.refresh_weight_ranges(quantized) == 1  # the depthwise kernel (the output layer stays float)
    ranges = {v.name.split("/")[-1].split(":")[0]: v.numpy() for v in wrapper.weights if "kernel_m" in v.name}
    assert np.allclose(ranges["depthwise_kernel_max"], final, rtol=1e-6)
    assert np.allclose(ranges["depthwise_kernel_min"], -final, rtol=1e-6)
    assert final[0] > 3 * final[1:].max()
