"""image_folder data sets made inside the tests: splits, fingerprints and every bad-folder error."""

import json

import numpy as np
import pytest
from PIL import Image

from precisionflow.datasets import image_folder
from precisionflow.datasets.store import Split
from precisionflow.errors import DataError
from precisionflow.pipeline.runner import run_node

PARAMS = {
    "name": "image_folder",
    "image_size": [12, 12],
    "channels": 3,
    "val_fraction": 0.2,
    "test_fraction": 0.2,
    "seed": 0,
    "max_samples": None,
}


def make_folder(root, classes=("cat", "dog"), per_class=10, size=(16, 20), mode="RGB"):
    rng = np.random.default_rng(0)
    for name in classes:
        (root / name).mkdir(parents=True, exist_ok=True)
        for index in range(per_class):
            pixels = rng.integers(0, 255, (size[0], size[1], 3) if mode == "RGB" else size, dtype=np.uint8)
            Image.fromarray(pixels, mode).save(root / name / f"{index:03d}.png")
    return root


def prepare(tmp_path, root, **overrides):
    """Run the prepare_dataset stage through the runner, as Snakemake would."""
    results = tmp_path / "results"
    plan = {
        "results_dir": str(results),
        "nodes": {
            "prepare_dataset/data-1": {
                "stage": "prepare_dataset",
                "id": "data-1",
                "params": dict(PARAMS, path=str(root), **overrides),
                "inputs": {},
            }
        },
    }
    return run_node(plan, "prepare_dataset/data-1"), results / "prepare_dataset" / "data-1"


def test_ratio_split_resizes_and_keeps_every_class(tmp_path):
    record, node = prepare(tmp_path, make_folder(tmp_path / "images"))
    meta = json.loads((node / "meta.json").read_text())
    assert meta["classes"] == ["cat", "dog"] and meta["input_shape"] == [12, 12, 3]
    assert sum(meta["sizes"].values()) == 20
    test, train = Split(node, "test"), Split(node, "train")
    assert set(test.labels) == {0, 1} and train.array().max() <= 1.0
    assert np.load(node / "x_train.npy").dtype == np.uint8 and np.load(node / "x_train.npy").shape == (len(train), 12, 12, 3)


def test_grey_images_become_rgb_or_stay_grey(tmp_path):
    root = make_folder(tmp_path / "grey", mode="L")
    _, node = prepare(tmp_path, root, channels=1)
    assert json.loads((node / "meta.json").read_text())["input_shape"] == [12, 12, 1]


def test_existing_split_folders_are_used(tmp_path):
    root = tmp_path / "split"
    for split, count in (("train", 6), ("val", 2), ("test", 3)):
        make_folder(root / split, per_class=count)
    _, node = prepare(tmp_path, root)
    assert json.loads((node / "meta.json").read_text())["sizes"] == {"train": 12, "val": 4, "test": 6}


def test_fingerprint_changes_when_an_image_is_added(tmp_path):
    root = make_folder(tmp_path / "images", per_class=3)
    cache = tmp_path / "cache.json"
    before = image_folder.fingerprint(root, cache)
    assert image_folder.fingerprint(root, cache) == before
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(root / "cat" / "new.png")
    assert image_folder.fingerprint(root, cache) != before


def _break_empty_class(root):
    make_folder(root)
    (root / "bird").mkdir()
    return "class folder is empty", root / "bird"


def _break_non_image(root):
    make_folder(root)
    (root / "dog" / "notes.txt").write_text("hello")
    return "not an image", root / "dog" / "notes.txt"


def _break_unreadable(root):
    make_folder(root)
    (root / "cat" / "broken.png").write_bytes(b"not really a png")
    return "cannot be read as an image", root / "cat" / "broken.png"


def _break_single_class(root):
    make_folder(root, classes=("cat",))
    return "single class", root


def _break_missing_in_split(root):
    make_folder(root / "train")
    make_folder(root / "val")
    make_folder(root / "test", classes=("cat",))
    return "have no folder here", root / "test"


def _break_no_classes(root):
    root.mkdir()
    return "expected one sub-folder per class", root


@pytest.mark.parametrize(
    "breaker",
    [_break_empty_class, _break_non_image, _break_unreadable, _break_single_class, _break_missing_in_split, _break_no_classes],
)
def test_bad_folders_fail_before_training_and_leave_no_output(tmp_path, breaker):
    expected, where = breaker(tmp_path / "images")
    with pytest.raises(DataError) as caught:
        prepare(tmp_path, tmp_path / "images")
    assert expected in str(caught.value) and str(where) in str(caught.value)
    stage_dir = tmp_path / "results" / "prepare_dataset"
    assert not stage_dir.exists() or list(stage_dir.iterdir()) == []


def test_missing_path_is_reported_when_planning(tmp_path):
    from precisionflow.config.compose import expand
    from precisionflow.pipeline.plan import build_plan

    with pytest.raises(DataError, match="expected a folder of class sub-folders"):
        build_plan(expand(["dataset=image_folder", f"dataset.path={tmp_path / 'nowhere'}"]), str(tmp_path))
