"""Release budgets: each engine's verdict against the fp32 engine of its model and target.

Budgets are thresholds, so they stay out of node ids: the plan carries them beside the nodes
(plan["budgets"]), and `precisionflow check` re-reads finished results with whatever budgets the
configuration names now -- it runs nothing. A verdict names the number that broke it.
"""

from dataclasses import fields
from pathlib import Path
from typing import Any, Dict, List, Optional

from precisionflow.compare import task_of
from precisionflow.config.schema import BudgetConf
from precisionflow.nodeio import NODE_FILE, named_lineage, read_json

BUDGET_KEYS = tuple(field.name for field in fields(BudgetConf))


def baseline_key(node: Dict[str, Any], target: str) -> tuple:
    """What an evaluation is judged against: the fp32 evaluation of the same reference export and target."""
    return node["inputs"]["reference"], target


def budget_for(evaluate: Dict[str, Any], precision: str) -> Dict[str, Any]:
    """evaluate.budget with evaluate.budgets.<precision>'s set keys on top."""
    merged = {key: evaluate.get("budget", {}).get(key) for key in BUDGET_KEYS}
    merged.update(evaluate.get("budgets", {}).get(precision, {}))
    merged["speedup_at"] = merged["speedup_at"] or "bmax"
    return merged


def check_config(evaluate: Dict[str, Any]) -> None:
    """Budget keys and settings a user can get wrong, refused before anything runs."""
    from precisionflow.errors import ConfigError

    for precision, entry in evaluate.get("budgets", {}).items():
        unknown = sorted(set(entry) - set(BUDGET_KEYS))
        if unknown:
            raise ConfigError(f"evaluate.budgets.{precision}: unknown key(s) {unknown}; expected some of {list(BUDGET_KEYS)}.")
    for precision in ["(all)"] + list(evaluate.get("budgets", {})):
        at = budget_for(evaluate, precision)["speedup_at"]
        if at not in ("b1", "bmax", "streams"):
            raise ConfigError(f"evaluate.budget(s) speedup_at for {precision}: expected b1, bmax or streams, found '{at}'.")


def _finished(results: Path, key: str) -> Optional[Dict[str, Any]]:
    folder = results / key
    return read_json(folder / "metrics.json") if (folder / NODE_FILE).is_file() else None


def _fp32_of(plan: Dict[str, Any]) -> Dict[tuple, str]:
    """{(reference export, target): the fp32 evaluation} -- the baseline every engine is judged against."""
    found = {}
    for key, spec in plan["nodes"].items():
        if spec["stage"] == "evaluate_engine" and spec["params"]["precision"] == "fp32":
            found[baseline_key(spec, spec["params"]["target"])] = key
    return found


def _speedups(plan: Dict[str, Any], results: Path) -> Dict[str, Dict[str, Any]]:
    """{engine key: ratio columns} from the finished side-by-side ratio jobs."""
    from precisionflow.compare import ratio_values

    found = {}
    for key, spec in plan["nodes"].items():
        metrics = _finished(results, key) if spec["stage"] == "compare_speed" else None
        if metrics:
            found[spec["inputs"]["engine"]] = ratio_values(metrics)
    return found


def breaches(metrics: Dict[str, Any], fp32: Dict[str, Any], budget: Dict[str, Any], ratios: Dict[str, Any]) -> List[str]:
    """Every budget this engine breaks, each with its number."""
    found = []
    if metrics.get("non_finite_outputs"):  # overflow (fp16) or a broken graph: not "a lower accuracy"
        found.append(f"{metrics['non_finite_outputs']} non-finite outputs (inf/NaN) on the test split: the engine "
                     "overflows or is broken there; its accuracy figures describe garbage")
    found += (detection_breaches if task_of(metrics) == "detection" else classification_breaches)(metrics, fp32, budget)
    qat = metrics.get("qat", {}).get("vs_qat_model")
    if budget["min_qat_agreement"] is not None and qat and qat["agreement"] < budget["min_qat_agreement"]:
        found.append(f"agreement with the QAT model {qat['agreement']:.4f} < {budget['min_qat_agreement']}")
    if budget["min_speedup"] is not None:
        ratio = ratios.get(f"x_fp32_{budget['speedup_at']}")
        if ratio is None:
            found.append(f"no side-by-side speed-up at {budget['speedup_at']} measured (min {budget['min_speedup']})")
        elif ratio["median"] < budget["min_speedup"]:
            found.append(f"speed-up over fp32 at {budget['speedup_at']} {ratio['median']:.2f}x < {budget['min_speedup']}x")
    return found


def detection_breaches(metrics: Dict[str, Any], fp32: Dict[str, Any], budget: Dict[str, Any]) -> List[str]:
    found = []
    drop = 100 * (fp32["map"] - metrics["map"])
    if budget["max_map_drop"] is not None and drop > budget["max_map_drop"]:
        found.append(f"mAP {100 * metrics['map']:.2f} is {drop:.2f} points below fp32's {100 * fp32['map']:.2f} "
                     f"(max {budget['max_map_drop']})")
    if budget["max_spurious_per_image"] is not None and metrics["spurious_per_image"] > budget["max_spurious_per_image"]:
        found.append(f"{metrics['spurious_per_image']:.3f} spurious boxes per image (matching neither a true object nor "
                     f"an fp32 box; {metrics['shadow']} of {metrics['spurious']} on shadows) > {budget['max_spurious_per_image']}")
    return found


def classification_breaches(metrics: Dict[str, Any], fp32: Dict[str, Any], budget: Dict[str, Any]) -> List[str]:
    found = []
    drop = 100 * (fp32["top1"] - metrics["top1"])
    if budget["max_top1_drop"] is not None and drop > budget["max_top1_drop"]:
        found.append(f"top-1 {100 * metrics['top1']:.2f} is {drop:.2f} points below fp32's {100 * fp32['top1']:.2f} (max {budget['max_top1_drop']})")
    if budget["min_agreement"] is not None and metrics["agreement"] < budget["min_agreement"]:
        found.append(f"agreement with fp32 {metrics['agreement']:.4f} < {budget['min_agreement']} ({metrics['flipped']} samples flipped)")
    worst = worst_class(metrics, fp32)
    if budget["max_class_drop"] is not None and worst and worst[1] > budget["max_class_drop"]:
        found.append(f"class '{worst[0]}' top-1 dropped {worst[1]:.2f} points (max {budget['max_class_drop']})")
    return found


def worst_class(metrics: Dict[str, Any], fp32: Dict[str, Any]):
    """(class, drop in points) of the class that lost most against fp32 (top-1, or AP for a
    detector), or None."""
    key = "per_class_ap" if task_of(metrics) == "detection" else "per_class_top1"
    drops = [(name, 100 * (fp32[key][name] - value)) for name, value in metrics[key].items()
             if name in fp32[key] and value >= 0 and fp32[key][name] >= 0]
    return max(drops, key=lambda item: item[1]) if drops else None


def verdicts(plan: Dict[str, Any]) -> List[Dict[str, Any]]:
    """One verdict per planned evaluation whose results (and fp32 baseline) are finished."""
    results = Path(plan["results_dir"])
    baselines, ratios = _fp32_of(plan), _speedups(plan, results)
    found = []
    for key, spec in sorted(plan["nodes"].items()):
        if spec["stage"] != "evaluate_engine":
            continue
        metrics = _finished(results, key)
        fp32_key = baselines.get(baseline_key(spec, spec["params"]["target"]))
        fp32 = _finished(results, fp32_key) if fp32_key else None
        if metrics is None or fp32 is None:
            continue
        budget = plan.get("budgets", {}).get(key) or budget_for({"budget": {}}, spec["params"]["precision"])
        broken = breaches(metrics, fp32, budget, ratios.get(spec["inputs"]["engine"], {}))
        speed = ratios.get(spec["inputs"]["engine"], {}).get(f"x_fp32_{budget['speedup_at'] or 'bmax'}")
        lineage = named_lineage(results / key)
        found.append({"node": key, "precision": spec["params"]["precision"], "target": spec["params"]["target"],
                      "ran": metrics["engine"].get("executed", {}).get("executed_precision", "unknown"),
                      "model": lineage["export_onnx"]["inputs"]["model"],
                      **headline(metrics, fp32), "worst_class": worst_class(metrics, fp32),
                      "speedup_vs_fp32": round(speed["median"], 2) if speed else None,
                      "speedup_at": budget["speedup_at"], "verdict": "FAIL" if broken else "PASS", "breaches": broken})
    return found


def headline(metrics: Dict[str, Any], fp32: Dict[str, Any]) -> Dict[str, Any]:
    """The accuracy a verdict line shows: top-1 (classification) or mAP (detection), its change
    against fp32 in points, and agreement with fp32 (per sample, or per fp32 box)."""
    if task_of(metrics) == "detection":
        return {"task": "detection", "accuracy_name": "mAP", "accuracy": metrics["map"],
                "drop_points": round(100 * (fp32["map"] - metrics["map"]), 2), "agreement": metrics["box_agreement"],
                "extra": f"spurious {metrics['spurious_per_100']}/100 images ({metrics['shadow_per_100']} on shadows), "
                         f"lost {metrics['lost_per_100']}/100"}
    return {"task": "classification", "accuracy_name": "top-1", "accuracy": metrics["top1"],
            "drop_points": round(100 * (fp32["top1"] - metrics["top1"]), 2), "agreement": metrics["agreement"], "extra": ""}


def format_verdicts(found: List[Dict[str, Any]]) -> str:
    lines = []
    for entry in found:
        worst = entry["worst_class"]
        speed = f", {entry['speedup_vs_fp32']}x fp32's throughput at {entry['speedup_at']}" if entry["speedup_vs_fp32"] else ""
        head = (f"{entry['verdict']}  {entry['precision']:<10} {entry['target']:<6} (ran {entry['ran']}) "
                f"{entry['accuracy_name']} {100 * entry['accuracy']:.2f} ({0.0 - entry['drop_points']:+.2f} vs fp32), "
                f"agreement {entry['agreement']:.4f}" + (f", {entry['extra']}" if entry["extra"] else "")
                + (f", worst class '{worst[0]}' {0.0 - worst[1]:+.2f}" if worst else "") + speed)
        lines.append(head + f"  [{entry['node']}, from {entry['model']}]")
        lines += [f"      broke: {reason}" for reason in entry["breaches"]]
    return "\n".join(lines)


def verdict_inputs(eval_dirs: List[Path]):
    """(evaluation folder, its metrics, the metrics of the fp32 evaluation of its model and target)
    for every evaluation among `eval_dirs` whose fp32 baseline is among them too."""
    from precisionflow.nodeio import read_node

    loaded = [(path, read_node(path), read_json(path / "metrics.json")) for path in eval_dirs]
    fp32 = {baseline_key(node, metrics["target"]): metrics for _, node, metrics in loaded if metrics["precision"] == "fp32"}
    return [(path, metrics, fp32[baseline_key(node, metrics["target"])]) for path, node, metrics in loaded
            if baseline_key(node, metrics["target"]) in fp32]
