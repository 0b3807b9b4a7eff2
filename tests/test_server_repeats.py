"""The Server search's repeats (issue 60, item 3 and 4), on constructed outcomes: each repeat starts
afresh, the figure is the repeats' median and every part of the record comes from that one search,
and the ratio's interval is computed at evaluate.confidence where the verdicts are."""

from pathlib import Path

from precisionflow.measure import server_search
from precisionflow.reporting import verdict_rules
from precisionflow.stages import serve_engine

SETTINGS = {
    "latency_bound_ms": 15.0,
    "percentile": 0.99,
    "min_duration_ms": 1000,
    "max_batch": 8,
    "max_wait_ms": 1.0,
    "workers": 1,
    "server_next_batch": "when_ready",
    "search_precision": 0.1,
    "search_repeats": 3,
    "seed": 1,
    "scenarios": ["SingleStream", "Server"],
}


def search(rate, marker):
    return {"rate": rate, "bracket": [rate, rate and rate * 1.1], "curve": [{"marker": marker}], "at_rate": {"marker": marker}}


def test_the_figure_is_the_median_search_and_its_whole_record():
    combined = server_search.combined_searches([search(1673.0, "low"), search(12064.0, "mid"), search(13000.0, "high")])
    assert combined["rate"] == 12064.0 and combined["curve"] == [{"marker": "mid"}] and combined["at_rate"]["marker"] == "mid"
    assert combined["bracket"] == [12064.0, 12064.0 * 1.1] and combined["chosen"] == "search 2 of 3 (the median by rate)"
    assert [each["rate"] for each in combined["repeats"]] == [1673.0, 12064.0, 13000.0]


def test_one_search_that_found_nothing_does_not_withhold_the_median():
    combined = server_search.combined_searches([search(None, "none"), search(9000.0, "a"), search(9500.0, "b")])
    assert combined["rate"] == 9000.0 and combined["at_rate"]["marker"] == "a"
    most_failed = server_search.combined_searches([search(None, "x"), search(None, "y"), search(9500.0, "b")])
    assert most_failed["rate"] is None and most_failed["why"].startswith("2 of 3 searches found no valid rate")


def test_a_repeat_starts_afresh_not_from_the_last_answer(monkeypatch, tmp_path):
    starts = []
    answers = iter([100.0, 900.0, 950.0])

    def fake_search(run, single, settings, start=None, ceiling=None):
        starts.append(start)
        return search(next(answers), "x")

    monkeypatch.setattr(serve_engine, "server_search", fake_search)
    side = serve_engine.ServedSide(
        {1: None, 2: None, 4: None, 8: None}, {1: 0.001, 2: 0.0012, 4: 0.0015, 8: 0.002}, SETTINGS, Path(tmp_path)
    )
    side.offline_rate, side.found["SingleStream"] = 1000.0, {}
    for index in range(3):
        side.search_server(index)
    assert starts == [800.0, 800.0, 800.0]  # 0.8x Offline each time: the first repeat's 100/s bounds nothing
    side.server_answer()
    assert side.found["Server"]["rate"] == 900.0


def test_the_ratio_interval_follows_the_configured_confidence():
    ratio = {"geomean": 1.5, "pairs": 3, "per_pair": [1.45, 1.5, 1.55]}
    at95, at99 = verdict_rules.server_ratio_at(ratio, 0.95), verdict_rules.server_ratio_at(ratio, 0.99)
    assert at99["low"] < at95["low"] < 1.5 < at95["high"] < at99["high"] and at99["confidence"] == 0.99


def test_too_few_identical_or_disagreeing_pairs_give_no_verdict():
    served = {
        "settings": {"latency_bound_ms": 15.0},
        "results": {"engine": {"Server": {"rate": 12000.0}}, "fp32": {"Server": {"rate": 8000.0}}},
    }
    for pairs, reason in (([1.5], "fewer than"), ([1.5, 1.5], "same ratio"), ([5.79, 1.61], "disagree")):
        checked = verdict_rules.server_check(
            {**served, "server_ratio": {"geomean": 1.5, "pairs": len(pairs), "per_pair": pairs}}, 1.1, True, 0.95
        )
        assert checked["verdict"] == "UNDECIDED" and reason in checked["text"], checked


def test_the_batch_1_rule_reads_the_configured_percentile():
    single = {"percentiles_ns": {"0.9": 10e6, "0.99": 20e6}, "mean_ns": 5e6}
    never_called = lambda *args, **kwargs: (_ for _ in ()).throw(AssertionError("no run expected"))  # noqa: E731
    at_p99 = server_search.server_search(never_called, single, SETTINGS)
    assert at_p99["rate"] is None and at_p99["batch1_over_bound"] and "p99 is 20.00 ms" in at_p99["why"]
    runs = []

    def run(scenario, rate, duration_ms=None):
        runs.append(rate)
        return {"valid": rate < 50}

    at_p90 = server_search.server_search(run, single, {**SETTINGS, "percentile": 0.9})
    assert runs and not at_p90.get("batch1_over_bound")  # p90 (10 ms) is within 15 ms: the search ran
