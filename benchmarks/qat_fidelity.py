"""Does the int8_qat engine compute what QAT trained? Per model, through the workflow's own stages.

small_cnn on digits (the embedded default), resnet_mini and mobilenet_v2 on a generated 32x32
shapes folder (benchmarks/make_shapes.py): fp32 and int8_qat engines on this machine; reports
fp32 top-1, the int8_qat engine's agreement and largest logit difference with the QAT model in
TensorFlow (fake-quant on), its agreement with the fp32 engine and with the fine-tuned model
(fake-quant off), and the learned-range coverage of its Q/DQ.

    python benchmarks/qat_fidelity.py      # writes benchmarks/results/qat_fidelity.json
"""

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, QUICK_TIMING, ROOT, run_sweep, save  # noqa: E402

MODELS = {
    "small_cnn": [],
    "resnet_mini": ["dataset=image_folder", "train.epochs=10"],
    "mobilenet_v2": ["dataset=image_folder", "train.epochs=10", "train.learning_rate=0.002"],
}


def metrics(results: Path, stage: str, prefix: str) -> dict:
    [folder] = [p for p in results.glob(f"{stage}/{prefix}*") if (p / "node.json").exists()]
    return json.loads((folder / ("metrics.json" if stage == "evaluate_engine" else "node.json")).read_text())


def main() -> None:
    shapes = OUT / "shapes32"
    if not shapes.exists():
        subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "make_shapes.py"), str(shapes), "--per-class", "200"], check=True
        )
    rows = []
    for model, extra in MODELS.items():
        results = OUT / "qat_fidelity" / model
        overrides = [f"model={model}", "precisions=[fp32,int8_qat]", *QUICK_TIMING, *extra]
        if "dataset=image_folder" in extra:
            overrides.append(f"dataset.path={shapes}")
        seconds = run_sweep(results, overrides)
        fp32, qat = metrics(results, "evaluate_engine", "fp32-"), metrics(results, "evaluate_engine", "int8_qat-")
        graph = metrics(results, "quantize_onnx", "int8_qat-")["summary"]
        rows.append(
            {
                "model": model,
                "data": "shapes32" if extra else "digits",
                "fp32_top1": fp32["top1"],
                "int8_qat_top1": qat["top1"],
                "agreement_with_qat_model": qat["qat"]["vs_qat_model"]["agreement"],
                "max_logit_diff_vs_qat_model": qat["qat"]["vs_qat_model"]["max_abs_logit_diff"],
                "agreement_with_qat_float": qat["qat"]["vs_qat_float"]["agreement"],
                "agreement_with_fp32": qat["agreement"],
                "qat_coverage": graph["qat_coverage"],
                "quantized_fraction": graph["quantized_fraction"],
                "wall_s": round(seconds, 1),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    save("qat_fidelity.json", rows)


if __name__ == "__main__":
    main()
