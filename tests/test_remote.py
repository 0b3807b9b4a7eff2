"""Train here, build and measure there: ship a target's engine nodes, run them in another process
with the plan's results elsewhere (as a GPU node would), land them, finish the report here."""

import json
import os
import re
import tarfile
import subprocess
import sys
from pathlib import Path

import pytest

from precisionflow.pipeline import remote
from precisionflow.errors import LineageError, StageError


def test_target_nodes_come_in_dependency_order_and_a_missing_target_is_named():
    plan = {
        "nodes": {
            "compare_speed/a": {"stage": "compare_speed", "params": {"target": "h200"}, "inputs": {}},
            "evaluate_engine/a": {"stage": "evaluate_engine", "params": {"target": "h200"}, "inputs": {}},
            "build_engine/a": {"stage": "build_engine", "params": {"target": "h200"}, "inputs": {}},
            "build_engine/b": {"stage": "build_engine", "params": {"target": "local"}, "inputs": {}},
        }
    }
    assert remote.target_nodes(plan, "h200") == ["build_engine/a", "evaluate_engine/a", "compare_speed/a"]
    with pytest.raises(StageError, match=r"no engine nodes for target 'a100'.*\['h200', 'local'\]"):
        remote.target_nodes(plan, "a100")


@pytest.fixture
def gpu_acceptance():
    """benchmarks/gpu_acceptance.py as a module."""
    benchmarks = Path(__file__).resolve().parents[1] / "benchmarks"
    sys.path.insert(0, str(benchmarks))
    try:
        import gpu_acceptance

        return gpu_acceptance
    finally:
        sys.path.remove(str(benchmarks))


def acceptance(*args: str) -> str:
    """benchmarks/gpu_acceptance.py, as the GPU acceptance runs it."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_acceptance.py"
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_the_acceptance_path_ships_runs_elsewhere_lands_and_finishes_here(tmp_path):
    """The GPU acceptance's path on this CPU (a named target `cpu`): plan and train here, ship, the
    runner elsewhere (`remote run` on the bundle alone), collect, land, and the report, MLflow and the
    acceptance's table from the landed node folders -- serving included, every LoadGen run recorded,
    and the dim condition judged on its own images."""
    work = tmp_path / "work"
    acceptance("prepare", str(work), "--device", "cpu", "--per-class", "12")
    results, bundle = work / "results", work / "bundle"
    assert not (results / "build_engine").exists()  # upstream only: the engines are built there
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert len(manifest["nodes"]) == 8 and any(f.endswith("/x_test.npy") for f in manifest["upstream_files"])
    assert not list(bundle.glob("results/prepare_dataset/*/x_train.npy"))  # the test split only travels
    assert not any("model.keras" in f for f in manifest["upstream_files"])  # the GPU stages never open it

    # There: the runner reads the bundle's copy of the plan, with the results folder moved.
    env = dict(os.environ, PYTHONPATH=str(Path(remote.__file__).parents[2]))
    there = subprocess.run(
        [sys.executable, "-m", "precisionflow.pipeline.remote", "run", str(bundle)], capture_output=True, text=True, env=env
    )
    assert there.returncode == 0, there.stderr[-2000:]
    collected = tmp_path / "collected"
    assert len(remote.collect(bundle, collected, without_engine_files=True)) == 8
    assert not list(collected.glob("build_engine/*/engine.onnx"))
    with tarfile.open(tmp_path / "collected.tar.xz", "w:xz") as archive:
        archive.add(collected, arcname=".")

    landed = acceptance("land", str(work), str(tmp_path / "collected.tar.xz"))
    assert "8 node folders landed" in landed and re.search(r"\b2 of \d+ planned jobs executed", landed), landed  # report, MLflow
    # the dim patches (every 5th, tagged in the acceptance's sidecar) judged on their own: fp16 vs fp32 there
    assert re.search(r"worst condition: dim [+-]\d+\.\d+ \[[^]]+\] points on \d+ images", landed), landed
    plan = json.loads(next((results / ".plans").glob("*.json")).read_text())
    assert remote.land(collected, plan) == []  # landed folders are never overwritten
    table = acceptance("table", str(work)).splitlines()
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in table[2:]}
    # a row per side served: fp32 beside fp16 (the ratio's reference) too, so every LoadGen run is counted
    assert set(rows) == {"fp32", "fp16", "fp32 beside fp16"}, table
    for cells in rows.values():
        assert int(cells[12]) >= 3 and cells[7] != "none", cells  # SingleStream, Offline, the Server search's runs
        assert re.fullmatch(r"\d+", cells[10]), cells  # a CPU's Server batch: one instance, nothing queued behind it
    assert rows["fp32 beside fp16"][9] == "-" and rows["fp32"][9] == "ref", table
    # the fp16/fp32 Server ratio: an interval, or the report's words for why there is none
    said = r"\d+\.\d+ (\[\d+\.\d+, \d+\.\d+\]|\((no interval|\d+ pairs disagree)[^)]*\))"
    assert re.fullmatch(said, rows["fp16"][9]), rows["fp16"]


def test_land_refuses_folders_of_another_plan(tmp_path):
    foreign = tmp_path / "collected" / "evaluate_engine" / "fp32-cpu-000000000000"
    foreign.mkdir(parents=True)
    (foreign / "node.json").write_text(json.dumps({"id": "fp32-cpu-000000000000"}))
    with pytest.raises(LineageError, match="not a node of this plan"):
        remote.land(tmp_path / "collected", {"results_dir": str(tmp_path / "results"), "nodes": {}})


def test_keep_going_reports_every_failure_and_runs_the_rest(tmp_path, monkeypatch, capsys):
    """A node whose exception has no message (a timing worker's EOFError) once crashed the batch."""
    from precisionflow.pipeline import runner

    bundle = tmp_path / "bundle"
    (bundle / "results").mkdir(parents=True)
    keys = ["build_engine/a", "compare_speed/a", "evaluate_engine/b", "compare_speed/b"]
    (bundle / "plan.json").write_text(json.dumps({"nodes": {key: {} for key in keys}}))
    (bundle / "manifest.json").write_text(json.dumps({"nodes": keys}))
    ran = []

    def run_node(plan, key, results):
        ran.append(key)
        if key == "compare_speed/a":
            raise EOFError()  # what a dead worker's pipe gives
        if key == "evaluate_engine/b":
            raise StageError("first line\nsecond line")
        return {"timings": {"seconds": 0.1}}

    monkeypatch.setattr(runner, "run_node", run_node)
    with pytest.raises(StageError, match=r"2 nodes failed: \['compare_speed/a', 'evaluate_engine/b'\]"):
        remote.run_bundle(bundle, keep_going=True)
    assert ran == keys  # every node after a failure still ran
    printed = capsys.readouterr().out
    assert "compare_speed/a: FAILED: EOFError (no message)" in printed
    assert "evaluate_engine/b: FAILED: StageError: first line" in printed and "second line" not in printed


def test_a_timing_worker_that_dies_mid_round_fails_its_node_with_a_clear_message():
    import multiprocessing

    from precisionflow.stages import compare_speed

    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    worker = context.Process(target=os._exit, args=(3,))  # dies as a CUDA fault would: at once, no message
    worker.start()
    child.close()
    with pytest.raises(StageError, match=r"engine side's timing process died while timing b8 \(exit code 3\)"):
        compare_speed._compare_setting(
            {"engine": (parent, worker), "fp32": (FakeSide(), None)}, "b8", {"ratio_rounds": 2, "ratio_window_s": 0.01}
        )


class FakeSide:
    """A side that always answers (the fp32 engine's worker)."""

    def send(self, message):
        self.last = message

    def recv(self):
        return 100.0


def test_a_detection_bundle_names_the_module_its_evaluations_lack_before_anything_runs(monkeypatch):
    import importlib.util

    from precisionflow.pipeline import remote

    plan = {
        "nodes": {
            "evaluate_engine/a": {"stage": "evaluate_engine", "params": {"task": "detection"}},
            "evaluate_engine/b": {"stage": "evaluate_engine", "params": {"task": "classification"}},
            "build_engine/c": {"stage": "build_engine", "params": {}},
        }
    }
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "pycocotools" else real(name))
    missing = remote.missing_modules(plan, list(plan["nodes"]))
    assert missing == {"pycocotools": ["evaluate_engine/a"]}
    assert "pycocotools (needed by 1 node(s), e.g. evaluate_engine/a): install it there" in remote.missing_text(missing)


def test_a_packed_h200_plan_is_the_presets_and_an_h100_plan_names_its_own_card_runtime_and_run_length(tmp_path):
    """`gpu_acceptance.py pack` plans the card that comes with the h200 preset's settings: for h200 the
    engine, evaluation and serve nodes are the preset's own (a figure from a packed plan is the users'
    preset's figure); for h100 every engine node names h100, the declared runtime and the run length."""
    benchmarks = Path(__file__).resolve().parents[1] / "benchmarks"
    sys.path.insert(0, str(benchmarks))
    try:
        import gpu_acceptance
        from photo_patches import write_patches
    finally:
        sys.path.remove(str(benchmarks))
    from precisionflow.pipeline.plan import plan_from_overrides

    write_patches(tmp_path / "photos", per_class=4, size=16)
    base = [*gpu_acceptance.GPU_OVERRIDES, f"dataset.path={tmp_path / 'photos'}", f"results_dir={tmp_path / 'results'}"]
    without_serving = [item for item in base if not item.startswith("target_defs.h200.serving.")]

    def engine_nodes(overrides):
        nodes = json.loads(plan_from_overrides(overrides).read_text())["nodes"]
        return {key: node for key, node in nodes.items() if node["params"].get("target") in ("h100", "h200")}

    preset = engine_nodes(base)
    assert engine_nodes(without_serving + gpu_acceptance.target_overrides("h200", 20)).keys() == preset.keys()
    h100 = engine_nodes(without_serving + gpu_acceptance.target_overrides("h100", 10))
    assert {key.split("/")[1].split("-")[1] for key in h100} == {"h100"}
    assert {node["params"]["runtime"]["backend_version"] for node in h100.values() if "runtime" in node["params"]} == {"1.31.1"}
    served = [node["params"] for key, node in h100.items() if key.startswith("serve_engine/")]
    assert served and {params["serving"]["min_duration_ms"] for params in served} == {10000}


def test_a_payload_split_into_parts_joins_back_byte_for_byte_and_its_first_parts_are_the_lean_packages(
    tmp_path, monkeypatch, gpu_acceptance
):
    """gpu_path.sh joins the parts and cuts the archives apart by their byte counts: the parts must join
    back to the archives in order, and a lean archive of whole parts must fill its parts alone (the
    lean parts staged for one payload serve every payload)."""
    size = 1000
    monkeypatch.setattr(gpu_acceptance, "PART_BYTES", size)
    archives = []
    for name, length in (("lean", 2 * size), ("env", size // 3), ("work", size + 7)):
        archives.append(tmp_path / name)
        archives[-1].write_bytes(bytes([len(archives)]) * length)
    gpu_acceptance.write_parts(tmp_path / "parts", archives)
    parts = sorted((tmp_path / "parts").glob("part*"))
    assert [part.name for part in parts] == ["part00", "part01", "part02", "part03"]
    assert b"".join(part.read_bytes() for part in parts) == b"".join(archive.read_bytes() for archive in archives)
    assert set(parts[0].read_bytes() + parts[1].read_bytes()) == {1}


def test_the_default_target_planned_on_a_gpu_machine_finds_the_dataset_and_model_made_without_one(
    tmp_path, monkeypatch, gpu_acceptance
):
    """`gpu_acceptance.py pack-default` ships the dataset and trained-model nodes and lets the GPU
    machine make the rest: those ids must not depend on the machine that plans (a GPU, another
    onnxruntime), while the export's names the onnxruntime there and the engines are the GPU's."""
    from precisionflow import devices, identity
    from precisionflow.pipeline.plan import plan_from_overrides

    def planned():
        nodes = json.loads(plan_from_overrides(["precisions=[fp32,fp16]", f"results_dir={tmp_path}"]).read_text())["nodes"]
        return lambda stage: {key for key in nodes if key.startswith(f"{stage}/")}

    monkeypatch.setattr(devices, "has_nvidia_gpu", lambda: False)
    here = planned()
    facts = {**devices.gpu_facts(), "device_name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}
    monkeypatch.setattr(devices, "gpu_facts", lambda selector=None: dict(facts))
    monkeypatch.setattr(devices, "has_nvidia_gpu", lambda: True)
    installed = identity.installed_version
    monkeypatch.setattr(identity, "installed_version", lambda name: "1.31.1" if name == "onnxruntime" else installed(name))
    there = planned()
    for stage in gpu_acceptance.REUSED_STAGES:
        assert here(stage) and here(stage) == there(stage), stage
    assert here("export_onnx") != there("export_onnx")  # its id names the onnxruntime that checks it
    assert there("build_engine") and there("build_engine").isdisjoint(here("build_engine"))  # the GPU's engines


def test_a_landed_default_run_is_read_with_the_plan_it_ran_and_never_landed_twice(tmp_path, gpu_acceptance):
    """land-default keeps the GPU machine's results beside the plan and takes, of the plans the run
    wrote there, the one whose engines it served, so `table` reads that run's own nodes."""
    import io
    import tarfile

    dry = {"nodes": {"build_engine/fp32-local-a": {}}}
    ran = {"nodes": {"build_engine/fp32-local-a": {}, "serve_engine/fp32-local-b": {}}}
    files = {
        ".plans/1.json": json.dumps(dry),
        ".plans/2.json": json.dumps(ran),
        "serve_engine/fp32-local-b/node.json": "{}",
        "report/sweep-1/summary.txt": "the report made there",
    }
    collected = tmp_path / "collected.tar.xz"
    with tarfile.open(collected, "w:xz") as archive:
        for name, text in files.items():
            member = tarfile.TarInfo(name)
            member.size = len(text.encode())
            archive.addfile(member, io.BytesIO(text.encode()))
    plan_dir = tmp_path / "plan"
    gpu_acceptance.land_default(plan_dir, collected)
    assert json.loads((plan_dir / "bundle" / "plan.json").read_text()) == ran
    assert gpu_acceptance.results_dir(plan_dir) == plan_dir / "results"
    assert gpu_acceptance.planned_nodes(plan_dir) == sorted(ran["nodes"])
    with pytest.raises(SystemExit, match="holds a landed run already"):
        gpu_acceptance.land_default(plan_dir, collected)


def test_a_job_s_gpu_seconds_leave_out_each_node_s_wait_for_its_gpu_slot(tmp_path, gpu_acceptance):
    """`precisionflow run --cores 16` starts a target's nodes side by side and each waits for the GPU
    slot; the table's GPU seconds are the nodes' seconds less those waits (the default target's run on
    the H100 read 3,133 s of nodes in a run of 1,011 s before)."""
    nodes = {
        "build_engine/fp16-h100-a": {"timings": {"seconds": 40.0}},
        "serve_engine/fp16-h100-b": {"timings": {"seconds": 500.0}, "gpu_slot": {"waited_s": 30.0}},
        "evaluate_engine/fp16-h100-c": {"timings": {"seconds": 520.0}, "gpu_slot": {"waited_s": 490.0}},
        "train_model/resnet50-d": {"timings": {"seconds": 100.0}},
    }
    for key, record in nodes.items():
        (tmp_path / key).mkdir(parents=True)
        (tmp_path / key / "node.json").write_text(json.dumps(record))
    assert gpu_acceptance.target_seconds(tmp_path, [*nodes, "compare_speed/fp16-h100-e"], "h100") == 40 + 470 + 30
