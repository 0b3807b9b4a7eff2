"""Training input through tf.data, for data sets larger than memory (dataset.cache=disk|none).

Each epoch shuffles the split's indices (8 bytes an image, so the whole split is one shuffle
buffer: the order is a true per-epoch permutation, not a window), batches them, and reads each
batch's pixels from the data node (store.Split: pread from the uint8 file, or decoding the source
files) in parallel map calls, converting to float32 inside the pipeline; two batches are
prefetched. Memory is a few batches, whatever the split's size.
"""

from typing import Tuple

import numpy as np

from precisionflow.datasets.store import Split, decode_threads

PREFETCH_BATCHES = 2


def _batch_reader(split: Split):
    def read(indices: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        return split.pixels(indices), split.labels[indices]

    return read


def dataset(tf, split: Split, batch_size: int, shuffle: bool, seed: int):
    """(images float32, labels int64) batches of the split; reshuffled every epoch when `shuffle`."""
    indices = tf.data.Dataset.range(len(split))
    if shuffle:
        indices = indices.shuffle(len(split), seed=seed, reshuffle_each_iteration=True)
    read, shape = _batch_reader(split), (None,) + tuple(split.image_shape)
    divisor = float(split.divisor)

    def load(batch_indices):
        pixels, labels = tf.numpy_function(read, [batch_indices], (tf.uint8, tf.int64))
        pixels.set_shape(shape)
        labels.set_shape((None,))
        return tf.cast(pixels, tf.float32) / divisor, labels

    batches = indices.batch(batch_size).map(load, num_parallel_calls=decode_threads(), deterministic=True)
    return batches.prefetch(PREFETCH_BATCHES)
