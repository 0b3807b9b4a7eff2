"""Accuracy-driven int8_mixed: which ops to keep in float so that int8 stays within a budget.

Sensitivity is measured, not guessed from per-tensor error: for each quantizable op, a graph with
only that op quantized runs the decision split (validation by default), and the op's sensitivity
is how far its outputs move from the fp32 graph's. Ops are then kept in float most sensitive first,
and the number kept is found by bisection: the fewest whose top-1 drop on the decision split is
within `mixed_max_val_drop` points of fp32 by its paired interval (stats.py), never by the bare
estimate. The test split is never read here.

Then speed is weighed: an int8 op left alone between float ops pays a quantize and a dequantize for
one op, so such ops join the float run around them when the budget still holds; on the CPU
placement (where the graph is the engine) each candidate mix is timed against the fp32 graph side
by side and the fastest kept. When no mix is worth building -- int8 itself meets the budget, none
meets it, or the one that does is not faster than fp32 by its interval -- the search says so and
nothing is built (the MobileNetV2 photo run had built a 61-of-62-float engine at 0.52x fp32).
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


def _trial_graph(source: Path, ranges, nodes: Sequence[str], scratch: Path, placement: str = "tensorrt") -> Path:
    target = scratch / f"trial-{len(list(scratch.iterdir()))}.onnx"
    qdq.quantize_int8(source, target, ranges, list(nodes), placement)
    return target


def _quantized_outputs(
    source: Path, ranges, nodes: Sequence[str], images: np.ndarray, scratch: Path, placement: str = "tensorrt"
) -> np.ndarray:
    return _outputs(_trial_graph(source, ranges, nodes, scratch, placement), images)


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
            {"split": int8["report_split"], "of": len(order), "sensitivity": [[op, round(score, 6)] for op, score in order]}
        )
        why = nothing_to_build(record, chosen)
        if not why:
            kept, why = fastest_mix(
                source, ranges, nodes, kept, images, labels, reference, scratch, placement, record, confidence
            )
    record["kept"] = len(kept)
    if why:
        record["declined"] = why
        return [], record
    return kept, record


def nothing_to_build(record: Dict[str, Any], chosen: int) -> str:
    """Why no mix is worth building on accuracy alone, or ''."""
    if not record["budget_met"]:
        return (
            f"no mix of int8 and float kept top-1 within {record['max_drop_points']} points of fp32 by its interval on "
            f"the {record['split']} split ({record.get('why_not_met', '')}); an engine with nearly every op in float "
            "buys no speed over fp32: nothing built. Read the int8 and fp32 rows, or set "
            "a budget this split can resolve."
        )
    if chosen == 0:
        trial = record["trials"]["0"]
        return (
            f"int8 itself is within the budget on the {record['split']} split (drop {trial['drop']} "
            f"[{trial['low']}, {trial['high']}] <= {record['max_drop_points']} points): int8_mixed would be the int8 "
            "graph again -- nothing built; read the int8 row."
        )
    return ""


def fastest_mix(source, ranges, nodes, kept, images, labels, reference, scratch, placement, record, confidence, timer=None):
    """(ops kept in float, why nothing is built or ''): the chosen mix and, when it differs, the mix
    with its isolated int8 ops joined to the float around them (if the budget still holds by its
    interval); on the CPU placement the candidates are timed against fp32 and the fastest kept --
    unless it is not faster than fp32 by its interval."""
    from precisionflow import stats

    candidates = {"chosen": kept}
    joined = join_isolated_int8(source, nodes, kept)
    if joined != kept and len(joined) < len(nodes):  # at least one op stays int8: the graph must be int8
        quantized = [op for op in nodes if op not in joined]
        drop = stats.paired_drop(
            reference.argmax(1) == labels,
            _quantized_outputs(source, ranges, quantized, images, scratch, placement).argmax(1) == labels,
            confidence,
        )
        record["joined"] = {
            "kept": len(joined),
            "drop": round(drop.drop, 3),
            "interval": [round(drop.low, 3), round(drop.high, 3)],
        }
        if drop.high <= record["max_drop_points"]:
            candidates["isolated int8 ops joined to float"] = joined
    if placement != "onnxruntime_cpu":
        record["speed"] = "not weighed: the TensorRT placement's graph runs only simulated on this machine"
        return kept, ""
    graphs = {
        name: _trial_graph(source, ranges, [op for op in nodes if op not in ops], scratch, placement)
        for name, ops in candidates.items()
    }
    timer = timer or time_against_fp32
    timed = {f"b{size}": timer(source, graphs, images[:size], confidence) for size in TIMED_BATCHES}
    record["speed_vs_fp32"] = timed
    best = max(graphs, key=lambda name: min(at[name]["median"] for at in timed.values()))
    record["fastest"] = best
    slow = {at: found[best] for at, found in timed.items() if found[best]["interval"][0] <= 1.0}
    if slow:
        said = "; ".join(f"{at}: {x['median']:.2f}x [{x['interval'][0]:.2f}, {x['interval'][1]:.2f}]" for at, x in slow.items())
        return [], (
            f"the fastest mix within the budget ({len(candidates[best])} of {record['of']} ops in float) is not "
            f"faster than fp32 by its interval on this CPU ({said}), while {int8_itself(record)}: no trade-off to "
            "build -- nothing built."
        )
    return candidates[best], ""


def int8_itself(record: Dict[str, Any]) -> str:
    """What int8 with no op kept float measured on the selection split, as a clause: the reason a
    NOT BUILT quotes, from the trial itself ("int8 breaks the budget" was once said unmeasured)."""
    trial, budget = record["trials"].get("0"), record["max_drop_points"]
    if trial is None:
        return "int8 itself was not measured on this split"
    measured = f"int8 itself drops {trial['drop']:+.2f} [{trial['low']:+.2f}, {trial['high']:+.2f}] points on the {record.get('split', 'selection')} split"
    if trial["low"] > budget:
        return f"{measured}, beyond the budget {budget}"
    if trial["high"] > budget:
        return f"{measured}, which cannot tell whether it is within the budget {budget} (UNDECIDED)"
    return f"{measured}, within the budget {budget}"


# The workflow times batch 1 and larger batches: a mix must be faster than fp32 at both ends (at
# batch 1 the quantize/dequantize around float runs weigh most). The MobileNetV2 photo mix was
# 1.18x fp32 at batch 32 in the search and 0.83x at batch 1 in the workflow's timing.
TIMED_BATCHES = (1, 32)


def join_isolated_int8(source: Path, nodes: Sequence[str], kept: Sequence[str]) -> List[str]:
    """`kept` plus every quantized op whose neighbouring quantizable ops (through the float ops
    between them: activations, adds, pooling) are all kept in float: alone, it pays a quantize and a
    dequantize for one op. Order: `kept`'s, then the joined in graph order."""
    import onnx

    model = onnx.load(str(source), load_external_data=False)
    quantizable, float_ops = set(nodes), set(kept)
    producer = {output: node for node in model.graph.node for output in node.output}
    consumers: Dict[str, list] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def neighbours(node) -> set:
        found, seen = set(), set()
        frontier = [(n, "up") for n in (producer.get(i) for i in node.input) if n is not None]
        frontier += [(n, "down") for output in node.output for n in consumers.get(output, [])]
        while frontier:
            current, direction = frontier.pop()
            if current.name in seen:
                continue
            seen.add(current.name)
            if current.name in quantizable:
                found.add(current.name)
            elif direction == "up":
                frontier += [(n, "up") for n in (producer.get(i) for i in current.input) if n is not None]
            else:
                frontier += [(n, "down") for output in current.output for n in consumers.get(output, [])]
        return found

    joined = [
        node.name
        for node in model.graph.node
        if node.name in quantizable and node.name not in float_ops and (lambda near: near and near <= float_ops)(neighbours(node))
    ]
    return list(kept) + joined


def time_against_fp32(source: Path, graphs: Dict[str, Path], batch: np.ndarray, confidence: float, rounds: int = 9):
    """{name: {median, interval, rounds}}: each graph's throughput over the fp32 graph's, timed in
    alternating rounds in this process (one thread each, as the CPU engine runs), a t interval on the
    rounds' log ratios (stats.ratio_interval)."""
    import time

    import onnxruntime as ort

    from precisionflow import stats

    def session(path: Path):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        made = ort.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"], disabled_optimizers=qdq.ORT_DISABLED_OPTIMIZERS
        )
        feed = {made.get_inputs()[0].name: batch}
        made.run(None, feed)  # warm-up
        return lambda: made.run(None, feed)

    def seconds(call) -> float:
        started = time.perf_counter()
        for _ in range(3):
            call()
        return time.perf_counter() - started

    runs = {"fp32": session(source), **{name: session(path) for name, path in graphs.items()}}
    ratios: Dict[str, list] = {name: [] for name in graphs}
    for index in range(rounds):
        order = list(runs) if index % 2 == 0 else list(reversed(runs))
        taken = {name: seconds(runs[name]) for name in order}
        for name in graphs:
            ratios[name].append(taken["fp32"] / taken[name])
    found = {}
    for name, values in ratios.items():
        low, high = stats.ratio_interval(values, confidence)
        found[name] = {
            "median": round(float(np.median(values)), 3),
            "interval": [round(low, 3), round(high, 3)],
            "rounds": [round(v, 3) for v in values],
        }
    return found


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

    # int8 itself (no op kept float) is always measured: a NOT BUILT reason about int8 quotes it
    if clears(0):
        low = high = 0
        reached = True
    else:
        low, high = 1, ops - 1  # at least one op stays quantized: the graph must be int8
        reached = high >= 0 and clears(high)
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
