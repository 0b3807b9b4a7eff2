"""The side-by-side timing job: each side in its own process; a side that cannot load fails the job
with its own error instead of leaving the job waiting for it."""

import json
import threading

import numpy as np
import pytest

from precisionflow.backends import get_backend
from precisionflow.datasets.store import write_arrays
from precisionflow.errors import EngineMismatchError
from precisionflow.stages import compare_speed

ENGINE = {"backend": "onnxruntime", "optimization_level": "all", "intra_op_threads": 1}
LOCAL = {"device": "auto", "expect_device": "", "resources": {}}
SETTINGS = {
    "timing_batch_sizes": [1, 4],
    "stream_batch_size": 2,
    "streams": [],
    "warmup_s": 0.01,
    "ratio_rounds": 2,
    "ratio_window_s": 0.02,
}


def engine_node(graph, folder, **provenance):
    """A finished build_engine node folder, its engine.json changed by `provenance`."""
    folder.mkdir()
    description = get_backend("onnxruntime").build(graph, folder, ENGINE, LOCAL)
    (folder / "engine.json").write_text(json.dumps(dict(description, **provenance)))
    (folder / "node.json").write_text(
        json.dumps({"stage": "build_engine", "id": folder.name, "inputs": {}, "params": {"target_def": LOCAL}})
    )
    return folder


def compare_within(seconds, sides, data_dir):
    """compare() in a daemon thread: a hang fails the test instead of stopping the suite."""
    outcome = {}

    def target():
        try:
            outcome["result"] = compare_speed.compare(sides, data_dir, SETTINGS)
        except Exception as err:  # handed to the test below
            outcome["error"] = err

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"compare() still waiting after {seconds} s"
    return outcome


@pytest.fixture
def data_dir(tmp_path):
    images = np.random.default_rng(0).integers(0, 256, (20, 8, 8, 1), dtype=np.uint8)
    write_arrays(tmp_path / "data", {"test": (images, np.zeros(20, dtype=np.int64))}, ["a", "b", "c", "d"])
    return tmp_path / "data"


def test_both_sides_are_timed_in_alternating_rounds(tiny_onnx, tmp_path, data_dir):
    sides = {
        "engine": ("engine", engine_node(tiny_onnx, tmp_path / "int8"), 1),
        "fp32": ("engine", engine_node(tiny_onnx, tmp_path / "fp32"), 1),
    }
    outcome = compare_within(60, sides, data_dir)
    assert "error" not in outcome, outcome
    assert set(outcome["result"]) == {"b1", "b4", "loading", "devices"}
    assert outcome["result"]["devices"] == {"engine": "cpu", "fp32": "cpu"}  # engines built for this CPU
    assert outcome["result"]["b4"]["throughput_sps"]["fp32"] > 0 and "vs_fp32" in outcome["result"]["b4"]
    # Each side loaded (on a GPU: chose its kernels) while no other side was loading.
    windows = sorted(compare_speed.loaded_windows(outcome["result"].pop("loading")).values())
    assert len(windows) == 2 and windows[0][1] <= windows[1][0], windows


def test_a_side_that_cannot_load_fails_the_job_with_its_error(tiny_onnx, tmp_path, data_dir):
    sides = {
        "engine": ("engine", engine_node(tiny_onnx, tmp_path / "int8"), 1),
        "fp32": ("engine", engine_node(tiny_onnx, tmp_path / "fp32", backend_version="0.0.1"), 1),
    }
    outcome = compare_within(60, sides, data_dir)
    assert isinstance(outcome.get("error"), EngineMismatchError), outcome
    assert "backend_version '0.0.1'" in str(outcome["error"]) and "delete the engine folder" in str(outcome["error"])
