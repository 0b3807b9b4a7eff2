"""Speed-ups: an engine's throughput over the framework baseline's, setting by setting, and the
lookups the report and tracking stages share to pair each engine with its baseline."""

from pathlib import Path
from typing import Any, Dict, List

from precisionflow.nodeio import read_json, read_node


def speedups(engine_speed: Dict[str, Any], framework_speed: Dict[str, Any]) -> Dict[str, float]:
    """{"b<N>": ratio at batch N, "s<N>": ratio with N streams} for settings both measured."""
    ratios = {}
    for kind, prefix in (("batch", "b"), ("streams", "s")):
        for key, stats in engine_speed.get(kind, {}).items():
            baseline = framework_speed.get(kind, {}).get(key)
            if baseline:
                ratios[f"{prefix}{key}"] = stats["throughput_sps"] / baseline["throughput_sps"]
    return ratios


def reference_model(eval_dir: Path) -> str:
    """The model node (train or fine-tune) behind the fp32 reference of an evaluation."""
    results = eval_dir.parent.parent
    return read_node(results / read_node(eval_dir)["inputs"]["reference"])["inputs"]["model"]


def load_baselines(framework_dirs: List[Path]) -> Dict[tuple, Dict[str, Any]]:
    """{(model node key, target): framework speed}."""
    baselines = {}
    for folder in framework_dirs:
        record = read_node(folder)
        baselines[(record["inputs"]["model"], record["params"]["target"])] = read_json(folder / "metrics.json")["speed"]
    return baselines


def split_inputs(inputs: Dict[str, Path]):
    evals = [path for role, path in sorted(inputs.items()) if role.startswith("eval")]
    frameworks = [path for role, path in sorted(inputs.items()) if role.startswith("framework")]
    return evals, frameworks
