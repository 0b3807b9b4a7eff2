"""What a precision is, as one object: how its graph is made from the exported fp32 graph, what
that needs (calibration, a QAT fine-tune, another precision's graph), what it is judged against,
how the engine's "ran" label is read, and where it may run. The planner, the quantize stage, the
label reader, the TensorRT backend, the verdicts and MLflow read these fields; no module outside
this package tests a precision's name.

Adding one: docs/how-to/add-a-precision.md.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

# (source graph, target graph, the node's params, its input folders by role, its output folder)
#   -> details for the node's summary
MakeGraph = Callable[[Path, Path, Dict[str, Any], Dict[str, Path], Path], Dict[str, Any]]


def no_graph_params(cfg: Dict[str, Any], placement: str) -> Dict[str, Any]:
    return {}


@dataclass(frozen=True)
class PrecisionSpec:
    name: str
    summary: str  # one line: what it is (docs, `precisionflow check`)
    make_graph: MakeGraph
    # What of the configuration make_graph reads, beside the name: it is in the graph node's id.
    # `placement`: the runtime its Q/DQ is placed for (only for placement_dependent precisions).
    graph_params: Callable[[Dict[str, Any], str], Dict[str, Any]] = no_graph_params
    calibration: Optional[str] = None  # "ptq" or "qat": the calibrate node its graph reads; None: none
    qat_finetune: bool = False  # its graph is made from a QAT fine-tune of the model
    builds_on: Optional[str] = None  # another precision whose graph node it reads (int8_mixed: int8's report)
    # Its own typed settings: a dataclass whose fields become the configuration section named after
    # the precision (`<name>.<field>=...`, checked like every other key, "did you mean" included);
    # graph_params reads cfg[name]. None: it reads shared sections (fp16.*, int8.*) or nothing.
    settings: Optional[type] = None
    # Its graph stage times candidate graphs on the CPU placement (int8_mixed's speed search): that
    # job takes the timing stages' exclusivity (the whole host), as compare_speed does.
    times_its_graph: bool = False
    placement_dependent: bool = False  # one graph per runtime placement (TensorRT's Q/DQ differ from ONNX Runtime CPU's)
    simulate_tensorrt: bool = False  # on a CPU target, the TensorRT-placed graph is evaluated as a row of its own
    judged_against_twin: bool = False  # judged against the same fine-tune run in fp32, not the base fp32 model
    compared_with_trained_model: bool = False  # agreement with the (QAT) model its graph was exported from
    # How the "ran" label is read: "integer" counts int8 compute ops ("int8 5/6"); a float type
    # ("fp32", "fp16", "bf16") asks that most compute ops run in it.
    runs_in: str = "fp32"
    trt_weak_typing: bool = False  # TensorRT 10 may let its unquantized layers run fp16 (engine.trt_int8_fp16)
    clears_tf32: bool = False  # a true fp32 reference: TensorRT's TF32 flag cleared
    backends: Tuple[str, ...] = ("onnxruntime", "tensorrt")
    tasks: Tuple[str, ...] = ("classification", "detection")
    why_not_detection: str = ""  # the refusal's reason when "detection" is not in tasks
    why_not_tensorrt: str = ""  # the refusal's reason when "tensorrt" is not in backends
    slug_suffix: Callable[[Dict[str, Any]], str] = lambda cfg: ""  # after the name in its graph node's readable id
    # A warning for the plan, from its graph params and a function giving the data's split sizes
    # (None: nothing to say).
    planning_warning: Callable[[Dict[str, Any], Callable[[], Dict[str, int]]], Optional[str]] = lambda params, sizes: None
    is_reference: bool = False  # fp32: every other engine is compared with it
    # Its own refusals of a configuration that names it (a ConfigError), called when composing, before
    # anything runs (int8_mixed on a detector with no spurious-box budget to hold).
    check_config: Callable[[Dict[str, Any]], None] = lambda cfg: None

    @property
    def integer(self) -> bool:
        return self.runs_in == "integer"
