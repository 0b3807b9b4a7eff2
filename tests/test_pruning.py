"""Channel pruning: exact at ratio 0, equal to a hand-built smaller model, consistent across
residual joins and depthwise convolutions, and refusing layers it does not know."""

import numpy as np
import pytest

from precisionflow.modeling import pruning
from precisionflow.datasets.store import write_arrays
from precisionflow.modeling.pruning import PruneError

SETTINGS = {
    "criterion": "l1",
    "ratio": 0.5,
    "threshold": None,
    "granularity": 1,
    "min_channels": 1,
    "bn_scale": False,
    "exclude_layers": [],
}


def images(shape, count=4, seed=0):
    return np.random.default_rng(seed).random((count, *shape), dtype=np.float32)


def tiny_cnn(keras):
    layers = keras.layers
    inputs = keras.Input((6, 6, 2))
    x = layers.Conv2D(4, 3, padding="same", activation="relu", name="conv0")(inputs)
    x = layers.MaxPooling2D(2, name="pool")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(3, activation="relu", name="dense")(x)
    return keras.Model(inputs, layers.Dense(2, name="logits")(x))


def test_ratio_zero_gives_the_same_model_exactly(keras):
    model = tiny_cnn(keras)
    pruned, report = pruning.prune(keras, model, dict(SETTINGS, ratio=0.0))
    x = images((6, 6, 2))
    assert np.array_equal(pruned(x).numpy(), model(x).numpy())
    assert report["params_after"] == report["params_before"] and report["flops_after"] == report["flops_before"]


def test_the_pruned_model_equals_a_hand_built_smaller_one(keras):
    model = tiny_cnn(keras)
    conv = model.get_layer("conv0").get_weights()
    conv[0][..., 1] *= 0.01  # channels 1 and 3 have the smallest filters: ratio 0.5 removes them
    conv[0][..., 3] *= 0.001
    model.get_layer("conv0").set_weights(conv)
    pruned, report = pruning.prune(keras, model, SETTINGS)
    assert report["layers"]["conv0"] == {"kept": 2, "of": 4} and report["layers"]["dense"] == {"kept": 2, "of": 3}
    assert "logits" not in report["layers"]  # the head keeps its class count

    layers = keras.layers
    inputs = keras.Input((6, 6, 2))
    x = layers.Conv2D(2, 3, padding="same", activation="relu", name="conv0")(inputs)
    x = layers.Flatten()(layers.MaxPooling2D(2)(x))
    x = layers.Dense(2, activation="relu", name="dense")(x)
    by_hand = keras.Model(inputs, layers.Dense(2, name="logits")(x))
    kept_conv = [0, 2]
    dense_w, dense_b = model.get_layer("dense").get_weights()
    kept_dense = np.sort(np.argsort(-np.abs(dense_w).sum(axis=0))[:2])
    flat_rows = (np.arange(9)[:, None] * 4 + np.array(kept_conv)[None, :]).reshape(-1)  # 3x3 positions x 4 channels
    by_hand.get_layer("conv0").set_weights([conv[0][..., kept_conv], conv[1][kept_conv]])
    by_hand.get_layer("dense").set_weights([dense_w[flat_rows][:, kept_dense], dense_b[kept_dense]])
    logits_w, logits_b = model.get_layer("logits").get_weights()
    by_hand.get_layer("logits").set_weights([logits_w[kept_dense], logits_b])
    x = images((6, 6, 2))
    assert np.allclose(pruned(x).numpy(), by_hand(x).numpy(), atol=1e-6)


def test_residual_and_depthwise_models_stay_consistent_and_export(keras, tmp_path):
    from precisionflow.modeling import models

    for name, params in (
        ("resnet_mini", {"name": "resnet_mini", "width": 1.0, "stages": 2, "blocks_per_stage": 1, "bn_momentum": 0.9}),
        ("mobilenet_v2", {"name": "mobilenet_v2", "width": 0.35, "weights": None, "bn_momentum": 0.9}),
    ):
        model = models.build(keras, params, [32, 32, 3], 10)
        pruned, report = pruning.prune(keras, model, dict(SETTINGS, granularity=8, min_channels=8))
        x = images((32, 32, 3))
        assert pruned(x).shape == (4, 10), name
        assert report["flops_after"] < report["flops_before"], name
        assert all(entry["kept"] % 8 == 0 or entry["kept"] == entry["of"] for entry in report["layers"].values())
        groups, _, produced = pruning.analyse(model, SETTINGS)
        joined = [layer for layer in model.layers if type(layer).__name__ == "Add"]
        for add in joined:  # both inputs of every residual join keep the same channels
            widths = {pruned.get_layer(add.name).input[i].shape[-1] for i in range(len(add.input))}
            assert len(widths) == 1, (name, add.name, widths)
        import tf2onnx  # noqa: F401 -- exported like every model: the shapes are consistent

        from precisionflow.modeling.tfenv import import_tensorflow

        tf = import_tensorflow()[0]
        spec = (tf.TensorSpec((None, 32, 32, 3), tf.float32, name="input"),)
        onnx_model, _ = tf2onnx.convert.from_keras(pruned, input_signature=spec, opset=17)
        assert onnx_model.graph.node


def test_settings_and_unknown_layers_are_refused_by_name(keras):
    with pytest.raises(PruneError, match=r"prune.ratio: expected a fraction .* found 1.2"):
        pruning.check_settings(dict(SETTINGS, ratio=1.2))
    layers = keras.layers
    inputs = keras.Input((4, 4, 1))
    x = layers.Conv2D(4, 3, name="conv")(inputs)
    x = layers.LayerNormalization(name="norm")(x)
    model = keras.Model(inputs, layers.Dense(2, name="logits")(layers.Flatten()(x)))
    with pytest.raises(PruneError, match="layer 'norm' has type LayerNormalization"):
        pruning.prune(keras, model, SETTINGS)


def test_keep_counts_follow_granularity_and_minimum():
    assert pruning.keep_count(64, 0.5, 8, 8) == 32
    assert pruning.keep_count(60, 0.5, 8, 8) == 32  # 30 rounded up to a multiple of 8
    assert pruning.keep_count(16, 0.9, 8, 8) == 8  # never below min_channels
    assert pruning.keep_count(6, 0.5, 8, 1) == 6  # never above what there is


@pytest.mark.slow
def test_sparse24_leaves_at_most_2_nonzeros_in_every_4_input_channels_after_strip_and_export(keras, tmp_path):
    import tf2onnx
    from onnx import numpy_helper

    from precisionflow.stages import prune_model
    from precisionflow.modeling.tfenv import import_tensorflow

    tf = import_tensorflow()[0]
    layers = keras.layers
    inputs = keras.Input((8, 8, 4))
    x = layers.Conv2D(8, 3, padding="same", activation="relu", name="conv0")(inputs)  # 4 input channels: eligible
    x = layers.DepthwiseConv2D(3, padding="same", name="dw")(x)  # depthwise: left dense
    x = layers.Conv2D(8, 1, name="conv1")(x)
    x = layers.Dense(8, activation="relu", name="dense")(layers.Flatten()(x))
    model = keras.Model(inputs, layers.Dense(3, name="logits")(x))
    rng = np.random.default_rng(0)
    write_arrays(tmp_path, {"train": (rng.integers(0, 256, (64, 8, 8, 4), dtype=np.uint8), rng.integers(0, 3, 64))}, "abc")
    params = {
        "prune": {"method": "sparse24", "epochs": 1, "batch_size": 16, "learning_rate": 1e-3, "seed": 0, "exclude_layers": []}
    }
    stripped, report, dense = prune_model.prune_sparse24(tf, keras, model, params, tmp_path)
    assert set(report) == {"conv0", "conv1", "dense"} and "dw" in dense and "logits" in dense
    for name in report:
        assert prune_model.m_by_n_sparsity(stripped.get_layer(name).get_weights()[0]) <= 0.5, name
    onnx_model, _ = tf2onnx.convert.from_keras(stripped, input_signature=(tf.TensorSpec((None, 8, 8, 4), tf.float32),), opset=17)
    weights = {init.name: numpy_helper.to_array(init) for init in onnx_model.graph.initializer}
    checked = 0
    for node in onnx_model.graph.node:
        if node.op_type == "Conv" and dict((a.name, a.i) for a in node.attribute).get("group", 1) == 1:
            kernel = weights[node.input[1]]  # OIHW: input channels on axis 1
            per_4 = np.moveaxis(kernel, 1, -1).reshape(-1, kernel.shape[1] // 4, 4)
        elif node.op_type == "MatMul" and node.input[1] in weights and weights[node.input[1]].shape[0] % 4 == 0:
            kernel = weights[node.input[1]]  # (in, out): input channels on axis 0
            if kernel.shape[1] == 3:
                continue  # the head stays dense
            per_4 = np.moveaxis(kernel, 0, -1).reshape(-1, kernel.shape[0] // 4, 4)
        else:
            continue
        assert (per_4 != 0).sum(axis=-1).max() <= 2, node.name
        checked += 1
    assert checked == 3
