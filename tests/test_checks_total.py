"""Every check is total and every interval contains its point (issue 61, items 2 and 3): None, NaN,
inf, out-of-range and wrongly typed inputs give UNDECIDED with the reason, never an exception and
never a PASS; a timing whose rounds' median lies outside its interval is noisy, not faster."""

import math

import pytest

from precisionflow import stats
from precisionflow.reporting import verdict_rules as rules

SERVED = {
    "settings": {"latency_bound_ms": 15.0},
    "results": {"engine": {"Server": {"rate": 12000.0}}, "fp32": {"Server": {"rate": 8000.0}}},
    "server_ratio": {"geomean": 1.5, "per_pair": [1.45, 1.5, 1.55]},
}

CASES = {
    "drop None": lambda: rules.drop_check(None, 1.0, "top-1 drop"),
    "drop, limit None": lambda: rules.drop_check(stats.drop_from_counts(90, 1, 0, 9, confidence=0.95), None, "top-1 drop"),
    "group drops with a None": lambda: rules.group_drop_checks({"c": None}, 1.0, 0.95, "class", "classes")[0],
    "group means with a None": lambda: rules.group_mean_checks({"dusk": None}, 0.5, 0.95, "spurious", "conditions")[0],
    "mean, estimate None": lambda: rules.mean_check([0, 1, 0, 2], None, 0.5, 0.95, "spurious"),
    "mean, estimate beside its series": lambda: rules.mean_check([0] * 100, 5.0, 0.5, 0.95, "spurious"),
    "share above n": lambda: rules.share_check(101, 100, 0.9, 0.95, "agreement"),
    "share below 0": lambda: rules.share_check(-1, 100, 0.9, 0.95, "agreement"),
    "share, limit a string": lambda: rules.share_check(99, 100, "0.9", 0.95, "agreement"),
    "mAP drop, limit NaN": lambda: rules.map_drop_check(0.1, [0.1] * 1000, math.nan, 0.95, "mAP"),
    "speed, bimodal rounds": lambda: rules.speed_check(
        {"geomean": 0.969, "rounds": [0.97, 10.5, 0.92, 0.85, 10.1, 0.90, 9.9, 0.95, 13.6]}, 1.0, "b1", 0.95, True
    ),
    "speed, rounds a float apart": lambda: rules.speed_check(
        {"geomean": 1.5, "rounds": [1.5, 1.5 + 1e-12]}, 1.0, "bmax", 0.95, True
    ),
    "speed, one usable round of three": lambda: rules.speed_check(
        {"geomean": 2.0, "rounds": [2.0, math.inf, None]}, 1.0, "bmax", 0.95, True
    ),
    "speed, limit None": lambda: rules.speed_check({"geomean": 2.0, "rounds": [2.0, 2.1, 1.9]}, None, "bmax", 0.95, True),
    "server rate NaN": lambda: rules.server_check(
        {**SERVED, "results": {**SERVED["results"], "engine": {"Server": {"rate": math.nan}}}}, 1.1, True, 0.95
    ),
    "server rate a string": lambda: rules.server_check(
        {**SERVED, "results": {**SERVED["results"], "engine": {"Server": {"rate": "12000"}}}}, 1.1, True, 0.95
    ),
    "server, one pair with an interval": lambda: rules.server_check(
        {**SERVED, "server_ratio": {"geomean": 1.5, "pairs": 1, "per_pair": [1.5], "low": 1.2, "high": 1.8}}, 1.1, True, 0.95
    ),
    "server, limit None": lambda: rules.server_check(SERVED, None, True, 0.95),
    "server, not a record": lambda: rules.server_check("served", 1.1, True, 0.95),
    # a truncated or hand-edited metrics.json: a part the check opens is not a mapping
    "server, results a list": lambda: rules.server_check({**SERVED, "results": []}, 1.1, True, 0.95),
    "server, results.engine a string": lambda: rules.server_check({**SERVED, "results": {"engine": "x"}}, 1.1, True, 0.95),
    "server, settings a string": lambda: rules.server_check({**SERVED, "settings": "15 ms"}, 1.1, True, 0.95),
    "server, Server a number": lambda: rules.server_check(
        {**SERVED, "results": {**SERVED["results"], "fp32": {"Server": 8000.0}}}, 1.1, True, 0.95
    ),
    "server, ratio a list": lambda: rules.server_check({**SERVED, "server_ratio": [1.5]}, 1.1, True, 0.95),
    "server, ratio figure NaN": lambda: rules.server_check(
        {**SERVED, "server_ratio": {"geomean": math.nan, "per_pair": []}}, 1.1, True, 0.95
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_bad_input_is_undecided_with_its_reason(name):
    found = CASES[name]()
    assert found["verdict"] == rules.UNDECIDED and found["text"], found
    assert "nanx" not in found["text"], found  # a bad figure is named as such, never printed as a ratio


def test_the_good_inputs_beside_them_still_decide():
    assert rules.speed_check({"geomean": 2.0, "rounds": [2.0, 2.1, 1.9]}, 1.0, "bmax", 0.95, True)["verdict"] == rules.PASS
    assert rules.server_check(SERVED, 1.1, True, 0.95)["verdict"] == rules.PASS
    assert rules.share_check(100, 100, 0.9, 0.95, "agreement")["verdict"] == rules.PASS
    dropped = rules.speed_check({"geomean": 2.0, "rounds": [2.0, 2.1, 1.9, math.inf]}, 1.0, "bmax", 0.95, True)
    assert dropped["verdict"] == rules.PASS and "1 non-finite dropped" in dropped["text"]


def test_a_speed_check_names_its_outlying_rounds_as_int8_mixed_does():
    """One outlier rule for every quoted ratio (stats.outlying_rounds): the table's check names the
    round int8_mixed's reason would name, and the unsound-rounds rule reads the same in both."""
    rounds = [2.0, 2.1, 1.9, 2.05, 1.95, 2.02, 4.5]
    found = rules.speed_check({"geomean": 2.02, "rounds": rounds}, 1.0, "bmax", 0.95, True)
    assert "; outlying: 4.50" in found["text"], found
    bimodal = [0.97, 10.5, 0.92, 0.85, 10.1, 0.90, 9.9, 0.95, 13.6]
    outside = rules.speed_check({"rounds": bimodal}, 1.0, "b1", 0.95, True)
    assert "b1 2.76x: the rounds' median 0.97x lies outside the interval [1.01, 7.55]" in outside["text"], outside


def test_the_speed_figure_is_the_rounds_geometric_mean_whatever_the_record_says():
    """The figure printed is the estimate its interval is of, computed from the rounds where the
    verdict is: a record's own figure (an older node's median, a hand-edited file) is not read."""
    found = rules.speed_check({"geomean": 0.5, "rounds": [2.0, 2.1, 1.9]}, 1.0, "bmax", 0.95, True)
    figure = stats.geometric_mean([2.0, 2.1, 1.9])
    low, high = stats.ratio_interval([2.0, 2.1, 1.9], 0.95)
    assert found["verdict"] == rules.PASS and f"bmax {figure:.2f}x [{low:.2f}, {high:.2f}]" in found["text"], found


def test_a_tight_measured_interval_is_printed_as_an_interval_not_a_certainty():
    """Rounds as tight as an H100's fp16 b128 (benchmarks/results/gpu_path_h100_10s_head) give
    [1.4803, 1.4813]: the line and the headline print as many decimals (up to 4) as keep the ends
    apart, never [1.48, 1.48], which reads as a zero-width certainty."""
    from precisionflow.reporting.budget import speed_of

    rounds = [1.4802, 1.481, 1.4806, 1.4806, 1.4814, 1.4809]
    found = rules.speed_check({"rounds": rounds}, 1.2, "bmax", 0.95, True)
    assert "bmax 1.481x [1.480, 1.481]" in found["text"], found
    shown = speed_of({"rounds": rounds}, 0.95)
    assert shown["low"] < shown["high"] and shown["geomean"] == 1.481, shown
    assert stats.interval_digits(1.01, 1.26) == 2 and stats.interval_digits(1.0, 1.0) == 4
