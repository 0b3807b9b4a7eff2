"""Shared fixtures: tiny ONNX graphs made in the test (no TensorFlow needed)."""

from pathlib import Path

import numpy as np
import pytest


# The shortest timing a test run can use: speed is not what these tests check.
FAST_TIMING = [
    "evaluate.duration_s=0.05",
    "evaluate.warmup_s=0.01",
    "evaluate.timing_batch_sizes=[1,8]",
    "evaluate.repeats=2",
    "evaluate.streams=[2]",
    "evaluate.ratio_rounds=2",
    "evaluate.ratio_window_s=0.03",
    "evaluate.serving.enabled=false",  # serving has tests of its own (test_serving.py, test_end_to_end.py)
    # No TensorFlow baseline: its jobs and each ratio job's TensorFlow sides (two processes loading
    # TensorFlow, ~7 of a ratio job's ~10 s here) are test_end_to_end's to check.
    "target_defs.local.framework=false",
]


def make_tiny_cnn(path, seed: int = 0, classes: int = 4):
    """Conv(1->4) -> Relu -> Flatten -> Gemm(->classes) on NHWC 8x8x1 input, dynamic batch."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weights = {
        "conv_w": rng.normal(0, 0.5, (4, 1, 3, 3)).astype(np.float32),
        "conv_b": rng.normal(0, 0.1, (4,)).astype(np.float32),
        "fc_w": rng.normal(0, 0.2, (4 * 8 * 8, classes)).astype(np.float32),
        "fc_b": rng.normal(0, 0.1, (classes,)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Transpose", ["image"], ["nchw"], perm=[0, 3, 1, 2], name="to_nchw"),
        helper.make_node("Conv", ["nchw", "conv_w", "conv_b"], ["conv"], pads=[1, 1, 1, 1], name="conv0"),
        helper.make_node("Relu", ["conv"], ["relu"], name="relu0"),
        helper.make_node("Flatten", ["relu"], ["flat"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="logits"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 8, 8, 1])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture
def tiny_onnx(tmp_path):
    return make_tiny_cnn(tmp_path / "tiny.onnx")


@pytest.fixture
def tiny_images():
    return np.random.default_rng(1).random((50, 8, 8, 1), dtype=np.float32)


@pytest.fixture(autouse=True)
def release_tensorflow_models():
    """TensorFlow models built in this process are released after each test: kept alive across
    tests (Keras's global graph holds them) one pytest process reached 8.7 GB."""
    import sys
    import time

    started = time.perf_counter()
    yield
    keras = sys.modules.get("tf_keras")
    # Only after tests long enough to have built models: gc.collect with TensorFlow loaded costs
    # ~0.2 s, which after every quick test doubled the fast suite's time.
    if keras is not None and time.perf_counter() - started > 0.5:
        import gc

        keras.backend.clear_session()
        gc.collect()


# The test files that take longest (seconds of one worker, fresh-clone suite on the 2-core machine,
# three workers, 2026-12-06: benchmarks/results/suite/session3_2026-12-06.txt), longest first.
# pytest-xdist hands out whole files (--dist loadfile) in collection order (--no-loadscope-reorder,
# Makefile): these go first, so the workers end together on quick files instead of one idling while
# another runs a four-minute file handed out last. Order only; a file missing here runs after them,
# and every order is correct.
LONGEST_FILES_FIRST = (
    "tests/test_end_to_end.py",  # 430 s
    "tests/test_advice_works.py",  # 283 s
    "tests/detection/test_detection_workflow.py",  # 260 s
    "tests/test_runlock.py",  # 257 s
    "tests/test_installed_wheel.py",  # 249 s
    "tests/test_mlflow_server.py",  # 171 s
    "tests/test_upstream_is_never_written.py",  # 166 s
    "tests/test_slurm.py",  # 166 s
    "tests/stages/test_qat_models.py",  # 120 s
    "tests/test_identity.py",  # 85 s
    "tests/test_remote.py",  # 75 s
    "tests/quant/test_qdq_and_calibration.py",  # 61 s
)


def pytest_collection_modifyitems(items):
    rank = {path: place for place, path in enumerate(LONGEST_FILES_FIRST)}
    # sort is stable: tests keep their order inside a file, and the other files theirs
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


FILE_SECONDS = {}  # test file -> seconds its tests took (setup, call and teardown)
WORKER_SECONDS = {}  # pytest-xdist worker -> seconds of tests it ran
PEAKS = {}  # test id -> its process's peak RSS (MB) after it, where the test raised that process's peak
LAST_PEAK = {}  # test process (pid) -> its peak so far
FILE_CPU = {}  # test file -> CPU seconds its tests used, their waited-for child processes' included


def cpu_seconds() -> float:
    """This process's CPU time and its waited-for children's."""
    import resource

    return sum(
        usage.ru_utime + usage.ru_stime for usage in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.cpu_before = cpu_seconds()  # before its fixtures: a module fixture's work counts for its file


def pytest_runtest_teardown(item):
    """The peak travels in the test's report: under pytest-xdist the tests run in worker processes and
    only their reports reach the process that prints the summary."""
    import os
    import resource

    item.user_properties.append(("peak_rss_mb", (os.getpid(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)))
    # CPU beside wall time: a file whose tests mostly wait (a scheduler's polling, fixed-length LoadGen
    # runs, a server starting) shows it, which decides whether more workers than cores would help
    item.user_properties.append(("cpu_s", cpu_seconds() - getattr(item, "cpu_before", cpu_seconds())))


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    FILE_SECONDS[path] = FILE_SECONDS.get(path, 0.0) + report.duration
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "main")
    WORKER_SECONDS[worker] = WORKER_SECONDS.get(worker, 0.0) + report.duration
    if report.when != "teardown":
        return
    for name, value in report.user_properties:
        if name == "cpu_s":
            FILE_CPU[path] = FILE_CPU.get(path, 0.0) + value
        if name == "peak_rss_mb":
            pid, peak = value
            if peak > LAST_PEAK.get(pid, 0) + 50:
                PEAKS[report.nodeid] = peak
            LAST_PEAK[pid] = max(peak, LAST_PEAK.get(pid, 0))


def pytest_terminal_summary(terminalreporter):
    """The suite's memory, in the output CI keeps: the test processes' peaks, and the largest child's
    (the workflow runs, Snakemake jobs and TensorFlow subprocesses the tests start)."""
    import resource

    own = max([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, *LAST_PEAK.values()])
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    workers = len(LAST_PEAK)
    terminalreporter.write_line(
        f"memory: largest test process peak RSS {own:.0f} MB ({workers} test process(es) at once); "
        f"largest child process peak RSS {children:.0f} MB"
    )
    for nodeid, peak in sorted(PEAKS.items(), key=lambda item: -item[1])[:5]:
        terminalreporter.write_line(f"memory: a test process's peak reached {peak:.0f} MB in {nodeid}")
    # Time, to keep LONGEST_FILES_FIRST true and to see whether the workers ended together.
    busy = ", ".join(f"{worker} {seconds:.0f} s" for worker, seconds in sorted(WORKER_SECONDS.items()))
    terminalreporter.write_line(f"time: tests per worker: {busy}")
    total_cpu, total_wall = sum(FILE_CPU.values()), sum(FILE_SECONDS.values())
    terminalreporter.write_line(f"time: CPU {total_cpu:.0f} s in {total_wall:.0f} s of tests (children's included)")
    for path, seconds in sorted(FILE_SECONDS.items(), key=lambda item: -item[1])[:12]:
        terminalreporter.write_line(f"time: {seconds:7.1f} s  {path}  (CPU {FILE_CPU.get(path, 0.0):.0f} s)")


@pytest.fixture(scope="module")
def keras():
    """tf_keras, imported once per test module (TensorFlow is heavy: only the tests that ask load it)."""
    from precisionflow.modeling.tfenv import import_tensorflow

    return import_tensorflow()[1]


def start_mlflow_server(store: Path):
    """(a real `mlflow server` on the SQLite store `store`, at a free port in its own session so that
    os.killpg stops its workers too; its base URL). wait_for_mlflow(url) before asking it anything."""
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{store}", "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    return server, f"http://127.0.0.1:{port}"


def wait_for_mlflow(uri: str, seconds: float = 60) -> None:
    """Until a local `mlflow server` answers /health (a RuntimeError after `seconds`)."""
    import time
    import urllib.request

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{uri}/health", timeout=1)  # noqa: S310 -- the local test server
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"mlflow server did not answer {uri}/health within {seconds:g} s")


@pytest.fixture(scope="session")
def node_store(tmp_path_factory):
    """The session's store of upstream nodes (tests/node_store.py), shared by the xdist workers."""
    from tests.node_store import NodeStore, store_root

    return NodeStore(store_root(tmp_path_factory.getbasetemp()))
