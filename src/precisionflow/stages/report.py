"""report: one row per evaluated engine (and per framework baseline) -> summary.csv, a printed
comparison table, speed-ups over the TensorFlow baseline measured in the same run, a Pareto plot
(accuracy vs latency) per target and report.html."""

import csv
from pathlib import Path
from typing import Any, Dict, List, Optional

from precisionflow.compare import load_baselines, reference_model, speedups, split_inputs
from precisionflow.nodeio import ancestors, read_json, read_node
from precisionflow.stages import report_pages

PACKAGES = ("matplotlib",)
COLUMNS = ["model", "precision", "variant", "target", "device", "top1", "agreement", "flipped", "p50_ms_b1", "p99_ms_b1",
           "cv_pct_b1", "sps_b1", "sps_bmax", "bmax", "sps_streams", "streams", "x_tf_b1", "x_tf_bmax",
           "x_tf_streams", "engine_kb", "node"]


def speed_columns(speed: Dict[str, Any], baseline: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    batch, streams = speed["batch"], speed["streams"]
    smallest, largest = min(batch, key=int), max(batch, key=int)
    most = max(streams, key=int) if streams else None
    ratios = speedups(speed, baseline) if baseline else {}
    ratio = lambda key: round(ratios[key], 2) if key in ratios else ""
    return {
        "p50_ms_b1": round(batch[smallest]["p50_ms"], 4), "p99_ms_b1": round(batch[smallest]["p99_ms"], 4),
        "cv_pct_b1": round(batch[smallest]["cv_percent"], 1), "sps_b1": round(batch[smallest]["throughput_sps"], 1),
        "sps_bmax": round(batch[largest]["throughput_sps"], 1), "bmax": int(largest),
        "sps_streams": round(streams[most]["throughput_sps"], 1) if most else "", "streams": most or "",
        "x_tf_b1": ratio(f"b{smallest}"), "x_tf_bmax": ratio(f"b{largest}"), "x_tf_streams": ratio(f"s{most}"),
    }


def variant(eval_dir: Path) -> str:
    """What distinguishes graphs of one precision: calibration method, ops kept in float."""
    results = eval_dir.parent.parent
    graph = read_node(results / read_node(results / read_node(eval_dir)["inputs"]["engine"])["inputs"]["graph"])["summary"]
    parts = [graph["calibration_method"]] if graph.get("calibration_source") == "ptq" else []
    parts += ["qat ranges"] if graph.get("calibration_source") == "qat" else []
    parts += [f"{len(graph['kept_float'])} op(s) fp"] if graph.get("kept_float") else []
    return ", ".join(parts)


def engine_row(eval_dir: Path, baselines: Dict[tuple, Dict[str, Any]]) -> Dict[str, Any]:
    metrics = read_json(eval_dir / "metrics.json")
    baseline = baselines.get((reference_model(eval_dir), metrics["target"]))
    return {
        "model": ancestors(eval_dir)["train_model"]["id"], "precision": metrics["precision"],
        "variant": variant(eval_dir), "target": metrics["target"],
        "device": metrics["engine"]["device"], "top1": round(metrics["top1"], 4), "agreement": round(metrics["agreement"], 4),
        "flipped": metrics["flipped"], **speed_columns(metrics["speed"], baseline),
        "engine_kb": round(metrics["engine"]["engine_bytes"] / 1024, 1), "node": eval_dir.name,
    }


def framework_row(framework_dir: Path) -> Dict[str, Any]:
    metrics = read_json(framework_dir / "metrics.json")
    row = {column: "" for column in COLUMNS}
    row.update({"model": ancestors(framework_dir)["train_model"]["id"], "precision": "tensorflow",
                "target": metrics["target"], "device": metrics["device"], "node": framework_dir.name})
    row.update({k: v for k, v in speed_columns(metrics["speed"], None).items() if not k.startswith("x_tf")})
    return row


def draw_flipped(eval_dir: Path, out: Path) -> str:
    """A picture grid of the samples this engine decides differently from fp32; returns its file name."""
    from precisionflow.stages import prepare_dataset

    results = eval_dir.parent.parent
    data_dir = results / read_node(eval_dir)["inputs"]["data"]
    images, _ = prepare_dataset.load(data_dir, "test")
    with open(eval_dir / "flipped.csv") as handle:
        flipped = list(csv.DictReader(handle))
    name = f"flipped-{eval_dir.name}.png"
    report_pages.flipped_grid(images, flipped, read_json(data_dir / "meta.json")["classes"], eval_dir.name, out / name)
    return name


def format_table(rows: List[Dict[str, Any]]) -> str:
    widths = {c: max([len(c)] + [len(str(r[c])) for r in rows]) for c in COLUMNS}
    line = lambda values: "  ".join(str(v).ljust(widths[c]) for c, v in zip(COLUMNS, values)).rstrip()
    return "\n".join([line(COLUMNS), line(["-" * widths[c] for c in COLUMNS])] + [line([r[c] for c in COLUMNS]) for r in rows])


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    evals, frameworks = split_inputs(inputs)
    baselines = load_baselines(frameworks)
    rows = [engine_row(path, baselines) for path in evals] + [framework_row(path) for path in frameworks]
    rows.sort(key=lambda r: (r["model"], r["target"], r["precision"] == "tensorflow", r["precision"], r["variant"]))
    with open(out / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    table = format_table(rows)
    (out / "summary.txt").write_text(table + "\n")
    plots = []
    for target in sorted({row["target"] for row in rows}):
        plots.append(f"pareto-{target}.png")
        report_pages.pareto_plot(rows, target, out / plots[-1])
    plots += [draw_flipped(path, out) for path in evals if read_json(path / "metrics.json")["flipped"]]
    (out / "report.html").write_text(report_pages.html_page(rows, COLUMNS, plots))
    print(table)
    return {"engines": len(evals), "frameworks": len(frameworks)}
