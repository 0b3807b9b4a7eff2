"""Training, mixed precision, QAT fine-tuning and export with real TensorFlow on tiny models (slow)."""

import json

import onnx
import pytest

from precisionflow.config.compose import expand
from precisionflow.errors import StageError
from precisionflow.pipeline.runner import run_node

pytestmark = pytest.mark.slow


def node(stage, node_id, params, inputs=None):
    return f"{stage}/{node_id}", {"stage": stage, "id": node_id, "params": params, "inputs": inputs or {}}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    results = tmp_path_factory.mktemp("training") / "results"
    [cfg] = expand(["model=small_cnn", "dataset.max_samples=400", "train.epochs=2"])
    plan = {"results_dir": str(results), "nodes": dict([node("prepare_dataset", "d1", cfg["dataset"])])}
    run_node(plan, "prepare_dataset/d1")
    return plan, cfg


def train_and_export(workspace, name, train_overrides):
    plan, cfg = workspace
    overrides = dict(train_overrides)
    cache = overrides.pop("cache", "memory")
    train = dict(cfg["train"], **overrides)
    key, spec = node(
        "train_model",
        f"t-{name}",
        {"model": cfg["model"], "train": train, "cache": cache, "task": "classification"},
        {"data": "prepare_dataset/d1"},
    )
    plan["nodes"][key] = spec
    trained = run_node(plan, key)
    export_key, export_spec = node("export_onnx", f"x-{name}", cfg["export"], {"model": key, "data": "prepare_dataset/d1"})
    plan["nodes"][export_key] = export_spec
    return trained, run_node(plan, export_key)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_training_exports_an_onnx_that_matches_keras(workspace, policy):
    trained, exported = train_and_export(workspace, policy, {"precision_policy": policy})
    assert trained["summary"]["test_accuracy"] > 0.3  # chance is 0.1
    assert exported["summary"]["max_abs_diff_vs_keras"] < 1e-3
    graph = onnx.load(str(__import__("pathlib").Path(workspace[0]["results_dir"]) / "export_onnx" / f"x-{policy}" / "model.onnx"))
    assert {init.data_type for init in graph.graph.initializer} <= {
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.INT64,
        onnx.TensorProto.INT32,
    }


def test_streamed_training_learns_like_training_from_arrays(workspace):
    """dataset.cache=disk: batches come from the data node's uint8 file through tf.data."""
    from_arrays, _ = train_and_export(workspace, "memory", {})
    streamed, exported = train_and_export(workspace, "disk", {"cache": "disk"})
    assert streamed["summary"]["test_accuracy"] > 0.3 and exported["summary"]["max_abs_diff_vs_keras"] < 1e-3
    assert abs(streamed["summary"]["test_accuracy"] - from_arrays["summary"]["test_accuracy"]) < 0.15


def test_diverging_loss_names_epoch_and_step(workspace):
    with pytest.raises(StageError, match=r"at epoch 1, step \d+"):
        train_and_export(workspace, "nan", {"optimizer": "sgd", "learning_rate": 1e38})


def test_qat_ranges_are_symmetric_and_map_to_real_tensors(workspace):
    plan, cfg = workspace
    train_and_export(workspace, "base", {})
    finetune = dict(cfg["finetune"], mode="qat", epochs=1)
    key, spec = node(
        "finetune_model",
        "qat",
        {"finetune": finetune, "model": cfg["model"], "cache": "disk", "task": "classification"},
        {"model": "train_model/t-base", "data": "prepare_dataset/d1"},
    )
    plan["nodes"][key] = spec
    summary = run_node(plan, key)["summary"]
    assert summary["activations_symmetric"] is True
    results = __import__("pathlib").Path(plan["results_dir"])
    learned = json.loads((results / key / "qat_ranges.json").read_text())["ranges"]
    # every quantized activation: the model input, each conv/dense output; the logits layer stays float
    assert set(learned) == {"__input__", "conv0", "conv1", "dense"}
    export_key, export_spec = node("export_onnx", "x-qat", cfg["export"], {"model": key, "data": "prepare_dataset/d1"})
    plan["nodes"][export_key] = export_spec
    run_node(plan, export_key)
    mapped = json.loads((results / export_key / "qat_tensor_ranges.json").read_text())
    graph = onnx.load(str(results / export_key / "model.onnx"))
    tensors = {t for n in graph.graph.node for t in n.output} | {i.name for i in graph.graph.input}
    assert len(mapped["ranges"]) == 4 and set(mapped["ranges"]) <= tensors and mapped["unmapped_layers"] == []
    assert "small_cnn/conv0/Relu:0" in mapped["ranges"]  # conv0's fused ReLU output


def test_models_build_and_user_files_load_safely(tmp_path):
    from precisionflow.modeling import models
    from precisionflow.errors import DataError
    from precisionflow.modeling.tfenv import import_tensorflow

    _, keras = import_tensorflow()
    base = {
        "width": 0.5,
        "filters": [8],
        "dense_units": 8,
        "dropout": 0.0,
        "stages": 2,
        "blocks_per_stage": 1,
        "weights": None,
        "path": None,
        "trust": False,
    }
    resnet = models.build(keras, dict(base, name="resnet_mini"), (16, 16, 3), 4)
    assert any(type(layer).__name__ == "Add" for layer in resnet.layers) and resnet.output_shape == (None, 4)
    mobile = models.build(keras, dict(base, name="mobilenet_v2"), (32, 32, 3), 5)
    assert mobile.output_shape == (None, 5)
    saved = tmp_path / "user.keras"
    models.build(keras, dict(base, name="small_cnn"), (8, 8, 1), 3).save(saved)
    replaced = models.build(keras, dict(base, name="keras_file", path=str(saved)), (8, 8, 1), 7)
    assert replaced.output_shape == (None, 7)
    inputs = keras.Input((4,))
    risky = keras.Model(inputs, keras.layers.Lambda(lambda x: x * 2)(inputs))
    risky.save(tmp_path / "lambda.keras")
    with pytest.raises(ValueError, match="safe_mode"):
        models.build(keras, dict(base, name="keras_file", path=str(tmp_path / "lambda.keras")), (4,), 3)
    risky.save(tmp_path / "lambda.h5")
    with pytest.raises(DataError, match="Lambda layer"):
        models.build(keras, dict(base, name="keras_file", path=str(tmp_path / "lambda.h5")), (4,), 3)


def test_training_reports_the_weights_it_keeps_not_the_last_epoch(workspace):
    """EarlyStopping(restore_best_weights) keeps the best epoch: the summary's val_accuracy is
    measured on the saved model, with the epoch it came from."""
    import numpy as np
    from pathlib import Path

    from precisionflow.modeling.training import kept_epoch, test_accuracy
    from precisionflow.modeling.tfenv import import_tensorflow

    # A learning rate high enough that validation accuracy swings between epochs.
    trained, _ = train_and_export(workspace, "early", {"epochs": 6, "learning_rate": 0.05, "early_stopping_patience": 6})
    summary = trained["summary"]
    results = Path(workspace[0]["results_dir"])
    history = json.loads((results / "train_model" / "t-early" / "history.json").read_text())
    _, keras = import_tensorflow()
    saved = keras.models.load_model(results / "train_model" / "t-early" / "model.keras", compile=False)
    assert summary["val_accuracy"] == pytest.approx(test_accuracy(saved, results / "prepare_dataset" / "d1", "val"))
    assert summary["kept_epoch"] == int(np.argmax(history["val_accuracy"])) + 1
    assert summary["last_epoch_val_accuracy"] == history["val_accuracy"][-1]
    # the restored epoch's accuracy, not the last one's (Keras measured it during training, in the same mode)
    assert summary["val_accuracy"] == pytest.approx(max(history["val_accuracy"]), abs=0.02)
    assert kept_epoch({"loss": [1, 1, 1], "val_accuracy": [0.2, 0.9, 0.5]}, restored_best=True) == 2
    assert kept_epoch({"loss": [1, 1, 1], "val_accuracy": [0.2, 0.9, 0.5]}, restored_best=False) == 3


def test_the_keras_side_of_the_export_runs_in_a_process_whose_cuda_sees_no_gpu(tmp_path, monkeypatch):
    """The conversion's own Python gets CUDA_VISIBLE_DEVICES=-1 (TensorFlow then converts on the CPU
    where its CUDA cannot load, and the reference is plain fp32); this process keeps its GPU."""
    import subprocess

    from precisionflow.stages import export_onnx

    seen, real_run = [], subprocess.run

    def run_recording(command, env):
        seen.append(env["CUDA_VISIBLE_DEVICES"])
        return real_run(command, env=env)

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(subprocess, "run", run_recording)
    with pytest.raises(StageError, match="Keras side of the export .* failed with exit 1; its messages are above"):
        export_onnx._keras_side(tmp_path / "no-model", tmp_path, tmp_path / "model.onnx", 17)
    assert seen == ["-1"]
    assert __import__("os").environ["CUDA_VISIBLE_DEVICES"] == "0"
    assert not (tmp_path / "reference_logits.npy").exists()
