"""Notes under the report's table that say what a row's figure does not."""

from pathlib import Path

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
