import subprocess
import sys

from precisionflow import cli


def test_help_and_planning_import_no_heavy_frameworks():
    code = (
        "import sys; from precisionflow import cli; cli.main(['plan', '-m', 'train.epochs=1,2']); "
        "heavy = [m for m in ('tensorflow', 'onnxruntime', 'mlflow', 'tensorrt') if m in sys.modules]; "
        "print('HEAVY', heavy)"
    )
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in output
    assert "2 configuration(s)" in output


def test_bad_override_exits_with_a_message_and_no_plan(tmp_path, capsys):
    assert cli.main(["run", "--dry-run", f"results_dir={tmp_path}", "train.epochs=many"]) == 2
    assert "train.epochs" in capsys.readouterr().err
    assert not (tmp_path / ".plans").exists()


def test_passthrough_arguments_go_to_snakemake():
    own, extra = cli._split_passthrough(["run", "a=1", "--", "--forceall"])
    assert own == ["run", "a=1"] and extra == ["--forceall"]


def test_profile_slurm_without_slurm_fails_before_anything_runs(tmp_path, monkeypatch, capsys):
    """Where Slurm is missing, every job failed after 16 s with "No such file or directory: 'sacct'"."""
    from precisionflow import cli

    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch, squeue or scancel here
    code = cli.main(["run", "--profile", "slurm", f"results_dir={tmp_path / 'results'}"])
    error = capsys.readouterr().err.strip()
    assert code == 2 and len(error.splitlines()) == 1
    assert "--profile slurm: its executor is slurm, but sbatch, squeue, scancel is not on PATH here" in error
    assert not (tmp_path / "results").exists()


def test_check_names_the_overrides_of_the_runs_on_its_folder(tmp_path):
    """`check` without the run's overrides finds no evaluations: it says which overrides the runs on
    that folder were made with, as check commands, newest first, each once."""
    from types import SimpleNamespace

    from precisionflow import cli

    for overrides in (["model=small_cnn"], ["precisions=[fp32,int8]", "train.epochs=2"], ["model=small_cnn"]):
        cli.remember_run(tmp_path, SimpleNamespace(overrides=overrides, multirun=False))
    assert cli.earlier_runs(tmp_path) == [
        "precisionflow check model=small_cnn",
        "precisionflow check 'precisions=[fp32,int8]' train.epochs=2",
    ]
    cli.remember_run(tmp_path / "missing", SimpleNamespace(overrides=[], multirun=False))  # no folder: nothing written
    assert not (tmp_path / "missing").exists()


def test_a_finished_plan_needs_no_snakemake_and_an_unfinished_or_stale_one_does(tmp_path):
    """nothing_to_run decides as Snakemake's mtime rule would (ids cover params and code): every
    node finished and none older than an input -> skip starting Snakemake (a no-op rerun's cost)."""
    import os

    from precisionflow.cli import nothing_to_run
    from precisionflow.nodeio import NODE_FILE

    plan = {
        "results_dir": str(tmp_path),
        "nodes": {"a/1": {"inputs": {}}, "b/2": {"inputs": {"source": "a/1"}}, "c/3": {"inputs": {"x": "a/1", "y": "b/2"}}},
    }
    assert not nothing_to_run(plan)  # nothing finished yet
    for age, key in enumerate(("a/1", "b/2", "c/3")):
        (tmp_path / key).mkdir(parents=True)
        (tmp_path / key / NODE_FILE).write_text("{}")
        os.utime(tmp_path / key / NODE_FILE, (1000 + age, 1000 + age))
    assert nothing_to_run(plan)
    os.utime(tmp_path / "a/1" / NODE_FILE, (2000, 2000))  # an input rewritten after what was built from it
    assert not nothing_to_run(plan)
    os.utime(tmp_path / "a/1" / NODE_FILE, (1000, 1000))
    (tmp_path / "c/3" / NODE_FILE).unlink()  # one node not finished
    assert not nothing_to_run(plan)
