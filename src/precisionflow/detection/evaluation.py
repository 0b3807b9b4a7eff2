"""evaluate_engine for task=detection: the engine's raw outputs on the test split, decoded in numpy
exactly as the fp32 reference's are, scored with pycocotools and compared box by box.

Writes box_changes.csv (per test image: spurious, lost, shadow boxes) and worst_boxes.json (the
images with the most spurious + lost boxes, with the engine's, fp32's and the true boxes) for the
report's picture grid. numpy + pycocotools only: runs on a GPU machine without TensorFlow.
"""

import csv
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

from precisionflow.datasets import conditions
from precisionflow.datasets.store import Split
from precisionflow.detection import boxes, metrics
from precisionflow.detection.data import load_objects
from precisionflow.nodeio import write_json_atomic

WORST_IMAGES = 12
WORST_PER_CONDITION = 8


def _listed(found: boxes.Detections) -> Dict[str, list]:
    return {
        "boxes": np.round(found.boxes, 2).tolist(),
        "classes": found.classes.tolist(),
        "scores": np.round(found.scores, 4).tolist(),
    }


def write_changes(out: Path, rows: List[Dict[str, int]], engine, reference, truth, threshold: float, tags=None) -> None:
    """box_changes.csv, the worst images overall (worst_boxes.json) and, where the data set tags
    its images, the worst of each condition's (worst_boxes_by_condition.json: the report's gallery
    per condition)."""
    with open(out / "box_changes.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["test_index"] + list(rows[0]) if rows else ["test_index"])
        writer.writeheader()
        writer.writerows({"test_index": index, **row} for index, row in enumerate(rows))

    def worst_of(indices, limit: int) -> List[Dict[str, Any]]:
        ranked = sorted(indices, key=lambda i: (-(rows[i]["spurious"] + rows[i]["lost"]), i))
        return [
            {
                "test_index": int(i),
                **rows[i],
                "engine": _listed(engine[i].above(threshold)),
                "reference": _listed(reference[i].above(threshold)),
                "truth": {"boxes": truth[i]["boxes"].tolist(), "classes": truth[i]["classes"].tolist()},
            }
            for i in ranked[:limit]
            if rows[i]["spurious"] + rows[i]["lost"] > 0
        ]

    write_json_atomic(out / "worst_boxes.json", worst_of(range(len(rows)), WORST_IMAGES))
    if tags:
        by_condition = {tag: worst_of(members.tolist(), WORST_PER_CONDITION) for tag, members in conditions.groups(tags).items()}
        write_json_atomic(out / "worst_boxes_by_condition.json", {tag: found for tag, found in by_condition.items() if found})


def qat_fidelity(
    outputs: np.ndarray, engine: List[boxes.Detections], inputs: Dict[str, Path], truth, classes: int, settings: Dict[str, Any]
) -> Dict[str, Any]:
    """int8_qat: box agreement with the QAT model in TensorFlow (fake-quant on) and with the
    fine-tuned model's float export -- the detection form of classification's qat fidelity."""
    found = {}
    for name, path in (
        ("vs_qat_model", inputs["qat_model"] / "qat_logits.npy"),
        ("vs_qat_float", inputs["qat_export"] / "reference_logits.npy"),
    ):
        other_outputs = np.load(path, allow_pickle=False)
        other = boxes.decode(other_outputs, classes, settings)
        rows = metrics.changes(engine, other, truth, settings["score_threshold"], settings["match_iou"])
        found[name] = {
            "agreement": metrics.summary(rows)["box_agreement"],
            "max_abs_logit_diff": float(np.max(np.abs(outputs - other_outputs))),
        }
    return found


MAP_RESAMPLES = 1000  # bootstrap samples of the paired mAP change (its verdict's interval)


def report(
    outputs: np.ndarray, reference_outputs: np.ndarray, test: Split, settings: Dict[str, Any], out: Path, inputs: Dict[str, Path]
) -> Dict[str, Any]:
    classes = test.classes
    truth = load_objects(test.data_dir, "test", len(test))
    engine, reference = boxes.decode(outputs, len(classes), settings), boxes.decode(reference_outputs, len(classes), settings)
    scored, reference_scored = metrics.coco_map(truth, engine, classes), metrics.coco_map(truth, reference, classes)
    rows = metrics.changes(engine, reference, truth, settings["score_threshold"], settings["match_iou"])
    tags = conditions.load(test.data_dir, "test")
    write_changes(out, rows, engine, reference, truth, settings["score_threshold"], tags)
    found = {
        "task": "detection",
        "test_images": len(test),
        "map": scored["map"],
        "map50": scored["map50"],
        "per_class_ap": scored["per_class_ap"],
        "reference_map": reference_scored["map"],
        "reference_map50": reference_scored["map50"],
        **metrics.summary(rows),
        "spurious_by_image": [row["spurious"] for row in rows],  # per image: the verdict's bootstrap resamples it
        "max_abs_logit_diff": float(np.max(np.abs(outputs - reference_outputs))),
        "non_finite_outputs": int(np.sum(~np.isfinite(outputs))),
        "score_threshold": settings["score_threshold"],
        "match_iou": settings["match_iou"],
    }
    tables = metrics.match_table(truth, reference, classes), metrics.match_table(truth, engine, classes)
    drops = metrics.paired_map_drops(*tables, range(len(truth)), MAP_RESAMPLES)
    found["map_drop_resamples"], found["map50_drop_resamples"] = drops["map"], drops["map50"]
    by_condition = map50_by_condition(truth, engine, reference, classes, tags)
    for tag, members in conditions.groups(tags).items():  # each condition's mAP@.5 change, resampled within it
        by_condition[tag]["drop_resamples"] = metrics.paired_map_drops(*tables, members, MAP_RESAMPLES, keys=("map50",))["map50"]
    if by_condition:
        found["map50_by_condition"] = by_condition
    if "qat_model" in inputs:
        found["qat"] = qat_fidelity(outputs, engine, inputs, truth, len(classes), settings)
    return found


def map50_by_condition(truth, engine, reference, classes, tags) -> Dict[str, Dict[str, float]]:
    """{tag: {"map50", "reference_map50", "images"}}: pycocotools on each condition's images alone,
    the engine's and fp32's boxes scored on the same images."""
    found = {}
    for tag, members in conditions.groups(tags).items():
        images = [truth[i] for i in members]
        found[tag] = {
            "map50": round(metrics.coco_map(images, [engine[i] for i in members], classes)["map50"], 4),
            "reference_map50": round(metrics.coco_map(images, [reference[i] for i in members], classes)["map50"], 4),
            "images": len(members),
        }
    return found
