from precisionflow.stages import report_pages


def test_pareto_front_keeps_only_undominated_points():
    points = [(0.02, 0.97, "fp32"), (0.03, 0.96, "int8"), (0.01, 0.95, "fp16"), (0.05, 0.99, "qat")]
    assert [p[2] for p in report_pages.pareto_front(points)] == ["fp16", "fp32", "qat"]


def test_html_page_escapes_and_lists_plots():
    rows = [{"precision": "<int8>", "top1": 0.9}]
    page = report_pages.html_page(rows, ["precision", "top1"], ["pareto-local.png"])
    assert "&lt;int8&gt;" in page and 'src="pareto-local.png"' in page
