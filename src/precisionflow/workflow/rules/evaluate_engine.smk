# Accuracy on the test split, and absolute speed (trtexec-style windows). A timing job: it takes
# every host_share unit (common.smk), so nothing else of the workflow runs while it measures.
rule evaluate_engine:
    input: upstream("evaluate_engine")
    output: node_output("evaluate_engine")
    log: node_log("evaluate_engine")
    resources: **job_resources("evaluate_engine", mem_mb=2000, timing=True)
    params: node=node_key("evaluate_engine")
    threads: 1
    shell: STAGE_COMMAND
