"""Detection accuracy of one engine: COCO mAP by pycocotools, and what changed against fp32.

* mAP@[.5:.95], mAP@.5 and per-class AP: pycocotools' COCOeval on the engine's detections.
* Against the fp32 reference's detections on the same images, above `score_threshold`:
  - spurious boxes: engine boxes that match neither a ground-truth box nor an fp32 box;
  - lost boxes: fp32 boxes that found a ground-truth object and that no engine box matches;
  - shadow boxes: spurious boxes lying on a shadow (shadow_cars: at least half of the box's pixels
    are shadow pixels; data sets with shadow boxes only: the box's centre inside a shadow box);
  - box agreement: the share of fp32 boxes an engine box matches (same class, IoU >= iou).
  Matching is one-to-one, same class, IoU >= `match_iou`, highest score first.
"""

import contextlib
import io
from typing import Any, Dict, List, Sequence

import numpy as np

from precisionflow.detection.boxes import Detections, match


def _coco_ground_truth(truth: Sequence[Dict[str, np.ndarray]], class_names: List[str]):
    from pycocotools.coco import COCO

    annotations = []
    for image_id, objects in enumerate(truth):
        for box, label in zip(objects["boxes"], objects["classes"], strict=True):
            x0, y0, x1, y1 = (float(v) for v in box)
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": int(label) + 1,
                    "bbox": [x0, y0, x1 - x0, y1 - y0],
                    "area": (x1 - x0) * (y1 - y0),
                    "iscrowd": 0,
                }
            )
    coco = COCO()
    coco.dataset = {
        "images": [{"id": i} for i in range(len(truth))],
        "annotations": annotations,
        "categories": [{"id": i + 1, "name": name} for i, name in enumerate(class_names)],
    }
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    return coco


def coco_map(truth: Sequence[Dict[str, np.ndarray]], detections: Sequence[Detections], class_names: List[str]) -> Dict[str, Any]:
    """{"map", "map50", "per_class_ap"} by pycocotools (AP -1 = a class with no ground truth)."""
    from pycocotools.cocoeval import COCOeval

    ground_truth = _coco_ground_truth(truth, class_names)
    results = [
        {
            "image_id": image_id,
            "category_id": int(label) + 1,
            "score": float(score),
            "bbox": [float(box[0]), float(box[1]), float(box[2] - box[0]), float(box[3] - box[1])],
        }
        for image_id, found in enumerate(detections)
        for box, score, label in zip(found.boxes, found.scores, found.classes, strict=True)
    ]
    if not results:  # pycocotools cannot load an empty result list: nothing detected is AP 0
        return {"map": 0.0, "map50": 0.0, "per_class_ap": {name: 0.0 for name in class_names}}
    with contextlib.redirect_stdout(io.StringIO()):
        evaluation = COCOeval(ground_truth, ground_truth.loadRes(results), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    precision = evaluation.eval["precision"]  # [IoU thresholds, recall points, classes, areas, max dets]
    per_class = {}
    for index, name in enumerate(class_names):
        values = precision[:, :, index, 0, -1]
        per_class[name] = float(np.mean(values[values > -1])) if np.any(values > -1) else -1.0
    return {"map": float(evaluation.stats[0]), "map50": float(evaluation.stats[1]), "per_class_ap": per_class}


SHADOW_SHARE = 0.5


def _on_shadow_pixels(boxes: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Boxes at least SHADOW_SHARE covered by shadow pixels (pixel centres inside the box)."""
    height, width = mask.shape
    found = np.zeros(len(boxes), bool)
    for index, (x0, y0, x1, y1) in enumerate(boxes):
        left, top = int(np.clip(np.ceil(x0 - 0.5), 0, width)), int(np.clip(np.ceil(y0 - 0.5), 0, height))
        right, bottom = int(np.clip(np.ceil(x1 - 0.5), 0, width)), int(np.clip(np.ceil(y1 - 0.5), 0, height))
        region = mask[top:bottom, left:right]
        found[index] = region.size > 0 and region.mean() >= SHADOW_SHARE
    return found


def _centre_inside(boxes: np.ndarray, regions: np.ndarray) -> np.ndarray:
    if len(boxes) == 0 or len(regions) == 0:
        return np.zeros(len(boxes), bool)
    cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
    return np.any(
        (cx[:, None] >= regions[None, :, 0])
        & (cx[:, None] < regions[None, :, 2])
        & (cy[:, None] >= regions[None, :, 1])
        & (cy[:, None] < regions[None, :, 3]),
        axis=1,
    )


def image_changes(engine: Detections, reference: Detections, objects: Dict[str, np.ndarray], match_iou: float) -> Dict[str, int]:
    """Spurious, lost and shadow boxes of one image, and how many fp32 boxes the engine matched."""
    truth_boxes, truth_classes = objects["boxes"], objects["classes"]
    engine_on_truth, _ = match(engine.boxes, engine.classes, truth_boxes, truth_classes, match_iou)
    engine_on_reference, reference_matched = match(engine.boxes, engine.classes, reference.boxes, reference.classes, match_iou)
    reference_on_truth, _ = match(reference.boxes, reference.classes, truth_boxes, truth_classes, match_iou)
    spurious = ~engine_on_truth & ~engine_on_reference
    if "shadow_mask" in objects:
        shadows = _on_shadow_pixels(engine.boxes[spurious], objects["shadow_mask"])
    else:
        shadows = _centre_inside(engine.boxes[spurious], objects.get("shadows", np.zeros((0, 4))))
    return {
        "spurious": int(spurious.sum()),
        "lost": int((reference_on_truth & ~reference_matched).sum()),
        "shadow": int(shadows.sum()),
        "reference_boxes": len(reference),
        "matched_reference": int(reference_matched.sum()),
        "engine_boxes": len(engine),
    }


def changes(
    engine: Sequence[Detections],
    reference: Sequence[Detections],
    truth: Sequence[Dict[str, np.ndarray]],
    score_threshold: float,
    match_iou: float,
) -> List[Dict[str, int]]:
    """Per image, above the score threshold: image_changes()."""
    return [
        image_changes(e.above(score_threshold), r.above(score_threshold), t, match_iou)
        for e, r, t in zip(engine, reference, truth, strict=True)
    ]


def summary(rows: List[Dict[str, int]]) -> Dict[str, float]:
    images = max(len(rows), 1)
    total = {key: sum(row[key] for row in rows) for key in ("spurious", "lost", "shadow", "reference_boxes", "matched_reference")}
    return {
        "spurious_per_100": round(100 * total["spurious"] / images, 2),
        "lost_per_100": round(100 * total["lost"] / images, 2),
        "shadow_per_100": round(100 * total["shadow"] / images, 2),
        "spurious_per_image": total["spurious"] / images,
        "box_agreement": round(total["matched_reference"] / total["reference_boxes"], 4) if total["reference_boxes"] else 1.0,
        "spurious": total["spurious"],
        "lost": total["lost"],
        "shadow": total["shadow"],
    }
