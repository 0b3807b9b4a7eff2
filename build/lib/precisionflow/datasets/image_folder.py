"""A folder of class sub-folders of images, optionally already split into train/ val/ test/.

    root/cat/001.png  root/dog/002.jpg ...                  -> seeded stratified split
    root/train/cat/...  root/val/cat/...  root/test/cat/... -> the user's split

fingerprint() identifies the files (names, sizes, content hashes) so that adding or changing an
image gives the data node a new id, and checks that each image parses; content hashes are cached
by (path, size, mtime) so planning a large folder twice does not read every image twice.
"""

import hashlib
import json
import os
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from precisionflow.errors import DataError

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif"}
SPLIT_NAMES = ("train", "val", "test")


def _check_root(root: Path) -> None:
    if not root.is_dir():
        raise DataError(f"dataset.path: expected a folder of class sub-folders, found no folder at {root}.")


def has_split_folders(root: Path) -> bool:
    return all((root / name).is_dir() for name in SPLIT_NAMES)


def list_images(root: Path) -> Dict[str, List[Path]]:
    """{class name: sorted image paths} of one folder level; errors name the offending path."""
    _check_root(root)
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise DataError(f"{root}: expected one sub-folder per class, found none. Put images in {root}/<class>/.")
    found = {}
    for folder in classes:
        files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
        strays = [p for p in files if p.suffix.lower() not in IMAGE_SUFFIXES]
        if strays:
            raise DataError(
                f"{strays[0]}: not an image (expected one of {sorted(IMAGE_SUFFIXES)}). Move it out of the data folder."
            )
        if not files:
            raise DataError(f"{folder}: class folder is empty; expected at least one image.")
        found[folder.name] = files
    return found


def all_files(root: Path) -> List[Path]:
    _check_root(root)
    return sorted(
        p for p in root.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def fingerprint(root: Path, cache_file: Path) -> str:
    """Hash of every file's relative name, size and content (content hashes cached by stat)."""
    root = Path(root).resolve()
    cache = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    digest = hashlib.sha256()
    for path in all_files(root):
        stat = path.stat()
        key = f"{path}:{stat.st_size}:{stat.st_mtime_ns}"
        if key not in cache:  # a file hashed once was checked once: only new or changed files are read
            content = path.read_bytes()
            if path.suffix.lower() in IMAGE_SUFFIXES:
                check_readable(path, content)
            cache[key] = hashlib.sha256(content).hexdigest()
        digest.update(f"{path.relative_to(root)}\0{stat.st_size}\0{cache[key]}\n".encode())
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache_file.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(cache))
    os.replace(tmp, cache_file)
    return digest.hexdigest()[:16]


def load_pixels(path: Path, size: Tuple[int, int], channels: int) -> np.ndarray:
    """One image as uint8 (H, W, C) at the model's input size; float conversion happens per batch."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            array = np.asarray(image.convert("L" if channels == 1 else "RGB").resize((size[1], size[0])), dtype=np.uint8)
    except (UnidentifiedImageError, OSError) as err:
        raise DataError(f"{path}: cannot be read as an image ({err}). Remove or replace the file.") from err
    return array[..., np.newaxis] if channels == 1 else array


def check_readable(path: Path, content: bytes = None) -> None:
    """The image parses (PIL's verify: header and, for PNG, every chunk's checksum). Planning checks
    each new file this way, so a broken image fails before any job, not in prepare_dataset."""
    import io

    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(content) if content is not None else path) as image:
            image.verify()
    except UnidentifiedImageError as err:
        raise DataError(f"{path}: cannot be read as an image (not a format PIL recognises). Remove or replace the file.") from err
    except (OSError, SyntaxError) as err:
        raise DataError(f"{path}: cannot be read as an image ({err}). Remove or replace the file.") from err


def labelled_files(root: Path, class_names: List[str] = None) -> Tuple[List[str], np.ndarray, List[str]]:
    """(image paths, labels, class names) of one folder level; every class must have a folder."""
    listing = list_images(root)
    class_names = class_names or sorted(listing)
    missing = [name for name in class_names if name not in listing]
    if missing:
        raise DataError(f"{root}: classes {missing} have no folder here; every split needs every class ({class_names}).")
    extra = [name for name in listing if name not in class_names]
    if extra:
        raise DataError(f"{root}: classes {extra} are not in the training split's classes {class_names}.")
    paths = [str(path) for name in class_names for path in listing[name]]
    labels = np.asarray([index for index, name in enumerate(class_names) for _ in listing[name]], dtype=np.int64)
    return paths, labels, class_names


def check_classes(labels: np.ndarray, class_names: List[str], where: str) -> None:
    if len(class_names) < 2:
        raise DataError(f"{where}: found a single class {class_names}; a classifier needs at least two class folders.")
    absent = [class_names[i] for i in range(len(class_names)) if not np.any(labels == i)]
    if absent:
        raise DataError(f"{where}: classes {absent} have no images in this split; add images or change the split ratios.")
