"""int8_dynamic beside static int8 (and bf16) on the CPU placement: what the safety of run-time
activation ranges (no calibration to be unlike the test data) costs in speed, and what each
precision does to accuracy -- on the default data (digits 8x8, resnet_mini) and on real photo
patches (photo_patches.py, 32x32, 8 classes). Default timing (the speed is the point), serving off.

    .venv/bin/python benchmarks/int8_dynamic_vs_static.py
"""

import csv
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, ROOT, run_sweep, save  # noqa: E402

COMMON = ["precisions=[fp32,int8,int8_dynamic,bf16]", "evaluate.serving.enabled=false", "tracking.enabled=false"]
COLUMNS = ("precision", "variant", "ran", "top1", "change_pts", "change_low", "change_high", "verdict", "agreement")
SPEED = ("x_fp32_b1", "x_fp32_bmax", "x_fp32_low", "x_fp32_high", "x_fp32_at", "sps_bmax", "load")


def photo_folder() -> Path:
    folder = OUT / "photo_patches32_n1200"
    if not folder.exists():
        command = [sys.executable, str(ROOT / "benchmarks" / "photo_patches.py"), str(folder)]
        subprocess.run([*command, "--per-class", "150", "--size", "32", "--seed", "2"], check=True)
    return folder


DATA = {
    "digits 8x8 (default)": [],
    "photo patches 32x32": ["dataset=image_folder", "dataset.image_size=[32,32]", "dataset.test_fraction=0.4"],
}


def main() -> None:
    rows = []
    for label, overrides in DATA.items():
        if overrides:
            overrides = [*overrides, f"dataset.path={photo_folder()}"]
        results = OUT / "int8_dynamic_vs_static" / ("default" if not overrides else "photo32")
        seconds = run_sweep(results, [*COMMON, *overrides])
        summary = max(results.glob("report/*/summary.csv"), key=lambda p: p.stat().st_mtime)
        with open(summary) as handle:
            for row in csv.DictReader(handle):
                if row["precision"] != "tensorflow" and "TRT-sim" not in row["variant"]:
                    rows.append({"data": label, **{k: row[k] for k in COLUMNS + SPEED}, "wall_s": round(seconds)})
                    print(rows[-1], flush=True)
    save("int8_dynamic_vs_static.json", {"command": "benchmarks/int8_dynamic_vs_static.py", "rows": rows})


if __name__ == "__main__":
    main()
