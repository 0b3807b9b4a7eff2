"""What precisionflow guarantees about bad input, as one table: each case fails before any job
starts, with one line naming the key or path and the fix, a non-zero exit status, and no file
written under results/. (`pytest tests/test_bad_config_table.py -v` prints the table.)"""

import zipfile
from pathlib import Path

import pytest
from PIL import Image

from precisionflow import cli, precisions


def image(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (10, 200, 30)).save(path)


def folder(tmp: Path, layout) -> str:
    root = tmp / "images"
    root.mkdir()
    for name in layout:
        if name.endswith("/"):
            (root / name).mkdir(parents=True)
        elif name.endswith(".broken.png"):  # a PNG signature, then nothing a decoder can use
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(b"\x89PNG\r\n\x1a\n" + b"cut short")
        elif name.endswith(".png"):
            image(root / name)
        else:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text("not an image")
    return str(root)


def keras_file(tmp: Path, config: str) -> str:
    path = tmp / "user.keras"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", config)
    return str(path)


TWO_CLASSES = ["a/1.png", "a/2.png", "b/1.png", "b/2.png"]
LAMBDA_CONFIG = '{"layers": [{"class_name": "Lambda", "config": {}}]}'
# {category: [(case, overrides (a callable gets the test's tmp folder), what the one-line message must say)]}
CATEGORIES = {
    "keys": [
        ("unknown key", ["train.epoch=3"], "train.epoch: no such key. Did you mean train.epochs"),
        ("unknown nested key", ["evaluate.budget.max_top1=1"], "Did you mean evaluate.budget.max_top1_drop"),
        ("unknown target key", ["target_defs.local.devic=cpu"], "Did you mean target_defs.local.device"),
        ("unknown section", ["nosuchsection.x=1"], "nosuchsection"),
        ("'+' on a fixed section", ["+train.foo=1"], "train.foo: no such key. Valid keys here: at_chance"),
        (
            "`_target_` key",
            ["+model._target_=os.system"],
            "model._target_: precisionflow builds no objects named in the configuration",
        ),
        ("key of an unselected dataset", ["dataset.path=/data"], "dataset.path is set, but dataset.name=digits does not read it"),
        ("key of an unselected model", ["model.path=/m.keras"], "model.path is set, but model.name=resnet_mini does not read it"),
    ],
    "types and choices": [
        ("wrong type", ["train.epochs=abc"], "train.epochs='abc': Value 'abc' of type 'str' could not be converted to Integer"),
        ("wrong type (list)", ["fp16.op_block_list=Softmax"], "fp16.op_block_list='Softmax'"),
        (
            "unknown group choice",
            ["dataset=cifar"],
            "dataset=cifar: no such choice; choices of dataset: coco_folder, digits, image_folder, shadow_cars",
        ),
        ("misspelled group choice", ["calibration=entropi"], "Did you mean calibration=entropy?"),
        (
            "unknown enum value",
            ["precisions=[fp32,fp8]"],
            f"expected one of [{', '.join(precisions.names())}]",  # the registry's, not a list kept here
        ),
        (
            "unknown choice in a list",
            ["precisions=[fp32,int9]"],
            f"expected one of [{', '.join(precisions.names())}], found 'int9'. Did you mean 'int8'?",
        ),
        (
            "unknown finetune mode",
            ["finetune.mode=qat2"],
            "finetune.mode: expected one of [none, fp32, mixed_float16, mixed_bfloat16, qat], found 'qat2'. Did you mean 'qat'?",
        ),
        ("string choice", ["engine.optimization_level=max"], "engine.optimization_level: expected one of"),
        ("string choice, close", ["train.optimizer=adamw"], "Did you mean 'adam'?"),
        ("backend choice", ["engine.backend=trt"], "engine.backend: expected one of [onnxruntime, tensorrt], found 'trt'"),
        ("cuDNN search choice", ["engine.onnxruntime.cudnn_conv_algo_search=fast"], "engine.onnxruntime.cudnn_conv_algo_search"),
        ("calibration split on test", ["calibration.split=test"], "calibration.split: expected one of"),
        ("chance policy", ["train.at_chance=maybe"], "train.at_chance: expected one of"),
        ("not a tracking URI", ["tracking.uri=5"], "tracking.uri: expected a store URI"),
    ],
    "numbers out of range": [
        ("batch 0", ["train.batch_size=0"], "train.batch_size: expected an integer >= 1, found 0."),
        ("epochs 0", ["train.epochs=0"], "train.epochs: expected an integer >= 1"),
        ("calibration samples 0", ["calibration.num_samples=0"], "calibration.num_samples: expected an integer >= 1"),
        ("timing batch 0", ["evaluate.timing_batch_sizes=[0]"], "evaluate.timing_batch_sizes: expected positive sizes"),
        ("one ratio round", ["evaluate.ratio_rounds=1"], "evaluate.ratio_rounds / ratio_window_s"),
        (
            "negative latency bound",
            ["evaluate.serving.latency_bound_ms=-5"],
            "evaluate.serving.latency_bound_ms: expected a bound > 0",
        ),
        (
            "zero latency bound",
            ["evaluate.serving.latency_bound_ms=0"],
            "evaluate.serving.latency_bound_ms: expected a bound > 0",
        ),
        ("percentile above 1", ["evaluate.serving.percentile=1.5"], "evaluate.serving.percentile: expected a fraction"),
        ("serving batch 0", ["evaluate.serving.max_batch=0"], "evaluate.serving.max_batch: expected an integer >= 1"),
        (
            "negative serving run",
            ["evaluate.serving.min_duration_ms=-1"],
            "evaluate.serving.min_duration_ms: expected a duration",
        ),
        ("no server search", ["evaluate.serving.search_repeats=0"], "evaluate.serving.search_repeats: expected an integer >= 1"),
        (
            "a target's next batch misspelt",
            ["+target_defs.local.serving.server_next_batch=when_free"],
            "target_defs.local.serving.server_next_batch: expected when_ready or when_gpu_frees, found 'when_free'.",
        ),
        ("channels 2", ["dataset.channels=2"], "dataset.channels: expected 1 (grey) or 3 (RGB), found 2."),
        ("prune ratio 1.2", ["prune=channel", "prune.ratio=1.2", "finetune.mode=fp32"], "prune.ratio: expected a fraction"),
        ("prune threshold 2", ["prune=channel", "prune.threshold=2.0", "finetune.mode=fp32"], "prune.threshold"),
        (
            "QAT fine-tune of 0 epochs",
            ["precisions=[fp32,int8_qat]", "finetune.epochs=0"],
            "finetune.epochs: expected an integer >= 1 (int8_qat engines come from a QAT fine-tune), found 0.",
        ),
    ],
    "impossible combinations": [
        ("prune without retraining", ["prune=channel"], "a pruned model must be retrained"),
        ("no fp32 reference", ["precisions=[fp16]"], "precisions: expected fp32 among ['fp16']"),
        ("empty precisions", ["precisions=[]"], "precisions: expected at least one"),
        ("TensorRT batch beyond profile", ["engine=tensorrt", "evaluate.batch_size=128"], "engine.max_batch=64"),
        ("sweep without -m", ["train.epochs=2,4"], "add -m (--multirun)"),
        ("detection data, classification task", ["dataset=shadow_cars"], "add task=detection"),
        (
            "int8_mixed for a detector with no spurious-box budget",
            [
                "experiment=detection",
                "precisions=[fp32,int8_mixed]",
                "evaluate.budget.max_spurious_per_image=null",
                "evaluate.budget.max_map_drop=null",
            ],
            "int8_mixed with task=detection: the search keeps ops in float until spurious boxes",
        ),
    ],
    "targets": [
        ("undefined target", ["targets=[mars]"], "targets: ['mars'] not defined"),
        ("target not buildable here", ["targets=[a100]"], "target a100: its engines cannot be built on this machine"),
    ],
    "data": [
        ("image folder without path", ["dataset=image_folder"], "dataset.path: dataset=image_folder needs the folder"),
        (
            "missing image folder",
            ["dataset=image_folder", "dataset.path=/nonexistent/images"],
            "expected a folder of class sub-folders, found no folder at /nonexistent/images",
        ),
        (
            "flat image folder",
            lambda tmp: ["dataset=image_folder", f"dataset.path={folder(tmp, ['x.png'])}"],
            "expected one sub-folder per class, found none",
        ),
        (
            "empty image folder",
            lambda tmp: ["dataset=image_folder", f"dataset.path={folder(tmp, [])}"],
            "expected one sub-folder per class, found none",
        ),
        (
            "one class",
            lambda tmp: ["dataset=image_folder", f"dataset.path={folder(tmp, ['a/1.png'])}"],
            "expected at least 2 class folders",
        ),
        (
            "empty class folder",
            lambda tmp: ["dataset=image_folder", f"dataset.path={folder(tmp, ['a/1.png', 'b/'])}"],
            "b: class folder is empty",
        ),
        (
            "not an image",
            lambda tmp: ["dataset=image_folder", f"dataset.path={folder(tmp, TWO_CLASSES + ['b/notes.txt'])}"],
            "notes.txt: not an image",
        ),
        (
            "unreadable image",
            lambda tmp: ["dataset=image_folder", f"dataset.path={folder(tmp, TWO_CLASSES + ['b/3.broken.png'])}"],
            "3.broken.png: cannot be read as an image",
        ),
        (
            "too many calibration samples",
            ["dataset.max_samples=400", "calibration.num_samples=300"],
            "calibration.num_samples=300, but the train split has 260 images",
        ),
    ],
    "user models": [
        ("user model missing", ["model=keras_file", "model.path=/nonexistent.keras"], "model.path: expected a saved model at"),
        ("user model not Keras", lambda tmp: ["model=keras_file", f"model.path={tmp / 'x.keras'}"], "is not a Keras .keras file"),
        (
            "user model with code",
            lambda tmp: ["model=keras_file", "model.path=" + keras_file(tmp, LAMBDA_CONFIG)],
            "contains a Lambda layer (arbitrary Python code), refused in Keras safe mode. If you trust this file, set model.trust=true.",
        ),
    ],
}
CASES = [case for cases in CATEGORIES.values() for case in cases]


@pytest.mark.parametrize("case, overrides, message", CASES, ids=[case[0] for case in CASES])
def test_bad_input_fails_before_anything_runs(tmp_path, capsys, case, overrides, message):
    if callable(overrides):
        (tmp_path / "x.keras").write_text("not a zip")
        overrides = overrides(tmp_path)
    results = tmp_path / "results"
    code = cli.main(["run", f"results_dir={results}", *overrides])
    error = capsys.readouterr().err.strip()
    assert code != 0
    assert message in error, error
    assert len(error.splitlines()) == 1, error  # one line
    assert not results.exists()  # nothing written, nothing ran


def test_the_table_has_at_least_30_cases_in_every_kind_of_input():
    assert len(CASES) >= 30
    assert all(CATEGORIES.values())
