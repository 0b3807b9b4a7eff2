"""The report's notes under the table: what a reader must know to read a row right -- serving without a
valid rate, timings taken under load, non-finite outputs, a model at chance, engines not built,
int8_qat below its fidelity goal and its placement's known cause, streams held back by a fusion."""

import os
from pathlib import Path
from typing import Any, Dict, List

from precisionflow.errors import PrecisionflowError
from precisionflow.nodeio import lineage, named_lineage, node_key, read_node
from precisionflow.placements import ORT_CPU, TENSORRT
from precisionflow.records import Evaluation
from precisionflow.reporting.compare import declined_evaluations
from precisionflow.reporting.verdict_rules import finite
from precisionflow.stats import wilson

NOISY_MARK = "*"


def serving_notes(rows: List[Dict[str, Any]]) -> List[str]:
    """Once per table: how long the LoadGen runs were (MLPerf's minimum is 600 s) and which
    scenarios were INVALID, so no cell is read as an MLPerf result it is not."""
    served = [row for row in rows if row.get("serving_note") or row.get("qps_server") not in (None, "")]
    if not served:
        return []
    lines = sorted({row["serving_note"] for row in served if row.get("serving_note")})
    invalid = [
        f"{row['precision']} ({', '.join(name for name, key in (('SingleStream', 'p50_ms_single'), ('Offline', 'qps_offline')) if row.get(key) == 'INVALID')})"
        for row in served
        if "INVALID" in (row.get("p50_ms_single"), row.get("qps_offline"))
    ]
    if invalid:
        lines.append(
            f"LoadGen runs INVALID (no figure shown): {'; '.join(invalid)} -- their summaries are in each serve_engine node's loadgen/ folder."
        )
    return [f"Serving: {line}" for line in lines]


def device_notes(rows: List[Dict[str, Any]]) -> List[str]:
    """Once per pair of devices: the rows whose x_tf_* set the engine against TensorFlow running on
    another kind of device (a GPU engine beside a TensorFlow that found no GPU)."""
    apart: Dict[str, List[str]] = {}
    for row in rows:
        if row.get("x_tf_devices"):
            apart.setdefault(row["x_tf_devices"], []).append(f"{row['precision']} ({row['target']})")
    return [
        f"x_tf_* of {', '.join(names)}: {devices} -- a ratio of the two as they ran, not of one device's engine against its framework."
        for devices, names in apart.items()
    ]


def load_notes(rows: List[Dict[str, Any]]) -> List[str]:
    """Once per table: the rows timed while the machine was shared (their figures are not marked one by one)."""
    shared = [row for row in rows if row.get("loaded")]
    if not shared:
        return []
    used = sorted(float(row["others"]) for row in shared if row.get("others", "") not in ("", -1, -1.0))
    span = f"other processes used {used[0]}-{used[-1]} of its {os.cpu_count()} cores" if used else "1-min load above its cores"
    return [
        f"(!) {len(shared)} of {len(rows)} rows were timed while the machine was shared ({span}): every figure of "
        f"theirs is noisy, so none carries {NOISY_MARK}; time again on an idle machine."
    ]


def non_finite_notes(metrics: Dict[Path, Dict[str, Any]]) -> List[str]:
    """Engines whose outputs held inf/NaN: their accuracy columns measure an overflow, not a precision loss."""
    return [
        f"(!) {eval_dir.name}: {found['non_finite_outputs']} non-finite outputs (inf/NaN) on the test split -- its "
        "accuracy columns measure an overflow (values beyond fp16's range) or a broken graph, not rounding."
        for eval_dir, found in metrics.items()
        if found.get("non_finite_outputs")
    ]


def trained_models(metrics: Dict[Path, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """{node key: summary} of every training and fine-tuning node the evaluations were built from."""
    return {
        node_key(record): record["summary"]
        for eval_dir in metrics
        for record in lineage(eval_dir).values()
        if record["stage"] in ("train_model", "finetune_model")
    }


def chance_notes(metrics: Dict[Path, Dict[str, Any]]) -> List[str]:
    """Trainings that learned nothing or kept weights below their own best epoch, once each (their
    engines' rows compare noise, or a weaker reference than the model can be)."""
    from precisionflow.modeling.training import reference_message

    found = {key: reference_message(summary) for key, summary in trained_models(metrics).items()}
    return [f"(!) {key}: {message}." for key, message in sorted(found.items()) if message]


def reference_notes(metrics: Dict[Path, Dict[str, Any]]) -> List[str]:
    """Each trained model the engines are judged against, with the epoch whose weights it keeps and
    that epoch's validation top-1 beside the best and the last epoch's, once each."""
    from precisionflow.modeling.training import kept_epoch_line

    found = {key: kept_epoch_line(summary) for key, summary in trained_models(metrics).items()}
    return [f"reference {key}: {line}" for key, line in sorted(found.items()) if line]


def not_built(inputs: Dict[str, Path]) -> List[str]:
    """One line per engine the workflow declined to build, with the reason its graph stage gave."""
    return [f"NOT BUILT {path.name.rsplit('-', 1)[0]}: {why}" for path, why in declined_evaluations(inputs)]


QAT_FIDELITY = 0.995  # deployed == trained: int8_qat's engine should agree with its QAT model on 99.5%


def int8_graph_of(eval_dir: Path) -> Dict[str, Any]:
    """The evaluated engine's int8 graph record (its quantize_onnx node with int8 params), or {}
    where the lineage cannot be read or the engine is not int8."""
    try:
        found = named_lineage(eval_dir)
    except (OSError, PrecisionflowError):
        return {}
    return next((node for name, node in found.items() if name.endswith("quantize_onnx") and node["params"].get("int8")), {})


def placement_of(graph: Dict[str, Any]) -> str:
    """Where an int8 graph's Q/DQ is placed (placements.PLACEMENTS), as its node's params record it ('' if not int8)."""
    return (graph.get("params", {}).get("int8") or {}).get("placement", "")


def qat_fidelity_notes(metrics: Dict[Path, Dict[str, Any]], confidence: float) -> List[str]:
    """An int8_qat engine whose agreement with its QAT model is below 99.5% says by how much, and the
    known cause where its placement has one (measured: benchmarks/results/qat_unseen_data.json)."""
    lines = []
    for eval_dir, found in metrics.items():
        qat = found.get("qat", {}).get("vs_qat_model")
        if not qat or qat["agreement"] >= QAT_FIDELITY:
            continue
        n = found["test_images"]
        agreeing = round(qat["agreement"] * n)
        low, high = wilson(agreeing, n, confidence)
        graph = int8_graph_of(eval_dir)  # the placement as the graph's node records it, not read from a folder name
        cpu = placement_of(graph) == ORT_CPU
        bits = (graph.get("summary") or {}).get("cpu_weight_bits") if cpu else None
        if cpu and bits == 7:
            why = (
                "on the CPU placement convolution weights are stored in 7 bits (this CPU has no VNNI or dot product: "
                "its integer kernels saturate with 8, quant/qdq.py) where QAT trained 8-bit grids, and outputs are "
                "requantized in integers"
            )
        elif cpu:
            why = "the CPU placement requantizes outputs in integers where QAT rounded in float"
        else:
            why = "the graph rounds where QAT rounded; what is left is the runtime's arithmetic order"
        lines.append(
            f"(qat) {eval_dir.name}: agrees with its QAT model on {agreeing} of {n} test images "
            f"({100 * qat['agreement']:.2f}% [{100 * low:.2f}, {100 * high:.2f}] at {confidence:.0%}), below "
            f"{100 * QAT_FIDELITY:.1f}%: {why}."
        )
    return lines


THREADS_GAINED = 1.5  # streams that add less than half a stream's rate over one stream gained "little"


def fusion_streams_notes(metrics: Dict[Path, Dict[str, Any]]) -> List[str]:
    """One line per engine whose build kept cuDNN's fused Conv+bias (chosen at one batch size) and whose
    most streams ran under THREADS_GAINED x one stream: its own streams figures and fusion interval, and
    the setting (engine.onnxruntime.fuse_conv_bias=false) whose build tells whether the fusion is why.
    Records it cannot read (no fusion, one stream count, a rate that is no positive finite number) give
    no line; an interval it cannot read is left out of the line."""
    lines = []
    for eval_dir, found in metrics.items():
        fusion = found["engine"].get("conv_bias_fusion") or {}
        streams = (found.get("speed") or {}).get("streams") or {}
        counts = [count for count in streams if str(count).isdigit()]
        if fusion.get("kept") is not True or "1" not in counts or len(counts) < 2:
            continue
        most = max(counts, key=int)
        one, many = (streams[count].get("throughput_sps") if isinstance(streams[count], dict) else None for count in ("1", most))
        if not (finite(one, many) and one > 0 and many > 0) or many >= THREADS_GAINED * one:
            continue
        interval = fusion.get("ratio_interval")
        measured = (
            f" for [{interval[0]:.3f}, {interval[1]:.3f}]x at b{fusion.get('batch')}"
            if isinstance(interval, list) and len(interval) == 2 and finite(*interval) and min(interval) > 0
            else ""  # a record whose interval cannot be read: the note says what it can
        )
        lines.append(
            f"(fused) {eval_dir.name}: {most} streams ran {many / one:.2f}x one stream ({many:,.0f} against "
            f"{one:,.0f}/s) with cuDNN's fused Conv+bias, which its build kept{measured}. Whether the fusion "
            "holds these streams back, only a build with engine.onnxruntime.fuse_conv_bias=false tells "
            '(docs/hardware.md, "Batch-1 streams", traces such a case): where a service calls this engine at '
            "batch 1 from threads, build that too and compare."
        )
    return lines


def notes(rows: List[Dict[str, Any]], metrics: Dict[Path, Dict[str, Any]], confidence: float) -> List[str]:
    """What a reader must know to read the table right."""
    lines = [
        f"{NOISY_MARK} = uncertain above its flag threshold (timed windows: CV > 5%; ratios: standard error of the "
        "rounds' geometric mean > 5%): read the figure as noisy (summary.csv: the `noisy` column names them).",
        "x_fp32_* / x_tf_* = throughput ratios measured side by side in one job per engine (alternating rounds, "
        "geometric mean of the rounds, the figure their interval bounds); absolute figures are each engine's own timing job (timed = start of the workflow run it ran in, load = 1-min load average).",
    ]
    for eval_dir, found in metrics.items():
        executed = found["engine"].get("executed", {})
        if Evaluation.of(read_node(eval_dir)["params"]).simulates == TENSORRT:
            lines.append(
                f"(sim) {eval_dir.name}: TensorRT's Q/DQ placement run on this CPU ({executed.get('label', '')}): "
                "its accuracy is what TensorRT's int8 computes; it is not timed (a CPU says nothing of TensorRT's speed)."
            )
        elif not executed.get("as_requested", True) or "--" in executed.get("label", ""):
            lines.append(
                f"(!) {eval_dir.name}: {executed['label']} -- its speed is that of what ran, not of its graph's precision."
            )
    lines += qat_fidelity_notes(metrics, confidence)
    lines += device_notes(rows)
    lines += load_notes(rows)
    lines += serving_notes(rows)
    lines += non_finite_notes(metrics)
    lines += reference_notes(metrics)
    lines += chance_notes(metrics)
    lines += fusion_streams_notes(metrics)
    runs = sorted({row["timed"] for row in rows if row["timed"]})
    if len(runs) > 1:
        lines.append(
            f"Absolute figures come from {len(runs)} workflow runs (timed = the run's start: {', '.join(runs)}); "
            "machine load differs between runs: compare engines through the x_* columns, which never mix jobs."
        )
    return lines
