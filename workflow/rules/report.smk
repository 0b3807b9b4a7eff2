rule report:
    input: upstream("report")
    output: node_output("report")
    log: node_log("report")
    threads: 1
    shell: STAGE_COMMAND
