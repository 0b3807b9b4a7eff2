"""Model builders (tf_keras). Called from train_model with TensorFlow already imported."""

from typing import Any, Dict

from precisionflow.errors import ConfigError


def small_cnn(keras, params: Dict[str, Any], input_shape, num_classes: int):
    """Conv-ReLU blocks, max-pool, a dense layer, float32 logits (kept fp32 under mixed precision)."""
    layers = keras.layers
    inputs = keras.Input(shape=tuple(input_shape), name="image")
    x = inputs
    for index, filters in enumerate(params["filters"]):
        x = layers.Conv2D(filters, 3, padding="same", activation="relu", name=f"conv{index}")(x)
    x = layers.MaxPooling2D(2, name="pool")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(params["dense_units"], activation="relu", name="dense")(x)
    if params["dropout"]:
        x = layers.Dropout(params["dropout"], name="dropout")(x)
    outputs = layers.Dense(num_classes, name="logits", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="small_cnn")


BUILDERS = {"small_cnn": small_cnn}


def build(keras, params: Dict[str, Any], input_shape, num_classes: int):
    if params["name"] not in BUILDERS:
        raise ConfigError(f"model.name: expected one of {sorted(BUILDERS)}, found '{params['name']}'.")
    return BUILDERS[params["name"]](keras, params, input_shape, num_classes)
