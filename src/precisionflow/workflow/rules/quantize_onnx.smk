rule quantize_onnx:
    input: upstream("quantize_onnx")
    output: node_output("quantize_onnx")
    log: node_log("quantize_onnx")
    group: "graphs"  # light jobs: one SLURM submission for several (profiles/slurm)
    resources: **job_resources("quantize_onnx", mem_mb=2000)
    params: node=node_key("quantize_onnx")
    threads: 1
    shell: STAGE_COMMAND
