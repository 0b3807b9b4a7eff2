"""One row of the report per engine (and per framework baseline): its columns from the nodes it reads
-- accuracy, speed alone and side by side, serving, pruning, the engine's options -- and which
columns any row fills. A row claims only what its nodes measured."""

from pathlib import Path
from typing import Any, Dict, List, Optional

from precisionflow import precisions
from precisionflow.measure.speed import loaded
from precisionflow.nodeio import named_lineage
from precisionflow.records import Evaluation, read_metrics
from precisionflow.reporting.compare import engine_key, ratio_values, variant, with_differences
from precisionflow.reporting.report_notes import NOISY_MARK

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
    "blank_as",  # why the row's blank cells are blank (BLANK_MARKS), where a reason applies
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


# Why a row leaves a kind of cell blank: the mark printed in the blank cell (console and page), and
# what it means, said once under the table. A blank without a mark is a figure not measured here.
BLANK_MARKS = {
    "ref": "the fp32 engine itself: every x_fp32 ratio is over it",
    "sim": "TensorRT's arithmetic simulated on this CPU: an accuracy figure, never timed",
    "twin": "int8_qat's fine-tune run in fp32: its accuracy reference, not timed",
    "n/a": "the TensorFlow model: timed as the x_tf baseline, not evaluated",
}
RATIOS_OVER_FP32 = ("x_fp32_b1", "x_fp32_bmax", "x_fp32_streams", "x_server", "x_server_95")
ACCURACY_CELLS = ("top1", "top5", "change_95", "agreement", "flipped", *DETECTION_COLUMNS)
# One number format per column, in the console and on the page (summary.csv keeps the numbers).
FORMATS = {
    **{column: "{:.4f}" for column in ("top1", "top5", "agreement", "box_agreement", "qat_agreement", "int8_frac")},
    **{column: "{:.2f}" for column in ("x_fp32_b1", "x_fp32_bmax", "x_fp32_streams", "x_tf_b1", "x_tf_bmax")},
    **{column: "{:.2f}" for column in ("x_tf_streams", "x_server", "srv_over_off")},
    **{column: "{:.1f}" for column in ("sps_b1", "sps_bmax", "sps_streams", "qps_server", "qps_offline", "engine_kb")},
    **{column: "{:.3f}" for column in ("p50_ms_b1", "p99_ms_b1", "p99_ms_server", "p90_ms_single", "p50_ms_single")},
}


def blank_cells(mark: str) -> tuple:
    """The cells a row with `mark` leaves blank for that reason."""
    if mark == "ref":
        return RATIOS_OVER_FP32
    if mark in ("sim", "twin"):
        return tuple(SPEED_COLUMNS)
    return ACCURACY_CELLS if mark == "n/a" else ()


def formatted(column: str, value: Any) -> Any:
    if column in FORMATS and isinstance(value, (int, float)) and not isinstance(value, bool):
        return FORMATS[column].format(value)
    return value


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
        found.update({"x_server": ratio["geomean"], "x_server_low": low, "x_server_high": high})
        # the printed cell: the ratio with its interval, or with why it has none -- never a bare point
        found["x_server_95"] = (
            f"{ratio['geomean']:.2f} ({interval_missing(ratio)})"
            if low == "" or ratio.get("why")  # no interval, or one too wide to inform: never a bare interval
            else f"{ratio['geomean']:.2f} [{low:.2f},{high:.2f}]"
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
    found: Dict[str, Any] = {column: round(stats["geomean"], 2) for column, stats in values.items()}
    found["ratio_noisy"] = [column for column, stats in values.items() if stats["noisy"]]
    found["ratio_loaded"] = loaded(ratio_metrics.get("conditions", {}))
    found["x_tf_devices"] = devices_apart(ratio_metrics.get("devices") or {})
    return found


def devices_apart(devices: Dict[str, str]) -> str:
    """Where the x_tf sides ran on two kinds of device (compare_speed's record), the words for it
    ("TensorFlow on the CPU, the engine on the GPU"); "" where they shared one, or no TensorFlow side ran."""
    framework, engine = devices.get("tensorflow"), devices.get("engine")
    if not framework or not engine or framework == engine:
        return ""
    return f"TensorFlow on the {framework.upper()}, the engine on the {engine.upper()}"


def displayed(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The printed/HTML rows: every number in its column's format; a blank that has a reason shows
    its mark (BLANK_MARKS); a noisy figure carries NOISY_MARK -- unless its row was timed on a
    loaded machine, which the notes say once (a mark on every figure would say nothing)."""
    shown = []
    for row in rows:
        copy = {column: formatted(column, value) for column, value in row.items()}
        for column in blank_cells(row.get("blank_as", "")):
            if copy.get(column, "") == "":
                copy[column] = row["blank_as"]
        if not row.get("loaded"):
            for column in str(row.get("noisy", "")).split():
                copy[column] = f"{copy[column]}{NOISY_MARK}"
        shown.append(copy)
    return shown


def blank_legend(rows: List[Dict[str, Any]]) -> List[str]:
    """One line per blank mark the rows use: what it means."""
    used = [mark for mark in BLANK_MARKS if any(row.get("blank_as") == mark for row in rows)]
    return [f"{mark} = {BLANK_MARKS[mark]}" for mark in used]


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
            "int8_frac": executed.get("integer_fraction", "") if precisions.runs_in(metrics["precision"]) == "integer" else "",
            **speed_columns(metrics["speed"]),
            **ratio_columns(ratios.get(engine_key(eval_dir))),
            **serving_columns((served or {}).get(engine_key(eval_dir))),
            "engine_kb": round(metrics["engine"]["engine_bytes"] / 1024, 1),
            "node": eval_dir.name,
        }
    )
    evaluated = Evaluation.of(lineage["evaluate_engine"]["params"])
    if not evaluated.timed:
        # what TensorRT would compute, run on this CPU: its accuracy is the row's point, its speed none
        row.update({column: "" for column in SPEED_COLUMNS})
    row["blank_as"] = blank_reason(evaluated, metrics["precision"])
    row["noisy"] = " ".join(row["noisy"].split() + row.pop("ratio_noisy", []))
    ratio_loaded = row.pop("ratio_loaded", False)
    row["loaded"] = "yes" if row["loaded"] or ratio_loaded else ""
    return row


def blank_reason(evaluated: Evaluation, precision: str) -> str:
    """The BLANK_MARKS key of an engine row: a simulation, the QAT twin, the fp32 reference, or none."""
    if evaluated.simulates:
        return "sim"
    if evaluated.twin_of:
        return "twin"
    return "ref" if precision == precisions.reference().name else ""


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
    metrics = read_metrics(framework_dir)
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
            "blank_as": "n/a",
        }
    )
    row.update(speed_columns(metrics["speed"]))
    return row
