"""Detection data nodes: shadow_cars and a COCO-format folder through prepare_dataset (the runner),
boxes rescaled with their images, and the task/data/model combinations refused before anything runs."""

import json

import numpy as np
import pytest
from PIL import Image

from precisionflow.config.compose import expand
from precisionflow.datasets.store import Split
from precisionflow.detection import shadow_cars
from precisionflow.detection.data import load_objects
from precisionflow.errors import ConfigError, DataError
from precisionflow.pipeline.runner import run_node


def prepare(tmp_path, params):
    results = tmp_path / "results"
    plan = {
        "results_dir": str(results),
        "nodes": {"prepare_dataset/d": {"stage": "prepare_dataset", "id": "d", "params": params, "inputs": {}}},
    }
    return run_node(plan, "prepare_dataset/d"), results / "prepare_dataset" / "d"


SHADOW_CARS = {
    "name": "shadow_cars",
    "num_images": 40,
    "image_size": [64, 64],
    "val_fraction": 0.15,
    "test_fraction": 0.25,
    "seed": 3,
}


def test_shadow_cars_node_holds_scenes_boxes_and_shadows(tmp_path):
    record, node = prepare(tmp_path, SHADOW_CARS)
    meta = json.loads((node / "meta.json").read_text())
    assert (
        meta["task"] == "detection" and meta["classes"] == ["car", "van"] and meta["sizes"] == {"train": 24, "val": 6, "test": 10}
    )
    test = Split(node, "test")
    assert test.labels is None and not (node / "y_test.npy").exists()
    objects = load_objects(node, "test", len(test))
    scene = shadow_cars.sample_scene(3, 30, 64)  # the first test scene
    image, mask = shadow_cars.render(scene)
    assert np.array_equal(test.pixels([0])[0], image)
    assert np.allclose(objects[0]["boxes"], [v["body"] for v in scene["vehicles"]], atol=1e-4)
    assert len(objects[0]["shadows"]) == len(shadow_cars.annotations(scene, mask)["shadows"])
    assert np.array_equal(objects[0]["shadow_mask"], mask)  # stored bit-packed, back pixel for pixel


def write_coco(root, scenes=6, size=80):
    """A COCO folder made from shadow_cars scenes at 80x80 (boxes in those pixels)."""
    for split in ("train", "val", "test"):
        folder = root / split
        folder.mkdir(parents=True)
        images, notes = [], []
        for index, (pixels, objects) in enumerate(shadow_cars.generate({"train": 1, "val": 2, "test": 3}[split], scenes, size)):
            Image.fromarray(pixels).save(folder / f"{index}.png")
            images.append({"id": 100 + index, "file_name": f"{index}.png", "width": size, "height": size})
            for box, label in zip(objects["boxes"], objects["classes"], strict=True):
                notes.append(
                    {
                        "id": len(notes) + 1,
                        "image_id": 100 + index,
                        "category_id": 7 + label,
                        "iscrowd": 0,
                        "bbox": [box[0], box[1], box[2] - box[0], box[3] - box[1]],
                    }
                )
        categories = [{"id": 7, "name": "car"}, {"id": 8, "name": "van"}]
        (folder / "annotations.json").write_text(json.dumps({"images": images, "annotations": notes, "categories": categories}))
    return root


def test_coco_folder_boxes_are_rescaled_with_the_images(tmp_path):
    root = write_coco(tmp_path / "coco")
    _, node = prepare(tmp_path, {"name": "coco_folder", "path": str(root), "image_size": [40, 40], "channels": 3})
    notes = json.loads((root / "test" / "annotations.json").read_text())
    first = [n for n in notes["annotations"] if n["image_id"] == 100]
    objects = load_objects(node, "test", 6)
    x, y, w, h = first[0]["bbox"]
    assert np.allclose(objects[0]["boxes"][0], [x / 2, y / 2, (x + w) / 2, (y + h) / 2], atol=1e-4)
    assert objects[0]["classes"][0] == first[0]["category_id"] - 7
    assert Split(node, "test").pixels([0]).shape == (1, 40, 40, 3)


def test_a_coco_folder_with_a_missing_image_fails_at_planning(tmp_path):
    from precisionflow.pipeline.plan import build_plan

    root = write_coco(tmp_path / "coco")
    (root / "val" / "2.png").unlink()
    [cfg] = expand(
        [
            "task=detection",
            "dataset=coco_folder",
            f"dataset.path={root}",
            "model=center_net",
            "precisions=[fp32]",
            "calibration.num_samples=4",
        ]
    )
    with pytest.raises(DataError, match="1 image.s. named in annotations.json are missing, e.g. 2.png"):
        build_plan([cfg], str(tmp_path / "results"))
    assert not (tmp_path / "results").exists()


def test_a_coco_folders_sidecar_tags_its_images_in_each_split(tmp_path):
    from precisionflow.datasets import conditions

    root = write_coco(tmp_path / "coco")
    sidecar = tmp_path / "conditions.csv"
    sidecar.write_text("file,conditions\ntest/2.png,dusk;camera_2\ntest/4.png,dusk\ntrain/0.png,camera_2\n")
    params = {"name": "coco_folder", "path": str(root), "image_size": [40, 40], "channels": 3, "conditions": str(sidecar)}
    _, node = prepare(tmp_path, params)
    test_tags = conditions.load(node, "test")
    assert test_tags == [[], [], ["camera_2", "dusk"], [], ["dusk"], []]  # in the annotations' image order
    assert conditions.load(node, "train")[0] == ["camera_2"] and conditions.counts(conditions.load(node, "val")) == {}
    from precisionflow import data_splits as splits

    assert splits.expected_condition_counts(params, "test") == {"camera_2": 1, "dusk": 2}


def test_a_coco_sidecar_naming_an_image_not_in_the_annotations_fails_at_planning(tmp_path):
    from precisionflow.pipeline.plan import build_plan

    root = write_coco(tmp_path / "coco")
    sidecar = tmp_path / "conditions.csv"
    sidecar.write_text("file,conditions\ntest/2.png,dusk\ntest/22.png,dusk\n")
    overrides = ["task=detection", "dataset=coco_folder", f"dataset.path={root}", f"dataset.conditions={sidecar}"]
    [cfg] = expand([*overrides, "model=center_net", "precisions=[fp32]", "calibration.num_samples=4"])
    with pytest.raises(ConfigError, match=r"conditions.csv:3: 'test/22.png' is not an image .* Did you mean 'test/2.png'"):
        build_plan([cfg], str(tmp_path / "results"))
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["dataset=shadow_cars"], "is a detection data set but task=classification"),
        (["task=detection"], "task=detection needs a detection data set"),
        (["task=detection", "dataset=shadow_cars"], "task=detection needs a detector"),
        (
            [
                "experiment=detection",
                "precisions=[fp32,int8,int8_mixed]",
                "evaluate.budget.max_spurious_per_image=null",
                "evaluate.budget.max_map_drop=null",
            ],
            "int8_mixed with task=detection: the search keeps ops in float until spurious boxes",
        ),
        (["experiment=detection", "prune=channel", "finetune.mode=fp32"], "pruning a detector is not supported"),
        (["model=center_net"], "model=center_net is a detector"),
        (["experiment=detection", "dataset.num_images=5"], "at least 20 scenes"),
        (["dataset.num_images=100"], "dataset.num_images is set, but dataset.name=digits does not read it"),
        (["experiment=detection", "task=detectoin"], "Did you mean 'detection'"),
    ],
)
def test_task_mismatches_are_refused_when_composing(overrides, message):
    with pytest.raises(ConfigError, match=message):
        expand(overrides)
