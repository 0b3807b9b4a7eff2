"""Release budgets: each engine's verdict against the fp32 engine of its model and target.

This module gathers the numbers (node folders, per-image files, ratio jobs) and words the lines;
the rules that turn numbers into PASS / FAIL / UNDECIDED live in verdict_rules.py.

Budgets are thresholds, so they stay out of node ids: the plan carries them beside the nodes
(plan["budgets"]), and `precisionflow check` re-reads finished results with whatever budgets the
configuration names now -- it runs nothing. A verdict names the number that broke it. (One
exception: int8_mixed's search must hold the per-condition budgets while it chooses its graph, so
those are in its graph's params too -- precisions/int8_mixed.condition_budgets, through the same
merge, budgets.budget_for.)
"""

from pathlib import Path
from typing import Any, Dict, List, Optional

from precisionflow import precisions, stats
from precisionflow.budgets import BUDGET_KEYS, budget_for  # noqa: F401 (read from here by the planner and tests)
from precisionflow.datasets import conditions
from precisionflow.errors import StageError
from precisionflow.nodeio import NODE_FILE, declined, named_lineage, read_json
from precisionflow.records import Evaluation, read_metrics
from precisionflow.reporting import verdict_rules
from precisionflow.reporting.compare import differences_of, task_of, variant, with_differences
from precisionflow.reporting.condition_context import add_condition_context, condition_figures
from precisionflow.reporting.detection_checks import detection_checks, spurious_by_condition
from precisionflow.reporting.verdict_lines import headline
from precisionflow.reporting.verdict_rules import judged, overall, share_check

TWIN = "fp32_twin"  # the evaluation of int8_qat's fine-tune run in fp32: its fair reference


def baseline_key(node: Dict[str, Any], target: str) -> tuple:
    """What an evaluation is judged against: the fp32 evaluation of the same reference export and target."""
    return node["inputs"]["reference"], target


def check_config(evaluate: Dict[str, Any]) -> None:
    """Budget keys and settings a user can get wrong, refused before anything runs."""
    from precisionflow.errors import ConfigError

    for precision, entry in evaluate.get("budgets", {}).items():
        unknown = sorted(set(entry) - set(BUDGET_KEYS))
        if unknown:
            raise ConfigError(f"evaluate.budgets.{precision}: unknown key(s) {unknown}; expected some of {list(BUDGET_KEYS)}.")
    if not 0.5 <= evaluate["confidence"] < 1:
        raise ConfigError(f"evaluate.confidence: expected a level in [0.5, 1) such as 0.95, found {evaluate['confidence']}.")
    for precision in ["(all)"] + list(evaluate.get("budgets", {})):
        at = budget_for(evaluate, precision)["speedup_at"]
        if at not in ("b1", "bmax", "streams"):
            raise ConfigError(f"evaluate.budget(s) speedup_at for {precision}: expected b1, bmax or streams, found '{at}'.")


def resolution_warning(budget: Dict[str, Any], precision: str, task: str, test_images: int) -> Optional[str]:
    """A top-1 budget finer than the test split can resolve: with n images even an engine that flips
    not one of them has a drop interval wider than the budget, so its verdict can only be UNDECIDED.
    Said at planning, before anything runs; None when the budget can be met."""
    limit = budget.get("max_top1_drop")
    if limit is None or precision == precisions.reference().name or task != "classification":
        return None
    finest = stats.zero_flip_resolution(test_images, budget["confidence"])
    if limit >= finest:
        return None
    return (
        f"precisionflow: warning: max_top1_drop={limit} for {precision} is finer than "
        f"{test_images} test images can resolve (one image = {100 / test_images:.2f} points; even with no image "
        f"flipped the drop's interval reaches {finest:.2f}): its verdict can only be UNDECIDED. Use "
        "more test images (dataset.test_fraction, a larger data set) or a budget of at least that."
    )


def _finished(results: Path, key: str) -> Optional[Dict[str, Any]]:
    folder = results / key
    if not (folder / NODE_FILE).is_file() or declined(folder):  # unfinished, or built nothing: no figures
        return None
    return read_metrics(folder)


def twin_key(spec: Dict[str, Any]) -> Optional[tuple]:
    """int8_qat and its fp32 twin (the same fine-tune without fake-quant) meet on this key: the QAT
    fine-tune node and the target."""
    precision = precisions.find(spec["params"]["precision"])  # None for the twin's own row
    if precision is not None and precision.judging.against_twin and "qat_model" in spec["inputs"]:
        return spec["inputs"]["qat_model"], spec["params"]["target"]
    twin_of = Evaluation.of(spec["params"]).twin_of
    if twin_of:
        return twin_of, spec["params"]["target"]
    return None


def _fp32_of(plan: Dict[str, Any]) -> Dict[tuple, str]:
    """{(reference export, target): the fp32 evaluation} -- the baseline every engine is judged
    against -- and {(QAT fine-tune, target): its fp32 twin's evaluation}, int8_qat's fair reference."""
    found = {}
    for key, spec in plan["nodes"].items():
        if spec["stage"] != "evaluate_engine":
            continue
        if precisions.is_reference(spec["params"]["precision"]):
            found[baseline_key(spec, spec["params"]["target"])] = key
        elif spec["params"]["precision"] == TWIN:
            found[("twin",) + twin_key(spec)] = key
    return found


def _speedups(plan: Dict[str, Any], results: Path) -> Dict[str, Dict[str, Any]]:
    """{engine key: ratio columns, and "served": its serving job's metrics} from the finished
    side-by-side ratio and serving jobs."""
    from precisionflow.reporting.compare import ratio_values

    found: Dict[str, Dict[str, Any]] = {}
    for key, spec in plan["nodes"].items():
        metrics = _finished(results, key) if spec["stage"] in ("compare_speed", "serve_engine") else None
        if metrics and spec["stage"] == "compare_speed":
            found.setdefault(spec["inputs"]["engine"], {}).update(ratio_values(metrics))
        elif metrics:
            found.setdefault(spec["inputs"]["engine"], {})["served"] = metrics
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


def served_against_evaluated(eval_dir: Path, served: Optional[Dict[str, Any]]) -> Optional[Dict[str, str]]:
    """FAIL when the serve stage's AccuracyOnly answers differ from evaluate_engine's predictions on
    the same test images (the first ones of the split): the served system is not the judged one.
    None where there is nothing to compare (no serving, detection, an older serve record)."""
    answers = ((((served or {}).get("results") or {}).get("engine") or {}).get("AccuracyOnly") or {}).get("served_predictions")
    found = per_sample(eval_dir) if answers else None
    if not answers or found is None:
        return None
    evaluated = [int(p) for p in found[0][: len(answers)]]
    differ = sum(a != b for a, b in zip(answers, evaluated, strict=False))
    if differ or len(evaluated) != len(answers):
        return judged(
            stats.FAIL,
            f"served answers differ from evaluate_engine's on {differ} of {len(answers)} test images: the engine "
            "served is not the engine judged (rerun both; if it persists, report it)",
        )
    return None


def paired_drops(
    engine_dir: Path, reference_dir: Path, confidence: float, classes: List[str], tags: Optional[List[List[str]]] = None
) -> Optional[Dict[str, Any]]:
    """The top-1 drop of an engine against its reference on the same test images, with its
    interval, overall, per class and per condition (`tags`: each test image's condition tags):
    {"all": PairedDrop, "per_class": {name: PairedDrop}, "per_condition": {tag: PairedDrop},
     "agreement_per_condition": {tag: (images where both predict the same class, images)}}."""
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
    groups = conditions.groups(tags)
    per_condition = {
        tag: stats.paired_drop(reference_right[members], right[members], confidence) for tag, members in groups.items()
    }
    same = predicted == reference_predicted
    return {
        "all": stats.paired_drop(reference_right, right, confidence),
        "per_class": per_class,
        "per_condition": per_condition,
        "agreement_per_condition": {tag: (int(same[members].sum()), len(members)) for tag, members in groups.items()},
    }


def checks(
    metrics: Dict[str, Any],
    fp32: Dict[str, Any],
    budget: Dict[str, Any],
    ratios: Dict[str, Any],
    pairs: Optional[Dict[str, Any]],
    timed: bool = True,
) -> List[Dict[str, str]]:
    """Every budget this engine is held to, each with its verdict (PASS / FAIL / UNDECIDED) and
    numbers. `timed` False: a row nobody timed (a TensorRT simulation) gets no speed verdict."""
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
    qat = (metrics.get("qat") or {}).get("vs_qat_model")
    if budget["min_qat_agreement"] is not None and qat:
        n = metrics["test_images"]
        found.append(
            share_check(
                round(qat["agreement"] * n), n, budget["min_qat_agreement"], budget["confidence"], "agreement with the QAT model"
            )
        )
    elif budget["min_qat_agreement"] is not None:
        found.append(verdict_rules.not_applied("min_qat_agreement", "this engine was not built from a QAT model"))
    simulation = "this row is a simulation, never timed"
    if budget["min_speedup"] is not None:
        at = budget["speedup_at"]
        speed = verdict_rules.speed_check(ratios.get(f"x_fp32_{at}"), budget["min_speedup"], at, budget["confidence"], timed)
        found.append(speed or verdict_rules.not_applied("min_speedup", simulation))
    if budget.get("min_server_speedup") is not None:
        server = verdict_rules.server_check(ratios.get("served"), budget["min_server_speedup"], timed, budget["confidence"])
        found.append(server or verdict_rules.not_applied("min_server_speedup", simulation))
    return found


def breaches(
    metrics: Dict[str, Any],
    fp32: Dict[str, Any],
    budget: Dict[str, Any],
    ratios: Dict[str, Any],
    pairs: Optional[Dict[str, Any]] = None,
) -> List[str]:
    """The budgets this engine breaks beyond doubt (FAIL), each with its number."""
    return [entry["text"] for entry in checks(metrics, fp32, budget, ratios, pairs) if entry["verdict"] == stats.FAIL]


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
        found.append(verdict_rules.drop_check(pairs["all"], budget["max_top1_drop"], "top-1 drop"))
    if budget["min_agreement"] is not None:
        n = metrics["test_images"]
        found.append(share_check(n - metrics["flipped"], n, budget["min_agreement"], budget["confidence"], "agreement with fp32"))
    if budget["max_class_drop"] is not None and pairs:
        found += verdict_rules.group_drop_checks(
            pairs["per_class"], budget["max_class_drop"], budget["confidence"], "class", "classes"
        )
    if budget.get("max_condition_drop") is not None and pairs is not None and not pairs.get("per_condition"):
        found.append(  # the planner refuses this; a budget set afterwards (check) must not pass silently
            judged(
                stats.UNDECIDED,
                f"max_condition_drop {budget['max_condition_drop']} set, but this evaluation has no per-condition "
                "pairs (the data set names no conditions): nothing to judge it on",
            )
        )
    if pairs and pairs.get("per_condition"):
        by_condition = pairs["per_condition"]
        if budget.get("max_condition_drop") is not None:
            found += verdict_rules.group_drop_checks(
                by_condition, budget["max_condition_drop"], budget["confidence"], "condition", "conditions"
            )
        for tag, limit in (budget.get("condition_limits") or {}).items():
            if tag in by_condition:
                found.append(verdict_rules.drop_check(by_condition[tag], limit, f"condition '{tag}' top-1 drop"))
    return found


def worst_class(metrics: Dict[str, Any], fp32: Dict[str, Any], pairs: Optional[Dict[str, Any]] = None):
    """(class name, drop in points) of the class that lost most against its reference: from the
    paired per-class drops where judged (names from the data node), else from the per-class
    accuracies (AP for a detector); None without classes."""
    if pairs:
        return verdict_rules.worst_group(pairs["per_class"])
    key = "per_class_ap" if task_of(metrics) == "detection" else "per_class_top1"
    drops = [
        (name, round(100 * (fp32[key][name] - value), 2))
        for name, value in metrics.get(key, {}).items()
        if name in fp32.get(key, {}) and value >= 0 and fp32[key][name] >= 0
    ]
    return max(drops, key=lambda item: item[1]) if drops else None


def test_tags(results: Path, key: str) -> Optional[List[List[str]]]:
    """Each test image's condition tags, from the data node the evaluation scored (None: no conditions)."""
    from precisionflow.nodeio import read_node

    return conditions.load(results / read_node(results / key)["inputs"]["data"], "test")


def class_names(results: Path, key: str) -> List[str]:
    """The class names of the data node an evaluation scored, in label-index order: per-image labels
    are indices into this list (never into the order of a metrics file's keys)."""
    from precisionflow.nodeio import read_node

    data_key = read_node(results / key)["inputs"]["data"]
    return read_json(results / data_key / "meta.json")["classes"]


def judge(
    results: Path,
    key: str,
    reference_key: str,
    metrics,
    reference,
    budget,
    ratios,
    classes: List[str],
    timed: bool = True,
    tags: Optional[List[List[str]]] = None,
) -> Dict[str, Any]:
    """One engine against one reference evaluation: checks, overall verdict and the drop's interval.
    `classes`: the data node's class names (label order)."""
    pairs = None
    if key == reference_key:  # the fp32 engine is the reference: nothing to cost, only whether it computed numbers
        budget = {**budget, **{name: None for name in BUDGET_KEYS if name != "speedup_at"}}
    elif task_of(metrics) == "classification":  # the per-image files are read only where a drop is judged
        pairs = paired_drops(results / key, results / reference_key, budget["confidence"], classes, tags)
    elif tags is not None:  # detection: each condition's images' spurious boxes, for its checks and the report
        metrics = {**metrics, "spurious_by_condition": spurious_by_condition(results / key, tags)}
    found = checks(metrics, reference, budget, ratios, pairs, timed)
    drop = pairs["all"].to_json() if pairs else None
    verdict = overall(found)
    if key == reference_key and verdict == verdict_rules.NO_BUDGET:  # what the others are judged against
        verdict = verdict_rules.REFERENCE
    return {"checks": found, "verdict": verdict, "drop": drop, "reference": reference_key, "pairs": pairs}


def speed_of(ratio: Optional[Dict[str, Any]], confidence: float) -> Optional[Dict[str, Any]]:
    """A side-by-side speed-up as the table and the headline show it: the geometric mean of its
    usable rounds and its interval (the speed check's figure and bounds); low and high None where the
    rounds give no interval (one round, identical rounds), never [x, x], which would read as a
    measured certainty. None without a usable round."""
    usable, _ = verdict_rules.usable_rounds(ratio.get("rounds") if isinstance(ratio, dict) else None)
    if not usable:
        return None
    bounds = verdict_rules.speed_interval(usable, confidence)
    digits = stats.interval_digits(*bounds) if bounds else 2
    return {
        "geomean": round(stats.geometric_mean(usable), digits),
        "low": round(bounds[0], digits) if bounds else None,
        "high": round(bounds[1], digits) if bounds else None,
        "rounds": len(ratio.get("rounds") or []),
    }


def speed_and_serving(engine_ratios: Optional[Dict[str, Any]], budget: Dict[str, Any]) -> Dict[str, Any]:
    """The speed-up over fp32 at the budget's setting and the Server ratio, each with its interval at
    the budget's confidence; none for an engine that is not timed (engine_ratios None)."""
    speed = speed_of(engine_ratios.get(f"x_fp32_{budget['speedup_at']}"), budget["confidence"]) if engine_ratios else None
    found = {"speed": speed, "speedup_at": budget["speedup_at"], "speedup_vs_fp32": speed["geomean"] if speed else None}
    served = (engine_ratios or {}).get("served")
    if served and served.get("server_ratio"):
        ratio = verdict_rules.server_ratio_at(served["server_ratio"], budget["confidence"])
        found["server"] = {**ratio, "bound_ms": served["settings"]["latency_bound_ms"]}
    return found


def judge_entry(
    results: Path, key: str, spec: Dict[str, Any], plan: Dict[str, Any], baselines, ratios
) -> Optional[Dict[str, Any]]:
    """The verdict of one planned evaluation, or None while it (or its fp32 baseline) is unfinished."""
    metrics = _finished(results, key)
    fp32_key = baselines.get(baseline_key(spec, spec["params"]["target"]))
    fp32 = _finished(results, fp32_key) if fp32_key else None
    if metrics is None or fp32 is None:
        return None
    budget = (plan.get("budgets") or {}).get(key)
    if budget is None:  # every plan names each evaluation's budget (plan.py): no default may stand in
        raise StageError(f"the plan names no budget for {key}: re-plan (precisionflow plan) with this version")
    timed = Evaluation.of(spec["params"]).timed  # a simulation of TensorRT on a CPU is never timed
    engine_ratios = ratios.get(spec["inputs"]["engine"], {})
    classes = class_names(results, key) if task_of(metrics) == "classification" else []
    tags = test_tags(results, key)
    judge_against = lambda other_key, other: judge(  # noqa: E731
        results, key, other_key, metrics, other, budget, engine_ratios, classes, timed, tags
    )
    against_base = judge_against(fp32_key, fp32)
    judged_by, reference, twin = against_twin(spec, baselines, results, against_base, judge_against)
    reference = reference or fp32
    served_answers = served_against_evaluated(results / key, engine_ratios.get("served") if timed else None)
    if served_answers:
        judged_by = with_check(judged_by, served_answers)
    ran = metrics["engine"].get("executed", {}).get("executed_precision", "unknown")
    entry = {
        "node": key,
        "precision": spec["params"]["precision"],
        "target": spec["params"]["target"],
        "ran": ran,
        "model": named_lineage(results / key)["export_onnx"]["inputs"]["model"],
        # what sets the row apart from its neighbours of one precision (calibration method, qat,
        # TRT-sim): the verdict lines and the fastest/tie line name it, as the table does
        "variant": variant(named_lineage(results / key)),
        **headline(metrics, reference),
        "worst_class": worst_class(metrics, reference, judged_by["pairs"]),
        **condition_figures(judged_by["pairs"], results / key, tags, budget["confidence"], metrics),
        "timed": timed,
        # an fp16 or int8 graph whose backend ran fp32 kernels buys no speed of its own: no speed-up to claim
        "ran_reference_kernels": spec["params"]["precision"] not in (precisions.reference().name, TWIN)
        and ran == precisions.reference().judging.runs_in,
        **speed_and_serving(engine_ratios if timed else None, budget),
        "verdict": judged_by["verdict"],
        "checks": judged_by["checks"],
        "drop": judged_by["drop"],
        "judged_against": judged_by["reference"],
        "accept_undecided": budget["accept_undecided"],
        "breaches": [c["text"] for c in judged_by["checks"] if c["verdict"] == stats.FAIL],
        "undecided": [c["text"] for c in judged_by["checks"] if c["verdict"] == stats.UNDECIDED],
    }
    add_condition_context(entry, tags, plan, results, key, metrics, budget["confidence"])
    if twin is not None:
        entry["vs_base_fp32"] = {
            "drop": against_base["drop"],
            "verdict": against_base["verdict"],
            "reference": fp32_key,
            **headline(metrics, fp32),
        }
    return entry


def with_check(judged: Dict[str, Any], check: Dict[str, Any]) -> Dict[str, Any]:
    """A judgement with one more check, its overall verdict recomputed."""
    checks = judged["checks"] + [check]
    return {**judged, "checks": checks, "verdict": overall(checks)}


def against_twin(spec, baselines, results: Path, against_base: Dict[str, Any], judge_against):
    """(the judgement the budget reads, its reference's metrics or None for base fp32, the twin's
    metrics or None). int8_qat is judged against its fp32 twin: against base fp32 alone, the
    fine-tune's extra training would read as precision -- a missing twin is UNDECIDED, saying so."""
    if not twin_key(spec):
        return against_base, None, None
    twin_key_found = baselines.get(("twin",) + twin_key(spec))
    twin = _finished(results, twin_key_found) if twin_key_found else None
    if twin is not None:
        return judge_against(twin_key_found, twin), twin, twin
    missing = verdict_rules.judged(
        stats.UNDECIDED,
        f"its fp32 twin's evaluation ({twin_key_found or 'not planned'}) is missing: against base fp32 the drop mixes "
        "the fine-tune's extra training with precision; rerun with the twin (precisionflow run)",
    )
    return with_check(against_base, missing), None, None


def verdicts(plan: Dict[str, Any]) -> List[Dict[str, Any]]:
    """One verdict per planned evaluation whose results (and fp32 baseline) are finished."""
    results = Path(plan["results_dir"])
    baselines, ratios = _fp32_of(plan), _speedups(plan, results)
    found = []
    for key, spec in sorted(plan["nodes"].items()):
        if spec["stage"] == "evaluate_engine" and spec["params"]["precision"] != TWIN:
            entry = judge_entry(results, key, spec, plan, baselines, ratios)
            found += [entry] if entry else []
    # whatever key was swept between the judged rows, named on each (n64, e4, minmax)
    differs = differences_of([results / entry["node"] for entry in found])
    for entry in found:
        entry["variant"] = with_differences(entry["variant"], differs[entry["node"].split("/", 1)[1]])
    return found


def gate_fails(entry: Dict[str, Any]) -> bool:
    """Whether a verdict fails the gate: FAIL always, UNDECIDED unless evaluate.accept_undecided."""
    return entry["verdict"] == stats.FAIL or (entry["verdict"] == stats.UNDECIDED and not entry["accept_undecided"])


def verdict_inputs(eval_dirs: List[Path]):
    """(evaluation folder, its metrics, the metrics of the fp32 evaluation of its model and target)
    for every evaluation among `eval_dirs` whose fp32 baseline is among them too."""
    from precisionflow.nodeio import read_node

    loaded = [(path, read_node(path), read_metrics(path)) for path in eval_dirs]
    fp32 = {
        baseline_key(node, metrics["target"]): metrics
        for _, node, metrics in loaded
        if precisions.is_reference(metrics["precision"])
    }
    return [
        (path, metrics, fp32[baseline_key(node, metrics["target"])])
        for path, node, metrics in loaded
        if baseline_key(node, metrics["target"]) in fp32
    ]
