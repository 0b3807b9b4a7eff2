"""Which layer broke it: per-tensor error of an int8 graph against its fp32 graph.

Both graphs are run on the same fixed batch with every intermediate tensor exposed (ONNX Runtime's
qdq_loss_debug); each quantized activation gets its SQNR in dB against the fp32 graph's value
(xmodel) and against its own pre-quantization value (qdq). Lowest SQNR = most damage.
"""

import csv
import math
import shutil
import tempfile
from pathlib import Path
from typing import Dict, List

import numpy as np

from precisionflow.quant.reader import array_reader, graph_input_name


def per_tensor_error(fp32_path: Path, int8_path: Path, images: np.ndarray) -> List[Dict]:
    from onnxruntime.quantization.qdq_loss_debug import (
        collect_activations,
        compute_activation_error,
        create_activation_matching,
        modify_model_output_intermediate_tensors,
    )

    name = graph_input_name(fp32_path)
    with tempfile.TemporaryDirectory(prefix="pf-layer-error-") as scratch:
        float_aug, qdq_aug = Path(scratch) / "float.onnx", Path(scratch) / "qdq.onnx"
        # ONNX Runtime writes model-inferred.onnx next to the graph it augments: augment copies in
        # scratch, never a node's own files (the fp32 graph belongs to the upstream export).
        fp32_copy = shutil.copy(fp32_path, Path(scratch) / "fp32-source.onnx")
        int8_copy = shutil.copy(int8_path, Path(scratch) / "int8-source.onnx")
        modify_model_output_intermediate_tensors(str(fp32_copy), str(float_aug))
        modify_model_output_intermediate_tensors(str(int8_copy), str(qdq_aug))
        float_acts = collect_activations(str(float_aug), array_reader(name, images, len(images)))
        qdq_acts = collect_activations(str(qdq_aug), array_reader(name, images, len(images)))
    errors = compute_activation_error(create_activation_matching(qdq_acts, float_acts))
    rows = [
        {"tensor": tensor, "sqnr_vs_fp32_db": _finite(err.get("xmodel_err")), "sqnr_qdq_db": _finite(err.get("qdq_err"))}
        for tensor, err in errors.items()
    ]
    return sorted(rows, key=lambda row: row["sqnr_vs_fp32_db"])


def _finite(value) -> float:
    # SQNR is infinite where a tensor is reproduced exactly; cap it so CSV, plots and MLflow stay numeric.
    if value is None or not math.isfinite(float(value)):
        return 200.0
    return float(value)


def write_report(rows: List[Dict], folder: Path) -> None:
    with open(folder / "layer_error.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["tensor", "sqnr_vs_fp32_db", "sqnr_qdq_db"])
        writer.writeheader()
        writer.writerows(rows)
    _bar_chart(rows[:25], folder / "layer_error.png")


def _bar_chart(rows: List[Dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(8, 0.35 * len(rows) + 1.2))
    axis.barh([row["tensor"] for row in rows][::-1], [row["sqnr_vs_fp32_db"] for row in rows][::-1], color="#c0504d")
    axis.set_xlabel("SQNR vs fp32 graph (dB) -- lower = more quantization damage")
    axis.set_title("int8 per-tensor error (worst first)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def worst_nodes(model, rows: List[Dict], quantized: List[str], count: int) -> List[str]:
    """The `count` quantized nodes whose inputs or outputs carry the lowest SQNR."""
    by_tensor = {row["tensor"]: row["sqnr_vs_fp32_db"] for row in rows}
    scored = []
    for node in model.graph.node:
        if node.name in quantized:
            tensors = [by_tensor[t] for t in list(node.input) + list(node.output) if t in by_tensor]
            if tensors:
                scored.append((min(tensors), node.name))
    return [name for _, name in sorted(scored)[:count]]
