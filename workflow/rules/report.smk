# The sweep's report: summary table, verdicts, plots and galleries in one node folder. Its files are
# also Snakemake report items: `precisionflow report` (or snakemake --report) makes a
# self-contained page of them next to our report.html.
rule report:
    input:
        upstream("report"),
    output:
        node_output("report"),
        report(f"{RESULTS}/report/{{node}}/summary.csv", caption="../report/summary.rst", category="Summary"),
        report(f"{RESULTS}/report/{{node}}/report.html", caption="../report/page.rst", category="Summary"),
        report(
            directory(f"{RESULTS}/report/{{node}}/figures"),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
        ),
    log:
        node_log("report"),
    conda:
        "../envs/reporting.yaml"
    threads: 1
    resources:
        **job_resources("report", mem_mb=2000),
    params:
        node=node_key("report"),
    shell:
        STAGE_COMMAND
