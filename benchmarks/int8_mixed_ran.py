"""Issue 31: does an int8_mixed engine run in float the ops its graph keeps in float?

Per model, int8_mixed keeps the int8.mixed_keep_fp most damaged ops in float (the CPU placement).
For its graph: the ops kept float (what the row's label says), what the engine ran (its optimised
graph, as precisionflow builds it), and what ONNX Runtime's default optimisation of the same graph
runs -- with its WeightBiasQuantization pass, which quantized the kept ops' float weights and fused
them into integer kernels ("before").

    .venv/bin/python benchmarks/int8_mixed_ran.py [mobilenet_v2 efficientnet_b0 resnet_mini]
        -> benchmarks/results/int8_mixed_ran.json
"""

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, QUICK_TIMING, run_sweep, save, shapes_folder  # noqa: E402

COMMON = [
    "precisions=[fp32,int8_mixed]",
    "int8.mixed_max_val_drop=null",
    "int8.simulate_tensorrt=false",
    "dataset=image_folder",
    "dataset.image_size=[64,64]",
    "train.epochs=3",
    *QUICK_TIMING,
]
KEEP = {"mobilenet_v2": 20, "efficientnet_b0": 20, "resnet_mini": 3}


def model_overrides(model: str) -> list:
    """EfficientNetB0 comes as a user's saved model (model=keras_file), as in prune_tradeoff.py."""
    if model != "efficientnet_b0":
        return [f"model={model}"]
    from prune_tradeoff import WORK, saved_user_models

    saved_user_models()
    return ["model=keras_file", f"model.path={WORK / 'efficientnet_b0.keras'}"]


def counts(graph: Path, disabled) -> dict:
    import onnx
    import onnxruntime as ort

    from precisionflow.backends.executed import compute_op_types

    with tempfile.TemporaryDirectory() as folder:
        options = ort.SessionOptions()
        options.optimized_model_filepath = str(Path(folder) / "optimised.onnx")
        ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"], disabled_optimizers=disabled)
        return dict(compute_op_types(onnx.load(options.optimized_model_filepath)))


def main() -> None:
    shapes = shapes_folder()
    rows = []
    for model in sys.argv[1:] or list(KEEP):
        results = OUT / "int8_mixed_ran" / model
        overrides = [*model_overrides(model), f"dataset.path={shapes}", f"int8.mixed_keep_fp={KEEP[model]}", *COMMON]
        run_sweep(results, overrides)
        [graph_dir] = [p for p in results.glob("quantize_onnx/int8_mixed-*") if (p / "node.json").exists()]
        summary = json.loads((graph_dir / "node.json").read_text())["summary"]
        [engine_dir] = [p for p in results.glob("build_engine/int8_mixed-*") if (p / "node.json").exists()]
        executed = json.loads((engine_dir / "engine.json").read_text())["executed"]
        rows.append(
            {
                "model": model,
                "kept_float": len(summary["kept_float"]),
                "quantized_nodes": summary["quantized_nodes"],
                "engine_ran_after": executed["compute_op_types"],
                "engine_label_after": executed["executed_precision"],
                "default_onnxruntime_before": counts(graph_dir / "model.onnx", []),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    save("int8_mixed_ran.json", {"overrides": COMMON, "rows": rows})


if __name__ == "__main__":
    main()
