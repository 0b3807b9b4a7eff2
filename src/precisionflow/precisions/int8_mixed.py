"""int8_mixed: int8 with the most damaged ops kept in float -- chosen by a search against the
budgets on the decision split (a classifier: top-1, int8.mixed_max_val_drop, and the per-condition
drops; a detector: spurious boxes per image overall and per condition), or the int8.mixed_keep_fp
worst ops of int8's per-tensor report."""

from precisionflow.budgets import budget_for
from precisionflow.precisions.spec import GraphRecipe, Judging, PrecisionSpec, TensorRTFlags
from precisionflow.precisions.static_int8 import int8_params, read_rows, to_int8


def mixed_params(cfg, placement):
    drop = cfg["int8"]["mixed_max_val_drop"]
    extra = {"mixed_max_val_drop": drop}
    if drop is None:
        extra["mixed_keep_fp"] = cfg["int8"]["mixed_keep_fp"]
    else:
        extra["confidence"] = cfg["evaluate"]["confidence"]  # the search's intervals decide
        # a mix's speed is weighed as the side-by-side ratio is (compare_speed): the same rounds and windows
        extra["speed_timing"] = {"rounds": cfg["evaluate"]["ratio_rounds"], "window_s": cfg["evaluate"]["ratio_window_s"]}
        extra["condition_budgets"] = condition_budgets(cfg["evaluate"], cfg["task"])
        if cfg["task"] == "detection":  # judged as the evaluation judges: decoded and counted the same way
            extra["detection"] = dict(cfg["evaluate"]["detection"])
    return int8_params(cfg, placement, extra)


SEARCH_BUDGETS = {  # per task, the budgets the search holds (besides int8.mixed_max_val_drop for top-1)
    "classification": ("max_condition_drop", "condition_limits"),
    "detection": (
        "max_spurious_per_image",
        "max_condition_spurious_per_image",
        "condition_limits",
        "max_map_drop",
        "max_condition_drop",
    ),
}


def check_config(cfg):
    """A detector's search holds the spurious-box and mAP budgets; with none set it has nothing to hold."""
    if cfg["task"] != "detection" or cfg["int8"]["mixed_max_val_drop"] is None:
        return
    budgets = condition_budgets(cfg["evaluate"], "detection")
    if all(budgets.get(key) in (None, {}) for key in SEARCH_BUDGETS["detection"]):
        from precisionflow.errors import ConfigError

        raise ConfigError(
            "int8_mixed with task=detection: the search keeps ops in float until spurious boxes per image hold "
            "and the mAP drops hold their budgets, and none is set. Set evaluate.budget(s).max_spurious_per_image, "
            "max_condition_spurious_per_image, condition_limits, max_map_drop or max_condition_drop (mAP@.5 per condition), "
            "or int8.mixed_max_val_drop=null with int8.mixed_keep_fp."
        )


def condition_budgets(evaluate, task="classification"):
    """The budgets int8_mixed is judged by that its search must hold on the selection split
    (evaluate.budget, evaluate.budgets.int8_mixed on top): per condition for a classifier, and for
    a detector spurious boxes per image overall and per condition. Unlike other budgets, which
    only judge, they shape this graph and are in its id."""
    merged = budget_for(evaluate, "int8_mixed")
    found = {key: merged[key] for key in SEARCH_BUDGETS[task]}
    found["condition_limits"] = dict(found["condition_limits"] or {})
    return found


def choose_float(source, fp32_model, ranges, nodes, inputs, int8):
    """(ops kept in float, the search's record)."""
    if int8.get("mixed_max_val_drop") is not None:
        from precisionflow.quant import mixed

        return mixed.search(source, ranges, nodes, inputs["data"], int8, int8["confidence"], int8["placement"])
    from precisionflow.quant import layer_error

    rows = read_rows(inputs["int8"] / "layer_error.csv")
    return layer_error.worst_nodes(fp32_model, rows, nodes, int8["mixed_keep_fp"]), {}


def to_mixed(job):
    """The graph (or the reason none is built) and, from the search, sensitivity.csv: each op alone
    in int8, its figure (top-1 drop, or spurious boxes per image) overall and per condition on the
    selection split -- written whether
    or not a mix is built (it answers "which ops lose the dim images" either way)."""
    details = to_int8(job, choose_float)
    search = details.get("mixed_search") or {}
    rows = search.pop("sensitivity_table", None)
    if rows:
        from precisionflow.quant import sensitivity

        sensitivity.write_csv(rows, job.out / SENSITIVITY_FILE)
        search["costliest"] = {  # per subset, the three ops that cost it most (the console names them)
            subset: [[row["op"], sensitivity.value(row)] for row in sensitivity.costliest(rows, subset)]
            for subset in dict.fromkeys(row["condition"] for row in rows)
        }
    return details


SENSITIVITY_FILE = "sensitivity.csv"


def slug_suffix(cfg):
    drop = cfg["int8"]["mixed_max_val_drop"]
    return f"-keep{cfg['int8']['mixed_keep_fp']}" if drop is None else f"-drop{drop}"


def search_warning(params, split_sizes):
    """int8_mixed's search keeps ops in float until every budget's interval on int8.report_split
    clears it: a split too small to resolve a budget keeps nearly every op float (an engine slower
    than fp32) whatever the graph does. None when the split can resolve them."""
    from precisionflow import stats

    int8 = params["int8"]
    if int8.get("mixed_max_val_drop") is None:
        return None
    confidence, images, split = int8["confidence"], split_sizes()[int8["report_split"]], int8["report_split"]
    if "detection" in int8:  # spurious boxes per image: the finest is the count interval of no box at all
        budgets = int8["condition_budgets"]
        overall = budgets.get("max_spurious_per_image")
        finest = stats.count_interval([0] * images, confidence)[1] if images else float("inf")
        if overall is None or overall >= finest:
            return None
        return (
            f"precisionflow: warning: int8_mixed holds max_spurious_per_image={overall} on the {split} split, but its "
            f"{images} images cannot resolve that (with no spurious box at all the interval reaches {finest:.3f}): the "
            f"search will keep nearly every op in float. Use a budget of at least {finest:.3f} or a larger {split} split."
        )
    budget = int8["mixed_max_val_drop"]
    finest = stats.zero_flip_resolution(images, confidence)
    if budget >= finest:
        return None
    return (
        f"precisionflow: warning: int8_mixed aims for a drop within int8.mixed_max_val_drop={budget} points on the "
        f"{split} split, but its {images} images cannot resolve that (even with no image flipped the "
        f"interval reaches {finest:.2f}): the search will keep nearly every op in float. Use a budget of at least "
        f"{finest:.2f}, a larger {split} split (dataset.val_fraction), or int8.mixed_max_val_drop=null "
        "with int8.mixed_keep_fp."
    )


SPEC = PrecisionSpec(
    name="int8_mixed",
    summary="int8 with the ops that hurt accuracy most kept in float (a search against the budgets: top-1 and "
    "int8.mixed_max_val_drop, or a detector's spurious boxes per image, overall and per condition); "
    "builds nothing, and says why, when no mix beats both int8's accuracy and fp32's speed",
    graph=GraphRecipe(
        make=to_mixed,
        params=mixed_params,
        calibration="ptq",
        builds_on="int8",
        per_placement=True,
        times_candidates=True,
        slug_suffix=slug_suffix,
        planning_warning=search_warning,
    ),
    judging=Judging(runs_in="integer"),
    tensorrt=TensorRTFlags(simulated_on_cpu=True),
    check_config=check_config,
)
