"""Accuracy-driven int8_mixed on a model where plain int8 breaks the budget.

The embedded default (small_cnn on digits) with a deliberately poor calibration -- percentile at
`--percentile` clips the activations hard -- so plain int8 loses more than the 1-point budget. The
int8_mixed search (measured sensitivity on the validation split, bisection) then picks which ops
to keep in float. Reports test top-1 of fp32, int8 and int8_mixed, the validation trials, the
chosen set, and the side-by-side speed-ups over fp32 of int8 and int8_mixed.

    python benchmarks/int8_mixed_search.py [--percentile 90]   # writes benchmarks/results/int8_mixed_search.json
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, run_sweep, save  # noqa: E402

from precisionflow.reporting.compare import ratio_values  # noqa: E402


def only(results: Path, stage: str, prefix: str) -> Path:
    [folder] = [p for p in results.glob(f"{stage}/{prefix}*") if (p / "node.json").exists()]
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--percentile", type=float, default=90.0)
    args = parser.parse_args()
    results = OUT / f"int8_mixed_p{args.percentile:g}"
    overrides = [
        "precisions=[fp32,int8,int8_mixed]",
        "calibration=percentile",
        f"calibration.percentile={args.percentile}",
        "tracking.enabled=false",
        "evaluate.budget.max_class_drop=null",
        "evaluate.budget.min_agreement=null",
    ]
    seconds = run_sweep(results, overrides)
    row = {"percentile": args.percentile, "wall_s": round(seconds, 1)}
    for precision in ("fp32", "int8", "int8_mixed"):
        metrics = json.loads((only(results, "evaluate_engine", f"{precision}-") / "metrics.json").read_text())
        row[f"{precision}_test_top1"] = metrics["top1"]
        if precision != "fp32":
            speed = json.loads((only(results, "compare_speed", f"{precision}-") / "metrics.json").read_text())
            row[f"{precision}_x_fp32"] = {
                k: round(v["median"], 3) for k, v in ratio_values(speed).items() if k.startswith("x_fp32")
            }
            row[f"{precision}_ran"] = metrics["engine"]["executed"]["label"]
    graph = json.loads((only(results, "quantize_onnx", "int8_mixed-") / "node.json").read_text())["summary"]
    row.update({"kept_float": graph["kept_float"], "quantized_nodes": graph["quantized_nodes"], "search": graph["mixed_search"]})
    save(f"int8_mixed_search_p{args.percentile:g}.json", row)


if __name__ == "__main__":
    main()
