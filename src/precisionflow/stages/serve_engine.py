"""serve_engine: how many requests per second an engine serves within a latency bound.

One job per engine, like compare_speed: the engine and its target's fp32 engine are served under
the same bound, their Server searches in turns (serve_sides), driven by MLPerf LoadGen
(measure/serving.py is the system under test and the search). Per side: SingleStream latency;
Offline throughput; the largest valid Server rate (Poisson arrivals, latency from the scheduled
arrival, the chosen percentile within the bound), found by repeated searches; the Server/Offline
ratio. LoadGen's logs stay in the node folder (loadgen/<side>/<run>/).
"""

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from precisionflow.measure.server_search import combined_searches, server_search
from precisionflow.stats import geometric_mean
from precisionflow.nodeio import write_json_atomic
from precisionflow.stages import NodeContext

PACKAGES = ("numpy", "mlcommons-loadgen")
GPU_BOUND_MS, CPU_BOUND_MS = 15.0, 33.0
MLPERF_MIN_DURATION_MS = 600_000


def node_params(at: NodeContext) -> Dict[str, Any]:
    cfg, target, runtime = at.cfg, at.target, at.runtime
    from precisionflow.measure.targets import device_params, on_gpu, serving_settings

    settings = serving_settings(cfg, target)
    settings.pop("enabled", None)
    if settings.get("search_duration_ms") is None:  # unset: probes are full length (and earlier ids stand)
        settings.pop("search_duration_ms", None)
    if not settings.get("search_duration_ms") or not settings.get("full_length_climb"):  # no climb: ids stand
        settings.pop("full_length_climb", None)
    settings["scenarios"] = [str(getattr(s, "value", s)) for s in settings["scenarios"]]
    gpu = on_gpu(cfg, target)
    if settings["latency_bound_ms"] is None:  # by where the engine runs (see ServingConf)
        settings["latency_bound_ms"] = GPU_BOUND_MS if gpu else CPU_BOUND_MS
    return {
        "serving": settings,
        "settings_for": "gpu" if gpu else "cpu",  # which device's defaults it took (devices.runs_on_gpu)
        "threads": cfg["engine"]["intra_op_threads"],
        "backend": cfg["engine"]["backend"],
        **device_params(cfg, target, runtime),
    }


def runners_of(engine_dir: Path, images: np.ndarray, max_batch: int, load=None):
    """{batch size: the engine's prepared callable} for the powers of two up to max_batch, and
    {batch size: seconds one call takes} (median of a few, after a warm-up)."""
    from precisionflow.backends import engine_loader
    from precisionflow.measure import serving, speed, timing

    engine = (load or engine_loader(engine_dir))()
    runners = {size: engine.prepare(speed.timing_batch(images, size)) for size in serving.powers_of_two(max_batch)}
    service_s = {}
    for size, run_once in runners.items():
        timing.warm_up(run_once, 0.2)
        service_s[size] = float(np.median(timing.time_runs(run_once, 0.0, 0.0, 5)))
    return engine, runners, service_s


def answers_through_server(run_batch, images: np.ndarray, labels, settings: Dict[str, Any], logs: Path) -> Dict[str, Any]:
    """An AccuracyOnly run through the same system under test: LoadGen's sample indices pick the
    images, the responses carry the engine's outputs, and their top-1 is set beside the engine's
    own on the same images (one batch of them run directly). `run_batch`: host images -> outputs."""
    from precisionflow.measure import serving

    size = settings["max_batch"]

    one_at_a_time = threading.Lock()  # a GPU engine's run() copies through one bound slot

    def fixed(batch: np.ndarray) -> np.ndarray:  # one batch size: a CUDA-graph engine captures one
        padded = np.zeros((size,) + batch.shape[1:], dtype=np.float32)
        padded[: len(batch)] = batch
        with one_at_a_time:
            return np.asarray(run_batch(padded))[: len(batch)]

    answer = lambda indices: fixed(images[np.asarray(indices)])  # noqa: E731
    sizes = serving.powers_of_two(size)
    make = lambda scenario: serving.BatchingSUT(  # noqa: E731
        {size: None for size in sizes}, settings["max_batch"], 0.0, settings["workers"], 10**9, answer=answer
    )
    serving.run_scenario(make, "Offline", dict(settings, samples=len(images)), logs, 1000.0, mode="AccuracyOnly")
    answered = serving.accuracy_log(logs)
    direct = np.concatenate([fixed(images[start : start + size]) for start in range(0, len(images), size)]).reshape(
        len(images), -1
    )
    served = np.stack([answered[index] for index in sorted(answered)]) if answered else np.zeros((0, direct.shape[1]))
    result = {"images": len(images), "answered": len(answered)}  # (LoadGen judges no validity in AccuracyOnly)
    if len(answered) == len(images):
        result["same_predictions"] = int(np.sum(served.argmax(axis=1) == direct.argmax(axis=1)))
        # the served classes, in test-split order: the verdict holds them against evaluate_engine's
        result["served_predictions"] = served.argmax(axis=1).astype(int).tolist()
        result["max_abs_diff"] = float(np.max(np.abs(served - direct)))
        if labels is not None:
            truth = np.asarray(labels)[: len(images)]
            result.update(
                top1_through_server=float(np.mean(served.argmax(axis=1) == truth)),
                top1_direct=float(np.mean(direct.argmax(axis=1) == truth)),
            )
    return result


SERVER_HEADROOM = 0.9  # of the bound: the p99 sits above 2 x call + wait once the queue varies


def server_max_batch(service_s: Dict[int, float], bound_s: float, max_wait_s: float) -> int:
    """The largest batch the Server scenario may form: a query that arrives just after a batch
    started waits for that batch, then rides its own, so 2 x its call + the wait must fit the
    bound, with SERVER_HEADROOM: a batch whose call sits on the bound's edge flips in and out of the
    choice on noise, and its p99 sits on the bound at rates a smaller batch holds well within it.
    The smallest size when none fits (the search then finds whether any rate holds)."""
    fitting = [size for size, seconds in service_s.items() if 2 * seconds + max_wait_s <= SERVER_HEADROOM * bound_s]
    return max(fitting) if fitting else min(service_s)


def server_overlaps(service_s: Dict[int, float], batch: int, bound_s: float, max_wait_s: float) -> bool:
    """Whether Server may queue a ready batch behind the one in flight (serving.BatchingSUT's
    overlap) at this batch: a query that arrives once the next batch is queued waits for both before
    it rides its own, so 3 x the call + the wait must fit the bound (with SERVER_HEADROOM)."""
    return 3 * service_s[batch] + max_wait_s <= SERVER_HEADROOM * bound_s


def server_batching(
    service_s: Dict[int, float], bound_s: float, max_wait_s: float, queueable: bool, next_batch: str = "when_ready"
) -> tuple:
    """(the largest Server batch, whether the next batch queues behind the one in flight). Where the
    runners can be queued (a GPU's): with `next_batch` when_gpu_frees, the 2-call rule's batch,
    overlapped (the next batch closes as the GPU frees, so a query waits for one batch at most
    before its own); with when_ready (a batch queued once full or once its first query waited
    max_wait), the largest batch whose 3-call rule fits, overlapped: it keeps the GPU busy between
    batches at a smaller batch rather than leave it idle between larger ones. Else, or where no
    batch fits three calls, the largest by server_max_batch's 2-call rule, each batch waiting for
    the last (measured: docs/how-to/serving.md)."""
    if queueable and next_batch == "when_gpu_frees":
        return server_max_batch(service_s, bound_s, max_wait_s), True
    overlapped = [size for size in service_s if server_overlaps(service_s, size, bound_s, max_wait_s)] if queueable else []
    if overlapped:
        return max(overlapped), True
    return server_max_batch(service_s, bound_s, max_wait_s), False


SERVER_STEPS = 4  # between a power of two and the next: quarter steps (32 -> 40, 48, 56)


def add_server_sizes(
    engine, images: np.ndarray, runners: Dict[int, Any], service_s: Dict[int, float], settings
) -> Dict[str, float]:
    """Adds to `runners` and `service_s` the batch sizes between the Server batch the powers of two
    allow and the next power, in quarter steps, while each fits the same rule (server_batching):
    a Server batch runs at its own size's efficiency, so the largest that fits serves the most
    (where a power of two leaves most of the bound unused: docs/how-to/serving.md).
    Only runners that can be queued (a GPU's, each size its own session): a CPU's keep the powers
    of two. Sizes below 8 have no quarter steps.
    Returns {size: ms a call} of every step timed, the one that did not fit included."""
    from precisionflow.measure import serving, speed, timing

    timed: Dict[str, float] = {}
    if not serving.queueable(runners):
        return timed
    bound_s, wait_s = settings["latency_bound_ms"] / 1000, settings["max_wait_ms"] / 1000
    batching = lambda times: server_batching(times, bound_s, wait_s, True, settings["server_next_batch"])  # noqa: E731
    batch, overlap = batching(service_s)
    step = batch // SERVER_STEPS
    for size in range(batch + step, min(2 * batch, settings["max_batch"] + 1), step) if batch >= 8 else ():
        runner = engine.prepare(speed.timing_batch(images, size))
        timing.warm_up(runner, 0.2)
        tried = {**service_s, size: float(np.median(timing.time_runs(runner, 0.0, 0.0, 5)))}
        timed[str(size)] = round(1000 * tried[size], 4)
        if batching(tried) != (size, overlap):
            break  # calls grow with the batch: the next step would not fit either
        runners[size], service_s[size] = runner, tried[size]
    return timed


@dataclass
class LoadedSide:
    """A side ready to serve: its engine, runners and call times by batch size, the Server steps
    timed (add_server_sizes), and the runner set of each serving thread (engine_instances)."""

    engine: Any
    runners: Dict[int, Any]
    service_s: Dict[int, float]
    steps: Dict[str, float]
    instances: List[Dict[int, Any]]


def load_side(engine_dir: Path, images: np.ndarray, settings: Dict[str, Any]) -> LoadedSide:
    """The powers of two up to max_batch, on a GPU the Server steps that fit (add_server_sizes),
    and a runner set for each of the settings' workers."""
    engine, runners, service_s = runners_of(engine_dir, images, settings["max_batch"])
    steps = add_server_sizes(engine, images, runners, service_s, settings)
    return LoadedSide(engine, runners, service_s, steps, engine_instances(engine, images, runners, settings["workers"]))


def engine_instances(engine, images: np.ndarray, runners: Dict[int, Any], workers: int) -> List[Dict[int, Any]]:
    """The runner sets of a side's serving threads, one per worker. Runners that can be queued (a
    GPU's) hold one session's stream, device buffers and CUDA graph, which two threads must not
    share: each worker after the first gets sessions of its own for every batch size
    (engine.instance_runner) -- instances of the engine, as serving systems run several on one GPU.
    Plain callables (a CPU session, which serves many threads) are one set the workers share."""
    from precisionflow.measure import serving, speed

    count = max(1, int(workers))
    if count == 1 or not serving.queueable(runners):
        return [runners] * count
    extra = [{size: engine.instance_runner(speed.timing_batch(images, size)) for size in runners} for _ in range(count - 1)]
    return [runners] + extra


def serve_side(engine_dir: Path, images: np.ndarray, settings: Dict[str, Any], logs: Path):
    """(the loaded engine, every scenario the settings name for it and Offline -- Server is read
    against it -- with the Server rate by search, repeated, and the Server steps timed)."""
    side = load_side(engine_dir, images, settings)
    found = serve_sides({"engine": (side.runners, side.service_s, logs, side.instances)}, settings)["engine"]
    return side.engine, {**found, "server_steps_ms": side.steps}


def serve_with(runners: Dict[int, Any], service_s: Dict[int, float], settings: Dict[str, Any], logs: Path) -> Dict[str, Any]:
    """serve_side's scenarios on prepared runners and their call times (a test gives constructed ones)."""
    return serve_sides({"engine": (runners, service_s, logs)}, settings)["engine"]


def serve_sides(sides: Dict[str, Any], settings: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """Every scenario the settings name, for each side ({name: (runners, call times, logs folder[,
    runner set per worker])}).
    SingleStream and Offline side by side, then the Server searches in turns: each side's first
    search, then each side's second, and so on. The Server ratio sets two sides' rates against each
    other; on a shared machine whose load moves over minutes, sides served one after the other met
    different loads (the CPU default's int8_qat ratio 1.341 [1.213, 1.468] in one run, 0.885
    [0.817, 0.997] in the next), while searches in turns meet the same ones."""
    served = {
        name: ServedSide(runners, service_s, settings, logs, *rest) for name, (runners, service_s, logs, *rest) in sides.items()
    }
    try:
        return _serve_in_turns(served, settings)
    finally:
        for side in served.values():
            side.close()


def _serve_in_turns(served: Dict[str, "ServedSide"], settings: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    for side in served.values():
        side.single_and_offline()
    if "Server" in settings["scenarios"]:
        for index in range(max(1, int(settings.get("search_repeats", 1)))):
            # sides in alternating order (engine, fp32; fp32, engine; ...): a side that always goes
            # first would meet the machine's drift first in every pair
            for side in served.values() if index % 2 == 0 else reversed(list(served.values())):
                side.search_server(index)
        for side in served.values():
            side.server_answer()
    if "MultiStream" in settings["scenarios"]:
        for side in served.values():
            side.found["MultiStream"] = side.run("MultiStream")
    return {name: side.found for name, side in served.items()}


class ServedSide:
    """One side's system under test (the serve stage's choices: no batch wait outside Server, the
    largest Server batch by server_batching) and what its runs found, for serve_sides to drive.
    `instances`: the runner set of each serving thread (engine_instances; by default every worker
    shares `runners`)."""

    def __init__(
        self,
        runners: Dict[int, Any],
        service_s: Dict[int, float],
        settings: Dict[str, Any],
        logs: Path,
        instances: Optional[List[Dict[int, Any]]] = None,
    ):
        from precisionflow.measure import serving

        self.runners, self.service_s, self.settings, self.logs = runners, service_s, settings, logs
        self.instances = instances or [runners] * max(1, int(settings["workers"]))
        self._workers = None  # threads of the side's own for all its runs (started by the first)
        bound_s, self.wait_s = settings["latency_bound_ms"] / 1000, settings["max_wait_ms"] / 1000
        separate = len({id(each) for each in self.instances}) > 1
        together = serving.calls_together(self.instances) if separate else None
        if together:
            # Instances of their own (a GPU's): each thread has a batch in flight, none queues behind
            # another, and a batch takes as long as it does beside the others' (calls_together).
            self.server_batch, self.server_overlap = server_max_batch(together, bound_s, self.wait_s), False
        else:  # recorded as what runs: only runners that can be queued overlap (a GPU's; a CPU's run whole)
            self.server_batch, self.server_overlap = server_batching(
                service_s, bound_s, self.wait_s, serving.queueable(runners), settings["server_next_batch"]
            )
        # when_gpu_frees: the SUT closes each next batch by the expected end of the one in flight
        self.close_by = service_s if self.server_overlap and settings["server_next_batch"] == "when_gpu_frees" else None
        self.limit = serving.queue_limit(bound_s, service_s[self.server_batch], self.server_batch, settings["workers"])
        self.counter = iter(range(10**6))
        # LoadGen sizes SingleStream and Offline runs from the expected latency / rate: an engine
        # faster than expected ends before min_duration_ms and the run is INVALID ("Min duration
        # satisfied: NO", 10 of 12 SingleStream runs of the default experiment), so both are
        # over-estimated twofold.
        self.expected_single_ns = int(0.5 * 1e9 * service_s[min(service_s)])
        self.found: Dict[str, Any] = {
            "engine_call_ms": {str(size): round(1000 * seconds, 4) for size, seconds in sorted(service_s.items())},
            "server_max_batch": self.server_batch,
            "server_overlap": self.server_overlap,
            "server_next_batch": settings["server_next_batch"] if self.server_overlap else "after_the_last",
            "queue_limit": self.limit,
            "runs": [],  # every LoadGen run of this side, probes and re-checks included (run_record)
        }
        if together:
            self.found["instances"] = len(self.instances)
            self.found["engine_call_together_ms"] = {str(size): round(1000 * s, 4) for size, s in sorted(together.items())}
        self.offline_rate = None  # single_and_offline sets it: LoadGen's Offline rate where VALID
        self.repeats = []

    @property
    def workers(self):
        """The side's engine threads, one per instance, each warmed on every batch size (serving.EngineWorkers)."""
        from precisionflow.measure import serving

        if self._workers is None:
            self._workers = serving.EngineWorkers(self.instances)
        return self._workers

    def close(self) -> None:
        if self._workers is not None:
            self._workers.close()

    def make_sut(self, scenario: str):
        from precisionflow.measure import serving

        # Offline queues a ready batch behind the one the GPU runs (serving.BatchingSUT's overlap),
        # Server where the bound leaves room for it (server_batching); SingleStream has one query
        # at a time, so nothing to queue behind it.
        if scenario != "Server":  # queries come one by one (SingleStream) or all at once: no batch to wait for
            aside = scenario == "Offline"  # throughput only: LoadGen is answered while the next batch runs
            return serving.BatchingSUT(
                self.runners, self.settings["max_batch"], 0.0, self.workers, 10**9, complete_aside=aside, overlap=aside
            )
        chosen = {size: run_once for size, run_once in self.runners.items() if size <= self.server_batch}
        return serving.BatchingSUT(
            chosen,
            self.server_batch,
            self.wait_s,
            self.workers,
            self.limit,
            overlap=self.server_overlap,
            close_when_gpu_frees=self.close_by,
        )

    def run(self, scenario: str, rate: float = 0.0, seed_offset: int = 0, duration_ms: int = None):
        from precisionflow.measure import serving

        folder = self.logs / f"{next(self.counter):02d}-{scenario}"
        scenario_settings = dict(
            self.settings, seed=self.settings["seed"] + seed_offset, single_stream_expected_ns=self.expected_single_ns
        )
        scenario_settings["min_duration_ms"] = duration_ms or self.settings["min_duration_ms"]
        found = serving.run_scenario(self.make_sut, scenario, scenario_settings, folder, rate)
        self.found["runs"].append(run_record(folder.name, scenario_settings["min_duration_ms"], found))
        return found

    def single_and_offline(self) -> None:
        largest = max(self.service_s)
        self.found["SingleStream"] = self.run("SingleStream")
        self.found["Offline"] = offline = self.run("Offline", rate=2 * largest / max(self.service_s[largest], 1e-6))
        self.offline_rate = offline.get("samples_per_second") if offline["valid"] else None

    def search_server(self, index: int) -> None:
        """Search `index`, with its own arrival schedule (LoadGen's seed + index), each from the same
        start -- 0.8x Offline, not low: a search that climbs from below stopped at a fraction of the
        engine's rate where rare stalls failed short runs -- and never from an earlier search's
        answer, so one search that fell low cannot bound the next. Every search runs: the figure is
        their median (combined_searches)."""
        start = 0.8 * self.offline_rate if self.offline_rate else None
        run = lambda scenario, rate=0.0, duration_ms=None: self.run(scenario, rate, index, duration_ms)  # noqa: E731
        self.repeats.append(server_search(run, self.found["SingleStream"], self.settings, start, self.offline_rate))

    def server_answer(self) -> None:
        self.found["Server"] = server = combined_searches(self.repeats)
        if server.get("rate") and self.offline_rate:
            self.found["server_over_offline"] = round(server["rate"] / self.offline_rate, 3)


def run_record(name: str, duration_ms: int, found: Dict[str, Any]) -> Dict[str, Any]:
    """One LoadGen run in a line of the record: what it asked, whether it held, its p99 and its
    longest engine call, and its slow calls by what they overlapped (serving.stalls), so a statement
    about stalls rests on every run, not only the runs of the answer."""
    stalls = found.get("stalls") or {}
    return {
        "run": name,
        "scenario": found.get("scenario"),
        "target_qps": found.get("target_qps"),
        "duration_ms": duration_ms,
        "valid": bool(found.get("valid")),
        "p99_ms": round(found["p99_ns"] / 1e6, 3) if found.get("p99_ns") is not None else None,
        "longest_call_ms": stalls.get("longest_call_ms"),
        "calls": stalls.get("calls", 0),
        "slow_calls": {cause: figures["calls"] for cause, figures in (stalls.get("slow_calls") or {}).items()},
        "slow_excess_ms": {cause: figures["excess_ms"] for cause, figures in (stalls.get("slow_calls") or {}).items()},
        "gc_collections": (stalls.get("gc") or {}).get("collections", 0),
        "gc_pause_max_ms": (stalls.get("gc") or {}).get("pause_max_ms", 0.0),
    }


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    from precisionflow.datasets.store import Split
    from precisionflow.measure import speed

    settings = {**params["serving"], "samples": 64}
    test = Split(inputs["data"], "test")
    images = test.head(max(64, settings["max_batch"]))
    taken = speed.conditions()
    sides = {"engine": inputs["engine"], **({"fp32": inputs["fp32_engine"]} if "fp32_engine" in inputs else {})}
    loaded = {side: load_side(folder, images, settings) for side, folder in sides.items()}
    results = serve_sides(
        {name: (side.runners, side.service_s, out / "loadgen" / name, side.instances) for name, side in loaded.items()}, settings
    )
    engine = loaded["engine"].engine
    results["engine"]["AccuracyOnly"] = answered = answers_through_server(
        engine.run, images, test.labels, settings, out / "loadgen" / "accuracy"
    )
    refuse_wrong_answers(answered)
    mlperf_valid = settings["min_duration_ms"] >= MLPERF_MIN_DURATION_MS
    metrics = {
        "target": params["target"],
        "settings": settings,
        "sides": {side: folder.name for side, folder in sides.items()},
        "results": results,
        "server_ratio": server_ratio(results),
        "server_steps_ms": {name: side.steps for name, side in loaded.items()},  # every step timed, kept or not
        "mlperf_length": mlperf_valid,
        "note": ""
        if mlperf_valid
        else f"runs of {settings['min_duration_ms']} ms: shorter than MLPerf's 600 s minimum, not an MLPerf-valid result",
        "conditions": speed.finished(taken),
    }
    write_json_atomic(out / "metrics.json", metrics)
    return {"server_qps": results["engine"].get("Server", {}).get("rate"), "server_ratio": metrics["server_ratio"]}


def refuse_wrong_answers(answered: Dict[str, Any]) -> None:
    """The serve node fails, loudly, when serving answered otherwise than the engine does directly
    on the same images: its rates would be rates of a wrong system under test."""
    from precisionflow.errors import StageError

    images = answered["images"]
    if answered["answered"] != images:
        raise StageError(
            f"serving answered {answered['answered']} of {images} AccuracyOnly queries: the system under test "
            "loses queries, so its Server rates are not the engine's"
        )
    if answered.get("same_predictions", images) != images:
        raise StageError(
            f"serving answered a different class than the engine run directly on {images - answered['same_predictions']} "
            f"of {images} images (max output difference {answered.get('max_abs_diff', float('nan')):.3g}): the system "
            "under test does not serve this engine's answers"
        )


def server_ratio(results: Dict[str, Any]):
    """The engine's largest valid Server rate over the fp32 engine's: per pair of searches (search i
    of each side ran in turn, in alternating order), the ratio of their answers, and their geometric
    mean (stats.geometric_mean, what the interval bounds).
    The interval is computed where the verdicts are, at evaluate.confidence
    (verdict_rules.server_ratio_at). None (no figure) when either side has no valid rate."""
    engine, fp32 = results.get("engine", {}).get("Server"), results.get("fp32", {}).get("Server")
    if not engine or not fp32 or not engine.get("rate") or not fp32.get("rate"):
        return None
    pairs = list(zip(_repeats(engine), _repeats(fp32), strict=False))  # search i of each side
    ratios = [mine["rate"] / theirs["rate"] for mine, theirs in pairs if mine.get("rate") and theirs.get("rate")]
    if not ratios:
        return None
    return {"geomean": round(geometric_mean(ratios), 3), "pairs": len(ratios), "per_pair": [round(r, 4) for r in ratios]}


def _repeats(server: Dict[str, Any]):
    return server.get("repeats") or [{"rate": server["rate"], "bracket": server["bracket"]}]
