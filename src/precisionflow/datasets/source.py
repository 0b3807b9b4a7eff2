"""A data set's source, as the dataset stage and the detection sources both build it."""

from typing import Any, Callable, Dict, List, Optional

import numpy as np


class Source:
    """Where a data set's images come from: items (digit indices, file paths, scene numbers), their
    labels, and how to turn a list of items into uint8 pixels. A detection source has no labels:
    objects(item) gives an image's boxes instead. conditions(item), where the data set has them, gives
    an image's condition tags (datasets/conditions.py)."""

    def __init__(
        self,
        items: List[Any],
        labels: np.ndarray,
        classes: List[str],
        image_shape,
        divisor: int,
        pixels: Callable[[List[Any]], np.ndarray],
        objects: Callable[[Any], Dict[str, Any]] = None,
    ):
        self.items, self.labels, self.classes = items, labels, classes
        self.image_shape, self.divisor, self.pixels, self.objects = tuple(image_shape), divisor, pixels, objects
        self.conditions: Optional[Callable[[Any], List[str]]] = None
