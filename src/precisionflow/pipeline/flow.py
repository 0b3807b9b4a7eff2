"""The stage graph in one place: which stage feeds which, and what each job asks of the machine.

The planner (plan.py) walks the model and graph chain a configuration's precisions need, places
the measurements by walking this table (each measuring stage says per what it is made: `each`),
and checks every edge it adds against the table, so the table cannot drift from what runs; the
Snakefile makes one rule per stage from it (only the report's rule, which also registers report
items, is written out). `precisionflow flow` prints the graph, `snakemake --rulegraph` draws a
run's.

Per precision, the chain of nodes is:
  fp32 / fp16      export_onnx -> quantize_onnx -> build_engine -> evaluate_engine, compare_speed
  int8, int8_mixed export_onnx -> calibrate -> quantize_onnx -> ...      (int8_mixed also reads int8's graph)
  int8_qat         finetune_model(qat) -> export_onnx -> calibrate(qat ranges) -> quantize_onnx -> ...
                   judged against the same fine-tune in fp32 (its twin evaluation)
Every configuration starts with prepare_dataset -> train_model [-> prune_model -> finetune_model],
and ends with report -> track_mlflow over all its measurements.
"""

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, Iterable, Tuple

from precisionflow.nodeio import role_kind  # noqa: F401 (the planner's numbered roles: read here and below)
from precisionflow.quant import qdq


@dataclass(frozen=True)
class Stage:
    name: str
    does: str
    inputs: Dict[str, Tuple[str, ...]] = field(default_factory=dict)  # input role -> the stages that may feed it
    mem_mb: int = 1000
    runtime_min: int = 60
    timing: bool = False  # a timing job has the machine to itself (common.smk: host_share, --exclusive)
    group: str = ""  # light jobs share one SLURM submission
    shown: bool = False  # its per-epoch progress is shown on the console
    local: bool = False  # runs on the submitting host (never a cluster job)
    threads: int = 1  # cores Snakemake reserves for the job (TensorFlow trainings use two)
    # It runs an engine: on a target that runs on a GPU (devices.runs_on_gpu) the job holds one GPU
    # (pipeline/gpuslots.py locally, the scheduler's allocation on SLURM) and ships to a GPU node
    # (pipeline/remote.py).
    gpu: bool = False
    # The software its jobs need, one conda environment per kind (workflow/envs/, written from
    # requirements.lock by tools/stage_envs.py; pipeline/software.py says what each kind holds):
    # "training" (TensorFlow), "graphs" (ONNX tools on a CPU), "engines" (the engine runtime: the
    # CPU or the GPU environment by the node's target), "reporting" (the page and MLflow).
    software: str = "training"
    # The readable part of its nodes' ids: slug(its params, the NodeContext it was read at, {input role:
    # the readable part of that input's id}). Every node is made the same way (plan.py, place_at).
    slug: Callable[[Dict[str, Any], Any, Dict[str, str]], str] = lambda params, at, upstream: "node"
    optional: Tuple[str, ...] = ()  # inputs fed only where they exist (fp32's own engine has no fp32_engine)
    # A measurement is placed by the planner's generic walk (plan.py, place_measurements): one node
    # per engine ("engine") or per target ("target"), fed the inputs it declares from what that
    # engine or target has, timed with `backend` ("" = the engine backend), and only where `switch`
    # (a config path; "{target}" stands for the target) is true.
    each: str = ""
    backend: str = ""
    switch: str = ""
    # A measuring stage the report has no columns of its own for: the keys of its summary that are
    # figures of the engine it measured, shown in the report (summary.csv, the page) and logged to
    # that engine's MLflow run as "<stage>.<key>". The report and MLflow read every measuring stage.
    figures: Tuple[str, ...] = ()


DATA = ("prepare_dataset",)
# A precision that builds on another (PrecisionSpec.graph.builds_on) reads that precision's graph node
# under the other precision's name as its role (int8_mixed reads "int8"): any such role is of this kind.
BUILDS_ON = "builds_on"
MODEL = ("train_model", "finetune_model")
ENGINE = ("build_engine",)


def _pruned(params, at, upstream) -> str:
    from precisionflow.modeling.pruning import describe

    return describe(params["prune"]).replace(" ", "-")


def _graph(params, at, upstream) -> str:
    """int8-ortcpu-...: the precision, the CPU placement where it has one, the precision's own suffix."""
    from precisionflow import precisions

    placed = "-ortcpu" if at.placement == qdq.ORT_CPU else ""
    placed += f"-{at.cpu_dot_product}" if placed and at.cpu_dot_product else ""  # a CPU its targets declare
    return at.precision + placed + precisions.get(at.precision).graph.slug_suffix(at.cfg)


def _engine(params, at, upstream) -> str:
    return upstream["engine"]


STAGES: Tuple[Stage, ...] = (
    Stage(
        "prepare_dataset",
        "the splits (train/val/test), cached as the data set's config says",
        slug=lambda params, at, up: params["name"],
    ),
    Stage(
        "train_model",
        "train the model (fp32 or a mixed-precision policy), saved as fp32 weights",
        {"data": DATA},
        mem_mb=4000,
        runtime_min=240,
        shown=True,
        threads=2,
        slug=lambda params, at, up: (
            f"{at.cfg['model']['name']}-{at.cfg['train']['precision_policy']}-e{at.cfg['train']['epochs']}"
        ),
    ),
    Stage(
        "prune_model",
        "channel pruning or 2:4 sparsity of the trained model",
        {"model": ("train_model",), "data": DATA},
        mem_mb=4000,
        runtime_min=120,
        shown=True,
        threads=2,
        slug=_pruned,
    ),
    Stage(
        "finetune_model",
        "retrain: after pruning, in mixed precision, or quantization-aware (QAT)",
        {"model": ("train_model", "prune_model"), "data": DATA},
        mem_mb=4000,
        runtime_min=240,
        shown=True,
        threads=2,
        slug=lambda params, at, up: f"{at.finetune['mode']}-e{at.finetune['epochs']}",
    ),
    Stage(
        "export_onnx",
        "the fp32 ONNX graph, checked against the Keras model",
        {"model": MODEL, "data": DATA},
        mem_mb=3000,
        group="graphs",
        slug=lambda params, at, up: f"{up['model']}-opset{at.cfg['export']['opset']}",
    ),
    Stage(
        "calibrate",
        "int8 ranges: PTQ calibration, or QAT's learned ranges",
        {"onnx": ("export_onnx",), "data": DATA},
        mem_mb=2000,
        group="graphs",
        slug=lambda params, at, up: f"{at.source}-{params['method']}-n{params['num_samples']}",
        software="graphs",
    ),
    Stage(
        "quantize_onnx",
        "the precision graph: fp32, fp16, int8 Q/DQ (placed for the runtime), int8_mixed",
        {"onnx": ("export_onnx",), "calibration": ("calibrate",), "data": DATA, BUILDS_ON: ("quantize_onnx",)},
        mem_mb=2000,
        group="graphs",
        slug=_graph,
        optional=("calibration", "data"),  # a float graph is converted, an int8 one calibrated on the data
        software="graphs",
    ),
    Stage(
        "build_engine",
        "the engine for one target (ONNX Runtime or TensorRT)",
        {"graph": ("quantize_onnx",)},
        gpu=True,
        slug=lambda params, at, up: f"{up['graph']}-{at.target}",
        software="engines",
    ),
    Stage(
        "evaluate_engine",
        "accuracy against fp32 on the test split, and absolute speed",
        {
            "engine": ENGINE,
            "data": DATA,
            "reference": ("export_onnx",),
            "qat_export": ("export_onnx",),
            "qat_model": ("finetune_model",),
        },
        mem_mb=2000,
        timing=True,
        gpu=True,
        each="engine",
        slug=_engine,
        optional=("qat_export", "qat_model"),  # a QAT precision's deployed model is also its trained one
        software="engines",
    ),
    Stage(
        "compare_speed",
        "the engine against fp32 and TensorFlow, side by side in alternating rounds",
        {"engine": ENGINE, "fp32_engine": ENGINE, "model": MODEL, "data": DATA},
        mem_mb=3000,
        timing=True,
        gpu=True,
        each="engine",
        slug=_engine,
        optional=("fp32_engine", "model"),  # the model: where the target times TensorFlow too
        software="engines",
    ),
    Stage(
        "serve_engine",
        "requests per second within a latency bound (MLPerf LoadGen), the engine and its fp32 engine",
        {"engine": ENGINE, "fp32_engine": ENGINE, "data": DATA},
        mem_mb=3000,
        timing=True,
        gpu=True,
        each="engine",
        slug=_engine,
        optional=("fp32_engine",),
        switch="evaluate.serving.enabled",
        software="engines",
    ),
    Stage(
        "benchmark_framework",
        "the TensorFlow model's own speed (the x_tf baseline)",
        {"model": MODEL, "data": DATA},
        mem_mb=3000,
        timing=True,
        each="target",
        slug=lambda params, at, up: f"tf-{at.target}",
        backend="tensorflow",
        switch="target_defs.{target}.framework",
    ),
    Stage(
        "report",
        "the sweep's table, verdicts, figures and page",
        {
            "eval": ("evaluate_engine",),
            "speed": ("compare_speed",),
            "framework": ("benchmark_framework",),
            "serve": ("serve_engine",),
        },
        mem_mb=2000,
        software="reporting",
    ),
    Stage(
        "track_mlflow",
        "one MLflow parent run per sweep, a child per engine",
        {
            "eval": ("evaluate_engine",),
            "speed": ("compare_speed",),
            "framework": ("benchmark_framework",),
            "serve": ("serve_engine",),
            "report": ("report",),
        },
        local=True,
        software="reporting",
    ),
)

AGGREGATING = ("report", "track_mlflow")  # they read every measurement of the sweep


def completed(stages: Tuple[Stage, ...]) -> Tuple[Stage, ...]:
    """The table with every measuring stage (`each` set) that the report does not name among its
    inputs added to the aggregating stages' inputs, under the stage's own name: a new stage's
    figures reach the report and MLflow from its row alone."""
    named = {source for stage in stages if stage.name == "report" for sources in stage.inputs.values() for source in sources}
    extra = {stage.name: (stage.name,) for stage in stages if stage.each and stage.name not in named}
    return tuple(replace(stage, inputs={**stage.inputs, **extra}) if stage.name in AGGREGATING else stage for stage in stages)


STAGES = completed(STAGES)
BY_NAME: Dict[str, Stage] = {stage.name: stage for stage in STAGES}


def edge_kind(stage: str, role: str) -> str:
    """The declared kind of `stage`'s input `role`: its role_kind, or BUILDS_ON for a role named
    after the precision built on (any name the stage does not declare, where it reads BUILDS_ON)."""
    declared = BY_NAME[stage].inputs if stage in BY_NAME else {}
    kind = role_kind(role)
    return BUILDS_ON if kind not in declared and BUILDS_ON in declared else kind


def measurements(each: str) -> Tuple[Stage, ...]:
    """The stages placed once per engine (each="engine") or per target (each="target")."""
    return tuple(stage for stage in STAGES if stage.each == each)


def gpu_stages() -> Tuple[str, ...]:
    """The stages that run an engine (Stage.gpu), in the table's order."""
    return tuple(stage.name for stage in STAGES if stage.gpu)


def switched_on(stage: Stage, cfg: Dict[str, Any], target: str) -> bool:
    value: Any = cfg
    for key in stage.switch.format(target=target).split(".") if stage.switch else ():
        value = value[key]
    return bool(value)


def aggregated_roles() -> Dict[str, str]:
    """{measuring stage: the report's role for it} (eval <- evaluate_engine, ...): what the report
    and MLflow read is what the table says the report reads."""
    return {sources[0]: role for role, sources in BY_NAME["report"].inputs.items()}


def declared_figures() -> Dict[str, Tuple[str, ...]]:
    """{role: the figures its stage declares} for the measuring stages read under their own name."""
    return {
        role: BY_NAME[sources[0]].figures for role, sources in BY_NAME["report"].inputs.items() if BY_NAME[sources[0]].figures
    }


def check_roles(stage: str, fed: Iterable[str]) -> None:
    """A stage fed without one of its declared, non-optional inputs is a planner bug."""
    missing = sorted(set(BY_NAME[stage].inputs) - set(BY_NAME[stage].optional) - {BUILDS_ON} - set(fed))
    if missing:
        raise AssertionError(f"plan.py places {stage} without its input(s) {missing}, which flow.py declares required.")


def check_edge(stage: str, role: str, source_stage: str) -> None:
    """Refuse an edge the table does not declare: the planner and the table must agree."""
    allowed = BY_NAME[stage].inputs.get(edge_kind(stage, role)) if stage in BY_NAME else None
    if allowed is None or source_stage not in allowed:
        raise AssertionError(
            f"plan.py feeds {stage}'s input '{role}' from {source_stage}, which flow.py does not "
            f"declare (it declares {BY_NAME[stage].inputs if stage in BY_NAME else 'no such stage'}): "
            "add the edge to flow.STAGES or fix the planner."
        )


def describe() -> str:
    """The stage graph as text: each stage, what it does, and what feeds it."""
    lines = []
    for stage in STAGES:
        feeds = ", ".join(f"{role} <- {'|'.join(sources)}" for role, sources in stage.inputs.items()) or "(no inputs)"
        flags = [
            flag
            for flag, on in (
                (f"one per {stage.each}", bool(stage.each)),
                ("timing job", stage.timing),
                ("runs an engine", stage.gpu),
                (f"group {stage.group}", bool(stage.group)),
                ("local", stage.local),
            )
            if on
        ]
        lines.append(f"{stage.name:20} {stage.does}\n{'':20} {feeds}" + (f"  [{', '.join(flags)}]" if flags else ""))
    return "\n".join(lines)
