"""Per condition, beside the verdicts: each condition's change and agreement with their intervals, the
calibration sample's share of it, int8_mixed's figures on the split it chose on, and -- for the
conditions an engine FAILed -- the ops that cost them most, as int8_mixed's search measured them."""

import re
from pathlib import Path
from typing import Any, Dict, List, Optional

from precisionflow import precisions, stats
from precisionflow.nodeio import NODE_FILE, named_lineage, read_json
from precisionflow.quant.mixed_record import DROP, JOINED, SearchRecord, Trial
from precisionflow.reporting import verdict_rules
from precisionflow.reporting.detection_checks import boxes_by_condition, map50_figures


def add_condition_context(entry, tags, plan, results: Path, key: str, metrics, confidence: float) -> None:
    """What a reader needs beside the per-condition verdicts: the calibration sample's share of each
    condition, int8_mixed's selection-split figures, a detector's mAP interval, and the ops that cost
    the failed conditions most (or how to find them)."""
    if tags:  # what the calibration sample held of each condition, to read beside its loss
        calibrate = next((node for name, node in named_lineage(results / key).items() if name.endswith("calibrate")), None)
        entry["calibration_coverage"] = (calibrate or {}).get("summary", {}).get("sample_per_condition")
    entry.update(mixed_validation(results / key))
    if entry.get("validation") and metrics.get("map_drop_resamples"):  # a detector's test figure, as its verdict reads it
        low, high = stats.percentile_interval(metrics["map_drop_resamples"], confidence)
        entry["map_drop"] = {"drop": entry["drop_points"], "low": low, "high": high}
    failed_conditions = [tag for tag in condition_breaches(entry["breaches"]) if tag in (entry.get("per_condition") or {})]
    if failed_conditions:  # which ops cost those images most, where a search measured it
        costly = costly_ops(plan, results, key)
        entry["costly_ops"] = {tag: costly[tag] for tag in failed_conditions if costly.get(tag)}
        unranked = [tag for tag in failed_conditions if tag not in entry["costly_ops"]]
        if unranked and precisions.calibrated_by(entry["precision"]) == "ptq":
            entry["costly_ops_hint"] = (
                f"no int8_mixed search ranked the ops for {', '.join(repr(tag) for tag in unranked)}: add int8_mixed to "
                f"precisions (with evaluate.budget.{'max_condition_spurious_per_image' if entry.get('task') == 'detection' else 'max_condition_drop'}) "
                "for the ops that cost it most and the fastest mix that holds it"
            )


def agreement_figures(same: int, images: int, confidence: float) -> Dict[str, float]:
    """The share of a condition's images where the engine predicts fp32's class, with its Wilson interval."""
    low, high = stats.wilson(same, images, confidence)
    return {"agreement": round(same / max(images, 1), 4), "agreement_low": round(low, 4), "agreement_high": round(high, 4)}


def condition_figures(
    pairs: Optional[Dict[str, Any]], eval_dir: Path, tags, confidence: float, metrics: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    """Per condition, for the table, the report and MLflow: the paired top-1 drop with its interval
    and the agreement with fp32 (classification) or spurious boxes per image with lost and shadow
    boxes and mAP@.5 (detection), and the worst condition."""
    if not tags:
        return {}
    if pairs:
        per_condition = {
            tag: {
                "drop": round(d.drop, 2),
                "low": round(d.low, 2),
                "high": round(d.high, 2),
                "images": d.n,
                "p_value": d.p_value,
                **agreement_figures(*pairs["agreement_per_condition"][tag], confidence),
            }
            for tag, d in pairs["per_condition"].items()
        }
        worst = verdict_rules.worst_group(pairs["per_condition"])
        return {"per_condition": per_condition, "worst_condition": worst, "condition_figure": "top-1 drop (points)"}
    counts = boxes_by_condition(eval_dir, tags)
    spurious, lost, shadow = counts["spurious"], counts["lost"], counts["shadow"]
    per_condition = {}
    for tag, values in spurious.items():
        # the verdict's interval (a bootstrap of all-zero counts is [0, 0]: 128 images with no box bound nothing)
        low, high = stats.count_interval(values, confidence) or (0.0, 0.0)
        per_condition[tag] = {
            "spurious_per_image": round(sum(values) / max(len(values), 1), 3),
            "low": round(low, 3),
            "high": round(high, 3),
            "images": len(values),
            # beside the judged figure: boxes fp32 found that the engine lost, and spurious boxes on a shadow
            "lost_per_image": round(sum(lost.get(tag, [])) / max(len(values), 1), 3),
            "shadow_per_image": round(sum(shadow.get(tag, [])) / max(len(values), 1), 3),
            **map50_figures(metrics or {}, tag, confidence),
        }
    # as the budget judges (the interval's upper end, then the estimate): verdict_rules.worst_group's rule
    worst = max(per_condition.items(), key=lambda item: (item[1]["high"], item[1]["spurious_per_image"]), default=None)
    return {
        "per_condition": per_condition,
        "worst_condition": (worst[0], worst[1]["spurious_per_image"]) if worst else None,
        "condition_figure": "spurious boxes per image",
    }


def trial_words(trial: Trial, unit: str) -> str:
    """A trial's overall figure as the console prints the chosen one: a top-1 change (the drop's
    sign turned), or spurious boxes per image."""
    if trial.figure == DROP:
        return f"{0.0 - trial.value:+.2f} [{0.0 - trial.high:+.2f}, {0.0 - trial.low:+.2f}] {unit}"
    return f"{trial.value:.3f} [{trial.low:.3f}, {trial.high:.3f}] {unit}"


NOT_HELD_BY_SEARCH = "the search held the top-1 drops only: min_agreement and max_class_drop are judged on test alone"


def mixed_validation(eval_dir: Path) -> Dict[str, Any]:
    """int8_mixed: what its search decided on (the selection split), overall and per budgeted
    condition, to print beside what the test split says."""
    search = named_lineage(eval_dir)["quantize_onnx"]["summary"].get("mixed_search")
    if not search or not ("drop_interval" in search or "interval" in search):
        return {}
    met = "met" if search["budget_met"] else "NOT met by its interval"
    if "drop_interval" in search:  # a classifier: top-1 points
        low, high = search["drop_interval"]
        chosen = (
            f"{0.0 - search['drop_points']:+.2f} [{0.0 - high:+.2f}, {0.0 - low:+.2f}], budget {search['max_drop_points']} {met}"
        )
    else:  # a detector: spurious boxes per image, overall budget possibly unset (per condition only)
        low, high = search["interval"]
        budget = search.get("max_spurious_per_image")
        chosen = f"{search['spurious_per_image']:.3f} [{low:.3f}, {high:.3f}] spurious boxes per image" + (
            f" (budget {budget})" if budget is not None else " (no overall budget)"
        )
        if search.get("map_drop"):
            drop = search["map_drop"]
            chosen += f", mAP {0.0 - drop['drop']:+.2f} [{0.0 - drop['high']:+.2f}, {0.0 - drop['low']:+.2f}] (budget {search['max_map_drop']})"
        chosen += f"; budgets {met}"
    record = SearchRecord.read(search)
    if record.built_joined and record.built is not None:  # the mix built is not the trial quoted above
        chosen += f"; built with {JOINED}: {trial_words(record.built, record.unit)}"
    return {
        "validation": f"chosen on {search['split']} ({search['images']} images): {chosen}",
        # what the verdict reads that the search did not try to hold (a classifier's search holds its top-1 drops)
        "validation_not_held": NOT_HELD_BY_SEARCH if "drop_interval" in search else "",
        "validation_conditions": {
            tag: {**figures, "limit": search["condition_limits"][tag], "split": search["split"]}
            for tag, figures in (search.get("conditions") or {}).items()
        },
        # a detector's mAP@.5 per condition, as the search held it
        "validation_map50": {
            tag: {**figures, "limit": search["map50_limits"][tag], "split": search["split"]}
            for tag, figures in (search.get("map50_drop_by_condition") or {}).items()
        },
        # a named condition the selection split has no image of: the search could not hold it (said, not dropped)
        "validation_unjudged": [
            f"{tag}: not held by the search, no {search['split']} image of it"
            for tag in search.get("conditions_not_in_split") or []
        ],
    }


CONDITION_CHECK = re.compile(r"condition '([^']+)'")  # verdict_rules' text for a condition's check


def condition_breaches(breaches: List[str]) -> List[str]:
    """The conditions named by the checks an engine FAILed, in order, once each."""
    return list(dict.fromkeys(match.group(1) for text in breaches for match in CONDITION_CHECK.finditer(text)))


def costly_ops(plan: Dict[str, Any], results: Path, key: str) -> Dict[str, List]:
    """{condition: [[op, top-1 drop with only that op in int8], ...]}: the ops that cost each
    condition most, from an int8_mixed search's sensitivity table -- the row's own (int8_mixed) or
    one over the same calibration and placement (an int8 row beside an int8_mixed one). {} when no
    search measured it."""
    graph = named_lineage(results / key)["quantize_onnx"]
    own = (graph["summary"].get("mixed_search") or {}).get("costliest")
    if own:
        return own
    calibration, placement = graph["inputs"].get("calibration"), (graph["params"].get("int8") or {}).get("placement")
    # any graph whose search measured it (its summary has a mixed_search: int8_mixed's today), not a
    # precision named here: a plug-in precision that searches is found the same way
    for other, spec in sorted(plan["nodes"].items()):
        if (
            spec["stage"] == "quantize_onnx"
            and calibration is not None
            and spec["inputs"].get("calibration") == calibration
            and (spec["params"].get("int8") or {}).get("placement") == placement
            and (results / other / NODE_FILE).is_file()
        ):
            found = ((read_json(results / other / NODE_FILE).get("summary") or {}).get("mixed_search") or {}).get("costliest")
            if found:
                return found
    return {}
