"""records: the one reader of what an evaluation is and of a node's metrics.json."""

import json

import pytest

from precisionflow.errors import StageError
from precisionflow.quant import qdq
from precisionflow.records import Evaluation, read_metrics


def test_an_evaluation_reads_as_a_simulation_a_twin_or_an_engine():
    assert Evaluation.of({"precision": "int8", "simulates": qdq.TENSORRT}) == Evaluation(simulates=qdq.TENSORRT)
    assert not Evaluation.of({"simulates": qdq.TENSORRT}).timed
    twin = Evaluation.of({"precision": "fp32", "twin_of": "finetune_model/abc"})
    assert twin.twin_of == "finetune_model/abc" and twin.timed and not twin.simulates
    # a plan written before these keys existed, or with them null, reads as a plain timed engine
    assert Evaluation.of({"precision": "fp16"}) == Evaluation.of({"simulates": None, "twin_of": None}) == Evaluation()


def test_metrics_are_read_or_refused_with_what_to_do(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps({"precision": "fp16"}))
    assert read_metrics(tmp_path) == {"precision": "fp16"}
    with pytest.raises(StageError, match=r"Expected .*metrics.json, found none.*Delete its folder"):
        read_metrics(tmp_path / "missing")
    (tmp_path / "metrics.json").write_text("[1, 2]")
    with pytest.raises(StageError, match=r"Expected a JSON object .* found list"):
        read_metrics(tmp_path)
