"""Accuracy-driven int8_mixed: which ops to keep in float so that int8 stays within a budget.

Sensitivity is measured, not guessed from per-tensor error: for each quantizable op, a graph with
only that op quantized runs the decision split (validation by default), and the op's sensitivity
is how far its outputs move from the fp32 graph's. Ops are then kept in float most sensitive first,
and the number kept is found by bisection (assuming more ops in float never hurts): the fewest
that keep top-1 on the decision split within `mixed_max_val_drop` points of fp32. The test split
is never read here.
"""

import tempfile
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from precisionflow.quant import qdq


def _outputs(graph: Path, images: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: images})[0]


def _quantized_outputs(source: Path, ranges, nodes: Sequence[str], images: np.ndarray, scratch: Path) -> np.ndarray:
    target = scratch / f"trial-{len(list(scratch.iterdir()))}.onnx"
    qdq.quantize_int8(source, target, ranges, list(nodes))
    return _outputs(target, images)


def sensitivity(source: Path, ranges, nodes: Sequence[str], images: np.ndarray, reference: np.ndarray, scratch: Path):
    """[(op, mean |output change| with only that op quantized)], most sensitive first."""
    scored = [(float(np.mean(np.abs(_quantized_outputs(source, ranges, [op], images, scratch) - reference))), op) for op in nodes]
    return [(op, score) for score, op in sorted(scored, reverse=True)]


def search(source: Path, ranges, nodes: List[str], data_dir: Path, int8: Dict[str, Any]) -> Tuple[List[str], Dict[str, Any]]:
    """(ops to keep in float, the search's record: order, trials, what it reached)."""
    from precisionflow.datasets.store import Split

    # The decision split in memory: each trial graph runs all of it (bounded by int8.report_split's size).
    decision = Split(data_dir, int8["report_split"])
    images, labels = decision.array(), decision.labels
    reference = _outputs(source, images)
    fp32_top1 = float(np.mean(reference.argmax(1) == labels))
    budget = int8["mixed_max_val_drop"]
    trials: Dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="pf-mixed-") as folder:
        scratch = Path(folder)
        order = sensitivity(source, ranges, nodes, images, reference, scratch)

        def drop(kept: int) -> float:  # top-1 points lost with the `kept` most sensitive ops in float
            if kept not in trials:
                quantized = [op for op, _ in order[kept:]]
                outputs = _quantized_outputs(source, ranges, quantized, images, scratch)
                trials[kept] = round(100 * (fp32_top1 - float(np.mean(outputs.argmax(1) == labels))), 3)
            return trials[kept]

        low, high = 0, len(order) - 1  # at least one op stays quantized: the graph must be int8
        reached = drop(high) <= budget
        while low < high and reached:
            middle = (low + high) // 2
            low, high = (low, middle) if drop(middle) <= budget else (middle + 1, high)
        chosen = high if reached else len(order) - 1
    kept = [op for op, _ in order[:chosen]]
    record = {"split": int8["report_split"], "fp32_top1": fp32_top1, "max_drop_points": budget,
              "drop_points": trials[chosen], "budget_met": reached, "kept": len(kept),
              "of": len(order), "trials": {str(k): v for k, v in sorted(trials.items())},
              "sensitivity": [[op, round(score, 6)] for op, score in order]}
    return kept, record
