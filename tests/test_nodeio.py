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


def _write_nodes(root, nodes):
    for key, inputs in nodes.items():
        stage, node = key.split("/")
        nodeio.write_json_atomic(root / stage / node / nodeio.NODE_FILE, {"stage": stage, "id": node, "inputs": inputs})


# An int8_qat evaluation: two trainings (train, QAT fine-tune) and two exports (QAT, fp32 reference).
QAT_LINEAGE = {
    "prepare_dataset/d": {},
    "train_model/t": {"data": "prepare_dataset/d"},
    "finetune_model/q": {"model": "train_model/t", "data": "prepare_dataset/d"},
    "export_onnx/fp32": {"model": "train_model/t", "data": "prepare_dataset/d"},
    "export_onnx/qat": {"model": "finetune_model/q", "data": "prepare_dataset/d"},
    "calibrate/c": {"onnx": "export_onnx/qat", "data": "prepare_dataset/d"},
    "quantize_onnx/g": {"onnx": "export_onnx/qat", "calibration": "calibrate/c", "data": "prepare_dataset/d"},
    "build_engine/e": {"graph": "quantize_onnx/g"},
    "evaluate_engine/v": {
        "engine": "build_engine/e",
        "data": "prepare_dataset/d",
        "reference": "export_onnx/fp32",
        "qat_export": "export_onnx/qat",
        "qat_model": "finetune_model/q",
    },
}


def test_lineage_is_keyed_by_node_id_and_keeps_both_exports(tmp_path):
    _write_nodes(tmp_path, QAT_LINEAGE)
    assert set(nodeio.lineage(tmp_path / "evaluate_engine" / "v")) == set(QAT_LINEAGE)


def test_named_lineage_names_the_deployed_chain_and_the_reference_apart(tmp_path):
    _write_nodes(tmp_path, QAT_LINEAGE)
    named = {name: nodeio.node_key(record) for name, record in nodeio.named_lineage(tmp_path / "evaluate_engine" / "v").items()}
    assert named == {
        "evaluate_engine": "evaluate_engine/v",
        "build_engine": "build_engine/e",
        "quantize_onnx": "quantize_onnx/g",
        "calibrate": "calibrate/c",
        "export_onnx": "export_onnx/qat",
        "finetune_model": "finetune_model/q",
        "train_model": "train_model/t",
        "prepare_dataset": "prepare_dataset/d",
        "reference.export_onnx": "export_onnx/fp32",
    }


def test_a_node_edited_after_it_finished_is_refused_and_the_advice_works(tmp_path):
    import json

    from precisionflow.errors import LineageError, StageError
    from precisionflow.nodeio import content_hashes, verify_node

    node = tmp_path / "calibrate" / "ptq-abc"
    node.mkdir(parents=True)
    (node / "ranges.json").write_text('{"ranges": {}}')
    (node / "node.json").write_text(json.dumps({"stage": "calibrate", "id": "ptq-abc", "files": content_hashes(node)}))
    verify_node(node)
    (node / "ranges.json").write_text('{"ranges": {"copied": [0, 1]}}')  # another model's cache copied in
    with pytest.raises(LineageError, match=r"ranges.json changed after the node finished.*delete that folder"):
        verify_node(node)
    (node / "ranges.json").write_text('{"ranges": {}}')
    (node / "extra.plan").write_text("an engine copied in")
    with pytest.raises(LineageError, match="extra.plan changed"):
        verify_node(node)
    import shutil

    shutil.rmtree(node)  # following the advice: the node is simply missing, which a run recomputes
    with pytest.raises(StageError, match="Run the workflow"):
        verify_node(node)


def test_a_run_checks_finished_nodes_by_stat_and_hashes_only_what_changed(tmp_path):
    import json
    import os

    from precisionflow.errors import LineageError
    from precisionflow.nodeio import content_hashes, file_stats, verify_finished_node

    node = tmp_path / "build_engine" / "e1"
    node.mkdir(parents=True)
    (node / "engine.onnx").write_bytes(b"graph-bytes")
    record = {"stage": "build_engine", "id": "e1", "files": content_hashes(node), "file_stats": file_stats(node)}
    (node / "node.json").write_text(json.dumps(record))
    verify_finished_node(node)
    os.utime(node / "engine.onnx")  # touched, same bytes: the full check runs and finds nothing wrong
    verify_finished_node(node)
    size, mtime_ns = record["file_stats"]["engine.onnx"]
    (node / "engine.onnx").write_bytes(b"graph-BYTES")  # same size, other bytes, its recorded time put back
    os.utime(node / "engine.onnx", ns=(mtime_ns, mtime_ns))
    verify_finished_node(node)  # indistinguishable by stat, as for git: the stat path trusts it
    os.utime(node / "engine.onnx")
    with pytest.raises(LineageError, match=r"engine.onnx changed after the node finished"):
        verify_finished_node(node)


def test_published_files_follow_the_umask(tmp_path):
    """mkstemp's 0600 and mkdtemp's 0700 once locked teammates out of a shared results folder."""
    import os
    import stat

    from precisionflow.nodeio import staged_node_dir, write_json_atomic

    previous = os.umask(0o002)
    try:
        with staged_node_dir(tmp_path / "stage" / "abc") as folder:
            write_json_atomic(folder / "node.json", {"stage": "stage"})
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "stage" / "abc").stat().st_mode) == 0o775
    assert stat.S_IMODE((tmp_path / "stage" / "abc" / "node.json").stat().st_mode) == 0o664
