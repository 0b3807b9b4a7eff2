"""Mistakes found before anything runs, with the key and the fix in the message."""

import zipfile

import pytest

from precisionflow.config.compose import expand
from precisionflow.errors import ConfigError, PrecisionflowError, StageError
from precisionflow.stages import train_model


def keras_file(path, config: str):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", config)
    return path


def test_a_keras_file_with_code_is_refused_at_composition_naming_the_switch(tmp_path):
    model = keras_file(tmp_path / "m.keras", '{"layers": [{"class_name": "Lambda", "config": {}}]}')
    with pytest.raises(ConfigError, match=r"contains a Lambda layer .* set model.trust=true"):
        expand(["model=keras_file", f"model.path={model}"])
    expand(["model=keras_file", f"model.path={model}", "model.trust=true"])  # trusted explicitly: accepted


def test_a_file_that_is_not_a_keras_model_is_refused_by_path(tmp_path):
    (tmp_path / "m.keras").write_text("not a model")
    with pytest.raises(ConfigError, match=r"m.keras is not a Keras .keras file"):
        expand(["model=keras_file", f"model.path={tmp_path / 'm.keras'}"])
    with pytest.raises(ConfigError, match=r"model.path: expected a saved model at .*missing.keras, found nothing"):
        expand(["model=keras_file", f"model.path={tmp_path / 'missing.keras'}"])


def test_a_training_at_chance_is_flagged_and_stops_the_run_when_asked(capsys):
    at_chance = {"val_accuracy": 0.11, "classes": 10}
    train_model.check({"at_chance": "warn"}, at_chance)
    assert "WARNING: validation top-1 0.110 is at chance (0.100 for 10 classes)" in capsys.readouterr().out
    with pytest.raises(StageError, match=r"learned nothing.*set train.at_chance=warn"):
        train_model.check({"at_chance": "stop"}, at_chance)
    train_model.check({"at_chance": "stop"}, {"val_accuracy": 0.9, "classes": 10})  # a model that learned: silent
    with pytest.raises(ConfigError, match=r"train.at_chance: expected one of \[warn, stop\], found .maybe."):
        expand(["train.at_chance=maybe"])


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "engine.optimization_level=max",
            r"engine.optimization_level: expected one of \[disabled, basic, extended, all\], found 'max'",
        ),
        ("train.optimizer=adamw", r"train.optimizer: .* found 'adamw'. Did you mean 'adam'\?"),
        ("train.lr_schedule=cosin", r"Did you mean 'cosine'\?"),
        ("engine.onnxruntime.cudnn_conv_algo_search=exhaustive", r"Did you mean 'EXHAUSTIVE'\?"),
        ("dataset.path=/tmp/images", r"dataset.path is set, but dataset.name=digits does not read it .* dataset=image_folder"),
        ("model.path=/tmp/m.keras", r"model.path is set, but model.name=resnet_mini does not read it"),
    ],
)
def test_string_choices_and_keys_of_unselected_components_fail_at_composition(override, message):
    with pytest.raises(ConfigError, match=message):
        expand([override])


def test_a_target_this_machine_cannot_build_is_refused_before_snakemake_starts(tmp_path):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "precisionflow.cli", "run", "targets=[a100]", f"results_dir={tmp_path / 'results'}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "target a100: its engines cannot be built on this machine" in done.stderr
    assert "--profile slurm" in done.stderr and "precisionflow ship --target a100" in done.stderr
    assert not (tmp_path / ".snakemake").exists() and not (tmp_path / "results").exists()  # nothing ran, nothing written


def test_a_target_whose_engines_were_built_elsewhere_is_not_refused(tmp_path):
    """After `precisionflow land`, the GPU target's engines are finished: nothing is left to build here."""
    from precisionflow.cli import check_targets_buildable_here
    from precisionflow.pipeline.plan import build_plan

    plan = build_plan(expand(["targets=[a100]", "precisions=[fp32,fp16]"]), str(tmp_path / "results"))
    engines = [key for key, spec in plan["nodes"].items() if spec["stage"] == "build_engine"]
    with pytest.raises(ConfigError, match="target a100: its engines cannot be built on this machine"):
        check_targets_buildable_here(plan)
    for key in engines:
        (tmp_path / "results" / key).mkdir(parents=True)
        (tmp_path / "results" / key / "node.json").write_text("{}")
    check_targets_buildable_here(plan)


def test_more_calibration_samples_than_the_split_has_fails_at_planning(tmp_path):
    from precisionflow.pipeline.plan import build_plan

    points = expand(["dataset.max_samples=400", "calibration.num_samples=300", "calibration.split=train"])
    with pytest.raises(ConfigError, match=r"calibration.num_samples=300, but the train split has 260 images"):
        build_plan(points, str(tmp_path / "results"))
    build_plan(expand(["dataset.max_samples=400", "calibration.num_samples=260"]), str(tmp_path / "results"))


def test_an_engine_with_non_finite_outputs_breaks_its_budget_whatever_its_accuracy():
    from precisionflow.reporting.budget import breaches

    fp32 = {"top1": 0.9, "per_class_top1": {"0": 0.9}}
    engine = {"top1": 0.9, "agreement": 1.0, "flipped": 0, "per_class_top1": {"0": 0.9}, "non_finite_outputs": 12}
    budget = {
        "max_top1_drop": None,
        "min_agreement": None,
        "max_class_drop": None,
        "min_qat_agreement": None,
        "min_speedup": None,
        "speedup_at": "bmax",
        "confidence": 0.95,
    }
    assert breaches(engine, fp32, budget, {}) == [
        "12 non-finite outputs (inf/NaN) on the test split: the engine overflows or is broken there; "
        "its accuracy figures describe garbage"
    ]
    assert breaches(dict(engine, non_finite_outputs=0), fp32, budget, {}) == []


def image(path):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (10, 200, 30)).save(path)


@pytest.mark.parametrize(
    "layout, message",
    [
        ({"a.png": 1}, r"expected one sub-folder per class, found none"),  # flat folder
        ({}, r"expected one sub-folder per class, found none"),  # empty folder
        ({"cat/a.png": 1}, r"expected at least 2 class folders, found \['cat'\]"),
        ({"cat/a.png": 1, "dog/": 0}, r"dog: class folder is empty"),
        ({"cat/a.png": 1, "dog/b.png": 1, "dog/notes.txt": 1}, r"notes.txt: not an image"),
    ],
)
def test_a_broken_image_folder_fails_at_planning_naming_the_path(tmp_path, layout, message):
    from precisionflow.pipeline.plan import build_plan

    root = tmp_path / "images"
    root.mkdir()
    for name, is_file in layout.items():
        if name.endswith(".png"):
            image(root / name)
        elif is_file:
            (root / name).write_text("x")
        else:
            (root / name).mkdir(parents=True)
    with pytest.raises(PrecisionflowError, match=message):
        build_plan(expand(["dataset=image_folder", f"dataset.path={root}"]), str(tmp_path / "results"))


def test_a_logging_that_died_half_way_is_started_over_without_duplicate_points(tmp_path):
    from precisionflow.reporting import tracking

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    experiment = tracking.init_store(uri, "e", tmp_path)
    client = tracking.client_for(uri)
    tags = {tracking.NODE_TAG: "evaluate_engine/x"}
    dead, _ = tracking.get_or_create_run(client, experiment, tags, "x")
    client.log_metric(dead.info.run_id, "top1", 0.9, step=0)  # killed before COMPLETE_TAG
    run = tracking.resumable_run(client, experiment, tags, "x")
    assert run.info.run_id != dead.info.run_id and client.get_run(dead.info.run_id).info.lifecycle_stage == "deleted"
    client.log_metric(run.info.run_id, "top1", 0.9, step=0)
    client.set_tag(run.info.run_id, tracking.COMPLETE_TAG, "1")
    again = tracking.resumable_run(client, experiment, tags, "x")
    assert again.info.run_id == run.info.run_id  # a complete logging is kept as it is
    assert len(client.get_metric_history(run.info.run_id, "top1")) == 1
    assert len(client.search_runs([experiment])) == 1


def test_the_export_check_passes_float_rounding_of_a_deep_model_and_fails_a_wrong_conversion():
    """ResNet-50 at 224x224 (2 epochs) differed from its export by 2.93e-3 with logits near 10: float
    rounding, scaled by the logits. A conversion that is wrong moves logits by a share of their scale."""
    from precisionflow.stages import export_onnx

    limits = {"max_abs_diff": 1e-3, "rtol": 1e-3}
    export_onnx.check(limits, {"max_abs_diff_vs_keras": 2.93e-3, "max_abs_keras_logit": 9.6})
    with pytest.raises(StageError, match=r"max \|logit difference\| 0.41 .* expected <= 0.0106"):
        export_onnx.check(limits, {"max_abs_diff_vs_keras": 0.41, "max_abs_keras_logit": 9.6})
    with pytest.raises(StageError, match="export.rtol=0"):  # the absolute check alone, when asked
        export_onnx.check({"max_abs_diff": 1e-3, "rtol": 0}, {"max_abs_diff_vs_keras": 2.93e-3, "max_abs_keras_logit": 9.6})


def test_a_user_model_whose_head_is_a_softmax_is_named_with_the_fix(tmp_path, capsys):
    """Trained with from_logits=True, a softmax head once passed silently (only Keras's own warning)."""
    import json

    from precisionflow.modeling import models

    def saved(head: dict):
        config = {
            "class_name": "Functional",
            "config": {
                "name": "user",
                "output_layers": [[head["name"], 0, 0]],
                "layers": [
                    {"class_name": "InputLayer", "name": "image", "config": {"name": "image"}},
                    {"class_name": "Dense", "name": "features", "config": {"name": "features", "activation": "relu"}},
                    head,
                ],
            },
        }
        path = tmp_path / f"{head['name']}.keras"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("config.json", json.dumps(config))
        return path

    dense = saved({"class_name": "Dense", "name": "probs", "config": {"name": "probs", "activation": "softmax"}})
    models.check_user_model_file({"path": str(dense), "trust": False})
    warning = capsys.readouterr().err
    assert "ends in softmax (layer 'probs')" in warning and "activation=None" in warning
    layer = saved({"class_name": "Softmax", "name": "softmax", "config": {"name": "softmax"}})
    models.check_user_model_file({"path": str(layer), "trust": False})
    assert "layer 'softmax'" in capsys.readouterr().err
    logits = saved({"class_name": "Dense", "name": "logits", "config": {"name": "logits", "activation": "linear"}})
    models.check_user_model_file({"path": str(logits), "trust": False})
    assert capsys.readouterr().err == ""
    assert (
        models.softmax_head(
            {
                "output_layers": [["probs", 0, 0]],
                "layers": [{"class_name": "Dense", "name": "probs", "config": {"activation": "softmax"}}],
            }
        )
        == "probs"
    )


def test_a_softmax_head_is_named_in_sequential_keras_and_h5_files(tmp_path, capsys):
    """Only a functional .keras file's softmax head was found; a Sequential .keras or an .h5 file
    trained and was reported with a Softmax output."""
    import json
    import zipfile

    import h5py

    from precisionflow.modeling import models

    sequential = {
        "class_name": "Sequential",
        "config": {
            "name": "user",
            "layers": [
                {"class_name": "InputLayer", "config": {"name": "image"}},
                {"class_name": "Dense", "config": {"name": "features", "activation": "relu"}},
                {"class_name": "Dense", "config": {"name": "probs", "activation": "softmax"}},
            ],
        },
    }
    keras_path = tmp_path / "seq.keras"
    with zipfile.ZipFile(keras_path, "w") as archive:
        archive.writestr("config.json", json.dumps(sequential))
    h5_path = tmp_path / "seq.h5"
    with h5py.File(h5_path, "w") as handle:
        handle.attrs["model_config"] = json.dumps(sequential)
    for path in (keras_path, h5_path):
        models.check_user_model_file({"path": str(path), "trust": False})
        assert "ends in softmax (layer 'probs')" in capsys.readouterr().err, path
    assert models.softmax_head(sequential["config"]) == "probs"
