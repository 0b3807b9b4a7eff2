"""track_mlflow: one parent run per sweep, one child run per evaluated engine, one run per training
or fine-tuning node -- each logged once, whatever sweeps it belongs to.

Lineage is by node id: an int8_qat engine's run names its QAT fine-tune and QAT export as well as
the training and the fp32 reference export, each under its own name (nodeio.named_lineage).
A run is found again by its node tag: rerunning a sweep, or a second sweep sharing an engine,
tags the existing run with the new sweep instead of logging a copy.
"""

import hashlib
from pathlib import Path
from typing import Any, Dict, List, Tuple

from precisionflow.stages import NodeContext
from precisionflow.reporting import engine_models, tracking
from precisionflow.reporting.compare import (
    HEADLINE_METRICS,
    declared_by_engine,
    differences_of,
    engine_key,
    ratio_values,
    ratios_by_engine,
    split_inputs,
    task_of,
    variant,
    with_differences,
)
from precisionflow.nodeio import named_lineage, node_key, read_json
from precisionflow.records import METRICS_FILE, SIMULATES, Evaluation, read_metrics
from precisionflow.reporting.report_rows import blank_reason, devices_apart
from precisionflow.quant import cache

# Reads every evaluation: a declined one is listed as not built, not carried (pipeline/runner.py).
AGGREGATES = True

PACKAGES = ("mlflow",)
PARAM_LIMIT = 500  # characters; longer values (long lists) are cut, MLflow stores up to 6000
TRAINING_STAGES = ("train_model", "finetune_model")
# A training run's metrics naming the model the engines are judged against (its summary's keys).
REFERENCE_EPOCH = {
    "kept_epoch": "kept_epoch",
    "kept_val_accuracy": "val_accuracy",
    "best_epoch": "best_epoch",
    "best_epoch_val_accuracy": "best_epoch_val_accuracy",
    "last_epoch_val_accuracy": "last_epoch_val_accuracy",
}
# Files logged with each engine's run, by the stage that wrote them.
ARTIFACTS = {
    "evaluate_engine": ("metrics.json", "flipped.csv", "box_changes.csv", "worst_boxes.json"),
    "build_engine": ("engine.json",),
    "quantize_onnx": ("layer_error.csv", "layer_error.png", "sensitivity.csv"),  # the last: int8_mixed's search
    "calibrate": ("ranges.json",),
    "prune_model": ("prune.json",),
}


def node_params(at: NodeContext) -> Dict[str, Any]:
    """Where the runs go, and the TensorRT version a calibration cache's header names (an exported
    cache is an artifact). The planner adds the command line's overrides (a run's tag) and hands it
    every measured node of the sweep points that share these settings."""
    tracking = at.cfg["tracking"]
    return {
        "uri": tracking["uri"],
        "experiment": tracking["experiment"],
        "tensorrt_version": at.cfg["calibration"]["tensorrt_version"],
    }


def child_params(lineage: Dict[str, Dict[str, Any]]) -> Dict[str, str]:
    return {
        key: str(value)[:PARAM_LIMIT]
        for name, record in lineage.items()
        for key, value in tracking.flatten(record["params"], name)
    }


def child_metrics(metrics: Dict[str, Any], ratio_metrics, timed: bool = True) -> Dict[str, float]:
    """Accuracy, speed (not for a simulation row: a CPU's timing of TensorRT's graph says nothing of
    TensorRT), engine size and the side-by-side ratios."""
    values = {key: float(metrics[key]) for key in HEADLINE_METRICS[task_of(metrics)]}
    if "top1" in values:  # for reading in the runs view, in the console's points (top1 itself stays raw)
        values["top1_percent"] = round(100 * values["top1"], 2)
    speed = metrics["speed"] if timed else {"batch": {}, "streams": {}}
    for batch, stats in speed["batch"].items():
        values.update({f"b{batch}_{name}": float(v) for name, v in stats.items() if isinstance(v, (int, float))})
    for count, stats in speed["streams"].items():
        values.update({f"streams{count}_{name}": float(v) for name, v in stats.items() if isinstance(v, (int, float))})
    engine = metrics["engine"]
    values.update({"engine_bytes": float(engine["engine_bytes"]), "build_seconds": float(engine["build_seconds"])})
    for reference, found in metrics.get("qat", {}).items():
        values.update({f"qat_{reference}_{key}": float(value) for key, value in found.items()})
    for column, stats in (ratio_values(ratio_metrics) if ratio_metrics else {}).items():
        values[column] = round(stats["geomean"], 3)  # as the console shows it (1.5528183... read as noise in MLflow)
        values[f"{column}_cv_percent"] = stats["cv_percent"]
    return values


def graph_metrics(lineage) -> Dict[str, float]:
    summary = lineage["quantize_onnx"]["summary"]
    keys = ("worst_sqnr_db", "quantized_nodes", "quantized_fraction", "qat_coverage")
    values = {key: float(summary[key]) for key in keys if summary.get(key) is not None}
    if "prune_model" in lineage:  # what pruning removed, next to the engine's size and speed
        pruned = lineage["prune_model"]["summary"]
        values.update({f"prune_{key}": float(pruned[key]) for key in PRUNE_METRICS})
    return values


PRUNE_METRICS = ("params_before", "params_after", "flops_before", "flops_after", "weights_zero_fraction")


def version_tags(lineage, commit: str) -> Dict[str, str]:
    """Package versions every upstream stage recorded, and the code's commit."""
    tags = {f"version.{pkg}": ver for record in lineage.values() for pkg, ver in record["versions"].items()}
    return {**tags, "git_commit": commit}


def child_tags(lineage, metrics, commit: str) -> Dict[str, str]:
    engine = metrics["engine"]
    executed = engine.get("executed", {})
    tags = {f"node.{name}": node_key(record) for name, record in lineage.items()}
    simulates = Evaluation.of(lineage["evaluate_engine"]["params"]).simulates
    if simulates:
        tags[SIMULATES] = simulates  # accuracy of what TensorRT computes; its timings are not TensorRT's
    tags.update(
        {
            "precision": metrics["precision"],
            "target": metrics["target"],
            "backend": engine["backend"],
            "backend_version": engine["backend_version"],
            "device_name": engine["device_name"],
            "executed": executed.get("label", "unknown"),
            "executed_as_requested": str(executed.get("as_requested", "")),
        }
    )
    return {**tags, **version_tags(lineage, commit)}


def ratio_device_tags(ratio_metrics) -> Dict[str, str]:
    """{"x_tf_devices": "TensorFlow on the CPU, the engine on the GPU"} where the x_tf_* metrics set
    sides on two kinds of device against each other (the report's note, on the run); {} otherwise."""
    apart = devices_apart((ratio_metrics or {}).get("devices") or {})
    return {"x_tf_devices": apart} if apart else {}


def artifacts(eval_dir: Path, lineage) -> List[Path]:
    results = eval_dir.parent.parent
    found = []
    for record in lineage.values():
        folder = results / node_key(record)
        found += [folder / file for file in ARTIFACTS.get(record["stage"], ()) if (folder / file).exists()]
    return found


def trt_caches(lineage, results: Path, out: Path, tensorrt_version: str) -> List[Path]:
    """TensorRT's own text cache for each calibration in the lineage, with this sweep's header version."""
    return [
        cache.write_trt_cache(
            results / node_key(record), out / "trt-caches" / record["id"] / cache.TRT_CACHE_FILE, tensorrt_version
        )
        for record in lineage.values()
        if record["stage"] == "calibrate"
    ]


def mark_sweep(client, run, sweep_id: str) -> None:
    client.set_tag(run.info.run_id, f"{tracking.SWEEP_TAG}.{sweep_id}", "1")


def log_training(client, context, record: Dict[str, Any]) -> str:
    """A run per training/fine-tuning node with its per-epoch curves; returns its run id."""
    from mlflow.entities import Metric, Param, RunTag

    name = f"{record['stage']} · {record['id']}"
    run = tracking.resumable_run(
        client, context["experiment_id"], {tracking.NODE_TAG: node_key(record)}, name, context["parent_id"]
    )
    mark_sweep(client, run, context["sweep_id"])
    if run.data.tags.get(tracking.COMPLETE_TAG) == "1":
        return run.info.run_id
    folder = context["results"] / node_key(record)
    history = read_json(folder / "history.json")
    metrics = [Metric(key, float(value), 0, step) for key, values in history.items() for step, value in enumerate(values, 1)]
    # the weights kept (every engine's reference) beside the best and the last epoch's
    kept = {name: record["summary"].get(key) for name, key in REFERENCE_EPOCH.items()}
    metrics += [Metric(name, float(value), 0, 0) for name, value in kept.items() if is_number(value)]
    params = [Param(k, str(v)[:PARAM_LIMIT]) for k, v in tracking.flatten(record["params"], record["stage"])]
    tags = [RunTag(k, v) for k, v in version_tags({"self": record}, context["commit"]).items()]
    client.log_batch(run.info.run_id, metrics=metrics, params=params, tags=tags)
    client.log_artifact(run.info.run_id, str(folder / "curves.png"))
    client.set_tag(run.info.run_id, tracking.COMPLETE_TAG, "1")
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def finished_evaluations(results: Path) -> List[Path]:
    """Every finished, built evaluation in the results folder (a declined one has no engine to name)."""
    from precisionflow.nodeio import declined

    return [path.parent for path in sorted(results.glob("evaluate_engine/*/node.json")) if not declined(path.parent)]


def rename_earlier_runs(client, context, this_sweep: set) -> int:
    """Runs of earlier sweeps in the same results folder named as what now sets them apart (n128
    beside a later n64): every run name in the store tells its engine apart. Returns how many."""
    marked = f"tags.`{tracking.NODE_TAG}` LIKE 'evaluate_engine/%'"
    renamed = 0
    for run in client.search_runs([context["experiment_id"]], filter_string=marked, max_results=5000):
        folder = context["results"] / run.data.tags[tracking.NODE_TAG]
        if folder.name in this_sweep or not (folder / METRICS_FILE).is_file():
            continue
        differs = context["differs"].get(folder.name, "")
        name = run_name(named_lineage(folder), read_metrics(folder), differs)
        if run.info.run_name != name:
            client.update_run(run.info.run_id, name=name)
            client.set_tag(run.info.run_id, "differs", differs)
            renamed += 1
    return renamed


def run_name(lineage, metrics, differs: str = "") -> str:
    """'int8 [entropy, n64] · local · resnet_mini-fp32-e12 2598df': what tells neighbouring runs
    apart first (precision, variant as the console names it with what was swept, target), the model
    last with its training settings whole -- MLflow's name column once cut 'resnet_mini-fp32-e'
    before the epochs."""
    found = with_differences(variant(lineage), differs)
    model, _, digest = lineage["train_model"]["id"].rpartition("-")
    named = metrics["precision"] + (f" [{found}]" if found else "")
    return f"{named} · {metrics['target']} · {model} {digest[:6]}"


def log_child(client, context, eval_dir: Path) -> bool:
    """Log one engine's run unless a complete logging of it exists; True if logged now."""
    from mlflow.entities import Metric, Param, RunTag

    lineage = named_lineage(eval_dir)
    metrics = read_metrics(eval_dir)
    differs = context["differs"].get(eval_dir.name, "")
    name = run_name(lineage, metrics, differs)
    run = tracking.resumable_run(
        client, context["experiment_id"], {tracking.NODE_TAG: node_key(lineage["evaluate_engine"])}, name, context["parent_id"]
    )
    mark_sweep(client, run, context["sweep_id"])
    if run.info.run_name != name:  # a later sweep beside it named what differs: the run's name says it too
        client.update_run(run.info.run_id, name=name)
    if differs:
        client.set_tag(run.info.run_id, "differs", differs)
    if run.data.tags.get(tracking.COMPLETE_TAG) == "1":  # a run logged before engines were models gets its model once
        engine_models.log_model(client, context, run.info.run_id, lineage, metrics, name)
        return False
    run_id = run.info.run_id
    client.log_batch(run_id, params=[Param(k, v) for k, v in child_params(lineage).items()])
    verdict = context["verdicts"].get(node_key(lineage["evaluate_engine"]), {})
    evaluation = Evaluation.of(lineage["evaluate_engine"]["params"])
    values = {
        **child_metrics(metrics, context["ratios"].get(engine_key(eval_dir)), evaluation.timed),
        **graph_metrics(lineage),
        **verdict_metrics(verdict),
        **{key: float(value) for key, value in context["declared"].get(engine_key(eval_dir), {}).items() if is_number(value)},
    }
    role = blank_reason(evaluation, metrics["precision"])
    if role == "ref":
        values.setdefault("accuracy_change_points", 0.0)  # the reference against itself, drawn at the origin's height
    values[CHART_X], charted = chart_x(values, role)
    training_runs = {
        f"training_run.{name}": log_training(client, context, record)
        for name, record in lineage.items()
        if record["stage"] in TRAINING_STAGES
    }
    client.log_batch(
        run_id,
        metrics=[Metric(k, v, 0, 0) for k, v in values.items()],
        tags=[
            RunTag(k, v)
            for k, v in {
                **training_runs,
                **child_tags(lineage, metrics, context["commit"]),
                **ratio_device_tags(context["ratios"].get(engine_key(eval_dir))),
                **verdict_tags(verdict),
                "on_chart": charted,
            }.items()
        ],
    )
    for artifact in artifacts(eval_dir, lineage) + trt_caches(
        lineage, context["results"], context["out"], context["tensorrt_version"]
    ):
        client.log_artifact(run_id, str(artifact))
    client.set_tag(run_id, "model_id", engine_models.log_model(client, context, run_id, lineage, metrics, name))
    client.set_tag(run_id, tracking.COMPLETE_TAG, "1")
    client.set_terminated(run_id)
    return True


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def change_interval(drop: Dict[str, Any]) -> Dict[str, float]:
    """The interval of accuracy_change_points (change = -drop: its low end is the drop's high end)."""
    if drop.get("low") is None or drop.get("high") is None:
        return {}
    return {"accuracy_change_low": round(0.0 - drop["high"], 2) + 0.0, "accuracy_change_high": round(0.0 - drop["low"], 2) + 0.0}


# Where an engine run sits on the trade-off chart's x axis, and why (tracking.TRADE_OFF_AXES).
CHART_X = "x_fp32_charted"


def chart_x(values: Dict[str, float], role: str) -> Tuple[float, str]:
    """(x, what it is): the ratio measured side by side; 1.0 for the fp32 reference (its ratio to
    itself); 0.0 -- the chart's "not timed" edge -- where no ratio was measured, saying why."""
    if "x_fp32_bmax" in values:
        return values["x_fp32_bmax"], "measured side by side with the fp32 engine"
    if role == "ref":
        return 1.0, "the fp32 reference: 1.0 by definition"
    why = {"sim": "a simulation of TensorRT on this CPU", "twin": "int8_qat's fp32 twin"}.get(role, "no ratio job ran")
    return 0.0, f"not timed ({why}): drawn at x = 0"


def verdict_metrics(verdict: Dict[str, Any]) -> Dict[str, float]:
    """The accuracy change against the reference the budget reads, with its interval (points)."""
    found: Dict[str, float] = {}
    if verdict.get("drop"):
        found.update(
            {
                "top1_drop_points": verdict["drop"]["drop"],
                # the chart's y axis and the runs view's column: signed, up = better, to 0.01 point
                "accuracy_change_points": round(0.0 - verdict["drop"]["drop"], 2) + 0.0,
                # its interval with the same sign, rounded as the change is (the drop's own stays raw)
                **change_interval(verdict["drop"]),
                "top1_drop_low": verdict["drop"]["low"],
                "top1_drop_high": verdict["drop"]["high"],
                "top1_drop_p_value": verdict["drop"]["p_value"],
            }
        )
    for tag, figures in (verdict.get("per_condition") or {}).items():  # each condition's figure and interval
        name = "drop" if "drop" in figures else "spurious_per_image"
        found.update(
            {f"cond.{tag}.{name}": figures[name], f"cond.{tag}.low": figures["low"], f"cond.{tag}.high": figures["high"]}
        )
        # beside the judged figure: the agreement with fp32 (classification), mAP@.5 (detection)
        found.update({f"cond.{tag}.{extra}": figures[extra] for extra in ("agreement", "map50") if extra in figures})
    # The ratios as measured, as the console shows them (a row that ran fp32's kernels included: its
    # graph may still cost time); an end of an interval that was not measured is not logged.
    if verdict.get("speed"):  # the ratio the verdict read (at the budget's speedup_at), beside its interval
        speed = verdict["speed"]
        found.update({"x_fp32_verdict": speed["geomean"], "x_fp32_low": speed["low"], "x_fp32_high": speed["high"]})
    if verdict.get("server"):  # the Server rate within the latency bound over the fp32 engine's
        server = verdict["server"]
        found.update({"x_server": server["geomean"], "x_server_low": server["low"], "x_server_high": server["high"]})
    found = {name: value for name, value in found.items() if value is not None}
    base = verdict.get("vs_base_fp32")
    if base and base.get("drop"):
        found.update(
            {
                "top1_drop_vs_base_fp32": base["drop"]["drop"],
                "top1_drop_vs_base_fp32_low": base["drop"]["low"],
                "top1_drop_vs_base_fp32_high": base["drop"]["high"],
            }
        )
    return found


def verdict_tags(verdict: Dict[str, Any]) -> Dict[str, str]:
    if not verdict:
        return {}
    tags = {"verdict": verdict["verdict"], "judged_against": verdict["judged_against"]}
    if verdict.get("vs_base_fp32"):
        tags["qat_twin"] = verdict["judged_against"]  # int8_qat's reference: its fine-tune run in fp32
    if verdict.get("worst_condition"):
        tags["worst_condition"] = str(verdict["worst_condition"][0])
    reasons = verdict["breaches"] + verdict["undecided"]
    if reasons:
        tags["verdict_reasons"] = "; ".join(reasons)[:5000]
    return tags


def log_parent(client, experiment_id: str, sweep_id: str, params: Dict[str, Any], report_dir: Path):
    """The sweep's run: the overrides that made it and its summary table."""
    parent = tracking.resumable_run(client, experiment_id, {tracking.SWEEP_TAG: sweep_id}, f"sweep · {sweep_id}")
    if parent.data.tags.get(tracking.COMPLETE_TAG) != "1":
        client.set_tag(parent.info.run_id, "overrides", " ".join(params["overrides"]) or "(defaults)")
        for name in ("summary.csv", "summary.txt", "report.html", "verdicts.json", "per_class.csv"):
            client.log_artifact(parent.info.run_id, str(report_dir / name))
        client.log_artifacts(parent.info.run_id, str(report_dir / "figures"), "figures")
        # complete before any child is logged under it: a later resume never deletes a parent with children
        client.set_tag(parent.info.run_id, tracking.COMPLETE_TAG, "1")
    return parent


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    eval_dirs, speed_dirs, _ = split_inputs(inputs)
    results = eval_dirs[0].parent.parent
    uri = tracking.resolve_uri(params["uri"], results)
    experiment_id = tracking.init_store(uri, params["experiment"], results)
    client = tracking.client_for(uri)
    # The sweep is identified by the set of engines it evaluated: the same sweep finds its parent run again.
    sweep_id = hashlib.sha256(" ".join(sorted(path.name for path in eval_dirs)).encode()).hexdigest()[:12]
    parent = log_parent(client, experiment_id, sweep_id, params, inputs["report"])
    context = {
        "experiment_id": experiment_id,
        "parent_id": parent.info.run_id,
        "sweep_id": sweep_id,
        "commit": tracking.git_commit(),
        "results": results,
        "out": out,
        "ratios": ratios_by_engine(speed_dirs),
        "declared": declared_by_engine(inputs, params.get("figures", {})),  # a measuring stage's own (flow.Stage.figures)
        # what tells each engine apart from every other in the results folder (earlier sweeps too):
        # MLflow holds them all, so its names are told apart across sweeps, not only within one
        "differs": differences_of(finished_evaluations(results)),
        "tensorrt_version": params["tensorrt_version"],
        "verdicts": {entry["node"]: entry for entry in read_json(inputs["report"] / "verdicts.json")},
    }
    logged = sum(log_child(client, context, path) for path in eval_dirs)
    renamed = rename_earlier_runs(client, context, {path.name for path in eval_dirs})
    client.set_terminated(parent.info.run_id)
    # the view sorts by top-1 while the store holds classification runs, by mAP when only detection
    classifies = client.search_runs([experiment_id], filter_string="metrics.top1 >= 0", max_results=1)
    engine_runs = client.search_runs([experiment_id], filter_string=tracking.ENGINE_RUNS_FILTER, max_results=5000)
    not_drawn = sum("accuracy_change_points" not in run.data.metrics for run in engine_runs)
    tracking.share_view(client, experiment_id, sort_metric="top1" if classifies else "map", not_drawn=not_drawn)
    marked = f"tags.`{tracking.SWEEP_TAG}.{sweep_id}` = '1' and tags.`{tracking.NODE_TAG}` LIKE 'evaluate_engine/%'"
    children = [run.info.run_id for run in client.search_runs([experiment_id], filter_string=marked, max_results=50)]
    models = client.search_logged_models([experiment_id], filter_string=f"tags.`{engine_models.ENGINE_TAG}` != ''")
    return {
        "tracking_uri": uri,
        "experiment_id": experiment_id,
        "logged_models": len(models),  # every engine of the experiment, this sweep's and earlier ones
        "parent_run_id": parent.info.run_id,
        "sweep_id": sweep_id,
        "children": len(eval_dirs),
        "children_logged_now": logged,
        "earlier_runs_renamed": renamed,  # runs of earlier sweeps whose names now say what differs
        "engine_runs": children,  # the engine runs this sweep logged
    }
