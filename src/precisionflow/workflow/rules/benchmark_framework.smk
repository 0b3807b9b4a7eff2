# The TensorFlow baseline's absolute speed, timed like the engines. A timing job: alone on the host.
rule benchmark_framework:
    input: upstream("benchmark_framework")
    output: node_output("benchmark_framework")
    log: node_log("benchmark_framework")
    resources: **job_resources("benchmark_framework", mem_mb=3000, timing=True)
    params: node=node_key("benchmark_framework")
    threads: 1
    shell: STAGE_COMMAND
