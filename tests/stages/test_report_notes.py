"""Notes under the report's table that say what a row's figure does not."""

from pathlib import Path

import pytest

from precisionflow.reporting import report_notes


def evaluation(results: Path, name: str, placement: str, bits=None) -> Path:
    """An evaluation node whose engine's int8 graph records its placement (and the CPU's weight bits)."""
    import json

    graph = {
        "stage": "quantize_onnx",
        "id": f"{name}-g",
        "inputs": {},
        "params": {"precision": "int8_qat", "int8": {"placement": placement}},
    }
    graph["summary"] = {"cpu_weight_bits": bits} if bits else {}
    built = {
        "stage": "build_engine",
        "id": f"{name}-b",
        "inputs": {"graph": f"quantize_onnx/{name}-g"},
        "params": {},
        "summary": {},
    }
    evaluated = {
        "stage": "evaluate_engine",
        "id": name,
        "inputs": {"engine": f"build_engine/{name}-b"},
        "params": {},
        "summary": {},
    }
    for record in (graph, built, evaluated):
        folder = results / record["stage"] / record["id"]
        folder.mkdir(parents=True)
        (folder / "node.json").write_text(json.dumps(record))
    return results / "evaluate_engine" / name


def test_an_int8_qat_engine_below_the_qat_fidelity_goal_says_by_how_much_and_why(tmp_path):
    """MobileNetV2's CPU int8_qat engine agreed with its QAT model on 1,190 of 1,200 images of a new
    set (benchmarks/results/qat_unseen_data.json): the note gives the count, the interval and the
    CPU placement's 7-bit weights -- the placement read from the graph's node, not a folder name;
    an engine at the goal gets no note."""
    below = {"qat": {"vs_qat_model": {"agreement": 1190 / 1200}}, "test_images": 1200}
    at_goal = {"qat": {"vs_qat_model": {"agreement": 1.0}}, "test_images": 1200}
    cpu7 = evaluation(tmp_path, "q-cpu7", "onnxruntime_cpu", 7)
    trt = evaluation(tmp_path, "q-trt", "tensorrt")
    lines = report_notes.qat_fidelity_notes({cpu7: below, trt: at_goal}, 0.95)
    assert len(lines) == 1 and "1190 of 1200" in lines[0] and "99.17% [98.47, 99.55] at 95%" in lines[0]
    # the interval is at evaluate.confidence, whatever it is set to
    wider = report_notes.qat_fidelity_notes({cpu7: below}, 0.99)
    assert "at 99%" in wider[0] and "[98.47, 99.55]" not in wider[0]
    assert "7 bits" in lines[0] and "below 99.5%" in lines[0]
    # with 8-bit weights (a CPU with VNNI or a dot product) the note does not blame 7 bits
    eight = report_notes.qat_fidelity_notes({evaluation(tmp_path, "q-cpu8", "onnxruntime_cpu", 8): below}, 0.95)
    assert len(eight) == 1 and "7 bits" not in eight[0] and "requantizes outputs" in eight[0]
    # TensorRT's placement below the goal: the runtime's arithmetic, not the CPU's requantization
    [on_trt] = report_notes.qat_fidelity_notes({trt: below}, 0.95)
    assert "requantizes" not in on_trt and "arithmetic order" in on_trt


def test_an_x_tf_ratio_of_sides_on_two_devices_says_so_once_per_pair():
    """compare_speed records where each side ran; a GPU engine timed beside a TensorFlow that found
    no GPU gets a note naming both devices, and sides on one device get none."""
    from precisionflow.reporting.report_rows import ratio_columns

    def record(devices):
        entry = {"throughput_sps": {}, "vs_tf": {"geomean": 40.0, "noisy": False}}
        return {"settings": {"b1": entry, "b128": entry}, "conditions": {}, "devices": devices}

    apart = ratio_columns(record({"engine": "gpu", "tensorflow": "cpu"}))
    assert apart["x_tf_b1"] == 40.0 and apart["x_tf_devices"] == "TensorFlow on the CPU, the engine on the GPU"
    assert ratio_columns(record({"engine": "cpu", "tensorflow": "cpu"}))["x_tf_devices"] == ""
    assert ratio_columns(record({"engine": "gpu", "fp32": "gpu"}))["x_tf_devices"] == ""  # no TensorFlow side
    rows = [
        {"precision": "fp16", "target": "local", "x_tf_devices": apart["x_tf_devices"]},
        {"precision": "fp32", "target": "local", "x_tf_devices": apart["x_tf_devices"]},
        {"precision": "fp32", "target": "cpu", "x_tf_devices": ""},
    ]
    assert report_notes.device_notes(rows) == [
        "x_tf_* of fp16 (local), fp32 (local): TensorFlow on the CPU, the engine on the GPU -- a ratio of the two "
        "as they ran, not of one device's engine against its framework."
    ]


def test_mlflow_tags_an_engine_run_whose_x_tf_sides_ran_on_two_devices():
    """The same words reach the engine's MLflow run, where teams compare x_tf_* across sweeps."""
    from precisionflow.stages.track_mlflow import ratio_device_tags

    assert ratio_device_tags({"devices": {"engine": "gpu", "tensorflow": "cpu"}}) == {
        "x_tf_devices": "TensorFlow on the CPU, the engine on the GPU"
    }
    assert ratio_device_tags({"devices": {"engine": "gpu", "tensorflow": "gpu"}}) == {}
    assert ratio_device_tags({"settings": {}}) == {} and ratio_device_tags(None) == {}  # a record from before devices


@pytest.fixture(scope="module")
def recorded_h100_evaluations(tmp_path_factory) -> dict:
    """{evaluation folder: metrics} of the eighteenth GPU job's two engines (an H100, the default target,
    fp16 and fp32 with cuDNN's fused Conv+bias kept by their builds): real records, as landed, unpacked
    once for the module (each test deep-copies what it changes)."""
    import json
    import tarfile

    into = tmp_path_factory.mktemp("h100b")

    collected = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "gpu_path_default_h100b" / "collected.tar.xz"
    with tarfile.open(collected) as archive:
        wanted = [  # every node's record (the notes read an evaluation's lineage), the evaluations' metrics
            member
            for member in archive.getmembers()
            if member.name.endswith("/node.json")
            or (member.name.lstrip("./").startswith("evaluate_engine/") and member.name.endswith("/metrics.json"))
        ]
        archive.extractall(into, members=wanted, filter="data")
    return {path.parent: json.loads(path.read_text()) for path in sorted(into.glob("evaluate_engine/*/metrics.json"))}


def test_a_fused_gpu_engine_whose_streams_gained_little_says_so_with_its_own_figures(recorded_h100_evaluations):
    found = recorded_h100_evaluations
    by_precision = {metrics["precision"]: folder for folder, metrics in found.items()}
    [line] = report_notes.fusion_streams_notes(found)  # fp32's streams grew 3.83x: no note
    fp16 = found[by_precision["fp16"]]
    streams = fp16["speed"]["streams"]
    assert line.startswith(f"(fused) {by_precision['fp16'].name}: 8 streams ran ")
    assert f"{streams['8']['throughput_sps'] / streams['1']['throughput_sps']:.2f}x one stream" in line
    low, high = fp16["engine"]["conv_bias_fusion"]["ratio_interval"]
    assert f"[{low:.3f}, {high:.3f}]x at b128" in line and "fuse_conv_bias=false" in line
    assert line in report_notes.notes([], found, 0.95)


def test_no_fusion_note_without_the_fusion_or_without_two_stream_counts_or_with_figures_it_cannot_read(recorded_h100_evaluations):
    import copy

    found = recorded_h100_evaluations
    fp16 = next(folder for folder, metrics in found.items() if metrics["precision"] == "fp16")
    for change in (
        lambda m: m["engine"]["conv_bias_fusion"].update(kept=False),  # the build measured it slower
        lambda m: m["engine"].pop("conv_bias_fusion"),  # a CPU engine: no such option
        lambda m: m["speed"].update(streams={"1": m["speed"]["streams"]["1"]}),  # one stream count only
        lambda m: m["speed"]["streams"]["1"].update(throughput_sps=0.0),
        lambda m: m["speed"]["streams"]["8"].update(throughput_sps=float("nan")),
        lambda m: m["speed"]["streams"]["8"].update(throughput_sps="1058"),
        lambda m: m["speed"]["streams"]["8"].update(throughput_sps=None),
        lambda m: m["speed"]["streams"]["8"].update(throughput_sps=2 * m["speed"]["streams"]["1"]["throughput_sps"]),
        lambda m: m["engine"]["conv_bias_fusion"].update(kept="yes"),
        lambda m: m["speed"]["streams"].update({"8": "1058"}),
        lambda m: m["speed"].update(streams={"1": m["speed"]["streams"]["1"], "many": m["speed"]["streams"]["8"]}),
    ):
        metrics = copy.deepcopy(found[fp16])
        change(metrics)
        assert report_notes.fusion_streams_notes({fp16: metrics}) == []


def test_a_fusion_interval_the_note_cannot_read_leaves_it_out_and_the_rest_stands(recorded_h100_evaluations):
    import copy

    found = recorded_h100_evaluations
    fp16 = next(folder for folder, metrics in found.items() if metrics["precision"] == "fp16")
    for interval in (None, [1.4, float("inf")], ["1.4", "1.41"], [1.4]):
        metrics = copy.deepcopy(found[fp16])
        metrics["engine"]["conv_bias_fusion"]["ratio_interval"] = interval
        [line] = report_notes.fusion_streams_notes({fp16: metrics})
        assert "which its build kept. Whether the fusion" in line and "fuse_conv_bias=false" in line
