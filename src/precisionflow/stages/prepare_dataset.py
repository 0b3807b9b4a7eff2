"""prepare_dataset: load a data set and split it into train/val/test arrays (data.npz).

Images are stored NHWC float32 in [0, 1]; labels int64. Splits are stratified and seeded.
"""

import hashlib
from pathlib import Path
from typing import Any, Dict

import numpy as np

from precisionflow.errors import ConfigError
from precisionflow.nodeio import write_json_atomic

PACKAGES = ("numpy", "scikit-learn")
SPLITS = ("train", "val", "test")


def load_digits_images():
    """scikit-learn's 8x8 digits: pixel values 0..16 -> [0, 1], one grey channel."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images.astype(np.float32) / 16.0)[..., np.newaxis]
    return images, digits.target.astype(np.int64), [str(name) for name in digits.target_names]


LOADERS = {"digits": load_digits_images}


def split(images, labels, params: Dict[str, Any]):
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


def fingerprint(images: np.ndarray, labels: np.ndarray) -> str:
    return hashlib.sha256(images.tobytes() + labels.tobytes()).hexdigest()[:16]


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    if params["name"] not in LOADERS:
        raise ConfigError(f"dataset.name: expected one of {sorted(LOADERS)}, found '{params['name']}'.")
    images, labels, class_names = LOADERS[params["name"]]()
    splits = split(images, labels, params)
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
    with np.load(Path(data_dir) / "data.npz") as arrays:
        return arrays[f"x_{split_name}"], arrays[f"y_{split_name}"]
