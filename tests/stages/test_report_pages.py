from precisionflow.stages import report_pages


def test_pareto_front_keeps_only_undominated_points():
    points = [(0.02, 0.97, "fp32"), (0.03, 0.96, "int8"), (0.01, 0.95, "fp16"), (0.05, 0.99, "qat")]
    assert [p[2] for p in report_pages.pareto_front(points)] == ["fp16", "fp32", "qat"]


def test_html_page_escapes_and_lists_plots():
    rows = [{"precision": "<int8>", "top1": 0.9}]
    page = report_pages.html_page(rows, ["precision", "top1"], ["pareto-local.png"])
    assert "&lt;int8&gt;" in page and 'src="pareto-local.png"' in page


def test_flipped_grid_draws_the_changed_samples(tmp_path):
    import numpy as np

    images = np.random.default_rng(0).random((5, 8, 8, 1), dtype=np.float32)
    rows = [{"test_index": "3", "label": "1", "fp32_prediction": "1", "engine_prediction": "2"}]
    report_pages.flipped_grid(images, rows, ["a", "b", "c"], "int8", tmp_path / "grid.png")
    assert (tmp_path / "grid.png").stat().st_size > 0
