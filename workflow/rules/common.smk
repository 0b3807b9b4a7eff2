# Shared wiring: load (or make) the plan, and map a rule's {node} wildcard to its input files.
import os
import sys
import time
from pathlib import Path

from precisionflow.pipeline.plan import plan_from_overrides
from precisionflow.nodeio import read_json
from precisionflow.pipeline import flow as FLOW
from precisionflow.devices import runs_on_gpu
from precisionflow.reporting import tracking
from precisionflow.pipeline import software

PLAN_FILE = config.get("plan") or str(plan_from_overrides())
PLAN = read_json(PLAN_FILE)
RESULTS = PLAN["results_dir"]
PYTHON = sys.executable

# With `--sdm conda` each job runs in its kind's conda environment (software_env below): the command
# calls that environment's python, which finds precisionflow's own code through a folder holding
# only a link to it (the environments hold the third-party packages at the lock's versions).
from snakemake.settings.types import DeploymentMethod

if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
    import precisionflow

    CODE_LINK = Path(RESULTS) / ".code" / "precisionflow"
    CODE_LINK.parent.mkdir(parents=True, exist_ok=True)
    if not CODE_LINK.exists():
        CODE_LINK.symlink_to(Path(precisionflow.__file__).parent, target_is_directory=True)
    os.environ.update(PYTHONPATH=os.pathsep.join(filter(None, [str(CODE_LINK.parent), os.environ.get("PYTHONPATH")])))
    PYTHON = "python"


def software_env(stage):
    """The conda environment file of a stage's kind (flow.Stage.software; pipeline/software.py names
    the file): an engine stage's depends on whether its node's target runs on a GPU."""
    if stage.software != "engines":
        return "../envs/{}.yaml".format(software.env_name(stage.software, on_gpu=False))

    def env(wildcards):
        target_def = PLAN["nodes"][f"{stage.name}/{wildcards.node}"]["params"].get("target_def")
        on_gpu = bool(target_def) and runs_on_gpu(target_def)
        return "../envs/{}.yaml".format(software.env_name(stage.software, on_gpu))

    return env


wildcard_constraints:
    node="[^/]+",


def node_output(stage):
    return f"{RESULTS}/{stage}/{{node}}/node.json"


def node_log(stage):
    return f"{RESULTS}/logs/{stage}/{{node}}.log"


def upstream(stage):
    """Input function: the node.json of every upstream node of {node}."""

    def inputs(wildcards):
        spec = PLAN["nodes"][f"{stage}/{wildcards.node}"]
        return [f"{RESULTS}/{key}/node.json" for key in spec["inputs"].values()]

    return inputs


def node_resource(stage, key, default):
    """A Snakemake resource from the node's plan entry: its target's scheduler hints (engine and
    timing stages) or `stage_resources.<stage>` (e.g. the training GPU class). Not part of its id."""

    def value(wildcards):
        return PLAN["nodes"][f"{stage}/{wildcards.node}"]["resources"].get(key, default)

    return value


def job_resources(stage, mem_mb=1000, runtime=60, timing=False):
    """What a job asks the scheduler for. On SLURM: gpu -> --gpus, gpu_model -> --gpus=<model>:<n>,
    slurm_partition -> -p (empty: the cluster's default), mem_mb -> --mem, runtime (minutes) -> -t.
    Timing jobs hold the whole host locally (host_share) and a whole node on SLURM (--exclusive),
    so what they measure never shares the machine with other work of the workflow."""
    resources = {
        key: node_resource(stage, key, default)
        for key, default in (("gpu", 0), ("gpu_model", ""), ("slurm_partition", ""), ("mem_mb", mem_mb), ("runtime", runtime))
    }
    if timing:
        resources.update(host_share=timing_share(stage), slurm_extra="--exclusive")
    else:  # a node of another stage that times (int8_mixed's speed trials) says so in its plan entry
        resources.update(host_share=node_timing_share(stage), slurm_extra=node_slurm_extra(stage))
    return resources


def node_timing_share(stage):
    """The whole host for a node whose plan resources say it times (`timing`), else one unit."""

    def value(wildcards):
        timed = PLAN["nodes"][f"{stage}/{wildcards.node}"]["resources"].get("timing")
        return timing_share(stage)(wildcards) if timed else 1

    return value


def node_slurm_extra(stage):
    """On SLURM, a whole node (--exclusive) for a node whose plan resources say it times, as for the
    timing stages: int8_mixed's speed trials once ran beside another job."""

    def value(wildcards):
        return "--exclusive" if PLAN["nodes"][f"{stage}/{wildcards.node}"]["resources"].get("timing") else ""

    return value


# A timing job on a CPU target holds the whole host. One on a GPU holds its GPU (a slot, taken by
# the runner: pipeline/gpuslots.py) and the CPU cores that feed it (GPU_TIMING_CORES of the host's
# share), so the node's other GPUs keep working; what ran beside it is recorded in its node.
GPU_TIMING_CORES = 2


def timing_share(stage):
    def value(wildcards):
        spec = PLAN["nodes"][f"{stage}/{wildcards.node}"]
        target_def = spec["params"].get("target_def")
        on_gpu = bool(target_def) and runs_on_gpu(target_def)  # the one rule (devices.py)
        cores = os.cpu_count() or 1
        return max(1, WHOLE_HOST * GPU_TIMING_CORES // cores) if on_gpu and cores > GPU_TIMING_CORES else WHOLE_HOST

    return value


# Timing jobs have the machine to themselves. Every job holds `host_share` units (1 by default,
# see profiles/default); a timing job asks for all of them, so it starts only when no other job
# runs, and no job starts while it runs. Snakemake counts only its own jobs: other work on the
# machine is what the side-by-side ratios (compare_speed) are there for.
def _host_share_total():
    total = workflow.global_resources.get("host_share")
    return getattr(total, "value", total) or 1


WHOLE_HOST = _host_share_total()


def node_key(stage):
    """The params value naming the job's node (STAGE/ID) for the runner."""
    return lambda wildcards: f"{stage}/{wildcards.node}"


def final_targets():
    return [f"{RESULTS}/{key}/node.json" for key in PLAN["final"]]


# The same command for every stage: the runner looks the node up in the plan. The plan file and
# interpreter travel in the environment, not in the command text: Snakemake reruns a job whose
# command text changed, and each sweep has its own plan file.
os.environ["PRECISIONFLOW_PLAN"] = PLAN_FILE
# One id per workflow run, recorded with every timing: the report says when a table mixes runs.
os.environ.setdefault("PRECISIONFLOW_RUN", time.strftime("%Y-%m-%dT%H:%M:%S"))
os.environ["PRECISIONFLOW_PYTHON"] = PYTHON
STAGE_COMMAND = (
    '"$PRECISIONFLOW_PYTHON" -m precisionflow.pipeline.runner --plan "$PRECISIONFLOW_PLAN" --node {params.node:q} > {log:q} 2>&1'
)
# Training stages also show their per-epoch progress on the console (Snakemake sets pipefail).
STAGE_COMMAND_SHOWN = '"$PRECISIONFLOW_PYTHON" -u -m precisionflow.pipeline.runner --plan "$PRECISIONFLOW_PLAN" --node {params.node:q} 2>&1 | tee {log:q}'


onstart:
    # Create MLflow stores once, before jobs fan out (a fresh SQLite store races under concurrent writers).
    for key in PLAN["final"]:
        spec = PLAN["nodes"][key]
        if spec["stage"] == "track_mlflow":
            tracking.init_store(tracking.resolve_uri(spec["params"]["uri"], RESULTS), spec["params"]["experiment"], RESULTS)
