"""Every stage module keeps the one contract the planner assembles the graph from
(precisionflow/stages/__init__.py): issue 41, a stage as one typed object a reader can follow."""

import dataclasses
import inspect

import pytest

from precisionflow.pipeline.plan import STAGES, stage_module
from precisionflow.stages import Reading


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_keeps_the_contract(stage):
    module = stage_module(stage)
    assert isinstance(module.PACKAGES, tuple) and all(isinstance(name, str) for name in module.PACKAGES)
    assert list(inspect.signature(module.run).parameters) == ["params", "inputs", "out"]
    if getattr(module, "AGGREGATES", False):
        return  # report, track_mlflow: they read the whole sweep, handed to them by the planner
    parameters = inspect.signature(module.reads).parameters
    assert list(parameters) == ["at"], f"{stage}.reads takes one Reading, found {list(parameters)}"
    assert parameters["at"].annotation is Reading
    assert hasattr(module, "checks") == hasattr(module, "check"), f"{stage}: checks() and check() come as a pair"


def test_a_reading_names_only_what_a_point_can_say():
    reading = Reading({"task": "classification"}, "cpu", {"device": "x"}, "int8")
    assert (reading.target, reading.precision, reading.placement, reading.source) == ("cpu", "int8", "tensorrt", None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        reading.target = "h200"  # frozen: a stage cannot change where it is read


def test_a_stage_that_gains_checks_or_a_preflight_is_called_at_planning(monkeypatch):
    """checks/preflight were called by stage name for three stages: one added to another stage was
    never called. The planner calls them through the contract for every stage."""
    from precisionflow.config.compose import expand
    from precisionflow.pipeline.plan import build_plan
    from precisionflow.stages import build_engine, evaluate_engine

    seen = []
    monkeypatch.setattr(build_engine, "checks", lambda at: {"max_build_seconds": 60, "target": at.target}, raising=False)
    monkeypatch.setattr(evaluate_engine, "preflight", lambda at, data: seen.append(data.split_sizes["test"]) or [], raising=False)
    plan = build_plan(expand(["precisions=[fp32]"]), "/tmp/precisionflow-contract-test")
    builds = [spec for key, spec in plan["nodes"].items() if key.startswith("build_engine/")]
    assert builds and all(spec["checks"] == {"max_build_seconds": 60, "target": "local"} for spec in builds)
    assert seen and all(size > 0 for size in seen)
