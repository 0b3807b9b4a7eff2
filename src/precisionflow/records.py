"""Records that several modules read, read in one place: what an evaluation node is (its params,
written by pipeline/plan.py) and a node's metrics.json. A reader that finds the record malformed
says where and what to do instead of raising a KeyError three modules away."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict

from precisionflow.errors import StageError
from precisionflow.nodeio import read_json

# The keys pipeline/plan.py writes into an evaluation's params beside the precision and target.
SIMULATES = "simulates"  # the runtime whose arithmetic the CPU reproduces (quant.qdq.TENSORRT)
TWIN_OF = "twin_of"  # the QAT fine-tune node whose fp32 twin this evaluation is

METRICS_FILE = "metrics.json"


@dataclass(frozen=True)
class Evaluation:
    """What an evaluate_engine node measures: a real engine, a simulation of another runtime on this
    CPU (its accuracy is that runtime's, its speed nobody's), or int8_qat's fp32 twin."""

    simulates: str = ""
    twin_of: str = ""

    @classmethod
    def of(cls, params: Dict[str, Any]) -> "Evaluation":
        """From an evaluation node's params (node.json's or the plan's)."""
        return cls(simulates=str(params.get(SIMULATES) or ""), twin_of=str(params.get(TWIN_OF) or ""))

    @property
    def timed(self) -> bool:
        """A simulation is never timed: a CPU says nothing of TensorRT's speed."""
        return not self.simulates


def read_metrics(node_dir: Path) -> Dict[str, Any]:
    """A finished node's metrics.json (evaluate_engine, compare_speed, serve_engine,
    benchmark_framework), or a clear error when it has none or it is not a JSON object."""
    path = Path(node_dir) / METRICS_FILE
    if not path.is_file():
        raise StageError(
            f"Expected {path}, found none: the node did not finish measuring. "
            "Delete its folder and run precisionflow run again, which recomputes it."
        )
    metrics = read_json(path)
    if not isinstance(metrics, dict):
        raise StageError(
            f"Expected a JSON object in {path}, found {type(metrics).__name__}: the file was edited or truncated. "
            "Delete its folder and run precisionflow run again, which recomputes it."
        )
    return metrics
