import numpy as np
import pytest

from precisionflow.measure import timing


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


def test_concurrent_streams_aggregate_throughput_of_independent_streams():
    import time as clock

    # sleep releases the GIL like an engine run does: 4 streams of 5 ms calls ~ 4 x 200/s
    stats = timing.concurrent_streams([lambda: clock.sleep(0.005)] * 4, batch_size=1, warmup_s=0.01, duration_s=0.3)
    assert stats["streams"] == 4
    assert 250 < stats["throughput_sps"] < 820  # one stream alone could not exceed 200/s
    assert 4.9 < stats["p50_ms"] < 10


def test_repeated_windows_report_spread_and_flag_noise():
    delays = iter([0.001] * 40 + [0.004] * 40 + [0.001] * 1000)
    import time as clock

    settings = {"repeats": 2, "warmup_s": 0.0, "duration_s": 0.0, "min_iterations": 40}
    stats = timing.repeated_windows(lambda: clock.sleep(next(delays)), 1, settings)
    assert len(stats["window_mean_ms"]) == 2
    assert stats["cv_percent"] > 20 and stats["noisy"] is True


class _SharedMachine:
    """A machine whose speed other jobs change between windows: each window runs at the speed of
    the moment (drawn once per pair of windows, over a 4x range, like a neighbour's job coming and
    going), so a ratio of two sides timed far apart means nothing while one timed side by side holds.
    Deterministic on purpose: a wall-clock assertion on a shared CI machine is a flaky test."""

    def __init__(self, seed=0):
        self.speeds = np.random.default_rng(seed).uniform(0.25, 1.0, size=64)
        self.windows = 0

    def side(self, work_units):
        def window(window_s):
            speed = self.speeds[self.windows // 2]  # two windows share a moment: one round of two sides
            self.windows += 1
            return work_units * speed / max(window_s, 1e-9)

        return window


def test_alternating_rounds_recover_a_known_ratio_while_the_machine_speed_changes():
    machine = _SharedMachine()
    sides = {"fast": machine.side(2.0), "slow": machine.side(1.0)}  # throughput ratio exactly 2
    measured = timing.alternating_rounds(sides, rounds=10, window_s=0.05)
    stats = timing.ratio_stats(measured["fast"], measured["slow"])
    assert len(stats["rounds"]) == 10
    assert stats["median"] == pytest.approx(2.0) and stats["cv_percent"] == pytest.approx(0.0, abs=1e-9)
    # the same windows timed one side after the other, as a naive benchmark would: far from 2
    naive = _SharedMachine()
    fast = [naive.side(2.0)(0.05) for _ in range(10)]
    slow = [naive.side(1.0)(0.05) for _ in range(10)]
    assert abs(np.median(np.array(fast) / np.array(slow)) - 2.0) > 0.2


def test_rounds_alternate_their_order():
    calls = []
    sides = {name: (lambda s, name=name: calls.append(name) or 1.0) for name in ("a", "b", "c")}
    timing.alternating_rounds(sides, rounds=2, window_s=0.0)
    assert calls == ["a", "b", "c", "c", "b", "a"]


def test_ratio_stats_flag_an_uncertain_median():
    assert not timing.ratio_stats([2.0, 2.0, 2.02], [1.0, 1.0, 1.0])["noisy"]
    noisy = timing.ratio_stats([2.0, 3.0, 1.5], [1.0, 1.0, 1.0])
    assert noisy["noisy"] and noisy["median"] == 2.0 and noisy["min"] == 1.5
    # the same round-to-round spread over four times the rounds halves the median's uncertainty
    few, many = timing.ratio_stats([2.0, 2.2] * 2, [1.0] * 4), timing.ratio_stats([2.0, 2.2] * 8, [1.0] * 16)
    assert many["median_error_percent"] == pytest.approx(few["median_error_percent"] / 2, rel=0.2)


def test_a_failing_stream_fails_the_measurement_instead_of_hanging_it():
    def broken():
        raise RuntimeError("CUDA error 700")

    with pytest.raises(RuntimeError, match="CUDA error 700"):
        timing.concurrent_streams([lambda: None, broken, lambda: None], batch_size=1, warmup_s=0.01, duration_s=0.05)


def test_device_timed_windows_report_the_device_clock_and_keep_the_host_one():
    stats = timing.repeated_windows(
        lambda: 0.002, 4, {"repeats": 2, "warmup_s": 0.0, "duration_s": 0.0, "min_iterations": 5}, device_timed=True
    )
    assert stats["clock"] == "device" and stats["mean_ms"] == pytest.approx(2.0)
    assert stats["throughput_sps"] == pytest.approx(2000) and stats["host"]["mean_ms"] < 1.0


def test_a_timing_job_knows_what_other_processes_used_while_it_timed():
    """The 1-minute load average lags (a training that just ended still counts): the report flags
    a row as timed on a shared machine from the CPU time others used during the job."""
    from precisionflow.measure import speed
    from precisionflow.reporting.report_rows import loaded

    start = {"at": 10.0, "busy_s": 100.0, "own_s": 5.0}
    alone = {"at": 20.0, "busy_s": 110.2, "own_s": 15.0}  # 10 s: we used 10 core-seconds, others 0.2
    shared = {"at": 20.0, "busy_s": 125.0, "own_s": 15.0}  # others kept 1.5 cores busy
    assert speed.other_cores(start, alone) == 0.02 and speed.other_cores(start, shared) == 1.5
    assert speed.other_cores({"at": 1.0, "own_s": 0.0}, alone) == -1.0  # no /proc/stat: unknown
    assert not loaded({"other_cores": 0.02, "loadavg_1m": 3.1, "cpu_count": 2})  # a lagging load average is not sharing
    assert loaded({"other_cores": 1.5, "loadavg_1m": 0.5, "cpu_count": 2})
    assert loaded({"other_cores": -1.0, "loadavg_1m": 3.1, "cpu_count": 2})  # unknown: the load average decides
    taken = speed.conditions()
    sum(range(200000))
    done = speed.finished(dict(taken))
    assert done["other_cores"] >= 0 and "cpu_sample" not in done
