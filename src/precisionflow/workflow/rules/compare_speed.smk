# The table's ratios: one engine, its target's fp32 engine and TensorFlow timed in alternating
# rounds in this one job. A timing job: alone on the host.
rule compare_speed:
    input: upstream("compare_speed")
    output: node_output("compare_speed")
    log: node_log("compare_speed")
    resources: **job_resources("compare_speed", mem_mb=3000, timing=True)
    params: node=node_key("compare_speed")
    threads: 1
    shell: STAGE_COMMAND
