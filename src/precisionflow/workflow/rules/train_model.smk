rule train_model:
    input: upstream("train_model")
    output: node_output("train_model")
    log: node_log("train_model")
    resources: **job_resources("train_model", mem_mb=4000, runtime=240)
    params: node=node_key("train_model")
    threads: 2
    shell: STAGE_COMMAND_SHOWN
