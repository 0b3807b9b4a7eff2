rule train_model:
    input: upstream("train_model")
    output: node_output("train_model")
    log: node_log("train_model")
    threads: 2
    resources:
        mem_mb=4000,
    shell: STAGE_COMMAND_SHOWN
