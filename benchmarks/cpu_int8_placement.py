"""Issue 22: int8 that runs as int8 on this CPU. For each model, the workflow itself (one sweep
per model) builds fp32, int8 (entropy) and int8_qat engines for this machine with ONNX Runtime's
CPU placement, plus the TensorRT-placed graphs as simulation rows; compare_speed times every
engine against the fp32 engine in alternating rounds (one job per engine) at batch 1 and 32.

    .venv/bin/python benchmarks/cpu_int8_placement.py [resnet_mini resnet50 mobilenet_v2]
        -> benchmarks/results/cpu_int8_placement.json and .txt

Per engine: what ran (integer share of compute ops), top-1, agreement with the fp32 Keras model,
x_fp32 at batch 1 and 32 (median of the rounds, with the rounds' spread), and for the CPU int8
engines the agreement with the TensorRT-placed graph of the same ranges on the same test images.
"""

import json
import sys
from pathlib import Path

import numpy as np

from _common import OUT, RESULTS, run_sweep

COMMON = [
    "precisions=[fp32,int8,int8_qat]",
    "evaluate.timing_batch_sizes=[1,32]",
    "evaluate.ratio_rounds=12",
    "evaluate.ratio_window_s=0.2",
    "tracking.enabled=false",
]
MODELS = {
    "resnet_mini": ["model=resnet_mini", "dataset.image_size=[32,32]"],
    "resnet50": ["model=resnet50", "dataset.image_size=[64,64]", "train.epochs=3", "finetune.epochs=1"],
    "mobilenet_v2": ["model=mobilenet_v2", "dataset.image_size=[64,64]", "train.epochs=3", "finetune.epochs=1"],
}


def load(folder: Path, name: str):
    return json.loads((folder / name).read_text())


def predictions(folder: Path) -> np.ndarray:
    with np.load(folder / "per_sample.npz", allow_pickle=False) as saved:
        return saved["predictions"]


def rows_of(results: Path):
    evaluations = {}
    for folder in sorted(results.glob("evaluate_engine/*")):
        node, metrics = load(folder, "node.json"), load(folder, "metrics.json")
        evaluations[folder.name] = (node, metrics, folder)
    ratios = {load(f, "node.json")["inputs"]["engine"]: load(f, "metrics.json") for f in results.glob("compare_speed/*")}
    rows = []
    for name, (node, metrics, _folder) in evaluations.items():
        simulated = node["params"].get("simulates") == "tensorrt"
        row = {
            "engine": name,
            "precision": metrics["precision"],
            "simulates_tensorrt": simulated,
            "ran": metrics["engine"]["executed"]["executed_precision"],
            "top1": round(metrics["top1"], 4),
            "agreement_with_fp32_model": round(metrics["agreement"], 4),
        }
        if "qat" in metrics:
            row["agreement_with_qat_model"] = round(metrics["qat"]["vs_qat_model"]["agreement"], 4)
        speed = ratios.get(node["inputs"]["engine"], {}).get("settings", {})
        for setting, values in sorted(speed.items()):
            if "vs_fp32" in values:
                row[f"x_fp32_{setting}"] = {
                    k: round(values["vs_fp32"][k], 3) for k in ("geomean", "cv_percent") if k in values["vs_fp32"]
                }
        rows.append(row)
    # the CPU int8 engine against the TensorRT-placed graph of the same precision, image by image
    for row in rows:
        if row["precision"].startswith("int8") and not row["simulates_tensorrt"]:
            twin = next((r for r in rows if r["precision"] == row["precision"] and r["simulates_tensorrt"]), None)
            if twin:
                cpu, trt = (
                    predictions(results / "evaluate_engine" / row["engine"]),
                    predictions(results / "evaluate_engine" / twin["engine"]),
                )
                row["agreement_with_tensorrt_placed_graph"] = round(float(np.mean(cpu == trt)), 4)
    return rows


def main() -> None:
    chosen = sys.argv[1:] or ["resnet_mini", "resnet50"]
    found = {}
    for model in chosen:
        results = OUT / f"cpu-int8-{model}"
        seconds = run_sweep(results, COMMON + MODELS[model])
        found[model] = {"overrides": COMMON + MODELS[model], "wall_s": round(seconds, 1), "engines": rows_of(results)}
        print(json.dumps(found[model], indent=1), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cpu_int8_placement.json").write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main()
