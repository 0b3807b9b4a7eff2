# timing_slot: timed windows must not share the machine with other jobs' timing, so at most one
# evaluation runs at a time when the run is given --resources timing_slot=1 (profiles/default does).
rule evaluate_engine:
    input: upstream("evaluate_engine")
    output: node_output("evaluate_engine")
    log: node_log("evaluate_engine")
    threads: 1
    resources:
        timing_slot=1,
        gpu=target_resource("evaluate_engine", "gpu", 0),
        gpu_model=target_resource("evaluate_engine", "gpu_model", ""),
    shell: STAGE_COMMAND
