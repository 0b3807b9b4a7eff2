"""`precisionflow compare`'s table from constructed MLflow runs (the real store: test_mlflow_server.py)."""


def test_compare_tells_rows_apart_and_signs_changes():
    """Two int8 rows (an engine and its TensorRT simulation), a change with its sign and interval,
    the verdict's speed-up with its interval, and an fp16 that ran fp32's kernels."""
    import pandas

    from precisionflow.reporting import mlflow_compare

    label = "{} graph, ran {} on CPUExecutionProvider"
    runs = pandas.DataFrame(
        [
            {"tags.precision": "int8", "params.calibrate.method": "entropy", "tags.executed": label.format("int8", "int8 9/10"),
             "tags.executed_as_requested": "True", "metrics.top1_drop_points": 0.44, "metrics.top1_drop_low": -0.54,
             "metrics.top1_drop_high": 1.68, "metrics.x_fp32_verdict": 1.3612, "metrics.x_fp32_low": 1.34,
             "metrics.x_fp32_high": 1.54, "metrics.x_fp32_bmax": 1.3612, "tags.target": "local"},
            {"tags.precision": "int8", "params.calibrate.method": "entropy", "tags.simulates": "tensorrt",
             "tags.executed": label.format("int8", "fp32"), "tags.executed_as_requested": "False",
             "metrics.top1_drop_points": 0.22, "tags.target": "local"},
            {"tags.precision": "fp16", "tags.executed": label.format("fp16", "fp32"), "tags.executed_as_requested": "False",
             "metrics.top1_drop_points": 0.0, "metrics.x_fp32_bmax": 3.1, "tags.target": "local"},
        ]
    )  # fmt: skip
    rows = {(r["precision"], r["variant"]): r for r in mlflow_compare.table(runs)}
    assert set(rows) == {("int8", "entropy"), ("int8", "entropy, TRT-sim"), ("fp16", "")}
    engine = rows[("int8", "entropy")]
    assert engine["ran"] == "int8 9/10" and engine["change"] == "-0.44 [-1.68, +0.54]" and engine["x_fp32"] == "1.36 [1.34, 1.54]"
    simulation = rows[("int8", "entropy, TRT-sim")]
    assert simulation["ran"] == "fp32 (!)" and simulation["x_fp32"] == simulation["x_server"] == "not timed (a simulation)"
    # fp16 ran fp32's kernels: its measured ratio all the same (an "=fp32" once stood where 0.70x was measured)
    assert rows[("fp16", "")]["x_fp32"] == "3.10 (bmax)" and rows[("fp16", "")]["change"] == "+0.00"


def test_compare_names_the_model_second_when_the_runs_hold_several():
    """After `train.epochs=4` beside the default epochs=12, the two models' engines are told apart
    by a model column placed right after the precision (it once fell off the table's width)."""
    import pandas

    from precisionflow.reporting import mlflow_compare

    runs = pandas.DataFrame(
        [
            {"tags.precision": precision, "tags.node.train_model": f"train_model/resnet_mini-fp32-e{epochs}-{digest}",
             "tags.verdict": "PASS", "metrics.top1_drop_points": 0.1, "tags.target": "local",
             "tags.executed": "x graph, ran fp32 on CPUExecutionProvider -- a long label " * 3}
            for precision in ("fp32", "bf16") for epochs, digest in ((12, "aaaaaaaaaaaa"), (4, "bbbbbbbbbbbb"))
        ]
    )  # fmt: skip
    rows = mlflow_compare.table(runs)
    shown = mlflow_compare.shown_columns(rows, all_columns=False)
    assert shown[:2] == ["precision", "model"]
    assert {row["model"] for row in rows} == {"resnet_mini-fp32-e12", "resnet_mini-fp32-e4"}
    single = [row for row in rows if row["model"].endswith("e12")]
    assert "model" not in mlflow_compare.shown_columns(single, all_columns=False)[:2]
