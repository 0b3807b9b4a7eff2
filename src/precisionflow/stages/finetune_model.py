"""finetune_model: continue training a trained model -- in fp32, in mixed precision, or with
quantization-aware training (QAT).

Writes the fine-tuned fp32 weights (model.keras: QAT wrappers stripped, mixed policies undone)
and, for QAT, the activation ranges the quantizers learned (qat_ranges.json, keyed by Keras
layer; export_onnx maps them to ONNX tensor names).
"""

import math
from pathlib import Path
from typing import Any, Dict

import numpy as np

from precisionflow.nodeio import read_json, read_node, write_json_atomic
from precisionflow.modeling import training
from precisionflow.stages import NodeContext

PACKAGES = ("tensorflow", "tf-keras", "tensorflow-model-optimization", "numpy", "matplotlib", "h5py")
FINETUNE_KEYS = ("mode", "epochs", "batch_size", "learning_rate", "seed")


def node_params(at: NodeContext) -> Dict[str, Any]:
    """`finetune` is cfg["finetune"], or its QAT variant for the int8_qat branch."""
    cfg, finetune = at.cfg, at.finetune
    from precisionflow.modeling import models

    keys = FINETUNE_KEYS + (("exclude_layers",) if finetune["mode"] == "qat" else ())
    return {
        "finetune": {key: finetune[key] for key in keys},
        "model": models.reads(cfg["model"]),
        "cache": cfg["dataset"]["cache"],
        "task": cfg["task"],
    }


def _load(keras, inputs, params, meta, policy: str):
    """The trained model rebuilt under `policy` (weights are fp32 masters either way)."""
    from precisionflow.modeling import models

    trained = keras.models.load_model(inputs["model"] / "model.keras", compile=False)
    keras.mixed_precision.set_global_policy(policy)
    if read_node(inputs["model"])["stage"] == "prune_model":  # its own (smaller) architecture
        model = rebuilt_under_policy(keras, trained, policy)
    else:
        model = models.build(keras, params["model"], meta["input_shape"], len(meta["classes"]))
    model.set_weights(trained.get_weights())
    return model


def rebuilt_under_policy(keras, trained, policy: str):
    """The model's own architecture with every layer under `policy`, the logits kept float32."""
    config = trained.get_config()
    for layer in config["layers"]:
        if layer["class_name"] != "InputLayer" and layer["name"] != "logits":
            layer["config"]["dtype"] = policy
    return keras.Model.from_config(config)


def _settings(finetune: Dict[str, Any]) -> Dict[str, Any]:
    return {
        "epochs": finetune["epochs"],
        "batch_size": finetune["batch_size"],
        "early_stopping_patience": 0,
        "seed": finetune["seed"],
    }


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    from precisionflow.modeling import qat
    from precisionflow.modeling.tfenv import import_tensorflow

    tf, keras = import_tensorflow()
    finetune = params["finetune"]
    keras.utils.set_random_seed(finetune["seed"])
    meta = read_json(inputs["data"] / "meta.json")
    mode = finetune["mode"]
    model = _load(keras, inputs, params, meta, "float32" if mode in ("fp32", "qat") else mode)
    trainable, left_float = qat.quantize_model(keras, model, finetune["exclude_layers"]) if mode == "qat" else (model, [])
    if left_float:
        print(f"QAT: {len(left_float)} layer(s) tfmot cannot quantize stay in float: {', '.join(left_float)}")
    steps = finetune["epochs"] * math.ceil(meta["sizes"]["train"] / finetune["batch_size"])
    opt = training.optimizer(keras, "adam", finetune["learning_rate"], "constant", steps)
    history, seconds = training.fit(
        keras, trainable, inputs["data"], {**_settings(finetune), "task": params["task"]}, opt, params["cache"]
    )
    extra = {}
    if mode == "qat":
        refreshed = qat.refresh_weight_ranges(trainable)
        # The QAT model's own test logits (fake-quant on): the int8_qat engine must reproduce them.
        np.save(out / "qat_logits.npy", training.predict_split(trainable, inputs["data"], "test"))
        ranges = qat.learned_ranges(trainable)
        write_json_atomic(
            out / "qat_ranges.json",
            {"model_name": model.name, "input_key": qat.INPUT_KEY, "ranges": {k: list(v) for k, v in ranges.items()}},
        )
        model = qat.strip(trainable, _load(keras, inputs, params, meta, "float32"))
        activations = [bounds for layer, bounds in ranges.items() if layer != qat.INPUT_KEY]
        extra = {
            "learned_ranges": len(ranges),
            "weight_ranges_refreshed": refreshed,
            "layers_left_float": left_float,
            "activations_symmetric": all(math.isclose(-lo, hi, rel_tol=1e-5) for lo, hi in activations),
        }
    else:  # the same architecture (pruned or not) under the float32 policy, with the fine-tuned weights
        fp32_model = _load(keras, inputs, params, meta, "float32")
        fp32_model.set_weights(model.get_weights())
        model = fp32_model
    summary = training.save_outputs(out, model, history, seconds, inputs["data"], f"fine-tune ({mode})", params["task"])
    return {**summary, "mode": mode, **extra}
