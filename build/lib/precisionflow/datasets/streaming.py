"""Training input through tf.data, for data sets larger than memory (dataset.cache=disk|none).

Each epoch shuffles the split's indices (8 bytes an image, so the whole split is one shuffle
buffer: the order is a true per-epoch permutation, not a window), batches them, and reads each
batch's pixels from the data node (store.Split: pread from the uint8 file, or decoding the source
files) in parallel map calls, converting to float32 inside the pipeline; two batches are
prefetched. Memory is a few batches, whatever the split's size.
"""

from typing import Callable, Optional, Tuple

import numpy as np

from precisionflow.datasets.store import Split, decode_threads

PREFETCH_BATCHES = 2


class Targets:
    """What training fits for a batch of indices: class labels, or encoded detection targets."""

    def __init__(self, of: Callable[[np.ndarray], np.ndarray], shape: Tuple, dtype: str):
        self.of, self.shape, self.dtype = of, shape, dtype


def labels_of(split: Split) -> Targets:
    return Targets(lambda indices: split.labels[indices], (), "int64")


def _batch_reader(split: Split, targets: Targets):
    def read(indices: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        return split.pixels(indices), targets.of(indices)

    return read


def dataset(tf, split: Split, batch_size: int, shuffle: bool, seed: int, targets: Optional[Targets] = None):
    """(images float32, targets) batches of the split (targets: its labels unless given);
    reshuffled every epoch when `shuffle`."""
    targets = targets or labels_of(split)
    indices = tf.data.Dataset.range(len(split))
    if shuffle:
        indices = indices.shuffle(len(split), seed=seed, reshuffle_each_iteration=True)
    read, shape = _batch_reader(split, targets), (None,) + tuple(split.image_shape)
    divisor, target_dtype = float(split.divisor), getattr(tf, targets.dtype)

    def load(batch_indices):
        pixels, wanted = tf.numpy_function(read, [batch_indices], (tf.uint8, target_dtype))
        pixels.set_shape(shape)
        wanted.set_shape((None,) + tuple(targets.shape))
        return tf.cast(pixels, tf.float32) / divisor, wanted

    batches = indices.batch(batch_size).map(load, num_parallel_calls=decode_threads(), deterministic=True)
    return batches.prefetch(PREFETCH_BATCHES)
