"""Which software each kind of stage needs: the conda environments its Snakemake rules name.

One environment per kind of stage (flow.Stage.software), written to workflow/envs/ by
tools/stage_envs.py from requirements.lock's pins, so `snakemake --sdm conda` on a cluster gives each
job what it imports and nothing planned elsewhere differs in version:

  training      prepare_dataset, train/prune/finetune_model, export_onnx, benchmark_framework
  engines-cpu   calibrate, quantize_onnx, and the engine stages of a target on a CPU
  engines-gpu   the engine stages of a target on a GPU: exactly what `remote` needs on a GPU node
                (numpy, onnx, the GPU build of ONNX Runtime, LoadGen, pycocotools for detection, and
                the runner's filelock and psutil)
  reporting     report, track_mlflow

A stage module's PACKAGES (the versions in its node ids) name what it calls; EXTRA adds what a kind
imports beyond that (the engine runtime, whose version the ids carry as params["runtime"]).
"""

from pathlib import Path
from typing import Dict, List

ENV_FILES = ("training", "engines-cpu", "engines-gpu", "reporting")
PYTHON = "3.11"

# What each kind imports besides its stages' PACKAGES, and why.
EXTRA = {
    "training": ("onnxruntime",),  # export_onnx checks the graph against the Keras model on the CPU
    "engines-cpu": ("onnxruntime", "mlcommons-loadgen", "pycocotools"),  # the runtime; LoadGen; detection scores
    "reporting": ("Jinja2",),  # report.html's template
}
# The GPU environment is the GPU node's: what pipeline/remote.py checks for there (its TASK_MODULES
# and STAGE_MODULES) and the GPU build of the runtime in place of the CPU one.
GPU_RUNTIME = "onnxruntime-gpu"
SAME_RELEASE = {"onnxruntime-gpu": "onnxruntime"}  # built from the same release as the locked CPU build


def env_name(software: str, on_gpu: bool) -> str:
    """The environment file (without .yaml) a job of this kind of stage runs in: the one rule the
    Snakefile's conda directives (workflow/rules/common.smk) and the files written here share."""
    if software == "engines":
        return "engines-gpu" if on_gpu else "engines-cpu"
    return "engines-cpu" if software == "graphs" else software


def stage_kinds() -> Dict[str, List[str]]:
    """{environment file: the stages whose jobs run in it} (engine stages run in both engine files)."""
    from precisionflow.pipeline.flow import STAGES

    kinds: Dict[str, List[str]] = {name: [] for name in ENV_FILES}
    for stage in STAGES:
        for env in sorted({env_name(stage.software, False), env_name(stage.software, True)}):
            kinds[env].append(stage.name)
    return kinds


def gpu_node_packages() -> List[str]:
    """The distributions a GPU node needs for every task and stage (pipeline/remote.py's lists)."""
    from precisionflow.identity import IMPORT_NAMES
    from precisionflow.pipeline.remote import RUNNER_MODULES, STAGE_MODULES, TASK_MODULES

    distribution = {module: dist for dist, module in IMPORT_NAMES.items()}
    modules = {module for group in (RUNNER_MODULES, *TASK_MODULES.values(), *STAGE_MODULES.values()) for module in group}
    return sorted({distribution.get(module, module) for module in modules} | {GPU_RUNTIME})


def packages(env: str) -> List[str]:
    """The distributions environment `env` holds, sorted."""
    if env == "engines-gpu":
        return gpu_node_packages()
    from precisionflow.pipeline.plan import stage_module

    from precisionflow.pipeline.remote import RUNNER_MODULES

    names = {name for stage in stage_kinds()[env] for name in getattr(stage_module(stage), "PACKAGES", ())}
    return sorted(names | set(EXTRA.get(env, ())) | set(RUNNER_MODULES), key=str.lower)  # every job runs the runner


def read_lock(lock: Path) -> Dict[str, str]:
    """{distribution name, lower case: version} from requirements.lock's `name==version` lines."""
    pins = {}
    for line in Path(lock).read_text().splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            name, version = line.split(";")[0].strip().split("==", 1)
            pins[name.lower().replace("_", "-")] = version.strip()
    return pins


def environment_text(env: str, pins: Dict[str, str]) -> str:
    """The conda environment file for `env`: Python and its packages at the lock's versions."""
    lines = [
        f"# precisionflow's '{env}' stages: {', '.join(stage_kinds()[env])}.",
        "# Written by tools/stage_envs.py from requirements.lock (do not edit; CI checks it).",
        f"name: precisionflow-{env}",
        "channels:",
        "  - conda-forge",
        "dependencies:",
        f"  - python={PYTHON}",
        "  - pip",
        "  - pip:",
    ]
    for name in packages(env):
        locked = SAME_RELEASE.get(name, name).lower().replace("_", "-")
        if locked not in pins:
            raise KeyError(f"{name} is not pinned in requirements.lock: add it to pyproject.toml and run `make lock`.")
        lines.append(f"      - {name}=={pins[locked]}")
    return "\n".join(lines) + "\n"
