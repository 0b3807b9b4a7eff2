"""Every sweep reads itself (issue 62, item 1): rows that differ only in a swept key are named by
it -- any key, found from the rows themselves -- short (n64, e4), and only where a neighbour of
the same precision, target and variant differs."""

from precisionflow.reporting.compare import differences, short_label


def test_rows_are_named_by_whatever_key_differs_between_them():
    rows = {
        "int8-a": {"calibrate.num_samples": 64, "calibrate.method": "entropy", "train_model.train.epochs": 12},
        "int8-b": {"calibrate.num_samples": 128, "calibrate.method": "entropy", "train_model.train.epochs": 12},
        "int8-c": {"calibrate.num_samples": 256, "calibrate.method": "entropy", "train_model.train.epochs": 12},
        "fp16-a": {"train_model.train.epochs": 12},
    }
    groups = {"int8-a": ("int8", "local", "entropy"), "int8-b": ("int8", "local", "entropy")}
    groups.update({"int8-c": ("int8", "local", "entropy"), "fp16-a": ("fp16", "local", "")})
    assert differences(rows, groups) == {"int8-a": "n64", "int8-b": "n128", "int8-c": "n256", "fp16-a": ""}


def test_an_unknown_key_is_named_too_and_content_hashes_are_not():
    rows = {
        "fp32-a": {"train_model.train.epochs": 2, "train_model.train.momentum_x": 0.9, "prepare_dataset.fingerprint": "aa"},
        "fp32-b": {"train_model.train.epochs": 4, "train_model.train.momentum_x": 0.8, "prepare_dataset.fingerprint": "bb"},
    }
    groups = {name: ("fp32", "local", "") for name in rows}
    assert differences(rows, groups) == {"fp32-a": "e2 momentum_x=0.9", "fp32-b": "e4 momentum_x=0.8"}


def test_short_labels():
    assert short_label("calibrate.num_samples", 64) == "n64" and short_label("calibrate.method", "minmax") == "minmax"
    assert short_label("train_model.train.keep_best_epoch", False) == "no-keep_best_epoch"


def test_check_groups_the_verdicts_of_several_models_under_each_model():
    from precisionflow.reporting import verdict_lines

    def entry(model, precision):
        return {
            "verdict": "PASS",
            "precision": precision,
            "variant": "",
            "target": "local",
            "ran": precision,
            "accuracy_name": "top-1",
            "accuracy": 0.99,
            "drop_points": 0.0,
            "drop": None,
            "agreement": 1.0,
            "extra": "",
            "node": f"evaluate_engine/{precision}-{model}",
            "model": model,
            "checks": [],
            "breaches": [],
            "undecided": [],
        }

    found = [entry("m-e2", "fp16"), entry("m-e4", "fp16"), entry("m-e2", "int8")]
    lines = verdict_lines.format_verdicts(found).splitlines()
    assert lines[0] == "model m-e2:" and lines[3] == "model m-e4:"
    assert "fp16-m-e2" in lines[1] and "int8-m-e2" in lines[2] and "fp16-m-e4" in lines[4]
    one_model = verdict_lines.format_verdicts(found[:1])
    assert not one_model.startswith("model ")  # one model: no heading


def test_the_reports_verdict_table_has_a_model_column_where_several_models_are_judged():
    from precisionflow.reporting.report_pages import html_page

    def entry(model):
        return {
            "verdict": "PASS",
            "precision": "fp16",
            "target": "local",
            "ran": "fp16",
            "accuracy_name": "top-1",
            "accuracy": 0.99,
            "drop_points": 0.0,
            "drop": None,
            "agreement": 1.0,
            "node": f"evaluate_engine/fp16-{model}",
            "model": f"{model}-0123456789ab",
            "worst_class": None,
            "speed": None,
            "timed": False,
            "breaches": [],
            "undecided": [],
        }

    two = html_page([], [], {}, [], [entry("resnet_mini-fp32-e2"), entry("resnet_mini-fp32-e4")])
    assert "<th>model</th>" in two and "<td>resnet_mini-fp32-e2</td>" in two and "<td>resnet_mini-fp32-e4</td>" in two
    one = html_page([], [], {}, [], [entry("resnet_mini-fp32-e2")])
    assert "<th>model</th>" not in one
