rule export_onnx:
    input: upstream("export_onnx")
    output: node_output("export_onnx")
    log: node_log("export_onnx")
    threads: 1
    resources:
        mem_mb=3000,
    shell: STAGE_COMMAND
