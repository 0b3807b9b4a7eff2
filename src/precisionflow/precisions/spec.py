"""What a precision is, as one object of four parts: how its graph is made from the exported fp32
graph and what that needs (`GraphRecipe`), what it is judged against and how its "ran" label is
read (`Judging`), where it may run (`Support`), and what TensorRT is told of it (`TensorRTFlags`).
The planner, the quantize stage, the label reader, the TensorRT backend, the verdicts and MLflow
read these parts; no module outside this package tests a precision's name.

Adding one: docs/how-to/add-a-precision.md.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple


@dataclass(frozen=True)
class GraphJob:
    """What a precision's graph maker is handed: the exported fp32 graph (`source`), where the graph
    goes (`target`, inside `out`, the node's folder), the node's params (its graph params, hashed
    into the node's id), its input folders by role, and -- for a precision that declares settings --
    those settings, typed (an instance of its settings dataclass, read from params[name])."""

    source: Path
    target: Path
    params: Dict[str, Any]
    inputs: Dict[str, Path]
    out: Path
    settings: Any = None


MakeGraph = Callable[[GraphJob], Dict[str, Any]]  # -> details for the node's summary


def no_graph_params(cfg: Dict[str, Any], placement: str) -> Dict[str, Any]:
    return {}


@dataclass(frozen=True)
class GraphRecipe:
    """How the graph is made, and what its node reads."""

    make: MakeGraph
    # What of the configuration `make` reads, beside the name: it is in the graph node's id.
    # `placement`: the runtime its Q/DQ is placed for (only for a recipe `per_placement`).
    params: Callable[[Dict[str, Any], str], Dict[str, Any]] = no_graph_params
    # Its own typed settings: a dataclass whose fields become the configuration section named after
    # the precision (`<name>.<field>=...`, checked like every other key, "did you mean" included);
    # with no `params` of its own, the node reads that section, and `make` gets it typed
    # (GraphJob.settings, wherever its params carry the section). None: it reads shared sections
    # (fp16.*, int8.*) or nothing.
    settings: Optional[type] = None
    calibration: Optional[str] = None  # "ptq" or "qat": the calibrate node its graph reads; None: none
    from_qat_finetune: bool = False  # made from a QAT fine-tune of the model
    builds_on: Optional[str] = None  # another precision whose graph node it reads (int8_mixed: int8's report)
    per_placement: bool = False  # one graph per runtime placement (TensorRT's Q/DQ differ from ONNX Runtime CPU's)
    # `make` times candidate graphs on the CPU placement (int8_mixed's speed search): that job takes
    # the timing stages' exclusivity (the whole host), as compare_speed does.
    times_candidates: bool = False
    slug_suffix: Callable[[Dict[str, Any]], str] = lambda cfg: ""  # after the name in its graph node's readable id
    # A warning for the plan, from its graph params and a function giving the data's split sizes
    # (None: nothing to say).
    planning_warning: Callable[[Dict[str, Any], Callable[[], Dict[str, int]]], Optional[str]] = lambda params, sizes: None

    def params_of(self, name: str, cfg: Dict[str, Any], placement: str) -> Dict[str, Any]:
        """The graph node's params: the recipe's own, or its settings section as configured."""
        if self.params is no_graph_params and self.settings is not None:
            return {name: dict(cfg[name])}
        return self.params(cfg, placement)


@dataclass(frozen=True)
class Judging:
    """What its engines are judged against, and how the "ran" label is read."""

    # "integer" counts int8 compute ops ("int8 5/6"); a float type ("fp32", "fp16", "bf16") asks that
    # most compute ops run in it.
    runs_in: str = "fp32"
    is_reference: bool = False  # fp32: every other engine is compared with it
    against_twin: bool = False  # judged against the same fine-tune run in fp32, not the base fp32 model
    against_trained_model: bool = False  # also compared with the (QAT) model its graph was exported from


@dataclass(frozen=True)
class Support:
    """Where it may run; a refusal says why."""

    backends: Tuple[str, ...] = ("onnxruntime", "tensorrt")
    tasks: Tuple[str, ...] = ("classification", "detection")
    why_not_tensorrt: str = ""  # the refusal's reason when "tensorrt" is not in backends
    why_not_detection: str = ""  # the refusal's reason when "detection" is not in tasks


@dataclass(frozen=True)
class TensorRTFlags:
    """What TensorRT is told of it, and whether a CPU target shows what TensorRT would compute."""

    weak_typing: bool = False  # TensorRT 10 may let its unquantized layers run fp16 (engine.trt_int8_fp16)
    clears_tf32: bool = False  # a true fp32 reference: TensorRT's TF32 flag cleared
    simulated_on_cpu: bool = False  # on a CPU target, the TensorRT-placed graph is evaluated as a row of its own


@dataclass(frozen=True)
class PrecisionSpec:
    name: str
    summary: str  # one line: what it is (docs, `precisionflow check`)
    graph: GraphRecipe
    judging: Judging = Judging()
    support: Support = Support()
    tensorrt: TensorRTFlags = TensorRTFlags()
    # Its own refusals of a configuration that names it (a ConfigError), called when composing, before
    # anything runs (int8_mixed on a detector with no spurious-box budget to hold).
    check_config: Callable[[Dict[str, Any]], None] = lambda cfg: None

    def graph_params(self, cfg: Dict[str, Any], placement: str) -> Dict[str, Any]:
        return self.graph.params_of(self.name, cfg, placement)

    def make_graph(self, source: Path, target: Path, params: Dict[str, Any], inputs: Dict[str, Path], out: Path):
        """The graph, made by the recipe, which gets its typed settings where it declares them."""
        declared = self.graph.settings is not None and self.name in params
        settings = self.graph.settings(**params[self.name]) if declared else None
        return self.graph.make(GraphJob(source, target, params, inputs, out, settings))
