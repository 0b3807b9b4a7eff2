"""train_model: build and train the model; save fp32 weights (model.keras) and the history.

Under a mixed precision policy the model trains with fp16/bf16 compute and fp32 master weights;
the saved model is rebuilt under float32 so export always starts from a plain fp32 graph.
"""

import math
import time
from pathlib import Path
from typing import Any, Dict

import numpy as np

from precisionflow.errors import StageError
from precisionflow.nodeio import read_json, write_json_atomic
from precisionflow.stages import prepare_dataset

PACKAGES = ("tensorflow", "tf-keras", "numpy")


def _stop_on_nan(keras):
    class StopOnNaN(keras.callbacks.Callback):
        """Fail with the epoch and step where the loss stopped being finite."""

        epoch = 0

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            loss = (logs or {}).get("loss")
            if loss is not None and not math.isfinite(loss):
                raise StageError(
                    f"Training loss became {loss} at epoch {self.epoch + 1}, step {batch + 1}. "
                    "Expected a finite loss. Try a lower train.learning_rate, or for "
                    "precision_policy=mixed_float16 keep loss scaling on (the default) or use mixed_bfloat16."
                )

    return StopOnNaN()


def _optimizer(keras, train: Dict[str, Any]):
    choices = {"adam": keras.optimizers.Adam, "sgd": keras.optimizers.SGD, "rmsprop": keras.optimizers.RMSprop}
    if train["optimizer"] not in choices:
        raise StageError(f"train.optimizer: expected one of {sorted(choices)}, found '{train['optimizer']}'.")
    return choices[train["optimizer"]](learning_rate=train["learning_rate"])


def _fit(keras, model, train: Dict[str, Any], data_dir: Path):
    x_train, y_train = prepare_dataset.load(data_dir, "train")
    x_val, y_val = prepare_dataset.load(data_dir, "val")
    model.compile(
        optimizer=_optimizer(keras, train),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    started = time.time()
    history = model.fit(
        x_train, y_train, validation_data=(x_val, y_val), epochs=train["epochs"],
        batch_size=train["batch_size"], shuffle=True, verbose=2, callbacks=[_stop_on_nan(keras)],
    )
    return history.history, time.time() - started


def _as_fp32(keras, params, model, meta):
    """Rebuild the trained model under the float32 policy with the same (fp32 master) weights."""
    from precisionflow import models

    keras.mixed_precision.set_global_policy("float32")
    fp32_model = models.build(keras, params["model"], meta["input_shape"], len(meta["classes"]))
    fp32_model.set_weights(model.get_weights())
    return fp32_model


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    from precisionflow import models
    from precisionflow.tfenv import import_tensorflow

    tf, keras = import_tensorflow()
    train = params["train"]
    keras.utils.set_random_seed(train["seed"])
    meta = read_json(inputs["data"] / "meta.json")
    keras.mixed_precision.set_global_policy("float32" if train["precision_policy"] == "fp32" else train["precision_policy"])
    model = models.build(keras, params["model"], meta["input_shape"], len(meta["classes"]))
    history, seconds = _fit(keras, model, train, inputs["data"])
    model = _as_fp32(keras, params, model, meta)
    model.save(out / "model.keras")
    x_test, y_test = prepare_dataset.load(inputs["data"], "test")
    test_accuracy = float(np.mean(np.argmax(model.predict(x_test, verbose=0), axis=1) == y_test))
    history = {name: [float(v) for v in values] for name, values in history.items()}
    write_json_atomic(out / "history.json", history)
    return {
        "test_accuracy": test_accuracy,
        "val_accuracy": history["val_accuracy"][-1],
        "train_seconds": round(seconds, 3),
        "seconds_per_epoch": round(seconds / train["epochs"], 3),
        "parameters": int(model.count_params()),
    }
