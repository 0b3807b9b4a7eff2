"""No stage writes outside its own node folder (slow): every precision, report and MLflow, run node
by node through the runner in a process of its own, as Snakemake runs it -- and each node folder is
made immutable (chattr +i, which binds root too) the moment it finishes. A stage that wrote into any
upstream folder would fail. Then three calibration methods over one export, run two at a time by
Snakemake (the case where ONNX Runtime's quantization tools once wrote model-inferred.onnx into the
export's folder and one calibrate job deleted the other's file)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from precisionflow.config.compose import expand
from precisionflow.pipeline.plan import build_plan
from precisionflow.nodeio import write_json_atomic

pytestmark = pytest.mark.slow

EVERY_STAGE = [
    "model=small_cnn",
    "dataset.max_samples=400",
    "train.epochs=1",
    "finetune.epochs=1",
    "precisions=[fp32,fp16,int8,int8_qat,int8_mixed]",
    "calibration.num_samples=64",
    "int8.report_samples=16",
    "target_defs.local.framework=false",  # the TensorFlow baseline is test_end_to_end's
    "evaluate.duration_s=0.02",
    "evaluate.warmup_s=0.01",
    "evaluate.timing_batch_sizes=[1,8]",
    "evaluate.repeats=2",
    "evaluate.streams=[2]",
    "evaluate.ratio_rounds=2",
    "evaluate.ratio_window_s=0.02",
    "evaluate.serving.enabled=false",
]


def chattr(flag: str, path: Path) -> None:
    subprocess.run(["chattr", "-R", flag, str(path)], check=True, capture_output=True)


def immutable_supported(tmp_path: Path) -> str:
    """'' if chattr +i works here (root, a filesystem with the flag), else why not."""
    if os.geteuid() != 0 or shutil.which("chattr") is None:
        return "needs root and chattr (e2fsprogs) to make folders immutable"
    probe = tmp_path / "probe"
    probe.write_text("x")
    try:
        chattr("+i", probe)
    except subprocess.CalledProcessError as err:
        return f"this filesystem refuses chattr +i: {err.stderr.decode().strip()}"
    chattr("-i", probe)
    return ""


def in_dependency_order(plan):
    done, order, nodes = set(), [], plan["nodes"]
    while len(order) < len(nodes):
        ready = sorted(key for key, spec in nodes.items() if key not in done and set(spec["inputs"].values()) <= done)
        assert ready, "the plan has a cycle"
        order += ready
        done.update(ready)
    return order


def test_every_stage_writes_only_its_own_folder(tmp_path):
    reason = immutable_supported(tmp_path)
    if reason:
        pytest.skip(reason)
    results = tmp_path / "results"
    plan = build_plan(expand(EVERY_STAGE, multirun=True), str(results))
    plan_file = tmp_path / "plan.json"
    write_json_atomic(plan_file, plan)
    frozen = []
    try:
        for key in in_dependency_order(plan):
            done = subprocess.run(
                [sys.executable, "-m", "precisionflow.pipeline.runner", "--plan", str(plan_file), "--node", key],
                capture_output=True,
                text=True,
            )
            assert done.returncode == 0, f"{key}:\n{done.stderr[-3000:]}"
            chattr("+i", results / key)  # finished: nothing may write here any more
            frozen.append(key)
    finally:
        for key in frozen:
            chattr("-i", results / key)
    stages = {key.split("/")[0] for key in frozen}
    assert len(frozen) == len(plan["nodes"]) and {"calibrate", "quantize_onnx", "report", "track_mlflow"} <= stages
    assert sum(1 for key in frozen if key.startswith("calibrate/")) >= 2  # int8's and QAT's


def test_parallel_jobs_over_one_export_do_not_interfere(tmp_path):
    """Three calibrations and the fp16 graph, all reading one export, run two at a time by Snakemake
    while the export (and everything before it) is immutable: each finishes, and jobs overlapped."""
    import json

    reason = immutable_supported(tmp_path)
    if reason:
        pytest.skip(reason)
    results = tmp_path / "results"
    common = [o for o in EVERY_STAGE if not o.startswith(("calibration=", "precisions="))] + ["precisions=[fp32,fp16,int8]"]

    def run(*args, sweep=()):
        command = [sys.executable, "-m", "precisionflow.cli", "run", "--cores", "2", *sweep, f"results_dir={results}", *args]
        done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    run(*common, "--", "--until", "export_onnx")
    upstream = [path for stage in ("prepare_dataset", "train_model", "export_onnx") for path in results.glob(f"{stage}/*")]
    for folder in upstream:
        chattr("+i", folder)
    try:
        run(*common, "calibration=entropy,minmax,percentile", "--", "--until", "quantize_onnx", sweep=["-m"])
    finally:
        for folder in upstream:
            chattr("-i", folder)
    [export] = results.glob("export_onnx/*")
    readers = [
        json.loads(path.read_text()) for stage in ("calibrate", "quantize_onnx") for path in results.glob(f"{stage}/*/node.json")
    ]
    readers = [record for record in readers if f"export_onnx/{export.name}" in record["inputs"].values()]
    assert sum(record["stage"] == "calibrate" for record in readers) == 3
    spans = sorted((record["timings"]["started"], record["timings"]["finished"]) for record in readers)
    assert any(later_start < earlier_end for (_, earlier_end), (later_start, _) in zip(spans, spans[1:], strict=False))
