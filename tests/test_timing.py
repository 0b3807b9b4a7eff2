import pytest

from precisionflow import timing


def test_percentile_follows_trtexec_rule():
    values = list(range(1, 101))  # 1..100
    # trtexec: sorted[max(N-1-int((1-p/100)*N), 0)]
    assert timing.percentile(values, 50) == 50
    assert timing.percentile(values, 99) == 99
    assert timing.percentile(values, 90) == 90
    assert timing.percentile([5.0], 99) == 5.0
    assert timing.percentile(list(range(1, 11)), 99) == 10


def test_summarize_reports_throughput_in_samples():
    stats = timing.summarize([0.01] * 10, batch_size=8)
    assert stats["mean_ms"] == pytest.approx(10.0)
    assert stats["throughput_sps"] == pytest.approx(800.0)
    assert stats["iterations"] == 10


def test_time_runs_honours_minimum_iterations():
    calls = []
    latencies = timing.time_runs(lambda: calls.append(1), warmup_s=0.0, duration_s=0.0, min_iterations=25)
    assert len(latencies) == 25
    assert len(calls) >= 26  # at least one warm-up call
