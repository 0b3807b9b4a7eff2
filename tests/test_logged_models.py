"""Every engine an MLflow 3 logged model (issue 63), against a real `mlflow server`: one model per
engine with its figures keyed by model and data set (the test split, each condition's images),
nothing added by a rerun, and `search_logged_models` ranking the engines on the `dim` condition's
data set in the order of their top-1 there (slow: it starts a server)."""

import json

import numpy as np
import pytest

from precisionflow.datasets import conditions
from precisionflow.reporting import engine_models, tracking
from tests.test_mlflow_server import server  # noqa: F401 (the module's real mlflow server)

pytestmark = pytest.mark.slow

# (precision, top-1 on test, on dim's images): fp16 loses nothing, int8 loses most on dim
ENGINES = (("fp32", 0.95, 0.90), ("fp16", 0.95, 0.90), ("int8", 0.93, 0.70))


def record(stage, node_id, params=None, summary=None):
    return {"stage": stage, "id": node_id, "params": params or {}, "summary": summary or {}, "inputs": {}, "versions": {}}


def data_node(results):
    folder = results / "prepare_dataset" / "digits-abc"
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "y_test.npy", np.arange(100) % 10)
    np.save(folder / "x_test.npy", np.zeros((100, 8, 8, 1), np.uint8))
    meta = {"classes": [str(i) for i in range(10)], "input_shape": [8, 8, 1], "pixel_divisor": 16.0}
    (folder / "meta.json").write_text(json.dumps({**meta, "sizes": {"test": 100}, "storage": "memory"}))
    conditions.save(folder, "test", [["dim"] if i < 20 else [] for i in range(100)])
    return record("prepare_dataset", "digits-abc")


def engine(results, precision, top1, dim_top1):
    built = results / "build_engine" / f"{precision}-local-1"
    built.mkdir(parents=True, exist_ok=True)
    (built / "engine.json").write_text(json.dumps({"backend": "onnxruntime"}))
    (built / "engine.onnx").write_bytes(b"onnx")
    lineage = {
        "prepare_dataset": data_node(results),
        "train_model": record("train_model", "resnet_mini-fp32-e12-abc"),
        "quantize_onnx": record("quantize_onnx", f"{precision}-1", {"precision": precision}),
        "build_engine": record("build_engine", f"{precision}-local-1"),
        "evaluate_engine": record("evaluate_engine", f"{precision}-local-2"),
    }
    metrics = {
        "precision": precision,
        "target": "local",
        "top1": top1,
        "agreement": 0.99,
        "flipped": 1,
        "max_abs_logit_diff": 0.01,
        "engine": {"backend": "onnxruntime", "backend_version": "1.32.0", "device_name": "cpu", "executed": {"label": "fp32"}},
    }
    drop = 100 * (0.95 - top1)
    verdict = {
        "verdict": "PASS" if precision != "int8" else "FAIL",
        "drop": {"drop": drop, "low": drop - 1, "high": drop + 1},
        "per_condition": {"dim": {"drop": 100 * (0.90 - dim_top1), "low": 0.0, "high": 30.0, "agreement": dim_top1}},
        "speed": {"geomean": 1.5, "low": 1.4, "high": 1.6},
    }
    return lineage, metrics, verdict


def log_all(uri, results, differs=None, suffix=""):
    client = tracking.client_for(uri)
    experiment_id = tracking.init_store(uri, "models", results)
    verdicts, found = {}, []
    for precision, top1, dim_top1 in ENGINES:
        lineage, metrics, verdict = engine(results, precision, top1, dim_top1)
        verdicts[f"evaluate_engine/{precision}-local-2"] = verdict
        found.append((lineage, metrics))
    context = {
        "results": results,
        "experiment_id": experiment_id,
        "verdicts": verdicts,
        "commit": "abc",
        "differs": differs or {},
    }
    ids = []
    for lineage, metrics in found:
        run = client.create_run(experiment_id)
        run_name = f"{metrics['precision']}{suffix} · local"
        ids.append(engine_models.log_model(client, context, run.info.run_id, lineage, metrics, run_name))
    return client, experiment_id, ids


def test_each_engine_is_one_model_ranked_per_data_set(server, tmp_path):  # noqa: F811
    results = tmp_path / "results"
    client, experiment_id, ids = log_all(server, results)
    models = client.search_logged_models([experiment_id])
    assert len(models) == 3 and len(set(ids)) == 3
    model = client.get_logged_model(ids[2])
    assert model.params["precision"] == "int8" and model.tags["verdict"] == "FAIL" and model.source_run_id
    keyed = {(m.key, m.dataset_name) for m in model.metrics}
    assert {("model.top1", "test"), ("model.agreement", "test/dim"), ("model.x_fp32", None)} <= keyed
    assert all(m.dataset_digest for m in model.metrics if m.dataset_name)
    # the dim condition's data set ranks the engines as their top-1 on those images does
    [(digest, ranked)] = engine_models.ranked(client, experiment_id, "test/dim", "agreement")
    assert [m.params["precision"] for m in ranked][-1] == "int8"
    # named by what the engine is (precision, engine id), not by its neighbours; the run's name in a tag
    assert model.name == "int8 1" and model.tags["run_name"] == "int8 · local" and model.tags["differs"] == "-"
    # a rerun adds no model and no data set; a later sweep that sets int8 apart ("n128") renames the
    # run, and the model -- which MLflow cannot rename -- follows through its tags
    again = log_all(server, results, differs={"int8-local-2": "n128"}, suffix=" [n128]")[2]
    assert again == ids and len(client.search_logged_models([experiment_id])) == 3
    followed = client.get_logged_model(ids[2])
    assert followed.name == "int8 1" and followed.tags["run_name"] == "int8 [n128] · local" and followed.tags["differs"] == "n128"
    assert engine_models.ranked(client, experiment_id, "test/dim", "agreement")[0][0] == digest


def test_compare_models_reads_the_ranking_back(server, tmp_path):  # noqa: F811
    from precisionflow.reporting.mlflow_compare import compare_models

    results = tmp_path / "results"
    log_all(server, results)
    table = compare_models(server, "models", "test/dim", "agreement", "csv")
    lines = table.strip().splitlines()
    assert lines[0].startswith("test/dim (digest ") and lines[1].startswith("rank,model,precision")
    assert [line.split(",")[2] for line in lines[2:]][-1] == "int8" and len(lines) == 2 + 3
