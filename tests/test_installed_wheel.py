"""A team installs the built wheel (not editable) and runs it from its own project folder.

The wheel is built from this checkout and installed with pip into a fresh virtual environment.
Its dependencies (TensorFlow, Snakemake, ... : gigabytes) are not downloaded again: a .pth file
lends the fresh environment the project environment's site-packages, after its own, and pip
installs the wheel itself with --no-deps. The editable install of the checkout is not visible
there (its finder .pth is only processed in its own site-packages), which the test checks: the
run must use the installed copy, with its packaged conf/, workflow and profiles.
"""

import csv
import re
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest


pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the fresh environment's python, its precisionflow command) with the wheel installed."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"  # built from a copy: a build leaves build/ and *.egg-info where it runs
    for folder in ("src", "conf", "workflow"):  # conf/ and workflow/ are mapped into the package (setup.py)
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "setup.py"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(work / "dist"), str(source)],
        check=True,
        capture_output=True,
        text=True,
    )
    wheel = next((work / "dist").glob("precisionflow-*.whl"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    (site / "borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        text=True,
    )
    entry = venv / "bin" / "precisionflow"
    entry.write_text(f"#!{python}\nimport sys\nfrom precisionflow.cli import main\nsys.exit(main())\n")
    entry.chmod(0o755)
    return python, entry, site


def run(command, cwd: Path, timeout: int = 900):
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PRECISIONFLOW_CONFIG_DIR")}
    return subprocess.run([str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def test_the_installed_package_is_the_one_that_runs_and_carries_its_files(installed, tmp_path):
    python, _, site = installed
    done = run(
        [
            python,
            "-c",
            "import precisionflow, precisionflow.assets as a; print(precisionflow.__file__); "
            "print(a.builtin_conf_dir()); print(a.snakefile()); print(a.profiles_dir())",
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert all(line.startswith(str(site)) for line in lines), lines  # not the checkout's src/
    assert (Path(lines[1]) / "config.yaml").is_file() and Path(lines[2]).is_file()
    assert (Path(lines[3]) / "slurm" / "config.yaml").is_file()
    assert (Path(lines[2]).parent / "rules" / "report.smk").is_file()


def test_the_readme_starter_commands_pass_as_written(installed, tmp_path):
    """From an empty folder, the README's two starter commands exactly as a user types them:
    `init` writes a starter folder whose preset runs end to end and passes its own budgets (exit 0),
    with results/ in that folder."""
    _, precisionflow, _ = installed
    project = tmp_path / "team-project"
    project.mkdir()
    readme = (ROOT / "README.md").read_text()
    commands = ["precisionflow init pf-config", "precisionflow run --config-dir pf-config experiment=my_first"]
    assert all(command in readme for command in commands)  # the test runs what the README says
    for command in commands:
        done = run([precisionflow, *command.split()[1:]], project, timeout=1500)
        assert done.returncode == 0, command + "\n" + done.stdout[-3000:] + done.stderr[-3000:]
    summary = next((project / "results" / "report").glob("*/summary.csv"))
    with open(summary) as handle:
        assert sorted(row["precision"] for row in csv.DictReader(handle)) == ["fp16", "fp32", "int8", "int8", "tensorflow"]
    assert re.search(r"(\d+) of \1 engines within budget", done.stdout), done.stdout[-2000:]
    (project / "pf-config" / "model" / "tiny.yaml").write_text("name: small_cnn\nfilters: [8, 16]\ndense_units: 16\n")
    config = run([precisionflow, "config", "--config-dir", "pf-config", "experiment=my_first", "model=tiny"], project)
    assert '"test_fraction": 0.25' in config.stdout and '"dense_units": 16' in config.stdout
