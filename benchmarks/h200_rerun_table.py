"""The H200 rerun of issue 25 (ResNet-50 and MobileNetV2, 224x224, ONNX Runtime 1.31.1 CUDA EP):
one row per engine from the node folders the GPU machine sent back, with its model (from the
shipped plan's lineage), accuracy against fp32, absolute device-clock figures, and the side-by-side
ratios of its compare_speed job (median of 6 alternating rounds, [min, max]).

    python benchmarks/h200_rerun_table.py benchmarks/results/h200/rerun_2026-12-01 > benchmarks/results/h200/rerun_2026-12-01/table.md
"""

import json
import sys
from pathlib import Path

from h200_table import node_files  # the same collected tarballs


def model_of(plan, key: str) -> str:
    for source in plan["nodes"][key]["inputs"].values():
        if source.startswith("export_onnx/"):
            return source.split("/")[1].split("-")[0]
        found = model_of(plan, source)
        if found:
            return found
    return ""


def ratio(entry) -> str:
    if not entry:
        return "-"
    return f"{entry['median']:.2f} [{entry['min']:.2f}, {entry['max']:.2f}]"


def main(folder: Path) -> None:
    plan = json.loads((folder / "plan.json").read_text())
    nodes = node_files(folder / "collected.tar.xz")
    ratios = {
        files["node.json"]["inputs"]["engine"]: files["metrics.json"]["settings"]
        for key, files in nodes.items()
        if key.startswith("compare_speed/") and "metrics.json" in files
    }
    print("| model | precision | ran | top1 | agree | p50 b1 ms | b128 /s | x fp32 b1 | x fp32 b32 | x fp32 b128 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for key, files in nodes.items():
        if not key.startswith("evaluate_engine/") or "metrics.json" not in files:
            continue
        metrics, engine = files["metrics.json"], files["node.json"]["inputs"]["engine"]
        batch, settings = metrics["speed"]["batch"], ratios.get(engine, {})
        rows.append(
            (
                model_of(plan, key),
                ["fp32", "fp16", "int8"].index(metrics["precision"]),
                [
                    model_of(plan, key),
                    metrics["precision"],
                    metrics["engine"]["executed"].get("executed_precision", "?"),
                    f"{metrics['top1']:.3f}",
                    f"{metrics['agreement']:.3f}",
                    f"{batch['1']['p50_ms']:.3f}",
                    f"{batch['128']['throughput_sps']:,.0f}",
                    *[
                        ratio(settings.get(size, {}).get("vs_fp32")) if metrics["precision"] != "fp32" else "-"
                        for size in ("b1", "b32", "b128")
                    ],
                ],
            )
        )
    for _, _, row in sorted(rows):
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
