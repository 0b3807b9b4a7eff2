"""Each kind of stage names the software it needs (workflow/envs/*.yaml, one conda environment per
kind): the files are current with requirements.lock, hold every package their stages pin in node ids,
the GPU one is what a GPU node is checked for, and Snakemake's linter finds nothing at the root."""

import subprocess
import sys
from pathlib import Path

import yaml

from precisionflow.pipeline import flow, software
from precisionflow.pipeline.plan import stage_module

ROOT = Path(__file__).resolve().parents[1]


def env_pins(env: str) -> dict:
    spec = yaml.safe_load((ROOT / "workflow" / "envs" / f"{env}.yaml").read_text())
    pip = next(item["pip"] for item in spec["dependencies"] if isinstance(item, dict))
    return dict(line.split("==") for line in pip)


def test_the_committed_environment_files_are_the_lock_s():
    done = subprocess.run([sys.executable, "tools/stage_envs.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    locked = software.read_lock(ROOT / "requirements.lock")
    for env in software.ENV_FILES:
        for name, version in env_pins(env).items():
            assert locked[software.SAME_RELEASE.get(name, name).lower()] == version, (env, name)


def test_every_stage_s_pinned_packages_are_in_each_environment_it_runs_in():
    kinds = software.stage_kinds()
    assert sorted(stage for stages in kinds.values() for stage in stages if stage not in kinds["engines-gpu"]) == sorted(
        stage.name for stage in flow.STAGES if stage.software != "engines"
    ), "every stage runs in one environment (an engine stage in the CPU's and the GPU's)"
    for env, stages in kinds.items():
        held = {name.lower() for name in env_pins(env)}
        for stage in stages:
            wanted = {name.lower() for name in getattr(stage_module(stage), "PACKAGES", ())}
            assert wanted <= held, f"{stage} pins {sorted(wanted - held)}, which workflow/envs/{env}.yaml lacks"


def test_the_gpu_environment_is_what_a_gpu_node_is_checked_for():
    from precisionflow.identity import IMPORT_NAMES
    from precisionflow.pipeline.remote import RUNNER_MODULES, STAGE_MODULES, TASK_MODULES

    modules = {module for group in (RUNNER_MODULES, *TASK_MODULES.values(), *STAGE_MODULES.values()) for module in group}
    held = {IMPORT_NAMES.get(name, name) for name in env_pins("engines-gpu")}
    assert modules <= held and "onnxruntime-gpu" in env_pins("engines-gpu") and "onnxruntime" not in env_pins("engines-gpu")


def test_snakemake_s_linter_finds_nothing_at_the_root(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint", "--config", f"plan={_a_plan(tmp_path)}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert "Congratulations, your workflow is in a good condition" in done.stdout + done.stderr, done.stdout[-3000:]


def _a_plan(tmp_path) -> Path:
    from precisionflow.pipeline.plan import plan_from_overrides

    return plan_from_overrides([f"results_dir={tmp_path / 'results'}"])
