import math
import threading

import numpy as np
import pytest

from precisionflow.measure import timing
from precisionflow.stats import ratio_interval, ratio_stats


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


class _FakeClock:
    """A clock that moves only when the code under test says a call took time: the measurement's
    arithmetic is checked exactly, whatever else the machine is doing. Each thread has its own time
    (all start at 0), as concurrent streams each spend their own."""

    def __init__(self):
        self.local = threading.local()

    def __call__(self) -> float:
        return getattr(self.local, "now", 0.0)

    def advance(self, seconds: float) -> None:
        self.local.now = self() + seconds


@pytest.fixture
def fake_clock(monkeypatch):
    clock = _FakeClock()
    monkeypatch.setattr(timing, "clock", clock)
    return clock


def test_concurrent_streams_add_up_the_streams_over_their_common_window(fake_clock):
    # 4 streams of 5-ms calls over one 0.3-s window: 4 x 200 calls/s of 2 samples, each call 5 ms
    stats = timing.concurrent_streams([lambda: fake_clock.advance(0.005)] * 4, batch_size=2, warmup_s=0.01, duration_s=0.3)
    assert stats["streams"] == 4 and stats["iterations"] == 4 * 60
    assert stats["throughput_sps"] == pytest.approx(2 * 4 * 200) and stats["p50_ms"] == pytest.approx(5.0)


def test_concurrent_streams_run_their_calls_at_the_same_time():
    """Real threads: every stream's first call waits inside the call until all four are inside theirs,
    which only streams running concurrently can do (a relation that holds under any load)."""
    all_inside = threading.Barrier(4, timeout=60)
    first_calls = threading.local()

    def call():
        if not getattr(first_calls, "done", False):
            first_calls.done = True
            all_inside.wait()

    stats = timing.concurrent_streams([call] * 4, batch_size=1, warmup_s=0.0, duration_s=0.01)
    assert stats["streams"] == 4 and not all_inside.broken


def test_repeated_windows_report_spread_and_flag_noise(fake_clock):
    delays = iter([0.001] * 40 + [0.004] * 40 + [0.001] * 1000)
    settings = {"repeats": 2, "warmup_s": 0.0, "duration_s": 0.0, "min_iterations": 40}
    stats = timing.repeated_windows(lambda: fake_clock.advance(next(delays)), 1, settings)
    # each window starts with one warm-up call: window one times 39 calls of 1 ms and one of 4 ms,
    # window two (after a 4-ms warm-up call) 38 of 4 ms and two of 1 ms
    assert stats["window_mean_ms"] == [pytest.approx(1.075), pytest.approx(3.85)]
    assert stats["cv_percent"] == pytest.approx(100 * 1.3875 / 2.4625) and stats["noisy"] is True


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
    found = ratio_stats(measured["fast"], measured["slow"])
    assert len(found["rounds"]) == 10
    assert found["geomean"] == pytest.approx(2.0) and found["cv_percent"] == pytest.approx(0.0, abs=1e-9)
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


def test_ratio_stats_flag_an_uncertain_geometric_mean():
    assert not ratio_stats([2.0, 2.0, 2.02], [1.0, 1.0, 1.0])["noisy"]
    noisy = ratio_stats([2.0, 3.0, 1.5], [1.0, 1.0, 1.0])
    assert noisy["noisy"] and noisy["geomean"] == pytest.approx(9.0 ** (1 / 3)) and noisy["min"] == 1.5
    # the figure shown is the one the verdict's interval bounds: inside it, at its centre on the log scale
    low, high = ratio_interval(noisy["rounds"], 0.95)
    assert math.log(noisy["geomean"]) == pytest.approx((math.log(low) + math.log(high)) / 2, abs=1e-3)
    # the same round-to-round spread over four times the rounds halves the figure's uncertainty
    few, many = ratio_stats([2.0, 2.2] * 2, [1.0] * 4), ratio_stats([2.0, 2.2] * 8, [1.0] * 16)
    assert many["error_percent"] == pytest.approx(few["error_percent"] / 2, rel=0.2)


def test_a_failing_stream_fails_the_measurement_instead_of_hanging_it():
    def broken():
        raise RuntimeError("CUDA error 700")

    with pytest.raises(RuntimeError, match="CUDA error 700"):
        timing.concurrent_streams([lambda: None, broken, lambda: None], batch_size=1, warmup_s=0.01, duration_s=0.05)


def test_device_timed_windows_report_the_device_clock_and_keep_the_host_one(fake_clock):
    def launch():  # the host spends 0.1 ms launching; the device reports 2 ms of work
        fake_clock.advance(0.0001)
        return 0.002

    settings = {"repeats": 2, "warmup_s": 0.0, "duration_s": 0.0, "min_iterations": 5}
    stats = timing.repeated_windows(launch, 4, settings, device_timed=True)
    assert stats["clock"] == "device" and stats["mean_ms"] == pytest.approx(2.0)
    assert stats["throughput_sps"] == pytest.approx(2000) and stats["host"]["mean_ms"] == pytest.approx(0.1)


def test_a_timing_job_knows_what_other_processes_used_while_it_timed():
    """The 1-minute load average lags (a training that just ended still counts): the report flags
    a row as timed on a shared machine from the CPU time others used during the job."""
    from precisionflow.measure import speed
    from precisionflow.measure.speed import loaded

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
