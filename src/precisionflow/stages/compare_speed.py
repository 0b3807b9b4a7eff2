"""compare_speed: the ratios of the table, measured side by side in one job.

For one engine: the engine itself, the fp32 engine of the same target and model, and the
TensorFlow model -- each in a process of its own -- are timed in alternating rounds (engine, fp32, TensorFlow, then the reverse, ...)
at each timing batch size and stream count. Every round gives one ratio per pair; the table
shows their geometric mean and the spread of the rounds, so drift of the machine cancels instead of
landing in one side's figure. One node per engine: changing an engine re-times its own ratios
(and the references they need), nothing more.
"""

import contextlib
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy as np

from precisionflow import errors, stats

from precisionflow.measure import speed, timing
from precisionflow.backends import engine_loader
from precisionflow.nodeio import read_json, write_json_atomic
from precisionflow.datasets.store import Split
from precisionflow.errors import PrecisionflowError, StageError
from precisionflow.stages import NodeContext

PACKAGES = ("numpy",)  # the engine backend's version is in params["runtime"], TensorFlow's in params["framework"]
FRAMEWORK_PACKAGES = ("tensorflow", "tf-keras")
# A side's process that does not answer within these many seconds is taken as hung: the job fails,
# naming it, instead of waiting forever. Loading covers a model's load, warm-up and cuDNN's
# exhaustive kernel search (minutes for a large model on a GPU); a turn is one timed window plus
# its warm-up, so its limit grows with the window.
LOAD_TIMEOUT_S = 900
TURN_TIMEOUT_S = 120
JOIN_TIMEOUT_S = 30
RATIO_KEYS = ("timing_batch_sizes", "streams", "stream_batch_size", "warmup_s", "ratio_rounds", "ratio_window_s")


def node_params(at: NodeContext) -> Dict[str, Any]:
    cfg, target, runtime = at.cfg, at.target, at.runtime
    from precisionflow.measure.targets import device_params, timing_settings

    params = {
        "ratio": timing_settings(cfg, target, RATIO_KEYS),
        "threads": cfg["engine"]["intra_op_threads"],
        "backend": cfg["engine"]["backend"],
        **device_params(cfg, target, runtime),
    }
    if cfg["target_defs"][target]["framework"]:  # TensorFlow is timed too: its versions are read
        from precisionflow import identity

        params["framework"] = identity.package_versions(FRAMEWORK_PACKAGES)
    return params


def check_framework(planned: Dict[str, str]) -> None:
    """The TensorFlow side runs with the versions the node's id names, or not at all."""
    from precisionflow import identity

    found = identity.package_versions(FRAMEWORK_PACKAGES)
    if found != planned:
        raise StageError(
            f"compare_speed was planned with {planned}, this machine has {found}. Plan again here, or "
            "set the target's framework=false where TensorFlow is not installed."
        )


def keras_loader(model_dir: Path, threads: int) -> Callable[[], Any]:
    from precisionflow.measure.keras_runner import KerasRunner
    from precisionflow.modeling.tfenv import import_tensorflow

    tf, keras = import_tensorflow()
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return lambda: KerasRunner(tf, keras.models.load_model(model_dir / "model.keras", compile=False))


def side_device(role: str, folder: Path) -> str:
    """Where a side runs, "gpu" or "cpu": TensorFlow's devices as it finds them in this process (a
    TensorFlow without a CUDA it can load runs on the CPU beside a GPU engine), an engine's as built."""
    if role == "model":
        from precisionflow.modeling.tfenv import import_tensorflow

        tf, _ = import_tensorflow()
        return "gpu" if tf.config.list_logical_devices("GPU") else "cpu"
    return "gpu" if read_json(folder / "engine.json").get("device") == "cuda" else "cpu"


def side_timers(loader: Callable[[], Any], images: np.ndarray, settings: Dict[str, Any], phase: str):
    """{setting: function timing one turn of this side}: every batch size (phase "batch") or every
    stream count (phase "streams").

    Each turn warms the side up again before its timed window: a framework that sat idle while the
    other sides ran (thread pools asleep, caches taken) would otherwise pay its ramp inside the window."""
    first = loader()
    turn_warmup = min(settings["warmup_s"], settings["ratio_window_s"] / 2)
    timers = {}
    for size in settings["timing_batch_sizes"] if phase == "batch" else ():
        run_once = first.prepare(speed.timing_batch(images, size))
        timing.warm_up(run_once, settings["warmup_s"])
        timers[f"b{size}"] = lambda seconds, run_once=run_once, size=size: (
            timing.warm_up(run_once, turn_warmup),
            timing.window_throughput(run_once, size, seconds),
        )[1]
    stream_batch = speed.timing_batch(images, settings["stream_batch_size"])
    for count in settings["streams"] if phase == "streams" else ():
        runners, _ = speed.stream_runners(first, loader, stream_batch, count)
        for run_once in runners:
            timing.warm_up(run_once, settings["warmup_s"])
        timers[f"s{count}"] = lambda seconds, runners=runners: timing.concurrent_streams(
            runners, settings["stream_batch_size"], turn_warmup, seconds
        )["throughput_sps"]
    return timers


def pin_to_cpus(count: int) -> list:
    """Keep this process (and every thread it starts later) on the last `count` CPUs it may use."""
    import os

    chosen = sorted(os.sched_getaffinity(0))[-max(count, 1) :]
    os.sched_setaffinity(0, chosen)
    return chosen


def side_worker(conn, role: str, folder: str, data_dir: str, threads: int, settings: Dict[str, Any], phase: str) -> None:
    """One side, in its own process: load it, warm its settings, then time a turn when asked.

    Each side runs in a process of its own, as it would be deployed: TensorFlow's and ONNX Runtime's
    thread pools, allocators and caches never share an address space (in one process they were
    measured to shift TensorFlow's speed by 20-50% from one job to the next). For the batch settings
    the process is pinned, before any library starts a thread, to as many CPUs as the engines'
    thread count, the same CPUs for every side: unpinned, TensorFlow with one thread wandered
    between the cores and its speed moved ~15% from process to process; pinned, ~4%. Stream
    settings keep every CPU (concurrent streams are about using them). The process waits, idle,
    while the other sides take their turns."""
    import time

    loading_from = time.monotonic()  # one clock for all processes of the machine: the loads can be seen not to overlap
    if phase == "batch":
        pin_to_cpus(threads)
    try:
        loader = keras_loader(Path(folder), threads) if role == "model" else engine_loader(Path(folder))
        images = speed.timing_images(Split(Path(data_dir), "test"), settings)
        timers = side_timers(loader, images, settings, phase)
    except PrecisionflowError as err:  # e.g. an engine built elsewhere: the job fails with this message
        conn.send(("error", type(err).__name__, str(err)))
        return
    conn.send(("ready", sorted(timers), [loading_from, time.monotonic()], side_device(role, Path(folder))))
    for setting, seconds in iter(conn.recv, None):
        conn.send(timers[setting](seconds))


def compare(sides: Dict[str, tuple], data_dir: Path, settings: Dict[str, Any]) -> Dict[str, Any]:
    """Per setting: median throughput of each side and the per-round ratios engine/fp32, engine/tf.
    `sides` maps a side name to (role, node folder, threads).

    The side processes are started one at a time, each only once the one before has loaded and
    warmed up: on a GPU, loading picks the convolution kernels by timing candidates (cuDNN's
    exhaustive search), and processes doing that at once pick under each other's load -- other
    kernels than the evaluation job of the same engine runs, so the ratio would not be of that
    engine."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    connections, processes, ready = {}, {}, {}
    phases = ["batch"] + (["streams"] if settings["streams"] else [])
    try:
        for phase in phases:
            for side, (role, folder, threads) in sides.items():
                parent, child = context.Pipe()
                process = context.Process(
                    target=side_worker, args=(child, role, str(folder), str(data_dir), threads, settings, phase)
                )
                process.start()
                child.close()  # only the worker holds its end now: a worker that dies reads as EOF, not a hang
                connections[(phase, side)], processes[(phase, side)] = parent, process
                ready[(phase, side)] = _ready(parent, (phase, side))
        results = {
            setting: _compare_setting(
                {side: (conn, processes[(p, side)]) for (p, side), conn in connections.items() if p == phase}, setting, settings
            )
            for phase in phases
            for setting in ready[(phase, "engine")][1]
        }
        results["loading"] = {f"{phase}/{side}": message[2] for (phase, side), message in ready.items()}
        results["devices"] = {side: message[3] for (phase, side), message in ready.items() if phase == "batch"}
        return results
    finally:
        for conn in connections.values():
            with contextlib.suppress(OSError):  # a worker that failed has closed its end
                conn.send(None)
        for process in processes.values():
            process.join(JOIN_TIMEOUT_S)
            if process.is_alive():  # hung: it would hold the job (and its CPUs or GPU) forever
                process.kill()
                process.join(5)


def loaded_windows(loading: Dict[str, List[float]]) -> Dict[str, List[float]]:
    """Each side's [start, end] of loading and warming up, in seconds from the first start: one after another."""
    first = min(start for start, _ in loading.values())
    return {side: [round(start - first, 3), round(end - first, 3)] for side, (start, end) in loading.items()}


def _ready(conn, key) -> List[str]:
    """The settings a side's process can time, once it has loaded; its failure as this job's error."""
    phase, side = key
    if not conn.poll(LOAD_TIMEOUT_S):
        raise StageError(
            f"The {side} side's timing process ({phase} settings) did not finish loading within {LOAD_TIMEOUT_S} s: "
            "taken as hung and stopped. Its log lines are above; rerun the node (a fresh process)."
        )
    try:
        message = conn.recv()
    except EOFError:
        raise StageError(
            f"The {side} side's timing process ({phase} settings) exited before it was ready; its traceback is above in this log."
        ) from None
    if message[0] == "error":
        raise getattr(errors, message[1], StageError)(message[2])
    return message


def died(side: str, setting: str, process) -> StageError:
    """A side's timing process that died in the middle of the rounds, as this job's error."""
    process.join(5)
    code = process.exitcode
    how = f"exit code {code}" if code is not None and code >= 0 else f"killed by signal {-code}" if code else "still running"
    return StageError(
        f"The {side} side's timing process died while timing {setting} ({how}); its traceback is above in "
        "this log. A CUDA error there (700: an illegal memory access) is a fault of that engine's run on "
        "the GPU, not of these settings: run the node again (a new process); if it recurs, time it "
        "without CUDA graphs (engine.onnxruntime.cuda_graph=false)."
    )


def hung(side: str, setting: str, limit: float) -> StageError:
    return StageError(
        f"The {side} side's timing process did not answer a {setting} turn within {limit:.0f} s: taken as hung "
        "(a deadlocked runtime, a stuck device); the job stops it and fails. Rerun the node; if it recurs, "
        "time that side alone (precisionflow run --only the engine's evaluate node) to see where it stops."
    )


def _compare_setting(connections, setting: str, settings: Dict[str, Any]) -> Dict[str, Any]:
    """`connections`: {side: (pipe to its worker, its process)}."""

    def turn(side, conn, process):
        def timed(seconds):
            try:
                conn.send((setting, seconds))
                if not conn.poll(TURN_TIMEOUT_S + 10 * seconds):
                    raise hung(side, setting, TURN_TIMEOUT_S + 10 * seconds)
                return conn.recv()
            except (EOFError, BrokenPipeError, ConnectionResetError):
                raise died(side, setting, process) from None

        return timed

    measured = timing.alternating_rounds(
        {side: turn(side, conn, process) for side, (conn, process) in connections.items()},
        settings["ratio_rounds"],
        settings["ratio_window_s"],
    )
    entry: Dict[str, Any] = {"throughput_sps": {side: float(np.median(values)) for side, values in measured.items()}}
    for reference, key in (("fp32", "vs_fp32"), ("tensorflow", "vs_tf")):
        if reference in measured:
            entry[key] = stats.ratio_stats(measured["engine"], measured[reference])
    return entry


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    sides = {"engine": ("engine", inputs["engine"], params["threads"])}
    if "fp32_engine" in inputs:
        sides["fp32"] = ("engine", inputs["fp32_engine"], params["threads"])
    if "model" in inputs:
        check_framework(params["framework"])
        sides["tensorflow"] = ("model", inputs["model"], params["threads"])
    conditions = speed.conditions()
    results = compare(sides, inputs["data"], params["ratio"])
    loading, devices = results.pop("loading"), results.pop("devices")
    metrics = {
        "target": params["target"],
        "sides": {side: folder.name for side, (_, folder, _) in sides.items()},
        "devices": devices,  # where each side ran: a ratio of sides on two devices is said so in the report
        "settings": results,
        "conditions": speed.finished(conditions),
        "loaded_s": loaded_windows(loading),
        "rounds": params["ratio"]["ratio_rounds"],
        "window_s": params["ratio"]["ratio_window_s"],
        "processes": "one per side and phase; batch settings pinned to the engines' thread count of CPUs",
    }
    write_json_atomic(out / "metrics.json", metrics)
    return {
        setting: {key: round(entry[key]["geomean"], 3) for key in ("vs_fp32", "vs_tf") if key in entry}
        for setting, entry in results.items()
    }
