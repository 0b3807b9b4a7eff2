"""Ratios and lineage lookups the report and tracking stages share.

Every ratio comes from a compare_speed node: one job that timed the engine, its target's fp32
engine and TensorFlow in alternating rounds. Nothing here divides figures of two different jobs.
"""

from pathlib import Path
from typing import Any, Dict, List, Tuple

from precisionflow.nodeio import declined, named_lineage, read_node, role_kind
from precisionflow.placements import TENSORRT
from precisionflow.records import Evaluation, read_metrics

PER_SAMPLE_FILE = "per_sample.npz"  # an evaluation's test-split predictions and labels (classification)
RATIOS = (("vs_fp32", "x_fp32"), ("vs_tf", "x_tf"))
# The accuracy figures of an engine's metrics.json that the table and MLflow carry, by task.
HEADLINE_METRICS = {
    "classification": ("top1", "agreement", "flipped", "max_abs_logit_diff"),
    "detection": ("map", "map50", "box_agreement", "spurious_per_100", "lost_per_100", "shadow_per_100", "max_abs_logit_diff"),
}


def task_of(metrics: Dict[str, Any]) -> str:
    return metrics.get("task", "classification")


def of_kind(inputs: Dict[str, Path], kind: str) -> List[Path]:
    """The input folders whose role is of `kind` (eval00003 is an eval: nodeio.role_kind), in role order."""
    return [path for role, path in sorted(inputs.items()) if role_kind(role) == kind]


def split_inputs(inputs: Dict[str, Path]) -> Tuple[List[Path], List[Path], List[Path]]:
    """(evaluation, ratio, framework-baseline) node folders of an aggregate stage (serving_inputs: the serving ones)."""
    picked = {kind: [path for path in of_kind(inputs, kind) if not declined(path)] for kind in ("eval", "speed", "framework")}
    return picked["eval"], picked["speed"], picked["framework"]


def serving_inputs(inputs: Dict[str, Path]) -> List[Path]:
    return [path for path in of_kind(inputs, "serve") if not declined(path)]


def declined_evaluations(inputs: Dict[str, Path]) -> List[Tuple[Path, str]]:
    """(evaluation node, why) for each engine that was never built (nodeio.declined): the aggregate
    stages list these as "not built" rather than reading figures that do not exist."""
    return [(path, declined(path)) for path in of_kind(inputs, "eval") if declined(path)]


def serving_by_engine(serve_dirs: List[Path], confidence: float) -> Dict[str, Dict[str, Any]]:
    """{engine node key: serve_engine metrics}, the Server ratio's interval at `confidence`
    (evaluate.confidence: verdict_rules.server_ratio_at)."""
    from precisionflow.reporting.verdict_rules import server_ratio_at

    found = {}
    for folder in serve_dirs:
        metrics = read_metrics(folder)
        metrics["server_ratio"] = server_ratio_at(metrics.get("server_ratio"), confidence)
        found[read_node(folder)["inputs"]["engine"]] = metrics
    return found


def declared_by_engine(inputs: Dict[str, Path], figures_of: Dict[str, List[str]]) -> Dict[str, Dict[str, Any]]:
    """{engine node key: {"<stage>.<figure>": value}} from the measuring stages read under their own
    name: the figures each declares (`figures_of`, {role: keys}: flow.declared_figures, handed over
    in the aggregate stage's params), taken from its node's summary."""
    found: Dict[str, Dict[str, Any]] = {}
    for role, path in sorted(inputs.items()):
        kind = role_kind(role)
        if kind not in figures_of or declined(path):
            continue
        node = read_node(path)
        values = found.setdefault(node["inputs"]["engine"], {})
        values.update({f"{kind}.{figure}": node["summary"].get(figure, "") for figure in figures_of[kind]})
    return found


def declared_columns(figures_of: Dict[str, List[str]]) -> List[str]:
    """The columns of declared_by_engine, in the table's order."""
    return [f"{role}.{figure}" for role, figures in figures_of.items() for figure in figures]


def ratios_by_engine(speed_dirs: List[Path]) -> Dict[str, Dict[str, Any]]:
    """{engine node key: compare_speed metrics} -- evaluations find their ratios by their engine."""
    return {read_node(folder)["inputs"]["engine"]: read_metrics(folder) for folder in speed_dirs}


def settings_of(speed: Dict[str, Any]) -> Dict[str, str]:
    """The settings a table shows: smallest batch (b1), largest batch (bmax), most streams."""
    batches = sorted((int(key[1:]) for key in speed if key.startswith("b")))
    streams = sorted((int(key[1:]) for key in speed if key.startswith("s")))
    chosen = {"b1": f"b{batches[0]}", "bmax": f"b{batches[-1]}"} if batches else {}
    if streams:
        chosen["streams"] = f"s{streams[-1]}"
    return chosen


def ratio_values(ratio_metrics: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """{"x_fp32_b1": {"geomean", "cv_percent", "noisy", ...}, ...} of one compare_speed node."""
    settings = ratio_metrics["settings"]
    values = {}
    for column, setting in settings_of(settings).items():
        for key, prefix in RATIOS:
            if key in settings[setting]:
                values[f"{prefix}_{column}"] = settings[setting][key]
    return values


def engine_key(eval_dir: Path) -> str:
    return read_node(eval_dir)["inputs"]["engine"]


# Keys that differ between rows without saying what was swept: content hashes, paths, lineage roles.
NOT_SWEPT = ("fingerprint", "files", "path", "sha256", "twin_of", "simulates", "runtime")
SHORT = {"num_samples": "n", "epochs": "e"}  # calibration.num_samples=64 -> n64, train.epochs=4 -> e4


def short_label(key: str, value: Any) -> str:
    """A differing key's value as a row shows it: n64, e4, minmax, lr=0.01."""
    leaf = key.rsplit(".", 1)[-1]
    if leaf in SHORT and isinstance(value, (int, float)):
        return f"{SHORT[leaf]}{value:g}"
    if isinstance(value, str) and value:
        return value
    if isinstance(value, bool):
        return leaf if value else f"no-{leaf}"
    if isinstance(value, list):
        return f"{leaf}=" + ",".join(str(item) for item in value)
    return f"{leaf}={value}"


def differences(rows: Dict[str, Dict[str, Any]], group_of: Dict[str, Any]) -> Dict[str, str]:
    """{row: what sets it apart}: among rows of one group (precision, target, variant), every
    flattened parameter whose values differ -- whatever key was swept, found from the rows
    themselves, not from a list of known keys -- as short labels (n64, e4, minmax). '' for a
    row with no neighbour that differs."""
    grouped: Dict[Any, List[str]] = {}
    for row, group in group_of.items():
        grouped.setdefault(group, []).append(row)
    found = {row: "" for row in rows}
    for members in grouped.values():
        if len(members) < 2:
            continue
        keys = sorted({key for row in members for key in rows[row]})
        differ = [
            key
            for key in keys
            if not any(part in key for part in NOT_SWEPT) and len({repr(rows[row].get(key)) for row in members}) > 1
        ]
        for row in members:
            labels = [short_label(key, rows[row][key]) for key in differ if key in rows[row]]
            found[row] = " ".join(dict.fromkeys(labels))
    return found


def lineage_params(lineage: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """Every parameter of a row's lineage, flattened as '<name>.<key path>' (named_lineage's names)."""
    from precisionflow.reporting.tracking import flatten

    return {key: value for name, record in lineage.items() for key, value in flatten(record["params"], name)}


def differences_of(eval_dirs: List[Path]) -> Dict[str, str]:
    """{evaluation folder name: what sets it apart from the other evaluations shown beside it}."""
    lineages = {path.name: named_lineage(path) for path in eval_dirs}
    rows = {name: lineage_params(lineage) for name, lineage in lineages.items()}
    groups = {
        name: (
            lineage["evaluate_engine"]["params"].get("precision"),
            lineage["evaluate_engine"]["params"].get("target"),
            variant(lineage),
        )
        for name, lineage in lineages.items()
    }
    return differences(rows, groups)


def with_differences(base: str, differs: str) -> str:
    return ", ".join(part for part in (base, differs) if part)


def variant(lineage: Dict[str, Dict[str, Any]]) -> str:
    """What distinguishes graphs of one precision: calibration method, ops kept in float."""
    graph = lineage["quantize_onnx"]["summary"]
    parts = [graph["calibration_method"]] if graph.get("calibration_source") == "ptq" else []
    parts += ["qat"] if graph.get("calibration_source") == "qat" else []
    parts += [f"{len(graph['kept_float'])} op(s) fp"] if graph.get("kept_float") else []
    evaluation = Evaluation.of(lineage["evaluate_engine"]["params"])
    if evaluation.twin_of:
        parts.append("qat twin")  # the QAT fine-tune run in fp32: int8_qat's reference
    if evaluation.simulates == TENSORRT:
        parts.append("TRT-sim")  # TensorRT's Q/DQ placement simulated on this CPU (a note says so)
    return ", ".join(parts)
