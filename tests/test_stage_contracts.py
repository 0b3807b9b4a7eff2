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
