"""A prepared data node on disk, written and read in bounded memory.

Per split, the node holds its labels (`y_<split>.npy`, int64) and either

    x_<split>.npy      uint8 images at the model's input size (N, H, W, C), a plain .npy file
                       written image by image and read by index ranges (os.pread), never whole;
    files_<split>.json the source image files (dataset.cache=none): decoded when a stage reads them.

Pixels become float32 only batch by batch: value / pixel_divisor (255 for image files, 16 for
digits), exactly the arithmetic prepare_dataset applied when it stored float32 arrays. numpy only,
so the GPU-machine stages read data nodes without TensorFlow.
"""

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np

from precisionflow.errors import DataError

META_FILE = "meta.json"
IMAGES = "x_{}.npy"
LABELS = "y_{}.npy"
FILES = "files_{}.json"
# One pread per contiguous run; bigger reads would only raise the peak without speeding anything up.
READ_CHUNK_IMAGES = 256


def decode_threads() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def decode_files(paths: Sequence[str], image_shape: Sequence[int]) -> np.ndarray:
    """uint8 pixels of image files at (H, W, C), decoded by a thread per core (PIL releases the GIL)."""
    from precisionflow.datasets.image_folder import load_pixels

    size, channels = tuple(image_shape[:2]), image_shape[2]
    with ThreadPoolExecutor(decode_threads()) as pool:
        return np.stack(list(pool.map(lambda path: load_pixels(Path(path), size, channels), paths)))


class SplitWriter:
    """Writes one split's uint8 images in order, in bounded memory, under a temporary name; close()
    checks the count, then renames: a killed prepare never leaves a complete-looking x_<split>.npy."""

    def __init__(self, folder: Path, split: str, count: int, image_shape: Sequence[int]):
        self.path = Path(folder) / IMAGES.format(split)
        self.tmp = self.path.with_name(self.path.name + ".partial")
        self.count, self.image_shape, self.written = count, tuple(image_shape), 0
        self.digest = hashlib.sha256()
        self.handle = open(self.tmp, "wb")
        header = {
            "descr": np.lib.format.dtype_to_descr(np.dtype(np.uint8)),
            "fortran_order": False,
            "shape": (count,) + self.image_shape,
        }
        np.lib.format.write_array_header_2_0(self.handle, header)

    def append(self, images: np.ndarray) -> None:
        if images.dtype != np.uint8 or images.shape[1:] != self.image_shape:
            raise ValueError(f"expected uint8 images of shape {self.image_shape}, got {images.dtype} {images.shape[1:]}")
        data = np.ascontiguousarray(images).tobytes()
        self.handle.write(data)
        self.digest.update(data)
        self.written += len(images)

    def close(self) -> str:
        """Finish the file; the sha256 of its pixels."""
        self.handle.close()
        if self.written != self.count:
            raise DataError(f"{self.path}: wrote {self.written} images, expected {self.count}.")
        os.replace(self.tmp, self.path)
        return self.digest.hexdigest()


def _npy_layout(path: Path) -> Tuple[Tuple[int, ...], int]:
    """(shape, byte offset of the data) of a uint8 C-order .npy file."""
    with open(path, "rb") as handle:
        major, _ = np.lib.format.read_magic(handle)
        read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, fortran_order, dtype = read_header(handle)
        offset = handle.tell()
    if dtype != np.uint8 or fortran_order:
        raise DataError(
            f"{path}: expected uint8 C-order images, found {dtype}{' (Fortran order)' if fortran_order else ''}. "
            "Delete this data node's folder and run again."
        )
    return tuple(shape), offset


class Split:
    """One split of a prepared data node: labels in memory, images read on demand."""

    def __init__(self, data_dir: Path, name: str):
        self.data_dir, self.name = Path(data_dir), name
        meta = json.loads((self.data_dir / META_FILE).read_text())
        self.classes: List[str] = meta["classes"]
        self.image_shape = tuple(meta["input_shape"])
        self.divisor = np.float32(meta["pixel_divisor"])
        self.size = int(meta["sizes"][name])
        # Class labels per image (classification); a detection node holds boxes instead (detection/data.py).
        labels_file = self.data_dir / LABELS.format(name)
        self.labels = np.load(labels_file, allow_pickle=False) if labels_file.exists() else None
        self.files: Optional[List[str]] = None
        if meta["storage"] == "files":
            self.files = json.loads((self.data_dir / FILES.format(name)).read_text())
        else:
            shape, self.offset = _npy_layout(self.data_dir / IMAGES.format(name))
            if shape != (self.size,) + self.image_shape or (self.labels is not None and len(self.labels) != self.size):
                raise DataError(
                    f"{self.data_dir / IMAGES.format(name)}: holds {shape} (labels: "
                    f"{None if self.labels is None else len(self.labels)}), expected {(self.size,) + self.image_shape}. "
                    "Delete this data node's folder and run again."
                )
            self.item_bytes = int(np.prod(self.image_shape))

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> np.ndarray:
        return self.images([index])[0]

    def floats(self, pixels: np.ndarray) -> np.ndarray:
        return pixels.astype(np.float32) / self.divisor

    def pixels(self, indices: Sequence[int]) -> np.ndarray:
        """uint8 images at these indices, in this order."""
        indices = np.asarray(indices, dtype=np.int64)
        if self.files is not None:
            return decode_files([self.files[i] for i in indices], self.image_shape)
        out = np.empty((len(indices),) + self.image_shape, dtype=np.uint8)
        with open(self.data_dir / IMAGES.format(self.name), "rb", buffering=0) as handle:
            position = 0
            for start, length in _runs(indices):
                data = os.pread(handle.fileno(), length * self.item_bytes, self.offset + start * self.item_bytes)
                out[position : position + length] = np.frombuffer(data, np.uint8).reshape((length,) + self.image_shape)
                position += length
        return out

    def images(self, indices: Sequence[int]) -> np.ndarray:
        return self.floats(self.pixels(indices))

    def head(self, count: int) -> np.ndarray:
        """The first `count` images (all if the split is smaller), float32."""
        return self.images(np.arange(min(count, len(self))))

    def batches(self, batch_size: int) -> Iterator[np.ndarray]:
        """The whole split in order, float32, `batch_size` images at a time."""
        for start in range(0, len(self), batch_size):
            yield self.images(np.arange(start, min(start + batch_size, len(self))))

    def array(self) -> np.ndarray:
        """The whole split as one float32 array: only where the split is known to be small
        (dataset.cache=memory) or the caller needs it all at once."""
        return self.images(np.arange(len(self)))


def _runs(indices: np.ndarray) -> Iterator[Tuple[int, int]]:
    """(start, length) of the consecutive runs in `indices`, each at most READ_CHUNK_IMAGES long."""
    start, length = None, 0
    for index in indices.tolist():
        if start is not None and index == start + length and length < READ_CHUNK_IMAGES:
            length += 1
            continue
        if start is not None:
            yield start, length
        start, length = index, 1
    if start is not None:
        yield start, length


def predict_in_batches(predict, split: Split, batch_size: int) -> np.ndarray:
    """Stack predict(batch) over the split: only the outputs (N x classes) are kept, never the images."""
    return np.concatenate([np.asarray(predict(batch)) for batch in split.batches(batch_size)]).astype(np.float32)


def write_arrays(folder: Path, splits: dict, classes: List[str], divisor: int = 255) -> None:
    """A data node from in-memory splits {name: (uint8 images, labels)} (small data sets made by
    tests and benchmarks; prepare_dataset writes large ones chunk by chunk). Labels None: a
    detection node, whose boxes the caller writes (detection.data.save_objects)."""
    from precisionflow.nodeio import write_json_atomic

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, (pixels, labels) in splits.items():
        writer = SplitWriter(folder, name, len(pixels), pixels.shape[1:])
        writer.append(np.asarray(pixels, dtype=np.uint8))
        writer.close()
        if labels is not None:
            np.save(folder / LABELS.format(name), np.asarray(labels, dtype=np.int64))
    first = next(iter(splits.values()))[0]
    write_json_atomic(
        folder / META_FILE,
        {
            "classes": list(classes),
            "input_shape": list(first.shape[1:]),
            "sizes": {name: len(x) for name, (x, _) in splits.items()},
            "pixel_divisor": divisor,
            "storage": "pixels",
        },
    )
