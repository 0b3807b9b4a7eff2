"""No PASS without evidence, no exception where UNDECIDED belongs (issue 54): each case here PASSed
or raised before the verdict rules stated their minimum evidence."""

import math

import pytest

from precisionflow import stats
from precisionflow.reporting import budget, verdict_lines, verdict_rules


def test_a_map_drop_needs_its_minimum_resamples():
    one = verdict_rules.map_drop_check(10.0, [10.0], 2.0, 0.95, "mAP")  # a +10-point drop once PASSed on one resample
    two = verdict_rules.map_drop_check(10.0, [10.0, 10.0], 2.0, 0.95, "mAP")
    for found in (one, two):
        assert found["verdict"] == stats.UNDECIDED and "fewer than the 1000" in found["text"]
    enough = verdict_rules.map_drop_check(10.0, [9.0 + i / 1000 for i in range(1000)], 2.0, 0.95, "mAP")
    assert enough["verdict"] == stats.FAIL


def test_a_nan_drop_is_undecided():
    found = verdict_rules.map_drop_check(math.nan, [0.0] * 1000, 2.0, 0.95, "mAP")
    assert found["verdict"] == stats.UNDECIDED and "non-finite" in found["text"]
    resampled_nan = verdict_rules.map_drop_check(0.0, [math.nan] * 1000, 2.0, 0.95, "mAP")
    assert resampled_nan["verdict"] == stats.UNDECIDED


def test_identical_rounds_are_no_interval():
    found = verdict_rules.speed_check({"geomean": 2.0, "rounds": [2.0, 2.0]}, 1.2, "bmax", 0.95, True)
    assert found["verdict"] == stats.UNDECIDED and "zero-width" in found["text"]  # once PASS [2.00, 2.00]


def test_speed_of_one_round_has_no_interval_and_is_never_named_fastest():
    one = budget.speed_of({"geomean": 5.0, "rounds": [5.0]}, 0.95)
    assert one["low"] is None and one["high"] is None
    measured = budget.speed_of({"geomean": 2.0, "rounds": [1.9, 2.0, 2.1]}, 0.95)
    ranking = verdict_rules.fastest([{**one, "name": "lucky"}, {**measured, "name": "measured"}])
    assert ranking == {"winner": {**measured, "name": "measured"}}


@pytest.mark.parametrize(
    "call",
    [
        lambda: verdict_rules.share_check(0, 0, 0.99, 0.95, "agreement"),
        lambda: verdict_rules.mean_check(None, 0.0, 0.1, 0.95, "spurious boxes"),
        lambda: verdict_rules.mean_check([0.0, math.nan], 0.0, 0.1, 0.95, "spurious boxes"),
        lambda: verdict_rules.speed_check({"geomean": 2.0, "rounds": None}, 1.2, "bmax", 0.95, True),
        lambda: verdict_rules.speed_check({"rounds": [math.nan, math.inf, -1.0]}, 1.2, "bmax", 0.95, True),
        lambda: verdict_rules.server_check({"settings": {}, "results": {"engine": {"Server": {"rate": 10}}}}, 1.0, True, 0.95),
        lambda: verdict_rules.drop_check(stats.drop_from_counts(0, 0, 0, 0, confidence=0.95), 1.0, "top-1 drop"),
    ],
    ids=["share-0-of-0", "mean-none", "mean-nan", "rounds-none", "no-usable-round", "server-no-ratio", "drop-no-images"],
)
def test_missing_or_malformed_inputs_are_undecided_with_a_reason(call):
    found = call()
    assert found["verdict"] == stats.UNDECIDED and found["text"]


def test_a_qat_budget_on_a_row_without_qat_is_named_and_never_passes_alone():
    metrics = {"top1": 0.9, "agreement": 1.0, "flipped": 0, "test_images": 100}
    limits = {key: None for key in budget.BUDGET_KEYS} | {"min_qat_agreement": 0.99, "speedup_at": "bmax", "confidence": 0.95}
    found = budget.checks(metrics, metrics, limits, {}, None)
    assert found == [verdict_rules.not_applied("min_qat_agreement", "this engine was not built from a QAT model")]
    assert verdict_rules.overall(found) == verdict_rules.NO_BUDGET  # once: PASS with no QAT check at all
    assert "min_qat_agreement not applied" in verdict_lines.format_verdicts(
        [
            {
                "verdict": "no budget",
                "precision": "int8",
                "target": "local",
                "ran": "int8",
                "accuracy_name": "top-1",
                "accuracy": 0.9,
                "drop_points": 0.0,
                "drop": None,
                "agreement": 1.0,
                "extra": "",
                "node": "n",
                "model": "m",
                "checks": found,
                "breaches": [],
                "undecided": [],
            }
        ]
    )


def test_served_answers_are_held_against_the_evaluated_predictions(tmp_path):
    """The serve stage's AccuracyOnly answers were computed in every job and read by nothing."""
    import numpy as np

    from precisionflow.reporting.compare import PER_SAMPLE_FILE

    np.savez(tmp_path / PER_SAMPLE_FILE, predictions=np.array([1, 0, 2, 2, 1]), labels=np.array([1, 0, 2, 1, 1]))

    def served(answers):
        return {"results": {"engine": {"AccuracyOnly": {"served_predictions": answers}}}}

    assert budget.served_against_evaluated(tmp_path, served([1, 0, 2, 2])) is None
    found = budget.served_against_evaluated(tmp_path, served([1, 0, 0, 2]))
    assert found["verdict"] == stats.FAIL and "1 of 4" in found["text"]
    assert budget.served_against_evaluated(tmp_path, None) is None


def test_a_serve_node_that_answers_otherwise_fails():
    from precisionflow.errors import StageError
    from precisionflow.stages.serve_engine import refuse_wrong_answers

    refuse_wrong_answers({"images": 4, "answered": 4, "same_predictions": 4})
    with pytest.raises(StageError, match="different class than the engine run directly on 1 of 4"):
        refuse_wrong_answers({"images": 4, "answered": 4, "same_predictions": 3, "max_abs_diff": 0.5})
    with pytest.raises(StageError, match="answered 3 of 4"):
        refuse_wrong_answers({"images": 4, "answered": 3})


def test_verdict_lines_name_what_sets_a_row_apart():
    """After a calibration sweep two int8 budget lines differed only in their ratio: which was
    entropy and which minmax was said nowhere."""
    rows = [
        {
            "verdict": "PASS",
            "precision": "int8",
            "variant": method,
            "target": "local",
            "ran": "int8 9/10",
            "accuracy_name": "top-1",
            "accuracy": 0.99,
            "drop_points": 0.0,
            "drop": None,
            "agreement": 1.0,
            "extra": "",
            "node": f"evaluate_engine/int8-{method}",
            "model": "m",
            "checks": [],
            "breaches": [],
            "undecided": [],
        }
        for method in ("entropy", "minmax")
    ]
    text = verdict_lines.format_verdicts(rows)
    assert "int8 [entropy]" in text and "int8 [minmax]" in text
    # the report's verdict table names them the same way
    from precisionflow.reporting.report_pages import verdict_rows

    cells = verdict_rows([{**row, "worst_class": None, "speed": None, "timed": False} for row in rows])
    assert [cell["precision"] for cell in cells] == ["int8 [entropy]", "int8 [minmax]"]


def test_an_engine_slower_than_fp32_is_never_called_best():
    """int8_dynamic at 0.12x fp32 (p50 56 ms against 1.0 ms) was named the "best" engine."""
    from precisionflow.stages import report

    entry = {
        "precision": "int8_dynamic",
        "variant": "",
        "ran": "int8 9/10",
        "accuracy_name": "top-1",
        "drop_points": 0.0,
        "drop": None,
        "speedup_at": "bmax",
        "speed": {"geomean": 0.12, "low": 0.11, "high": 0.13, "rounds": 12},
    }
    line = report.ranking_line({"winner": {**entry["speed"], "entry": entry}})
    assert "slower than fp32" in line and "best" not in line
    assert "SLOWER than fp32" in verdict_lines.speed_text({**entry, "timed": True})
