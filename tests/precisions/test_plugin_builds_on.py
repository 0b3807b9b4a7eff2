"""A precision plugs in whole from one file (issue 53): it builds on any precision, declares typed
settings of its own, and is refused at registration -- exit 2, one line, no traceback -- when the
planner could not place it."""

import os
import subprocess
import sys

import pytest

from tests.conftest import FAST_TIMING

PLUGIN = """
import shutil
from dataclasses import dataclass

from precisionflow.precisions.spec import GraphRecipe, Judging, PrecisionSpec


@dataclass
class Fp16VariantSettings:
    alpha: float = 1.0  # how far the variant leans


def copy_fp16_graph(job):
    shutil.copy(job.inputs["fp16"] / "model.onnx", job.target)  # the fp16 graph it builds on
    assert isinstance(job.settings, Fp16VariantSettings)  # its section, typed
    return {"alpha": job.settings.alpha}


SPEC = PrecisionSpec(
    name="fp16_variant",
    summary="fp16's graph, with a setting of its own",
    graph=GraphRecipe(make=copy_fp16_graph, builds_on="fp16", settings=Fp16VariantSettings),
    judging=Judging(runs_in="fp16"),
)
"""
BAD = """
from precisionflow.precisions.fp32 import copy_graph
from precisionflow.precisions.spec import GraphRecipe, PrecisionSpec

SPEC = PrecisionSpec(name="lost", summary="builds on nothing real", graph=GraphRecipe(make=copy_graph, builds_on="fp61"))
"""


def cli(tmp_path, module: str, *args, timeout=600):
    env = {**os.environ, "PRECISIONFLOW_PRECISIONS": module, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.getcwd()}"}
    return subprocess.run(
        [sys.executable, "-m", "precisionflow.cli", *args], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=timeout
    )


def test_a_plug_in_with_a_bad_builds_on_is_refused_with_one_line(tmp_path):
    (tmp_path / "lost_precision.py").write_text(BAD)
    done = cli(tmp_path, "lost_precision", "plan", "precisions=[fp32,lost]")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "builds_on='fp61' is no precision" in done.stderr and "Did you mean 'fp16'?" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_plug_in_setting_is_typed_and_checked(tmp_path):
    (tmp_path / "fp16_variant_precision.py").write_text(PLUGIN)
    done = cli(tmp_path, "fp16_variant_precision", "plan", "precisions=[fp32,fp16_variant]", "fp16_variant.alpah=3")
    assert done.returncode == 2 and "Did you mean" in done.stderr and "alpha" in done.stderr, done.stderr[-2000:]
    done = cli(tmp_path, "fp16_variant_precision", "plan", "precisions=[fp32,fp16_variant]", "fp16_variant.alpha=fast")
    assert done.returncode == 2 and "fp16_variant.alpha" in done.stderr, done.stderr[-2000:]


def test_a_plug_in_and_its_settings_appear_in_the_generated_references(tmp_path):
    """The reference pages are generated from the registry and the schema with its precisions'
    sections: a team's plug-in, loaded as every command loads it, is documented the same way."""
    from pathlib import Path

    (tmp_path / "fp16_variant_precision.py").write_text(PLUGIN)
    tools = Path(__file__).resolve().parents[2] / "tools"
    env = {**os.environ, "PRECISIONFLOW_PRECISIONS": "fp16_variant_precision", "PYTHONPATH": f"{tmp_path}{os.pathsep}{tools}"}
    pages = {}
    for tool in ("config_reference", "precision_reference"):
        done = subprocess.run(
            [sys.executable, "-c", f"import {tool}; print({tool}.page())"], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-2000:]
        pages[tool] = done.stdout
    assert "| `fp16_variant.alpha` | float | `1.0` | how far the variant leans |" in pages["config_reference"]
    assert "| `fp16_variant` | fp16's graph, with a setting of its own |" in pages["precision_reference"]


@pytest.mark.slow
def test_a_plug_in_building_on_fp16_plans_and_builds_end_to_end(tmp_path, node_store):
    (tmp_path / "fp16_variant_precision.py").write_text(PLUGIN)
    results = tmp_path / "results"
    # the end-to-end tests' data and model (tests/test_end_to_end.py), from the session's node store
    upstream = ["model=small_cnn", "int8.simulate_tensorrt=false", "dataset.max_samples=700", "train.epochs=4"]
    node_store.seed(results, [*upstream, "precisions=[fp32,fp16]"])
    overrides = [
        f"results_dir={results}",
        *upstream,
        "precisions=[fp32,fp16_variant]",
        "fp16_variant.alpha=3",
        "evaluate.accept_undecided=true",  # the gate is not what this tests
        *FAST_TIMING,
    ]
    done = cli(tmp_path, "fp16_variant_precision", "run", "--cores", "2", *overrides, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    graphs = {path.parent.name for path in results.glob("quantize_onnx/*/node.json")}
    assert any(name.startswith("fp16_variant") for name in graphs) and any(name.startswith("fp16-") for name in graphs)
    built = [path for path in results.glob("evaluate_engine/fp16_variant*/node.json")]
    assert built, sorted(graphs)
    summary = next(results.glob("quantize_onnx/fp16_variant*/node.json")).read_text()
    assert '"alpha": 3.0' in summary  # its own setting reached its graph stage
