# precisionflow: one Snakemake DAG over the content-addressed nodes of a (swept) configuration.
#
#   precisionflow run [-m] [overrides...]   plans with Hydra, then runs this file with config plan=<file>
#   snakemake --cores all                   plans the default configuration of conf/ itself
#   precisionflow run --profile slurm ...   the same DAG, each job an sbatch (profiles/slurm)
#
# Each stage has one rule file in workflow/rules/ and one module in src/precisionflow/stages/.

include: "workflow/rules/common.smk"

# What every job needs from the submitting process (set in common.smk): declared so that remote
# executors pass them on (the SLURM plugin exports the environment; others may not).
envvars:
    "PRECISIONFLOW_PLAN",
    "PRECISIONFLOW_RUN",
    "PRECISIONFLOW_PYTHON",

include: "workflow/rules/prepare_dataset.smk"
include: "workflow/rules/train_model.smk"
include: "workflow/rules/prune_model.smk"
include: "workflow/rules/finetune_model.smk"
include: "workflow/rules/export_onnx.smk"
include: "workflow/rules/calibrate.smk"
include: "workflow/rules/quantize_onnx.smk"
include: "workflow/rules/build_engine.smk"
include: "workflow/rules/evaluate_engine.smk"
include: "workflow/rules/compare_speed.smk"
include: "workflow/rules/benchmark_framework.smk"
include: "workflow/rules/track_mlflow.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        final_targets(),
