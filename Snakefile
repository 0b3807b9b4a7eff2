# precisionflow's workflow where Snakemake looks first. At the top of a checkout:
#   snakemake -n --cores 1                     dry-runs the default experiment
#   snakemake --cores all                      runs it (the plan is made from conf/, as `precisionflow run` makes it)
#   snakemake --rulegraph | dot -Tsvg > g.svg  draws the stages
# The rules live in workflow/ (`precisionflow run` runs workflow/Snakefile directly).
include: "workflow/Snakefile"


# Snakemake keeps the including file's default target, so an included `default_target` is lost:
# this rule names the included `all` as the default here.
rule default:
    default_target: True
    input:
        rules.all.input,
    localrule: True
