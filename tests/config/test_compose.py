import pytest

from precisionflow.config import compose
from precisionflow.errors import ConfigError


def test_default_composes_with_schema_defaults():
    [cfg] = compose.expand([])
    assert cfg["dataset"]["name"] == "digits"
    assert cfg["precisions"] == ["fp32", "fp16", "int8", "int8_qat"]
    assert cfg["calibration"]["method"] == "entropy"
    assert cfg["train"]["precision_policy"] == "fp32"


@pytest.mark.parametrize(
    "override, expected_text",
    [
        ("train.epoch=3", "train.epoch: no such key. Did you mean train.epochs"),
        ("train.epochs=abc", "could not be converted to Integer"),
        ("precisions=[fp32,fp8]", "expected one of [fp32, fp16"),
        ("calibration=kl", "calibration=kl: no such choice; choices of calibration: entropy, minmax, percentile"),
        ("calibration.method=kl", "expected one of [entropy, minmax, percentile]"),
        ("train.precision_policy=fp8", "expected one of [fp32, mixed_float16, mixed_bfloat16]"),
        ("model=resnet9000", "model=resnet9000: no such choice; choices of model:"),
        ("nosuchsection.x=1", "nosuchsection"),
        ("precisions=[fp16]", "expected fp32 among"),
        ("targets=[mars]", "not defined; known targets"),
        ("train.epochs=0", "train.epochs: expected an integer >= 1"),
    ],
)
def test_bad_configuration_is_refused_with_the_key_named(override, expected_text):
    with pytest.raises(ConfigError) as caught:
        compose.expand([override])
    assert expected_text in str(caught.value)


def test_sweep_needs_multirun():
    with pytest.raises(ConfigError, match="add -m"):
        compose.expand(["train.epochs=2,4"])


def test_sweep_expands_cartesian_product_in_order():
    points = compose.expand(["train.epochs=2,4", "train.seed=0,1,2"], multirun=True)
    assert [(p["train"]["epochs"], p["train"]["seed"]) for p in points] == [(2, 0), (2, 1), (2, 2), (4, 0), (4, 1), (4, 2)]


def test_list_values_and_sweeps_of_lists():
    points = compose.expand(["precisions=[fp32],[fp32,fp16]"], multirun=True)
    assert [p["precisions"] for p in points] == [["fp32"], ["fp32", "fp16"]]


def test_points_do_not_share_mutable_state():
    first, second = compose.expand(["train.seed=0,1"], multirun=True)
    first["model"]["filters"].append(99)
    assert 99 not in second["model"]["filters"]


def test_compose_runs_once_per_group_combination_not_per_point(monkeypatch):
    calls = []
    original = compose._compose
    monkeypatch.setattr(compose, "_compose", lambda groups: calls.append(groups) or original(groups))
    points = compose.expand(["experiment=quick", "train.seed=range(0,50)", "evaluate.duration_s=0.1,0.2"], multirun=True)
    assert len(points) == 100
    assert len(calls) == 1
    assert all(p["train"]["epochs"] == 3 for p in points)  # the preset applied to every point


def test_values_are_converted_by_the_schema():
    [cfg] = compose.expand(["evaluate.duration_s=1", "train.learning_rate=0.01"])
    assert isinstance(cfg["evaluate"]["duration_s"], float)
