rule prepare_dataset:
    input: upstream("prepare_dataset")
    output: node_output("prepare_dataset")
    log: node_log("prepare_dataset")
    resources: **job_resources("prepare_dataset")
    params: node=node_key("prepare_dataset")
    threads: 1
    shell: STAGE_COMMAND
