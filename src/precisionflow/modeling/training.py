"""Training, shared by train_model and finetune_model: the fit loop (tf.data or in-memory splits,
NaN stop, inference-mode validation), optimizers, predictions on a split, and what a finished
training saves and reports (model, history, curves, the at-chance message the report repeats)."""

import math
import time
from pathlib import Path
from typing import Any, Dict

import numpy as np

from precisionflow.datasets.store import Split, predict_in_batches
from precisionflow.errors import ConfigError, StageError
from precisionflow.nodeio import write_json_atomic


def stop_on_nan(keras):
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
                    "Expected a finite loss. Try a lower learning rate, or for mixed_float16 keep "
                    "loss scaling on (the default) or use mixed_bfloat16."
                )

    return StopOnNaN()


def inference_mode_watch(keras, num_classes: int):
    class InferenceModeWatch(keras.callbacks.Callback):
        """Per epoch: validation top-1 in inference mode (BatchNorm's moving statistics, as deployed)
        next to training accuracy (batch statistics). A model whose moving statistics lag -- Keras
        applications' BatchNorm momentum of 0.99-0.999 on a short training -- trains well and scores
        chance in inference; this says so at the epoch it happens, not after export."""

        def on_epoch_end(self, epoch, logs=None):
            logs = logs or {}
            chance = 1.0 / num_classes
            val = logs.get("val_accuracy")
            if val is None:
                return
            line = f"epoch {epoch + 1}: validation top-1 in inference mode {val:.4f} (train, batch statistics: {logs.get('accuracy', float('nan')):.4f}; chance {chance:.4f})"
            if val <= 1.5 * chance and logs.get("accuracy", 0) > 2 * chance:
                line += " -- WARNING: inference mode at chance while training learns; check model.bn_momentum"
            print(line, flush=True)

    return InferenceModeWatch()


def optimizer(keras, name: str, learning_rate: float, schedule: str, total_steps: int):
    rate = learning_rate
    if schedule == "cosine":
        rate = keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps=max(total_steps, 1))
    elif schedule != "constant":
        raise ConfigError(f"train.lr_schedule: expected constant or cosine, found '{schedule}'.")
    choices = {"adam": keras.optimizers.Adam, "sgd": keras.optimizers.SGD, "rmsprop": keras.optimizers.RMSprop}
    if name not in choices:
        raise ConfigError(f"train.optimizer: expected one of {sorted(choices)}, found '{name}'.")
    return choices[name](learning_rate=rate)


def fit(keras, model, data_dir: Path, settings: Dict[str, Any], opt, cache: str):
    """Compile and fit; returns (history dict, seconds). settings: epochs, batch_size, patience, seed.
    cache=memory: both splits as float32 arrays (small data sets); disk/none: streamed by tf.data."""
    if settings.get("task") == "detection":
        return _fit_detector(keras, model, data_dir, settings, opt, cache)
    train, val = Split(data_dir, "train"), Split(data_dir, "val")
    model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    callbacks = [stop_on_nan(keras), inference_mode_watch(keras, len(train.classes))]
    if settings.get("early_stopping_patience") or settings.get("keep_best_epoch"):
        # without a patience it never stops (patience past the last epoch) and only restores the best
        patience = settings.get("early_stopping_patience") or settings["epochs"] + 1
        callbacks.append(keras.callbacks.EarlyStopping(monitor="val_accuracy", patience=patience, restore_best_weights=True))
    started = time.time()
    if cache == "memory":
        history = model.fit(
            train.array(),
            train.labels,
            validation_data=(val.array(), val.labels),
            epochs=settings["epochs"],
            batch_size=settings["batch_size"],
            shuffle=True,
            verbose=2,
            callbacks=callbacks,
        )
    else:
        import tensorflow as tf

        from precisionflow.datasets import streaming

        history = model.fit(
            streaming.dataset(tf, train, settings["batch_size"], True, settings["seed"]),
            validation_data=streaming.dataset(tf, val, settings["batch_size"], False, 0),
            epochs=settings["epochs"],
            verbose=2,
            callbacks=callbacks,
        )
    return {name: [float(v) for v in values] for name, values in history.history.items()}, time.time() - started


def _fit_detector(keras, model, data_dir: Path, settings: Dict[str, Any], opt, cache: str):
    import tensorflow as tf

    from precisionflow.detection import training as detection

    callbacks = [stop_on_nan(keras)]
    if settings.get("early_stopping_patience"):
        callbacks.append(
            keras.callbacks.EarlyStopping(
                monitor="val_loss", patience=settings["early_stopping_patience"], restore_best_weights=True
            )
        )
    started = time.time()
    history = detection.fit(tf, keras, model, data_dir, settings, opt, cache, callbacks)
    return {name: [float(v) for v in values] for name, values in history.history.items()}, time.time() - started


def rebuild_fp32(keras, model_params, model, meta):
    """The same architecture under the float32 policy, holding the trained (fp32 master) weights."""
    from precisionflow.modeling import models

    keras.mixed_precision.set_global_policy("float32")
    fp32_model = models.build(keras, model_params, meta["input_shape"], len(meta["classes"]))
    fp32_model.set_weights(model.get_weights())
    return fp32_model


EVAL_BATCH = 256


def predict_split(model, data_dir: Path, split_name: str) -> np.ndarray:
    """The model's logits on a whole split, read a batch at a time."""
    return predict_in_batches(lambda batch: model.predict_on_batch(batch), Split(data_dir, split_name), EVAL_BATCH)


def test_accuracy(model, data_dir: Path, split: str = "test") -> float:
    images = Split(data_dir, split)
    logits = predict_in_batches(lambda batch: model.predict_on_batch(batch), images, EVAL_BATCH)
    return float(np.mean(np.argmax(logits, axis=1) == images.labels))


def kept_epoch(history: Dict[str, list], restored_best: bool) -> int:
    """The epoch (1-based) whose weights the model keeps: EarlyStopping(restore_best_weights)
    restores the first epoch of best val_accuracy when training ends (stopped early or not)."""
    values = history.get("val_accuracy") or []
    if restored_best and values:
        return int(np.argmax(values)) + 1
    return len(history["loss"])


def save_curves(history: Dict[str, list], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (loss_axis, acc_axis) = plt.subplots(1, 2, figsize=(9, 3.2))
    for name, axis in (("loss", loss_axis), ("accuracy", acc_axis)):
        if name not in history:  # a detector has no accuracy curve
            axis.set_visible(False)
            continue
        axis.plot(range(1, len(history[name]) + 1), history[name], label="train")
        if f"val_{name}" in history:
            axis.plot(range(1, len(history[name]) + 1), history[f"val_{name}"], label="validation")
        axis.set_xlabel("epoch")
        axis.set_title(name)
        axis.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


AT_CHANCE_FACTOR = 1.5


def at_chance_message(summary: Dict[str, Any]) -> str:
    """'' or why this training learned nothing (validation top-1 below 1.5x chance)."""
    if "val_map50" in summary:
        from precisionflow.detection.training import learned_nothing

        return learned_nothing(summary)
    classes = summary.get("classes")
    if not classes or summary["val_accuracy"] >= AT_CHANCE_FACTOR / classes:
        return ""
    return (
        f"validation top-1 {summary['val_accuracy']:.3f} is at chance ({1 / classes:.3f} for {classes} classes): "
        "the model learned nothing, and its engines' accuracy and agreement compare noise. Train longer "
        "(train.epochs), lower train.learning_rate or check the data"
    )


BELOW_BEST = 0.05  # validation top-1 the kept weights may trail the best epoch's by


def below_best_message(summary: Dict[str, Any]) -> str:
    """'' or why the kept weights are not the model's best: their validation top-1 trails the best
    epoch's by more than BELOW_BEST (training keeps the last epoch unless train.early_stopping_patience
    restores the best), and every verdict is relative to this model."""
    best, kept = summary.get("best_epoch_val_accuracy"), summary.get("val_accuracy")
    if best is None or kept is None or kept >= best - BELOW_BEST:
        return ""
    return (
        f"the kept weights (epoch {summary['kept_epoch']}) reach validation top-1 {kept:.3f}, epoch "
        f"{summary['best_epoch']} reached {best:.3f}: every engine is judged against a model below its own best. "
        "Set train.early_stopping_patience (it keeps the best epoch) or train.epochs"
    )


def kept_epoch_line(summary: Dict[str, Any]) -> str:
    """Which epoch's weights are the model every engine is judged against, and how they compare with
    the best and the last epoch on validation ('' where the summary has no validation top-1)."""
    kept, best = summary.get("val_accuracy"), summary.get("best_epoch_val_accuracy")
    if kept is None or best is None or summary.get("kept_epoch") is None:
        return ""
    return (
        f"kept epoch {summary['kept_epoch']} of {summary.get('epochs_run', '?')}: validation top-1 {kept:.3f} "
        f"(best epoch {summary['best_epoch']}: {best:.3f}; last epoch {summary.get('last_epoch_val_accuracy', float('nan')):.3f})"
    )


def reference_message(summary: Dict[str, Any]) -> str:
    """'' or what is wrong with a trained model as the reference: at chance, or below its own best."""
    return at_chance_message(summary) or below_best_message(summary)


def save_outputs(
    out: Path,
    model,
    history,
    seconds: float,
    data_dir: Path,
    title: str,
    task: str = "classification",
    restored_best: bool = False,
) -> Dict[str, Any]:
    model.save(out / "model.keras")
    write_json_atomic(out / "history.json", history)
    save_curves(history, out / "curves.png", title)
    epochs = len(history["loss"])
    if task == "detection":
        from precisionflow.detection.training import summary as detection_summary

        scores = detection_summary(model, data_dir)
    else:
        # val_accuracy is measured on the weights saved (the restored best epoch, not the last one):
        # the at-chance check and every table read the model that is exported.
        scores = {
            "test_accuracy": test_accuracy(model, data_dir),
            "val_accuracy": test_accuracy(model, data_dir, "val"),
            "last_epoch_val_accuracy": history["val_accuracy"][-1],
            "best_epoch": int(np.argmax(history["val_accuracy"])) + 1,
            "best_epoch_val_accuracy": float(np.max(history["val_accuracy"])),
            "classes": int(model.output_shape[-1]),
        }
    return {
        **scores,
        "kept_epoch": kept_epoch(history, restored_best),
        "epochs_run": epochs,
        "train_seconds": round(seconds, 3),
        "seconds_per_epoch": round(seconds / epochs, 3),
        "parameters": int(model.count_params()),
    }
