"""docs/how-to/add-a-stage.md, proved: a toy measuring stage that is a module and a row of the flow
table, and nothing else, is placed once per engine, read by the report and MLflow, and its declared
figures reach the report's columns and the engine's MLflow metrics (issue 59)."""

import importlib.util
import json
import sys

import pytest

from precisionflow.config.compose import expand
from precisionflow.pipeline import flow, plan as planning

TOY = '''
"""toy_latency: a made-up per-engine measurement (a test's stage)."""
PACKAGES = ()


def node_params(at):
    return {"target": at.target, "precision": at.precision}


def run(params, inputs, out):
    return {"p42_ms": 1.5, "note": "made by the test"}
'''


@pytest.fixture
def toy_stage(tmp_path, monkeypatch):
    """The toy module under precisionflow.stages, and its row added to the table as a user adds it."""
    source = tmp_path / "toy_latency.py"
    source.write_text(TOY)
    spec = importlib.util.spec_from_file_location("precisionflow.stages.toy_latency", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "precisionflow.stages.toy_latency", module)
    row = flow.Stage(
        "toy_latency",
        "a made-up latency",
        {"engine": flow.ENGINE, "data": flow.DATA},
        each="engine",
        slug=lambda params, at, up: up["engine"],
        figures=("p42_ms",),
    )
    stages = flow.completed(flow.STAGES + (row,))
    monkeypatch.setattr(flow, "STAGES", stages)
    monkeypatch.setattr(flow, "BY_NAME", {stage.name: stage for stage in stages})
    monkeypatch.setattr(planning, "STAGES", tuple(stage.name for stage in stages))
    return row


def test_a_new_measuring_stage_is_its_module_and_its_row(toy_stage, tmp_path):
    plan = planning.build_plan(expand(["precisions=[fp32,fp16]"]), str(tmp_path / "results"))
    nodes = plan["nodes"]
    toys = sorted(key for key in nodes if key.startswith("toy_latency/"))
    engines = sorted(key for key in nodes if key.startswith("build_engine/"))
    assert len(toys) == len(engines) == 2  # one per engine, from the row's `each`
    assert {nodes[key]["inputs"]["engine"] for key in toys} == set(engines)
    for aggregate in ("report", "track_mlflow"):  # both read it under its own name, from the table
        fed = [role for key, node in nodes.items() if key.startswith(aggregate + "/") for role in node["inputs"]]
        assert sum(role.startswith("toy_latency") for role in fed) == 2, fed
        params = next(node["params"] for key, node in nodes.items() if key.startswith(aggregate + "/"))
        assert params["figures"] == {"toy_latency": ["p42_ms"]}  # what it shows of it, handed over by the planner


def test_its_declared_figures_reach_the_report_columns_and_mlflow_metrics(toy_stage, tmp_path):
    """The report and MLflow take what the row declares from the node's summary, by its engine."""
    from precisionflow.reporting.compare import declared_by_engine, declared_columns

    inputs = {}
    for i, engine in enumerate(["build_engine/fp32-local-aaa", "build_engine/fp16-local-bbb"]):
        folder = tmp_path / f"toy_latency-{i}"
        folder.mkdir()
        summary = {"p42_ms": 1.5 + i, "note": "not declared: not shown"}
        (folder / "node.json").write_text(json.dumps({"inputs": {"engine": engine, "data": "d"}, "summary": summary}))
        inputs[f"toy_latency{i:05d}"] = folder
    figures = planning.declared_figures()["figures"]
    found = declared_by_engine(inputs, figures)
    assert found == {
        "build_engine/fp32-local-aaa": {"toy_latency.p42_ms": 1.5},
        "build_engine/fp16-local-bbb": {"toy_latency.p42_ms": 2.5},
    }
    assert declared_columns(figures) == ["toy_latency.p42_ms"]  # summary.csv's and the page's extra column
