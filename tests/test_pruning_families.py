"""Channel pruning of the keras.applications families: squeeze-excite gating stays aligned with the
channels it gates, EfficientNet and MobileNet prune, stay consistent and export, hard-swish written
as TFOpLambda passes through, and a saved model whose layers cannot be followed is refused at
planning, from its config.json alone."""

import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from precisionflow.modeling import pruning
from precisionflow.modeling.pruning import PruneError
from tests.test_pruning import SETTINGS, images


def squeeze_excite_model(keras):
    """conv (4 channels) -> squeeze-excite (pool, reshape, reduce 1x1, expand 1x1 sigmoid) -> Multiply -> head."""
    layers = keras.layers
    inputs = keras.Input((6, 6, 3))
    x = layers.Conv2D(4, 3, padding="same", activation="swish", name="conv")(inputs)
    se = layers.GlobalAveragePooling2D(name="se_squeeze")(x)
    se = layers.Reshape((1, 1, 4), name="se_reshape")(se)
    se = layers.Conv2D(2, 1, activation="swish", name="se_reduce")(se)
    se = layers.Conv2D(4, 1, activation="sigmoid", name="se_expand")(se)
    x = layers.Multiply(name="se_excite")([x, se])
    x = layers.Conv2D(3, 1, name="project")(x)
    return keras.Model(inputs, layers.Dense(2, name="logits")(layers.GlobalAveragePooling2D()(x)))


def test_squeeze_excite_prunes_the_gate_with_the_channels_it_gates(keras):
    """Channels 1 and 3 of `conv` are dead (zero filter and bias: exactly 0 after swish). Removing
    them, and the same channels of the expand conv that gates them, leaves every output unchanged --
    but only if the gate is sliced on the same channels as the tensor it multiplies."""
    model = squeeze_excite_model(keras)
    conv = model.get_layer("conv").get_weights()
    conv[0][..., [1, 3]] = 0.0
    conv[1][[1, 3]] = 0.0
    model.get_layer("conv").set_weights(conv)
    expand = model.get_layer("se_expand").get_weights()
    expand[0][..., [1, 3]] *= 1e-3  # the gate's own scores agree: these channels matter least
    model.get_layer("se_expand").set_weights(expand)
    settings = dict(SETTINGS, exclude_layers=["se_reduce", "project"])
    pruned, report = pruning.prune(keras, model, settings)
    assert report["layers"]["conv"] == {"kept": 2, "of": 4}
    assert pruned.get_layer("se_expand").filters == 2 and pruned.get_layer("se_reshape").target_shape == (1, 1, 2)
    x = images((6, 6, 3))
    assert np.allclose(pruned(x).numpy(), model(x).numpy(), atol=1e-6)


def test_a_reshape_that_moves_channels_is_refused_by_name(keras):
    layers = keras.layers
    inputs = keras.Input((4, 4, 3))
    x = layers.Conv2D(8, 3, name="conv")(inputs)
    x = layers.Reshape((2, 2, 2, 4), name="regroup")(x)
    model = keras.Model(inputs, layers.Dense(2, name="logits")(layers.Flatten()(x)))
    with pytest.raises(PruneError, match=r"layer 'regroup' \(Reshape to \[2, 2, 2, 4\]\) moves channels"):
        pruning.prune(keras, model, SETTINGS)


def joins_are_consistent(model, pruned):
    """Every Add/Multiply of the pruned model joins inputs of one channel count."""
    checked = 0
    for layer in model.layers:
        if type(layer).__name__ in ("Add", "Multiply"):
            joined = pruned.get_layer(layer.name)
            widths = {joined.input[i].shape[-1] for i in range(len(joined.input))}
            assert len(widths) == 1, (layer.name, widths)
            checked += 1
    return checked


@pytest.mark.parametrize("family", ["EfficientNetB0", "MobileNetV2", "MobileNetV3Small"])
def test_application_families_prune_consistently_and_exactly_at_ratio_zero(keras, family):
    constructor = getattr(keras.applications, family)
    extra = {"alpha": 0.35} if family.startswith("MobileNet") else {}
    model = constructor(weights=None, input_shape=(32, 32, 3), classes=10, classifier_activation=None, **extra)
    x = images((32, 32, 3), count=2)
    same, _ = pruning.prune(keras, model, dict(SETTINGS, ratio=0.0))
    assert np.allclose(same(x).numpy(), model(x).numpy(), atol=1e-5)
    pruned, report = pruning.prune(keras, model, dict(SETTINGS, ratio=0.3, granularity=8, min_channels=8))
    assert pruned(x).shape == (2, 10)
    assert report["params_after"] < report["params_before"] and report["flops_after"] < report["flops_before"]
    assert joins_are_consistent(model, pruned) > 0


@pytest.mark.slow
def test_efficientnet_b0_pruned_at_0_3_exports_and_onnx_runtime_agrees(keras, tmp_path):
    import onnxruntime
    import tf2onnx

    from precisionflow.modeling.tfenv import import_tensorflow

    tf = import_tensorflow()[0]
    model = keras.applications.EfficientNetB0(weights=None, input_shape=(64, 64, 3), classes=10, classifier_activation=None)
    pruned, report = pruning.prune(keras, model, dict(SETTINGS, ratio=0.3, granularity=8, min_channels=8))
    assert report["params_after"] < 0.7 * report["params_before"]
    spec = (tf.TensorSpec((None, 64, 64, 3), tf.float32, name="input"),)
    onnx_model, _ = tf2onnx.convert.from_keras(pruned, input_signature=spec, opset=17)
    session = onnxruntime.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = images((64, 64, 3), count=2) * 255.0
    ours = session.run(None, {"input": x})[0]
    theirs = pruned(x).numpy()
    assert np.allclose(ours, theirs, rtol=1e-3, atol=1e-3 * float(np.abs(theirs).max()))


def saved_keras_file(path, layers_config):
    """A .keras archive holding only config.json: what planning reads (no weights, no TensorFlow)."""
    config = {
        "class_name": "Functional",
        "config": {
            "name": "user",
            "layers": layers_config,
            "input_layers": [["input", 0, 0]],
            "output_layers": [["logits", 0, 0]],
        },
    }
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", json.dumps(config))
    return path


def layer(name, kind, inbound, **config):
    return {
        "class_name": kind,
        "name": name,
        "config": {"name": name, **config},
        "inbound_nodes": [[[source, 0, 0, {}] for source in inbound]] if inbound else [],
    }


def test_an_unknown_layer_in_a_user_model_fails_the_plan_naming_it(tmp_path):
    path = saved_keras_file(
        tmp_path / "user.keras",
        [
            layer("input", "InputLayer", [], batch_input_shape=[None, 8, 8, 3]),
            layer("conv", "Conv2D", ["input"], filters=8),
            layer("norm", "LayerNormalization", ["conv"]),
            layer("pool", "GlobalAveragePooling2D", ["norm"]),
            layer("logits", "Dense", ["pool"], units=4),
        ],
    )
    command = [
        sys.executable,
        "-m",
        "precisionflow.cli",
        "plan",
        "model=keras_file",
        f"model.path={path}",
        "prune=channel",
        "finetune.mode=fp32",
        f"results_dir={tmp_path / 'results'}",
        "dataset.image_size=[8,8]",
        "targets=[cpu]",
        "precisions=[fp32]",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "layer 'norm' has type LayerNormalization" in done.stderr and str(path) in done.stderr
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("node.json"))


def test_a_saved_efficientnet_config_passes_the_planning_analysis(keras, tmp_path):
    """The real config.json of a saved EfficientNetB0 is read and analysed without TensorFlow's help."""
    from precisionflow.modeling import models

    model = keras.applications.EfficientNetB0(weights=None, input_shape=(32, 32, 3), classes=10, classifier_activation=None)
    model.save(tmp_path / "effnet.keras")
    graph = models.saved_layer_graph(tmp_path / "effnet.keras")
    assert graph is not None and len(graph["layers"]) == len(model.layers)
    pruning.check_config(graph, SETTINGS)
