"""Decoding a detector's raw output into boxes, and comparing box sets -- numpy only, after the
engine, identical for every precision: differences between engines come from the engines alone.

Output contract (one tensor, NHWC, stride `STRIDE`): per grid cell, C heatmap logits (one per
class), then the box width and height in grid cells, then the centre's offset inside the cell.
Boxes are [x0, y0, x1, y1] in input pixels.
"""

from dataclasses import dataclass
from typing import Dict, List, Tuple

import numpy as np

STRIDE = 4
REGRESSION_CHANNELS = 4  # width, height, offset x, offset y


# A section of the configuration schema (evaluate.detection), kept here beside the decoding it sets:
# the training summary decodes with its defaults, and a stage's id covers the code it imports -- so
# training imports these few lines, not the whole schema (whose other sections would retrain it).
@dataclass
class DetectionEvalConf:
    """Decoding (identical for every precision, after the engine) and the spurious/lost counting."""

    min_score: float = 0.01  # detections kept for mAP (COCO evaluates the whole ranked list)
    top_k: int = 50  # per image
    nms_iou: float = 0.5  # per-class non-maximum suppression
    score_threshold: float = 0.3  # spurious/lost/shadow boxes and the picture grid count boxes above this
    match_iou: float = 0.5  # a box matches another of its class at this IoU or more


class Detections:
    """One image's boxes (K x 4), scores (K) and classes (K), highest score first."""

    def __init__(self, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray):
        order = np.argsort(-scores, kind="stable")
        self.boxes, self.scores, self.classes = boxes[order], scores[order], classes[order]

    def above(self, threshold: float) -> "Detections":
        keep = self.scores >= threshold
        return Detections(self.boxes[keep], self.scores[keep], self.classes[keep])

    def __len__(self) -> int:
        return len(self.scores)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -60, 60)))


def _peaks(heat: np.ndarray) -> np.ndarray:
    """Cells that are the maximum of their 3x3 neighbourhood (CenterNet's max-pool NMS)."""
    padded = np.pad(heat, ((1, 1), (1, 1), (0, 0)), constant_values=-np.inf)
    height, width = heat.shape[:2]
    neighbourhood = np.max([padded[dy : dy + height, dx : dx + width] for dy in range(3) for dx in range(3)], axis=0)
    return heat >= neighbourhood


def decode_image(output: np.ndarray, num_classes: int, min_score: float, top_k: int, nms_iou: float) -> Detections:
    """One image's output (H x W x (C + 4)) -> its detections."""
    output = output.astype(np.float32)
    if not np.all(np.isfinite(output)):
        output = np.nan_to_num(output, nan=-60.0, posinf=60.0, neginf=-60.0)  # counted separately as non-finite
    heat = sigmoid(output[..., :num_classes])
    regression = output[..., num_classes : num_classes + REGRESSION_CHANNELS]
    ys, xs, classes = np.nonzero(_peaks(heat) & (heat >= min_score))
    scores = heat[ys, xs, classes]
    order = np.argsort(-scores, kind="stable")[:top_k]
    ys, xs, classes, scores = ys[order], xs[order], classes[order], scores[order]
    width, height = np.maximum(regression[ys, xs, 0], 0) * STRIDE, np.maximum(regression[ys, xs, 1], 0) * STRIDE
    cx, cy = (xs + regression[ys, xs, 2]) * STRIDE, (ys + regression[ys, xs, 3]) * STRIDE
    boxes = np.stack([cx - width / 2, cy - height / 2, cx + width / 2, cy + height / 2], axis=1).reshape(-1, 4)
    keep = class_nms(boxes, scores, classes, nms_iou)
    return Detections(boxes[keep], scores[keep], classes[keep])


def decode(outputs: np.ndarray, num_classes: int, settings: Dict) -> List[Detections]:
    return [
        decode_image(output, num_classes, settings["min_score"], settings["top_k"], settings["nms_iou"]) for output in outputs
    ]


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of boxes a (N x 4) and b (M x 4)."""
    a, b = a.reshape(-1, 4)[:, None, :], b.reshape(-1, 4)[None, :, :]
    inter = np.clip(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0, None) * np.clip(
        np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0, None
    )
    area = lambda box: np.clip(box[..., 2] - box[..., 0], 0, None) * np.clip(box[..., 3] - box[..., 1], 0, None)
    union = area(a) + area(b) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def class_nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, threshold: float) -> np.ndarray:
    """Indices kept by greedy non-maximum suppression within each class, highest score first."""
    keep = []
    for index in np.argsort(-scores, kind="stable"):
        same = [k for k in keep if classes[k] == classes[index]]
        if not same or iou(boxes[index], boxes[same]).max() < threshold:
            keep.append(index)
    return np.asarray(keep, dtype=np.int64)


def match(
    boxes: np.ndarray, classes: np.ndarray, other_boxes: np.ndarray, other_classes: np.ndarray, threshold: float
) -> Tuple[np.ndarray, np.ndarray]:
    """One-to-one greedy matching (boxes in order, each to the free same-class box of highest IoU
    >= threshold, as COCO matches detections): (matched flags of boxes, of other_boxes)."""
    matched, other_matched = np.zeros(len(boxes), bool), np.zeros(len(other_boxes), bool)
    if len(boxes) == 0 or len(other_boxes) == 0:
        return matched, other_matched
    overlaps = iou(boxes, other_boxes)
    for index in range(len(boxes)):
        candidates = (other_classes == classes[index]) & ~other_matched & (overlaps[index] >= threshold)
        if candidates.any():
            best = int(np.argmax(np.where(candidates, overlaps[index], -1)))
            matched[index], other_matched[best] = True, True
    return matched, other_matched
