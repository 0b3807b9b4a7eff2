"""Detection data sets for prepare_dataset: generated shadow_cars scenes, or a COCO-format folder.

shadow_cars:  scenes 0..num_images-1 of the seed; the last test_fraction are the test split,
              the val_fraction before them validation (scenes are independent draws).
coco_folder:  <path>/{train,val,test}/annotations.json, each split's images beside it
              (file_name relative to the split folder); boxes rescaled with the image, crowd
              annotations left out, categories numbered in the order of their ids.
"""

import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from precisionflow.errors import DataError

SPLITS = ("train", "val", "test")


def split_sizes(params: Dict[str, Any]) -> Dict[str, int]:
    if params["name"] == "coco_folder":
        return {name: len(_read_annotations(Path(params["path"]), name)["images"]) for name in SPLITS}
    total = params["num_images"]
    test = math.ceil(params["test_fraction"] * total)
    val = math.ceil(params["val_fraction"] * total)
    return {"train": total - val - test, "val": val, "test": test}


def assign(params: Dict[str, Any]):
    from precisionflow.datasets.source import Source

    if params["name"] == "shadow_cars":
        source = shadow_cars_source(params, Source)
        sizes = split_sizes(params)
        bounds = np.cumsum([0, sizes["train"], sizes["val"], sizes["test"]])
        splits = {name: np.arange(bounds[i], bounds[i + 1]) for i, name in enumerate(SPLITS)}
        return {name: (source, indices) for name, indices in splits.items()}, source
    root = Path(params["path"]).expanduser().resolve()
    annotations = {name: _read_annotations(root, name) for name in SPLITS}  # each file read once
    classes = _categories(annotations["train"])
    sources = {name: coco_source(params, root, name, annotations[name], classes, Source) for name in SPLITS}
    if params.get("conditions"):
        tagged = coco_conditions(params, annotations)
        for name, each in sources.items():
            files = [image["file_name"] for image in annotations[name]["images"]]
            each.conditions = lambda item, name=name, files=files: tagged.get(f"{name}/{files[item]}", [])
    return {name: (each, np.arange(len(each.items))) for name, each in sources.items()}, sources["train"]


def shadow_cars_source(params: Dict[str, Any], source_class):
    from precisionflow.detection import shadow_cars

    height, width = params["image_size"]
    if height != width:
        raise DataError(f"dataset.image_size: shadow_cars scenes are square, found {params['image_size']}.")

    settings = params.get("scene")

    def scene(item: int):
        return shadow_cars.sample_scene(params["seed"], item, height, settings)

    def pixels(items: List[int]) -> np.ndarray:
        return np.stack([shadow_cars.render(scene(i))[0] for i in items])

    def objects(item: int) -> Dict[str, Any]:
        drawn = scene(item)
        return shadow_cars.annotations(drawn, shadow_cars.render(drawn)[1])

    def conditions(item: int) -> List[str]:
        return shadow_cars.scene_conditions(scene(item))

    source = source_class(
        list(range(params["num_images"])), None, list(shadow_cars.CLASSES), (height, width, 3), 255, pixels, objects
    )
    source.conditions = conditions
    return source


def expected_conditions(params: Dict[str, Any], split: str) -> List[List[str]]:
    """The tags of a shadow_cars split's scenes, from their parameters alone (nothing rendered)."""
    from precisionflow.detection import shadow_cars

    sizes = split_sizes(params)
    start = {"train": 0, "val": sizes["train"], "test": sizes["train"] + sizes["val"]}[split]
    size = params["image_size"][0]
    return [
        shadow_cars.scene_conditions(shadow_cars.sample_scene(params["seed"], i, size, params.get("scene")))
        for i in range(start, start + sizes[split])
    ]


def _read_annotations(root: Path, split: str) -> Dict[str, Any]:
    path = Path(root) / split / "annotations.json"
    if not path.is_file():
        raise DataError(
            f"{path}: expected a COCO annotations file for the {split} split, found none. dataset=coco_folder "
            "reads <path>/{train,val,test}/annotations.json with each split's images beside it."
        )
    try:
        found = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: not valid JSON ({err}); expected a COCO annotations file.") from err
    missing = [key for key in ("images", "annotations", "categories") if key not in found]
    if missing:
        raise DataError(f"{path}: expected COCO keys images, annotations and categories; {missing} missing.")
    return found


def _categories(annotations: Dict[str, Any]) -> List[Tuple[int, str]]:
    return sorted((int(c["id"]), str(c["name"])) for c in annotations["categories"])


def check_folder(params: Dict[str, Any]) -> None:
    """At planning: every split's annotations parse, name the training split's categories, and
    every image they list exists."""
    root = Path(params["path"]).expanduser().resolve()
    classes = None
    for split in SPLITS:
        annotations = _read_annotations(root, split)
        found = _categories(annotations)
        if classes is not None and found != classes:
            raise DataError(f"{root / split / 'annotations.json'}: categories {found} differ from the train split's {classes}.")
        classes = found
        if not annotations["images"]:
            raise DataError(f"{root / split / 'annotations.json'}: lists no images.")
        absent = [i["file_name"] for i in annotations["images"] if not (root / split / i["file_name"]).is_file()]
        if absent:
            raise DataError(f"{root / split}: {len(absent)} image(s) named in annotations.json are missing, e.g. {absent[0]}.")


def coco_conditions(params: Dict[str, Any], annotations: Optional[Dict[str, Dict[str, Any]]] = None) -> Dict[str, List[str]]:
    """{"<split>/<file_name>": tags} of a COCO folder's conditions sidecar (dataset.conditions):
    paths relative to dataset.path, as the annotations name the images under each split folder;
    one that names no image of them fails with the closest one. `annotations`: each split's, where
    the caller has read them already."""
    from precisionflow.datasets import conditions

    root = Path(params["path"]).expanduser().resolve()
    annotations = annotations or {split: _read_annotations(root, split) for split in SPLITS}
    known = [f"{split}/{image['file_name']}" for split in SPLITS for image in annotations[split]["images"]]
    return conditions.read_sidecar(Path(params["conditions"]), known)


def coco_source(
    params: Dict[str, Any], root: Path, split: str, annotations: Dict[str, Any], classes: List[Tuple[int, str]], source_class
):
    from precisionflow.datasets import store

    index_of = {category: index for index, (category, _) in enumerate(classes)}
    by_image: Dict[int, List[Dict[str, Any]]] = {}
    for note in annotations["annotations"]:
        if note.get("iscrowd"):
            continue
        if note["category_id"] not in index_of:
            raise DataError(
                f"{root / split / 'annotations.json'}: annotation {note.get('id')} has category "
                f"{note['category_id']}, not among the train split's {[c for c, _ in classes]}."
            )
        by_image.setdefault(note["image_id"], []).append(note)
    height, width = params["image_size"]
    shape = (height, width, params["channels"])
    images = annotations["images"]

    def objects(item: int) -> Dict[str, Any]:
        image = images[item]
        sx, sy = width / image["width"], height / image["height"]
        notes = by_image.get(image["id"], [])
        boxes = [
            [n["bbox"][0] * sx, n["bbox"][1] * sy, (n["bbox"][0] + n["bbox"][2]) * sx, (n["bbox"][1] + n["bbox"][3]) * sy]
            for n in notes
        ]
        return {"boxes": boxes, "classes": [index_of[n["category_id"]] for n in notes], "shadows": []}

    paths = [str(root / split / image["file_name"]) for image in images]
    return source_class(
        list(range(len(images))),
        None,
        [name for _, name in classes],
        shape,
        255,
        lambda items: store.decode_files([paths[i] for i in items], shape),
        objects,
    )
