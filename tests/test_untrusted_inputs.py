"""What precisionflow never does with a configuration or a file it is given: unpickle, run it through
a shell, or build a class it names. (Keras files with code inside: tests/test_bad_input.py.)

The static checks read precisionflow's own source, so a new call that breaks a rule fails here."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from precisionflow.config.compose import expand
from precisionflow.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "src" / "precisionflow").rglob("*.py"))
RULE_FILES = sorted((ROOT / "workflow" / "rules").glob("*.smk")) + [ROOT / "workflow" / "Snakefile", ROOT / "Snakefile"]


def calls():
    """(where, call) for every call expression in precisionflow's source."""
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                yield f"{path.relative_to(ROOT)}:{node.lineno}", node


def named(call: ast.Call) -> str:
    return ast.unparse(call.func)


def keyword(call: ast.Call, name: str):
    return next((k.value for k in call.keywords if k.arg == name), None)


def test_every_numpy_load_refuses_pickles():
    loads = [(where, call) for where, call in calls() if named(call) in ("np.load", "numpy.load")]
    assert len(loads) >= 4  # the scan sees the loads there are
    for where, call in loads:
        allow = keyword(call, "allow_pickle")
        assert isinstance(allow, ast.Constant) and allow.value is False, f"{where}: np.load without allow_pickle=False"


def test_nothing_is_unpickled_or_evaluated():
    imported = {
        alias.name.split(".")[0]
        for path in SOURCES
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in getattr(node, "names", [])
    }
    imported |= {
        node.module.split(".")[0]
        for path in SOURCES
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not imported & {"pickle", "dill", "marshal", "shelve", "cloudpickle", "joblib"}
    evaluated = [where for where, call in calls() if named(call) in ("eval", "exec", "yaml.load", "yaml.unsafe_load")]
    assert not evaluated


def test_no_command_is_a_shell_string():
    spawning = {
        "subprocess.run",
        "subprocess.call",
        "subprocess.check_call",
        "subprocess.check_output",
        "subprocess.Popen",
        "os.system",
        "os.popen",
        "os.execl",
    }
    spawned = [(where, call) for where, call in calls() if named(call) in spawning]
    assert spawned  # the scan sees the commands there are
    for where, call in spawned:
        assert named(call) not in ("os.system", "os.popen", "os.execl"), where
        shell = keyword(call, "shell")
        assert shell is None or (isinstance(shell, ast.Constant) and shell.value is False), f"{where}: shell=True"
        if call.args:  # a list of arguments, never one string to split
            assert not isinstance(call.args[0], (ast.Constant, ast.JoinedStr, ast.BinOp)), f"{where}: command built as a string"


def test_the_workflow_quotes_every_value_it_puts_in_a_shell_command():
    """Snakemake's shell commands are strings: each {placeholder} (a node key, a log path under the
    results folder the user names) is quoted with :q."""
    commands = [
        line
        for path in RULE_FILES
        for line in path.read_text().splitlines()
        if re.search(r"\bshell:\s*['\"]|_COMMAND\w* = ", line)
    ]
    assert commands
    placeholders = [found for line in commands for found in re.findall(r"(?<!\{)\{([^{}]+)\}(?!\})", line)]
    assert placeholders and all(p.endswith(":q") for p in placeholders), placeholders


def test_only_precisionflow_s_own_modules_are_imported_by_name():
    dynamic = [(where, call) for where, call in calls() if named(call) in ("importlib.import_module", "__import__")]
    from precisionflow.backends import BACKENDS

    assert all(module.startswith("precisionflow.") for module in BACKENDS.values())
    for where, call in dynamic:
        target = call.args[0]
        if ast.unparse(target) == "BACKENDS[name]":  # looked up in the table checked above
            continue
        if where.startswith("src/precisionflow/precisions/__init__.py") and ast.unparse(target) == "module_name":
            # plug-in precisions: named by the PRECISIONFLOW_PRECISIONS environment variable of the
            # user who runs precisionflow (as PYTHONPATH is), never by a configuration file
            continue
        literal = target.values[0] if isinstance(target, ast.JoinedStr) else target
        assert isinstance(literal, ast.Constant) and str(literal.value).startswith("precisionflow."), where
    instantiated = [where for where, call in calls() if named(call).split(".")[-1] in ("instantiate", "get_class", "get_method")]
    assert not instantiated


@pytest.mark.parametrize(
    "override", ["++_target_=os.system", "+model._target_=builtins.eval", "+x._target_=os.system", "model._target_=os.system"]
)
def test_a_configuration_cannot_name_a_class_to_build(override):
    with pytest.raises(ConfigError, match=r"_target_: precisionflow builds no objects named in the configuration"):
        expand([override])


@pytest.mark.slow
def test_a_results_folder_with_shell_characters_is_a_plain_path(tmp_path):
    results = tmp_path / "my results;touch INJECTED;$(touch INJECTED2)"
    command = [
        sys.executable,
        "-m",
        "precisionflow.cli",
        "run",
        f"results_dir='{results}'",
        "dataset.max_samples=300",
        "calibration.num_samples=64",
        "--",
        "--until",
        "prepare_dataset",
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert [p.name for p in results.glob("prepare_dataset/*/node.json")] == ["node.json"]
    assert not [p for p in tmp_path.rglob("INJECTED*")]
