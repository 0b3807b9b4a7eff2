"""prepare_dataset: record a data set -- its split assignment, class names and a content
fingerprint -- and store its pixels as uint8 at the model's input size (datasets/store.py).

Which image goes to which split is data_splits.py's (stratified and seeded, over file lists,
unless an image folder brings its own train/ val/ test/ folders); the planner reads the same module
for its checks before anything runs. Images are decoded a chunk at a time by a thread
per core and appended to one .npy per split, so memory stays bounded whatever the data set's size;
with dataset.cache=none only the file lists are kept and each stage decodes what it reads. Every
problem with the data (empty folders, non-images, one class, a class missing from a split) stops
here, before training.
"""

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

from precisionflow import data_splits as layout
from precisionflow.datasets import store
from precisionflow.datasets.source import Source
from precisionflow.nodeio import write_json_atomic
from precisionflow.stages import NodeContext

PACKAGES = ("numpy", "scikit-learn", "pillow")
SPLIT_KEYS = ("val_fraction", "test_fraction", "seed", "max_samples")  # used only when we split
FOLDER_KEYS = ("path", "image_size", "channels")
DECODE_CHUNK_PER_THREAD = 64  # images decoded per thread before they are written: the memory bound


SHADOW_CARS_KEYS = ("name", "num_images", "image_size", "val_fraction", "test_fraction", "seed")
COCO_KEYS = ("name", "path", "image_size", "channels")
DEFAULT_SCENE = {"shadow_reach": [0.6, 1.0], "shadow_darkness": [0.35, 0.55], "vehicle_scale": 1.0, "vehicle_colour": [60, 256]}


def node_params(at: NodeContext) -> Dict[str, Any]:
    """The dataset settings this stage uses (the plan adds the folder's content fingerprint)."""
    cfg = at.cfg
    dataset = cfg["dataset"]
    keys = ("name",) + SPLIT_KEYS
    if dataset["name"] in ("shadow_cars", "coco_folder"):
        params = {key: dataset[key] for key in (SHADOW_CARS_KEYS if dataset["name"] == "shadow_cars" else COCO_KEYS)}
        if dataset["name"] == "coco_folder" and dataset.get("conditions"):
            params["conditions"] = dataset["conditions"]  # unset, the node's id stays as it was
        if dataset["name"] == "shadow_cars" and dict(dataset["scene"]) != DEFAULT_SCENE:
            params["scene"] = dict(dataset["scene"])  # other scenes; the default's id stays as it was
        return params
    if dataset["name"] != "image_folder":
        return {key: dataset[key] for key in keys}
    from precisionflow.datasets import image_folder

    keys = ("name",) + FOLDER_KEYS + (("conditions",) if dataset.get("conditions") else ())
    if not image_folder.has_split_folders(layout.folder_root(dataset)):
        keys += SPLIT_KEYS
    # cache=none keeps file lists instead of pixels; memory and disk store the same node.
    return {**{key: dataset[key] for key in keys}, "storage": "files" if dataset["cache"] == "none" else "pixels"}


def write_pixels(out: Path, name: str, source: Source, indices: np.ndarray) -> str:
    """Decode and append the split's images a chunk at a time; the sha256 of its pixels."""
    writer = store.SplitWriter(out, name, len(indices), source.image_shape)
    chunk = DECODE_CHUNK_PER_THREAD * store.decode_threads()
    for start in range(0, len(indices), chunk):
        writer.append(source.pixels([source.items[i] for i in indices[start : start + chunk]]))
    return writer.close()


def check_files(paths: List[str]) -> None:
    from precisionflow.datasets import image_folder

    with ThreadPoolExecutor(store.decode_threads()) as pool:
        list(pool.map(lambda path: image_folder.check_readable(Path(path)), paths))


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    from precisionflow.datasets import image_folder

    started = time.perf_counter()
    splits, train = layout.assign(params)
    digest = hashlib.sha256()
    tags_found: set = set()
    for name in layout.SPLITS:
        source, indices = splits[name]
        if source.conditions is not None:  # each image's condition tags, in the split's order
            from precisionflow.datasets import conditions

            tags = [source.conditions(source.items[i]) for i in indices]
            conditions.save(out, name, tags)
            tags_found.update(tag for each in tags for tag in each)
        if source.objects is not None:  # detection: boxes per image instead of a label
            from precisionflow.detection.data import objects_digest, save_objects

            per_image = [source.objects(source.items[i]) for i in indices]
            save_objects(out, name, per_image)
            digest.update(objects_digest(per_image))
        else:
            labels = source.labels[indices]
            if params["name"] == "image_folder":
                image_folder.check_classes(labels, train.classes, f"{params['path']} ({name} split)")
            np.save(out / store.LABELS.format(name), labels)
            digest.update(labels.tobytes())
        if params.get("storage") == "files":
            paths = [source.items[i] for i in indices]
            check_files(paths)
            write_json_atomic(out / store.FILES.format(name), paths)
        else:
            digest.update(write_pixels(out, name, source, indices).encode())
    seconds = time.perf_counter() - started
    total = sum(len(indices) for _, indices in splits.values())
    meta = {
        "task": "detection" if train.objects is not None else "classification",
        "classes": train.classes,
        "input_shape": list(train.image_shape),
        "sizes": {name: int(len(splits[name][1])) for name in layout.SPLITS},
        "pixel_divisor": train.divisor,
        "storage": params.get("storage", "pixels"),
        "conditions": sorted(tags_found),
        # For file lists, the plan's fingerprint of the folder's files stands for their pixels.
        "fingerprint": params.get("fingerprint") if params.get("storage") == "files" else digest.hexdigest()[:16],
    }
    write_json_atomic(out / store.META_FILE, meta)
    return {**meta, "seconds": round(seconds, 3), "images_per_second": round(total / seconds, 1)}
