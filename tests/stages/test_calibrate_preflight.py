"""calibrate's pre-flight, read from the facts its data node states (issue 41: the checks live in
the stage that owns them, not in the planner)."""

import pytest

from precisionflow.datasets.facts import DataFacts
from precisionflow.errors import ConfigError
from precisionflow.stages import NodeContext, calibrate


def at(calibration):
    return NodeContext({"calibration": calibration})


CALIBRATION = {"split": "val", "num_samples": 64, "min_per_class": 8, "sampling": "stratified", "exclude_conditions": []}


def facts(classes=None, tags=None, val=200):
    listed = []
    made = DataFacts(
        {"train": 1000, "val": val, "test": 300},
        lambda split: listed.append(split) or classes,
        lambda split: (tags or {}).get(split),
    )
    return made, listed


def test_more_samples_than_the_split_holds_is_refused_naming_the_split():
    with pytest.raises(ConfigError, match=r"calibration.num_samples=64, but the val split has 40 images"):
        calibrate.preflight(at(CALIBRATION), facts(val=40)[0])


def test_a_class_the_sample_would_barely_see_is_a_warning_and_classes_are_listed_once():
    data, listed = facts(classes={"cat": 190, "dog": 10})
    (warning,) = calibrate.preflight(at(CALIBRATION), data)
    assert "fewer than calibration.min_per_class=8 images of 1 class(es): dog" in warning
    calibrate.preflight(at(CALIBRATION), data)
    assert listed == ["val"]  # the facts list a split's classes once, however many nodes ask


def test_an_excluded_condition_the_test_split_lacks_is_refused():
    data, _ = facts(tags={"val": {"dusk": 50}, "test": {"dusk": 30}})
    with pytest.raises(ConfigError, match="calibration.exclude_conditions"):
        calibrate.preflight(at(dict(CALIBRATION, exclude_conditions=["dawn"])), data)


def test_balanced_data_with_conditions_the_sample_covers_gives_no_warning():
    data, _ = facts(classes={"cat": 100, "dog": 100}, tags={"val": {"dusk": 100}, "test": {"dusk": 30}})
    assert calibrate.preflight(at(CALIBRATION), data) == []
