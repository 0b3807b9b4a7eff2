"""Every engine an MLflow 3 logged model: its own id, params, tags and artifacts, linked to the run
that measured it, and each accuracy figure logged against the model and the data set it was
measured on -- the test split, each named condition's test images, and (int8_mixed) the selection
split its search chose on -- so the experiment's Models tab lists engines side by side and
`search_logged_models(..., datasets=[...])` ranks them on one data set (`precisionflow compare
--models`).

One model per engine node (a build_engine node: target x precision x graph), found again by its
tag: rerunning a sweep adds no model, and a data set is the same MLflow data set (same name and
digest) however often it is logged; a rebuilt engine (a new node id) is a new model.
"""

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from precisionflow.quant.mixed_record import DROP, SearchRecord

ENGINE_TAG = "precisionflow.engine"  # the engine's node key: how a model is found again
# A model's figures are logged through its run (MLflow's log_batch), so they join the run's metrics:
# under their own names, never as a second value of the run's own (a run's `agreement` stays one value).
PREFIX = "model."
MODEL_TYPE = "precisionflow-engine"
EXTERNAL_ABOVE_BYTES = 512 * 1024 * 1024  # an engine file this large stays where it is: the model points at it
TEST = "test"


def existing_model(client, experiment_id: str, engine_key: str):
    """The READY model of this engine, or None (a model a crash left unfinished is deleted: it is
    logged again whole)."""
    found = client.search_logged_models([experiment_id], filter_string=f"tags.`{ENGINE_TAG}` = '{engine_key}'")
    ready = [model for model in found if str(model.status).endswith("READY")]
    for model in found:
        if not str(model.status).endswith("READY"):
            client.delete_logged_model(model.model_id)
    return ready[0] if ready else None


def data_sets(data_dir: Path, data_id: str, selection_split: Optional[str]) -> Dict[str, Any]:
    """{name: MLflow data set}: the test split, each condition's test images ("test/<condition>"),
    and the selection split where a search chose on it. Each is a table of (image index, label,
    data node): its digest changes with the data node and with the images it holds."""
    import mlflow
    import numpy as np
    import pandas as pd

    from precisionflow.datasets import conditions
    from precisionflow.datasets.store import Split

    def table(split: str, indices) -> Any:
        labels = Split(data_dir, split).labels
        rows = pd.DataFrame({"image": np.asarray(indices, dtype=np.int64), "data_node": data_id})
        if labels is not None:
            rows["label"] = np.asarray(labels)[np.asarray(indices, dtype=np.int64)]
        return rows

    def data_set(split: str, indices, name: str):
        import warnings

        from mlflow.data.sources import LocalArtifactDatasetSource

        with warnings.catch_warnings():  # MLflow's schema hint on integer columns: these hold no missing values
            warnings.simplefilter("ignore")
            return mlflow.data.from_pandas(table(split, indices), source=LocalArtifactDatasetSource(str(data_dir)), name=name)

    size = Split(data_dir, TEST).size
    found = {TEST: data_set(TEST, range(size), TEST)}
    for tag, members in conditions.groups(conditions.load(data_dir, TEST)).items():
        found[f"{TEST}/{tag}"] = data_set(TEST, members, f"{TEST}/{tag}")
    if selection_split:
        found[selection_split] = data_set(selection_split, range(Split(data_dir, selection_split).size), selection_split)
    return found


def figures_by_data_set(
    metrics: Dict[str, Any], verdict: Dict[str, Any], search: Optional[Dict[str, Any]]
) -> Dict[str, Dict[str, float]]:
    """{data set name: {metric: value}}: the engine's own figures on the test split and its change
    against the reference the verdict reads (with the interval), each condition's, and the
    selection split's where int8_mixed chose there."""
    from precisionflow.reporting.compare import HEADLINE_METRICS, task_of

    test = {key: float(metrics[key]) for key in HEADLINE_METRICS[task_of(metrics)] if metrics.get(key) is not None}
    drop = verdict.get("drop") or {}
    if drop:
        test.update(
            {
                "drop_points": drop["drop"],
                "drop_low": drop["low"],
                "drop_high": drop["high"],
                "accuracy_change_points": -drop["drop"],
            }
        )
    found = {TEST: test}
    for tag, figures in (verdict.get("per_condition") or {}).items():
        found[f"{TEST}/{tag}"] = {key: float(value) for key, value in figures.items() if _number(value)}
    if search and search.get("trials"):
        found.update(selection_figures(SearchRecord.read(search)))
    return {name: values for name, values in found.items() if values}


def selection_figures(search: SearchRecord) -> Dict[str, Dict[str, float]]:
    """{selection split: the built graph's figure with its interval}, as the search measured it:
    a classifier's top-1 drop in points, a detector's spurious boxes per image."""
    built = search.built
    if built is None:
        return {}
    name, short = ("drop_points", "drop") if built.figure == DROP else (built.figure, "spurious")
    return {search.split: {name: float(built.value), f"{short}_low": float(built.low), f"{short}_high": float(built.high)}}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def speed_figures(verdict: Dict[str, Any]) -> Dict[str, float]:
    """The speed ratios the verdict read, with their intervals: of the engine, on no data set."""
    found = {}
    for name, key in (("speed", "x_fp32"), ("server", "x_server")):
        ratio = verdict.get(name) or {}
        found.update(
            {
                f"{key}{suffix}": ratio[end]
                for suffix, end in (("", "geomean"), ("_low", "low"), ("_high", "high"))
                if _number(ratio.get(end))
            }
        )
    return found


def artifacts_folder(engine_dir: Path, calibrations: List[Path], into: Path) -> Optional[str]:
    """Fill `into` with the engine file (unless it is too large to copy: then its path is returned
    and the model points at it), the engine JSON and the calibration caches."""
    external = None
    for path in sorted(engine_dir.iterdir()):
        if path.name == "node.json" or not path.is_file():
            continue
        if path.stat().st_size > EXTERNAL_ABOVE_BYTES:
            external = str(path.resolve())
            continue
        shutil.copy(path, into / path.name)
    for index, ranges in enumerate(calibrations):
        shutil.copy(ranges, into / f"calibration-{index}-{ranges.name}")
    return external


def model_params(lineage: Dict[str, Any], metrics: Dict[str, Any], differs: str) -> Dict[str, str]:
    """What the Models tab lists beside the model: precision, target, backend, device, placement,
    calibration, the trained model, and what sets it apart from the engines of its sweep."""
    engine = metrics["engine"]
    graph = lineage["quantize_onnx"]["params"]
    params = {
        "precision": metrics["precision"],
        "target": metrics["target"],
        "backend": engine["backend"],
        "backend_version": engine["backend_version"],
        "device": engine["device_name"],
        "placement": str((graph.get("int8") or {}).get("placement", "")),
        "calibration": str(lineage["calibrate"]["params"].get("method", "")) if "calibrate" in lineage else "",
        "model": lineage["train_model"]["id"],
        "differs": differs,
    }
    return {key: value[:500] for key, value in params.items() if value}


def model_metrics(model_id: str, speed: Dict[str, float], by_data_set: Dict[str, Dict[str, float]], sets) -> list:
    """The model's figures as MLflow metrics: speed without a data set, every other figure against
    the data set it was measured on (sets: {name: MLflow data set}; a set not logged is skipped)."""
    from mlflow.entities import Metric

    # MLflow keys a model's metric by (name, timestamp, step), not by data set: the same name on two
    # data sets needs two timestamps, one millisecond apart per data set
    now = int(time.time() * 1000)
    logged = [Metric(PREFIX + key, float(value), now, 0, model_id=model_id) for key, value in speed.items()]
    for offset, (set_name, values) in enumerate(by_data_set.items(), 1):
        data_set = sets.get(set_name)
        if data_set is None:
            continue
        logged += [
            Metric(
                PREFIX + key,
                float(value),
                now + offset,
                0,
                model_id=model_id,
                dataset_name=data_set.name,
                dataset_digest=data_set.digest,
            )
            for key, value in values.items()
        ]
    return logged


def model_name(lineage: Dict[str, Any], metrics: Dict[str, Any]) -> str:
    """'int8 [entropy] c49c91': what the engine is, from its own lineage only -- its precision, its
    variant as the console names it, its engine id's first digits. MLflow 3 cannot rename a logged
    model, so its name must not depend on the runs beside it: what sets it apart from a later
    sweep's neighbours ('n128') is the `differs` tag, and the run's current name the `run_name`
    tag, both updated at every logging. Short: the Models tab at 1400 px shows about 25 characters."""
    from precisionflow.reporting.compare import variant

    found = variant(lineage)
    digest = lineage["build_engine"]["id"].rpartition("-")[2][:6]
    return metrics["precision"] + (f" [{found}]" if found else "") + f" {digest}"


def log_model(client, context: Dict[str, Any], run_id: str, lineage: Dict[str, Any], metrics: Dict[str, Any], name: str) -> str:
    """The engine's logged model (created once, named by model_name; found again by ENGINE_TAG),
    its data sets linked to the run, and its figures logged against the model and each data set;
    `name`, the run's current name, and what sets it apart go in tags that follow every logging.
    Returns the model id."""
    from mlflow.entities import Dataset, DatasetInput, InputTag, LoggedModelInput

    from precisionflow.nodeio import node_key

    results, experiment_id = context["results"], context["experiment_id"]
    engine_key = node_key(lineage["build_engine"])
    differs = context.get("differs", {}).get(lineage["evaluate_engine"]["id"], "")
    following = {"run_name": name, "differs": differs or "-"}  # an empty tag value is refused: "-" for none
    found = existing_model(client, experiment_id, engine_key)
    if found is not None:
        client.set_logged_model_tags(found.model_id, following)
        return found.model_id
    evaluation = node_key(lineage["evaluate_engine"])
    verdict = context["verdicts"].get(evaluation, {})
    executed = metrics["engine"].get("executed", {})
    tags = {
        ENGINE_TAG: engine_key,
        "precisionflow.evaluation": evaluation,
        "verdict": verdict.get("verdict", ""),
        "ran": executed.get("label", "unknown"),
        "git_commit": context["commit"],
    }
    model = client.create_logged_model(
        experiment_id,
        name=model_name(lineage, metrics),
        source_run_id=run_id,
        tags={**{key: value for key, value in tags.items() if value}, **following},
        params=model_params(lineage, metrics, differs),
        model_type=MODEL_TYPE,
    )
    calibrations = [results / node_key(r) / "ranges.json" for r in lineage.values() if r["stage"] == "calibrate"]
    with tempfile.TemporaryDirectory(prefix="pf-model-") as folder:
        external = artifacts_folder(results / engine_key, [path for path in calibrations if path.is_file()], Path(folder))
        client.log_model_artifacts(model.model_id, folder)
    if external:  # the engine file stays where it was built: the model names it
        client.set_logged_model_tags(model.model_id, {"engine_file": external})
    search = lineage["quantize_onnx"].get("summary", {}).get("mixed_search")
    sets = data_sets(
        results / node_key(lineage["prepare_dataset"]), lineage["prepare_dataset"]["id"], (search or {}).get("split")
    )
    logged = model_metrics(model.model_id, speed_figures(verdict), figures_by_data_set(metrics, verdict, search), sets)
    for start in range(0, len(logged), 900):  # MLflow takes at most 1,000 metrics per batch
        client.log_batch(run_id, metrics=logged[start : start + 900])
    # the data set's public dictionary (name, digest, source, source_type, schema, profile) makes the
    # tracking entity: no private conversion method
    inputs = [
        DatasetInput(Dataset(**data_set.to_dict()), [InputTag("mlflow.data.context", set_name.split("/")[0])])
        for set_name, data_set in sets.items()
    ]
    client.log_inputs(run_id, datasets=inputs, models=[LoggedModelInput(model.model_id)])
    client.finalize_logged_model(model.model_id, "READY")
    return model.model_id


def ranked(client, experiment_id: str, data_set_name: str, metric: str, ascending: bool = False) -> List[Tuple[str, Any]]:
    """[(digest, [models best first])] for every data set of that name the experiment's models were
    measured on (one per data node), ranked by `metric` on it."""
    models = client.search_logged_models([experiment_id], filter_string=f"tags.`{ENGINE_TAG}` != ''")
    digests = sorted({m.dataset_digest for model in models for m in model.metrics or [] if m.dataset_name == data_set_name})
    found = []
    for digest in digests:
        chosen = {"dataset_name": data_set_name, "dataset_digest": digest}
        order = [{"field_name": f"metrics.{PREFIX}{metric}", "ascending": ascending, **chosen}]
        found.append((digest, list(client.search_logged_models([experiment_id], datasets=[chosen], order_by=order))))
    return found
