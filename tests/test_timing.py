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
    assert 400 < stats["throughput_sps"] < 820  # one stream alone could not exceed 200/s
    assert 4.9 < stats["p50_ms"] < 10


def test_repeated_windows_report_spread_and_flag_noise():
    delays = iter([0.001] * 40 + [0.004] * 40 + [0.001] * 1000)
    import time as clock

    settings = {"repeats": 2, "warmup_s": 0.0, "duration_s": 0.0, "min_iterations": 40}
    stats = timing.repeated_windows(lambda: clock.sleep(next(delays)), 1, settings)
    assert len(stats["window_mean_ms"]) == 2
    assert stats["cv_percent"] > 20 and stats["noisy"] is True


def _numpy_work(size=200_000):
    """Fixed single-threaded numpy work (elementwise ufuncs: no BLAS thread pool, GIL released)."""
    values = np.random.default_rng(0).random(size)
    out = np.empty_like(values)
    return lambda: np.sqrt(values, out=out).sum()


def test_alternating_rounds_recover_a_known_ratio_while_another_thread_loads_the_machine():
    import threading

    work = _numpy_work()
    twice = lambda: (work(), work())  # exactly twice the work: throughput ratio 2
    stop = threading.Event()
    load = _numpy_work(400_000)

    def background():
        while not stop.is_set():
            load()

    loader = threading.Thread(target=background, daemon=True)
    loader.start()
    try:
        sides = {"once": lambda s: timing.window_throughput(work, 1, s), "twice": lambda s: timing.window_throughput(twice, 1, s)}
        measured = timing.alternating_rounds(sides, rounds=10, window_s=0.05)
    finally:
        stop.set()
        loader.join()
    stats = timing.ratio_stats(measured["once"], measured["twice"])
    assert len(stats["rounds"]) == 10
    assert abs(stats["median"] - 2.0) <= 0.2, stats


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
    from precisionflow.stages.report import loaded

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
