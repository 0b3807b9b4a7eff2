"""Issue 3: test accuracy and time per epoch of fp32 / mixed_float16 / mixed_bfloat16 training and
of fp32 -> QAT fine-tuning on digits with small_cnn (same seed, same epochs); start-up vs training.

    .venv/bin/python benchmarks/training_precisions.py    -> benchmarks/results/training_precisions.json
"""

import subprocess
import sys
import time

from _common import OUT, ROOT, nodes, run_sweep, save

EPOCHS = 12


def interpreter_and_import_seconds() -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import precisionflow.pipeline.runner, precisionflow.stages.train_model"], check=True, cwd=ROOT
    )
    return time.perf_counter() - started


def main() -> None:
    results = OUT / "training-results"
    run_sweep(
        results,
        [
            "train.precision_policy=fp32,mixed_float16,mixed_bfloat16",
            f"train.epochs={EPOCHS}",
            f"finetune.epochs={EPOCHS}",
            "precisions=[fp32,int8_qat]",
        ],
    )
    rows = {}
    for record in nodes(results, "train_model"):
        summary = record["summary"]
        rows[f"train {summary['precision_policy']}"] = {
            "test_accuracy": summary["test_accuracy"],
            "seconds_per_epoch": summary["seconds_per_epoch"],
            "training_seconds": summary["train_seconds"],
            "tf_import_and_build_seconds": summary["startup_seconds"],
            "stage_seconds": record["timings"]["seconds"],
        }
    for record in nodes(results, "finetune_model"):
        parent = record["inputs"]["model"]
        policy = next(
            r["summary"]["precision_policy"] for r in nodes(results, "train_model") if f"train_model/{r['id']}" == parent
        )
        summary = record["summary"]
        rows[f"qat fine-tune of the {policy} model"] = {
            "test_accuracy": summary["test_accuracy"],
            "seconds_per_epoch": summary["seconds_per_epoch"],
            "training_seconds": summary["train_seconds"],
            "stage_seconds": record["timings"]["seconds"],
        }
    save(
        "training_precisions.json",
        {"epochs": EPOCHS, "python_start_and_package_import_seconds": interpreter_and_import_seconds(), "rows": rows},
    )


if __name__ == "__main__":
    main()
