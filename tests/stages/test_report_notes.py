"""Notes under the report's table that say what a row's figure does not."""

from pathlib import Path

from precisionflow.reporting import report_notes


def test_an_int8_qat_engine_below_the_qat_fidelity_goal_says_by_how_much_and_why():
    """MobileNetV2's CPU int8_qat engine agreed with its QAT model on 1,190 of 1,200 images of a new
    set (benchmarks/results/qat_unseen_data.json): the note gives the count, the interval and the
    CPU placement's 7-bit weights; an engine at the goal gets no note."""
    below = {"qat": {"vs_qat_model": {"agreement": 1190 / 1200}}, "test_images": 1200, "cpu_weight_bits": 7}
    at_goal = {"qat": {"vs_qat_model": {"agreement": 1.0}}, "test_images": 1200}
    lines = report_notes.qat_fidelity_notes(
        {Path("evaluate_engine/int8_qat-ortcpu-local-1"): below, Path("evaluate_engine/int8_qat-trtsim-local-2"): at_goal}, 0.95
    )
    assert len(lines) == 1 and "1190 of 1200" in lines[0] and "99.17% [98.47, 99.55] at 95%" in lines[0]
    # the interval is at evaluate.confidence, whatever it is set to
    wider = report_notes.qat_fidelity_notes({Path("evaluate_engine/int8_qat-ortcpu-local-1"): below}, 0.99)
    assert "at 99%" in wider[0] and "[98.47, 99.55]" not in wider[0]
    assert "7 bits" in lines[0] and "below 99.5%" in lines[0]
    # with 8-bit weights (a CPU with VNNI or a dot product) the note does not blame 7 bits
    eight = report_notes.qat_fidelity_notes(
        {Path("evaluate_engine/int8_qat-ortcpu-local-1"): dict(below, cpu_weight_bits=8)}, 0.95
    )
    assert len(eight) == 1 and "7 bits" not in eight[0] and "requantizes outputs" in eight[0]
