"""Release budgets: each engine's verdict against the fp32 engine of its model and target.

Budgets are thresholds, so they stay out of node ids: the plan carries them beside the nodes
(plan["budgets"]), and `precisionflow check` re-reads finished results with whatever budgets the
configuration names now -- it runs nothing. A verdict names the number that broke it.
"""

from dataclasses import fields
from pathlib import Path
from typing import Any, Dict, List, Optional

from precisionflow.reporting import stats
from precisionflow.reporting.compare import task_of
from precisionflow.config.schema import BudgetConf
from precisionflow.pipeline.nodeio import NODE_FILE, named_lineage, read_json

BUDGET_KEYS = tuple(field.name for field in fields(BudgetConf))
TWIN = "fp32_twin"  # the evaluation of int8_qat's fine-tune run in fp32: its fair reference


def baseline_key(node: Dict[str, Any], target: str) -> tuple:
    """What an evaluation is judged against: the fp32 evaluation of the same reference export and target."""
    return node["inputs"]["reference"], target


def budget_for(evaluate: Dict[str, Any], precision: str) -> Dict[str, Any]:
    """evaluate.budget with evaluate.budgets.<precision>'s set keys on top."""
    merged = {key: evaluate.get("budget", {}).get(key) for key in BUDGET_KEYS}
    merged.update(evaluate.get("budgets", {}).get(precision, {}))
    merged["speedup_at"] = merged["speedup_at"] or "bmax"
    merged["confidence"] = evaluate.get("confidence", 0.95)
    merged["accept_undecided"] = evaluate.get("accept_undecided", False)
    return merged


def check_config(evaluate: Dict[str, Any]) -> None:
    """Budget keys and settings a user can get wrong, refused before anything runs."""
    from precisionflow.errors import ConfigError

    for precision, entry in evaluate.get("budgets", {}).items():
        unknown = sorted(set(entry) - set(BUDGET_KEYS))
        if unknown:
            raise ConfigError(f"evaluate.budgets.{precision}: unknown key(s) {unknown}; expected some of {list(BUDGET_KEYS)}.")
    if not 0.5 <= evaluate.get("confidence", 0.95) < 1:
        raise ConfigError(f"evaluate.confidence: expected a level in [0.5, 1) such as 0.95, found {evaluate['confidence']}.")
    for precision in ["(all)"] + list(evaluate.get("budgets", {})):
        at = budget_for(evaluate, precision)["speedup_at"]
        if at not in ("b1", "bmax", "streams"):
            raise ConfigError(f"evaluate.budget(s) speedup_at for {precision}: expected b1, bmax or streams, found '{at}'.")


def _finished(results: Path, key: str) -> Optional[Dict[str, Any]]:
    folder = results / key
    return read_json(folder / "metrics.json") if (folder / NODE_FILE).is_file() else None


def twin_key(spec: Dict[str, Any]) -> Optional[tuple]:
    """int8_qat and its fp32 twin (the same fine-tune without fake-quant) meet on this key: the QAT
    fine-tune node and the target."""
    if spec["params"]["precision"] == "int8_qat" and "qat_model" in spec["inputs"]:
        return spec["inputs"]["qat_model"], spec["params"]["target"]
    if spec["params"].get("twin_of"):
        return spec["params"]["twin_of"], spec["params"]["target"]
    return None


def _fp32_of(plan: Dict[str, Any]) -> Dict[tuple, str]:
    """{(reference export, target): the fp32 evaluation} -- the baseline every engine is judged
    against -- and {(QAT fine-tune, target): its fp32 twin's evaluation}, int8_qat's fair reference."""
    found = {}
    for key, spec in plan["nodes"].items():
        if spec["stage"] != "evaluate_engine":
            continue
        if spec["params"]["precision"] == "fp32":
            found[baseline_key(spec, spec["params"]["target"])] = key
        elif spec["params"]["precision"] == TWIN:
            found[("twin",) + twin_key(spec)] = key
    return found


def _speedups(plan: Dict[str, Any], results: Path) -> Dict[str, Dict[str, Any]]:
    """{engine key: ratio columns} from the finished side-by-side ratio jobs."""
    from precisionflow.reporting.compare import ratio_values

    found = {}
    for key, spec in plan["nodes"].items():
        metrics = _finished(results, key) if spec["stage"] == "compare_speed" else None
        if metrics:
            found[spec["inputs"]["engine"]] = ratio_values(metrics)
    return found


def per_sample(folder: Path):
    """(predictions, labels) of an evaluation's test split, or None (detection keeps boxes instead)."""
    import numpy as np

    from precisionflow.reporting.compare import PER_SAMPLE_FILE

    path = folder / PER_SAMPLE_FILE
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as loaded:
        return loaded["predictions"], loaded["labels"]


def paired_drops(engine_dir: Path, reference_dir: Path, confidence: float, classes: List[str]) -> Optional[Dict[str, Any]]:
    """The top-1 drop of an engine against its reference on the same test images, with its
    interval, overall and per class: {"all": PairedDrop, "per_class": {name: PairedDrop}}."""
    engine, reference = per_sample(engine_dir), per_sample(reference_dir)
    if engine is None or reference is None:
        return None
    (predicted, labels), (reference_predicted, reference_labels) = engine, reference
    if len(labels) != len(reference_labels) or (labels != reference_labels).any():
        from precisionflow.errors import LineageError

        raise LineageError(
            f"{engine_dir} and its reference {reference_dir} scored different test images: "
            "they cannot be paired; rerun both evaluations on the same data node."
        )
    right, reference_right = predicted == labels, reference_predicted == labels
    per_class = {
        name: stats.paired_drop(reference_right[labels == index], right[labels == index], confidence)
        for index, name in enumerate(classes)
        if (labels == index).any()
    }
    return {"all": stats.paired_drop(reference_right, right, confidence), "per_class": per_class}


def judged(verdict: str, text: str) -> Dict[str, str]:
    return {"verdict": verdict, "text": text}


def cannot_tell(n: int, what: str, one_unit: str, needed: Optional[int]) -> str:
    """The UNDECIDED sentence: what this many images cannot tell, and how many would."""
    decide = (
        f"about {needed} images would decide" if needed else "no number of images decides an estimate that sits on its budget"
    )
    return f"{n} test images cannot tell: one image = {one_unit}; {what}; {decide}"


def drop_check(drop: stats.PairedDrop, limit: float, subject: str) -> Dict[str, str]:
    verdict = stats.verdict_at_most(drop.low, drop.high, limit)
    text = (
        f"{subject} {drop.drop:+.2f} points [{drop.low:+.2f}, {drop.high:+.2f}] ({100 * drop.confidence:g}% interval; "
        f"{drop.b} image(s) lost, {drop.c} gained; max {limit})"
    )
    if verdict == stats.UNDECIDED:
        text += "; " + cannot_tell(
            drop.n,
            f"the drop's interval straddles the budget {limit}",
            f"{drop.one_image:.2f} points",
            stats.images_to_decide_drop(drop, limit),
        )
    return judged(verdict, text)


def share_check(successes: int, n: int, limit: float, confidence: float, subject: str) -> Dict[str, str]:
    low, high = stats.wilson(successes, n, confidence)
    verdict = stats.verdict_at_least(low, high, limit)
    text = f"{subject} {successes / n:.4f} [{low:.4f}, {high:.4f}] ({n - successes} of {n} differ; min {limit})"
    if verdict == stats.UNDECIDED:
        text += "; " + cannot_tell(
            n,
            f"the interval straddles the minimum {limit}",
            f"{1 / n:.4f} of agreement",
            stats.images_to_decide_share(successes, n, limit, confidence),
        )
    return judged(verdict, text)


def checks(
    metrics: Dict[str, Any], fp32: Dict[str, Any], budget: Dict[str, Any], ratios: Dict[str, Any], pairs: Optional[Dict[str, Any]]
) -> List[Dict[str, str]]:
    """Every budget this engine is held to, each with its verdict (PASS / FAIL / UNDECIDED) and numbers."""
    found = []
    if metrics.get("non_finite_outputs"):  # overflow (fp16) or a broken graph: not "a lower accuracy"
        found.append(
            judged(
                stats.FAIL,
                f"{metrics['non_finite_outputs']} non-finite outputs (inf/NaN) on the test split: "
                "the engine overflows or is broken there; its accuracy figures describe garbage",
            )
        )
    if task_of(metrics) == "detection":
        found += detection_checks(metrics, fp32, budget)
    else:
        found += classification_checks(metrics, budget, pairs)
    qat = metrics.get("qat", {}).get("vs_qat_model")
    if budget["min_qat_agreement"] is not None and qat:
        n = metrics["test_images"]
        found.append(
            share_check(
                round(qat["agreement"] * n), n, budget["min_qat_agreement"], budget["confidence"], "agreement with the QAT model"
            )
        )
    if budget["min_speedup"] is not None:
        ratio = ratios.get(f"x_fp32_{budget['speedup_at']}")
        if ratio is None:
            found.append(
                judged(stats.FAIL, f"no side-by-side speed-up at {budget['speedup_at']} measured (min {budget['min_speedup']})")
            )
        else:
            verdict = stats.FAIL if ratio["median"] < budget["min_speedup"] else stats.PASS
            found.append(
                judged(
                    verdict, f"speed-up over fp32 at {budget['speedup_at']} {ratio['median']:.2f}x (min {budget['min_speedup']}x)"
                )
            )
    return found


def breaches(
    metrics: Dict[str, Any],
    fp32: Dict[str, Any],
    budget: Dict[str, Any],
    ratios: Dict[str, Any],
    pairs: Optional[Dict[str, Any]] = None,
) -> List[str]:
    """The budgets this engine breaks beyond doubt (FAIL), each with its number."""
    budget = {"confidence": 0.95, **budget}
    return [entry["text"] for entry in checks(metrics, fp32, budget, ratios, pairs) if entry["verdict"] == stats.FAIL]


def detection_checks(metrics: Dict[str, Any], fp32: Dict[str, Any], budget: Dict[str, Any]) -> List[Dict[str, str]]:
    found = []
    drop = 100 * (fp32["map"] - metrics["map"])
    if budget["max_map_drop"] is not None:
        # No interval for mAP yet (a bootstrap over images recomputes COCOeval per resample): the
        # estimate decides, and the line says so.
        found.append(
            judged(
                stats.FAIL if drop > budget["max_map_drop"] else stats.PASS,
                f"mAP {100 * metrics['map']:.2f} is {drop:.2f} points below fp32's {100 * fp32['map']:.2f} "
                f"(max {budget['max_map_drop']}; point estimate, no interval)",
            )
        )
    if budget["max_spurious_per_image"] is not None:
        limit = budget["max_spurious_per_image"]
        per_image = metrics.get("spurious_by_image")
        low, high = stats.bootstrap_mean(per_image, budget["confidence"]) if per_image else (metrics["spurious_per_image"],) * 2
        verdict = stats.verdict_at_most(low, high, limit)
        text = (
            f"{metrics['spurious_per_image']:.3f} spurious boxes per image [{low:.3f}, {high:.3f}] (bootstrap over "
            f"images; matching neither a true object nor an fp32 box; {metrics['shadow']} of {metrics['spurious']} on "
            f"shadows; max {limit})"
        )
        if verdict == stats.UNDECIDED:
            text += f"; {len(per_image)} test images cannot tell: the interval straddles the budget {limit}"
        found.append(judged(verdict, text))
    return found


def classification_checks(
    metrics: Dict[str, Any], budget: Dict[str, Any], pairs: Optional[Dict[str, Any]]
) -> List[Dict[str, str]]:
    found = []
    if pairs is None and any(budget[key] is not None for key in ("max_top1_drop", "max_class_drop")):
        found.append(
            judged(
                stats.UNDECIDED,
                "no per-image predictions of this engine or its fp32 engine: the drop's "
                "interval cannot be computed; rerun the evaluations",
            )
        )
    if budget["max_top1_drop"] is not None and pairs:
        found.append(drop_check(pairs["all"], budget["max_top1_drop"], "top-1 drop"))
    if budget["min_agreement"] is not None:
        n = metrics["test_images"]
        found.append(share_check(n - metrics["flipped"], n, budget["min_agreement"], budget["confidence"], "agreement with fp32"))
    if budget["max_class_drop"] is not None and pairs:
        per_class = {
            name: drop_check(drop, budget["max_class_drop"], f"class '{name}' top-1 drop")
            for name, drop in pairs["per_class"].items()
        }
        for verdict in (stats.FAIL, stats.UNDECIDED):
            picked = [entry for entry in per_class.values() if entry["verdict"] == verdict]
            if picked:  # the classes that break it, or the first that cannot tell (not all of them)
                found += picked if verdict == stats.FAIL else picked[:1]
                break
        else:
            worst = max(pairs["per_class"].items(), key=lambda item: item[1].high)
            found.append(per_class[worst[0]])
    return found


def overall(found: List[Dict[str, str]]) -> str:
    verdicts_found = {entry["verdict"] for entry in found}
    return stats.FAIL if stats.FAIL in verdicts_found else stats.UNDECIDED if stats.UNDECIDED in verdicts_found else stats.PASS


def worst_class(metrics: Dict[str, Any], fp32: Dict[str, Any]):
    """(class, drop in points) of the class that lost most against fp32 (top-1, or AP for a
    detector), or None."""
    key = "per_class_ap" if task_of(metrics) == "detection" else "per_class_top1"
    drops = [
        (name, 100 * (fp32[key][name] - value))
        for name, value in metrics[key].items()
        if name in fp32[key] and value >= 0 and fp32[key][name] >= 0
    ]
    return max(drops, key=lambda item: item[1]) if drops else None


def judge(results: Path, key: str, reference_key: str, metrics, reference, budget, ratios) -> Dict[str, Any]:
    """One engine against one reference evaluation: checks, overall verdict and the drop's interval."""
    pairs = None
    if key == reference_key:  # the fp32 engine is the reference: nothing to cost, only whether it computed numbers
        budget = {**budget, **{name: None for name in BUDGET_KEYS if name != "speedup_at"}}
    elif task_of(metrics) == "classification":  # the per-image files are read only where a drop is judged
        pairs = paired_drops(
            results / key, results / reference_key, budget["confidence"], list(metrics.get("per_class_top1", {}))
        )
    found = checks(metrics, reference, budget, ratios, pairs)
    drop = pairs["all"].to_json() if pairs else None
    return {"checks": found, "verdict": overall(found), "drop": drop, "reference": reference_key}


def verdicts(plan: Dict[str, Any]) -> List[Dict[str, Any]]:
    """One verdict per planned evaluation whose results (and fp32 baseline) are finished."""
    results = Path(plan["results_dir"])
    baselines, ratios = _fp32_of(plan), _speedups(plan, results)
    found = []
    for key, spec in sorted(plan["nodes"].items()):
        if spec["stage"] != "evaluate_engine" or spec["params"]["precision"] == TWIN:
            continue
        metrics = _finished(results, key)
        fp32_key = baselines.get(baseline_key(spec, spec["params"]["target"]))
        fp32 = _finished(results, fp32_key) if fp32_key else None
        if metrics is None or fp32 is None:
            continue
        budget = {
            "confidence": 0.95,
            "accept_undecided": False,
            **(plan.get("budgets", {}).get(key) or budget_for({"budget": {}}, spec["params"]["precision"])),
        }
        engine_ratios = ratios.get(spec["inputs"]["engine"], {})
        against_base = judge(results, key, fp32_key, metrics, fp32, budget, engine_ratios)
        judged_by = against_base
        twin_key_found = baselines.get(("twin",) + twin_key(spec)) if twin_key(spec) else None
        twin = _finished(results, twin_key_found) if twin_key_found else None
        if twin is not None:  # int8_qat: the budget reads the delta against its fp32 twin
            judged_by = judge(results, key, twin_key_found, metrics, twin, budget, engine_ratios)
        speed = engine_ratios.get(f"x_fp32_{budget['speedup_at'] or 'bmax'}")
        lineage = named_lineage(results / key)
        entry = {
            "node": key,
            "precision": spec["params"]["precision"],
            "target": spec["params"]["target"],
            "ran": metrics["engine"].get("executed", {}).get("executed_precision", "unknown"),
            "model": lineage["export_onnx"]["inputs"]["model"],
            **headline(metrics, twin if twin is not None else fp32),
            "worst_class": worst_class(metrics, fp32),
            "speedup_vs_fp32": round(speed["median"], 2) if speed else None,
            "speedup_at": budget["speedup_at"],
            "verdict": judged_by["verdict"],
            "checks": judged_by["checks"],
            "drop": judged_by["drop"],
            "judged_against": judged_by["reference"],
            "accept_undecided": budget["accept_undecided"],
            "breaches": [c["text"] for c in judged_by["checks"] if c["verdict"] == stats.FAIL],
            "undecided": [c["text"] for c in judged_by["checks"] if c["verdict"] == stats.UNDECIDED],
        }
        search = lineage["quantize_onnx"]["summary"].get("mixed_search")
        if search and "drop_interval" in search:  # int8_mixed: what it decided on, beside what the test split says
            low, high = search["drop_interval"]
            entry["validation"] = (
                f"chosen on {search['split']} ({search['images']} images): {0.0 - search['drop_points']:+.2f} "
                f"[{0.0 - high:+.2f}, {0.0 - low:+.2f}], budget {search['max_drop_points']} "
                + ("met" if search["budget_met"] else "NOT met by its interval")
            )
        if twin is not None:
            entry["vs_base_fp32"] = {
                "drop": against_base["drop"],
                "verdict": against_base["verdict"],
                "reference": fp32_key,
                **headline(metrics, fp32),
            }
        found.append(entry)
    return found


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


def format_verdicts(found: List[Dict[str, Any]]) -> str:
    lines = []
    for entry in found:
        speed = f", {entry['speedup_vs_fp32']}x fp32's throughput at {entry['speedup_at']}" if entry["speedup_vs_fp32"] else ""
        against = "vs its fp32 twin" if entry.get("vs_base_fp32") else "vs fp32"
        head = (
            f"{entry['verdict']:<9} {entry['precision']:<10} {entry['target']:<6} (ran {entry['ran']}) "
            f"{entry['accuracy_name']} {100 * entry['accuracy']:.2f} ({0.0 - entry['drop_points']:+.2f}"
            f"{interval_text(entry['drop'])} {against}), agreement {entry['agreement']:.4f}"
            + (f", {entry['extra']}" if entry["extra"] else "")
            + speed
        )
        lines.append(head + f"  [{entry['node']}, from {entry['model']}]")
        base = entry.get("vs_base_fp32")
        if base:
            lines.append(
                f"      vs base fp32: {0.0 - base['drop_points']:+.2f}{interval_text(base['drop'])} points "
                "(the fine-tune's extra training, not precision: the budget reads the twin)"
            )
        if entry.get("validation"):
            lines.append(
                f"      int8_mixed {entry['validation']}; test: {0.0 - entry['drop_points']:+.2f}{interval_text(entry['drop'])}"
            )
        lines += [f"      broke: {reason}" for reason in entry["breaches"]]
        lines += [f"      cannot tell: {reason}" for reason in entry["undecided"]]
    return "\n".join(lines)


def gate_fails(entry: Dict[str, Any]) -> bool:
    """Whether a verdict fails the gate: FAIL always, UNDECIDED unless evaluate.accept_undecided."""
    return entry["verdict"] == stats.FAIL or (entry["verdict"] == stats.UNDECIDED and not entry["accept_undecided"])


def verdict_inputs(eval_dirs: List[Path]):
    """(evaluation folder, its metrics, the metrics of the fp32 evaluation of its model and target)
    for every evaluation among `eval_dirs` whose fp32 baseline is among them too."""
    from precisionflow.pipeline.nodeio import read_node

    loaded = [(path, read_node(path), read_json(path / "metrics.json")) for path in eval_dirs]
    fp32 = {baseline_key(node, metrics["target"]): metrics for _, node, metrics in loaded if metrics["precision"] == "fp32"}
    return [
        (path, metrics, fp32[baseline_key(node, metrics["target"])])
        for path, node, metrics in loaded
        if baseline_key(node, metrics["target"]) in fp32
    ]
