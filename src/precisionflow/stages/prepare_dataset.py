"""prepare_dataset: load a data set and split it into train/val/test arrays (data.npz).

Images are stored NHWC float32 in [0, 1]; labels int64. Splits are stratified and seeded, unless
an image folder brings its own train/ val/ test/ folders. Every problem with the data (empty
folders, non-images, one class, a class missing from a split) stops here, before training.
"""

import hashlib
import math
from pathlib import Path
from typing import Any, Dict

import numpy as np

from precisionflow.errors import ConfigError, DataError
from precisionflow.nodeio import write_json_atomic

PACKAGES = ("numpy", "scikit-learn", "pillow")
SPLITS = ("train", "val", "test")
SPLIT_KEYS = ("val_fraction", "test_fraction", "seed", "max_samples")  # used only when we split
FOLDER_KEYS = ("path", "image_size", "channels")


def reads(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """The dataset settings this stage uses (the plan adds the folder's content fingerprint)."""
    dataset = cfg["dataset"]
    keys = ("name",) + SPLIT_KEYS
    if dataset["name"] == "image_folder":
        from precisionflow.datasets import image_folder

        keys = ("name",) + FOLDER_KEYS
        if not image_folder.has_split_folders(_folder_root(dataset)):
            keys += SPLIT_KEYS
    return {key: dataset[key] for key in keys}


def load_digits_images():
    """scikit-learn's 8x8 digits: pixel values 0..16 -> [0, 1], one grey channel."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images.astype(np.float32) / 16.0)[..., np.newaxis]
    return images, digits.target.astype(np.int64), [str(name) for name in digits.target_names]


def _folder_root(params: Dict[str, Any]) -> Path:
    if not params.get("path"):
        raise ConfigError("dataset.path: expected the image folder's path for dataset image_folder, found none.")
    return Path(params["path"]).expanduser().resolve()


def load_image_folder(params: Dict[str, Any]):
    from precisionflow.datasets import image_folder

    root = _folder_root(params)
    images, labels, class_names = image_folder.load_split(root, params["image_size"], params["channels"])
    image_folder.check_classes(labels, class_names, str(root))
    return images, labels, class_names


def split_image_folder(params: Dict[str, Any]):
    """Splits the user made (root/train, root/val, root/test)."""
    from precisionflow.datasets import image_folder

    root = _folder_root(params)
    x_train, y_train, class_names = image_folder.load_split(root / "train", params["image_size"], params["channels"])
    splits = {"train": (x_train, y_train)}
    for name in ("val", "test"):
        x, y, _ = image_folder.load_split(root / name, params["image_size"], params["channels"], class_names)
        splits[name] = (x, y)
    for name, (_, y) in splits.items():
        image_folder.check_classes(y, class_names, str(root / name))
    return splits, class_names


LOADERS = {"digits": lambda params: load_digits_images(), "image_folder": load_image_folder}


def split(images, labels, params: Dict[str, Any]):
    try:
        return _stratified_split(images, labels, params)
    except ValueError as err:  # sklearn: too few images of a class for the requested split
        raise DataError(
            f"dataset '{params['name']}' ({params.get('path') or 'built in'}): cannot split {len(labels)} images "
            f"into train/val/test stratified by class ({err}). Add images to the small classes or change "
            "dataset.val_fraction / test_fraction."
        ) from err


def _stratified_split(images, labels, params: Dict[str, Any]):
    from sklearn.model_selection import train_test_split

    seed = params["seed"]
    if params["max_samples"]:
        images, _, labels, _ = train_test_split(
            images, labels, train_size=params["max_samples"], stratify=labels, random_state=seed
        )
    held_out = params["val_fraction"] + params["test_fraction"]
    x_train, x_rest, y_train, y_rest = train_test_split(
        images, labels, test_size=held_out, stratify=labels, random_state=seed
    )
    x_val, x_test, y_val, y_test = train_test_split(
        x_rest, y_rest, test_size=params["test_fraction"] / held_out, stratify=y_rest, random_state=seed
    )
    return {"train": (x_train, y_train), "val": (x_val, y_val), "test": (x_test, y_test)}


def check_folder(params: Dict[str, Any]) -> None:
    """An image folder's structure, before anything runs: class sub-folders holding images only,
    at least two classes, and the same classes in every split folder."""
    from precisionflow.datasets import image_folder

    root = _folder_root(params)
    levels = [root / name for name in SPLITS] if image_folder.has_split_folders(root) else [root]
    classes = None
    for level in levels:
        found = sorted(image_folder.list_images(level))
        if len(found) < 2:
            raise DataError(f"{level}: expected at least 2 class folders, found {found}. A classifier needs two classes "
                            "or more: add a folder per class.")
        if classes is not None and found != classes:
            raise DataError(f"{level}: classes {found} differ from {levels[0]}'s {classes}; every split needs the same classes.")
        classes = found


DIGITS_IMAGES = 1797  # scikit-learn's digits


def expected_split_sizes(params: Dict[str, Any]) -> Dict[str, int]:
    """Images per split before anything is loaded (sklearn's train_test_split rounding), so a
    setting no split can satisfy (more calibration samples than the split has) fails at planning."""
    if params["name"] == "image_folder":
        from precisionflow.datasets import image_folder

        root = _folder_root(params)
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


def fingerprint(images: np.ndarray, labels: np.ndarray) -> str:
    return hashlib.sha256(images.tobytes() + labels.tobytes()).hexdigest()[:16]


def load_splits(params: Dict[str, Any]):
    """({split: (images, labels)}, class names) for the configured data set."""
    if params["name"] not in LOADERS:
        raise ConfigError(f"dataset.name: expected one of {sorted(LOADERS)}, found '{params['name']}'.")
    if params["name"] == "image_folder":
        from precisionflow.datasets import image_folder

        if image_folder.has_split_folders(_folder_root(params)):
            return split_image_folder(params)
    images, labels, class_names = LOADERS[params["name"]](params)
    return split(images, labels, params), class_names


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    splits, class_names = load_splits(params)
    images = np.concatenate([splits[name][0] for name in SPLITS])
    labels = np.concatenate([splits[name][1] for name in SPLITS])
    arrays = {f"{kind}_{name}": arr for name, (x, y) in splits.items() for kind, arr in (("x", x), ("y", y))}
    np.savez(out / "data.npz", **arrays)
    meta = {
        "classes": class_names,
        "input_shape": list(images.shape[1:]),
        "sizes": {name: int(len(splits[name][1])) for name in SPLITS},
        "fingerprint": fingerprint(images, labels),
    }
    write_json_atomic(out / "meta.json", meta)
    return meta


def load(data_dir: Path, split_name: str):
    """(images, labels) of one split of a prepared data node."""
    with np.load(Path(data_dir) / "data.npz", allow_pickle=False) as arrays:
        return arrays[f"x_{split_name}"], arrays[f"y_{split_name}"]
