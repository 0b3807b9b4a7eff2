"""A detection data node's boxes: objects_<split>.npz beside the split's uint8 images (store.py).

    image_index (M,)  boxes (M, 4) [x0, y0, x1, y1] in input pixels  classes (M,)
    shadow_index (S,) shadows (S, 4)   -- shadow_cars only: where cast shadows lie (never objects)

numpy only, loaded with allow_pickle=False; per image as {"boxes", "classes", "shadows"}.
"""

from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

OBJECTS = "objects_{}.npz"


def save_objects(folder: Path, split: str, per_image: Sequence[Dict[str, Sequence]]) -> None:
    def flat(key: str, width: int):
        rows = [(index, row) for index, objects in enumerate(per_image) for row in objects.get(key, [])]
        return (np.asarray([i for i, _ in rows], np.int64),
                np.asarray([r for _, r in rows], np.float32 if width else np.int64).reshape((-1, width) if width else (-1,)))

    image_index, boxes = flat("boxes", 4)
    _, classes = flat("classes", 0)
    shadow_index, shadows = flat("shadows", 4)
    np.savez(Path(folder) / OBJECTS.format(split), image_index=image_index, boxes=boxes, classes=classes,
             shadow_index=shadow_index, shadows=shadows)


def load_objects(data_dir: Path, split: str, count: int) -> List[Dict[str, np.ndarray]]:
    """Per image of the split: {"boxes": K x 4, "classes": K, "shadows": S x 4}."""
    with np.load(Path(data_dir) / OBJECTS.format(split), allow_pickle=False) as arrays:
        image_index, boxes, classes = arrays["image_index"], arrays["boxes"], arrays["classes"]
        shadow_index, shadows = arrays["shadow_index"], arrays["shadows"]
    return [{"boxes": boxes[image_index == i], "classes": classes[image_index == i], "shadows": shadows[shadow_index == i]}
            for i in range(count)]


def is_detection(data_dir: Path, split: str = "test") -> bool:
    return (Path(data_dir) / OBJECTS.format(split)).is_file()
