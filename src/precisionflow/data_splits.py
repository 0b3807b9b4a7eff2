"""What a data set's splits hold, decided before anything is decoded: which images go to which
split (stratified and seeded, over file lists), the checks of an image folder's structure and of its
conditions sidecar, and the facts a plan checks settings against (images per split, per class, per
condition). At the package top because it reads both datasets/ and detection/ (a COCO folder's
checks and splits). The planner reads these at planning; the prepare_dataset stage applies the same
assignment when it stores the pixels -- one definition, so what was planned is what is written.
"""

import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from precisionflow.datasets import store
from precisionflow.datasets.source import Source
from precisionflow.errors import ConfigError, DataError

SPLITS = ("train", "val", "test")


def folder_root(params: Dict[str, Any]) -> Path:
    if not params.get("path"):
        raise ConfigError("dataset.path: expected the image folder's path for dataset image_folder, found none.")
    return Path(params["path"]).expanduser().resolve()


def digits_source() -> Source:
    """scikit-learn's 8x8 digits: pixel values 0..16, one grey channel (float = value / 16)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = digits.images.astype(np.uint8)[..., np.newaxis]
    return Source(
        list(range(len(pixels))),
        digits.target.astype(np.int64),
        [str(n) for n in digits.target_names],
        pixels.shape[1:],
        16,
        lambda items: pixels[np.asarray(items, dtype=np.int64)],
    )


def folder_source(params: Dict[str, Any], root: Path, classes: List[str] = None) -> Source:
    from precisionflow.datasets import image_folder

    paths, labels, classes = image_folder.labelled_files(root, classes)
    shape = (params["image_size"][0], params["image_size"][1], params["channels"])
    return Source(paths, labels, classes, shape, 255, lambda items: store.decode_files(items, shape))


def split(source: Source, params: Dict[str, Any]) -> Dict[str, np.ndarray]:
    """{split: indices into source.items}, stratified by class and seeded."""
    try:
        return _stratified_split(np.arange(len(source.labels)), source.labels, params)
    except ValueError as err:  # sklearn: too few images of a class for the requested split
        raise DataError(
            f"dataset '{params['name']}' ({params.get('path') or 'built in'}): cannot split {len(source.labels)} images "
            f"into train/val/test stratified by class ({err}). Add images to the small classes or change "
            "dataset.val_fraction / test_fraction."
        ) from err


def _stratified_split(indices: np.ndarray, labels: np.ndarray, params: Dict[str, Any]) -> Dict[str, np.ndarray]:
    from sklearn.model_selection import train_test_split

    seed = params["seed"]
    if params["max_samples"] and params["max_samples"] < len(indices):  # as many as there are, or more: all
        indices, _, labels, _ = train_test_split(
            indices, labels, train_size=params["max_samples"], stratify=labels, random_state=seed
        )
    held_out = params["val_fraction"] + params["test_fraction"]
    train, rest, _, rest_labels = train_test_split(indices, labels, test_size=held_out, stratify=labels, random_state=seed)
    val, test = train_test_split(rest, test_size=params["test_fraction"] / held_out, stratify=rest_labels, random_state=seed)
    return {"train": train, "val": val, "test": test}


def check_folder(params: Dict[str, Any]) -> None:
    """A folder data set's structure, before anything runs. An image folder: class sub-folders
    holding images only, at least two classes, and the same classes in every split folder; a COCO
    folder: detection/sources.py's checks of its annotation files."""
    from precisionflow.datasets import image_folder

    if params["name"] == "coco_folder":
        from precisionflow.detection import sources

        sources.check_folder(params)
        return
    root = folder_root(params)
    levels = [root / name for name in SPLITS] if image_folder.has_split_folders(root) else [root]
    classes = None
    for level in levels:
        found = sorted(image_folder.list_images(level))
        if len(found) < 2:
            raise DataError(
                f"{level}: expected at least 2 class folders, found {found}. A classifier needs two classes "
                "or more: add a folder per class."
            )
        if classes is not None and found != classes:
            raise DataError(f"{level}: classes {found} differ from {levels[0]}'s {classes}; every split needs the same classes.")
        classes = found


DIGITS_IMAGES = 1797  # scikit-learn's digits


def facts(params: Dict[str, Any]):
    """What this node will hold, for the pre-flight checks of the stages that read it (DataFacts)."""
    from precisionflow.datasets.facts import DataFacts

    return DataFacts(
        expected_split_sizes(params),
        lambda split: expected_class_counts(params, split),
        lambda split: expected_condition_counts(params, split),
    )


def expected_split_sizes(params: Dict[str, Any]) -> Dict[str, int]:
    """Images per split before anything is loaded (sklearn's train_test_split rounding), so a
    setting no split can satisfy (more calibration samples than the split has) fails at planning."""
    if params["name"] in ("shadow_cars", "coco_folder"):
        from precisionflow.detection import sources

        return sources.split_sizes(params)
    if params["name"] == "image_folder":
        from precisionflow.datasets import image_folder

        root = folder_root(params)
        if image_folder.has_split_folders(root):
            return {name: sum(len(files) for files in image_folder.list_images(root / name).values()) for name in SPLITS}
        total = sum(len(files) for files in image_folder.list_images(root).values())
    else:
        total = DIGITS_IMAGES
    total = min(total, params["max_samples"] or total)
    held_out = params["val_fraction"] + params["test_fraction"]
    rest = math.ceil(held_out * total)
    test = math.ceil(params["test_fraction"] / held_out * rest)
    return {"train": total - rest, "val": rest - test, "test": test}


def expected_class_counts(params: Dict[str, Any], split_name: str) -> Optional[Dict[str, int]]:
    """{class: images} a split of an image folder will hold, before anything is decoded: exact for
    the user's own split folders, proportional (the split is stratified) otherwise; None where the
    data set's classes are not listed from files (digits is balanced; a detector has no image classes)."""
    if params["name"] != "image_folder":
        return None
    from precisionflow.datasets import image_folder

    root = folder_root(params)
    if image_folder.has_split_folders(root):
        return {name: len(files) for name, files in image_folder.list_images(root / split_name).items()}
    per_class = {name: len(files) for name, files in image_folder.list_images(root).items()}
    total = sum(per_class.values())
    share = expected_split_sizes(params)[split_name] / max(total, 1)
    return {name: int(count * share) for name, count in per_class.items()}


def expected_condition_counts(params: Dict[str, Any], split_name: str) -> Optional[Dict[str, int]]:
    """{tag: images} a split will carry, before anything is decoded: exact for shadow_cars (from
    the scenes' parameters) and for an image folder's own split folders, proportional for a folder
    the workflow splits; None where the data set has no conditions."""
    from precisionflow.datasets import conditions

    if params["name"] == "shadow_cars":
        from precisionflow.detection import sources

        return conditions.counts(sources.expected_conditions(params, split_name))
    if params["name"] == "coco_folder" and params.get("conditions"):
        from precisionflow.detection import sources

        tagged = sources.coco_conditions(params)
        return conditions.counts([tags for name, tags in tagged.items() if name.startswith(split_name + "/")])
    if params["name"] != "image_folder" or not params.get("conditions"):
        return None
    from precisionflow.datasets import image_folder

    root = folder_root(params)
    tagged = folder_conditions(params)
    if image_folder.has_split_folders(root):
        prefix = str(root / split_name) + "/"
        return conditions.counts([tags for path, tags in tagged.items() if path.startswith(prefix)])
    share = expected_split_sizes(params)[split_name] / max(sum(len(f) for f in image_folder.list_images(root).values()), 1)
    return {tag: int(count * share) for tag, count in conditions.counts(list(tagged.values())).items()}


def folder_conditions(params: Dict[str, Any]) -> Dict[str, List[str]]:
    """{absolute image path: tags} of an image folder's conditions sidecar (dataset.conditions),
    checked against the folder: a path that is no image of it fails with the closest one.
    (A COCO folder's: {"<split>/<file_name>": tags}, detection/sources.coco_conditions.)"""
    from precisionflow.datasets import conditions, image_folder

    if params["name"] == "coco_folder":
        from precisionflow.detection import sources

        return sources.coco_conditions(params)

    root = folder_root(params)
    folders = [root / name for name in SPLITS] if image_folder.has_split_folders(root) else [root]
    known = [
        str(Path(path).relative_to(root))
        for folder in folders
        for files in image_folder.list_images(folder).values()
        for path in files
    ]
    tagged = conditions.read_sidecar(Path(params["conditions"]), known)
    return {str(root / name): tags for name, tags in tagged.items()}


def attach_conditions(params: Dict[str, Any], sources) -> None:
    """Give an image folder's sources their images' tags, where the user wrote a sidecar."""
    if params["name"] != "image_folder" or not params.get("conditions"):
        return
    tagged = folder_conditions(params)
    for source in sources:
        source.conditions = lambda path, tagged=tagged: tagged.get(str(path), [])


def assign(params: Dict[str, Any]) -> Tuple[Dict[str, Tuple[Source, np.ndarray]], Source]:
    """({split: (its source, indices into that source)}, the training split's source)."""
    if params["name"] in ("shadow_cars", "coco_folder"):
        from precisionflow.detection import sources

        return sources.assign(params)
    if params["name"] == "digits":
        source = digits_source()
        return {name: (source, indices) for name, indices in split(source, params).items()}, source
    if params["name"] != "image_folder":
        raise ConfigError(f"dataset.name: expected one of ['digits', 'image_folder'], found '{params['name']}'.")
    from precisionflow.datasets import image_folder

    root = folder_root(params)
    if not image_folder.has_split_folders(root):
        source = folder_source(params, root)
        attach_conditions(params, [source])
        return {name: (source, indices) for name, indices in split(source, params).items()}, source
    train = folder_source(params, root / "train")  # the user's own split folders, taken whole
    sources = {"train": train, **{name: folder_source(params, root / name, train.classes) for name in ("val", "test")}}
    attach_conditions(params, sources.values())
    return {name: (each, np.arange(len(each.items))) for name, each in sources.items()}, train
