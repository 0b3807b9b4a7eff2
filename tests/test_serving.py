"""Serving under a latency bound (measure/serving.py, stages/serve_engine.py): the real MLPerf
LoadGen drives a system under test whose service time is known, on this CPU."""

import collections
import time

import pytest

from precisionflow.measure import server_search, serving
from precisionflow import stats
from precisionflow.reporting import verdict_rules

SETTINGS = {
    "latency_bound_ms": 20,
    "percentile": 0.99,
    "min_duration_ms": 300,
    "min_query_count": 480,
    "seed": 1,
    "samples": 64,
    "server_next_batch": "when_ready",
}


def known_service(per_batch_s: float, per_image_s: float):
    """Runners that take a known time: per_batch_s + per_image_s x the batch size."""
    return {size: (lambda size=size: time.sleep(per_batch_s + per_image_s * size)) for size in serving.powers_of_two(8)}


def make_sut(runners, limit=400):
    return lambda scenario: serving.BatchingSUT(runners, 8, 0.001, 1, 10**9 if scenario == "Offline" else limit)


def test_loadgen_single_stream_measures_the_known_service_time(tmp_path):
    found = serving.run_scenario(make_sut(known_service(0.002, 0.0)), "SingleStream", SETTINGS, tmp_path / "ss")
    # at least the 2 ms of sleep (no upper bound: a loaded machine adds its own overhead)
    assert found["valid"] and found["p50_ns"] / 1e6 >= 2.0
    assert (tmp_path / "ss" / serving.SUMMARY).is_file() and (tmp_path / "ss" / "mlperf_log_detail.txt").is_file()


def test_an_overloaded_server_run_ends_and_is_invalid(tmp_path):
    found = serving.run_scenario(make_sut(known_service(0.002, 0.0005), limit=64), "Server", SETTINGS, tmp_path / "s", rate=20000)
    # cut, not served: it ended (pytest's timeout would catch a hang) and says why
    assert found["overloaded"] and not found["valid"] and "overloaded" in found["why_invalid"]


def test_one_stall_the_percentile_absorbs_does_not_cut_the_run(tmp_path):
    """One 25-ms stall at 2,000 queries/s queues ~50 queries, more than the SUT's own limit of 32
    here: the run still ends VALID (its late queries are within the 1% a p99 allows of 6,000), where
    the limit alone cut it as overloaded (the H200's 60-s runs at p99 10-12 ms, INVALID)."""
    calls = iter(range(10**9))

    def runner():
        time.sleep(0.025 if next(calls) == 200 else 0.0002)

    runners = {size: runner for size in serving.powers_of_two(8)}
    settings = dict(SETTINGS, min_duration_ms=3000)
    assert serving.late_allowance(2000, settings) == 60
    found = serving.run_scenario(make_sut(runners, limit=32), "Server", settings, tmp_path / "stall", rate=2000)
    assert not found["overloaded"], found.get("why_invalid")
    assert found["valid"], found


def test_the_search_finds_the_largest_valid_rate_within_its_precision():
    capacity = 1234.0  # a server valid exactly up to this rate
    found = server_search.max_server_rate(lambda rate: rate <= capacity, start=50.0, precision=0.05)
    low, high = found["bracket"]
    assert low <= capacity < high and high / low <= 1.05 + 1e-9 and found["rate"] == low
    assert found["runs"][-1] == (low, True)  # the answer re-verified
    never = server_search.max_server_rate(lambda rate: False, start=50.0, precision=0.05)
    assert never["rate"] is None


def test_the_search_steps_down_when_the_answer_fails_its_re_verification():
    calls = {}

    def flaky(rate):  # valid below 1000, except the first re-check of the answer fails once
        calls[rate] = calls.get(rate, 0) + 1
        return rate <= 1000 and not (calls[rate] == 2 and rate > 900)

    found = server_search.max_server_rate(flaky, start=100.0, precision=0.05)
    assert found["rate"] < 1000 and found["runs"][-1][1]


def test_the_real_search_on_a_known_engine(tmp_path):
    """2 ms per batch + 0.5 ms per image, batches up to 8: at most ~1,300 images/s (a call never takes
    less than its sleep, whatever the load: the upper bound holds). A 100-ms p99 bound, which a loaded
    machine still holds at 50 images/s (at 20 ms, another suite on the same two cores made it fail)."""
    from precisionflow.measure.server_search import server_search

    runners = known_service(0.002, 0.0005)
    counter = iter(range(100))
    settings = dict(SETTINGS, latency_bound_ms=100)
    run = lambda scenario, rate=0.0, duration_ms=None: serving.run_scenario(  # noqa: E731
        make_sut(runners), scenario, settings, tmp_path / f"{next(counter)}", rate
    )
    single = run("SingleStream")
    found = server_search(run, single, dict(settings, search_precision=0.25))
    assert found["rate"] is not None and 50 < found["rate"] < 1600, found
    assert all(point["p99_ns"] for point in found["curve"])


def test_a_bound_below_batch_one_latency_gets_a_verdict_not_an_error():
    from precisionflow.measure.server_search import server_search

    single = {"p99_ns": 3.4e6, "percentiles_ns": {"0.99": 3.4e6}, "mean_ns": 3.0e6}
    found = server_search(lambda *a: pytest.fail("no run is needed"), single, dict(SETTINGS, latency_bound_ms=2, percentile=0.99))
    assert found["rate"] is None and found["why"] == "no rate meets p99 <= 2 ms: batch-1 p99 is 3.40 ms"


def served(engine_rates, fp32_rates, why=None, batch1_over_bound=False):
    """A serve node's record with paired searches (search i of each side ran in turn)."""
    from precisionflow.stages.serve_engine import server_ratio

    def side(rates, why=None, **extra):
        repeats = [{"rate": rate, "bracket": [rate, rate and round(rate * 1.1, 3)]} for rate in rates]
        lowest = None if None in rates else min(rates)
        return {"Server": {"rate": lowest, "bracket": repeats[0]["bracket"], "repeats": repeats, "why": why, **extra}}

    extra = {"batch1_over_bound": True} if batch1_over_bound else {}
    results = {"engine": side(engine_rates, why, **extra), "fp32": side(fp32_rates)}
    # the interval is the verdict side's, at evaluate.confidence (verdict_rules.server_ratio_at)
    ratio = verdict_rules.server_ratio_at(server_ratio(results), 0.95)
    return {"settings": {"latency_bound_ms": 15}, "results": results, "server_ratio": ratio}


def test_the_server_ratio_is_judged_by_the_noise_of_paired_searches():
    clear = served([3000, 3100, 2950], [1000, 1010, 990])
    ratio = clear["server_ratio"]
    assert ratio["pairs"] == 3 and ratio["low"] < 3.0 < ratio["high"] and ratio["high"] < 3.3, ratio
    assert verdict_rules.server_check(clear, 2.0, True, 0.95)["verdict"] == stats.PASS
    assert verdict_rules.server_check(clear, 3.0, True, 0.95)["verdict"] == stats.UNDECIDED
    assert verdict_rules.server_check(clear, 4.0, True, 0.95)["verdict"] == stats.FAIL


def test_one_search_per_side_or_identical_searches_decide_nothing():
    """One search per side once PASSed "1.10x [1.05, 1.20]" from its search brackets alone."""
    one = served([1100], [1000])
    assert one["server_ratio"]["low"] is None and "fewer than the 2" in one["server_ratio"]["why"]
    assert verdict_rules.server_check(one, 1.0, True, 0.95)["verdict"] == stats.UNDECIDED
    same = served([2000, 2000], [1000, 1000])
    assert same["server_ratio"]["low"] is None and "zero-width" in same["server_ratio"]["why"]
    assert verdict_rules.server_check(same, 1.0, True, 0.95)["verdict"] == stats.UNDECIDED


def test_no_valid_rate_is_undecided_unless_batch_one_alone_breaks_the_bound():
    missed = served([None], [1000], why="search 1 of 2 found no valid rate")
    assert verdict_rules.server_check(missed, 1.0, True, 0.95)["verdict"] == stats.UNDECIDED
    proven = served([None], [1000], why="no rate meets p99 <= 15 ms: batch-1 p99 is 20.00 ms", batch1_over_bound=True)
    found = verdict_rules.server_check(proven, 1.0, True, 0.95)
    assert found["verdict"] == stats.FAIL and "batch-1 p99 is 20.00 ms" in found["text"]
    assert verdict_rules.server_check(None, 1.0, False, 0.95) is None


def test_a_malformed_serving_record_is_undecided_not_an_exception():
    record = served([3000, 3100], [1000, 1010])
    record["server_ratio"] = {"geomean": 3.0}  # no pairs
    assert verdict_rules.server_check(record, 1.0, True, 0.95)["verdict"] == stats.UNDECIDED
    assert verdict_rules.server_check({"results": {}}, 1.0, True, 0.95)["verdict"] == stats.UNDECIDED


def test_the_serving_stage_id_covers_its_settings():
    from precisionflow.config.compose import expand
    from precisionflow.pipeline.plan import build_plan

    def serve_ids(*overrides):
        plan = build_plan(expand(list(overrides)), "/tmp/precisionflow-serving-ids")
        return {key for key in plan["nodes"] if key.startswith("serve_engine/")}

    base = serve_ids()
    assert len(base) == 4 and serve_ids("evaluate.serving.latency_bound_ms=5").isdisjoint(base)
    assert serve_ids("evaluate.serving.enabled=false") == set()


def test_one_transient_failure_does_not_trap_the_search_low():
    seen = []

    def once_flaky(rate):  # valid up to 3,000/s, but the first run at 531/s fails (as one did on the H200)
        seen.append(rate)
        return rate <= 3000 and not (round(rate) == 532 and seen.count(rate) == 1)

    found = server_search.max_server_rate(once_flaky, start=266.0, precision=0.1)
    assert found["rate"] > 2500, found


def test_the_ratio_interval_widens_when_repeated_searches_disagree():
    agreeing = served([3000, 3030], [1000, 1000])["server_ratio"]
    disagreeing = served([3000, 2000], [1000, 1400])["server_ratio"]
    assert agreeing["low"] <= 3.015 <= agreeing["high"]
    assert disagreeing["low"] < agreeing["low"] and disagreeing["high"] > agreeing["high"]


def test_a_side_with_no_valid_rate_gives_no_ratio_and_an_undecided_row():
    from precisionflow.stages.serve_engine import server_ratio

    results = {
        "engine": {"Server": {"rate": 3000, "bracket": [3000, 3300]}},
        "fp32": {"Server": {"rate": None, "bracket": [None, 17349], "why": "search 1 of 2 found no valid rate"}},
    }
    assert server_ratio(results) is None
    served_rows = {"settings": {"latency_bound_ms": 33}, "results": results, "server_ratio": None}
    assert verdict_rules.server_check(served_rows, 1.0, True, 0.95)["verdict"] == stats.UNDECIDED
    # the table's cell is never a bare blank: it names the side and the bound
    from precisionflow.reporting.report_rows import serving_columns

    cell = serving_columns(served_rows)["x_server_95"]
    assert cell == "none: the fp32 side found no valid rate within 33 ms", cell


def test_the_search_never_returns_a_rate_no_run_confirmed():
    """Valid only at the lowest rates the start never reaches again: the step-down runs out of runs
    while every run fails; that search has no answer (it once returned the last rate unconfirmed)."""
    seen = []

    def fails_after_the_first_doubling(rate):
        seen.append(rate)
        return len(seen) <= 2

    found = server_search.max_server_rate(fails_after_the_first_doubling, start=1000.0, precision=0.1)
    assert found["rate"] is None and not any(valid for _, valid in found["runs"][2:])


def test_single_stream_latency_is_the_service_time_and_server_reaches_offline(tmp_path):
    """A constructed engine (1 ms + 0.1 ms per image, batches up to 32) under the serve stage's own
    SUT choices: SingleStream waits for no batch (its SUT has no batch wait, and its p50 is at least
    the 1.1-ms call), Server finds a rate and keeps the run that holds it. How close Server comes to
    Offline is a speed claim, measured in benchmarks/ (serving_cpu_ratio.py), not asserted here: on
    a machine at load 10-19 it read 0.38."""
    from precisionflow.stages import serve_engine

    runners = {size: (lambda size=size: time.sleep(0.001 + 0.0001 * size)) for size in serving.powers_of_two(32)}
    service = {size: 0.001 + 0.0001 * size for size in runners}
    settings = dict(
        SETTINGS,
        latency_bound_ms=15,
        min_duration_ms=2000,
        min_query_count=200,
        max_batch=32,
        max_wait_ms=1.0,
        workers=1,
        scenarios=["SingleStream", "Server"],
        # a 10% bracket let the answer sit up to 10% under the rate the server holds: 0.786 on a
        # loaded CI machine; 5% asks what the test claims (>= 0.8x) without that slack
        search_precision=0.05,
        search_repeats=1,
    )
    side = serve_engine.ServedSide(runners, service, settings, tmp_path / "sut")
    for scenario, wait_s in (("SingleStream", 0.0), ("Server", 0.001)):
        sut = side.make_sut(scenario)
        sut.close()
        assert sut.max_wait_s == wait_s
    side.close()
    found = serve_engine.serve_with(runners, service, settings, tmp_path)
    assert found["SingleStream"]["p50_ns"] / 1e6 >= 1.1, found["SingleStream"]  # never faster than the call
    assert found["Offline"]["valid"] and found["Server"]["rate"], found["Server"].get("why")
    assert 0 < found["server_over_offline"] <= 1.5, found["server_over_offline"]
    assert round(found["Server"]["at_rate"]["asked_qps"], 3) == found["Server"]["rate"]
    spent = found["Server"]["at_rate"]["where_time_went"]
    assert 0 < spent["engine_share"] <= 1 and spent["engine_call_ms"]["mean"] >= 1.0


def test_the_two_sides_search_the_server_rate_in_turns(tmp_path):
    """The ratio sets the engine's Server rate against fp32's: each side's first search, then each
    side's second, so both sides' i-th searches meet the same load (one after the other, the CPU
    default's int8_qat ratio moved 1.341 [1.213, 1.468] -> 0.885 [0.817, 0.997] between two runs)."""
    from precisionflow.stages import serve_engine

    calls = []

    def side(name, per_image_s):
        def runner(size):
            def run_once():
                calls.append(name)
                time.sleep(0.0005 + per_image_s * size)

            return run_once

        runners = {size: runner(size) for size in serving.powers_of_two(8)}
        return runners, {size: 0.0005 + per_image_s * size for size in runners}, tmp_path / name

    settings = dict(SETTINGS, max_batch=8, max_wait_ms=1.0, workers=1, scenarios=["SingleStream", "Server"])
    settings.update(search_precision=0.2, search_repeats=2)
    found = serve_engine.serve_sides({"engine": side("engine", 0.0001), "fp32": side("fp32", 0.0002)}, settings)
    turns = [name for index, name in enumerate(calls) if index == 0 or calls[index - 1] != name]
    # SingleStream + Offline of each, then search 1 (engine, fp32), then search 2 in the other order
    assert turns == ["engine", "fp32", "engine", "fp32", "engine"], turns
    for name in ("engine", "fp32"):
        assert len(found[name]["Server"]["repeats"]) == 2 and found[name]["Server"]["rate"], found[name]["Server"]
        assert {p.name.split("-", 1)[1] for p in (tmp_path / name).iterdir()} >= {"SingleStream", "Offline", "Server"}
        # every LoadGen run is in the record (probes and re-checks too), each with its p99 and longest call
        runs = found[name]["runs"]
        assert sorted(run["run"] for run in runs) == sorted(p.name for p in (tmp_path / name).iterdir())
        assert all(run["longest_call_ms"] > 0 and run["p99_ms"] > 0 for run in runs), runs


def test_a_sides_engine_threads_are_warmed_once_and_serve_every_run(tmp_path):
    """ONNX Runtime's CUDA provider keeps captured CUDA graphs per thread: the threads that call the
    engine are started once per side, each calls every batch size WARM_CALLS times before any run,
    and every later LoadGen run is served by exactly those threads (no thread new to a size)."""
    import collections
    import threading

    callers = collections.defaultdict(list)  # batch size -> the thread of every call

    def runner(size):
        def run_once():
            callers[size].append(threading.get_ident())
            time.sleep(0.0002 * size)

        return run_once

    runners = {size: runner(size) for size in serving.powers_of_two(8)}
    workers = serving.EngineWorkers([runners] * 2)  # two threads sharing one set (a CPU session)
    pool = {thread.ident for thread in workers.threads}
    assert len(pool) == 2
    for size in runners:  # warmed: every size, WARM_CALLS times on each of the two threads
        assert collections.Counter(callers[size]) == {ident: serving.EngineWorkers.WARM_CALLS for ident in pool}
    warm_calls = sum(len(calls) for calls in callers.values())
    for name, scenario in (("a", "SingleStream"), ("b", "Offline"), ("c", "Server")):
        make = lambda scenario: serving.BatchingSUT(runners, 8, 0.001, workers, 10**9)  # noqa: E731
        found = serving.run_scenario(make, scenario, SETTINGS, tmp_path / name, rate=500)
        assert found["where_time_went"]["engine_call_ms"]["max"] > 0, found  # served (its validity is not the point)
    served = [ident for calls in callers.values() for ident in calls]
    assert len(served) > warm_calls and set(served) == pool
    with pytest.raises(RuntimeError, match="one SUT at a time"):  # a second SUT while one is served
        first = serving.BatchingSUT(runners, 8, 0.0, workers, 10**9)
        try:
            serving.BatchingSUT(runners, 8, 0.0, workers, 10**9)
        finally:
            first.close()
    workers.close()
    assert not any(thread.is_alive() for thread in workers.threads)
    with pytest.raises(RuntimeError, match="warmed up: ZeroDivisionError"):  # an engine that fails says so
        serving.EngineWorkers([{1: lambda: 1 / 0}] * 2)


def test_an_offline_run_answered_aside_completes_every_query_and_keeps_the_timeline(tmp_path):
    """Offline's answers to LoadGen on a thread of their own (complete_aside): every query is
    answered (the run is VALID and counts them all), each batch is in the timeline once, under the
    worker that ran it, and the SUT closes with nothing left to answer."""
    import threading

    workers_seen = set()

    def run_once():
        workers_seen.add(threading.get_ident())
        time.sleep(0.002)

    runners = {size: run_once for size in serving.powers_of_two(8)}
    make = lambda scenario: serving.BatchingSUT(runners, 8, 0.0, 1, 10**9, complete_aside=True)  # noqa: E731
    found = serving.run_scenario(make, "Offline", SETTINGS, tmp_path / "offline", rate=8000)
    assert found["valid"], found
    spent = found["where_time_went"]
    assert spent["queries_per_batch"] == 8.0 and sum(found["batches"].values()) * 8 >= SETTINGS["min_query_count"]
    assert found["stalls"]["calls"] == sum(found["batches"].values())  # one timeline entry per batch run
    assert len(workers_seen) == 1


def test_the_server_batch_leaves_room_for_a_batch_in_flight():
    from precisionflow.stages.serve_engine import server_max_batch

    service = {1: 0.0006, 32: 0.0027, 64: 0.0054, 128: 0.0102}  # ResNet-50 fp16 on the H200
    assert server_max_batch(service, 0.015, 0.001) == 64
    assert server_max_batch({1: 0.02}, 0.015, 0.001) == 1


def test_the_server_batch_is_not_chosen_on_the_edge_of_the_bound():
    """Fused ResNet-50 on the H200: fp16's b128 call measured 6.98-7.03 ms between sessions, right on
    2 x call + 1 ms = 15 ms; 64 must be chosen either way (128 held only 0.80x Offline at p99 14.8 ms),
    while fp32's b64 (5.1 ms, 0.85x held at p99 11.6 ms) stays 64."""
    from precisionflow.stages.serve_engine import server_max_batch

    for b128_s in (0.00698, 0.00703):
        fp16 = {1: 0.00056, 32: 0.00196, 64: 0.00367, 128: b128_s}
        assert server_max_batch(fp16, 0.015, 0.001) == 64
    fp32 = {1: 0.00056, 32: 0.00278, 64: 0.0051, 128: 0.0096}
    assert server_max_batch(fp32, 0.015, 0.001) == 64


def test_server_queues_behind_a_batch_in_flight_only_where_three_calls_fit_the_bound():
    """The H100's calls (benchmarks/results/gpu_path_h100_10s_overlap/ and _3call/): fp16's b64
    (4.1 ms) overlapped held 0.95x Offline; fp32's b64 (6.2 ms) overlapped failed at p99 18.5 ms
    (3 calls), its b32 (3.3 ms) overlapped held 0.875x where its b64 without overlap held 0.794x in
    the same job -- and b64's 2-call rule sat 0.1 ms from the bound (6.20 and 6.25 ms in two nodes
    chose 64 and 32). Where the runners cannot be queued (a CPU's), the 2-call rule alone."""
    from precisionflow.stages.serve_engine import server_batching

    fp16 = {1: 0.00052, 32: 0.00217, 64: 0.004115, 128: 0.00794}
    fp32 = {1: 0.00058, 32: 0.00325, 64: 0.00619, 128: 0.01185}
    assert server_batching(fp16, 0.015, 0.001, queueable=True) == (64, True)
    assert server_batching(fp32, 0.015, 0.001, queueable=True) == (32, True)
    for b64_s in (0.0061962, 0.0062539):  # the two nodes' measurements of one fp32 engine
        assert server_batching({**fp32, 64: b64_s}, 0.015, 0.001, queueable=True) == (32, True)
    assert server_batching(fp32, 0.015, 0.001, queueable=False) == (64, False)
    assert server_batching({1: 0.005, 8: 0.02}, 0.015, 0.001, queueable=True) == (1, False)  # not even 3 x b1 fits


class SleepingEngine:
    """An engine whose prepared batches can be queued (start, finish) and take 0.4 ms per image:
    the shape of the H100's fp32 ResNet-50 calls (3.25 ms at 32, 6.2 ms at 64), four times as long,
    so that the rule's margins (1.5 ms a call) stay above this machine's sleep jitter."""

    def __init__(self):
        self.prepared = []

    def prepare(self, batch):
        self.prepared.append(len(batch))
        return self.runner(len(batch))

    @staticmethod
    def runner(size):
        class Runner:
            def __call__(self):
                self.finish(self.start())

            def start(self):
                return time.perf_counter() + 0.0004 * size

            def finish(self, until):
                time.sleep(max(0.0, until - time.perf_counter()))

        return Runner()


def test_server_takes_the_largest_quarter_step_between_powers_of_two_that_fits_its_rule():
    """b32 overlapped fits a 60-ms bound (3 x 12.8 + 1 <= 54 ms), b64 does not: 40 (16.0 ms) fits,
    48 (19.2 ms, over 17.67) does not and ends the steps, so Server runs at 40. A CPU's runners (not queueable)
    keep the powers of two and are not timed again."""
    import numpy as np

    from precisionflow.stages.serve_engine import add_server_sizes, server_batching

    engine, images = SleepingEngine(), np.zeros((64, 3, 2, 2), np.float32)
    service_s = {size: 0.0004 * size for size in serving.powers_of_two(128)}
    runners = {size: engine.runner(size) for size in service_s}
    settings = {"latency_bound_ms": 60, "max_wait_ms": 1, "max_batch": 128, "server_next_batch": "when_ready"}
    assert server_batching(service_s, 0.060, 0.001, queueable=True) == (32, True)
    timed = add_server_sizes(engine, images, runners, service_s, settings)
    assert engine.prepared == [40, 48] and sorted(runners) == sorted(service_s) and sorted(timed) == ["40", "48"]
    assert timed["48"] >= 19.2  # the step that did not fit is in the record too (a sleep is never shorter)
    assert 40 in runners and 48 not in runners and service_s[40] >= 0.016
    assert server_batching(service_s, 0.060, 0.001, queueable=True) == (40, True)

    plain = {size: (lambda: None) for size in serving.powers_of_two(128)}
    cpu_service = {size: 0.0004 * size for size in plain}
    assert add_server_sizes(engine, images, plain, cpu_service, settings) == {}
    assert sorted(plain) == serving.powers_of_two(128) and engine.prepared == [40, 48]


def test_the_search_never_runs_past_the_offline_rate():
    """Started at 0.8x Offline, the search bisects [0.8x, 1x]: no Server rate exceeds Offline, so runs
    above it (it doubled to 1.6x before) measure nothing."""
    seen = []

    def holds_to_95(rate):
        seen.append(rate)
        return rate <= 95.0

    found = server_search.max_server_rate(holds_to_95, start=80.0, precision=0.05, ceiling=100.0)
    assert max(seen) == 100.0 and 95.0 / 1.05 <= found["rate"] <= 95.0
    assert server_search.max_server_rate(lambda rate: True, start=80.0, precision=0.05, ceiling=100.0)["rate"] == 100.0


def test_a_start_that_fails_once_is_tried_again_before_the_search_halves():
    """On the H200 a 4-s run at 0.8x Offline was INVALID from two stalled engine calls while 60 s at
    the same rate were VALID: the search must not halve on one failure at its start."""
    seen = []

    def start_fails_once(rate):
        seen.append(rate)
        return rate <= 14000 and len(seen) != 1

    found = server_search.max_server_rate(start_fails_once, start=14000.0, precision=0.1)
    assert found["rate"] >= 14000 * 0.9 and seen[:2] == [14000.0, 14000.0]


def test_an_accuracy_run_through_the_server_answers_with_the_engines_outputs(tmp_path):
    """LoadGen's sample indices pick the inputs, each response carries the engine's row, and the
    top-1 read back from LoadGen's accuracy log is the engine's own on the same images."""
    import numpy as np

    from precisionflow.stages.serve_engine import answers_through_server

    rng = np.random.default_rng(0)
    images = rng.uniform(0, 1, (50, 4, 4, 1)).astype(np.float32)
    weights = rng.normal(0, 1, (16, 3)).astype(np.float32)
    engine_run = lambda batch: batch.reshape(len(batch), -1) @ weights  # noqa: E731 -- a known engine
    labels = (images.reshape(50, -1) @ weights).argmax(axis=1)
    labels[:5] = (labels[:5] + 1) % 3  # five images the engine gets wrong
    settings = dict(SETTINGS, max_batch=8, workers=1, min_query_count=1, min_duration_ms=0)
    found = answers_through_server(engine_run, images, labels, settings, tmp_path / "accuracy")
    assert found["answered"] == 50 and found["same_predictions"] == 50 and found["max_abs_diff"] == 0.0
    assert found["top1_through_server"] == found["top1_direct"] == 0.9


def stalling_run(capacity_short: float, capacity_long: float, seen: list):
    """A side whose short probes fail above capacity_short (a rare stall dominates their p99) while
    full-length runs hold up to capacity_long: the H200's ResNet-50 fp32 in 4-s and 60-s runs."""

    def run(scenario, rate=0.0, duration_ms=None):
        seen.append((round(rate), duration_ms))
        limit = capacity_long if duration_ms >= 60000 else capacity_short
        return {"valid": rate <= limit, "target_qps": rate, "p99_ns": 1e6}

    return run


def test_a_start_that_holds_at_full_length_spends_no_short_probe():
    """On the H200 the 4-s probes ended at 0.10-0.26x Offline under a 0.8x start that held for 60 s,
    and cost a minute per search: the start runs at full length first."""
    from precisionflow.measure.server_search import server_search

    seen = []
    settings = dict(SETTINGS, min_duration_ms=60000, search_duration_ms=4000, search_precision=0.1)
    found = server_search(stalling_run(3000, 11000, seen), {"mean_ns": 6e5}, settings, start=10300, ceiling=12900)
    assert found["rate"] == 10300 and found["bracket"] == [10300, 12900] and found["confirmed_at_full_length"]
    assert seen == [(10300, 60000)]
    assert found["at_rate"]["duration_ms"] == 60000  # the figure comes from the full-length run


def test_short_probes_search_only_where_the_start_and_its_descent_fail():
    from precisionflow.measure.server_search import server_search

    seen = []
    settings = dict(SETTINGS, min_duration_ms=60000, search_duration_ms=4000, search_precision=0.1, full_length_climb=3)
    found = server_search(stalling_run(3000, 5000, seen), {"mean_ns": 6e5}, settings, start=9600, ceiling=12000)
    full_length = [rate for rate, duration in seen if duration == 60000]
    assert full_length[:4] == [9600, 9000, 8400, 7800]  # the start, then three steps down: all fail
    assert {duration for _, duration in seen[4:-1]} == {4000} and seen[-1][1] == 60000  # probes, their answer
    assert round(found["rate"]) == full_length[-1] <= 3000 and found["bracket"][1] <= 7800


def test_a_confirmed_start_climbs_at_full_length_until_a_run_fails():
    """The H200's ResNet-50 held 0.90x Offline in 60-s runs and not 0.95x: with full_length_climb the
    stage reports 0.90x with the failed 0.95x as its bracket's top, not the 0.80x it confirmed first."""
    from precisionflow.measure.server_search import server_search

    seen = []
    settings = dict(SETTINGS, min_duration_ms=60000, search_duration_ms=4000, search_precision=0.1, full_length_climb=3)
    offline = 12000
    found = server_search(
        stalling_run(3000, 0.92 * offline, seen), {"mean_ns": 6e5}, settings, start=0.8 * offline, ceiling=offline
    )
    assert found["rate"] == 10800 and found["bracket"] == [10800, 11400]
    assert [rate for rate, duration in seen if duration == 60000] == [9600, 10200, 10800, 11400]


def test_a_start_that_fails_at_full_length_steps_down_at_full_length():
    """On the H200 a second search's 60-s run at 0.85x Offline failed and the stage fell to its 4-s
    probes' answer, 0.46x (ResNet-50 fp32): a failed start now steps down by 0.05x Offline in
    full-length runs (as many as full_length_climb) before the probes' answer is tried."""
    from precisionflow.measure.server_search import server_search

    seen = []
    settings = dict(SETTINGS, min_duration_ms=60000, search_duration_ms=4000, search_precision=0.1, full_length_climb=3)
    found = server_search(stalling_run(3000, 8700, seen), {"mean_ns": 6e5}, settings, start=9600, ceiling=12000)
    assert found["rate"] == 8700 and found["bracket"] == [8700, 9000]  # the run left halved the step
    assert seen == [(9600, 60000), (9000, 60000), (8400, 60000), (8700, 60000)]  # no short probe


def test_the_runs_a_climb_leaves_halve_the_step_it_failed():
    """On the H100 ResNet-50 fp32 held 0.85x Offline and failed 0.90x in 20-s runs, its capacity in
    between: the 5% step alone reported 0.85x. Two runs left bisect [0.85, 0.90] to within 1.25%."""
    from precisionflow.measure.server_search import server_search

    seen = []
    settings = dict(SETTINGS, min_duration_ms=60000, search_duration_ms=4000, search_precision=0.1, full_length_climb=4)
    offline = 12000
    found = server_search(
        stalling_run(3000, 0.885 * offline, seen), {"mean_ns": 6e5}, settings, start=0.8 * offline, ceiling=offline
    )
    assert [rate for rate, duration in seen if duration == 60000] == [9600, 10200, 10800, 10500, 10650]
    assert found["rate"] == 10500 and found["bracket"] == [10500, 10650]  # 0.875x held, 0.8875x failed


@pytest.mark.parametrize("target", ["a100", "h100", "h200"])
def test_a_gpu_targets_own_climb_asks_between_a_held_and_a_failed_quarter_step(target):
    """In every search of the H100's tenth and eleventh jobs fp32 Server held 0.875x Offline and failed
    0.8875x: the GPU targets' own settings (conf/config.yaml, as the serve node composes them) run
    a fifth full-length run at 0.88125x, so an engine holding 0.884x reports it."""
    from precisionflow.config.compose import expand
    from precisionflow.stages import NodeContext, serve_engine

    cfg = expand([f"targets=[{target}]"])[0]
    settings = serve_engine.node_params(NodeContext(cfg, target, {"backend_version": "1.31.1", "device": target}))["serving"]
    seen, offline = [], 12000
    found = server_search.server_search(
        stalling_run(3000, 0.884 * offline, seen), {"mean_ns": 6e5}, settings, start=0.8 * offline, ceiling=offline
    )
    full_length = [rate for rate, duration in seen if duration == settings["min_duration_ms"]]
    assert full_length == [9600, 10200, 10800, 10500, 10650, 10575]  # 0.80, 0.85, 0.90, 0.875, 0.8875, 0.88125
    assert found["rate"] == 10575 and found["bracket"] == [10575, 10650]


def test_without_a_valid_offline_the_probes_search_first():
    """With no Offline rate the start is half of what one stream completes, a guess: held at full
    length it would be the answer however far above it the engine serves, so the probes search."""
    from precisionflow.measure.server_search import server_search

    seen = []
    settings = dict(SETTINGS, min_duration_ms=60000, search_duration_ms=4000, search_precision=0.1, full_length_climb=3)
    found = server_search(stalling_run(9000, 9000, seen), {"mean_ns": 6e5}, settings, start=800, ceiling=None)
    assert seen[0] == (800, 4000) and seen[-1][1] == 60000 and found["rate"] >= 9000 / 1.1


def test_the_climb_spends_no_more_full_length_runs_than_allowed():
    from precisionflow.measure.server_search import server_search

    seen = []
    settings = dict(SETTINGS, min_duration_ms=60000, search_duration_ms=4000, search_precision=0.1, full_length_climb=1)
    found = server_search(stalling_run(3000, 12000, seen), {"mean_ns": 6e5}, settings, start=9600, ceiling=12000)
    assert found["rate"] == 10200 and found["bracket"] == [10200, 12000]  # nothing failed: the top is Offline
    assert len([1 for _, duration in seen if duration == 60000]) == 2


def test_no_rate_when_nothing_the_probes_found_holds_at_full_length():
    from precisionflow.measure.server_search import server_search

    seen = []
    settings = dict(SETTINGS, min_duration_ms=60000, search_duration_ms=4000, search_precision=0.1)
    found = server_search(stalling_run(3000, 100, seen), {"mean_ns": 6e5}, settings, start=10300, ceiling=12900)
    assert found["rate"] is None and "full-length" in found["why"]
    assert seen[0] == (10300, 60000) and seen[-1][1] == 60000  # the start, the probes, their answer
    assert {duration for _, duration in seen[1:-1]} == {4000}


def test_without_a_probe_length_every_run_is_full_length():
    from precisionflow.measure.server_search import server_search

    seen = []
    settings = dict(SETTINGS, min_duration_ms=60000, search_precision=0.1)
    found = server_search(stalling_run(3000, 11000, seen), {"mean_ns": 6e5}, settings, start=10300, ceiling=12900)
    assert found["rate"] and "confirmed_at_full_length" not in found and {d for _, d in seen} == {60000}


def test_a_slow_rate_keeps_the_run_that_holds_it():
    """Below ~500/s a relative tolerance lost the match between the search's rounded answer and
    LoadGen's own rounding of the target (215.2146 vs 215.215): the row lost its p99."""
    from precisionflow.measure.server_search import server_search

    def run(scenario, rate, duration_ms=None):  # LoadGen records the target its own way
        return {"valid": rate <= 216, "target_qps": round(rate, 4), "p99_ns": 9e6}

    settings = {"latency_bound_ms": 33, "percentile": 0.99, "min_duration_ms": 1000, "search_duration_ms": 100}
    found = server_search(run, {"p99_ns": 2e6, "mean_ns": 2e6}, settings, start=215.21464, ceiling=269.0)
    assert found["rate"] == 215.215 and found["at_rate"] and found["at_rate"]["p99_ns"] == 9e6
    assert found["runs"], "a search confirmed at full length records its runs"


def test_the_bound_follows_the_one_gpu_rule_for_any_target(monkeypatch):
    """`local` on a GPU machine: the bound once read the runtime's device name (a "Quadro" got the
    CPU's 33 ms); it now asks devices.runs_on_gpu, as every other part does."""
    from precisionflow import devices
    from precisionflow.config.compose import expand
    from precisionflow.stages import NodeContext, serve_engine

    cfg = expand([])[0]
    runtime = {"backend_version": "1.23", "device": "Quadro RTX 8000"}
    monkeypatch.setattr(devices, "has_nvidia_gpu", lambda: True)
    on_gpu = serve_engine.node_params(NodeContext(cfg, "local", runtime))
    monkeypatch.setattr(devices, "has_nvidia_gpu", lambda: False)
    on_cpu = serve_engine.node_params(NodeContext(cfg, "local", runtime))
    assert on_gpu["serving"]["latency_bound_ms"] == serve_engine.GPU_BOUND_MS and on_gpu["settings_for"] == "gpu"
    assert on_cpu["serving"]["latency_bound_ms"] == serve_engine.CPU_BOUND_MS and on_cpu["settings_for"] == "cpu"


def test_a_server_ratio_without_an_interval_says_why_in_its_cell():
    from precisionflow.reporting.report_rows import interval_missing

    assert (
        interval_missing({"pairs": 1, "why": "1 paired search(es), fewer than the 2 an interval needs"}) == "no interval: 1 pair"
    )
    same = {"pairs": 2, "why": "2 paired searches gave the same ratio: a zero-width interval is no evidence of no noise"}
    assert interval_missing(same) == "no interval: 2 pairs, one ratio"
    wide = {"pairs": 2, "low": 0.1, "high": 16.46, "why": "the 2 paired searches disagree (0.60, 3.00): too few or too noisy"}
    assert interval_missing(wide) == "2 pairs disagree: [0.10,16.46]"


def test_slow_calls_are_attributed_to_what_they_overlapped():
    # (start, seconds, batch size, size switched on its worker, GPU seconds: none timed): b8 calls take 2 ms, b1 0.5 ms
    calls = [(0.000, 0.002, 8, False), (0.010, 0.030, 8, False), (0.050, 0.002, 8, False), (0.060, 0.002, 8, False)]
    calls += [(0.100, 0.0005, 1, True), (0.110, 0.012, 1, False), (0.130, 0.0005, 1, True), (0.140, 0.009, 8, True)]
    calls += [(0.160, 0.0005, 1, True), (0.170, 0.0030, 1, False)]
    calls = [(*call, None) for call in calls]
    pauses = [(0.020, 0.015, 2)]  # one full collection, inside the second b8 call
    found = serving.stalls(calls, pauses)
    assert found["calls"] == 10 and found["longest_call_ms"] == 30.0 and found["longest_call_size"] == 8
    assert found["median_call_ms"] == {"1": 0.5, "8": 2.0}
    assert found["slow_calls"] == {
        "gc": {"calls": 1, "excess_ms": 28.0},
        "size_switch": {"calls": 1, "excess_ms": 7.0},
        "unexplained": {"calls": 2, "excess_ms": 14.0},  # 11.5 + 2.5
    }
    assert found["gc"] == {"collections": 1, "by_generation": {"2": 1}, "pause_max_ms": 15.0, "pause_total_ms": 15.0}
    assert "median_device_ms" not in found  # no call was timed on the device: none is placed on the host


def test_a_slow_call_whose_gpu_time_was_usual_is_the_hosts_and_one_slow_on_the_gpu_stays_unexplained():
    # (start, host seconds, size, switched, GPU seconds from CUDA events): b1 calls 0.5 ms on the host, 0.4 on the GPU
    usual = [(0.01 * index, 0.0005, 1, False, 0.0004) for index in range(8)]
    on_host = (0.100, 0.0025, 1, False, 0.0004)  # 2 ms more on the host, the GPU's usual 0.4 ms
    on_gpu = (0.110, 0.0030, 1, False, 0.0026)  # the GPU itself took 2.2 ms more
    unmeasured = (0.120, 0.0030, 1, False, None)  # a call not timed on the device
    found = serving.stalls([*usual, on_host, on_gpu, unmeasured], [])
    assert found["median_call_ms"] == {"1": 0.5} and found["median_device_ms"] == {"1": 0.4}
    assert found["slow_calls"] == {
        "gc": {"calls": 0, "excess_ms": 0.0},
        "size_switch": {"calls": 0, "excess_ms": 0.0},
        "host": {"calls": 1, "excess_ms": 2.0},
        "unexplained": {"calls": 2, "excess_ms": 5.0},  # 2.5 + 2.5
    }


def test_a_device_timed_runner_s_seconds_reach_the_stall_record(tmp_path):
    """A runner that returns its GPU seconds (as a CUDA-event-timed engine call does; a stand-in here,
    no GPU): a real LoadGen run whose 40th call spends 6 ms on the host while the "GPU" time stays
    usual is recorded as the host's stall."""
    calls = iter(range(10**9))

    def runner():
        time.sleep(0.006 if next(calls) == 40 else 0.0005)
        return 0.0004

    runners = {size: runner for size in serving.powers_of_two(8)}
    found = serving.run_scenario(make_sut(runners), "SingleStream", SETTINGS, tmp_path / "host")
    stalls = found["stalls"]
    assert stalls["median_device_ms"] == {"1": 0.4}, stalls
    assert stalls["slow_calls"]["host"]["calls"] >= 1 and stalls["slow_calls"]["unexplained"]["calls"] == 0, stalls


def test_a_collection_inside_an_engine_call_is_seen_as_the_stall_s_cause(tmp_path):
    """A real LoadGen run whose 50th engine call collects a large heap: the run's record names that
    call as its longest, slowed by a garbage collection (gc.callbacks saw the pause)."""
    import gc

    calls = iter(range(10**9))
    heap = [[index] for index in range(300_000)]  # objects a full collection must walk

    def runner():
        if next(calls) == 50:
            gc.collect()
        time.sleep(0.0005)

    runners = {size: runner for size in serving.powers_of_two(8)}
    found = serving.run_scenario(make_sut(runners), "SingleStream", SETTINGS, tmp_path / "gc")
    stalls = found["stalls"]
    assert stalls["gc"]["collections"] >= 1 and stalls["slow_calls"]["gc"]["calls"] >= 1, stalls
    assert stalls["longest_call_ms"] >= stalls["gc"]["pause_max_ms"] > 0 and len(heap) == 300_000


def test_a_next_batch_closed_as_the_gpu_frees_is_sized_by_the_2_call_rule():
    """when_gpu_frees: a query waits for one batch at most before its own, so Server's batch is the
    2-call rule's -- the H100's fp32 at b56 (2 x 5.5 + 1 = 12 ms of 13.5), where queueing a batch once
    ready needs 3 calls and stays at b32 -- and still overlapped; a CPU's runners are never queued."""
    from precisionflow.stages.serve_engine import server_batching

    fp32 = {1: 0.00058, 32: 0.00325, 56: 0.0055, 64: 0.00655, 128: 0.01185}
    assert server_batching(fp32, 0.015, 0.001, True, "when_gpu_frees") == (56, True)
    assert server_batching(fp32, 0.015, 0.001, True, "when_ready") == (32, True)
    assert server_batching(fp32, 0.015, 0.001, False, "when_gpu_frees") == (56, False)


class QueuedDevice:
    """A stand-in for one CUDA stream (no GPU here): start() queues a batch's work and returns at
    once, one thread runs the queued work in order, finish() waits for a batch's end. It records
    when each batch was queued, ran and was waited for."""

    def __init__(self, seconds: float):
        import queue
        import threading

        self.seconds, self.work = seconds, queue.SimpleQueue()
        self.queued, self.ran, self.waited = [], [], {}
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            index, done = self.work.get()
            began = time.perf_counter()
            time.sleep(self.seconds)
            self.ran.append((index, began, time.perf_counter()))
            done.device_s = self.ran[-1][2] - began  # the batch's own time on the "GPU", as QueuedRun's events give
            done.set()

    def runner(self):
        import threading

        device = self

        class Runner:
            def __call__(self):
                self.finish(self.start())

            def start(self):
                done = threading.Event()
                done.index = len(device.queued)
                device.queued.append(time.perf_counter())
                device.work.put((done.index, done))
                return done

            def finish(self, done):
                done.wait()
                device.waited[done.index] = time.perf_counter()
                return done.device_s

        return Runner()


def test_an_overlapped_offline_run_queues_each_batch_before_answering_the_last(tmp_path):
    """Offline with overlap: the next batch is queued before the worker waits on the last, the stream
    still runs one batch at a time, every batch is answered only after it ran, and the timeline
    counts each batch's call from when the GPU could start it."""
    device = QueuedDevice(0.002)
    runner = device.runner()
    runners = {size: runner for size in serving.powers_of_two(8)}
    make = lambda scenario: serving.BatchingSUT(runners, 8, 0.0, 1, 10**9, complete_aside=True, overlap=True)  # noqa: E731
    found = serving.run_scenario(make, "Offline", SETTINGS, tmp_path / "offline", rate=8000)
    assert found["valid"], found
    ran = sorted(device.ran)
    assert len(ran) == len(device.queued) == sum(found["batches"].values()) == len(device.waited)
    for (_, _, ended), (_, began, _) in zip(ran, ran[1:], strict=False):
        assert began >= ended  # one batch at a time on the stream
    for index, _, ended in ran:
        assert device.waited[index] >= ended  # answered only once it ran
    # every batch but the last was queued before the worker had waited on the one before it
    assert all(device.queued[index + 1] < device.waited[index] for index in range(len(ran) - 1))
    assert found["stalls"]["calls"] == len(ran)
    # each queued batch's GPU time reaches the record, so a slow call can be told host from GPU
    assert "host" in found["stalls"]["slow_calls"]
    device_ms = found["stalls"]["median_device_ms"].values()
    assert device_ms and all(2.0 <= ms < 20.0 for ms in device_ms)  # the 2-ms call, not the host's wait for it


def test_without_overlap_a_queued_runner_is_called_whole(tmp_path):
    device = QueuedDevice(0.001)
    runner = device.runner()
    runners = {size: runner for size in serving.powers_of_two(8)}
    make = lambda scenario: serving.BatchingSUT(runners, 8, 0.0, 1, 10**9, complete_aside=True)  # noqa: E731
    found = serving.run_scenario(make, "Offline", SETTINGS, tmp_path / "offline", rate=8000)
    assert found["valid"], found
    assert all(device.queued[index + 1] > device.waited[index] for index in range(len(device.queued) - 1))


def test_a_batch_in_flight_takes_only_a_batch_that_is_ready_by_the_same_rule():
    """_take without blocking (a batch on the GPU): a full batch, or one whose first query has waited
    max_wait, is taken; a part batch still within its wait is left to fill."""

    class Query:
        def __init__(self, index):
            self.id, self.index = index, index

    sut = serving.BatchingSUT({size: (lambda: None) for size in serving.powers_of_two(4)}, 4, 0.05, 1, 10**9)
    try:
        with sut.ready:
            now = time.perf_counter()
            sut.waiting.extend((Query(index), now) for index in range(2))
        assert sut._take(block=False) == []  # 2 of 4, 50 ms to fill
        with sut.ready:
            sut.waiting.extend((Query(index), now) for index in range(2, 5))
        assert len(sut._take(block=False)) == 4  # full
        with sut.ready:
            sut.waiting[0] = (sut.waiting[0][0], now - 1.0)  # waited past max_wait
        assert len(sut._take(block=False)) == 1
        assert sut._take(block=False) == []  # nothing waiting
    finally:
        sut.close()


def test_a_batch_in_flight_closing_when_the_gpu_frees_fills_until_its_deadline_or_until_full():
    """_take_by (when_gpu_frees): a part batch keeps filling until the deadline, however long its
    first query has waited; a full batch goes at once; nothing waiting at the deadline is []."""

    class Query:
        def __init__(self, index):
            self.id, self.index = index, index

    # no serving thread (EngineWorkers of no runner set): the test takes every batch itself
    sut = serving.BatchingSUT(
        {size: (lambda: None) for size in serving.powers_of_two(4)}, 4, 0.001, serving.EngineWorkers([]), 10**9
    )
    try:
        with sut.ready:
            sut.waiting.extend((Query(index), time.perf_counter() - 1.0) for index in range(2))  # past max_wait
        began = time.perf_counter()
        assert len(sut._take_by(began + 0.05)) == 2
        assert time.perf_counter() - began >= 0.05  # held to the deadline, not taken at max_wait
        with sut.ready:
            sut.waiting.extend((Query(index), time.perf_counter()) for index in range(2, 7))
        began = time.perf_counter()
        assert len(sut._take_by(began + 30.0)) == 4 and time.perf_counter() - began < 30.0  # full: at once
        assert len(sut._take_by(time.perf_counter())) == 1
        assert sut._take_by(time.perf_counter()) == []  # nothing waiting
    finally:
        sut.close()


@pytest.mark.parametrize("next_batch", ["when_ready", "when_gpu_frees"])
def test_server_queues_the_next_batch_as_the_gpu_frees_not_as_soon_as_it_is_ready(tmp_path, next_batch):
    """A real Server run on a stand-in stream of 4-ms calls, at a rate where no batch fills (8 of 64
    a call). when_gpu_frees queues batches behind the one in flight (the GPU kept busy), never before
    that one is expected within PIPELINE_LEAD_S of its end, so a query waits for one batch at most.
    when_ready queues one only if it is ready (full, or its first query waited max_wait) the moment
    the last started, which at this rate it seldom is: each batch waits for the last to be answered.
    Either way the stream runs one batch at a time and each is answered after it ran."""
    call_s = 0.004
    device = QueuedDevice(call_s)
    runner = device.runner()
    runners = {size: runner for size in serving.powers_of_two(64)}
    close_by = {size: call_s for size in runners} if next_batch == "when_gpu_frees" else None
    make = lambda scenario: serving.BatchingSUT(runners, 64, 0.001, 1, 10**6, overlap=True, close_when_gpu_frees=close_by)  # noqa: E731
    settings = dict(SETTINGS, latency_bound_ms=60, min_duration_ms=1000, min_query_count=100)
    found = serving.run_scenario(make, "Server", settings, tmp_path / "server", rate=2000)
    assert found["valid"] and max(found["batches"]) <= 32, found  # no batch was full
    ran = sorted(device.ran)
    for (_, _, ended), (_, began, _) in zip(ran, ran[1:], strict=False):
        assert began >= ended  # one batch at a time on the stream
    assert all(device.waited[index] >= ended for index, _, ended in ran)  # answered once it ran
    expected_end, early, behind = 0.0, 0, 0  # the worker's expectation: queued, or behind the last, + a call
    for index in range(len(device.queued) - 1):
        expected_end = max(device.queued[index], expected_end) + call_s
        queued_behind = device.queued[index + 1] < device.waited[index]  # while the last was in flight
        behind += queued_behind
        early += queued_behind and device.queued[index + 1] < expected_end - serving.PIPELINE_LEAD_S - 0.001
    if next_batch == "when_gpu_frees":  # while busy, a batch runs at the size in flight where it fits
        assert early == 0 and behind > len(device.queued) / 2, (early, behind, len(device.queued))
    else:
        assert behind < len(device.queued) / 20, (behind, len(device.queued))


@pytest.mark.parametrize("overlap", [False, True])
def test_an_engine_that_raises_mid_run_ends_the_run_with_its_error(tmp_path, overlap):
    """A worker's exception (a CUDA fault, say) answers every query taken or waiting and the run
    raises it, instead of LoadGen waiting forever for answers that never come."""
    device = QueuedDevice(0.001)
    runner = device.runner()
    calls = []

    class Faulty:
        def __call__(self):
            self.finish(self.start())

        def start(self):
            calls.append(1)
            if len(calls) == 5:
                raise RuntimeError("CUDA error 700 (stand-in)")
            return runner.start()

        def finish(self, done):
            runner.finish(done)

    runners = {size: Faulty() for size in serving.powers_of_two(8)}
    make = lambda scenario: serving.BatchingSUT(runners, 8, 0.0, 1, 10**9, complete_aside=True, overlap=overlap)  # noqa: E731
    began = time.perf_counter()
    with pytest.raises(RuntimeError, match="failed during the Offline run.*CUDA error 700"):
        serving.run_scenario(make, "Offline", SETTINGS, tmp_path / "offline", rate=8000)
    assert time.perf_counter() - began < 60


def test_a_side_records_server_overlap_only_where_its_runners_can_be_queued(tmp_path):
    """The record says what ran: plain callables (a CPU engine) never overlap, whatever the bound."""
    from precisionflow.stages.serve_engine import ServedSide

    calls = {size: 0.0001 for size in serving.powers_of_two(8)}
    settings = dict(SETTINGS, max_wait_ms=1.0, max_batch=8, workers=1, scenarios=["Server"])
    plain = ServedSide({size: (lambda: None) for size in calls}, calls, settings, tmp_path)
    queued = ServedSide({size: QueuedDevice(0.0001).runner() for size in calls}, calls, settings, tmp_path)
    assert plain.found["server_overlap"] is False and queued.found["server_overlap"] is True
    assert plain.found["server_next_batch"] == "after_the_last" and queued.found["server_next_batch"] == "when_ready"
    pipelined = dict(settings, server_next_batch="when_gpu_frees")
    closing = ServedSide({size: QueuedDevice(0.0001).runner() for size in calls}, calls, pipelined, tmp_path)
    assert closing.found["server_next_batch"] == "when_gpu_frees"
    for side, close_by in ((queued, None), (closing, calls)):  # what the Server SUT is handed
        sut = side.make_sut("Server")
        assert sut.call_s == close_by
        sut.close()
        side.close()
    assert (
        ServedSide({size: (lambda: None) for size in calls}, calls, pipelined, tmp_path).found["server_next_batch"]
        == "after_the_last"
    )


class SharedSms:
    """A stand-in for one GPU that engine instances share (no GPU here): each instance's runner can be
    queued (start, finish) and its batch holds the GPU's SMs, one batch at a time, 1 ms an image --
    two instances calling at once take turns. Records which thread called which instance."""

    def __init__(self):
        import threading

        self.sms = threading.Lock()
        self.callers = collections.defaultdict(set)  # instance -> threads that called it

    def runner(self, instance: str, size: int):
        import threading

        gpu = self

        class Runner:
            def __call__(self):
                self.finish(self.start())

            def start(self):
                gpu.callers[instance].add(threading.get_ident())
                with gpu.sms:
                    time.sleep(0.001 * size)

            def finish(self, _):
                pass

        return Runner()


def test_two_gpu_instances_each_serve_from_a_thread_of_their_own_with_batches_sized_by_calls_together(tmp_path):
    """workers=2 with runners that can be queued (a GPU's): engine_instances gives the second worker
    runners on sessions of their own; the side times every batch size with both instances calling at
    once and sizes Server's batch by those times, with no batch queued behind another (each instance
    has one in flight); in every run each serving thread calls its own instance only."""
    import numpy as np

    from precisionflow.stages.serve_engine import ServedSide, engine_instances

    gpu, sizes = SharedSms(), serving.powers_of_two(8)

    class Engine:
        made = 0

        def instance_runner(self, batch):
            Engine.made += 1
            return gpu.runner("second", len(batch))

    first = {size: gpu.runner("first", size) for size in sizes}
    instances = engine_instances(Engine(), np.zeros((8, 3, 2, 2), np.float32), first, workers=2)
    assert instances[0] is first and sorted(instances[1]) == sizes and Engine.made == len(sizes)
    plain = {size: (lambda: None) for size in sizes}  # a CPU session: one set, shared
    assert engine_instances(Engine(), np.zeros((8, 3, 2, 2), np.float32), plain, workers=2) == [plain, plain]

    alone = {size: 0.001 * size for size in sizes}
    settings = dict(SETTINGS, max_wait_ms=1.0, max_batch=8, workers=2, scenarios=["Server"])
    side = ServedSide(first, alone, settings, tmp_path, instances)
    together = side.found["engine_call_together_ms"]
    assert side.found["instances"] == 2 and sorted(together) == [str(size) for size in sizes]
    assert together["8"] > 1000 * alone[8]  # the two took turns on the SMs
    assert side.found["server_overlap"] is False and side.server_batch == 4  # b8 together: 2 x >8 ms + 1 > 18 ms
    gpu.callers.clear()  # the timing threads have ended (a thread's id may be reused): the serving threads' calls from here
    try:
        for scenario, rate in (("Offline", 2000), ("Server", 300)):
            found = side.run(scenario, rate=rate)
            assert found["where_time_went"]["engine_call_ms"]["max"] > 0, found
    finally:
        side.close()
    serving_threads = {thread.ident for thread in side.workers.threads}
    assert gpu.callers["first"] & gpu.callers["second"] & serving_threads == set()
    assert gpu.callers["first"] & serving_threads and gpu.callers["second"] & serving_threads


def test_serving_threads_warm_up_one_at_a_time(tmp_path):
    """A captured CUDA graph must not overlap another thread's launches: EngineWorkers' threads warm
    one after the other, never together."""
    import threading

    spans = collections.defaultdict(list)  # thread -> (start, end) of each warm call

    def runner():
        def run_once():
            began = time.perf_counter()
            time.sleep(0.002)
            spans[threading.get_ident()].append((began, time.perf_counter()))

        return run_once

    workers = serving.EngineWorkers([{1: runner(), 2: runner()} for _ in range(3)])
    workers.close()
    windows = sorted((calls[0][0], calls[-1][1]) for calls in spans.values())
    assert len(windows) == 3
    for (_, ended), (began, _) in zip(windows, windows[1:], strict=False):
        assert began >= ended


def test_an_onnx_runtime_engine_instance_runs_on_a_session_of_its_own(tmp_path):
    """OrtEngine.instance_runner: a runner on another session of the same engine file (on a GPU its
    own stream, buffers and graph), kept alive by the engine, answering as the engine does."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from precisionflow.backends.onnxruntime_backend import OrtEngine

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
    )
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))

    def load(timed=True, cuda_graph=True):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return OrtEngine(session, {"device": "cpu"}, load)

    engine = load()
    batch = np.array([[-1.0, 0.5, 2.0], [3.0, -4.0, 0.0]], np.float32)
    instance = engine.instance_runner(batch)
    (own,) = engine.graph_sessions
    assert own.session is not engine.session
    np.testing.assert_array_equal(instance()[0], engine.run(batch))
