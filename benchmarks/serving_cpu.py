"""Issue 33 on this CPU: the default experiment's engines (resnet_mini on digits: fp32, int8,
int8_qat) served under MLPerf LoadGen -- SingleStream p90, the largest valid Server rate within the
CPU bound (33 ms p99), Offline, and each engine's Server rate over the fp32 engine's. Then one
figure checked independently against LoadGen's own detail log.

    .venv/bin/python benchmarks/serving_cpu.py   -> benchmarks/results/serving_cpu.json
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, run_sweep, save  # noqa: E402

OVERRIDES = [
    "precisions=[fp32,int8,int8_qat]",
    "int8.simulate_tensorrt=false",
    "evaluate.serving.scenarios=[SingleStream,Server,Offline]",
    "evaluate.serving.min_duration_ms=2000",
    "evaluate.serving.search_precision=0.1",
    "tracking.enabled=false",
]


def side(result) -> dict:
    server, single, offline = result.get("Server") or {}, result.get("SingleStream") or {}, result.get("Offline") or {}
    at = server.get("at_rate") or {}
    return {
        "single_stream_p90_ms": round(single.get("p90_ns", 0) / 1e6, 4),
        "server_max_qps": server.get("rate"),
        "server_bracket": server.get("bracket"),
        "server_p99_ms_at_rate": round(at.get("p99_ns", 0) / 1e6, 4) if at else None,
        "server_runs": len(server.get("runs", [])),
        "offline_sps": offline.get("samples_per_second"),
        "server_over_offline": result.get("server_over_offline"),
    }


def detail_check(folder: Path) -> dict:
    """One valid Server run of the fp32 engine, its figures read independently from LoadGen's
    machine-readable detail log (mlperf_log_detail.txt, JSON lines) against what the node recorded
    (parsed from the summary): the p99, the scheduled rate, and validity recomputed from the count
    of queries over the bound (allowed: 1% of them)."""
    import re

    metrics = json.loads((folder / "metrics.json").read_text())
    recorded = metrics["results"]["engine"]["Server"]["at_rate"]
    runs = sorted((folder / "loadgen" / "engine").glob("*-Server"))
    chosen = [run for run in runs if "Result is : VALID" in (run / "mlperf_log_summary.txt").read_text()][-1]
    detail = {}
    for line in (chosen / "mlperf_log_detail.txt").read_text().splitlines():
        match = re.search(r'"key": "([^"]+)", "value": ([^,]+),', line)
        if match:
            detail[match.group(1)] = match.group(2).strip('"')
    queries, over = int(detail["result_query_count"]), int(detail["result_overlatency_query_count"])
    return {
        "run": chosen.name,
        "recorded_p99_ns": recorded["p99_ns"],
        "detail_log_p99_ns": int(detail["result_99.00_percentile_latency_ns"]),
        "detail_log_scheduled_sps": float(detail["result_scheduled_samples_per_sec"]),
        "queries": queries,
        "over_the_bound": over,
        "valid_by_count": over <= 0.01 * queries,
    }


def main() -> None:
    results = OUT / "serving-cpu"
    seconds = run_sweep(results, OVERRIDES)
    rows = []
    for folder in sorted(results.glob("serve_engine/*")):
        metrics = json.loads((folder / "metrics.json").read_text())
        node = json.loads((folder / "node.json").read_text())
        rows.append(
            {
                "engine": node["inputs"]["engine"],
                "bound_ms": metrics["settings"]["latency_bound_ms"],
                "engine_side": side(metrics["results"]["engine"]),
                "fp32_side": side(metrics["results"]["fp32"]) if "fp32" in metrics["results"] else None,
                "server_ratio_vs_fp32": metrics["server_ratio"],
                "note": metrics["note"],
            }
        )
    check = detail_check(sorted(results.glob("serve_engine/fp32-*"))[0])
    save("serving_cpu.json", {"overrides": OVERRIDES, "wall_s": round(seconds, 1), "engines": rows, "detail_log_check": check})


if __name__ == "__main__":
    main()
