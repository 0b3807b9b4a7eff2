# PTQ calibration: once per (fp32 graph, calibration settings); shared by every target's int8 engine.
rule calibrate:
    input: upstream("calibrate")
    output: node_output("calibrate")
    log: node_log("calibrate")
    threads: 1
    shell: STAGE_COMMAND
