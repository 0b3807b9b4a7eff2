"""A detector's checks against its budget: the mAP drop, spurious and lost boxes per image overall and
per condition (each condition's images scored alone), with the counts their intervals stand on."""

from pathlib import Path
from typing import Any, Dict, List

from precisionflow import stats
from precisionflow.datasets import conditions
from precisionflow.reporting import verdict_rules
from precisionflow.reporting.verdict_rules import judged


def detection_checks(metrics: Dict[str, Any], fp32: Dict[str, Any], budget: Dict[str, Any]) -> List[Dict[str, str]]:
    found = []
    drop = 100 * (fp32["map"] - metrics["map"])
    if budget["max_map_drop"] is not None:
        subject = f"mAP {100 * metrics['map']:.2f} (fp32 {100 * fp32['map']:.2f}):"
        found.append(
            verdict_rules.map_drop_check(
                drop, metrics.get("map_drop_resamples") or [], budget["max_map_drop"], budget["confidence"], subject
            )
        )
    if budget["max_spurious_per_image"] is not None:
        subject = (
            f"spurious boxes per image (matching neither a true object nor an fp32 box; {metrics['shadow']} of "
            f"{metrics['spurious']} on shadows)"
        )
        found.append(
            verdict_rules.mean_check(
                metrics.get("spurious_by_image") or [],
                metrics["spurious_per_image"],
                budget["max_spurious_per_image"],
                budget["confidence"],
                subject,
            )
        )
    found += detection_condition_checks(metrics, budget)
    return found


def detection_condition_checks(metrics: Dict[str, Any], budget: Dict[str, Any]) -> List[Dict[str, str]]:
    """Spurious boxes per image on each condition's images (metrics["spurious_by_condition"]), and
    the mAP@.5 drop on each condition's images alone (max_condition_drop: the task's accuracy)."""
    by_condition = metrics.get("spurious_by_condition") or {}
    found = []
    scored = metrics.get("map50_by_condition") or {}
    if budget.get("max_condition_drop") is not None and not scored:
        found.append(
            judged(
                stats.UNDECIDED,
                f"max_condition_drop {budget['max_condition_drop']} set, but this evaluation has no per-condition "
                "mAP@.5 (the data set names no conditions): nothing to judge it on",
            )
        )
    if budget.get("max_condition_drop") is not None and scored:
        groups = {
            tag: (100 * (figures["reference_map50"] - figures["map50"]), figures.get("drop_resamples") or [])
            for tag, figures in scored.items()
        }
        found += verdict_rules.group_resampled_checks(
            groups, budget["max_condition_drop"], budget["confidence"], "mAP@.5", "conditions"
        )
    if budget.get("max_condition_spurious_per_image") is not None and by_condition:
        found += verdict_rules.group_mean_checks(
            by_condition,
            budget["max_condition_spurious_per_image"],
            budget["confidence"],
            "spurious boxes per image",
            "conditions",
        )
    for tag, limit in (budget.get("condition_limits") or {}).items():
        if tag in by_condition:
            values = by_condition[tag]
            found.append(
                verdict_rules.mean_check(
                    values, sum(values) / max(len(values), 1), limit, budget["confidence"], f"spurious boxes per image on '{tag}'"
                )
            )
    return found


BOX_COUNTS = ("spurious", "lost", "shadow")  # box_changes.csv's per-image counts


def boxes_by_condition(eval_dir: Path, tags: List[List[str]]) -> Dict[str, Dict[str, List[float]]]:
    """{count: {tag: that count for each test image carrying the tag}} for the spurious, lost and
    shadow boxes of a detection evaluation's box_changes.csv (read once)."""
    import csv

    path = eval_dir / "box_changes.csv"
    if not path.is_file():
        return {count: {} for count in BOX_COUNTS}
    with open(path, newline="") as handle:
        rows = {int(row["test_index"]): row for row in csv.DictReader(handle)}
    groups = conditions.groups(tags).items()
    return {
        count: {tag: [float(rows[int(i)][count]) if int(i) in rows else 0.0 for i in members] for tag, members in groups}
        for count in BOX_COUNTS
    }


def spurious_by_condition(eval_dir: Path, tags: List[List[str]]) -> Dict[str, List[float]]:
    """{tag: spurious boxes of each test image carrying it}: what per-condition spurious budgets judge."""
    return boxes_by_condition(eval_dir, tags)["spurious"]


def map50_figures(metrics: Dict[str, Any], tag: str, confidence: float) -> Dict[str, float]:
    """Detection: mAP@.5 of the engine and of fp32 on one condition's images (pycocotools on that
    subset, computed by the evaluation), and the change's paired bootstrap interval in points
    (fp32 minus the engine) where the evaluation resampled it."""
    found = (metrics.get("map50_by_condition") or {}).get(tag)
    if not found:
        return {}
    figures = {"map50": found["map50"], "map50_fp32": found["reference_map50"]}
    if found.get("drop_resamples"):
        low, high = stats.percentile_interval(found["drop_resamples"], confidence)
        figures.update({"map50_drop_low": round(low, 2), "map50_drop_high": round(high, 2)})
    return figures
