import pytest

from precisionflow import nodeio
from precisionflow.errors import StageError


def test_failed_stage_leaves_nothing_behind(tmp_path):
    final = tmp_path / "stage" / "node-1"
    with pytest.raises(RuntimeError):
        with nodeio.staged_node_dir(final) as out:
            (out / "half.bin").write_bytes(b"partial")
            raise RuntimeError("crash")
    assert not final.exists()
    assert list((tmp_path / "stage").iterdir()) == []


def test_successful_stage_is_published_whole(tmp_path):
    final = tmp_path / "stage" / "node-1"
    final.mkdir(parents=True)  # Snakemake creates the parent of its output before the job
    with nodeio.staged_node_dir(final) as out:
        (out / "artifact").write_text("x")
        nodeio.write_json_atomic(out / nodeio.NODE_FILE, {"stage": "stage", "id": "node-1", "inputs": {}})
    assert (final / "artifact").read_text() == "x"
    assert nodeio.read_node(final)["id"] == "node-1"


def test_unfinished_upstream_is_refused(tmp_path):
    with pytest.raises(StageError, match="Expected a finished node"):
        nodeio.read_node(tmp_path / "nothing")


def test_ancestors_walks_lineage(tmp_path):
    for stage, node, inputs in [("a", "a1", {}), ("b", "b1", {"up": "a/a1"}), ("c", "c1", {"x": "b/b1", "y": "a/a1"})]:
        nodeio.write_json_atomic(tmp_path / stage / node / nodeio.NODE_FILE, {"stage": stage, "id": node, "inputs": inputs})
    assert set(nodeio.ancestors(tmp_path / "c" / "c1")) == {"a", "b", "c"}
