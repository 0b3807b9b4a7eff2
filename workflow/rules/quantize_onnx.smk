rule quantize_onnx:
    input: upstream("quantize_onnx")
    output: node_output("quantize_onnx")
    log: node_log("quantize_onnx")
    threads: 1
    shell: STAGE_COMMAND
