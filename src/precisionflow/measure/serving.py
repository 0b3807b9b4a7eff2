"""Serving under a latency bound: MLPerf LoadGen drives the scenarios, this module is the system
under test (SUT) and the search for the largest valid Server rate.

The SUT: LoadGen's callback only queues the queries (it runs on LoadGen's thread); worker threads
take batches -- as many queries as are waiting, up to max_batch, waiting at most max_wait for the
first one's batch to fill -- and run the engine's prepared callable of the smallest prepared batch
size that holds them (powers of two, and a GPU's Server steps between them; on a GPU these are
device buffers bound once, with a captured CUDA graph where the engine has them). The worker
threads are a side's own (EngineWorkers), kept for all its runs and warmed on every batch size
before the first: ONNX Runtime's CUDA provider keeps its cuDNN/cuBLAS handles and captured CUDA
graphs per thread. Inputs are the test images loaded once, as LoadGen's "performance samples"
are. The queue is bounded: when more queries wait than the SUT could serve within the bound plus
the late queries the percentile allows (late_allowance), the run is marked overloaded, every
waiting and later query is answered at once, and the run is INVALID whatever LoadGen's figures
say -- it ends, it does not hang.

Scenarios (MLPerf's rules, as LoadGen implements them): SingleStream (one query after another: its
90th percentile latency), Server (Poisson arrivals at a target rate, latency from the scheduled
arrival; VALID when the chosen percentile is within the bound), Offline (everything at once:
throughput), MultiStream (8 samples per query, its 99th percentile).
"""

import collections
import math
import queue
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")
# close_when_gpu_frees queues the next batch this long before the GPU is expected to be past the last:
# the worker's timed wake-up and the batch's launch must land before the GPU frees, or it
# idles; a query coming in this window rides the batch after, still within 2 calls + max_wait.
PIPELINE_LEAD_S = 0.0005
SUMMARY = "mlperf_log_summary.txt"


def device_seconds(result: object) -> Optional[float]:
    """A batch's seconds on the GPU where its runner timed it there (a CudaClock-timed call, or a
    QueuedRun's finish: a float), else None (a CPU runner returns its outputs or nothing)."""
    return result if isinstance(result, float) else None


def queueable(runners: Dict[int, Any]) -> bool:
    """Whether every runner can be queued in two halves (start, finish: cuda_clock.QueuedRun), so
    BatchingSUT's overlap can apply; plain callables (a CPU engine) run whole."""
    return all(hasattr(run_once, "start") and hasattr(run_once, "finish") for run_once in runners.values())


class BatchingSUT:
    """Queries in, batches out: `runners` maps a batch size to a no-argument callable running one batch."""

    def __init__(
        self,
        runners: Dict[int, Callable[[], object]],
        max_batch: int,
        max_wait_s: float,
        workers: "int | EngineWorkers",
        queue_limit: int,
        answer: Optional[Callable[[List[int]], Any]] = None,
        complete_aside: bool = False,
        overlap: bool = False,
        close_when_gpu_frees: Optional[Dict[int, float]] = None,
    ):
        """`workers`: a count of threads of this SUT's own, or a side's EngineWorkers, which serve it
        until close. `answer` (an accuracy run): called with a batch's sample indices, returns the
        engine's outputs for those samples; each query's response then carries its row.
        `complete_aside` (throughput scenarios): a thread of its own answers LoadGen and records the
        timeline while the workers run the next batch, so the engine does not wait on that Python
        work; not for latency scenarios, where the hand-over would add to every query's time.
        `overlap`: a runner that can be queued (a QueuedRun: start, then finish) gets the next batch
        of its size queued before the last is waited on, so the GPU starts it the moment the last
        ends instead of after the host has answered it; the stream still runs them one after the
        other. A batch is answered only once the GPU is past it.
        `close_when_gpu_frees` (with overlap: Server's when_gpu_frees): each batch size's seconds a
        call. The next batch then keeps filling while the GPU runs the last, and is queued
        PIPELINE_LEAD_S before the GPU is expected to be free (or once full): a query that comes after
        it waits for one batch at most before riding its own, where a batch queued as soon as it is
        ready (full, or its first query waited max_wait) can leave a later query waiting for two."""
        import mlperf_loadgen as lg

        self.answer = answer
        self.overlap = overlap and answer is None
        self.call_s = close_when_gpu_frees if self.overlap else None
        self.lg, self.runners, self.sizes = lg, runners, sorted(runners)
        self.max_batch, self.max_wait_s, self.queue_limit = min(max_batch, self.sizes[-1]), max_wait_s, queue_limit
        self.waiting: collections.deque = collections.deque()
        self.ready = threading.Condition()
        self.overloaded, self.stopping = False, False
        self.failed: Optional[BaseException] = None  # the engine's error: the run is ended, not waited on
        self.unanswered: Dict[int, List[Any]] = {}  # batches taken and not yet answered, by id
        self.batches: collections.Counter = collections.Counter()
        self.timeline = Timeline()
        self.completions: Optional[queue.SimpleQueue] = queue.SimpleQueue() if complete_aside else None
        self.completer = threading.Thread(target=self._complete_handed, daemon=True) if complete_aside else None
        if self.completer:
            self.completer.start()
        self.pool = workers if isinstance(workers, EngineWorkers) else None
        self.threads = [] if self.pool else [threading.Thread(target=self._work, daemon=True) for _ in range(max(1, workers))]
        for thread in self.threads:
            thread.start()
        if self.pool:
            self.pool.serve(self)
        self.handle = lg.ConstructSUT(self.issue, self.flush)

    def issue(self, queries) -> None:
        """LoadGen's callback: queue and return at once (an overloaded run answers at once instead)."""
        with self.ready:
            if self.failed is not None:
                self._complete(list(queries))
                return
            if self.overloaded or len(self.waiting) + len(queries) > self.queue_limit:
                self.overloaded = True
                dropped = list(self.waiting) + [(query, 0.0) for query in queries]
                self.waiting.clear()
                self._complete([query for query, _ in dropped])
                return
            now = time.perf_counter()
            self.waiting.extend((query, now) for query in queries)
            self.ready.notify()

    def flush(self) -> None:
        pass

    def _take(self, block: bool = True) -> Optional[List[Any]]:
        """The next batch, as (query, arrival) pairs: wait for a first query, then until max_batch
        wait or max_wait has passed since it came (no wait at all with max_wait 0). Without `block`
        (a batch is in flight): the batch if it is ready now, else none ([]) -- the same rule, so
        overlapping never forms another batch than waiting would."""
        with self.ready:
            while not self.waiting and not self.stopping and block:
                self.ready.wait(0.05)
            if self.stopping and not self.waiting:
                return None
            if not self.waiting:
                return []
            deadline = self.waiting[0][1] + self.max_wait_s  # the first query's arrival + max_wait
            if not block and not self._full_or_due(deadline):
                return []
            self._fill_until(deadline)
            return self._pop_batch()

    def _take_by(self, deadline: float) -> Optional[List[Any]]:
        """The next batch while one is in flight (close_when_gpu_frees): the queries waiting once
        max_batch wait or `deadline` (perf_counter seconds) comes, up to max_batch; [] when none
        waits then, None when the SUT is closing and none waits."""
        with self.ready:
            self._fill_until(deadline)
            if not self.waiting:
                return None if self.stopping else []
            return self._pop_batch()

    def _full_or_due(self, deadline: float) -> bool:
        """Whether a batch may be taken now: max_batch wait, the SUT is closing, or `deadline` has come."""
        return len(self.waiting) >= self.max_batch or self.stopping or time.perf_counter() >= deadline

    def _fill_until(self, deadline: float) -> None:
        """Wait (the caller holds `ready`) until a batch may be taken (_full_or_due)."""
        while not self._full_or_due(deadline):
            self.ready.wait(deadline - time.perf_counter())

    def _pop_batch(self) -> List[Any]:
        """Up to max_batch waiting queries, oldest first, held as unanswered (the caller holds `ready`)."""
        count = min(len(self.waiting), self.max_batch)
        batch = [self.waiting.popleft() for _ in range(count)]
        self.unanswered[id(batch)] = batch
        return batch

    def _size_of(self, batch: List[Any]) -> int:
        return next(size for size in self.sizes if size >= len(batch))

    def _work(self, runners: Optional[Dict[int, Callable[[], object]]] = None) -> None:
        """A worker's loop until the SUT closes, calling `runners` (an engine instance of the
        worker's own, EngineWorkers') or the SUT's. An engine that raises ends the run instead of
        leaving LoadGen waiting for answers that never come: every query taken or waiting is
        answered empty, later ones at once, and run_scenario raises the error."""
        own = {size: (runners or self.runners)[size] for size in self.sizes}
        try:
            self._serve_batches(own)
        except BaseException as error:  # noqa: BLE001 -- raised again by run_scenario, in its thread
            self._fail(error)
            # LoadGen keeps a logger per thread that answered a query; a thread that ends mid-run
            # leaves it dangling (a segmentation fault here): stay until the run is over.
            with self.ready:
                while not self.stopping:
                    self.ready.wait(0.05)

    def _fail(self, error: BaseException) -> None:
        with self.ready:
            self.failed = self.failed or error
            dropped = [query for query, _ in self.waiting]
            self.waiting.clear()
            for batch in list(self.unanswered.values()):
                dropped += [query for query, _ in batch]
            self.unanswered.clear()
        self._complete(dropped)

    def _serve_batches(self, runners: Dict[int, Callable[[], object]]) -> None:
        if self.overlap and queueable(runners):
            return self._work_overlapped(runners)
        while True:
            batch = self._take()
            if batch is None:
                return
            if not batch:
                continue
            size = self._size_of(batch)
            started = time.perf_counter()
            result = self.answer([query.index for query, _ in batch]) if self.answer else runners[size]()
            finished = time.perf_counter()
            self._done(batch, result if self.answer else None, started, finished, size, device_seconds(result))

    def _done(self, batch, outputs, started: float, finished: float, size: int, device_s: Optional[float] = None) -> None:
        self.batches[size] += 1
        done = (batch, outputs, started, finished, size, threading.get_ident(), device_s)
        if self.completions is not None:
            self.completions.put(done)
        else:
            self._answer(*done)

    def _work_overlapped(self, runners: Dict[int, Any]) -> None:
        """_work with at most two batches queued on the GPU: the next is queued before the last is
        waited on (a batch of another size first waits for the last: sizes run on streams of their
        own, and two streams would run at once). A batch's call in the timeline starts when it was
        queued or when the batch before it ended, whichever is later: its own time on the GPU."""
        in_flight = None  # (batch, size, event, queued at)
        last_end = 0.0
        free_at = 0.0  # close_when_gpu_frees: when the GPU is expected to be past every batch queued on it
        while True:
            if in_flight is not None and self.call_s:
                batch = self._take_by(free_at - PIPELINE_LEAD_S)
            else:
                batch = self._take(block=in_flight is None)
            size = self._queued_size(batch, in_flight) if batch else None
            if batch and in_flight and size != in_flight[1]:
                last_end = self._finish(runners, in_flight, last_end)
                in_flight = None
            if batch:
                queued_at = time.perf_counter()
                following = (batch, size, runners[size].start(), queued_at)
                if self.call_s:
                    free_at = max(queued_at, free_at) + self.call_s[size]
            if in_flight:  # the next is queued (or none is ready): the last one's turn to be answered
                last_end = self._finish(runners, in_flight, last_end)
                in_flight = None
                if batch and self.call_s:  # the queued batch started when the last really ended
                    free_at = max(free_at, last_end + self.call_s[size])
            if batch:
                in_flight = following
            elif batch is None:
                return

    def _queued_size(self, batch: List[Any], in_flight) -> int:
        """The size a batch runs at: the smallest holding it; with close_when_gpu_frees and a batch in
        flight, that batch's size where it holds this one too -- a size is a session with a stream of
        its own, so a batch of another size waits for the host between the two (finish, answer,
        start), where one of the same size queues behind on the stream. The size then comes down
        only once the GPU is idle; each batch still fits 2 calls + the wait, by the Server rule."""
        size = self._size_of(batch)
        if self.call_s and in_flight is not None and size < in_flight[1]:
            return in_flight[1]
        return size

    def _finish(self, runners: Dict[int, Any], in_flight, last_end: float) -> float:
        batch, size, event, queued_at = in_flight
        device_s = device_seconds(runners[size].finish(event))
        finished = time.perf_counter()
        self._done(batch, None, max(queued_at, last_end), finished, size, device_s)
        return finished

    def _answer(
        self, batch, outputs, started: float, finished: float, size: int, worker: int, device_s: Optional[float] = None
    ) -> None:
        with self.ready:
            if self.unanswered.pop(id(batch), None) is None:  # answered already: the run failed
                return
        self._complete([query for query, _ in batch], outputs)
        self.timeline.record(started, finished, [arrival for _, arrival in batch], size, worker, device_s)

    def _complete_handed(self) -> None:
        """complete_aside's thread: answer each batch the workers hand over, until close says done."""
        while True:
            done = self.completions.get()
            if done is None:
                return
            self._answer(*done)

    def _complete(self, queries, outputs=None) -> None:
        """Tell LoadGen these queries are answered; with `outputs`, each response carries its row
        (LoadGen copies it into mlperf_log_accuracy.json before QuerySamplesComplete returns)."""
        if outputs is None:
            self.lg.QuerySamplesComplete([self.lg.QuerySampleResponse(query.id, 0, 0) for query in queries])
            return
        import numpy as np

        rows = np.ascontiguousarray(outputs, dtype=np.float32).reshape(len(queries), -1)
        responses = [
            self.lg.QuerySampleResponse(query.id, row.ctypes.data, row.nbytes) for query, row in zip(queries, rows, strict=True)
        ]
        self.lg.QuerySamplesComplete(responses)

    def close(self) -> None:
        with self.ready:
            self.stopping = True
            self.ready.notify_all()
        for thread in self.threads:
            thread.join(5)
        if self.pool:
            self.pool.release(self)
        if self.completer:  # after the workers: every batch they ran is answered before the SUT goes
            self.completions.put(None)
            self.completer.join(5)
        self.lg.DestroySUT(self.handle)


class EngineWorkers:
    """The threads that call a side's engine, started once and kept for every LoadGen run of it, one
    per runner set (an engine instance: on a GPU its own sessions, stream, buffers and graphs; on a
    CPU the threads may share one set, a session serving many threads), each warmed on every batch
    size before it serves. ONNX Runtime's CUDA provider keeps its cuDNN and cuBLAS handles and its
    captured CUDA graphs per thread (a PerThreadContext): a thread new to a batch size pays two plain
    runs and a capture before its first replay, slow calls a timed run must not contain. The threads
    warm one at a time: a graph's capture must not overlap another thread's launches."""

    WARM_CALLS = 4  # per size and thread: two plain runs, the capture, a replay

    def __init__(self, runner_sets: List[Dict[int, Callable[[], object]]], warm_calls: int = WARM_CALLS):
        self.runner_sets, self.warm_calls = runner_sets, warm_calls
        self.changed = threading.Condition()
        self.warming = threading.Lock()  # one thread's warm-up at a time
        self.current: Optional[BatchingSUT] = None  # the SUT being served, one at a time
        self.done = 0  # threads that have left the current SUT
        self.warmed = 0
        self.failed: Optional[BaseException] = None  # the first exception of a thread's warm-up
        self.closed = False
        self.threads = [threading.Thread(target=self._loop, args=(runners,), daemon=True) for runners in runner_sets]
        for thread in self.threads:
            thread.start()
        with self.changed:
            while self.warmed < len(self.threads):
                self.changed.wait()
        if self.failed is not None:
            self.close()
            raise RuntimeError(f"the engine failed while its serving threads warmed up: {self.failed!r}") from self.failed

    def _loop(self, runners: Dict[int, Callable[[], object]]) -> None:
        try:
            with self.warming:
                warm(runners.values(), self.warm_calls)
        except BaseException as error:  # noqa: BLE001 -- handed to the constructor, which raises it
            self.failed = self.failed or error
        with self.changed:
            self.warmed += 1
            self.changed.notify_all()
        served = None
        while True:
            with self.changed:
                while (self.current is None or self.current is served) and not self.closed:
                    self.changed.wait()
                if self.closed:
                    return
                served = self.current
            try:
                served._work(runners)  # returns once the SUT is stopping and its queue is empty
            finally:
                with self.changed:
                    self.done += 1
                    self.changed.notify_all()

    def serve(self, sut: "BatchingSUT") -> None:
        with self.changed:
            if self.current is not None:
                raise RuntimeError("EngineWorkers serve one SUT at a time: close the last before the next")
            self.current, self.done = sut, 0
            self.changed.notify_all()

    def release(self, sut: "BatchingSUT") -> None:
        """After the SUT stopped: wait until every thread has left it."""
        with self.changed:
            while self.current is sut and self.done < len(self.threads):
                self.changed.wait(0.05)
            self.current = None
            self.changed.notify_all()

    def close(self) -> None:
        with self.changed:
            self.closed = True
            self.changed.notify_all()
        for thread in self.threads:
            thread.join(5)


def warm(runners: Iterable[Callable[[], object]], calls: int) -> None:
    """`calls` rounds of one call of each runner: a serving thread's warm-up, untimed."""
    for _ in range(calls):
        for run_once in runners:
            run_once()


def calls_together(runner_sets: List[Dict[int, Callable[[], object]]], rounds: int = 5) -> Dict[int, float]:
    """{batch size: seconds one call takes while every instance calls at the same moment}: per size,
    a thread per instance warms its runner (one thread at a time, as EngineWorkers do), then in each
    of `rounds` rounds the threads start a call together at a barrier; the median of every call.
    Instances on one GPU share its SMs: this, not a call alone, is how long a Server batch takes
    when every instance is busy."""
    return {size: _seconds_together([runners[size] for runners in runner_sets], rounds) for size in sorted(runner_sets[0])}


def _seconds_together(calls: List[Callable[[], object]], rounds: int) -> float:
    import statistics

    start_together, warming = threading.Barrier(len(calls)), threading.Lock()
    seconds: List[float] = []
    failed: List[BaseException] = []

    def call(run_once: Callable[[], object]) -> None:
        try:
            with warming:
                warm([run_once], EngineWorkers.WARM_CALLS)
            for _ in range(rounds):
                start_together.wait()
                began = time.perf_counter()
                run_once()
                seconds.append(time.perf_counter() - began)
        except BaseException as error:  # noqa: BLE001 -- raised below, in the caller's thread
            failed.append(error)
            start_together.abort()

    threads = [threading.Thread(target=call, args=(run_once,)) for run_once in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    real = [error for error in failed if not isinstance(error, threading.BrokenBarrierError)]
    if failed:
        raise RuntimeError("the engine failed while its instances were timed together") from (real or failed)[0]
    return statistics.median(seconds)


class Timeline:
    """Where a query's time went inside the SUT, per batch: how long its queries waited between
    reaching the SUT and the engine call, and how long the call took. Arrival here is when LoadGen
    handed the query over (LoadGen's own latency counts from the scheduled time, slightly earlier)."""

    LIMIT = 200_000  # batches kept: enough for a 600-s run at ~300 batches/s

    def __init__(self):
        self.waits_s: List[float] = []  # per query
        self.service_s: List[float] = []  # per batch
        self.shares: List[float] = []  # per query: the engine call's share of its time in the SUT
        # per batch: (start, seconds, size, size switched, the GPU's own seconds where the runner timed them)
        self.calls: List[Tuple[float, float, int, bool, Optional[float]]] = []
        self.last_size: Dict[int, int] = {}  # worker thread -> the batch size of its previous call

    def record(
        self,
        started: float,
        finished: float,
        arrivals: List[float],
        size: int = 0,
        worker: Optional[int] = None,
        device_s: Optional[float] = None,
    ) -> None:
        """One batch; `worker`: the thread that ran it (this thread's by default); `device_s`: the
        seconds the GPU took for it (CUDA events), where the call was timed on the device too."""
        if len(self.service_s) >= self.LIMIT:
            return
        service = finished - started
        self.service_s.append(service)
        worker = worker if worker is not None else threading.get_ident()
        switched = self.last_size.get(worker, size) != size
        self.last_size[worker] = size
        self.calls.append((started, service, size, switched, device_s))
        for arrival in arrivals:
            wait = max(0.0, started - arrival)
            self.waits_s.append(wait)
            self.shares.append(service / (wait + service) if wait + service > 0 else 1.0)

    def summary(self) -> Dict[str, Any]:
        """Mean/p50/p99/max of queue waits (per query) and engine calls (per batch), in ms."""
        if not self.service_s:
            return {}

        from precisionflow.measure.timing import percentile

        def spread(values: List[float]) -> Dict[str, float]:
            ordered = sorted(values)
            return {
                "mean": round(1000 * sum(ordered) / len(ordered), 4),
                "p50": round(1000 * percentile(ordered, 50), 4),
                "p99": round(1000 * percentile(ordered, 99), 4),
                "max": round(1000 * ordered[-1], 4),
            }

        return {
            "queue_wait_ms": spread(self.waits_s),
            "engine_call_ms": spread(self.service_s),
            "queries_per_batch": round(len(self.waits_s) / len(self.service_s), 2),
            "engine_share": round(sum(self.shares) / len(self.shares), 3),
        }


class GcPauses:
    """Python's garbage collections during a run, each as (start, seconds, generation), from
    gc.callbacks: a collection stops every Python thread, the SUT's workers among them, so an engine
    call it overlaps takes as long as the pause (a candidate cause of slow calls, measured here)."""

    LIMIT = 100_000

    def __init__(self):
        self.pauses: List[Tuple[float, float, int]] = []
        self._started = 0.0

    def _callback(self, phase: str, info: Dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif len(self.pauses) < self.LIMIT:
            self.pauses.append((self._started, time.perf_counter() - self._started, int(info.get("generation", -1))))

    def __enter__(self) -> "GcPauses":
        import gc

        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc) -> None:
        import gc

        gc.callbacks.remove(self._callback)


SLOW_FACTOR = 2.0  # a call slower than twice its batch size's median call, and ...
SLOW_EXTRA_S = 0.001  # ... by at least 1 ms, is a stall


def stalls(
    calls: List[Tuple[float, float, int, bool, Optional[float]]], pauses: List[Tuple[float, float, int]]
) -> Dict[str, Any]:
    """The run's slow engine calls and what each overlapped: a garbage collection, a switch of batch
    size on its worker (a new input shape: cuDNN plans, another CUDA graph), a call whose GPU time
    (CUDA events, where the call was timed on the device) was its size's usual one -- the time went
    on the host: launching, the thread's turn, the Python around it -- or none of these. `calls`:
    Timeline.calls. `excess_ms` is the time the slow calls took beyond their size's median, the
    measured share of each cause."""
    if not calls:
        return {}
    median = size_medians([(size, seconds) for _, seconds, size, _, _ in calls])
    device_median = size_medians([(size, device_s) for _, _, size, _, device_s in calls if device_s is not None])
    # "host" only where calls were timed on the device too: elsewhere no call can be placed there
    causes = {"gc": [0, 0.0], "size_switch": [0, 0.0], **({"host": [0, 0.0]} if device_median else {}), "unexplained": [0, 0.0]}
    for started, seconds, size, switched, device_s in calls:
        if not is_slow(seconds, median[size]):
            continue
        in_gc = any(start < started + seconds and start + pause > started for start, pause, _ in pauses)
        gpu_usual = device_s is not None and not is_slow(device_s, device_median[size])
        cause = causes["gc" if in_gc else "size_switch" if switched else "host" if gpu_usual else "unexplained"]
        cause[0] += 1
        cause[1] += seconds - median[size]
    longest = max(calls, key=lambda call: call[1])
    found = {
        "calls": len(calls),
        "longest_call_ms": round(1000 * longest[1], 3),
        "longest_call_size": longest[2],
        "median_call_ms": {str(size): round(1000 * value, 4) for size, value in sorted(median.items())},
        "slow_calls": {
            cause: {"calls": count, "excess_ms": round(1000 * excess, 3)} for cause, (count, excess) in causes.items()
        },
        "gc": {
            "collections": len(pauses),
            "by_generation": {str(g): sum(1 for *_, gen in pauses if gen == g) for g in sorted({gen for *_, gen in pauses})},
            "pause_max_ms": round(1000 * max((pause for _, pause, _ in pauses), default=0.0), 3),
            "pause_total_ms": round(1000 * sum(pause for _, pause, _ in pauses), 3),
        },
    }
    if device_median:
        found["median_device_ms"] = {str(size): round(1000 * value, 4) for size, value in sorted(device_median.items())}
    return found


def size_medians(timed: List[Tuple[int, float]]) -> Dict[int, float]:
    """{batch size: the median of its seconds} (the upper middle of an even count)."""
    by_size: Dict[int, List[float]] = collections.defaultdict(list)
    for size, seconds in timed:
        by_size[size].append(seconds)
    return {size: sorted(values)[len(values) // 2] for size, values in by_size.items()}


def is_slow(seconds: float, median: float) -> bool:
    """Slower than twice its size's median and by at least SLOW_EXTRA_S: a stall, not noise."""
    return seconds > SLOW_FACTOR * median and seconds - median >= SLOW_EXTRA_S


def accuracy_log(outdir: Path) -> Dict[int, Any]:
    """{sample index: the float32 row the SUT answered with}, from LoadGen's mlperf_log_accuracy.json."""
    import json

    import numpy as np

    entries = json.loads((outdir / "mlperf_log_accuracy.json").read_text() or "[]")
    return {int(entry["qsl_idx"]): np.frombuffer(bytes.fromhex(entry["data"]), dtype=np.float32) for entry in entries}


def powers_of_two(max_batch: int) -> List[int]:
    return [2**k for k in range(int(math.log2(max(1, max_batch))) + 1)]


def queue_limit(bound_s: float, largest_batch_s: float, max_batch: int, workers: int) -> int:
    """How many queries may wait before the run is overloaded: twice what the workers can serve
    within the bound at their largest batch (beyond that, queries answer late whatever happens)."""
    return max(4 * max_batch, 2 * math.ceil(bound_s / max(largest_batch_s, 1e-6)) * max_batch * max(1, workers))


def late_allowance(rate: float, settings: Dict[str, Any]) -> int:
    """How many queries a Server run may answer late and still be VALID: (1 - percentile) of what it
    schedules. A backlog beyond what the workers serve within the bound is that many late queries at
    least, so only a backlog larger than this allowance proves the run INVALID; a smaller one is a
    stall the percentile absorbs (a queue limit without it cut runs whose p99 held the bound, when
    one engine stall at a high rate filled the queue)."""
    scheduled = rate * settings["min_duration_ms"] / 1000
    return math.floor(round((1 - float(settings["percentile"])) * scheduled, 6))


def run_scenario(
    make_sut: Callable[[str], BatchingSUT],
    scenario: str,
    settings: Dict[str, Any],
    outdir: Path,
    rate: float = 0.0,
    mode: str = "PerformanceOnly",
) -> Dict[str, Any]:
    """One LoadGen run; its summary parsed, its logs left in `outdir`. `mode` AccuracyOnly: every
    sample once, the responses logged (accuracy_log reads them)."""
    import mlperf_loadgen as lg

    outdir.mkdir(parents=True, exist_ok=True)
    test = lg.TestSettings()
    test.scenario = getattr(lg.TestScenario, scenario)
    test.mode = getattr(lg.TestMode, mode)
    bound_ns = int(settings["latency_bound_ms"] * 1e6)
    test.min_duration_ms = int(settings["min_duration_ms"])
    test.min_query_count = int(settings["min_query_count"])
    for seed in ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed"):
        setattr(test, seed, int(settings["seed"]))
    if scenario == "Server":
        test.server_target_qps = float(rate)
        test.server_target_latency_ns = bound_ns
        test.server_target_latency_percentile = float(settings["percentile"])
        # Queries that came due while the SUT was busy arrive in one callback, not one each: on this
        # 2-core CPU (an engine of 20 us + 8 us per image) that took 0.8x Offline from INVALID
        # (p99 178 ms) to VALID (p99 10.7 ms); the latency still counts from each scheduled arrival.
        test.server_coalesce_queries = bool(settings.get("coalesce_queries", False))
    elif scenario == "Offline":  # LoadGen issues expected rate x duration queries: too few, and the run ends early (INVALID)
        test.offline_expected_qps = float(rate or 1000)
    elif scenario == "SingleStream":
        test.single_stream_expected_latency_ns = int(settings.get("single_stream_expected_ns") or bound_ns // 10)
    else:
        test.multi_stream_expected_latency_ns = bound_ns
        test.multi_stream_target_latency_percentile = float(settings["percentile"])
    log = lg.LogSettings()
    log.log_output.outdir = str(outdir)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False  # a trace of every query: 14 MB per run, nothing a row reads
    samples = int(settings["samples"])
    qsl = lg.ConstructQSL(samples, samples, lambda indices: None, lambda indices: None)
    sut = make_sut(scenario)
    if scenario == "Server":
        sut.queue_limit += late_allowance(rate, settings)
    collections_seen = GcPauses()
    try:
        with collections_seen:
            lg.StartTestWithLogSettings(sut.handle, qsl, test, log)
    finally:
        sut.close()
        lg.DestroyQSL(qsl)
    if sut.failed is not None:
        raise RuntimeError(f"the engine failed during the {scenario} run: {sut.failed!r}") from sut.failed
    found = parse_summary((outdir / SUMMARY).read_text())
    found.update({"scenario": scenario, "target_qps": rate, "batches": dict(sut.batches), "overloaded": sut.overloaded})
    found["where_time_went"] = sut.timeline.summary()
    found["stalls"] = stalls(sut.timeline.calls, collections_seen.pauses)
    if sut.overloaded:  # answered at once to end the run: its latencies are not the engine's
        found["valid"] = False
        found["why_invalid"] = f"overloaded: more than {sut.queue_limit} queries waited; the queue was cut, not served"
    return found


SUMMARY_FIELDS = {
    "result": r"Result is\s*:\s*(\w+)",
    "scheduled_sps": r"Scheduled samples per second\s*:\s*([\d.eE+-]+)",
    "completed_sps": r"Completed samples per second\s*:\s*([\d.eE+-]+)",
    "samples_per_second": r"Samples per second\s*:\s*([\d.eE+-]+)",
    "min_ns": r"Min latency \(ns\)\s*:\s*(\d+)",
    "max_ns": r"Max latency \(ns\)\s*:\s*(\d+)",
    "mean_ns": r"Mean latency \(ns\)\s*:\s*(\d+)",
    "p50_ns": r"50\.00 percentile latency \(ns\)\s*:\s*(\d+)",
    "p90_ns": r"90\.00 percentile latency \(ns\)\s*:\s*(\d+)",
    "p99_ns": r"99\.00 percentile latency \(ns\)\s*:\s*(\d+)",
    "early_stopping_p90_ns": r"90th percentile latency \(ns\)\s*:\s*(\d+)",
    "early_stopping_p99_ns": r"99\.00th percentile (?:server )?latency \(ns\)\s*:\s*(\d+)",
}


def parse_summary(text: str) -> Dict[str, Any]:
    """The figures of LoadGen's mlperf_log_summary.txt that a row shows; `valid` from its result line."""
    found: Dict[str, Any] = {}
    for key, pattern in SUMMARY_FIELDS.items():
        match = re.search(pattern, text)
        if match:
            found[key] = match.group(1) if key == "result" else float(match.group(1))
    found["valid"] = found.get("result") == "VALID"
    # every percentile LoadGen printed (50, 90, 95, 97, 99, 99.9), keyed by the fraction (0.99)
    found["percentiles_ns"] = {
        f"{float(level) / 100:g}": float(ns)
        for level, ns in re.findall(r"(\d+\.\d+) percentile latency \(ns\)\s*:\s*(\d+)", text)
    }
    lines = text.splitlines()
    if "Early Stopping Result:" in text:  # the block up to the next blank line: LoadGen's own words
        start = next(i for i, line in enumerate(lines) if line.startswith("Early Stopping Result:")) + 1
        block = []
        for line in lines[start:]:
            if not line.strip():
                break
            block.append(line.strip(" *"))
        found["early_stopping"] = " ".join(block)
    return found
