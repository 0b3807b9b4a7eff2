"""How a trial graph is judged against the float graph on the selection split: the task's decision
metric per subset of images (every image, then each condition's), each with its interval.

  TopOne    classification: the paired top-1 drop in points (stats.paired_drop: Newcombe's interval)
  Spurious  detection: boxes matching neither a true object nor an fp32 box, per image
            (detection/metrics.changes, decoded as evaluate_engine decodes; stats.count_interval)

Both answer with a Figure per subset, and a budget is held when the figure's upper end is within it.
The mix search (mixed.py) and the sensitivity table (sensitivity.py) read Figures only, so neither
assumes a task: a detector's search keeps in float the ops that put spurious boxes on the shadows.
"""

from dataclasses import dataclass, field
from typing import Dict, Sequence

import numpy as np

from precisionflow import stats


@dataclass(frozen=True)
class Figure:
    """One subset's cost of a trial against the float graph."""

    value: float  # top-1 points lost, or spurious boxes per image
    low: float
    high: float
    n: int  # images
    smallest_passable: float  # the smallest budget n images can ever pass (nothing changed on any image)
    per_image_step: float  # what one image changes the value by (one image flipped, one box more)
    counts: Dict[str, int] = field(default_factory=dict)  # lost/gained images, or spurious boxes in all


def predicted(outputs: np.ndarray) -> np.ndarray:
    """Classes from logits, or classes already (a search's cached predictions)."""
    return outputs.argmax(1) if outputs.ndim > 1 else outputs


class TopOne:
    """Classification: the top-1 drop against the float graph, paired on the same images."""

    metric = "top1_drop_points"  # the sensitivity table's column
    key = "drop"  # a trial's record
    unit = "points"
    overall_budget = None  # the overall budget is int8.mixed_max_val_drop, the search's own setting
    condition_budget = "max_condition_drop"
    map_budget = condition_map_budget = None  # a classifier has no mAP

    def __init__(self, reference: np.ndarray, labels: np.ndarray, confidence: float):
        self.labels, self.confidence = labels, confidence
        self.reference_right = predicted(reference) == labels

    def figures(self, outputs: np.ndarray, where: Dict[str, np.ndarray]) -> Dict[str, Figure]:
        right = predicted(outputs) == self.labels
        found = {}
        for name, idx in where.items():
            drop = stats.paired_drop(self.reference_right[idx], right[idx], self.confidence)
            finest = stats.zero_flip_resolution(drop.n, self.confidence)
            counts = {"lost": drop.b, "gained": drop.c}
            found[name] = Figure(drop.drop, drop.low, drop.high, drop.n, finest, drop.per_image_step, counts)
        return found

    def reference_record(self) -> Dict[str, float]:
        return {"fp32_top1": float(np.mean(self.reference_right))}


MAP = "mAP"  # a detector's mAP@[.5:.95] drop over every image: judged beside the subsets, not one of them
MAP50_OF = " mAP@.5"  # "<condition> mAP@.5": that condition's mAP@.5 drop, its images scored alone
MAP_RESAMPLES = 1000  # as the verdict's (reporting/verdict_rules.MIN_RESAMPLES): the same evidence


def map50_key(tag: str) -> str:
    return tag + MAP50_OF


def map50_tag(name: str):
    """The condition a '<condition> mAP@.5' name judges, or None for any other name."""
    return name[: -len(MAP50_OF)] if name.endswith(MAP50_OF) else None


class Spurious:
    """Detection: spurious boxes per image -- above the score threshold, matching neither a true
    object nor one of the float graph's boxes -- the figure the shadow story's budgets read; and,
    asked for MAP, the mAP drop against the float graph over all images, as the verdict bootstraps it."""

    metric = "spurious_per_image"
    key = "spurious_per_image"
    unit = "spurious boxes per image"
    overall_budget = "max_spurious_per_image"  # the budgets the detector's rows are judged by
    condition_budget = "max_condition_spurious_per_image"
    map_budget = "max_map_drop"
    condition_map_budget = "max_condition_drop"  # the task's accuracy per condition: mAP@.5

    def __init__(self, reference: np.ndarray, truth: Sequence[dict], classes: Sequence[str], settings: Dict, confidence: float):
        from precisionflow.detection import boxes

        self.truth, self.classes, self.settings, self.confidence = truth, list(classes), settings, confidence
        self.reference = boxes.decode(reference, len(self.classes), settings)
        self._reference_table = None

    def per_image(self, engine) -> np.ndarray:
        from precisionflow.detection import metrics

        rows = metrics.changes(engine, self.reference, self.truth, self.settings["score_threshold"], self.settings["match_iou"])
        return np.asarray([row["spurious"] for row in rows], dtype=float)

    def map_drop(self, table, members: np.ndarray, key: str) -> Figure:
        """mAP (key "map", mAP@[.5:.95]) or mAP@.5 ("map50") points below the float graph on the
        `members` images, its interval from MAP_RESAMPLES paired bootstrap resamples of them
        (detection/metrics.paired_map_drops, as evaluate_engine's)."""
        from precisionflow.detection import metrics

        if self._reference_table is None:
            self._reference_table = metrics.with_order(metrics.match_table(self.truth, self.reference, self.classes))
        drops = metrics.paired_map_drops(self._reference_table, table, members, MAP_RESAMPLES, keys=(key,))[key]
        weights = np.bincount(np.asarray(members, dtype=np.int64), minlength=len(self.truth)).astype(float)
        thresholds = slice(None) if key == "map" else slice(0, 1)
        reference = metrics.weighted_map(self._reference_table, weights, thresholds)
        value = 100 * (reference - metrics.weighted_map(metrics.with_order(table), weights, thresholds))
        low, high = stats.percentile_interval(drops, self.confidence)
        return Figure(value, low, high, len(members), float("nan"), float("nan"))  # a bootstrap has no closed resolution

    def figures(self, outputs: np.ndarray, where: Dict[str, np.ndarray]) -> Dict[str, Figure]:
        from precisionflow.detection import boxes, metrics

        engine = boxes.decode(outputs, len(self.classes), self.settings)
        spurious = self.per_image(engine)
        scored = [name for name in where if name == MAP or map50_tag(name)]
        table = metrics.match_table(self.truth, engine, self.classes) if scored else None
        found = {name: self.map_drop(table, where[name], "map" if name == MAP else "map50") for name in scored}
        for name, idx in where.items():
            if name in found:
                continue
            counts = spurious[idx]
            low, high = stats.count_interval(counts, self.confidence) or (0.0, float("inf"))
            finest = (stats.count_interval(np.zeros(len(idx)), self.confidence) or (0.0, float("inf")))[1]
            value = float(counts.mean()) if len(idx) else 0.0
            one_box = 1.0 / len(idx) if len(idx) else float("inf")
            found[name] = Figure(value, low, high, len(idx), finest, one_box, {"spurious": int(counts.sum())})
        return found

    def reference_record(self) -> Dict[str, float]:
        return {}  # fp32's own spurious boxes are none by definition (a box fp32 makes is not spurious)
