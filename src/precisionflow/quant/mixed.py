"""Accuracy-driven int8_mixed: which ops to keep in float so that int8 stays within a budget.

Sensitivity is measured, not guessed from per-tensor error: for each quantizable op, a graph with
only that op quantized runs the decision split (validation by default), and the op's sensitivity
is how far its outputs move from the fp32 graph's. Ops are then kept in float most sensitive first,
and the number kept is found by bisection: the fewest whose top-1 drop on the decision split is
within `mixed_max_val_drop` points of fp32 by its paired interval (stats.py), never by the bare
estimate. The test split is never read here.
"""

import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

from precisionflow.quant import qdq


def _outputs(graph: Path, images: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(
        str(graph), providers=["CPUExecutionProvider"], disabled_optimizers=qdq.ORT_DISABLED_OPTIMIZERS
    )
    return session.run(None, {session.get_inputs()[0].name: images})[0]


def _quantized_outputs(
    source: Path, ranges, nodes: Sequence[str], images: np.ndarray, scratch: Path, placement: str = "tensorrt"
) -> np.ndarray:
    target = scratch / f"trial-{len(list(scratch.iterdir()))}.onnx"
    qdq.quantize_int8(source, target, ranges, list(nodes), placement)
    return _outputs(target, images)


def sensitivity(
    source: Path,
    ranges,
    nodes: Sequence[str],
    images: np.ndarray,
    reference: np.ndarray,
    scratch: Path,
    placement: str = "tensorrt",
):
    """[(op, mean |output change| with only that op quantized)], most sensitive first."""
    scored = [
        (float(np.mean(np.abs(_quantized_outputs(source, ranges, [op], images, scratch, placement) - reference))), op)
        for op in nodes
    ]
    return [(op, score) for score, op in sorted(scored, reverse=True)]


def search(
    source: Path,
    ranges,
    nodes: List[str],
    data_dir: Path,
    int8: Dict[str, Any],
    confidence: float = 0.95,
    placement: str = "tensorrt",
) -> Tuple[List[str], Dict[str, Any]]:
    """(ops to keep in float, the search's record: order, trials with intervals, what it reached)."""
    from precisionflow.datasets.store import Split

    # The decision split in memory: each trial graph runs all of it (bounded by int8.report_split's size).
    decision = Split(data_dir, int8["report_split"])
    images, labels = decision.array(), decision.labels
    reference = _outputs(source, images)
    with tempfile.TemporaryDirectory(prefix="pf-mixed-") as folder:
        scratch = Path(folder)
        order = sensitivity(source, ranges, nodes, images, reference, scratch, placement)

        def predictions(kept: int) -> np.ndarray:  # the decision split through the graph with `kept` ops in float
            quantized = [op for op, _ in order[kept:]]
            return _quantized_outputs(source, ranges, quantized, images, scratch, placement).argmax(1)

        chosen, record = choose(len(order), predictions, reference.argmax(1), labels, int8["mixed_max_val_drop"], confidence)
    kept = [op for op, _ in order[:chosen]]
    record.update(
        {
            "split": int8["report_split"],
            "kept": len(kept),
            "of": len(order),
            "sensitivity": [[op, round(score, 6)] for op, score in order],
        }
    )
    return kept, record


def choose(
    ops: int,
    predictions: Callable[[int], np.ndarray],
    reference: np.ndarray,
    labels: np.ndarray,
    budget: float,
    confidence: float,
) -> Tuple[int, Dict[str, Any]]:
    """How many of the most sensitive ops to keep in float: the fewest whose top-1 drop against
    fp32 on the decision split is within `budget` BY ITS INTERVAL (paired images: the drop's upper
    end <= budget), found by bisection over the sensitivity order. Drops need not shrink as more
    ops stay float (a trial one image away from a 6-point drop is common on small splits), so a
    trial counts only when its interval clears the budget, and the budget is reported met only
    when the chosen trial's does. Returns (kept, record of every trial with its interval)."""
    from precisionflow import stats

    reference_right = reference == labels
    trials: Dict[int, stats.PairedDrop] = {}

    def clears(kept: int) -> bool:
        if kept not in trials:
            trials[kept] = stats.paired_drop(reference_right, predictions(kept) == labels, confidence)
        return trials[kept].high <= budget

    low, high = 0, ops - 1  # at least one op stays quantized: the graph must be int8
    reached = clears(high)
    while low < high and reached:
        middle = (low + high) // 2
        low, high = (low, middle) if clears(middle) else (middle + 1, high)
    chosen = high if reached else ops - 1
    met = reached and trials[chosen].high <= budget
    drop = trials[chosen]
    record = {
        "fp32_top1": float(np.mean(reference_right)),
        "max_drop_points": budget,
        "confidence": confidence,
        "drop_points": round(drop.drop, 3),
        "drop_interval": [round(drop.low, 3), round(drop.high, 3)],
        "budget_met": met,
        "images": drop.n,
        "one_image_points": round(drop.one_image, 3),
        "trials": {
            str(k): {"drop": round(v.drop, 3), "low": round(v.low, 3), "high": round(v.high, 3), "lost": v.b, "gained": v.c}
            for k, v in sorted(trials.items())
        },
    }
    if not met:
        record["why_not_met"] = (
            f"no trial's interval cleared {budget} points on the decision split's {drop.n} images "
            f"(one image = {drop.one_image:.2f} points; the smallest drop budget {drop.n} images can "
            f"ever pass is {stats.zero_flip_resolution(drop.n, confidence):.2f})"
        )
    return chosen, record
