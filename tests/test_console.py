"""The console of `precisionflow run` (pipeline/console.py): a line per finished job, a stage's
own lines and every error in full; Snakemake's job blocks only in the log file."""

import io

from precisionflow.pipeline.console import QuietConsole

SNAKEMAKE_OUTPUT = """Assuming unrestricted shared filesystem usage.
Building DAG of jobs...
Using shell: /usr/bin/bash
Provided cores: 2
Job stats:
job                count
---------------  -------
train_model            1
total                  2

Select jobs to execute...
Execute 1 jobs...
[Tue Dec  1 17:45:12 2026]
localrule train_model:
    input: /r/prepare_dataset/digits-1/node.json
    output: /r/train_model/resnet_mini-abc123/node.json
    log: /r/logs/train_model/resnet_mini-abc123.log
    jobid: 3
    reason: Missing output files
    resources: tmpdir=/tmp, mem_mb=4000
Epoch 1/2
5/5 - 0s - loss: 2.1 - accuracy: 0.3
epoch 1: validation top-1 in inference mode 0.41 (train, batch statistics: 0.30; chance 0.1000)
WARNING: validation top-1 0.071 is at chance
I0000 00:00:1796148111.215285   31479 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
E0000 00:00:1796146563.142400    5663 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error
2026/12/01 18:01:34 INFO mlflow.store.db.utils: Creating initial MLflow database tables...
[Tue Dec  1 17:45:20 2026]
Finished jobid: 3 (Rule: train_model)
1 of 2 steps (50%) done
Select jobs to execute...
[Tue Dec  1 17:45:20 2026]
localrule export_onnx:
    output: /r/export_onnx/resnet_mini-opset17-d4e5/node.json
    jobid: 1
[Tue Dec  1 17:45:21 2026]
Error in rule export_onnx:
    message: None
    jobid: 1
    log: /r/logs/export_onnx/resnet_mini-opset17-d4e5.log (check log file(s) for error details)

Exiting because a job execution failed. Look below for error messages
Elapsed time: 0:00:09
"""


def test_the_console_shows_finished_jobs_stage_lines_and_errors_and_logs_everything():
    log, out = io.StringIO(), io.StringIO()
    console = QuietConsole(log, out)
    for line in io.StringIO(SNAKEMAKE_OUTPUT):
        console.feed(line)
    shown = out.getvalue().splitlines()
    assert log.getvalue() == SNAKEMAKE_OUTPUT
    assert any(line.startswith("[  1/2] train_model/resnet_mini-abc123  ") for line in shown)
    assert "epoch 1: validation top-1 in inference mode 0.41 (train, batch statistics: 0.30; chance 0.1000)" in shown
    assert "WARNING: validation top-1 0.071 is at chance" in shown
    assert "Error in rule export_onnx:" in shown and any("resnet_mini-opset17-d4e5.log" in line for line in shown)
    assert "Exiting because a job execution failed. Look below for error messages" in shown
    assert not any(line.startswith(("Epoch 1/2", "5/5", "localrule", "Job stats", "Building DAG")) for line in shown)
    assert not any("cuda" in line.lower() or "mlflow.store" in line for line in shown)
    assert len(shown) <= 11, shown  # of 47 lines


def test_the_progress_total_leaves_out_snakemakes_target_rule():
    """Snakemake counts its 'all' rule in "N of M steps": 41 jobs once read [41/42]."""
    stats = "Job stats:\njob            count\n-----------  -------\nall                1\ntrain_model        1\ntotal              2\n"
    finished = "rule train_model:\n    output: /r/train_model/m-abc/node.json\n    jobid: 1\nFinished jobid: 1 (Rule: train_model)\n1 of 2 steps (50%) done\n"
    out = io.StringIO()
    console = QuietConsole(io.StringIO(), out)
    for line in io.StringIO(stats + finished):
        console.feed(line)
    assert any(line.startswith("[  1/1] train_model/m-abc") for line in out.getvalue().splitlines()), out.getvalue()


def test_a_job_that_waited_for_the_gpu_says_how_much_of_its_time_was_the_wait(tmp_path):
    """Jobs started side by side take the one GPU in turn; the line of one that waited says so (the
    default target's run on the H100 showed a 30-s evaluation as 526 s)."""
    import json

    node_file = tmp_path / "evaluate_engine" / "fp16-local-abc" / "node.json"
    node_file.parent.mkdir(parents=True)
    node_file.write_text(json.dumps({"gpu_slot": {"waited_s": 494.8}, "timings": {"seconds": 524.6}}))
    lines = [
        "rule evaluate_engine:",
        f"    output: {node_file}",
        "    jobid: 4",
        "Finished jobid: 4 (Rule: evaluate_engine)",
        "3 of 5 steps (60%) done",
        "rule report:",
        f"    output: {tmp_path}/report/sweep-1/node.json",
        "    jobid: 5",
        "Finished jobid: 5 (Rule: report)",
        "4 of 5 steps (80%) done",
    ]
    out = io.StringIO()
    console = QuietConsole(io.StringIO(), out)
    for line in lines:
        console.feed(line + "\n")
    shown = out.getvalue().splitlines()
    assert shown[0].startswith("[  3/5] evaluate_engine/fp16-local-abc  ") and shown[0].endswith(
        ", 495 s of them waiting for the GPU"
    )
    assert shown[1].startswith("[  4/5] report/sweep-1  ") and "waiting" not in shown[1]  # no node file: no wait told
