"""The documentation: the configuration reference is generated from the schema and covers every
key; the MkDocs site builds in strict mode (a broken link or a warning fails)."""

import dataclasses
import re
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def schema_keys(schema, prefix=""):
    hints = typing.get_type_hints(schema)
    for field in dataclasses.fields(schema):
        kind = hints[field.name]
        inner = typing.get_args(kind)[0] if typing.get_origin(kind) is typing.Union else kind
        if dataclasses.is_dataclass(inner):
            yield from schema_keys(inner, f"{prefix}{field.name}.")
        else:
            yield f"{prefix}{field.name}"


def test_the_config_reference_is_current_and_covers_every_schema_key():
    from precisionflow.schema import Config

    check = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "config_reference.py"), "--check"], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr
    page = (ROOT / "docs" / "reference" / "config.md").read_text()
    missing = [key for key in schema_keys(Config) if f"| `{key}` |" not in page]
    assert not missing


def test_the_docs_build_in_strict_mode(tmp_path):
    mkdocs = Path(sys.executable).parent / "mkdocs"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [str(mkdocs), "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "config" / "index.html").is_file()


def test_the_precision_reference_is_current():
    check = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "precision_reference.py"), "--check"], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr


CONSOLE_SAMPLE_STARTS = ("model: ", "Budgets (")


def console_samples(page: Path):
    """The fenced blocks of a page that show the program's console (a table or the verdicts)."""
    blocks = page.read_text().split("```")[1::2]
    for block in blocks:
        body = block.split("\n", 1)[1] if not block.startswith("\n") else block[1:]
        if body.startswith(CONSOLE_SAMPLE_STARTS):
            yield body.strip("\n")


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_console_samples_are_copied_from_a_recorded_run(page):
    """A sample table or verdict list in the docs is the console of a real run, kept under
    benchmarks/results/ and named on the page -- never typed by hand (the review found a sample row
    the program never prints)."""
    text = (ROOT / page).read_text()
    named = sorted(set(re.findall(r"benchmarks/results/(default_run_console[\w.-]*\.txt)", text)))
    assert named, f"{page} shows console samples but names no recorded console under benchmarks/results/"
    recorded = "\n".join((ROOT / "benchmarks" / "results" / name).read_text() for name in named)
    samples = list(console_samples(ROOT / page))
    assert samples, f"{page}: no console sample found (the test would check nothing)"
    for sample in samples:
        assert sample in recorded, f"{page}: this sample is in none of {named}:\n{sample[:400]}"


def test_the_samples_cite_the_model_ids_a_fresh_clone_trains():
    """The README's and getting-started's samples come from `make samples` (tools/samples.py); a
    code or default change that retrains the model leaves them citing a model nobody gets -- the
    README once showed 34d1148ccf48 where a fresh clone trained d8585a25da04."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("samples", ROOT / "tools" / "samples.py")
    samples = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(samples)
    assert all(samples.cited(ROOT / name) for name in samples.FILES), "a sample lost its markers or its model line"
    assert samples.drifted() == [], "the samples cite models a fresh clone does not train: run `make samples`"


def test_the_reference_shows_the_defaults_a_run_uses():
    """The page's default column is the default run's configuration (conf/ composed), and every key
    conf/config.yaml sets itself has that value in the schema too: one value for a default, wherever read."""
    import dataclasses
    import re

    import yaml

    from precisionflow.config.compose import expand
    from precisionflow.schema import Config

    composed = expand([])[0]
    page = (ROOT / "docs" / "reference" / "config.md").read_text()
    shown = dict(re.findall(r"^\| `([^`]+)` \| [^|]*(?:\\\|[^|]*)* \| `(.*?)` \|", page, re.MULTILINE))
    for key, value in (("precisions", composed["precisions"]), ("evaluate.budget.max_top1_drop", 2.0)):
        assert shown[key] == repr(value), key
    assert shown["evaluate.budget.min_agreement"] == repr(composed["evaluate"]["budget"]["min_agreement"])
    top = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())
    defaults = {field.name: field for field in dataclasses.fields(Config)}
    for key, value in top.items():
        if key in defaults and not isinstance(value, dict) and key != "defaults":
            field = defaults[key]
            schema_default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
            assert schema_default == value, f"{key}: schema.py says {schema_default}, conf/config.yaml {value}"


def test_the_concepts_page_states_the_code_s_facts():
    """Facts the concepts page states about the code, held to the code: the timing stages (which hold
    the machine alone), an engine run's name as track_mlflow makes it, where device facts live."""
    from precisionflow.pipeline import flow
    from precisionflow.stages.track_mlflow import run_name

    page = " ".join((ROOT / "docs" / "concepts.md").read_text().split())
    listed = re.search(r"the timing rules \(([^)]*)\) ask for all of them", page).group(1)
    assert set(re.findall(r"`(\w+)`", listed)) == {stage.name for stage in flow.STAGES if stage.timing}
    lineage = {
        "train_model": {"id": "resnet_mini-fp32-e12-2598df0a1b2c"},
        "quantize_onnx": {"summary": {"calibration_source": "ptq", "calibration_method": "entropy"}},
        "evaluate_engine": {"params": {}},
    }
    example = run_name(lineage, {"precision": "int8", "target": "local"}, "n64")
    assert f"(e.g. `{example}`)" in page, example
    for doc in ("README.md", "docs/layout.md"):
        text = (ROOT / doc).read_text()
        assert "device facts: devices.py" in text and (ROOT / "src" / "precisionflow" / "devices.py").is_file(), doc
        assert "../shared" not in text, f"{doc} links outside the repository"
