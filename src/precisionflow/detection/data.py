"""A detection data node's boxes: objects_<split>.npz beside the split's uint8 images (store.py).

    image_index (M,)  boxes (M, 4) [x0, y0, x1, y1] in input pixels  classes (M,)
    shadow_index (S,) shadows (S, 4)   -- shadow_cars only: where cast shadows lie (never objects)
    shadow_masks (N, H*W/8)            -- shadow_cars only: each image's shadow pixels, bit-packed

numpy only, loaded with allow_pickle=False; per image as {"boxes", "classes", "shadows"}.
"""

from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

OBJECTS = "objects_{}.npz"


def save_objects(folder: Path, split: str, per_image: Sequence[Dict[str, Sequence]]) -> None:
    def flat(key: str, width: int):
        rows = [(index, row) for index, objects in enumerate(per_image) for row in objects.get(key, [])]
        return (
            np.asarray([i for i, _ in rows], np.int64),
            np.asarray([r for _, r in rows], np.float32 if width else np.int64).reshape((-1, width) if width else (-1,)),
        )

    image_index, boxes = flat("boxes", 4)
    _, classes = flat("classes", 0)
    shadow_index, shadows = flat("shadows", 4)
    masks = {}
    if per_image and all("shadow_mask" in objects for objects in per_image):
        masks = {
            "shadow_masks": np.stack([np.packbits(np.asarray(o["shadow_mask"], bool).reshape(-1)) for o in per_image]),
            "mask_shape": np.asarray(np.shape(per_image[0]["shadow_mask"]), np.int64),
        }
    np.savez(
        Path(folder) / OBJECTS.format(split),
        image_index=image_index,
        boxes=boxes,
        classes=classes,
        shadow_index=shadow_index,
        shadows=shadows,
        **masks,
    )


def objects_digest(per_image: Sequence[Dict[str, Sequence]]) -> bytes:
    """A content digest of the boxes (and shadow masks) of a split, for the data node's fingerprint."""
    import hashlib

    digest = hashlib.sha256()
    for objects in per_image:
        for key in ("boxes", "classes", "shadows", "shadow_mask"):
            if key in objects:
                digest.update(key.encode() + np.ascontiguousarray(np.asarray(objects[key], np.float64)).tobytes())
    return digest.digest()


def load_objects(data_dir: Path, split: str, count: int) -> List[Dict[str, np.ndarray]]:
    """Per image of the split: {"boxes": K x 4, "classes": K, "shadows": S x 4} (+ "shadow_mask":
    H x W bool where the data set records shadow pixels)."""
    with np.load(Path(data_dir) / OBJECTS.format(split), allow_pickle=False) as arrays:
        image_index, boxes, classes = arrays["image_index"], arrays["boxes"], arrays["classes"]
        shadow_index, shadows = arrays["shadow_index"], arrays["shadows"]
        masks = arrays["shadow_masks"] if "shadow_masks" in arrays else None
        shape = tuple(arrays["mask_shape"]) if masks is not None else None
    found = []
    for i in range(count):
        objects = {"boxes": boxes[image_index == i], "classes": classes[image_index == i], "shadows": shadows[shadow_index == i]}
        if masks is not None:
            objects["shadow_mask"] = np.unpackbits(masks[i])[: shape[0] * shape[1]].reshape(shape).astype(bool)
        found.append(objects)
    return found
