# One engine per (precision graph, target, engine settings).
rule build_engine:
    input: upstream("build_engine")
    output: node_output("build_engine")
    log: node_log("build_engine")
    resources: **job_resources("build_engine")
    params: node=node_key("build_engine")
    threads: 1
    shell: STAGE_COMMAND
