"""A plug-in precision's id covers what it imports, and it travels with a shipped bundle (issue 59,
item 1): its helpers beside it and the precisionflow modules it builds on are in its code hash;
`ship` copies its files into the bundle and `remote run` registers them there."""

import json
import os
import sys

from precisionflow import precisions
from precisionflow.pipeline import remote

PLUGIN = """
from precisionflow.precisions.fp32 import copy_graph
from precisionflow.precisions.spec import GraphRecipe, PrecisionSpec
from toy_helper import SCALE

SPEC = PrecisionSpec(name="toy_scaled", summary="fp32's graph, scaled", graph=GraphRecipe(make=copy_graph))
"""


def write_plugin(folder, scale):
    folder.mkdir(exist_ok=True)
    (folder / "toy_plugin.py").write_text(PLUGIN)
    (folder / "toy_helper.py").write_text(f"SCALE = {scale}\n")
    return folder / "toy_plugin.py"


def test_editing_a_helper_the_plug_in_imports_changes_its_code_hash(tmp_path):
    files, first = precisions.plugin_code(str(write_plugin(tmp_path / "a", 1)))
    assert [name.rsplit("/", 1)[-1] for name in files] == ["toy_plugin.py", "toy_helper.py"]
    _, again = precisions.plugin_code(str(write_plugin(tmp_path / "a", 1)))
    _, edited = precisions.plugin_code(str(write_plugin(tmp_path / "a", 2)))
    assert first == again != edited


def test_a_shipped_bundle_carries_and_registers_its_plug_ins(tmp_path, monkeypatch):
    path = write_plugin(tmp_path / "src", 1)
    files, _ = precisions.plugin_code(str(path))
    monkeypatch.setitem(precisions.PLUGIN_FILES, "toy_scaled", files)
    plan = {"nodes": {"build_engine/toy_scaled-h200-1": {"params": {"precision": "toy_scaled"}}}}
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    assert remote.pack_plugins(plan, list(plan["nodes"]), bundle) == ["toy_plugin"]
    assert sorted(p.name for p in (bundle / "plugins").iterdir()) == ["toy_helper.py", "toy_plugin.py"]
    (bundle / "manifest.json").write_text(json.dumps({"plugins": ["toy_plugin"]}))
    monkeypatch.setattr(sys, "path", list(sys.path))
    # set (not deleted) first, so that monkeypatch puts back what was there when the test ends:
    # use_shipped_plugins writes both into os.environ, which the later tests' subprocesses inherit
    monkeypatch.setenv("PRECISIONFLOW_PRECISIONS", "")
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.setattr(precisions, "REGISTRY", dict(precisions.REGISTRY))
    monkeypatch.setattr(precisions, "PLUGIN_SOURCES", dict(precisions.PLUGIN_SOURCES))
    remote.use_shipped_plugins(bundle)
    try:
        assert precisions.get("toy_scaled").summary == "fp32's graph, scaled"
    finally:
        for module in ("toy_plugin", "toy_helper"):
            sys.modules.pop(module, None)
