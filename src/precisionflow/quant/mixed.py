"""Accuracy-driven int8_mixed: which ops to keep in float so that int8 holds its budgets -- overall
and on every budgeted condition (dim images, long shadows) -- on the selection split.

Sensitivity is measured, not guessed from per-tensor error (quant/sensitivity.py): for each
quantizable op, a graph with only that op quantized runs the selection split (validation by
default), judged overall and per condition. int8 itself is measured first; the budgets it does not
hold by its interval decide the order: the ops that cost those conditions most go float first
(round-robin over the failing conditions, worst first), so float ops are spent where the worst
condition needs them -- a search that read only the overall drop could meet it while `dim` still
failed. The number kept is found by bisection: the fewest whose top-1 drop is within
`mixed_max_val_drop` points overall AND within each condition's budget (budgets.max_condition_drop,
budgets.condition_limits) by its paired interval (stats.py), never by the bare estimate. The test
split is never read here: the verdict is read there, beside this split's figure.

Then speed is weighed: an int8 op left alone between float ops pays a quantize and a dequantize for
one op, so such ops join the float run around them when every budget still holds; on the CPU
placement (where the graph is the engine) each candidate mix is timed against the fp32 graph side
by side and the fastest kept. When no mix is worth building -- int8 itself meets the budgets, none
meets them, or the one that does is not faster than fp32 by its interval -- the search says so and
nothing is built (the MobileNetV2 photo run had built a 61-of-62-float engine at 0.52x fp32).
"""

import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

from precisionflow.quant import qdq
from precisionflow.quant.mixed_reasons import nothing_to_build, record_limits, trial_text, why_not_met
from precisionflow.quant.mixed_record import DROP, JOINED, SearchRecord, Trial


def _outputs(graph: Path, images: np.ndarray, exact_fake_quant: bool = False) -> np.ndarray:
    """The graph's outputs on the CPU. `exact_fake_quant` (the TensorRT placement): every Q/DQ pair
    computed as written, in float, with no fusion into the CPU's integer kernels -- an AVX2 CPU
    without VNNI saturates u8 x s8 products in 16 bits there, which TensorRT does not: a trial
    judged on those kernels ranked ops by the CPU's artefact, not the placement's rounding."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if exact_fake_quant:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        str(graph), options, providers=["CPUExecutionProvider"], disabled_optimizers=qdq.ORT_DISABLED_OPTIMIZERS
    )
    return session.run(None, {session.get_inputs()[0].name: images})[0]


def _trial_graph(source: Path, ranges, nodes: Sequence[str], scratch: Path, placement: str, weight_bits=None) -> Path:
    """A trial's graph, placed as the final one is (`weight_bits`: the CPU placement's, as int8's)."""
    target = scratch / f"trial-{len(list(scratch.iterdir()))}.onnx"
    qdq.quantize_int8(source, target, ranges, list(nodes), placement, weight_bits=weight_bits)
    return target


def _quantized_outputs(
    source: Path, ranges, nodes: Sequence[str], images: np.ndarray, scratch: Path, placement: str, weight_bits=None
) -> np.ndarray:
    graph = _trial_graph(source, ranges, nodes, scratch, placement, weight_bits)
    return _outputs(graph, images, exact_fake_quant=placement == qdq.TENSORRT)


def choose_in_order(order: List[str], rows, figures, limits: Dict[str, float], judge, confidence: float):
    """(the order searched, how many of its first ops stay float, the record) by choose_by -- and,
    where the ranked order found no mix because its all-but-one trial left in int8 an op that breaks
    a budget by itself (its own row in the table), again with every such op float first."""
    chosen, record = choose_by(len(order), figures, limits, judge, confidence)
    must_float = ops_that_break_alone(rows, limits, order)
    if not record["budget_met"] and must_float and len(must_float) < len(order) and order[: len(must_float)] != must_float:
        first_order, order = order, must_float + [op for op in order if op not in must_float]
        chosen, record = choose_by(len(order), figures, limits, judge, confidence)
        record["first_order"] = {"order": first_order, "why_reordered": f"{len(must_float)} op(s) break a budget alone"}
    return order, chosen, record


def selection_split(data_dir: Path, split: str):
    """(the split, its images in memory -- each trial graph runs all of them, bounded by
    int8.report_split's size -- and its subsets: overall and per condition)."""
    from precisionflow.datasets import conditions
    from precisionflow.datasets.store import Split
    from precisionflow.quant import sensitivity

    decision = Split(data_dir, split)
    images = decision.array()
    return decision, images, sensitivity.subsets(len(images), conditions.groups(conditions.load(data_dir, split)))


def search(
    source: Path, ranges, nodes: List[str], data_dir: Path, int8: Dict[str, Any], confidence: float, placement: str
) -> Tuple[List[str], Dict[str, Any]]:
    """(ops to keep in float, the search's record: per-op sensitivity overall and per condition, the
    order, trials with intervals per budgeted condition, what it reached). On the CPU placement
    `int8["cpu_weight_bits"]` is the weights' bits its trials are placed with (static_int8.cpu_of)."""
    from precisionflow.quant import sensitivity
    from precisionflow.quant.judges import MAP, map50_tag

    split, weight_bits = int8["report_split"], int8.get("cpu_weight_bits")
    decision, images, where = selection_split(data_dir, split)
    reference = _outputs(source, images)
    judge = judge_for(int8, reference, decision, confidence)
    limits, unjudged = condition_limits(int8, where, judge)
    judged_on = judged_subsets(where, [sensitivity.OVERALL, *limits])
    with tempfile.TemporaryDirectory(prefix="pf-mixed-") as folder:
        scratch = Path(folder)

        def outputs_with(quantized: List[str]) -> np.ndarray:
            return _quantized_outputs(source, ranges, quantized, images, scratch, placement, weight_bits)

        rows = sensitivity.table(nodes, outputs_with, reference, where, judge)
        int8_itself_outputs = outputs_with(list(nodes))
        failing = failing_subsets(judge.figures(int8_itself_outputs, judged_on), limits)
        # the mAP drops have no rows of their own: the ops that change those images' outputs most go first for them
        ranked_for = [sensitivity.OVERALL if name == MAP else map50_tag(name) or name for name in failing]
        order = sensitivity.order(rows, list(dict.fromkeys(ranked_for)))

        def figures(kept: int):  # the selection split through the graph with `kept` ops in float
            return judge.figures(int8_itself_outputs if kept == 0 else outputs_with(order[kept:]), judged_on)

        order, chosen, record = choose_in_order(order, rows, figures, limits, judge, confidence)
        kept = order[:chosen]
        record.update(
            {
                "split": split,
                "of": len(order),
                "ranked_for": failing or [sensitivity.OVERALL],
                "order": order,
                "sensitivity_table": rows,
                "conditions_not_in_split": unjudged,
            }
        )
        why = nothing_to_build(record, chosen)
        if not why:
            kept, why = fastest_mix(
                source,
                ranges,
                nodes,
                kept,
                images,
                judge,
                scratch,
                (placement, weight_bits),
                record,
                confidence,
                where=where,
                timing=int8.get("speed_timing"),
            )
    record["kept"] = len(kept)
    if why:
        record["declined"] = why
        return [], record
    return kept, record


def ops_that_break_alone(rows: List[Dict], limits: Dict[str, float], order: List[str]) -> List[str]:
    """The ops (in `order`) whose own row -- that op alone in int8 -- is beyond a budget by its
    interval's upper end, on any subset the table has a row for: each must stay float in any mix."""
    beyond = {row["op"] for row in rows if row["condition"] in limits and row["high"] > limits[row["condition"]]}
    return [op for op in order if op in beyond]


def judge_for(int8: Dict[str, Any], reference: np.ndarray, decision, confidence: float):
    """The task's judge of a trial (quant/judges.py): top-1 for a classifier; for a detector
    (int8.detection: evaluate.detection's decoding and counting, read into the params), spurious
    boxes per image against the selection split's true objects and the float graph's boxes."""
    from precisionflow.quant import judges

    settings = int8.get("detection")
    if settings is None:
        return judges.TopOne(reference, decision.labels, confidence)
    from precisionflow.detection.data import load_objects

    truth = load_objects(decision.data_dir, decision.name, len(decision))
    return judges.Spurious(reference, truth, decision.classes, settings, confidence)


def condition_limits(int8: Dict[str, Any], where: Dict[str, np.ndarray], judge) -> Tuple[Dict[str, float], List[str]]:
    """({subset: budget} the mix must hold by its interval, [named conditions this split lacks]):
    overall, int8.mixed_max_val_drop for a classifier, max_spurious_per_image for a detector; every
    condition at the task's per-condition budget; a named one at its own limit (the budgets
    int8_mixed is judged by, read into its params); for a detector also the mAP drop over every image
    and each condition's mAP@.5 drop (max_map_drop, max_condition_drop)."""
    from precisionflow.quant.judges import MAP, map50_key
    from precisionflow.quant.sensitivity import OVERALL

    budgets = int8.get("condition_budgets") or {}
    overall = int8["mixed_max_val_drop"] if judge.overall_budget is None else budgets.get(judge.overall_budget)
    limits = {} if overall is None else {OVERALL: float(overall)}
    if judge.map_budget and budgets.get(judge.map_budget) is not None:  # a detector's mAP drop, over every image
        limits[MAP] = float(budgets[judge.map_budget])
    map50_limit = budgets.get(judge.condition_map_budget) if judge.condition_map_budget else None  # mAP@.5 per condition
    for tag in where:
        if tag in (OVERALL, MAP):
            continue
        limit = (budgets.get("condition_limits") or {}).get(tag, budgets.get(judge.condition_budget))
        if limit is not None:
            limits[tag] = float(limit)
        if map50_limit is not None:
            limits[map50_key(tag)] = float(map50_limit)
    unjudged = sorted(set(budgets.get("condition_limits") or {}) - set(where))
    return limits, unjudged


def judged_subsets(where: Dict[str, np.ndarray], names) -> Dict[str, np.ndarray]:
    """{judged name: image indices} for the names a search judges: a subset's own images, a
    condition's mAP@.5 over that condition's images, the mAP drop over every image."""
    from precisionflow.quant.judges import MAP, map50_tag
    from precisionflow.quant.sensitivity import OVERALL

    return {name: where[OVERALL] if name == MAP else where[map50_tag(name) or name] for name in names}


def failing_subsets(figures, limits: Dict[str, float]) -> List[str]:
    """The budgeted subsets int8 itself does not hold by its interval, the furthest beyond first:
    where the search spends its float ops."""
    beyond = [name for name in limits if figures[name].high > limits[name]]
    return sorted(beyond, key=lambda name: -(figures[name].high - limits[name]))


def fastest_mix(
    source, ranges, nodes, kept, images, judge, scratch, placed, record, confidence, timer=None, where=None, timing=None
):
    """(ops kept in float, why nothing is built or ''): the chosen mix and, when it differs, the mix
    with its isolated int8 ops joined to the float around them (if every budget still holds by its
    interval, each budgeted condition's too); on the CPU placement the candidates are timed against
    fp32 and the fastest kept -- unless it is not faster than fp32 by its interval. `placed`: (the
    placement, the CPU placement's weight bits); `timing`: {rounds, window_s}, the side-by-side
    ratio's own settings (evaluate.ratio_rounds, evaluate.ratio_window_s)."""
    from precisionflow.quant.sensitivity import OVERALL

    placement, weight_bits = placed
    candidates = {"chosen": kept}
    joined = join_isolated_int8(source, nodes, kept)
    if joined != kept and len(joined) < len(nodes):  # at least one op stays int8: the graph must be int8
        quantized = [op for op in nodes if op not in joined]
        limits = record_limits(record)
        outputs = _quantized_outputs(source, ranges, quantized, images, scratch, placement, weight_bits)
        figures = judge.figures(outputs, judged_subsets(where or {OVERALL: np.arange(len(images))}, [OVERALL, *limits]))
        overall = figures[OVERALL]
        record["joined"] = {
            "kept": len(joined),
            judge.key: round(overall.value, 3),
            "interval": [round(overall.low, 3), round(overall.high, 3)],
        }
        if all(figures[name].high <= limit for name, limit in limits.items()):
            candidates[JOINED] = joined
    if placement != qdq.ORT_CPU:
        record["speed"] = "not weighed: the TensorRT placement's graph runs only simulated on this machine"
        return kept, ""
    graphs = {
        name: _trial_graph(source, ranges, [op for op in nodes if op not in ops], scratch, placement, weight_bits)
        for name, ops in candidates.items()
    }
    if timing is None:
        raise ValueError("int8_mixed on the CPU placement times its mixes: its params carry no speed_timing {rounds, window_s}")
    timer = timer or time_against_fp32
    timed = {f"b{size}": timer(source, graphs, images[:size], confidence, timing) for size in TIMED_BATCHES}
    record["speed_vs_fp32"] = timed
    best = max(graphs, key=lambda name: min(at[name]["geomean"] for at in timed.values()))
    record["fastest"] = best
    # not faster: its interval reaches 1, or its rounds cannot be trusted (the table's rule, stats.unsound_ratio)
    slow = {at: found[best] for at, found in timed.items() if found[best]["interval"][0] <= 1.0 or unsound(found[best])}
    if slow:
        said = "; ".join(speed_said(at, x) for at, x in slow.items())
        return [], (
            f"the fastest mix within the budget ({len(candidates[best])} of {record['of']} ops in float) is not "
            f"faster than fp32 by its interval on this CPU ({said}){machine_said(slow.values())}, while "
            f"{int8_itself(record)}: no trade-off to build -- nothing built."
        )
    return candidates[best], ""


def unsound(timed: Dict[str, Any]) -> str:
    """Why a timed mix's figure cannot be trusted, or "" (stats.unsound_ratio, the table's rule)."""
    from precisionflow import stats

    return stats.unsound_ratio(timed["rounds"], *timed["interval"])


def speed_said(at: str, timed: Dict[str, Any]) -> str:
    """'b1: 0.99x [0.97, 1.01] (12 rounds of 0.1 s; 1 outlying: 3.50)': the figure with how it was
    taken, so a reader can tell a sound figure from a noisy one."""
    from precisionflow import stats

    low, high = timed["interval"]
    d = stats.interval_digits(low, high)
    said = (
        f"{at}: {timed['geomean']:.{d}f}x [{low:.{d}f}, {high:.{d}f}] ({len(timed['rounds'])} rounds of {timed['window_s']:g} s"
    )
    outlying = timed.get("outliers") or []
    if outlying:
        said += f"; {len(outlying)} outlying: " + ", ".join(f"{timed['rounds'][i]:.2f}" for i in outlying)
    if timed.get("noisy"):
        said += f"; noisy: a standard error of {timed['error_percent']:.1f}%"
    untrusted = unsound(timed)
    if untrusted:
        said += f"; not to be trusted: {untrusted}"
    return said + ")"


def machine_said(timed) -> str:
    """', timed while other processes kept 1.40 cores busy (a shared machine)' when the timing shared
    the machine (measure.speed.loaded, the table's own rule), else ''."""
    from precisionflow.measure.speed import loaded

    shared = [x["machine"] for x in timed if loaded(x.get("machine", {}))]
    if not shared:
        return ""
    busiest = max(shared, key=lambda m: m.get("other_cores", -1))
    if busiest.get("other_cores", -1) >= 0:
        return f", timed while other processes kept {busiest['other_cores']:.2f} cores busy (a shared machine)"
    return f", timed at a 1-min load of {busiest.get('loadavg_1m')} on {busiest.get('cpu_count')} cores (a shared machine)"


def int8_itself(record: Dict[str, Any]) -> str:
    """What int8 with no op kept float measured on the selection split, as a clause: the reason a
    NOT BUILT quotes, from the trial itself ("int8 breaks the budget" was once said unmeasured),
    with every budget it breaks named (a detector's may hold its spurious boxes and break mAP)."""
    search = SearchRecord.read(record)
    trial = search.int8_itself
    if trial is None:
        return "int8 itself was not measured on this split"
    if trial.figure == DROP:
        measured = f"int8 itself drops {trial.value:+.2f} [{trial.low:+.2f}, {trial.high:+.2f}] points"
    else:
        measured = f"int8 itself makes {trial_text(search, trial)}"
    measured += f" on the {search.split} split"
    held = budgets_held(record, trial)
    if not held:
        return measured
    beyond = [name for name, verdict in held.items() if verdict == "beyond"]
    if beyond:
        return f"{measured}, beyond the budget {', '.join(beyond)}"
    undecided = [name for name, verdict in held.items() if verdict == "undecided"]
    if undecided:
        return f"{measured}, which cannot tell whether it is within the budget {', '.join(undecided)} (UNDECIDED)"
    return f"{measured}, within the budget {', '.join(held)}"


def budgets_held(record: Dict[str, Any], trial: Trial) -> Dict[str, str]:
    """{'2.0' / 'mAP drop 2.0' / 'dim 5.0': 'within' | 'beyond' | 'undecided'}: each budget the search
    held, judged on one trial's intervals."""
    from precisionflow.quant.judges import MAP, map50_tag
    from precisionflow.quant.sensitivity import OVERALL

    found = {}
    for name, limit in record_limits(record).items():
        if name == OVERALL:
            figure, said = {"low": trial.low, "high": trial.high}, f"{limit}"
        elif name == MAP:
            figure, said = trial.map_drop, f"mAP drop {limit}"
        elif map50_tag(name):
            figure, said = trial.map50_drop_by_condition.get(map50_tag(name)), f"{name} drop {limit}"
        else:
            figure, said = trial.conditions.get(name), f"{name} {limit}"
        if figure is None:
            continue
        found[said] = "beyond" if figure["low"] > limit else "undecided" if figure["high"] > limit else "within"
    return found


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


def time_against_fp32(source: Path, graphs: Dict[str, Path], batch: np.ndarray, confidence: float, timing: Dict[str, Any]):
    """{name: {geomean, interval, rounds, window_s, noisy, error_percent, outliers, machine}}:
    each graph's throughput over the fp32 graph's by the side-by-side ratio's own method and
    settings (timing.alternating_rounds of `timing["rounds"]` windows of `timing["window_s"]`, one
    thread each, as the CPU engine runs; stats.ratio_stats), a t interval on the rounds' log ratios
    (stats.ratio_interval), the outlying rounds named, and the machine's load while it timed."""
    import onnxruntime as ort

    from precisionflow import stats
    from precisionflow.measure import speed, timing as clocks

    def window(path: Path):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        made = ort.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"], disabled_optimizers=qdq.ORT_DISABLED_OPTIMIZERS
        )
        feed = {made.get_inputs()[0].name: batch}
        made.run(None, feed)  # warm-up
        return lambda seconds: clocks.window_throughput(lambda: made.run(None, feed), len(batch), seconds)

    sides = {"fp32": window(source), **{name: window(path) for name, path in graphs.items()}}
    taken = speed.conditions()
    measured = clocks.alternating_rounds(sides, int(timing["rounds"]), float(timing["window_s"]))
    machine = speed.finished(taken)
    found = {}
    for name in graphs:
        ratio = stats.ratio_stats(measured[name], measured["fp32"])
        low, high = stats.ratio_interval(ratio["rounds"], confidence)
        found[name] = {
            "geomean": round(ratio["geomean"], 3),
            "interval": [round(low, 3), round(high, 3)],
            "rounds": [round(v, 3) for v in ratio["rounds"]],
            "window_s": float(timing["window_s"]),
            "error_percent": round(ratio["error_percent"], 2),
            "noisy": ratio["noisy"],
            "outliers": stats.outlying_rounds(ratio["rounds"]),
            "machine": {key: machine.get(key) for key in ("cpu_count", "loadavg_1m", "finished_loadavg_1m", "other_cores")},
        }
    return found


def choose(
    ops: int,
    predictions: Callable[[int], np.ndarray],
    reference: np.ndarray,
    labels: np.ndarray,
    budget,
    confidence: float,
    where: Dict[str, np.ndarray] = None,
) -> Tuple[int, Dict[str, Any]]:
    """choose_by for a classifier whose trials are given as predicted classes: `predictions(kept)`,
    fp32's `reference` classes, `budget` in top-1 points (or {subset: points}, sensitivity.OVERALL
    among them), `where` {subset: image indices}."""
    from precisionflow.quant import judges
    from precisionflow.quant.sensitivity import OVERALL

    limits = dict(budget) if isinstance(budget, dict) else {OVERALL: budget}
    where = where or {OVERALL: np.arange(len(labels))}
    judge = judges.TopOne(reference, labels, confidence)
    judged_on = {name: where[name] for name in [OVERALL, *limits]}
    return choose_by(ops, lambda kept: judge.figures(predictions(kept), judged_on), limits, judge, confidence)


def headline_figures(overall, chosen_record: Dict[str, Any], limits: Dict[str, float], judge) -> Dict[str, Any]:
    """The chosen trial's headline figures as the report and console read them: a classifier's drop
    in points with its interval and one image's worth; a detector's figure, its mAP drop and each
    condition's mAP@.5 drop where budgeted."""
    from precisionflow.quant.judges import MAP, map50_tag
    from precisionflow.quant.sensitivity import OVERALL

    found: Dict[str, Any] = {}
    if judge.key == "drop":  # a classifier's record, as the report and console read it
        found.update(
            {
                "max_drop_points": limits[OVERALL],
                "drop_points": round(overall.value, 3),
                "drop_interval": [round(overall.low, 3), round(overall.high, 3)],
                "one_image_points": round(overall.per_image_step, 3),
            }
        )
    else:
        found.update(
            {
                "max_" + judge.key: limits.get(OVERALL),
                judge.key: round(overall.value, 3),
                "interval": [round(overall.low, 3), round(overall.high, 3)],
            }
        )
        if MAP in limits:
            found["max_map_drop"] = limits[MAP]
            found["map_drop"] = chosen_record["map_drop"]
        map50_limits = {map50_tag(name): limit for name, limit in limits.items() if map50_tag(name)}
        if map50_limits:
            found["map50_limits"] = map50_limits
            found["map50_drop_by_condition"] = chosen_record["map50_drop_by_condition"]
    return found


def choose_by(ops: int, figures: Callable[[int], Dict[str, Any]], limits: Dict[str, float], judge, confidence: float):
    """How many of the first ops of the order to keep in float: the fewest whose figures against
    fp32 on the selection split (`figures(kept)`: {subset: judges.Figure}) are within every budget
    BY THEIR INTERVALS (the upper end <= the budget) -- overall and on every budgeted condition.
    Found by bisection over the order. Figures need not shrink as more ops stay float (a trial one
    image away from a 6-point drop is common on small splits), so a trial counts only when every
    interval clears, and the budget is reported met only when the chosen trial's do. Returns
    (kept, record of every trial with its intervals)."""
    from precisionflow.quant.judges import MAP, map50_tag
    from precisionflow.quant.sensitivity import OVERALL

    trials: Dict[int, Dict[str, Any]] = {}

    def clears(kept: int) -> bool:
        if kept not in trials:
            trials[kept] = figures(kept)
        return all(trials[kept][name].high <= limits[name] for name in limits)

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
    met = reached and clears(chosen)
    overall = trials[chosen][OVERALL]
    chosen_record = trial_record(trials[chosen], judge)
    record = {
        **judge.reference_record(),
        "figure": judge.metric,
        "trial_key": judge.key,  # each trial's overall figure (mixed_record.SearchRecord reads it)
        "unit": judge.unit,
        "condition_limits": {name: limit for name, limit in limits.items() if name not in (OVERALL, MAP) and not map50_tag(name)},
        "confidence": confidence,
        "budget_met": met,
        "images": overall.n,
        "trials": {str(k): trial_record(v, judge) for k, v in sorted(trials.items())},
        "chosen_trial": chosen,
    }
    record.update(headline_figures(overall, chosen_record, limits, judge))
    if record["condition_limits"]:
        record["conditions"] = chosen_record.get("conditions", {})
    if not met:
        record["why_not_met"], record["unresolvable"] = why_not_met(trials[chosen], limits, judge)
    return chosen, record


def trial_record(figures: Dict[str, Any], judge) -> Dict[str, Any]:
    """One trial: the overall figure at the top level (as before conditions), each condition's beside it."""
    from precisionflow.quant.judges import MAP, map50_tag
    from precisionflow.quant.sensitivity import OVERALL

    def fields(v):
        return {judge.key: round(v.value, 3), "low": round(v.low, 3), "high": round(v.high, 3), **v.counts}

    found = fields(figures[OVERALL])

    def drop_fields(v):
        return {"drop": round(v.value, 3), "low": round(v.low, 3), "high": round(v.high, 3)}

    if MAP in figures:
        found["map_drop"] = drop_fields(figures[MAP])
    map50 = {map50_tag(name): {**drop_fields(v), "images": v.n} for name, v in figures.items() if map50_tag(name)}
    if map50:
        found["map50_drop_by_condition"] = map50
    by_condition = {
        name: {**fields(v), "images": v.n} for name, v in figures.items() if name not in (OVERALL, MAP) and not map50_tag(name)
    }
    if by_condition:
        found["conditions"] = by_condition
    return found
