rule export_onnx:
    input: upstream("export_onnx")
    output: node_output("export_onnx")
    log: node_log("export_onnx")
    group: "graphs"  # light jobs: one SLURM submission for several (profiles/slurm)
    resources: **job_resources("export_onnx", mem_mb=3000)
    params: node=node_key("export_onnx")
    threads: 1
    shell: STAGE_COMMAND
