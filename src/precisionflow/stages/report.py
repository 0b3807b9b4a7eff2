"""report: one row per evaluated engine (and per framework baseline) -> summary.csv, a printed
comparison table, a Pareto plot (accuracy vs side-by-side speed-up over fp32) per target and report.html.

What a row claims is what it measured:
  * absolute figures (latency, samples/s) are the engine's own timing job, with when and under
    what load they were taken (timed, load);
  * every ratio (x_fp32_*, x_tf_*) is the median of per-round ratios from ONE compare_speed job
    that timed both sides in alternating rounds -- never one job's figure divided by another's;
  * `ran` says what the backend executed (an fp16 graph on ONNX Runtime's CPU provider runs fp32);
  * a figure whose spread is above its flag threshold carries a '*'.
"""

import csv
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from precisionflow import precisions
from precisionflow.errors import StageError
from precisionflow.nodeio import named_lineage, read_json, read_node, write_json_atomic
from precisionflow.reporting import report_pages
from precisionflow.reporting.compare import (
    differences_of,
    engine_key,
    ratio_values,
    ratios_by_engine,
    serving_by_engine,
    serving_inputs,
    split_inputs,
    variant,
    with_differences,
)
from precisionflow.reporting.report_galleries import (
    FIGURES,
    GALLERY_CONDITIONS,
    class_changes,
    condition_changes,
    condition_galleries,
    draw_flipped,
    draw_worst_boxes,
    engine_label,
    sensitivity_maps,
    serving_curves,
)
from precisionflow.reporting.report_notes import NOISY_MARK, not_built, notes

# Reads every evaluation: a declined one is listed as not built, not carried (pipeline/runner.py).
AGGREGATES = True

PACKAGES = ("matplotlib", "numpy")
# Accuracy columns by task: a classifier's rows fill top1..flipped, a detector's map50..shadow_100;
# the printed and HTML tables leave out columns no row fills.
DETECTION_COLUMNS = ["map50", "map", "box_agreement", "spurious_100", "lost_100", "shadow_100"]
# speed against the TensorFlow model, then serving under the latency bound (serve_engine)
FRAMEWORK_AND_SERVING_COLUMNS = [
    "x_tf_b1",
    "x_tf_bmax",
    "x_tf_streams",
    "qps_server",
    "p99_ms_server",
    "x_server",
    "x_server_low",
    "x_server_high",
    "x_server_95",
    "p90_ms_single",
    "p50_ms_single",
    "qps_offline",
    "srv_over_off",
    "bound_ms",
    "serving_note",
]
COLUMNS = [
    "model",
    "pruned",
    "params",
    "mflops",
    "precision",
    "variant",
    "options",
    "target",
    "ran",
    "top1",
    "top5",
    "change_pts",
    "change_low",
    "change_high",
    "vs",
    "verdict",
    "worst_cond",
    "agreement",
    "flipped",
    *DETECTION_COLUMNS,
    "qat_agreement",
    "int8_frac",
    "p50_ms_b1",
    "p99_ms_b1",
    "cv_pct_b1",
    "sps_b1",
    "sps_bmax",
    "bmax",
    "sps_streams",
    "streams",
    "x_fp32_b1",
    "x_fp32_bmax",
    "x_fp32_streams",
    "x_fp32_low",
    "x_fp32_high",
    "x_fp32_at",
    *FRAMEWORK_AND_SERVING_COLUMNS,
    "engine_kb",
    "noisy",
    "loaded",
    "others",
    "timed",
    "load",
    "node",
]
# The printed table fits a 120-column terminal: these columns, most important first, less those no
# row fills; while it is wider, the last ones go (summary.csv and the report keep every column).
PRINTED = [
    "precision",
    "ran",
    "top1",
    "change_95",
    "verdict",
    "worst_cond",
    "variant",
    "map50",
    "map",
    "spurious_100",
    "shadow_100",
    "x_fp32_bmax",
    "x_server_95",
    "p50_ms_b1",
    "sps_bmax",
    "agreement",
    "box_agreement",
    "x_fp32_b1",
    "x_tf_bmax",
    "model",
    "pruned",
    "params",
    "mflops",
    "options",
    "qat_agreement",
    "lost_100",
    "flipped",
    "x_fp32_streams",
    "sps_streams",
    "x_tf_b1",
    "int8_frac",
    "engine_kb",
]
TERMINAL_WIDTH = 120
HEADERS = {
    "worst_cond": "worst condition",
    "x_server": "x_fp32@server",
    "x_server_95": "x_fp32@server [95%]",
    "qps_server": "qps@bound",
    "srv_over_off": "server/offline",
    "change_95": "vs fp32 [95%]",
    "x_fp32_bmax": "x_fp32@bmax",
    "x_fp32_b1": "x_fp32@1",
    "x_tf_bmax": "x_tf@bmax",
    "x_fp32_streams": "x_fp32@strm",
    "x_tf_b1": "x_tf@1",
    "p50_ms_b1": "p50_ms@1",
    "sps_bmax": "img/s@bmax",
    "sps_streams": "img/s@strm",
    "agreement": "agree",
    "box_agreement": "box_agree",
    "qat_agreement": "qat_agree",
}
# The page fits a 1366-px window: node ids live in tooltips (the precision cell), models by their hash.
HTML_COLUMNS = [
    "model",
    "pruned",
    "params",
    "mflops",
    "precision",
    "variant",
    "options",
    "target",
    "ran",
    "top1",
    "top5",
    "change_95",
    "verdict",
    "worst_cond",
    "agreement",
    "flipped",
    *DETECTION_COLUMNS,
    "qat_agreement",
    "int8_frac",
    "p50_ms_b1",
    "sps_bmax",
    "sps_streams",
    "x_fp32_b1",
    "x_fp32_bmax",
    "x_fp32_streams",
    "x_tf_b1",
    "x_tf_bmax",
    "x_tf_streams",
    # serving (MLPerf LoadGen): each figure only from a VALID run, else INVALID, named under the table
    "qps_server",
    "p99_ms_server",
    "x_server",
    "qps_offline",
    "srv_over_off",
    "p50_ms_single",
    "bound_ms",
    "engine_kb",
]
SPEED_COLUMNS = [
    "p50_ms_b1",
    "p99_ms_b1",
    "cv_pct_b1",
    "sps_b1",
    "sps_bmax",
    "bmax",
    "sps_streams",
    "streams",
    "x_fp32_b1",
    "x_fp32_bmax",
    "x_fp32_streams",
    *FRAMEWORK_AND_SERVING_COLUMNS,
    "noisy",
    "loaded",
]


def reads(budgets: Dict[str, Any]) -> Dict[str, Any]:
    """The budgets of the engines it reports: a verdict is part of the page (a changed budget
    redraws the report -- seconds -- and nothing upstream)."""
    return {"budgets": budgets}


OTHERS_LOADED = 0.5  # cores of CPU time other processes used on average while a job timed


def loaded(taken: Dict[str, Any]) -> bool:
    """Whether a timing job shared the machine: other processes kept more than half a core busy
    while it timed (measured from /proc/stat); without that sample, the 1-min load above the cores."""
    if taken.get("other_cores", -1) >= 0:
        return taken["other_cores"] > OTHERS_LOADED
    cores = taken.get("cpu_count") or 0
    return bool(cores) and max(taken.get("loadavg_1m", 0), taken.get("finished_loadavg_1m", 0)) > cores


def speed_columns(speed: Dict[str, Any]) -> Dict[str, Any]:
    """Numbers only (summary.csv is read by spreadsheets); which of them were noisy is the `noisy` column."""
    batch, streams = speed["batch"], speed["streams"]
    smallest, largest = min(batch, key=int), max(batch, key=int)
    most = max(streams, key=int) if streams else None
    taken = speed.get("conditions", {})
    noisy = ["p50_ms_b1", "sps_b1"] * bool(batch[smallest]["noisy"]) + ["sps_bmax"] * bool(batch[largest]["noisy"])
    return {
        "p50_ms_b1": round(batch[smallest]["p50_ms"], 4),
        "p99_ms_b1": round(batch[smallest]["p99_ms"], 4),
        "cv_pct_b1": round(batch[smallest]["cv_percent"], 1),
        "sps_b1": round(batch[smallest]["throughput_sps"], 1),
        "sps_bmax": round(batch[largest]["throughput_sps"], 1),
        "bmax": int(largest),
        "sps_streams": round(streams[most]["throughput_sps"], 1) if most else "",
        "streams": most or "",
        "timed": timed(taken),
        "load": taken.get("loadavg_1m", ""),
        "others": taken.get("other_cores", ""),
        "noisy": " ".join(noisy),
        "loaded": "yes" if loaded(taken) else "",
    }


def timed(taken: Dict[str, Any]) -> str:
    """The workflow run a figure comes from (its start), or when it was taken outside one."""
    run = str(taken.get("run", ""))
    if run[:4].isdigit():
        return run[5:].replace("T", " ")
    return f"{str(taken.get('taken_at', ''))[5:16].replace('T', ' ')} (no run id)"


def pruning_columns(lineage: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """How the model was pruned and what is left of it (parameters, MFLOPs per image)."""
    if "prune_model" not in lineage:
        return {"pruned": "", "params": "", "mflops": ""}
    from precisionflow.modeling.pruning import describe

    summary = lineage["prune_model"]["summary"]
    return {
        "pruned": describe(lineage["prune_model"]["params"]["prune"]),
        "params": summary["params_after"],
        "mflops": round(summary["flops_after"] / 1e6, 2),
    }


def engine_options(description: Dict[str, Any]) -> str:
    """The CUDA provider settings an engine ran with (TF32, NHWC, CUDA graph); empty on a CPU."""
    cuda = description.get("cuda_options") or {}
    if "use_tf32" not in cuda:
        return ""
    parts = ["TF32" if cuda["use_tf32"] == "1" else "no TF32"]
    parts += ["NHWC"] if cuda.get("prefer_nhwc") == "1" else []
    parts += ["fused conv+bias"] if cuda.get("fuse_conv_bias") == "1" else []
    parts += (
        ["conv+bias fusion left off (not faster here beyond doubt)"]
        if (description.get("conv_bias_fusion") or {}).get("kept") is False
        else []
    )
    parts += ["no NHWC (failed at first run)"] if description.get("nhwc_refused") else []
    if cuda.get("enable_cuda_graph") == "1":
        parts.append("CUDA graph")
    elif description.get("cuda_graph_refused"):
        parts.append("no CUDA graph (nodes on CPU)")
    return ", ".join(parts)


def serving_columns(served: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The largest valid Server rate within the bound, its p99 there, its ratio to the fp32 engine's
    (with the interval of the repeated searches), Offline's rate and Server over it, SingleStream's
    p50/p90 -- each scenario's figure only from a VALID run; else the cell says why not."""
    if not served:
        return {}
    engine = served["results"]["engine"]
    server, single, offline = (engine.get(name) or {} for name in ("Server", "SingleStream", "Offline"))
    at_rate = server.get("at_rate") or {}
    found = {
        "qps_server": server.get("rate") if server.get("rate") is not None else ("none" if server else ""),
        "p99_ms_server": round(at_rate["p99_ns"] / 1e6, 3) if at_rate.get("p99_ns") else "",
        "p90_ms_single": valid_figure(single, "p90_ns", 1e-6),
        "p50_ms_single": valid_figure(single, "p50_ns", 1e-6),
        "qps_offline": valid_figure(offline, "samples_per_second", 1.0),
        "srv_over_off": engine.get("server_over_offline", ""),
        "bound_ms": served["settings"]["latency_bound_ms"],
        "serving_note": served.get("note", ""),
    }
    ratio = served.get("server_ratio")
    if ratio:
        low, high = ("" if ratio.get(end) is None else ratio[end] for end in ("low", "high"))
        found.update({"x_server": ratio["median"], "x_server_low": low, "x_server_high": high})
        # the printed cell: the ratio with its interval, or with why it has none -- never a bare point
        found["x_server_95"] = (
            f"{ratio['median']:.2f} ({interval_missing(ratio)})"
            if low == "" or ratio.get("why")  # no interval, or one too wide to inform: never a bare interval
            else f"{ratio['median']:.2f} [{low:.2f},{high:.2f}]"
        )
    elif served["results"].get("fp32") is not None:  # a blank would say nothing: say which side found no rate
        fp32_server = served["results"]["fp32"].get("Server") or {}
        side = "this engine" if not server.get("rate") else "the fp32 side" if not fp32_server.get("rate") else ""
        if side and "Server" in served["settings"].get("scenarios", ["Server"]):
            found["x_server_95"] = f"none: {side} found no valid rate within {served['settings']['latency_bound_ms']:g} ms"
    return found


def interval_missing(ratio: Dict[str, Any]) -> str:
    """Why a Server ratio has no interval, short enough for a table cell (serve_engine.server_ratio's `why`)."""
    pairs = ratio.get("pairs", 1)
    why = ratio.get("why") or ""
    if "same ratio" in why:
        return f"no interval: {pairs} pairs, one ratio"
    if ratio.get("low") is not None:  # an interval the pairs' disagreement makes too wide to decide anything
        return f"{pairs} pairs disagree: [{ratio['low']:.2f},{ratio['high']:.2f}]"
    return f"no interval: {pairs} pair{'s' if pairs != 1 else ''}"


def valid_figure(result: Dict[str, Any], key: str, scale: float):
    """A scenario's figure from a VALID LoadGen run; 'INVALID' (LoadGen's verdict) otherwise."""
    if not result or key not in result:
        return ""
    return round(result[key] * scale, 3) if result.get("valid") else "INVALID"


def ratio_columns(ratio_metrics: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    if not ratio_metrics:
        return {}
    values = ratio_values(ratio_metrics)
    found: Dict[str, Any] = {column: round(stats["median"], 2) for column, stats in values.items()}
    found["ratio_noisy"] = [column for column, stats in values.items() if stats["noisy"]]
    found["ratio_loaded"] = loaded(ratio_metrics.get("conditions", {}))
    return found


def displayed(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The printed/HTML rows: a noisy figure carries NOISY_MARK -- unless its row was timed on a
    loaded machine, which the notes say once (a mark on every figure would say nothing)."""
    shown = []
    for row in rows:
        copy = dict(row)
        if not row.get("loaded"):
            for column in str(row.get("noisy", "")).split():
                copy[column] = f"{row[column]}{NOISY_MARK}"
        shown.append(copy)
    return shown


def engine_row(
    eval_dir: Path, metrics: Dict[str, Any], ratios: Dict[str, Dict[str, Any]], served=None, differs: str = ""
) -> Dict[str, Any]:
    """One engine's row; `differs`: what sets it apart from the rows beside it (differences_of)."""
    lineage = named_lineage(eval_dir)
    executed = metrics["engine"].get("executed", {})
    row = {column: "" for column in COLUMNS + ["change_95"]}
    row.update(
        {
            "model": lineage["train_model"]["id"],
            "precision": metrics["precision"],
            "variant": with_differences(variant(lineage), differs),
            "options": engine_options(metrics["engine"]),
            **pruning_columns(lineage),
            "target": metrics["target"],
            "ran": executed.get("executed_precision", "?") + ("" if executed.get("as_requested", True) else " (!)"),
            **accuracy_columns(metrics),
            "qat_agreement": round(metrics["qat"]["vs_qat_model"]["agreement"], 4) if "qat" in metrics else "",
            # one definition: the share of compute ops the built engine ran in integer kernels (the
            # label's "int8 k/n"), not the share of graph nodes quantize_onnx asked for
            "int8_frac": executed.get("integer_fraction", "")
            if getattr(precisions.find(metrics["precision"]), "integer", False)
            else "",
            **speed_columns(metrics["speed"]),
            **ratio_columns(ratios.get(engine_key(eval_dir))),
            **serving_columns((served or {}).get(engine_key(eval_dir))),
            "engine_kb": round(metrics["engine"]["engine_bytes"] / 1024, 1),
            "node": eval_dir.name,
        }
    )
    if lineage["evaluate_engine"]["params"].get("simulates"):
        # what TensorRT would compute, run on this CPU: its accuracy is the row's point, its speed none
        row.update({column: "" for column in SPEED_COLUMNS})
    row["noisy"] = " ".join(row["noisy"].split() + row.pop("ratio_noisy", []))
    ratio_loaded = row.pop("ratio_loaded", False)
    row["loaded"] = "yes" if row["loaded"] or ratio_loaded else ""
    return row


def accuracy_columns(metrics: Dict[str, Any]) -> Dict[str, Any]:
    if metrics.get("task") == "detection":
        return {
            "map50": round(metrics["map50"], 4),
            "map": round(metrics["map"], 4),
            "box_agreement": metrics["box_agreement"],
            "spurious_100": metrics["spurious_per_100"],
            "lost_100": metrics["lost_per_100"],
            "shadow_100": metrics["shadow_per_100"],
        }
    return {
        "top1": round(metrics["top1"], 4),
        "top5": round(metrics["top5"], 4) if "top5" in metrics else "",
        "agreement": round(metrics["agreement"], 4),
        "flipped": metrics["flipped"],
    }


TASK_COLUMNS = {"top1", "top5", "agreement", "flipped", "change_95", "verdict", "worst_cond", *DETECTION_COLUMNS}


def every_filled(columns: List[str], rows: List[Dict[str, Any]]) -> List[str]:
    """The page's columns: those some row fills (an unpruned sweep has no pruned/params/mflops)."""
    return [column for column in columns if column == "precision" or any(str(row.get(column, "")) != "" for row in rows)]


def filled(columns: List[str], rows: List[Dict[str, Any]]) -> List[str]:
    """The columns to show: every column, less the accuracy columns of a task no row has (a
    detection sweep has no top-1, a classification sweep no mAP)."""
    return [column for column in columns if column not in TASK_COLUMNS or any(row[column] != "" for row in rows)]


def framework_row(framework_dir: Path) -> Dict[str, Any]:
    metrics = read_json(framework_dir / "metrics.json")
    row = {column: "" for column in COLUMNS + ["change_95"]}
    lineage = named_lineage(framework_dir, ("model", "data"))
    row.update(
        {
            "model": lineage["train_model"]["id"],
            "precision": "tensorflow",
            **pruning_columns(lineage),
            "target": metrics["target"],
            "ran": f"fp32 ({metrics['device']})",
            "node": framework_dir.name,
        }
    )
    row.update(speed_columns(metrics["speed"]))
    return row


def format_table(rows: List[Dict[str, Any]], columns: List[str] = PRINTED, headers: Dict[str, str] = HEADERS) -> str:
    """tabulate's plain table; every cell printed as the report wrote it (no number re-formatting)."""
    from tabulate import tabulate

    table = tabulate(
        [[row.get(c, "") for c in columns] for row in rows],
        headers=[headers.get(c, c) for c in columns],
        tablefmt="simple",
        disable_numparse=True,
        stralign="left",
    )
    return "\n".join(line.rstrip() for line in table.splitlines())


def fitted(rows: List[Dict[str, Any]], width: int = TERMINAL_WIDTH) -> List[str]:
    """The printed columns: PRINTED's filled ones (a single model's column says nothing), less the
    least important while the table is wider than `width`."""
    columns = [c for c in PRINTED if any(str(row.get(c, "")) != "" for row in rows)]
    if len({row["model"] for row in rows}) <= 1 and "model" in columns:
        columns.remove("model")  # named once above the table instead
    while len(columns) > 4 and len(format_table(rows, columns).splitlines()[1]) > width:
        columns.pop()
    return columns


def short_model(model_id: str) -> str:
    """'small_cnn-fp32-e12-fee2a144cb4e' -> 'small_cnn-fp32-e12' (the full id is in summary.csv)."""
    return model_id.rsplit("-", 1)[0] if "-" in model_id else model_id


def printed_table(rows: List[Dict[str, Any]]) -> str:
    """One block per (model, target), each headed by what it is; the same columns in every block."""
    shown = [dict(row, model=short_model(str(row["model"]))) for row in displayed(rows)]
    columns = [c for c in fitted(shown) if c not in ("model", "target")]
    blocks = []
    for model, target in sorted({(row["model"], row["target"]) for row in shown}):
        block = [row for row in shown if (row["model"], row["target"]) == (model, target)]
        full = next(str(row["model"]) for row in rows if short_model(str(row["model"])) == model)
        blocks += [f"model: {model} ({full.rsplit('-', 1)[-1]})   target: {target}", format_table(block, columns), ""]
    left_out = [
        c for c in PRINTED if c not in columns and c not in ("model", "target") and any(str(r.get(c, "")) != "" for r in rows)
    ]
    tail = [f"(more columns in summary.csv and report.html: {', '.join(left_out)})"] if left_out else []
    return "\n".join(blocks[:-1] + tail)


def trade_offs(found: List[Dict[str, Any]]) -> List[str]:
    """One plain line per target: the fastest engine within its budget (measured side by side with
    the fp32 engine) and what it costs in accuracy -- named only when its lead is beyond the speed
    intervals; otherwise the engines that tie."""
    from precisionflow.reporting.verdict_rules import fastest

    lines = []
    for target in sorted({entry["target"] for entry in found}):
        timed = [
            entry
            for entry in found
            if entry["target"] == target
            and entry["verdict"] == "PASS"
            and entry.get("speed")
            and not precisions.is_reference(entry["precision"])
            and not entry.get("ran_reference_kernels")
        ]
        if not timed:
            lines.append(f"{target}: no engine within its budget was timed against fp32 here.")
            continue
        ranking = fastest([{**entry["speed"], "entry": entry} for entry in timed])
        lines.append(f"{target}: " + ranking_line(ranking))
    return lines


def speed_cost(entry: Dict[str, Any]) -> str:
    """'int8 (int8), 2.04x [1.80, 2.30] fp32's throughput at bmax, for top-1 -0.12 [...] points vs fp32'."""
    from precisionflow.reporting.budget import interval_text, ratio_text

    speed = entry["speed"]
    against = "its fp32 twin" if entry.get("vs_base_fp32") else "fp32"
    return (
        f"{entry['precision']}{' [' + entry['variant'] + ']' if entry.get('variant') else ''} ({entry['ran']}), "
        f"{ratio_text(speed)} fp32's throughput "
        f"at {entry['speedup_at']}, for {entry['accuracy_name']} {0.0 - entry['drop_points']:+.2f}"
        f"{interval_text(entry.get('drop'))} points vs {against}"
    )


def headline_setting(found: List[Dict[str, Any]]) -> str:
    """The timing setting the verdicts' speed-ups read (evaluate.budget.speedup_at): the plot uses it too."""
    settings = sorted({entry["speedup_at"] for entry in found if entry.get("speedup_at")})
    return settings[0] if len(settings) == 1 else "bmax"


def ranking_line(ranking: Dict[str, Any]) -> str:
    if "winner" in ranking:
        best = ranking["winner"]["entry"]
        if best["speed"]["high"] < 1.0:  # "best" would praise an engine slower than the reference
            return f"no engine within its budget is faster than fp32; the least slow is slower than fp32: {speed_cost(best)}."
        if best["speed"]["low"] <= 1.0:
            return f"no engine within its budget is faster than fp32 beyond doubt (fastest {speed_cost(best)})."
        return f"fastest within budget: {speed_cost(best)}."
    tied = [candidate["entry"] for candidate in ranking["tied"]]
    return (
        f"no single fastest engine within budget: {len(tied)} tie (their speed intervals overlap): "
        + "; ".join(speed_cost(entry) for entry in tied)
        + "."
    )


def add_verdict_columns(rows: List[Dict[str, Any]], found: List[Dict[str, Any]]) -> None:
    """Each judged row's accuracy change against its reference, with the 95% interval from the
    paired test images, and its verdict: summary.csv gets the numbers apart, the printed table one cell."""
    by_node = {entry["node"].split("/", 1)[-1]: entry for entry in found}
    for row in rows:
        entry = by_node.get(row["node"])
        if not entry:
            continue
        drop = entry.get("drop")
        row.update(
            {
                "verdict": entry["verdict"],
                "vs": "fp32 twin" if entry.get("vs_base_fp32") else "fp32",
                "change_pts": round(0.0 - entry["drop_points"], 2),
            }
        )
        if entry.get("worst_condition"):  # where the loss concentrates: the worst condition and its figure
            tag, value = entry["worst_condition"]
            top1 = entry.get("condition_figure", "").startswith("top-1")  # a drop, shown as a change like change_95
            row["worst_cond"] = f"{tag} {0.0 - value:+.2f}" if top1 else f"{tag} {value:.2f}/img"
        if entry.get("speed"):  # the interval of the ratio the verdict and the headline read ("" where none)
            speed = entry["speed"]
            low, high = ("" if speed[end] is None else speed[end] for end in ("low", "high"))
            row.update({"x_fp32_low": low, "x_fp32_high": high, "x_fp32_at": entry["speedup_at"]})
        # A row that ran fp32's kernels keeps the ratios measured for it: its graph may still differ
        # (bf16 on a CPU: eight Cast round trips, 0.70x fp32) and "=fp32" would hide that cost.
        if drop:
            row.update({"change_low": round(0.0 - drop["high"], 2), "change_high": round(0.0 - drop["low"], 2)})
            row["change_95"] = f"{0.0 - entry['drop_points']:+.2f} [{0.0 - drop['high']:+.1f},{0.0 - drop['low']:+.1f}]"
        else:
            row["change_95"] = f"{0.0 - entry['drop_points']:+.2f}"


def verdicts_of(params: Dict[str, Any], evals: List[Path], speeds: List[Path]) -> List[Dict[str, Any]]:
    """The budgets' verdicts on this report's engines (budget.verdicts over these nodes alone)."""
    from precisionflow.reporting.budget import verdicts

    results = evals[0].parent.parent if evals else Path(".")
    nodes = {f"{p.parent.name}/{p.name}": read_node(p) for p in evals + speeds}
    return verdicts({"results_dir": str(results), "nodes": nodes, "budgets": params.get("budgets", {})})


def budgets_confidence(budgets: Dict[str, Any]) -> float:
    """evaluate.confidence, as every engine's budget carries it (budgets.budget_for)."""
    levels = {budget["confidence"] for budget in budgets.values()}
    if len(levels) > 1:
        raise StageError(f"the report's budgets carry several confidence levels {sorted(levels)}; expected one")
    if not levels:
        raise StageError("the report has no engine budgets: the plan gave it no evaluation to report")
    return levels.pop()


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    started = time.perf_counter()
    evals, speeds, frameworks = split_inputs(inputs)
    serves = serving_inputs(inputs)
    (out / FIGURES).mkdir()
    served = serving_by_engine(serves, budgets_confidence(params["budgets"])) if serves else {}
    ratios = ratios_by_engine(speeds)
    metrics = {path: read_json(path / "metrics.json") for path in evals}
    differs = differences_of(evals)  # whatever key was swept between these rows, named on them
    rows = [engine_row(path, metrics[path], ratios, served, differs[path.name]) for path in evals]
    rows += [framework_row(path) for path in frameworks]
    rows.sort(
        key=lambda r: (r["model"], str(r["pruned"]), r["target"], r["precision"] == "tensorflow", r["precision"], r["variant"])
    )
    found = verdicts_of(params, evals, speeds + serves)
    add_verdict_columns(rows, found)
    with open(out / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    reading_notes = not_built(inputs) + trade_offs(found) + notes(rows, metrics)
    table = "\n".join([printed_table(rows), ""] + reading_notes)
    (out / "summary.txt").write_text(table + "\n")
    pareto = []
    for target in sorted({row["target"] for row in rows}):
        pareto.append(f"{FIGURES}/pareto-{target}.png")
        report_pages.pareto_plot(rows, target, out / pareto[-1], headline_setting(found))
    data_cache: Dict[str, Any] = {}
    detection = [path for path in evals if metrics[path].get("task") == "detection"]
    plots = {
        f"Pareto plots (accuracy vs speed-up over fp32 at {headline_setting(found)}, measured side by side; bars: its interval)": pareto,
        "Per-class change against fp32 (top-1, or AP for a detector)": class_changes(evals, out),
        "Per condition (images the data set tags; red = loss)": condition_changes(
            found, out, {f"evaluate_engine/{path.name}": engine_label(path, metrics[path]["precision"]) for path in evals}
        ),
        "Serving: latency percentile against offered rate (MLPerf LoadGen Server runs)": serving_curves(
            served, metrics, evals, out
        ),
        "Flipped samples (prediction differs from fp32)": [
            draw_flipped(path, out, data_cache) for path in evals if path not in detection and metrics[path]["flipped"]
        ],
        "Spurious and lost boxes (engine vs fp32)": [
            draw_worst_boxes(path, out, data_cache) for path in detection if read_json(path / "worst_boxes.json")
        ],
        f"Per condition: each engine's {GALLERY_CONDITIONS} most damaged conditions, their images alone": condition_galleries(
            found, evals, out, data_cache
        ),
        "Which ops lose which conditions (int8_mixed's search: each op alone in int8, top-1 change on the selection split)": (
            sensitivity_maps(inputs, out)
        ),
    }
    write_json_atomic(out / "verdicts.json", found)
    (out / "report.html").write_text(
        report_pages.html_page(displayed(rows), every_filled(HTML_COLUMNS, rows), plots, reading_notes, found)
    )
    print(table)
    return {
        "engines": len(evals),
        "ratio_jobs": len(speeds),
        "frameworks": len(frameworks),
        "seconds": round(time.perf_counter() - started, 3),
    }
