# The TensorFlow baseline, timed like the engines; shares evaluate_engine's timing slot so the two
# never time at once.
rule benchmark_framework:
    input: upstream("benchmark_framework")
    output: node_output("benchmark_framework")
    log: node_log("benchmark_framework")
    threads: 1
    resources:
        timing_slot=1,
        mem_mb=3000,
    shell: STAGE_COMMAND
