"""Issue 23: verdicts that hold beyond the sample. The same generated 8-class image folder recipe
at two sizes of test split (144 and about 1,000 test images); resnet_mini at 32x32; fp32, int8
(minmax), int8_qat (with its fp32 twin) and int8_mixed (the interval-driven search on val).

    .venv/bin/python benchmarks/verdicts_two_sizes.py
        -> benchmarks/results/verdicts_two_sizes.json (every verdict with its interval, int8_mixed's
           trials on val beside its test result, the QAT twin table) and verdicts_two_sizes.txt
           (`precisionflow check` as printed, per size)

The budget is the seeds' 1 point of top-1: 144 test images cannot resolve it (with no image flipped
the interval already reaches 2.6 points); about 1,000 can.
"""

import json
import subprocess
import sys

from _common import OUT, RESULTS, ROOT, run_sweep

SIZES = {"small": 72, "large": 500}  # images per class; test_fraction 0.25 -> 144 and 1,000 test images
SWEEP = [
    "dataset=image_folder",
    "dataset.image_size=[32,32]",
    "dataset.test_fraction=0.25",
    "model=resnet_mini",
    "train.epochs=8",
    "finetune.epochs=2",
    "precisions=[fp32,int8,int8_qat,int8_mixed]",
    "calibration=minmax",
    "int8.mixed_max_val_drop=1.0",
    "evaluate.budget.max_top1_drop=1.0",
    "evaluate.budget.min_agreement=null",
    "evaluate.budget.max_class_drop=null",
    "evaluate.budgets.int8_qat={min_agreement:null,min_qat_agreement:null}",
    "int8.simulate_tensorrt=false",
    "tracking.enabled=false",
    "evaluate.timing_batch_sizes=[1,32]",
]


def folder(per_class: int):
    path = OUT / f"shapes8-{per_class}"
    if not path.exists():
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "benchmarks" / "generated_images.py"),
                str(path),
                "--classes",
                "8",
                "--per-class",
                str(per_class),
                "--size",
                "32",
            ],
            check=True,
        )
    return path


def check(results, overrides):
    command = [sys.executable, "-m", "precisionflow.cli", "check", f"results_dir={results}", *overrides]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    return done.returncode, done.stdout[done.stdout.find("Budgets (") :]


def mixed_trials(results):
    found = []
    for node in sorted(results.glob("quantize_onnx/int8_mixed*/node.json")):
        search = json.loads(node.read_text())["summary"].get("mixed_search")
        if search:
            found.append(
                {
                    key: search[key]
                    for key in (
                        "split",
                        "images",
                        "max_drop_points",
                        "drop_points",
                        "drop_interval",
                        "budget_met",
                        "kept",
                        "of",
                        "trials",
                        "why_not_met",
                    )
                    if key in search
                }
            )
    return found


def main() -> None:
    found, printed = {}, []
    for size, per_class in SIZES.items():
        results = OUT / f"verdicts-{size}"
        overrides = [f"dataset.path={folder(per_class)}", *SWEEP]
        seconds = run_sweep(results, overrides)
        code, text = check(results, overrides)
        verdicts = json.loads(max(results.glob("report/*/verdicts.json"), key=lambda p: p.stat().st_mtime).read_text())
        found[size] = {
            "images_per_class": per_class,
            "wall_s": round(seconds, 1),
            "check_exit_code": code,
            "verdicts": [
                {
                    key: entry.get(key)
                    for key in (
                        "precision",
                        "verdict",
                        "drop_points",
                        "drop",
                        "judged_against",
                        "vs_base_fp32",
                        "validation",
                        "breaches",
                        "undecided",
                    )
                }
                for entry in verdicts
            ],
            "int8_mixed_search": mixed_trials(results),
        }
        printed.append(f"== {size}: {per_class} images per class (precisionflow check, exit {code})\n{text}")
        print(printed[-1], flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "verdicts_two_sizes.json").write_text(json.dumps(found, indent=1) + "\n")
    (RESULTS / "verdicts_two_sizes.txt").write_text("\n".join(printed))


if __name__ == "__main__":
    main()
