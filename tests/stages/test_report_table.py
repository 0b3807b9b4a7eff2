"""The console's table reads the same in every run and sweep (issue 62): the same columns in the
same order, one number format per column, every blank with its reason said once under the table."""

from precisionflow.reporting.report_rows import COLUMNS, displayed
from precisionflow.stages.report import ALWAYS_PRINTED, printed_table, why_no_ranking


def row(**values):
    found = {column: "" for column in COLUMNS + ["change_95"]}
    found.update({"model": "resnet_mini-fp32-e12-1f6c774e418d", "target": "local", "ran": "fp32", "variant": ""})
    found.update(values)
    return found


ROWS = [
    row(precision="fp32", top1=0.98, change_95="+0.00", verdict="reference", blank_as="ref"),
    row(precision="fp16", top1=0.9822, change_95="+0.00 [-0.9,+0.9]", verdict="PASS", x_fp32_bmax=1.0),
    row(precision="int8", top1=0.98, change_95="-0.22 [-1.3,+0.7]", verdict="PASS", variant="entropy, TRT-sim", blank_as="sim"),
    row(precision="int8", top1=0.9911, change_95="+0.00 [-0.9,+0.9]", verdict="PASS", variant="entropy", x_fp32_bmax=1.36),
]


def test_every_number_of_a_column_has_one_format_and_a_blank_its_mark():
    shown = {(r["precision"], r["variant"]): r for r in displayed(ROWS)}
    assert [shown[key]["top1"] for key in shown] == ["0.9800", "0.9822", "0.9800", "0.9911"]
    assert shown[("fp16", "")]["x_fp32_bmax"] == "1.00" and shown[("int8", "entropy")]["x_fp32_bmax"] == "1.36"
    assert shown[("fp32", "")]["x_fp32_bmax"] == "ref" and shown[("int8", "entropy, TRT-sim")]["x_fp32_bmax"] == "sim"


def test_the_same_columns_print_whether_or_not_a_sweep_fills_them():
    """Serving off: the Server column is still printed, and why it is empty is said once."""
    text = printed_table(ROWS, serving_ran=False)
    header = next(line for line in text.splitlines() if line.startswith("precision"))
    for title in ("ran", "top1", "vs fp32 [95%]", "verdict", "variant", "x_fp32@bmax", "x_fp32@server [95%]"):
        assert title in header, title
    assert "x_fp32@server [95%]: empty -- no serve_engine ran (evaluate.serving.enabled=false)" in text
    assert "ref = the fp32 engine itself" in text and "sim = TensorRT's arithmetic simulated" in text
    assert len(ALWAYS_PRINTED) == 7
    # a sweep with a different variant and no simulation prints the same columns first, in the same
    # order; only what fits after them varies with the width
    other = printed_table([r for r in ROWS if r["blank_as"] != "sim"], serving_ran=False)
    other_header = next(line for line in other.splitlines() if line.startswith("precision"))
    core = header[: header.index("x_fp32@server [95%]") + len("x_fp32@server [95%]")].split()
    assert other_header.split()[: len(core)] == core


def test_the_ranking_line_is_true_of_the_rows_above_it():
    fp16 = {"precision": "fp16", "speed": {"geomean": 1.03}, "ran_reference_kernels": True}
    assert "ran fp32's kernels here" in why_no_ranking([fp16], [fp16]) and "(fp16)" in why_no_ranking([fp16], [fp16])
    assert why_no_ranking([], []) == "no engine passed its budget, so none is ranked by speed."


def test_a_baseline_rows_marks_do_not_make_another_tasks_columns():
    """The TensorFlow row's n/a marks its accuracy cells; they are not a detector's mAP to print."""
    baseline = row(precision="tensorflow", ran="fp32 (cpu)", blank_as="n/a")
    text = printed_table(ROWS + [baseline], serving_ran=True)
    header = next(line for line in text.splitlines() if line.startswith("precision"))
    assert "top1" in header and "map50" not in header and "spurious" not in header
    assert "n/a = the TensorFlow model" in text
