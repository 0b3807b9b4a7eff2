rule track_mlflow:
    input: upstream("track_mlflow")
    output: node_output("track_mlflow")
    log: node_log("track_mlflow")
    localrule: True
    params: node=node_key("track_mlflow")
    threads: 1
    shell: STAGE_COMMAND
