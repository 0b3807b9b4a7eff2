# Fine-tuning after training: fp32, mixed precision, or quantization-aware (QAT) -> learned int8 ranges.
rule finetune_model:
    input: upstream("finetune_model")
    output: node_output("finetune_model")
    log: node_log("finetune_model")
    resources: **job_resources("finetune_model", mem_mb=4000, runtime=240)
    params: node=node_key("finetune_model")
    threads: 2
    shell: STAGE_COMMAND_SHOWN
