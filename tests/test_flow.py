"""The stage graph (flow.py) is the one the planner builds and the Snakefile runs."""

import pytest

from precisionflow.pipeline import flow
from precisionflow.config.compose import expand
from precisionflow.pipeline.plan import build_plan

PACKAGE = flow.__file__.rsplit("/", 2)[0]  # src/precisionflow (flow.py lives in pipeline/)


def test_every_stage_module_has_one_entry_and_every_entry_a_module():
    from pathlib import Path

    modules = {path.stem for path in (Path(PACKAGE) / "stages").glob("*.py") if path.stem != "__init__"}
    assert modules == set(flow.BY_NAME) and len(flow.STAGES) == len(flow.BY_NAME)


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["prune=channel", "finetune.mode=fp32"],
        ["experiment=detection"],
        ["precisions=[fp32,int8_mixed,int8_qat]", "targets=[local,cpu]"],
    ],
)
def test_every_edge_the_planner_adds_is_declared(overrides, tmp_path):
    plan = build_plan(expand(overrides), str(tmp_path))  # the planner refuses undeclared edges itself
    for spec in plan["nodes"].values():
        for role, source in spec["inputs"].items():
            assert source.split("/")[0] in flow.BY_NAME[spec["stage"]].inputs[flow.edge_kind(spec["stage"], role)]


def test_an_undeclared_edge_is_refused_naming_both_ends():
    with pytest.raises(AssertionError, match="feeds build_engine's input 'graph' from export_onnx"):
        flow.check_edge("build_engine", "graph", "export_onnx")


def test_the_snakefile_makes_its_rules_from_the_table():

    from precisionflow.assets import snakefile

    workflow = snakefile().parent
    assert sorted(path.name for path in (workflow / "rules").glob("*.smk")) == ["common.smk", "report.smk", "stages.smk"]
    assert "for each in FLOW.STAGES:" in (workflow / "rules" / "stages.smk").read_text()
    assert 'include: "rules/stages.smk"' in (workflow / "Snakefile").read_text()


def test_the_flow_command_prints_every_stage(capsys):
    from precisionflow.cli import main

    assert main(["flow"]) == 0
    printed = capsys.readouterr().out
    assert all(stage.name in printed for stage in flow.STAGES) and "engine <- build_engine" in printed


def test_a_node_that_times_holds_a_whole_slurm_node_like_the_timing_stages(tmp_path):
    """int8_mixed's speed trials run inside its quantize job (CPU placement): locally that job holds
    the host (host_share), and on SLURM a whole node (--exclusive); other quantize jobs hold neither.
    Read from Snakemake's own dry run of the plan."""
    import re
    import subprocess
    import sys

    results = tmp_path / "results"
    command = [
        sys.executable,
        "-m",
        "precisionflow.cli",
        "run",
        "--dry-run",
        "precisions=[fp32,int8,int8_mixed]",
        f"results_dir={results}",
    ]
    output = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=300).stdout
    jobs = re.findall(r"output: \S+/quantize_onnx/(\S+?)/node\.json.*?resources: ([^\n]*)", output, re.DOTALL)
    shares = {node.rsplit("-", 1)[0]: resources for node, resources in jobs}
    assert (
        "slurm_extra=--exclusive" in shares["int8_mixed-ortcpu-drop2.0"]
        and "host_share=1000" in shares["int8_mixed-ortcpu-drop2.0"]
    )
    assert "slurm_extra=--exclusive" not in shares["int8-ortcpu"] and "host_share=1," in shares["int8-ortcpu"]
