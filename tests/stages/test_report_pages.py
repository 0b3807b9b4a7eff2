import numpy as np

from precisionflow.reporting import report_pages


def test_pareto_front_keeps_only_undominated_points():
    # (images/s, accuracy): more of both is better; int8 is beaten by fp32 on both
    points = [(2000, 0.97, "fp32"), (1500, 0.96, "int8"), (3000, 0.95, "fp16"), (900, 0.99, "qat")]
    assert [p[2] for p in report_pages.pareto_front(points)] == ["fp16", "fp32", "qat"]


def test_html_page_puts_verdicts_first_escapes_and_marks_rows():
    rows = [
        {"precision": "fp32", "top1": 0.9, "node": "fp32-local-1"},
        {"precision": "<int8>", "top1": "0.8*", "node": "int8-local-2"},
    ]
    verdicts = [
        {
            "node": "evaluate_engine/int8-local-2",
            "precision": "<int8>",
            "target": "local",
            "accuracy_name": "top-1",
            "drop_points": 10.0,
            "ran": "fp32",
            "model": "train_model/m-1",
            "agreement": 0.9,
            "worst_class": ("3", 20.0),
            "speedup_vs_fp32": 1.5,
            "speedup_at": "bmax",
            "verdict": "FAIL",
            "breaches": ["top-1 80.00 is 10.00 points below fp32's 90.00 (max 1.0)"],
        }
    ]
    page = report_pages.html_page(
        rows, ["precision", "top1"], {"Pareto plots": ["figures/pareto-local.png"]}, ["a note"], verdicts
    )
    assert page.index("Verdicts") < page.index("Comparison table") < page.index("Pareto plots")
    assert "&lt;int8&gt;" in page and 'src="figures/pareto-local.png"' in page
    assert '<tr class="ref">' in page and '<tr class="fail">' in page and 'class="noisy"' in page
    assert "10.00 points below" in page and 'title="int8-local-2"' in page


def test_flipped_grid_draws_the_changed_samples_with_the_side_that_was_right(tmp_path):
    from PIL import Image

    images = np.random.default_rng(0).random((5, 8, 8, 1), dtype=np.float32)
    rows = [
        {
            "test_index": "3",
            "label": "1",
            "fp32_prediction": "1",
            "fp32_confidence": "0.9",
            "engine_prediction": "2",
            "engine_confidence": "0.6",
            "right": "fp32",
        },
        {
            "test_index": "4",
            "label": "2",
            "fp32_prediction": "1",
            "fp32_confidence": "0.5",
            "engine_prediction": "2",
            "engine_confidence": "0.7",
            "right": "engine",
        },
    ]
    report_pages.flipped_grid(images, rows, ["a", "b", "c"], "int8", tmp_path / "grid.png")
    pixels = np.asarray(Image.open(tmp_path / "grid.png").convert("RGB")).reshape(-1, 3).astype(int)
    red = (pixels[:, 0] > 150) & (pixels[:, 1] < 90) & (pixels[:, 2] < 90)  # caption where fp32 was right
    green = (pixels[:, 1] > 90) & (pixels[:, 0] < 90) & (pixels[:, 2] < 90)  # caption where the engine was right
    assert red.sum() > 10 and green.sum() > 10


def test_per_class_changes_draws_one_row_per_engine(tmp_path):
    report_pages.per_class_changes(
        {"int8": {"0": -2.0, "1": 0.0}, "fp16": {"0": 0.0, "1": 1.5}}, ["0", "1"], "t", tmp_path / "classes.png"
    )
    assert (tmp_path / "classes.png").stat().st_size > 0


def test_an_engine_with_inf_or_nan_outputs_is_named_under_the_table():
    from pathlib import Path

    from precisionflow.reporting.report_notes import non_finite_notes

    metrics = {
        Path("evaluate_engine/fp16-local-1"): {"non_finite_outputs": 1540, "top1": 0.09},
        Path("evaluate_engine/fp32-local-2"): {"non_finite_outputs": 0, "top1": 0.97},
    }
    [note] = non_finite_notes(metrics)
    assert note.startswith("(!) fp16-local-1: 1540 non-finite outputs (inf/NaN) on the test split")
    assert "overflow" in note and "not rounding" in note


ROWS = [  # the default run's report (2026-12-02): fp16 ran fp32's kernels, timed 3.3x apart in two jobs
    {"target": "local", "model": "m-1", "precision": "fp32", "variant": "", "top1": "0.9956", "sps_bmax": "16151",
     "x_fp32_bmax": "", "x_fp32_low": "", "x_fp32_high": "", "x_fp32_at": ""},
    {"target": "local", "model": "m-1", "precision": "fp16", "variant": "", "top1": "0.9956", "sps_bmax": "53277",
     "x_fp32_bmax": "=fp32", "x_fp32_low": "", "x_fp32_high": "", "x_fp32_at": ""},
    {"target": "local", "model": "m-1", "precision": "int8", "variant": "entropy", "top1": "0.9911", "sps_bmax": "30000*",
     "x_fp32_bmax": "1.61", "x_fp32_low": "1.43", "x_fp32_high": "1.69", "x_fp32_at": "bmax"},
    {"target": "local", "model": "m-1", "precision": "int8", "variant": "entropy, TRT-sim", "top1": "0.9933", "sps_bmax": "",
     "x_fp32_bmax": "", "x_fp32_low": "", "x_fp32_high": "", "x_fp32_at": ""},
    {"target": "local", "model": "m-1", "precision": "tensorflow", "variant": "", "top1": "", "sps_bmax": "900",
     "x_fp32_bmax": "", "x_fp32_low": "", "x_fp32_high": "", "x_fp32_at": ""},
]  # fmt: skip


def test_the_pareto_plot_reads_side_by_side_ratios_so_identical_kernels_share_a_place():
    points = {p.label: p for p in report_pages.speed_points(ROWS, "local", "bmax", "top1", False)}
    assert set(points) == {"fp32 (reference)", "fp16 (ran fp32's kernels)", "int8 entropy"}  # no sim, no TF
    assert points["fp16 (ran fp32's kernels)"].ratio == points["fp32 (reference)"].ratio == 1.0
    assert (points["int8 entropy"].ratio, points["int8 entropy"].low, points["int8 entropy"].high) == (1.61, 1.43, 1.69)


def test_the_pareto_plot_is_drawn(tmp_path):
    report_pages.pareto_plot(ROWS, "local", tmp_path / "pareto.png", "bmax")
    assert (tmp_path / "pareto.png").stat().st_size > 10_000


def test_a_ratio_rounded_past_its_interval_is_drawn_at_the_interval_s_end(tmp_path):
    """x_fp32_bmax is rounded to 2 decimals, its interval not: 1.004 shows as 1.00 beside a low end of
    1.002. Drawn at 1.00, its error bar would be negative (matplotlib refuses: the report failed)."""
    rows = [
        *ROWS[:1],
        {"target": "local", "model": "m-1", "precision": "int8", "variant": "dynamic", "top1": "0.9",
         "x_fp32_bmax": "1.0", "x_fp32_low": "1.002", "x_fp32_high": "1.01", "x_fp32_at": "bmax"},
    ]  # fmt: skip
    points = {p.label: p for p in report_pages.speed_points(rows, "local", "bmax", "top1", False)}
    assert (points["int8 dynamic"].ratio, points["int8 dynamic"].low, points["int8 dynamic"].high) == (1.002, 1.002, 1.01)
    report_pages.pareto_plot(rows, "local", tmp_path / "pareto.png", "bmax")
    assert (tmp_path / "pareto.png").is_file()


def test_a_gallery_of_one_image_is_wide_enough_for_its_title_and_legend(tmp_path):
    from PIL import Image

    images = np.zeros((3, 8, 8, 1), np.float32)
    row = {"test_index": "1", "label": "3", "fp32_prediction": "3", "engine_prediction": "5", "right": "fp32"}
    title = "int8-ortcpu-local-8a36d358f355 on 'dusk' images"
    report_pages.flipped_grid(images, [row], [str(i) for i in range(10)], title, tmp_path / "grid.png")
    width, height = Image.open(tmp_path / "grid.png").size
    assert width >= 6 * len(title) and height > 72 + 4 * 12  # the header sits above the picture, not over it
