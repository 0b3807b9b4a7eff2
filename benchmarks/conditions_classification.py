"""Issue 34, the classification counterpart of the shadow story: an image folder where 15% of the
images are dim (pixels x 0.25, tagged `dim` in a conditions sidecar), int8 calibrated with and
without the dim images (calibration.exclude_conditions=[dim]), judged overall and per condition.

    .venv/bin/python benchmarks/conditions_classification.py
        -> benchmarks/results/conditions_classification.json
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, QUICK_TIMING, ROOT, run_sweep, save  # noqa: E402

DIM_SHARE, DIM_FACTOR = 0.15, 0.25
PER_CLASS = 600  # 2,400 images, 30% of them tested: ~100 dim test images (250 per class left 21)
COMMON = [
    "model=resnet_mini",
    "dataset=image_folder",
    "dataset.image_size=[32,32]",
    "dataset.test_fraction=0.3",
    "train.epochs=10",
    "precisions=[fp32,int8,int8_qat]",
    "int8.simulate_tensorrt=false",
    "evaluate.budget.max_condition_drop=5.0",
    *QUICK_TIMING,
]


def make_folder(root: Path) -> Path:
    """Shapes at 32x32, PER_CLASS per class; every image with index % 7 == 0 dimmed and tagged."""
    if not root.is_dir():
        command = [sys.executable, str(ROOT / "benchmarks" / "make_shapes.py"), str(root), "--per-class", str(PER_CLASS)]
        subprocess.run(command, check=True)
    rows = ["file,conditions"]
    for path in sorted(root.glob("*/*.png")):
        if int(path.stem) % 7 == 0:  # about 14%
            pixels = np.asarray(Image.open(path)).astype(np.float32) * DIM_FACTOR
            Image.fromarray(pixels.astype(np.uint8)).save(path)
            rows.append(f"{path.relative_to(root)},dim")
    sidecar = root.parent / f"{root.name}-conditions.csv"
    sidecar.write_text("\n".join(rows) + "\n")
    return sidecar


def main() -> None:
    root = OUT / f"shapes-dim-{PER_CLASS}"
    sidecar = root.parent / f"{root.name}-conditions.csv"
    if not sidecar.is_file():
        sidecar = make_folder(root)
    results = OUT / f"conditions-classification-{PER_CLASS}"
    runs = {}
    for name, extra in (
        ("calibration with dim images", []),
        ("calibration without dim images", ["calibration.exclude_conditions=[dim]"]),
    ):
        overrides = [*COMMON, f"dataset.path={root}", f"dataset.conditions={sidecar}", *extra]
        seconds = run_sweep(results, overrides)
        report = max(results.glob("report/*/verdicts.json"), key=lambda path: path.stat().st_mtime)
        runs[name] = {
            "overrides": overrides,
            "wall_s": round(seconds, 1),
            "engines": [
                {
                    key: entry.get(key)
                    for key in ("precision", "ran", "verdict", "drop", "per_condition", "calibration_coverage", "checks")
                }
                for entry in json.loads(report.read_text())
                if entry["precision"] != "fp32"
            ],
        }
        print(json.dumps(runs[name], indent=1)[:3000], flush=True)
    save("conditions_classification.json", runs)


if __name__ == "__main__":
    main()
