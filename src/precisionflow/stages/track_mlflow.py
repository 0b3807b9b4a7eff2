"""track_mlflow: one parent run per sweep, one child run per evaluated engine (idempotent).

Child runs carry the flattened params of every upstream node, the engine's metrics, tags naming
the nodes, target, backend and versions and git commit, and the engine/metrics files as artifacts.
"""

import hashlib
from pathlib import Path
from typing import Any, Dict, List

from precisionflow import tracking
from precisionflow.compare import load_baselines, reference_model, speedups, split_inputs
from precisionflow.nodeio import ancestors, read_json

PACKAGES = ("mlflow",)
PARAM_LIMIT = 500  # characters; longer values (long lists) are cut, MLflow stores up to 6000


def child_params(lineage: Dict[str, Dict[str, Any]]) -> Dict[str, str]:
    return {key: str(value)[:PARAM_LIMIT] for stage, record in lineage.items()
            for key, value in tracking.flatten(record["params"], stage)}


def child_metrics(metrics: Dict[str, Any]) -> Dict[str, float]:
    values = {key: float(metrics[key]) for key in ("top1", "agreement", "flipped", "max_abs_logit_diff")}
    for batch, stats in metrics["speed"]["batch"].items():
        values.update({f"b{batch}_{name}": float(v) for name, v in stats.items() if isinstance(v, (int, float))})
    for count, stats in metrics["speed"]["streams"].items():
        values.update({f"streams{count}_{name}": float(v) for name, v in stats.items() if isinstance(v, (int, float))})
    engine = metrics["engine"]
    values.update({"engine_bytes": float(engine["engine_bytes"]), "build_seconds": float(engine["build_seconds"])})
    return values


def graph_metrics(lineage) -> Dict[str, float]:
    summary = lineage["quantize_onnx"]["summary"]
    return {key: float(summary[key]) for key in ("worst_sqnr_db", "quantized_nodes") if summary.get(key) is not None}


def child_tags(lineage, metrics, commit: str) -> Dict[str, str]:
    engine = metrics["engine"]
    tags = {f"node.{stage}": record["id"] for stage, record in lineage.items()}
    tags.update({"precision": metrics["precision"], "target": metrics["target"], "backend": engine["backend"],
                 "backend_version": engine["backend_version"], "device_name": engine["device_name"],
                 "git_commit": commit})
    # Package versions every upstream stage recorded (one environment runs them all, normally).
    tags.update({f"version.{pkg}": ver for record in lineage.values() for pkg, ver in record["versions"].items()})
    return tags


# Files logged with each engine's run, by the stage that wrote them.
ARTIFACTS = {
    "evaluate_engine": ("metrics.json", "flipped.csv"),
    "build_engine": ("engine.json",),
    "quantize_onnx": ("layer_error.csv", "layer_error.png"),
    "calibrate": ("calibration.trt.cache", "ranges.json"),
}


def artifacts(eval_dir: Path, lineage) -> List[Path]:
    results = eval_dir.parent.parent
    found = []
    for stage, names in ARTIFACTS.items():
        if stage in lineage:
            folder = results / stage / lineage[stage]["id"]
            found += [folder / name for name in names if (folder / name).exists()]
    return found


TRAINING_STAGES = ("train_model", "finetune_model")


def log_training(client, experiment_id: str, parent_id: str, results: Path, record: Dict[str, Any]) -> str:
    """A run per training/fine-tuning node with its per-epoch curves; returns its run id."""
    from mlflow.entities import Metric, Param

    name = f"{record['stage']}-{record['id']}"
    run, _ = tracking.get_or_create_run(client, experiment_id, {tracking.NODE_TAG: record["id"]}, name, parent_id)
    run_id = run.info.run_id
    if run.data.tags.get(tracking.COMPLETE_TAG) == "1":
        return run_id
    folder = results / record["stage"] / record["id"]
    history = read_json(folder / "history.json")
    metrics = [Metric(key, float(value), 0, step) for key, values in history.items() for step, value in enumerate(values, 1)]
    params = [Param(k, str(v)[:PARAM_LIMIT]) for k, v in tracking.flatten(record["params"], record["stage"])]
    client.log_batch(run_id, metrics=metrics, params=params)
    client.log_artifact(run_id, str(folder / "curves.png"))
    client.set_tag(run_id, tracking.COMPLETE_TAG, "1")
    client.set_terminated(run_id)
    return run_id


def log_child(client, experiment_id: str, parent_id: str, eval_dir: Path, commit: str, baselines) -> bool:
    """Log one engine's run unless an earlier, complete logging of it exists; True if logged now."""
    from mlflow.entities import Metric, Param, RunTag

    lineage = ancestors(eval_dir)
    metrics = read_json(eval_dir / "metrics.json")
    name = f"{metrics['precision']}-{metrics['target']}-{lineage['train_model']['id']}"
    run, _ = tracking.get_or_create_run(client, experiment_id, {tracking.NODE_TAG: eval_dir.name}, name, parent_id)
    if run.data.tags.get(tracking.COMPLETE_TAG) == "1":
        return False
    run_id = run.info.run_id
    client.log_batch(run_id, params=[Param(k, v) for k, v in child_params(lineage).items()])
    values = {**child_metrics(metrics), **graph_metrics(lineage)}
    baseline = baselines.get((reference_model(eval_dir), metrics["target"]))
    values.update({f"speedup_vs_tf_{key}": ratio for key, ratio in (speedups(metrics["speed"], baseline) if baseline else {}).items()})
    training_runs = {f"training_run.{stage}": log_training(client, experiment_id, parent_id, eval_dir.parent.parent, lineage[stage])
                     for stage in TRAINING_STAGES if stage in lineage}
    client.log_batch(run_id, tags=[RunTag(k, v) for k, v in training_runs.items()])
    client.log_batch(run_id, metrics=[Metric(k, v, 0, 0) for k, v in values.items()],
                     tags=[RunTag(k, v) for k, v in child_tags(lineage, metrics, commit).items()])
    for artifact in artifacts(eval_dir, lineage):
        client.log_artifact(run_id, str(artifact))
    client.set_tag(run_id, tracking.COMPLETE_TAG, "1")
    client.set_terminated(run_id)
    return True


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    eval_dirs, framework_dirs = split_inputs(inputs)
    baselines = load_baselines(framework_dirs)
    results_dir = eval_dirs[0].parent.parent
    uri = tracking.resolve_uri(params["uri"], results_dir)
    experiment_id = tracking.init_store(uri, params["experiment"], results_dir)
    client = tracking.client_for(uri)
    # The sweep is identified by the set of engines it evaluated: the same sweep finds its parent run again.
    sweep_id = hashlib.sha256(" ".join(sorted(path.name for path in eval_dirs)).encode()).hexdigest()[:12]
    parent, _ = tracking.get_or_create_run(client, experiment_id, {tracking.SWEEP_TAG: sweep_id}, f"sweep-{sweep_id}")
    commit = tracking.git_commit()
    logged = sum(log_child(client, experiment_id, parent.info.run_id, path, commit, baselines) for path in eval_dirs)
    client.set_terminated(parent.info.run_id)
    summary = {"tracking_uri": uri, "experiment_id": experiment_id, "parent_run_id": parent.info.run_id,
               "children": len(eval_dirs), "children_logged_now": logged}
    return summary
