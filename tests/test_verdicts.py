"""Verdicts read intervals (budget.py), int8_mixed's search is not fooled by one image
(quant/mixed.py), and int8_qat is judged against its fp32 twin (plan.py, budget.py)."""

import numpy as np
import pytest

from precisionflow import stats
from precisionflow.reporting import budget
from precisionflow.reporting.compare import PER_SAMPLE_FILE
from precisionflow.config.compose import expand

BUDGET = {
    "max_top1_drop": 1.0,
    "min_agreement": None,
    "max_class_drop": None,
    "min_qat_agreement": None,
    "min_speedup": None,
    "speedup_at": "bmax",
    "confidence": 0.95,
    "accept_undecided": False,
}


def evaluation(folder, right, labels):
    """An evaluation folder holding per-image predictions: right where `right` is True."""
    folder.mkdir(parents=True)
    labels = np.asarray(labels, dtype=np.int32)
    predictions = np.where(right, labels, (labels + 1) % 2).astype(np.int32)
    np.savez(folder / PER_SAMPLE_FILE, predictions=predictions, labels=labels)
    top1 = float(np.mean(right))
    return {"top1": top1, "test_images": len(labels), "flipped": 0, "agreement": 1.0, "per_class_top1": {"a": top1, "b": top1}}


def outcomes(n, lost, gained, base_right=0.85):
    """Paired outcomes on n images: the reference right on base_right of them; the engine loses
    `lost` of those and gains `gained` of the others."""
    reference = np.arange(n) < round(base_right * n)
    engine = reference.copy()
    engine[:lost] = False
    engine[n - gained :] = True
    return reference, engine


def judged(tmp_path, n, lost, gained, limit=1.0):
    reference_right, engine_right = outcomes(n, lost, gained)
    labels = np.arange(n) % 2
    fp32 = evaluation(tmp_path / "evaluate_engine" / "fp32", reference_right, labels)
    engine = evaluation(tmp_path / "evaluate_engine" / "int8", engine_right, labels)
    return budget.judge(
        tmp_path, "evaluate_engine/int8", "evaluate_engine/fp32", engine, fp32, dict(BUDGET, max_top1_drop=limit), {}, ["a", "b"]
    )


def test_a_clear_pass_a_clear_fail_and_an_undecided(tmp_path):
    assert judged(tmp_path / "pass", 5000, 10, 8)["verdict"] == stats.PASS  # 0.04 points on 5,000 images
    failed = judged(tmp_path / "fail", 500, 40, 2)
    assert failed["verdict"] == stats.FAIL and "top-1 drop +7.60 points" in failed["checks"][0]["text"]
    undecided = judged(tmp_path / "undecided", 144, 2, 1)  # one image = 0.69 points
    assert undecided["verdict"] == stats.UNDECIDED
    text = undecided["checks"][0]["text"]
    assert "144 test images cannot tell: one image = 0.69 points" in text and "straddles the budget 1.0" in text
    assert "images would decide" in text


def test_the_same_rates_undecided_on_a_small_split_decide_on_a_large_one(tmp_path):
    # 3% lost, 0.5% gained: a 2.5-point drop against a 1-point budget
    assert judged(tmp_path / "small", 200, 6, 1)["verdict"] == stats.UNDECIDED
    assert judged(tmp_path / "large", 4000, 120, 20)["verdict"] == stats.FAIL


def test_the_drop_interval_travels_with_the_verdict(tmp_path):
    found = judged(tmp_path, 144, 3, 1)
    assert found["drop"]["b"] == 3 and found["drop"]["c"] == 1 and found["drop"]["low"] < found["drop"]["high"]


def test_evaluations_of_different_images_are_refused(tmp_path):
    from precisionflow.errors import LineageError

    evaluation(tmp_path / "a", np.ones(10, bool), np.zeros(10))
    evaluation(tmp_path / "b", np.ones(12, bool), np.zeros(12))
    with pytest.raises(LineageError, match="scored different test images"):
        budget.paired_drops(tmp_path / "a", tmp_path / "b", 0.95, ["a"])


def test_gate_fails_on_undecided_unless_accepted():
    assert budget.gate_fails({"verdict": stats.UNDECIDED, "accept_undecided": False})
    assert not budget.gate_fails({"verdict": stats.UNDECIDED, "accept_undecided": True})
    assert budget.gate_fails({"verdict": stats.FAIL, "accept_undecided": True})


def test_int8_mixed_does_not_claim_a_budget_one_image_away_from_a_large_drop():
    from precisionflow.quant import mixed

    n = 144
    labels = np.zeros(n, dtype=np.int64)
    reference = labels.copy()  # fp32 right on every image
    # Drops by ops kept in float, not monotonic (as measured on a real 8-class folder):
    # 43 kept: 1 image lost (0.69 points), 42: 9 lost (6.25), 44: none lost, 22: 7 lost (4.86).
    lost = {k: 9 for k in range(0, 43)}
    lost.update({22: 7, 43: 1, 44: 0, 45: 0})
    calls = []

    def predictions(kept):
        calls.append(kept)
        found = labels.copy()
        found[: lost[kept]] = 1
        return found

    chosen, record = mixed.choose(46, predictions, reference, labels, budget=1.0, confidence=0.95)
    assert record["budget_met"] is False and "one image = 0.69 points" in record["why_not_met"]
    assert all("low" in trial and "high" in trial for trial in record["trials"].values())
    # The bare estimate would have met it at 43 kept (0.69 <= 1.0); the interval does not.
    assert record["trials"]["45"]["drop"] == 0.0 and record["trials"]["45"]["high"] > 1.0
    # On a split large enough to resolve 1 point, the same search meets it honestly.
    big = np.zeros(4000, dtype=np.int64)
    chosen, record = mixed.choose(46, lambda kept: big.copy(), big, big, budget=1.0, confidence=0.95)
    assert record["budget_met"] is True and record["drop_interval"][1] <= 1.0


def test_the_qat_twin_is_planned_once_per_sweep_with_the_qat_fine_tune_settings(tmp_path):
    from precisionflow.pipeline.plan import build_plan

    points = expand(["precisions=[fp32,int8,int8_qat]", "calibration=entropy,minmax"], multirun=True)
    plan = build_plan(points, str(tmp_path / "results"))
    nodes = plan["nodes"]
    twins = [
        key for key, node in nodes.items() if node["stage"] == "evaluate_engine" and node["params"]["precision"] == budget.TWIN
    ]
    assert len(twins) == 1  # shared by both calibration points
    [qat_eval] = [
        key
        for key, node in nodes.items()
        if node["stage"] == "evaluate_engine"
        and node["params"]["precision"] == "int8_qat"
        and not node["params"].get("simulates")
    ]
    qat_model = nodes[qat_eval]["inputs"]["qat_model"]
    assert nodes[twins[0]]["params"]["twin_of"] == qat_model
    twin_model = nodes[
        nodes[nodes[nodes[nodes[twins[0]]["inputs"]["engine"]]["inputs"]["graph"]]["inputs"]["onnx"]]["inputs"]["model"]
    ]
    qat_settings, twin_settings = dict(nodes[qat_model]["params"]["finetune"]), dict(twin_model["params"]["finetune"])
    assert qat_settings.pop("mode") == "qat" and twin_settings.pop("mode") == "fp32"
    qat_settings.pop("exclude_layers")
    assert qat_settings == twin_settings  # same epochs, learning rate, batch size, seed
    assert twin_model["inputs"] == nodes[qat_model]["inputs"]  # same starting model, same data
    # the budget pairs int8_qat with its twin, and the twin is never a verdict of its own
    baselines = budget._fp32_of(plan)
    assert baselines[("twin",) + budget.twin_key(nodes[qat_eval])] == twins[0]


def test_no_twin_without_int8_qat(tmp_path):
    from precisionflow.pipeline.plan import build_plan

    plan = build_plan(expand(["precisions=[fp32,int8]"]), str(tmp_path / "results"))
    assert not any(node["params"].get("precision") == budget.TWIN for node in plan["nodes"].values())
