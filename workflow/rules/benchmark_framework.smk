# The TensorFlow baseline's absolute speed, timed like the engines. A timing job: alone on the host.
rule benchmark_framework:
    input: upstream("benchmark_framework")
    output: node_output("benchmark_framework")
    log: node_log("benchmark_framework")
    threads: 1
    resources:
        host_share=WHOLE_HOST,
        mem_mb=3000,
    shell: STAGE_COMMAND
