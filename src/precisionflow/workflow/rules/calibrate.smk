# PTQ calibration: once per (fp32 graph, calibration settings); shared by every target's int8 engine.
rule calibrate:
    input: upstream("calibrate")
    output: node_output("calibrate")
    log: node_log("calibrate")
    group: "graphs"  # light jobs: one SLURM submission for several (profiles/slurm)
    resources: **job_resources("calibrate", mem_mb=2000)
    params: node=node_key("calibrate")
    threads: 1
    shell: STAGE_COMMAND
