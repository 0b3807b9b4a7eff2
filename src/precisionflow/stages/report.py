"""report: one row per evaluated engine (and per framework baseline) -> summary.csv, a printed
comparison table, a Pareto plot (accuracy vs side-by-side speed-up over fp32) per target and report.html.

What a row claims is what it measured:
  * absolute figures (latency, samples/s) are the engine's own timing job, with when and under
    what load they were taken (timed, load);
  * every ratio (x_fp32_*, x_tf_*) is the geometric mean of per-round ratios from ONE compare_speed job
    that timed both sides in alternating rounds -- never one job's figure divided by another's;
  * `ran` says what the backend executed (an fp16 graph on ONNX Runtime's CPU provider runs fp32);
  * a figure whose spread is above its flag threshold carries a '*'.
"""

import csv
import time
from pathlib import Path
from typing import Any, Dict, List

from precisionflow import precisions
from precisionflow.errors import StageError
from precisionflow.nodeio import read_json, read_node, write_json_atomic
from precisionflow.records import read_metrics
from precisionflow.reporting import report_pages
from precisionflow.reporting.compare import (
    declared_by_engine,
    declared_columns,
    differences_of,
    engine_key,
    ratios_by_engine,
    serving_by_engine,
    serving_inputs,
    split_inputs,
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
from precisionflow.reporting.report_notes import not_built, notes
from precisionflow.reporting.report_rows import (
    BLANK_MARKS,
    COLUMNS,
    DETECTION_COLUMNS,
    blank_legend,
    displayed,
    engine_row,
    every_filled,
    framework_row,
)

# Reads every evaluation: a declined one is listed as not built, not carried (pipeline/runner.py).
AGGREGATES = True

PACKAGES = ("matplotlib", "numpy")
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


def node_params(budgets: Dict[str, Any]) -> Dict[str, Any]:
    """The budgets of the engines it reports: a verdict is part of the page (a changed budget
    redraws the report -- seconds -- and nothing upstream)."""
    return {"budgets": budgets}


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


# Printed in every run and sweep, in this order, filled or not (a column no row fills says why once,
# under the table): the same table shape whatever was swept. The task's accuracy column is added.
ALWAYS_PRINTED = ("precision", "ran", "change_95", "verdict", "variant", "x_fp32_bmax", "x_server_95")


def has_figure(row: Dict[str, Any], column: str) -> bool:
    """A cell that holds a figure: neither blank nor a blank's mark (ref, sim, twin, n/a)."""
    return str(row.get(column, "")) not in ("", *BLANK_MARKS)


def always_printed(rows: List[Dict[str, Any]]) -> List[str]:
    detects = any(has_figure(row, "map50") for row in rows)
    task = ["map50", "spurious_100"] if detects else ["top1"]
    # the worst condition, where the data has conditions: the row's story (shadows counted as cars)
    task += ["worst_cond"] if any(has_figure(row, "worst_cond") for row in rows) else []
    return [c for c in PRINTED if c in ALWAYS_PRINTED or c in task]


def fitted(rows: List[Dict[str, Any]], width: int = TERMINAL_WIDTH) -> List[str]:
    """The printed columns: ALWAYS_PRINTED's, then PRINTED's other filled ones (a single model's
    column says nothing) while the table fits in `width`, least important last."""
    kept = always_printed(rows)
    columns = [c for c in PRINTED if c in kept or any(has_figure(row, c) for row in rows)]
    if len({row["model"] for row in rows}) <= 1 and "model" in columns:
        columns.remove("model")  # named once above the table instead
    while len(columns) > len(kept) and len(format_table(rows, columns).splitlines()[1]) > width:
        columns.remove(next(c for c in reversed(columns) if c not in kept))
    return columns


def empty_columns(rows: List[Dict[str, Any]], columns: List[str], serving_ran: bool) -> List[str]:
    """Why a printed column no row fills is empty: one line each."""
    why = {
        "x_fp32_bmax": "no engine but fp32 was timed beside it (compare_speed) on this target",
        "x_server_95": "no serve_engine ran (evaluate.serving.enabled=false)"
        if not serving_ran
        else "no engine but fp32 was served beside it",
        "verdict": "no engine was judged",
        "variant": "every row is its precision's default: nothing swept",
    }
    return [
        f"{HEADERS.get(c, c)}: empty -- {why.get(c, 'not measured in this sweep')}"
        for c in columns
        if not any(has_figure(row, c) for row in rows)
    ]


def short_model(model_id: str) -> str:
    """'small_cnn-fp32-e12-fee2a144cb4e' -> 'small_cnn-fp32-e12' (the full id is in summary.csv)."""
    return model_id.rsplit("-", 1)[0] if "-" in model_id else model_id


def printed_table(rows: List[Dict[str, Any]], serving_ran: bool = True) -> str:
    """One block per (model, target), each headed by what it is; the same columns in every block,
    then what each blank mark means and why a column is empty."""
    shown = [dict(row, model=short_model(str(row["model"]))) for row in displayed(rows)]
    columns = [c for c in fitted(shown) if c not in ("model", "target")]
    blocks = []
    for model, target in sorted({(row["model"], row["target"]) for row in shown}):
        block = [row for row in shown if (row["model"], row["target"]) == (model, target)]
        full = next(str(row["model"]) for row in rows if short_model(str(row["model"])) == model)
        blocks += [f"model: {model} ({full.rsplit('-', 1)[-1]})   target: {target}", format_table(block, columns), ""]
    left_out = [c for c in PRINTED if c not in columns and c not in ("model", "target") and any(has_figure(r, c) for r in rows)]
    tail = blank_legend(rows) + empty_columns(rows, columns, serving_ran)
    tail += [f"(more columns in summary.csv and report.html: {', '.join(left_out)})"] if left_out else []
    return "\n".join(blocks[:-1] + tail)


def trade_offs(found: List[Dict[str, Any]]) -> List[str]:
    """One plain line per target: the fastest engine within its budget (measured side by side with
    the fp32 engine) and what it costs in accuracy -- named only when its lead is beyond the speed
    intervals; otherwise the engines that tie."""
    from precisionflow.reporting.verdict_rules import fastest

    lines = []
    for target in sorted({entry["target"] for entry in found}):
        passed = [
            entry
            for entry in found
            if entry["target"] == target and entry["verdict"] == "PASS" and not precisions.is_reference(entry["precision"])
        ]
        measured = [entry for entry in passed if entry.get("speed")]
        timed = [entry for entry in measured if not entry.get("ran_reference_kernels")]
        if not timed:
            lines.append(f"{target}: {why_no_ranking(passed, measured)}")
            continue
        ranking = fastest([{**entry["speed"], "entry": entry} for entry in timed])
        lines.append(f"{target}: " + ranking_line(ranking))
    return lines


def why_no_ranking(passed: List[Dict[str, Any]], measured: List[Dict[str, Any]]) -> str:
    """Why a target has no fastest engine to name: the line must be true of the rows above it."""
    if not passed:
        return "no engine passed its budget, so none is ranked by speed."
    if not measured:
        return "no engine within its budget was timed against fp32 here."
    names = ", ".join(sorted({entry["precision"] for entry in measured}))
    return (
        f"the engines within their budget that were timed against fp32 ({names}) ran fp32's kernels here: "
        "their ratios are in the table, but no precision's own speed-up to rank."
    )


def speed_cost(entry: Dict[str, Any]) -> str:
    """'int8 (int8), 2.04x [1.80, 2.30] fp32's throughput at bmax, for top-1 -0.12 [...] points vs fp32'."""
    from precisionflow.reporting.verdict_lines import interval_text, ratio_text

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
    metrics = {path: read_metrics(path) for path in evals}
    differs = differences_of(evals)  # whatever key was swept between these rows, named on them
    figures = params.get("figures", {})  # a measuring stage's own figures (flow.Stage.figures)
    declared = declared_by_engine(inputs, figures)
    rows = [engine_row(path, metrics[path], ratios, served, differs[path.name]) for path in evals]
    for path, row in zip(evals, rows, strict=True):
        row.update(declared.get(engine_key(path), {}))
    rows += [framework_row(path) for path in frameworks]
    rows.sort(
        key=lambda r: (r["model"], str(r["pruned"]), r["target"], r["precision"] == "tensorflow", r["precision"], r["variant"])
    )
    found = verdicts_of(params, evals, speeds + serves)
    add_verdict_columns(rows, found)
    with open(out / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS + declared_columns(figures), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    reading_notes = not_built(inputs) + trade_offs(found) + notes(rows, metrics, budgets_confidence(params["budgets"]))
    table = "\n".join([printed_table(rows, bool(serves)), ""] + reading_notes)
    (out / "summary.txt").write_text(table + "\n")
    plots = pictures(rows, found, metrics, served, inputs, evals, out)
    write_json_atomic(out / "verdicts.json", found)
    (out / "report.html").write_text(
        report_pages.html_page(
            displayed(rows),
            every_filled(HTML_COLUMNS + declared_columns(figures), rows),
            plots,
            blank_legend(rows) + reading_notes,
            found,
        )
    )
    print(table)
    return {
        "engines": len(evals),
        "ratio_jobs": len(speeds),
        "frameworks": len(frameworks),
        "seconds": round(time.perf_counter() - started, 3),
    }


def pictures(rows, found, metrics, served, inputs, evals: List[Path], out: Path) -> Dict[str, List[str]]:
    """Every picture of the page, under the heading it is shown with (report_galleries draws them)."""
    pareto = []
    for target in sorted({row["target"] for row in rows}):
        pareto.append(f"{FIGURES}/pareto-{target}.png")
        report_pages.pareto_plot(rows, target, out / pareto[-1], headline_setting(found))
    data_cache: Dict[str, Any] = {}
    detection = [path for path in evals if metrics[path].get("task") == "detection"]
    return {
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
