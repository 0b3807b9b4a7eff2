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
            assert source.split("/")[0] in flow.BY_NAME[spec["stage"]].reads[flow.edge_kind(spec["stage"], role)]


def test_an_undeclared_edge_is_refused_naming_both_ends():
    with pytest.raises(AssertionError, match="feeds build_engine's input 'graph' from export_onnx"):
        flow.check_edge("build_engine", "graph", "export_onnx")


def test_the_snakefile_makes_its_rules_from_the_table():
    from pathlib import Path

    workflow = Path(PACKAGE) / "workflow"
    assert sorted(path.name for path in (workflow / "rules").glob("*.smk")) == ["common.smk", "report.smk"]
    assert "for each in FLOW.STAGES:" in (workflow / "Snakefile").read_text()


def test_the_flow_command_prints_every_stage(capsys):
    from precisionflow.cli import main

    assert main(["flow"]) == 0
    printed = capsys.readouterr().out
    assert all(stage.name in printed for stage in flow.STAGES) and "engine <- build_engine" in printed
