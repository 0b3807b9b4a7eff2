"""Every stage module keeps the one contract the planner assembles the graph from
(precisionflow/stages/__init__.py): issue 41, a stage as one typed object a reader can follow."""

import dataclasses
import inspect

import pytest

from precisionflow.pipeline.plan import STAGES, stage_module
from precisionflow.stages import NodeContext


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_keeps_the_contract(stage):
    module = stage_module(stage)
    assert isinstance(module.PACKAGES, tuple) and all(isinstance(name, str) for name in module.PACKAGES)
    assert list(inspect.signature(module.run).parameters) == ["params", "inputs", "out"]
    if getattr(module, "AGGREGATES", False):
        return  # report, track_mlflow: they read the whole sweep, handed to them by the planner
    parameters = inspect.signature(module.node_params).parameters
    assert list(parameters) == ["at"], f"{stage}.node_params takes one NodeContext, found {list(parameters)}"
    assert parameters["at"].annotation is NodeContext
    assert hasattr(module, "limits") == hasattr(module, "check"), f"{stage}: limits() and check() come as a pair"


def test_a_reading_names_only_what_a_point_can_say():
    reading = NodeContext({"task": "classification"}, "cpu", {"device": "x"}, "int8")
    assert (reading.target, reading.precision, reading.placement, reading.source) == ("cpu", "int8", "tensorrt", None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        reading.target = "h200"  # frozen: a stage cannot change where it is read


def test_a_stage_that_gains_limits_or_a_preflight_is_called_at_planning(monkeypatch):
    """limits/preflight were called by stage name for three stages: one added to another stage was
    never called. The planner calls them through the contract for every stage."""
    from precisionflow.config.compose import expand
    from precisionflow.pipeline.plan import build_plan
    from precisionflow.stages import build_engine, evaluate_engine

    seen = []
    monkeypatch.setattr(build_engine, "limits", lambda at: {"max_build_seconds": 60, "target": at.target}, raising=False)
    monkeypatch.setattr(evaluate_engine, "preflight", lambda at, data: seen.append(data.split_sizes["test"]) or [], raising=False)
    plan = build_plan(expand(["precisions=[fp32]"]), "/tmp/precisionflow-contract-test")
    builds = [spec for key, spec in plan["nodes"].items() if key.startswith("build_engine/")]
    assert builds and all(spec["limits"] == {"max_build_seconds": 60, "target": "local"} for spec in builds)
    assert seen and all(size > 0 for size in seen)


def test_a_new_measuring_stage_is_a_table_row_and_a_module(monkeypatch):
    """Issue 53: the planner places measurements by walking the flow table, so a stage measured per
    engine needs its row (and the report reading it), never a planner method. Constructed: a stage
    the planner has never heard of, declared per engine with a required and an optional input."""
    import sys
    import types

    from precisionflow.config.compose import expand
    from precisionflow.pipeline import flow, plan

    probe = types.ModuleType("precisionflow.stages.energy_probe")
    probe.PACKAGES = ()
    probe.node_params = lambda at: {"joules_per": "image", "target": at.target}
    probe.run = lambda params, inputs, out: {}
    monkeypatch.setitem(sys.modules, probe.__name__, probe)
    row = flow.Stage(
        "energy_probe",
        "joules per image",
        {"engine": flow.ENGINE, "fp32_engine": flow.ENGINE},
        each="engine",
        slug=lambda params, at, up: up["engine"] + "-joules",
        optional=("fp32_engine",),
    )
    aggregates = {  # the report and MLflow read every measurement
        name: dataclasses.replace(flow.BY_NAME[name], inputs={**flow.BY_NAME[name].inputs, "energy": ("energy_probe",)})
        for name in ("report", "track_mlflow")
    }
    stages = tuple(aggregates.get(stage.name, stage) for stage in flow.STAGES) + (row,)
    monkeypatch.setattr(flow, "STAGES", stages)
    monkeypatch.setattr(flow, "BY_NAME", {stage.name: stage for stage in stages})
    monkeypatch.setattr(plan, "STAGES", tuple(stage.name for stage in stages))
    real_versions = plan.code_hash_per_stage
    monkeypatch.setattr(plan, "code_hash_per_stage", lambda: {**real_versions(), "energy_probe": "constructed"})

    built = plan.build_plan(expand(["precisions=[fp32,fp16]"]), "/tmp/precisionflow-contract-test")
    probes = {key: spec for key, spec in built["nodes"].items() if key.startswith("energy_probe/")}
    engines = [key for key in built["nodes"] if key.startswith("build_engine/")]
    assert len(probes) == len(engines) == 2  # one per engine
    assert sorted(spec["inputs"]["engine"] for spec in probes.values()) == sorted(engines)
    assert sorted(len(spec["inputs"]) for spec in probes.values()) == [1, 2]  # fp32's own engine has no fp32_engine
    assert all(spec["params"] == {"joules_per": "image", "target": "local"} for spec in probes.values())
    assert all(key.rsplit("-", 1)[0].endswith("-local-joules") for key in probes)  # named by its row's slug
    assert set(built["nodes"][built["report"]]["inputs"].values()) >= set(probes)  # the report reads them


def test_every_measuring_stage_is_read_by_the_report():
    """A stage placed per engine or target that the report does not read would never be asked for
    (the report and MLflow are the run's final targets)."""
    from precisionflow.pipeline import flow

    measuring = {stage.name for each in ("engine", "target") for stage in flow.measurements(each)}
    assert measuring and measuring <= set(flow.aggregated_roles())
    with pytest.raises(AssertionError, match="without its input"):
        flow.check_roles("compare_speed", ["data"])  # no engine: a planner bug, said as one
