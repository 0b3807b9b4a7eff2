# One engine per (precision graph, target, engine settings).
rule build_engine:
    input: upstream("build_engine")
    output: node_output("build_engine")
    log: node_log("build_engine")
    threads: 1
    resources:
        gpu=target_resource("build_engine", "gpu", 0),
        gpu_model=target_resource("build_engine", "gpu_model", ""),
    shell: STAGE_COMMAND
