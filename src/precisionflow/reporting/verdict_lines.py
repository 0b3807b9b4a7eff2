"""The verdicts as a reader sees them: one line per engine (its accuracy change and speed with their
intervals, the budget each figure was judged against, the ops int8_mixed kept in float and what they
cost), the headline over all engines, and each condition side by side."""

from typing import Any, Dict, List, Optional

from precisionflow.reporting import verdict_rules
from precisionflow.reporting.compare import task_of


def headline(metrics: Dict[str, Any], fp32: Dict[str, Any]) -> Dict[str, Any]:
    """The accuracy a verdict line shows: top-1 (classification) or mAP (detection), its change
    against fp32 in points, and agreement with fp32 (per sample, or per fp32 box)."""
    if task_of(metrics) == "detection":
        return {
            "task": "detection",
            "accuracy_name": "mAP",
            "accuracy": metrics["map"],
            "drop_points": round(100 * (fp32["map"] - metrics["map"]), 2),
            "agreement": metrics["box_agreement"],
            "extra": f"spurious {metrics['spurious_per_100']}/100 images ({metrics['shadow_per_100']} on shadows), "
            f"lost {metrics['lost_per_100']}/100",
        }
    return {
        "task": "classification",
        "accuracy_name": "top-1",
        "accuracy": metrics["top1"],
        "drop_points": round(100 * (fp32["top1"] - metrics["top1"]), 2),
        "agreement": metrics["agreement"],
        "extra": "",
    }


def interval_text(drop: Optional[Dict[str, Any]]) -> str:
    return f" [{0.0 - drop['high']:+.2f}, {0.0 - drop['low']:+.2f}]" if drop else ""


def speed_text(entry: Dict[str, Any]) -> str:
    """The speed part of a verdict line: the side-by-side ratio with its interval, or why there is none."""
    if not entry.get("timed", True):
        return ", not timed (a simulation)"
    speed = entry.get("speed")
    kernels = ", ran fp32's kernels (no speed-up of its own)" if entry.get("ran_reference_kernels") else ""
    if not speed:
        return kernels
    return f"{kernels}, {ratio_text(speed)} fp32's throughput at {entry['speedup_at']}{slower_text(speed)}"


def ratio_text(speed: Dict[str, Any]) -> str:
    """'1.62x [1.54, 1.65]', or '1.62x (no interval: 1 round)' -- never a bare point as if certain."""
    if speed.get("low") is None or speed.get("high") is None:
        return f"{speed['geomean']}x (no interval: {speed.get('rounds', 0)} round(s))"
    return f"{speed['geomean']}x [{speed['low']}, {speed['high']}]"


def slower_text(speed: Dict[str, Any]) -> str:
    """A row far slower than fp32 says so: ' -- SLOWER than fp32' when its whole interval is below 1."""
    high = speed.get("high")
    return f" -- SLOWER than fp32 ({speed['geomean']}x)" if high is not None and high < 1.0 else ""


def format_verdicts(found: List[Dict[str, Any]]) -> str:
    """One verdict per engine with what a reader needs beneath it; where the verdicts are of several
    models (a sweep over training), grouped under each model, in the order the models first appear."""
    models = list(dict.fromkeys(entry["model"] for entry in found))
    lines = []
    for model in models:
        lines += [f"model {model}:"] if len(models) > 1 else []
        lines += [line for entry in found if entry["model"] == model for line in entry_lines(entry)]
    return "\n".join(lines)


def entry_lines(entry: Dict[str, Any]) -> List[str]:
    """One engine's verdict line, then its notes, indented."""
    lines = []
    speed = speed_text(entry)
    against = "vs its fp32 twin" if entry.get("vs_base_fp32") else "vs fp32"
    named = entry["precision"] + (f" [{entry['variant']}]" if entry.get("variant") else "")
    head = (
        f"{entry['verdict']:<9} {named:<10} {entry['target']:<6} (ran {entry['ran']}) "
        f"{entry['accuracy_name']} {100 * entry['accuracy']:.2f} ({0.0 - entry['drop_points']:+.2f}"
        f"{interval_text(entry['drop'])} {against}), agreement with {'base ' if entry.get('vs_base_fp32') else ''}fp32 "
        f"{entry['agreement']:.4f}" + (f", {entry['extra']}" if entry["extra"] else "") + speed
    )
    lines.append(head + f"  [{entry['node']}, from {entry['model']}]")
    base = entry.get("vs_base_fp32")
    if base:
        lines.append(
            f"      vs base fp32: {0.0 - base['drop_points']:+.2f}{interval_text(base['drop'])} points "
            "(the fine-tune's extra training, not precision: the budget reads the twin)"
        )
    if entry.get("worst_condition"):
        lines.append("      " + worst_condition_text(entry))
    for check in entry.get("checks", []):  # a budget that cannot judge this row is named, not dropped
        if check["verdict"] == verdict_rules.NOT_APPLIED:
            lines.append("      " + check["text"])
    if entry.get("validation"):
        tested = (
            f"mAP {0.0 - entry['drop_points']:+.2f}{interval_text(entry['map_drop'])}"
            if entry.get("map_drop")
            else (f"{0.0 - entry['drop_points']:+.2f}{interval_text(entry['drop'])}")
        )
        lines.append(f"      int8_mixed {entry['validation']}; test: {tested}")
        if entry.get("validation_not_held"):
            lines.append(f"      ({entry['validation_not_held']})")
    lines += ["      " + text for text in condition_side_by_side(entry)]
    if entry.get("costly_ops_hint"):
        lines.append("      " + entry["costly_ops_hint"])
    for tag, ops in (entry.get("costly_ops") or {}).items():
        lines.append(
            f"      ops that cost '{tag}' most, each alone in int8 on the selection split (int8_mixed's sensitivity.csv): "
            + costly_text(entry, ops)
        )
    lines += [f"      broke: {reason}" for reason in entry["breaches"]]
    lines += [f"      cannot tell: {reason}" for reason in entry["undecided"]]
    return lines


def condition_side_by_side(entry: Dict[str, Any]) -> List[str]:
    """int8_mixed: each budgeted condition as the search held it (selection split) beside the test split's figure."""
    lines = list(entry.get("validation_unjudged") or [])
    for tag, chosen in (entry.get("validation_conditions") or {}).items():
        test = (entry.get("per_condition") or {}).get(tag) or {}
        tested = f"test {figure_text(test)} on {test['images']} images" if test.get("images") else "test: no images of it"
        lines.append(
            f"{tag}: chosen on {chosen['split']} {figure_text(chosen)} on {chosen['images']} images (limit {chosen['limit']}); {tested}"
        )
    for tag, chosen in (entry.get("validation_map50") or {}).items():  # a detector's mAP@.5, condition by condition
        test = (entry.get("per_condition") or {}).get(tag) or {}
        tested = (
            f"test {100 * (test['map50'] - test['map50_fp32']):+.2f} [{0.0 - test['map50_drop_high']:+.2f}, "
            f"{0.0 - test['map50_drop_low']:+.2f}] on {test['images']} images"
            if "map50_drop_high" in test
            else "test: no images of it"
        )
        lines.append(
            f"{tag} mAP@.5: chosen on {chosen['split']} {0.0 - chosen['drop']:+.2f} [{0.0 - chosen['high']:+.2f}, "
            f"{0.0 - chosen['low']:+.2f}] on {chosen['images']} images (limit {chosen['limit']}); {tested}"
        )
    return lines


def figure_text(figures: Dict[str, Any]) -> str:
    """A condition's figure with its interval: a top-1 change in points, or spurious boxes per image."""
    if "drop" in figures:
        return f"{0.0 - figures['drop']:+.2f} [{0.0 - figures['high']:+.2f}, {0.0 - figures['low']:+.2f}]"
    return f"{figures['spurious_per_image']:.3f} [{figures['low']:.3f}, {figures['high']:.3f}] spurious boxes per image"


def costly_text(entry: Dict[str, Any], ops: List) -> str:
    """'conv3 -4.17, conv1 -2.08 points' (each op alone in int8: the top-1 change) or, for a
    detector, 'conv3 0.250, ... spurious boxes per image'."""
    if entry.get("task") == "detection":
        return ", ".join(f"{op} {value:.3f}" for op, value in ops) + " spurious boxes per image"
    return ", ".join(f"{op} {0.0 - value:+.2f}" for op, value in ops) + " points"


def worst_condition_text(entry: Dict[str, Any]) -> str:
    """'worst condition: shadow_long -4.20 [-9.1, -0.3] points on 48 images (calibration held 0)'."""
    tag, _ = entry["worst_condition"]
    figures = entry["per_condition"][tag]
    held = (entry.get("calibration_coverage") or {}).get(tag)
    coverage = f" (calibration held {held})" if held is not None else ""
    if "drop" in figures:
        return (
            f"worst condition: {tag} {0.0 - figures['drop']:+.2f} [{0.0 - figures['high']:+.2f}, {0.0 - figures['low']:+.2f}] "
            f"points on {figures['images']} images{coverage}"
        )
    return (
        f"worst condition: {tag} {figures['spurious_per_image']:.3f} spurious boxes per image "
        f"[{figures['low']:.3f}, {figures['high']:.3f}] on {figures['images']} images{coverage}"
    )
