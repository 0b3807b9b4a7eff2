"""Paired accuracy statistics and the three verdicts (stats.py), against known binomial values."""

import numpy as np
import pytest
from scipy.stats import binomtest

from precisionflow import stats


@pytest.mark.parametrize("successes,n", [(0, 10), (7, 20), (144, 144), (130, 144), (1, 450)])
def test_wilson_matches_scipy(successes, n):
    expected = binomtest(successes, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert stats.wilson(successes, n, confidence=0.95) == pytest.approx((expected.low, expected.high), abs=1e-12)


@pytest.mark.parametrize("b,c", [(0, 0), (9, 2), (3, 1), (0, 7), (25, 25)])
def test_mcnemar_exact_is_the_binomial_test_of_the_discordant_pairs(b, c):
    expected = 1.0 if b + c == 0 else binomtest(b, b + c, 0.5).pvalue
    assert stats.mcnemar_exact_p(b, c) == pytest.approx(expected)


def test_drop_counts_only_discordant_pairs_and_keeps_a_width_when_nothing_flips():
    reference = np.array([True] * 100 + [False] * 44)
    drop = stats.paired_drop(reference, reference.copy(), confidence=0.95)
    assert (drop.b, drop.c, drop.drop, drop.n) == (0, 0, 0.0, 144)
    # no image flipped on 144 images does not show a zero drop: about 3.8 / n either way
    assert drop.low < -1.0 and 1.0 < drop.high < 3.5
    assert drop.per_image_step == pytest.approx(100 / 144)
    engine = reference.copy()
    engine[:3] = False  # three images lost
    engine[120] = True  # one gained
    lost = stats.paired_drop(reference, engine, confidence=0.95)
    assert (lost.b, lost.c) == (3, 1) and lost.drop == pytest.approx(200 / 144)
    assert lost.low < lost.drop < lost.high


def test_interval_covers_the_true_drop_about_95_percent_of_the_time():
    rng = np.random.default_rng(7)
    true_drop, hits, trials = 100 * (0.85 * 0.05 - 0.15 * 0.05), 0, 1500
    for _ in range(trials):
        reference = rng.random(144) < 0.85
        engine = np.where(rng.random(144) < 0.05, ~reference, reference)
        found = stats.paired_drop(reference, engine, confidence=0.95)
        hits += found.low <= true_drop <= found.high
    assert 0.93 <= hits / trials <= 0.975


def test_three_verdicts():
    assert stats.verdict_at_most(-0.5, 0.8, 1.0) == stats.PASS
    assert stats.verdict_at_most(1.2, 4.0, 1.0) == stats.FAIL
    assert stats.verdict_at_most(-0.7, 2.8, 1.0) == stats.UNDECIDED
    assert stats.verdict_at_least(0.995, 1.0, 0.99) == stats.PASS
    assert stats.verdict_at_least(0.90, 0.985, 0.99) == stats.FAIL
    assert stats.verdict_at_least(0.985, 0.999, 0.99) == stats.UNDECIDED


def test_undecided_on_a_small_split_becomes_decided_on_a_larger_one():
    # The same rates (2% of images lost, 0.5% gained: a 1.5-point drop) against a 3-point budget.
    small = stats.drop_from_counts(both=170, b=4, c=1, neither=25, confidence=0.95)
    assert stats.verdict_at_most(small.low, small.high, 3.0) == stats.UNDECIDED
    needed = stats.images_to_decide_drop(small, 3.0)
    assert needed is not None and needed > small.n
    scale = needed / small.n
    large = stats.drop_from_counts(round(170 * scale), round(4 * scale), round(1 * scale), round(25 * scale), confidence=0.95)
    assert stats.verdict_at_most(large.low, large.high, 3.0) == stats.PASS
    # an estimate sitting on its budget is never decided by more images
    on_budget = stats.drop_from_counts(both=90, b=2, c=1, neither=7, confidence=0.95)
    assert stats.images_to_decide_drop(on_budget, on_budget.drop) is None


def test_resolution_of_a_split():
    assert stats.zero_flip_resolution(144, confidence=0.95) == pytest.approx(100 * 3.8415 / (144 + 3.8415), rel=1e-3)
    assert stats.zero_flip_resolution(450, confidence=0.95) < 1.0 < stats.zero_flip_resolution(144, confidence=0.95)


def test_bootstrap_mean_interval_contains_the_mean_and_narrows_with_more_images():
    rng = np.random.default_rng(3)
    few, many = rng.poisson(0.2, 50), rng.poisson(0.2, 5000)
    low, high = stats.bootstrap_mean(few, confidence=0.95)
    assert low <= few.mean() <= high
    wide, narrow = high - low, np.subtract(*stats.bootstrap_mean(many, confidence=0.95)[::-1])
    assert narrow < wide / 4


def test_no_interval_has_a_confidence_of_its_own():
    """Every interval takes the confidence it is asked for (evaluate.confidence, passed down): none
    defaults to 95% behind a caller's back."""
    import inspect

    from precisionflow.quant import mixed

    for function in [*vars(stats).values(), mixed.search]:
        if inspect.isfunction(function) and "confidence" in inspect.signature(function).parameters:
            parameter = inspect.signature(function).parameters["confidence"]
            assert parameter.default is inspect.Parameter.empty, function.__name__
