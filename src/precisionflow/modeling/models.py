"""Model builders (tf_keras). Called from the training stages with TensorFlow already imported.

Every builder ends in a float32 Dense layer named "logits" (kept fp32 under mixed precision);
nothing is downloaded: pretrained weights come from a local file or not at all.
"""

from pathlib import Path
from typing import Any, Dict, Optional

from precisionflow.errors import ConfigError, DataError


def _logits(keras, x, num_classes: int):
    return keras.layers.Dense(num_classes, name="logits", dtype="float32")(x)


def small_cnn(keras, params: Dict[str, Any], input_shape, num_classes: int):
    """Conv-ReLU blocks, max-pool, a dense layer, float32 logits."""
    layers = keras.layers
    inputs = keras.Input(shape=tuple(input_shape), name="image")
    x = inputs
    for index, filters in enumerate(params["filters"]):
        x = layers.Conv2D(int(filters * params["width"]), 3, padding="same", activation="relu", name=f"conv{index}")(x)
    x = layers.MaxPooling2D(2, name="pool")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(params["dense_units"], activation="relu", name="dense")(x)
    if params["dropout"]:
        x = layers.Dropout(params["dropout"], name="dropout")(x)
    return keras.Model(inputs, _logits(keras, x, num_classes), name="small_cnn")


def _residual_block(keras, x, filters: int, stride: int, name: str):
    layers = keras.layers
    shortcut = x
    y = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False, name=f"{name}_conv1")(x)
    y = layers.BatchNormalization(name=f"{name}_bn1")(y)
    y = layers.ReLU(name=f"{name}_relu1")(y)
    y = layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"{name}_conv2")(y)
    y = layers.BatchNormalization(name=f"{name}_bn2")(y)
    if stride != 1 or shortcut.shape[-1] != filters:
        shortcut = layers.Conv2D(filters, 1, strides=stride, use_bias=False, name=f"{name}_proj")(shortcut)
        shortcut = layers.BatchNormalization(name=f"{name}_proj_bn")(shortcut)
    y = layers.Add(name=f"{name}_add")([shortcut, y])
    return layers.ReLU(name=f"{name}_out")(y)


def resnet_mini(keras, params: Dict[str, Any], input_shape, num_classes: int):
    """A small ResNet (basic blocks, BatchNorm, residual Adds) that trains on a CPU in minutes."""
    layers = keras.layers
    inputs = keras.Input(shape=tuple(input_shape), name="image")
    width = int(16 * params["width"])
    x = layers.Conv2D(width, 3, padding="same", use_bias=False, name="stem_conv")(inputs)
    x = layers.BatchNormalization(name="stem_bn")(x)
    x = layers.ReLU(name="stem_relu")(x)
    for stage in range(params["stages"]):
        for block in range(params["blocks_per_stage"]):
            stride = 2 if stage > 0 and block == 0 else 1
            x = _residual_block(keras, x, width * 2**stage, stride, f"s{stage}b{block}")
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    return keras.Model(inputs, _logits(keras, x, num_classes), name="resnet_mini")


def _application(constructor, name: str):
    def build(keras, params: Dict[str, Any], input_shape, num_classes: int):
        weights = _weights_path(params)
        extra = {"alpha": params["width"]} if name == "mobilenet_v2" else {}
        inputs = keras.Input(shape=tuple(input_shape), name="image")
        # Built on our input tensor, the application's layers join one flat functional model:
        # tfmot can annotate them one by one (a nested Model it cannot quantize).
        base = getattr(keras.applications, constructor)(
            include_top=False, weights=weights, input_tensor=inputs, pooling="avg", **extra
        )
        return keras.Model(inputs, _logits(keras, base.output, num_classes), name=name)

    return build


def _weights_path(params: Dict[str, Any]):
    if not params["weights"]:
        return None
    path = Path(params["weights"]).expanduser()
    if not path.is_file():
        raise DataError(
            f"model.weights: expected a local weights file, found nothing at {path}. "
            "Nothing is downloaded at run time; use weights=null to train from scratch."
        )
    return str(path)


def keras_file(keras, params: Dict[str, Any], input_shape, num_classes: int):
    """A user's saved model; its classification head is replaced when the class count differs."""
    model = load_user_model(keras, params)
    if model.output_shape[-1] == num_classes:
        if softmax_head(model.get_config()):
            raise ConfigError(softmax_message(params["path"], softmax_head(model.get_config())))
        return model
    features = model.layers[-2].output
    return keras.Model(model.inputs, _logits(keras, features, num_classes), name=model.name)


def load_user_model(keras, params: Dict[str, Any]):
    if not params["path"]:
        raise ConfigError("model.path: model=keras_file needs the saved model's path (.keras, .h5 or a SavedModel folder).")
    path = Path(params["path"]).expanduser()
    if not path.exists():
        raise DataError(f"model.path: expected a saved model at {path}, found nothing.")
    if path.suffix == ".keras":
        # Keras safe mode refuses Lambda layers (arbitrary code) unless the user trusts the file.
        return keras.models.load_model(path, compile=False, safe_mode=not params["trust"])
    if path.suffix == ".h5" and _h5_has_lambda(path) and not params["trust"]:
        raise DataError(
            f"{path} contains a Lambda layer (arbitrary Python code). Expected a model without "
            "code; if you trust this file, set model.trust=true."
        )
    if path.is_dir() and not params["trust"]:
        raise DataError(
            f"{path}: SavedModel folders cannot be loaded in Keras safe mode. Save the model as "
            ".keras, or set model.trust=true if you trust this file."
        )
    return keras.models.load_model(path, compile=False)


def softmax_head(config: Dict[str, Any]) -> str:
    """The name of a model's output layer when it applies softmax, else ''. A functional config
    names its outputs (output_layers); a Sequential one has none: its last layer is the output."""
    outputs = config.get("output_layers") or []
    names = {entry[0] for entry in outputs if isinstance(entry, list) and entry}
    layers = config.get("layers", [])
    if not outputs and layers:  # Sequential
        last = layers[-1]
        names = {last.get("name", last.get("config", {}).get("name"))}
    for layer in layers:
        inner = layer.get("config", {})
        if layer.get("name", inner.get("name")) in names and (
            layer.get("class_name") == "Softmax" or inner.get("activation") == "softmax"
        ):
            return layer.get("name", inner.get("name", ""))
    return ""


def softmax_message(path, layer: str) -> str:
    return (
        f"model.path: {path} ends in softmax (layer '{layer}'), but precisionflow trains with "
        "from_logits=True and judges engines on logits: the loss would be computed on probabilities and the "
        "model would learn badly while only Keras's own warning says so. Save the model with a linear last "
        "layer (activation=None; apply softmax after the engine), or train for a different class count "
        "(the head is then replaced)."
    )


def check_user_model_file(params: Dict[str, Any]) -> None:
    """Before anything runs: the user model exists, is a Keras file, and holds no code unless trusted."""
    import zipfile

    if not params["path"]:
        raise ConfigError("model.path: model=keras_file needs the saved model's path (.keras, .h5 or a SavedModel folder).")
    path = Path(params["path"]).expanduser()
    if not path.exists():
        raise ConfigError(f"model.path: expected a saved model at {path}, found nothing.")
    code = False
    if path.suffix == ".keras":
        try:
            with zipfile.ZipFile(path) as archive:
                refuse_keras3(path, archive)
                text = archive.read("config.json").decode(errors="replace")
                code = '"Lambda"' in text
        except (zipfile.BadZipFile, KeyError) as err:
            raise ConfigError(
                f"model.path: {path} is not a Keras .keras file (a zip archive with config.json): {err}. "
                "Save the model with model.save('name.keras')."
            ) from err
    elif path.suffix == ".h5":
        code = _h5_has_lambda(path)
    elif not path.is_dir():
        raise ConfigError(f"model.path: expected a .keras file, an .h5 file or a SavedModel folder, found {path}.")
    if code and not params["trust"]:
        raise ConfigError(
            f"model.path: {path} contains a Lambda layer (arbitrary Python code), refused in Keras safe "
            "mode. If you trust this file, set model.trust=true."
        )
    warn_softmax_head(path, saved_layer_graph(path) or {})  # .keras and .h5, functional and Sequential


def keras_version_of(archive) -> str:
    """The Keras version a .keras archive says wrote it (metadata.json), or '' if it does not say."""
    import json

    try:
        return str(json.loads(archive.read("metadata.json")).get("keras_version", ""))
    except (KeyError, ValueError):
        return ""


def refuse_keras3(path: Path, archive) -> None:
    """precisionflow trains with tf_keras (Keras 2: QAT and tf2onnx need it); a file Keras 3 wrote
    (today's tf.keras) does not load there. Refused at planning, with the fix."""
    version = keras_version_of(archive)
    if version.split(".")[0].isdigit() and int(version.split(".")[0]) >= 3:
        raise ConfigError(
            f"model.path: {path} was saved by Keras {version} (Keras 3: tf.keras since TensorFlow 2.16); "
            "precisionflow trains and exports with tf_keras (Keras 2), which cannot load it. Re-save it with "
            "tf_keras: build the same architecture with `import tf_keras as keras` (keras.applications has "
            "the standard ones), copy the weights (`new.set_weights(old.get_weights())`, loading the old "
            "model with Keras 3), and `new.save('model.keras')`; or save weights only and use a built-in "
            "model name with model.weights=<file>."
        )


def warn_softmax_head(path: Path, config: Dict[str, Any]) -> None:
    """At planning, without TensorFlow: a softmax head is named (training refuses it unless the
    class count differs and the head is replaced). `config`: saved_layer_graph's."""
    import sys

    try:
        head = softmax_head(config)
    except (AttributeError, TypeError):
        return
    if head:
        print(f"precisionflow: warning: {softmax_message(path, head)}", file=sys.stderr)


def saved_layer_graph(path) -> Optional[Dict[str, Any]]:
    """The functional config ({"layers": [...], ...}) a saved .keras or .h5 model holds, read without
    TensorFlow (planning stays light); None for a SavedModel folder or an unreadable file (the
    model is then checked where it is loaded)."""
    import json
    import zipfile

    path = Path(path).expanduser()
    try:
        if path.suffix == ".keras":
            with zipfile.ZipFile(path) as archive:
                saved = json.loads(archive.read("config.json"))
        elif path.suffix == ".h5":
            import h5py

            with h5py.File(path, "r") as handle:
                text = handle.attrs.get("model_config", "")
            saved = json.loads(text.decode() if isinstance(text, bytes) else text)
        else:
            return None
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
    inner = saved.get("config") if isinstance(saved, dict) else None
    return inner if isinstance(inner, dict) else None


def _h5_has_lambda(path: Path) -> bool:
    import h5py

    with h5py.File(path, "r") as handle:
        config = handle.attrs.get("model_config", "")
    return '"Lambda"' in (config.decode() if isinstance(config, bytes) else str(config))


def center_net(keras, params: Dict[str, Any], input_shape, num_classes: int):
    """task=detection: the heatmap + box-size detector (precisionflow/detection/center_net.py)."""
    from precisionflow.detection import center_net as detector

    return detector.build(keras, params, input_shape, num_classes)


BUILDERS = {
    "small_cnn": small_cnn,
    "resnet_mini": resnet_mini,
    "resnet50": _application("ResNet50", "resnet50"),
    "mobilenet_v2": _application("MobileNetV2", "mobilenet_v2"),
    "keras_file": keras_file,
    "center_net": center_net,
}


# The model settings each builder reads: only these enter the training nodes' ids.
MODEL_KEYS = {
    "small_cnn": ("name", "width", "filters", "dense_units", "dropout"),
    "resnet_mini": ("name", "width", "stages", "blocks_per_stage", "bn_momentum"),
    "resnet50": ("name", "weights", "bn_momentum"),
    "mobilenet_v2": ("name", "width", "weights", "bn_momentum"),
    "keras_file": ("name", "path", "trust", "bn_momentum"),
    "center_net": ("name", "width", "blocks_per_stage", "bn_momentum"),
}
# Settings that name a file the builder opens: its content enters the id too.
FILE_KEYS = ("weights", "path")


def reads(model: Dict[str, Any]) -> Dict[str, Any]:
    """The part of the `model` config the chosen builder reads."""
    if model["name"] not in MODEL_KEYS:
        raise ConfigError(f"model.name: expected one of {sorted(MODEL_KEYS)}, found '{model['name']}'.")
    return {key: model[key] for key in MODEL_KEYS[model["name"]]}


def set_bn_momentum(keras, model, momentum: float) -> None:
    """Every BatchNorm layer gets `momentum`. Keras applications use 0.99-0.999, which leaves the
    moving statistics near their initial values after the few hundred steps of a short training:
    the model then scores chance in inference mode while training accuracy looks fine."""
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = momentum


def build(keras, params: Dict[str, Any], input_shape, num_classes: int):
    if params["name"] not in BUILDERS:
        raise ConfigError(f"model.name: expected one of {sorted(BUILDERS)}, found '{params['name']}'.")
    model = BUILDERS[params["name"]](keras, params, input_shape, num_classes)
    if "bn_momentum" in params:
        set_bn_momentum(keras, model, params["bn_momentum"])  # before compile: fit() captures it when traced
    return model
