# Pruning between training and fine-tuning: fewer channels, or 2:4 sparsity; retrained by finetune_model.
rule prune_model:
    input: upstream("prune_model")
    output: node_output("prune_model")
    log: node_log("prune_model")
    resources: **job_resources("prune_model", mem_mb=4000, runtime=120)
    params: node=node_key("prune_model")
    threads: 2
    shell: STAGE_COMMAND_SHOWN
