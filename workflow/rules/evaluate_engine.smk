# Accuracy on the test split, and absolute speed (trtexec-style windows). A timing job: it takes
# every host_share unit (common.smk), so nothing else of the workflow runs while it measures.
rule evaluate_engine:
    input: upstream("evaluate_engine")
    output: node_output("evaluate_engine")
    log: node_log("evaluate_engine")
    threads: 1
    resources:
        host_share=WHOLE_HOST,
        gpu=target_resource("evaluate_engine", "gpu", 0),
        gpu_model=target_resource("evaluate_engine", "gpu_model", ""),
    shell: STAGE_COMMAND
