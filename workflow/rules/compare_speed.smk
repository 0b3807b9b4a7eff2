# The table's ratios: one engine, its target's fp32 engine and TensorFlow timed in alternating
# rounds in this one job. A timing job: alone on the host.
rule compare_speed:
    input: upstream("compare_speed")
    output: node_output("compare_speed")
    log: node_log("compare_speed")
    threads: 1
    resources:
        host_share=WHOLE_HOST,
        mem_mb=3000,
        gpu=target_resource("compare_speed", "gpu", 0),
        gpu_model=target_resource("compare_speed", "gpu_model", ""),
    shell: STAGE_COMMAND
