"""train_model: build and train the model; save fp32 weights (model.keras), history and curves.

Under a mixed precision policy the model trains with fp16/bf16 compute and fp32 master weights
(dynamic loss scaling for fp16 comes with compile()); the saved model is rebuilt under float32 so
export always starts from a plain fp32 graph.
"""

import math
import time
from pathlib import Path
from typing import Any, Dict

from precisionflow.errors import StageError
from precisionflow.nodeio import read_json
from precisionflow.modeling.training import (
    at_chance_message,
    below_best_message,
    fit,
    kept_epoch_line,
    optimizer,
    rebuild_fp32,
    save_outputs,
)
from precisionflow.stages import NodeContext

PACKAGES = ("tensorflow", "tf-keras", "numpy", "matplotlib", "h5py")


def node_params(at: NodeContext) -> Dict[str, Any]:
    cfg = at.cfg
    from precisionflow.modeling import models

    train = {key: value for key, value in cfg["train"].items() if key not in THRESHOLD_KEYS}
    # How the data is read decides the order training sees it in (dataset.cache): part of the id.
    return {"model": models.reads(cfg["model"]), "train": train, "cache": cfg["dataset"]["cache"], "task": cfg["task"]}


THRESHOLD_KEYS = ("at_chance",)  # checked against the summary (limits/check), never part of the id


def limits(at: NodeContext) -> Dict[str, Any]:
    """Thresholds, not parameters (a changed one re-checks the finished training)."""
    return {"at_chance": at.cfg["train"]["at_chance"]}


def check(limits: Dict[str, Any], summary: Dict[str, Any]) -> None:
    message = at_chance_message(summary)
    if message and limits["at_chance"] == "stop":
        raise StageError(f"{message}; or set train.at_chance=warn to build engines anyway.")
    if message:
        print(f"\n(!) WARNING: {message}.\n", flush=True)
    below = below_best_message(summary)
    if below:
        print(f"\n(!) WARNING: {below}.\n", flush=True)


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    from precisionflow.modeling import models
    from precisionflow.modeling.tfenv import import_tensorflow

    started = time.time()
    tf, keras = import_tensorflow()
    train = params["train"]
    keras.utils.set_random_seed(train["seed"])
    meta = read_json(inputs["data"] / "meta.json")
    keras.mixed_precision.set_global_policy("float32" if train["precision_policy"] == "fp32" else train["precision_policy"])
    model = models.build(keras, params["model"], meta["input_shape"], len(meta["classes"]))
    steps = train["epochs"] * math.ceil(meta["sizes"]["train"] / train["batch_size"])
    opt = optimizer(keras, train["optimizer"], train["learning_rate"], train["lr_schedule"], steps)
    startup_seconds = time.time() - started
    history, seconds = fit(keras, model, inputs["data"], {**train, "task": params["task"]}, opt, params["cache"])
    model = rebuild_fp32(keras, params["model"], model, meta)
    summary = save_outputs(
        out,
        model,
        history,
        seconds,
        inputs["data"],
        f"{params['model']['name']} ({train['precision_policy']})",
        params["task"],
        restored_best=bool(train["early_stopping_patience"] or train["keep_best_epoch"]),
    )
    line = kept_epoch_line(summary)
    if line:  # on the console (a training job's output is shown): the reference is this epoch's weights
        print(f"reference: {line}", flush=True)
    return {**summary, "startup_seconds": round(startup_seconds, 3), "precision_policy": train["precision_policy"]}
