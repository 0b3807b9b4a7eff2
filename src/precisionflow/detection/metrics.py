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
    results = _coco_results(detections)
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


def _coco_results(detections: Sequence[Detections]) -> List[Dict[str, Any]]:
    return [
        {
            "image_id": image_id,
            "category_id": int(label) + 1,
            "score": float(score),
            "bbox": [float(box[0]), float(box[1]), float(box[2] - box[0]), float(box[3] - box[1])],
        }
        for image_id, found in enumerate(detections)
        for box, score, label in zip(found.boxes, found.scores, found.classes, strict=True)
    ]


# ---- a paired interval for the mAP change ------------------------------------------------------

MAX_DETECTIONS = 100  # COCOeval's last maxDets, the one its mAP reads


def match_table(
    truth: Sequence[Dict[str, np.ndarray]], detections: Sequence[Detections], class_names: List[str]
) -> Dict[str, np.ndarray]:
    """Every detection's matches at COCO's ten IoU thresholds, computed once by pycocotools'
    per-image evaluation (area "all", 100 detections per image), so a resample of images only has
    to re-weight and cumulate them -- never to re-run COCOeval. Flat arrays, one row per
    detection: its class, image, score, matched [T] and ignored [T]; and each (class, image)'s
    count of ground truths that are not ignored."""
    from pycocotools.cocoeval import COCOeval

    n_images, n_classes = len(truth), len(class_names)
    ground_truth = _coco_ground_truth(truth, class_names)
    results = _coco_results(detections)
    gt_count = np.zeros((n_classes, n_images), dtype=np.int64)
    rows = {"class": [], "image": [], "score": [], "matched": [], "ignored": []}
    if results:
        with contextlib.redirect_stdout(io.StringIO()):
            evaluation = COCOeval(ground_truth, ground_truth.loadRes(results), "bbox")
            evaluation.evaluate()
        per_area = n_images  # evalImgs: [category][area range][image], area "all" first
        for class_index in range(n_classes):
            for image in range(n_images):
                found = evaluation.evalImgs[class_index * len(evaluation.params.areaRng) * per_area + image]
                if found is None:
                    continue
                gt_count[class_index, image] = int(np.count_nonzero(np.asarray(found["gtIgnore"]) == 0))
                keep = slice(0, MAX_DETECTIONS)
                scores = np.asarray(found["dtScores"])[keep]
                rows["class"] += [class_index] * len(scores)
                rows["image"] += [image] * len(scores)
                rows["score"] += list(scores)
                rows["matched"] += list((np.asarray(found["dtMatches"])[:, keep] > 0).T)
                rows["ignored"] += list(np.asarray(found["dtIgnore"])[:, keep].astype(bool).T)
    else:
        for image, objects in enumerate(truth):
            for label in objects["classes"]:
                gt_count[int(label), image] += 1
    thresholds = 10
    return {
        "class": np.asarray(rows["class"], dtype=np.int64),
        "image": np.asarray(rows["image"], dtype=np.int64),
        "score": np.asarray(rows["score"], dtype=np.float64),
        "matched": np.asarray(rows["matched"], dtype=bool).reshape(-1, thresholds),
        "ignored": np.asarray(rows["ignored"], dtype=bool).reshape(-1, thresholds),
        "gt_count": gt_count,
    }


RECALL_POINTS = np.linspace(0.0, 1.0, 101)  # COCOeval's recThrs


def weighted_map(table: Dict[str, np.ndarray], weights: np.ndarray, thresholds=slice(None)) -> float:
    """COCOeval.accumulate's mAP (over `thresholds` of the ten IoU thresholds; slice(0, 1) is
    mAP@.5) for a sample in which image i counts weights[i] times: a bootstrap resample is a
    re-weighting of the same matches. With every weight 1 it is pycocotools' own figure."""
    return weighted_maps(table, np.asarray(weights, dtype=float)[None, :], thresholds)[0]


def weighted_maps(table: Dict[str, np.ndarray], weights: np.ndarray, thresholds=slice(None)) -> List[float]:
    """weighted_map for each row of `weights` (samples x images) at once: the cumulated matches of
    all samples in one array per class (the bootstrap's cost was Python's loop over samples), each
    sample's mean taken over the same values in the same order as one sample alone."""
    per_class = []  # (present [S], precision at the recall points [S, T, 101]) per class
    for class_index in range(table["gt_count"].shape[0]):
        positives = weights @ table["gt_count"][class_index].astype(float)
        order = table["order"][class_index]
        live = ~table["ignored"][order][:, thresholds].T
        matched = table["matched"][order][:, thresholds].T
        # Detections scored below every true positive only add false positives at the final recall:
        # their precision is below the last true positive's, so no recall point reads them (exact)
        hits = np.flatnonzero((matched & live).any(axis=0))
        kept = hits[-1] + 1 if len(hits) else 0
        order, live, matched = order[:kept], live[:, :kept], matched[:, :kept]
        weight = weights[:, None, table["image"][order]]  # [S, 1, D]: detections last, cumulated in memory order
        true_pos = np.cumsum((matched & live)[None] * weight, axis=2)
        false_pos = np.cumsum((~matched & live)[None] * weight, axis=2)
        per_class.append((positives > 0, _interpolated_precisions(true_pos, false_pos, positives)))
    maps = []
    for sample in range(weights.shape[0]):
        # no ground truth of a class in this sample: COCOeval leaves the class out (-1)
        values = [points[sample] for present, points in per_class if present[sample]]
        maps.append(float(np.mean(np.concatenate(values))) if values else 0.0)
    return maps


def _interpolated_precisions(true_pos: np.ndarray, false_pos: np.ndarray, positives: np.ndarray) -> np.ndarray:
    """Precision at COCO's 101 recall points, as accumulate() interpolates it (0 where unreached),
    for cumulated matches [samples, thresholds, detections]: [samples, thresholds, 101]."""
    samples, columns, detections = true_pos.shape
    found = np.zeros((samples, columns, len(RECALL_POINTS)))
    if not detections:
        return found
    recall = true_pos / np.where(positives > 0, positives, 1.0)[:, None, None]
    precision = true_pos / (true_pos + false_pos + np.spacing(1))
    precision = np.maximum.accumulate(precision[:, :, ::-1], axis=2)[:, :, ::-1]
    for sample in range(samples):
        for column in range(columns):
            index = np.searchsorted(recall[sample, column], RECALL_POINTS, side="left")
            reached = index < detections
            found[sample, column, reached] = precision[sample, column, index[reached]]
    return found


def with_order(table: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """The table with each class's detections sorted by score once (COCOeval sorts stably, by -score)."""
    classes = table["gt_count"].shape[0]
    order = [np.flatnonzero(table["class"] == k) for k in range(classes)]
    return {**table, "order": [rows[np.argsort(-table["score"][rows], kind="mergesort")] for rows in order]}


THRESHOLDS = {"map": slice(None), "map50": slice(0, 1)}  # of COCO's ten IoU thresholds
BLOCK_VALUES = 4_000_000  # samples x detections x thresholds weighed at once: ~32 MB per array


def paired_map_drops(
    reference: Dict[str, np.ndarray],
    engine: Dict[str, np.ndarray],
    images: Sequence[int],
    resamples: int = 1000,
    seed: int = 0,
    keys: Sequence[str] = ("map", "map50"),
) -> Dict[str, List[float]]:
    """The mAP and mAP@.5 drops (points, reference minus engine; `keys`: the ones wanted) over
    `resamples` bootstrap samples of `images`, the same images for both engines in each sample
    (paired): the verdict's interval comes from their quantiles. Each key's resamples are the same
    whichever others are asked for (the draws do not depend on `keys`)."""
    reference, engine = with_order(reference), with_order(engine)
    members = np.asarray(images, dtype=np.int64)
    n_images = reference["gt_count"].shape[1]
    rng = np.random.default_rng(seed)
    draws = [members[rng.integers(0, len(members), len(members))] for _ in range(resamples)]
    weights = np.asarray([np.bincount(draw, minlength=n_images) for draw in draws], dtype=float)
    drops: Dict[str, List[float]] = {key: [] for key in keys}
    step = max(1, BLOCK_VALUES // (10 * max(len(reference["score"]), len(engine["score"]), 1)))
    for start in range(0, resamples, step):
        block = weights[start : start + step]
        for key in keys:
            pairs = zip(
                weighted_maps(reference, block, THRESHOLDS[key]), weighted_maps(engine, block, THRESHOLDS[key]), strict=True
            )
            drops[key] += [round(100 * (before - after), 4) for before, after in pairs]
    return drops


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
