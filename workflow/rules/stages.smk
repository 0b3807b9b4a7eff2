# One Snakemake rule per stage of the stage graph in src/precisionflow/pipeline/flow.py, with the
# same command for every stage (the runner looks the node up in the plan), the stage's resources
# from the table, and the conda environment of its kind (workflow/envs/, used with --sdm conda).
# The report's own file (report.smk) adds report items.
# Each is made inside a function: a shell body is evaluated again when its job runs, and inside a
# loop it would then see the loop's last stage (every job would run quiet).


def stage_rule(stage, command):
    rule:
        name:
            stage.name
        input:
            upstream(stage.name),
        output:
            node_output(stage.name),
        log:
            node_log(stage.name),
        group:
            stage.group or None
        localrule: stage.local
        resources:
            **job_resources(
                stage.name, mem_mb=stage.mem_mb, runtime=stage.runtime_min, timing=stage.timing
            ),
        params:
            node=node_key(stage.name),
        threads: stage.threads
        conda:
            software_env(stage)
        shell:
            command


for each in FLOW.STAGES:
    if each.name != "report":
        stage_rule(each, STAGE_COMMAND_SHOWN if each.shown else STAGE_COMMAND)
