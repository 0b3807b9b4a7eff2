"""The card's layout from a fresh clone: `snakemake -n --cores 1` at the repository's root dry-runs
the default experiment (Snakemake finds the top-level Snakefile, which includes workflow/Snakefile,
and the plan is made from conf/ at the top), and the stages are drawn by --rulegraph."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"


def test_the_top_level_holds_what_the_card_names():
    for name in ("workflow", "conf", "src", "results", "tests", "Snakefile", "pyproject.toml"):
        assert (ROOT / name).exists(), name
    assert (ROOT / "conf" / "config.yaml").is_file() and (ROOT / "workflow" / "rules" / "common.smk").is_file()


@pytest.mark.slow
def test_snakemake_dry_runs_the_default_experiment_from_a_fresh_clone(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120)
    env = {**os.environ, "PYTHONPATH": str(clone / "src")}  # the clone's code, not the installed checkout's
    env.pop("PRECISIONFLOW_CONFIG_DIR", None)
    dry = subprocess.run([str(SNAKEMAKE), "-n", "--cores", "1"], cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    log = dry.stdout + dry.stderr
    assert "train_model" in log and "build_engine" in log and "report" in log
    assert f"Snakefile: {clone / 'Snakefile'}" in log
    assert (clone / "results" / ".plans").is_dir()  # the plan went to the clone's own results/
    graph = subprocess.run([str(SNAKEMAKE), "--rulegraph"], cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    assert graph.returncode == 0 and "digraph" in graph.stdout and "serve_engine" in graph.stdout
