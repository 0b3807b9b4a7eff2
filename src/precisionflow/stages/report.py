"""report: one row per evaluated engine -> summary.csv and a printed comparison table."""

import csv
from pathlib import Path
from typing import Any, Dict, List

from precisionflow.nodeio import ancestors, read_json

PACKAGES = ()
COLUMNS = ["model", "precision", "target", "device", "top1", "agreement", "flipped",
           "p50_ms_b1", "p99_ms_b1", "throughput_sps", "at_batch", "engine_kb", "evaluate_node"]


def row_for(eval_dir: Path) -> Dict[str, Any]:
    lineage = ancestors(eval_dir)
    metrics = read_json(eval_dir / "metrics.json")
    speed = metrics["speed"]
    largest = max(speed, key=int)
    single = speed.get("1", speed[min(speed, key=int)])
    return {
        "model": lineage["train_model"]["id"],
        "precision": metrics["precision"],
        "target": metrics["target"],
        "device": metrics["engine"]["device"],
        "top1": round(metrics["top1"], 4),
        "agreement": round(metrics["agreement"], 4),
        "flipped": metrics["flipped"],
        "p50_ms_b1": round(single["p50_ms"], 4),
        "p99_ms_b1": round(single["p99_ms"], 4),
        "throughput_sps": round(speed[largest]["throughput_sps"], 1),
        "at_batch": int(largest),
        "engine_kb": round(metrics["engine"]["engine_bytes"] / 1024, 1),
        "evaluate_node": eval_dir.name,
    }


def format_table(rows: List[Dict[str, Any]]) -> str:
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in COLUMNS} if rows else {c: len(c) for c in COLUMNS}
    line = lambda values: "  ".join(str(v).ljust(widths[c]) for c, v in zip(COLUMNS, values))
    return "\n".join([line(COLUMNS), line(["-" * widths[c] for c in COLUMNS])] + [line([r[c] for c in COLUMNS]) for r in rows])


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    rows = sorted((row_for(path) for path in inputs.values()), key=lambda r: (r["model"], r["target"], r["precision"]))
    with open(out / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    table = format_table(rows)
    (out / "summary.txt").write_text(table + "\n")
    print(table)
    return {"engines": len(rows)}
