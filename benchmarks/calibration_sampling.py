"""Issue 30: what calibration sees on a pre-split folder -- the first N files against a seeded,
stratified draw -- and what the int8 engine then scores.

A generated shapes folder already split into train/ val/ test/ (4 classes x 150 training images,
listed class by class), resnet_mini at 32x32, one training; int8 calibrated on 256 training images
with calibration.sampling=first (the old rule) and =stratified (the new default), each with the
entropy and the minmax calibrator.

    .venv/bin/python benchmarks/calibration_sampling.py
        -> benchmarks/results/calibration_sampling.json
"""

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, ROOT, run_sweep, save  # noqa: E402

SPLITS = {"train": (150, 0), "val": (40, 1), "test": (100, 2)}  # images per class, generator seed
COMMON = [
    "model=resnet_mini",
    "precisions=[fp32,int8]",
    "int8.simulate_tensorrt=false",
    "train.epochs=12",
    "calibration=entropy,minmax",
    "calibration.num_samples=256",
    "evaluate.timing_batch_sizes=[1]",
    "evaluate.streams=[]",
    "evaluate.ratio_rounds=2",
    "evaluate.ratio_window_s=0.05",
    "evaluate.duration_s=0.1",
    "tracking.enabled=false",
    "evaluate.accept_undecided=true",
]


def make_folder(root: Path) -> Path:
    for split, (per_class, seed) in SPLITS.items():
        if not (root / split).is_dir():
            command = [sys.executable, str(ROOT / "benchmarks" / "make_shapes.py"), str(root / split)]
            subprocess.run([*command, "--per-class", str(per_class), "--seed", str(seed)], check=True)
    return root


def rows(results: Path):
    found = []
    for folder in sorted(results.glob("evaluate_engine/*")):
        metrics = json.loads((folder / "metrics.json").read_text())
        if metrics["precision"] != "int8":
            continue
        node = json.loads((folder / "node.json").read_text())
        engine = json.loads((results / node["inputs"]["engine"] / "node.json").read_text())
        graph = json.loads((results / engine["inputs"]["graph"] / "node.json").read_text())
        calibration = json.loads((results / graph["inputs"]["calibration"] / "node.json").read_text())
        found.append(
            {
                "sampling": calibration["params"]["sampling"],
                "method": calibration["params"]["method"],
                "sample_per_class": calibration["summary"].get("sample_per_class"),
                "calibration_node": graph["inputs"]["calibration"],
                "int8_top1": round(metrics["top1"], 4),
                "agreement_with_fp32": round(metrics["agreement"], 4),
                "test_images": metrics["test_images"],
            }
        )
    return found


def main() -> None:
    folder = make_folder(OUT / "shapes-presplit")
    results = OUT / "calibration-sampling"
    found = {"folder": "generated shapes, train/val/test folders: " + json.dumps(SPLITS), "runs": []}
    for rule in ("first", "stratified"):
        overrides = [*COMMON, "dataset=image_folder", f"dataset.path={folder}", f"calibration.sampling={rule}"]
        seconds = run_sweep(results, overrides)
        found["runs"].append({"sampling": rule, "overrides": overrides, "wall_s": round(seconds, 1)})
    found["int8_engines"] = rows(results)
    save("calibration_sampling.json", found)


if __name__ == "__main__":
    main()
