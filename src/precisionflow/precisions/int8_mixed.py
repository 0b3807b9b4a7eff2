"""int8_mixed: int8 with the most damaged ops kept in float -- chosen by a search against a top-1
budget on the decision split (int8.mixed_max_val_drop), or the int8.mixed_keep_fp worst ops of
int8's per-tensor report."""

from precisionflow.budgets import budget_for
from precisionflow.precisions.spec import PrecisionSpec
from precisionflow.precisions.static_int8 import int8_params, read_rows, to_int8


def mixed_params(cfg, placement):
    drop = cfg["int8"]["mixed_max_val_drop"]
    extra = {"mixed_max_val_drop": drop}
    if drop is None:
        extra["mixed_keep_fp"] = cfg["int8"]["mixed_keep_fp"]
    else:
        extra["confidence"] = cfg["evaluate"]["confidence"]  # the search's intervals decide
        extra["condition_budgets"] = condition_budgets(cfg["evaluate"])
    return int8_params(cfg, placement, extra)


def condition_budgets(evaluate):
    """The per-condition budgets int8_mixed is judged by (evaluate.budget, evaluate.budgets.int8_mixed
    on top): the search must hold them on the selection split, so -- unlike other budgets, which
    only judge -- they shape this graph and are in its id."""
    merged = budget_for(evaluate, "int8_mixed")
    return {"max_condition_drop": merged["max_condition_drop"], "condition_limits": dict(merged["condition_limits"] or {})}


def choose_float(source, fp32_model, ranges, nodes, inputs, int8):
    """(ops kept in float, the search's record)."""
    if int8.get("mixed_max_val_drop") is not None:
        from precisionflow.quant import mixed

        return mixed.search(source, ranges, nodes, inputs["data"], int8, int8["confidence"], int8["placement"])
    from precisionflow.quant import layer_error

    rows = read_rows(inputs["int8"] / "layer_error.csv")
    return layer_error.worst_nodes(fp32_model, rows, nodes, int8["mixed_keep_fp"]), {}


def to_mixed(source, target, params, inputs, out):
    """The graph (or the reason none is built) and, from the search, sensitivity.csv: each op alone
    in int8, its top-1 drop overall and per condition on the selection split -- written whether
    or not a mix is built (it answers "which ops lose the dim images" either way)."""
    details = to_int8(source, target, params, inputs, out, choose_float)
    search = details.get("mixed_search") or {}
    rows = search.pop("sensitivity_table", None)
    if rows:
        from precisionflow.quant import sensitivity

        sensitivity.write_csv(rows, out / SENSITIVITY_FILE)
        search["costliest"] = {  # per subset, the three ops that cost it most (the console names them)
            subset: [[row["op"], row["top1_drop_points"]] for row in sensitivity.costliest(rows, subset)]
            for subset in dict.fromkeys(row["condition"] for row in rows)
        }
    return details


SENSITIVITY_FILE = "sensitivity.csv"


def slug_suffix(cfg):
    drop = cfg["int8"]["mixed_max_val_drop"]
    return f"-keep{cfg['int8']['mixed_keep_fp']}" if drop is None else f"-drop{drop}"


def search_warning(params, split_sizes):
    """int8_mixed's search keeps ops in float until the top-1 drop's interval on int8.report_split
    clears int8.mixed_max_val_drop: a split too small to resolve that budget keeps nearly every op
    float (an engine slower than fp32) whatever the graph does. None when the split can resolve it."""
    from precisionflow import stats

    int8 = params["int8"]
    if int8.get("mixed_max_val_drop") is None:
        return None
    budget, confidence, images = int8["mixed_max_val_drop"], int8.get("confidence", 0.95), split_sizes()[int8["report_split"]]
    finest = stats.zero_flip_resolution(images, confidence)
    if budget >= finest:
        return None
    return (
        f"precisionflow: warning: int8_mixed aims for a drop within int8.mixed_max_val_drop={budget} points on the "
        f"{int8['report_split']} split, but its {images} images cannot resolve that (even with no image flipped the "
        f"interval reaches {finest:.2f}): the search will keep nearly every op in float. Use a budget of at least "
        f"{finest:.2f}, a larger {int8['report_split']} split (dataset.val_fraction), or int8.mixed_max_val_drop=null "
        "with int8.mixed_keep_fp."
    )


SPEC = PrecisionSpec(
    name="int8_mixed",
    summary="int8 with the ops that hurt top-1 most kept in float (a search against int8.mixed_max_val_drop); "
    "builds nothing, and says why, when no mix beats both int8's accuracy and fp32's speed",
    make_graph=to_mixed,
    graph_params=mixed_params,
    calibration="ptq",
    builds_on="int8",
    times_its_graph=True,
    placement_dependent=True,
    simulate_tensorrt=True,
    runs_in="integer",
    tasks=("classification",),
    why_not_detection="int8_mixed chooses ops by top-1 on the decision split, which a detector does not have",
    slug_suffix=slug_suffix,
    planning_warning=search_warning,
)
