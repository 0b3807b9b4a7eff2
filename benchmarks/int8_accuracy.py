"""Issue 4: top-1 and agreement with fp32 for fp16, int8 per calibration method, int8_qat and
int8_mixed (N = 1, 3), on digits/small_cnn and on resnet_mini trained on a generated shapes set.

    .venv/bin/python benchmarks/int8_accuracy.py [digits|shapes]   -> benchmarks/results/int8_accuracy_<set>.csv
"""

import csv
import io
import subprocess
import sys

from _common import OUT, RESULTS, ROOT, newest_summary, run_sweep

SWEEP = ["precisions=[fp32,fp16,int8,int8_qat,int8_mixed]", "calibration=entropy,minmax,percentile", "int8.mixed_keep_fp=1,3"]
SETS = {
    "digits": [],
    "shapes": [
        "dataset=image_folder",
        f"dataset.path={OUT / 'shapes'}",
        "model=resnet_mini",
        "train.epochs=20",
        "train.learning_rate=0.002",
    ],
}


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "digits"
    if name == "shapes" and not (OUT / "shapes").exists():
        subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "make_shapes.py"), str(OUT / "shapes"), "--per-class", "300"], check=True
        )
    results = OUT / ("resnet-results" if name == "shapes" else "int8-digits-results")
    run_sweep(results, SWEEP + SETS[name])
    rows = list(csv.DictReader(io.StringIO(newest_summary(results))))
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / f"int8_accuracy_{name}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    for row in rows:
        print(row["precision"], row["top1"], row["agreement"], row["sps_b1"], row["sps_bmax"], row["node"])


if __name__ == "__main__":
    main()
