"""Calibration, TensorRT-legal quantization and the per-tensor report on a tiny graph made here."""

import numpy as np
import onnx
import pytest

from precisionflow.datasets.store import Split, write_arrays
from precisionflow import stats
from precisionflow.stats import geometric_mean
from precisionflow.hashing import file_hash
from precisionflow.quant import cache, qdq, qdq_check
from precisionflow.stages import calibrate, quantize_onnx
from precisionflow.precisions.static_int8 import read_rows
from precisionflow.precisions.spec import GraphJob
from tests.conftest import make_tiny_cnn

CALIBRATION = {
    "source": "ptq",
    "method": "entropy",
    "percentile": 99.99,
    "num_samples": 40,
    "batch_size": 8,
    "split": "train",
    "tensorrt_version": "10.14.1",
}
INT8 = {
    "placement": "tensorrt",
    "exclude_nodes": [],
    "keep_output_layer": True,
    "mixed_keep_fp": 1,
    "report_samples": 20,
    "report_split": "val",
}


@pytest.fixture
def data_dir(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "data"
    folder.mkdir()
    write_arrays(
        folder,
        {
            split: (rng.integers(0, 256, (60, 8, 8, 1), dtype=np.uint8), rng.integers(0, 4, 60))
            for split in ("train", "val", "test")
        },
        "abcd",
    )
    return folder


@pytest.fixture
def export_dir(tmp_path):
    folder = tmp_path / "export"
    folder.mkdir()
    make_tiny_cnn(folder / "model.onnx")
    return folder


def _calibrate(tmp_path, export_dir, data_dir, method="entropy"):
    out = tmp_path / f"calib-{method}"
    out.mkdir()
    calibrate.run(dict(CALIBRATION, method=method), {"onnx": export_dir, "data": data_dir}, out)
    return out


@pytest.mark.parametrize("method", ["entropy", "minmax", "percentile"])
def test_calibration_covers_every_quantizable_tensor(tmp_path, export_dir, data_dir, method):
    out = _calibrate(tmp_path, export_dir, data_dir, method)
    ranges, lineage = cache.load_cache(out, file_hash(export_dir / "model.onnx"))
    model = onnx.load(str(export_dir / "model.onnx"))
    constants = {init.name for init in model.graph.initializer}
    needed = {t for n in model.graph.node if n.op_type in qdq.COMPUTE_OPS for t in list(n.input) + list(n.output)} - constants
    assert needed <= set(ranges)
    assert all(lo <= hi for lo, hi in ranges.values())
    assert lineage["method"] == method and lineage["sample_count"] == 40
    header, scales = cache.parse_trt_text(cache.write_trt_cache(out, tmp_path / "trt.cache", "10.14.1").read_text())
    assert header == "TRT-101401-" + cache.TRT_ALGORITHMS[method] and set(scales) == set(ranges)


def test_calibration_larger_than_its_memory_budget_runs_in_calls_that_fit(tmp_path, export_dir, data_dir):
    """Samples whose activations exceed the budget are calibrated in several calls, each reduced before
    the next: min/max ranges are exactly those of one call; within the budget nothing changes."""
    samples, _ = calibrate.calibration_samples(data_dir, CALIBRATION)
    graph = export_dir / "model.onnx"
    params = dict(CALIBRATION, method="minmax")
    whole = calibrate.measure_ranges(graph, samples, params)
    tiny_budget = 3 * 1024  # a few samples of this tiny CNN's activations
    assert calibrate.measure_ranges(graph, samples, params, budget=tiny_budget) == whole
    entropy = dict(CALIBRATION, method="entropy")
    assert calibrate.measure_ranges(graph, samples, entropy) == calibrate.measure_ranges(graph, samples, entropy)
    batched = calibrate.measure_ranges(graph, samples, entropy, budget=tiny_budget)
    assert set(batched) == set(whole) and all(lo <= hi for lo, hi in batched.values())


def test_samples_per_call_follows_the_activation_budget(tmp_path, export_dir, data_dir):
    samples, _ = calibrate.calibration_samples(data_dir, CALIBRATION)
    graph = export_dir / "model.onnx"
    calibrator = calibrate._calibrator(graph, dict(CALIBRATION, method="minmax"), tmp_path)
    name = calibrate.graph_input_name(graph)
    per_sample = sum(v.nbytes for v in calibrator.infer_session.run(None, {name: samples[:1].astype(np.float32)}))
    assert calibrate.samples_per_call(calibrator, name, samples, 8) == len(samples)  # 2 GB: all at once
    assert calibrate.samples_per_call(calibrator, name, samples, 8, budget=per_sample * 20) == 16  # whole batches
    assert calibrate.samples_per_call(calibrator, name, samples, 8, budget=per_sample * 3) == 3


def _quantize(tmp_path, export_dir, data_dir, calib, precision="int8", extra_inputs=None, cpu_dot_product=None, **int8):
    """`cpu_dot_product`: as a CPU target declares it (None: read here, as for an undeclared one)."""
    out = tmp_path / f"{precision}-{len(list(tmp_path.iterdir()))}"
    out.mkdir()
    inputs = {"onnx": export_dir, "calibration": calib, "data": data_dir, **(extra_inputs or {})}
    declared = {"cpu_dot_product": cpu_dot_product} if cpu_dot_product else {}
    summary = quantize_onnx.run({"precision": precision, "int8": dict(INT8, **int8), **declared}, inputs, out)
    return out, summary


def test_int8_graph_is_trt_legal_and_keeps_the_output_layer_float(tmp_path, export_dir, data_dir):
    out, summary = _quantize(tmp_path, export_dir, data_dir, _calibrate(tmp_path, export_dir, data_dir))
    model = onnx.load(str(out / "model.onnx"))
    assert qdq_check.check_qdq(model) == []
    assert summary["quantized_nodes"] == 1  # the conv; the Gemm is the output layer
    producers = {o: n for n in model.graph.node for o in n.output}
    logits = next(n for n in model.graph.node if n.name == "logits")
    assert all(getattr(producers.get(i), "op_type", "") != "DequantizeLinear" for i in logits.input)


def test_per_layer_report_lists_every_quantized_tensor_with_finite_error(tmp_path, export_dir, data_dir):
    out, _ = _quantize(tmp_path, export_dir, data_dir, _calibrate(tmp_path, export_dir, data_dir))
    rows = read_rows(out / "layer_error.csv")
    model = onnx.load(str(out / "model.onnx"))
    quantized = {n.input[0] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    assert quantized <= {row["tensor"] for row in rows}
    assert all(np.isfinite(row["sqnr_vs_fp32_db"]) for row in rows)
    assert (out / "layer_error.png").stat().st_size > 0


def test_int8_mixed_leaves_the_worst_op_in_float(tmp_path, export_dir, data_dir):
    calib = _calibrate(tmp_path, export_dir, data_dir)
    int8_dir, full = _quantize(tmp_path, export_dir, data_dir, calib, keep_output_layer=False)
    out, summary = _quantize(tmp_path, export_dir, data_dir, calib, "int8_mixed", {"int8": int8_dir}, keep_output_layer=False)
    assert full["quantized_nodes"] == 2 and summary["quantized_nodes"] == 1 and len(summary["kept_float"]) == 1
    assert summary["quantized_fraction"] == 0.5
    assert qdq_check.check_qdq(onnx.load(str(out / "model.onnx")), output_layer_float=False) == []  # checked on mixed graphs too


def test_a_graph_with_nothing_quantized_is_never_called_int8(tmp_path, export_dir, data_dir):
    from precisionflow.errors import ConfigError

    calib = _calibrate(tmp_path, export_dir, data_dir)
    int8_dir, _ = _quantize(tmp_path, export_dir, data_dir, calib)
    with pytest.raises(ConfigError, match="nothing left to quantize.*mixed_keep_fp=1 keeps \\['conv0'\\] in float"):
        _quantize(tmp_path, export_dir, data_dir, calib, "int8_mixed", {"int8": int8_dir})


def test_the_layer_report_and_calibration_never_use_the_test_split(tmp_path, export_dir, data_dir):
    calib = _calibrate(tmp_path, export_dir, data_dir)
    _, summary = _quantize(tmp_path, export_dir, data_dir, calib)
    assert summary["report_split"] == "val" and summary["calibration_split"] == "train"
    from precisionflow.config.compose import expand
    from precisionflow.errors import ConfigError

    for key in ("calibration.split=test", "int8.report_split=test"):
        with pytest.raises(ConfigError, match="never look at the test split"):
            expand([key])


def test_checker_rejects_asymmetric_uint8_graphs(tmp_path, export_dir, data_dir):
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    from precisionflow.quant.reader import array_reader

    images = Split(data_dir, "train").array()
    target = tmp_path / "asym.onnx"
    quantize_static(
        str(export_dir / "model.onnx"),
        str(target),
        array_reader("image", images, 10),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        per_channel=False,
        calibrate_method=CalibrationMethod.MinMax,
    )
    problems = qdq_check.check_qdq(onnx.load(str(target)))
    text = " ".join(problems)
    assert "expected int8" in text
    assert "per tensor" in text
    assert "int32 bias" in text
    assert "output layer" in text and "quantized weights" in text


def test_residual_add_is_quantizable_but_bias_add_is_not(tmp_path):
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="r1"),
        helper.make_node("Relu", ["x"], ["b"], name="r2"),
        helper.make_node("Add", ["a", "b"], ["res"], name="residual"),
        helper.make_node("Add", ["res", "bias"], ["y"], name="bias_add"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.ones(4, np.float32), "bias")],
    )
    model = helper.make_model(graph)
    assert qdq.quantizable_nodes(model, keep_output_layer=False) == ["residual"]


def test_accuracy_driven_int8_mixed_keeps_the_op_that_breaks_the_budget(tmp_path, export_dir):
    """A sabotaged range on the classifier's input ruins int8 top-1; the search measures each op's
    sensitivity, keeps exactly that op in float and reaches the budget on the validation split."""
    from precisionflow.quant import mixed

    # 400 images: enough for a 5-point budget to be cleared by its interval (80 could not resolve 2 points)
    source, data = _sabotaged_search_inputs(tmp_path, export_dir)
    ranges = {"nchw": (-1.0, 1.0), "flat": (-0.002, 0.002)}  # the Gemm's input clipped to nothing
    kept, record = mixed.search(
        source,
        ranges,
        ["conv0", "logits"],
        data,
        {"report_split": "val", "mixed_max_val_drop": 5.0},
        confidence=0.95,
        placement="tensorrt",
    )
    assert kept == ["logits"] and record["budget_met"] and record["drop_interval"][1] <= 5.0, record
    assert record["order"] == ["logits", "conv0"] and record["split"] == "val"
    assert record["trials"]["0"]["low"] > 5.0  # plain int8 broke the budget beyond doubt


def test_entropy_calibration_clips_a_long_tail_that_minmax_keeps(tiny_onnx):
    """The entropy calibrator searches thresholds below the maximum (TensorRT's 2048-bin histogram):
    with ONNX Runtime's default 128 bins it had one candidate, the maximum, and equalled minmax."""
    samples = np.random.default_rng(0).random((64, 8, 8, 1), dtype=np.float32)
    minmax = calibrate.measure_ranges(tiny_onnx, samples, {"method": "minmax", "batch_size": 16})
    entropy = calibrate.measure_ranges(tiny_onnx, samples, {"method": "entropy", "batch_size": 16})
    assert entropy["relu"][1] < 0.9 * minmax["relu"][1]


def _sabotaged_search_inputs(tmp_path, export_dir):
    """The tiny classifier, 400 validation images it labels itself, and ranges that clip the
    classifier's input to nothing (int8 as a whole breaks any budget)."""
    import onnxruntime as ort

    source = export_dir / "model.onnx"
    pixels = np.random.default_rng(3).integers(0, 256, (400, 8, 8, 1), dtype=np.uint8)
    images = pixels.astype(np.float32) / np.float32(255)
    session = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    labels = session.run(None, {"image": images})[0].argmax(1)
    data = tmp_path / "decision-data"
    write_arrays(data, {"val": (pixels, labels), "test": (pixels[:0], labels[:0])}, "abcd")
    return source, data


def test_int8_mixed_builds_nothing_when_no_mix_meets_the_budget(tmp_path, export_dir):
    """Both ops' inputs clipped to nothing: keeping either in float still breaks a 5-point budget.
    Before, the search kept all but one op float and built that engine anyway (the MobileNetV2 photo
    run: 61 of 62 float, 0.52x fp32, 5 points down); now it declines and says why."""
    from precisionflow.quant import mixed

    source, data = _sabotaged_search_inputs(tmp_path, export_dir)
    ranges = {"nchw": (-0.002, 0.002), "flat": (-0.002, 0.002)}
    kept, record = mixed.search(
        source,
        ranges,
        ["conv0", "logits"],
        data,
        {"report_split": "val", "mixed_max_val_drop": 5.0},
        confidence=0.95,
        placement="tensorrt",
    )
    assert kept == [] and not record["budget_met"]
    assert "nothing built" in record["declined"] and "within 5.0 points" in record["declined"]


def test_the_int8_mixed_graph_stage_publishes_the_reason_and_no_graph(tmp_path, export_dir, data_dir):
    """Through the quantize stage: a declined int8_mixed writes no model.onnx and its summary says why
    (the runner then declines every node downstream; pipeline/runner.declined_upstream)."""
    from precisionflow.precisions import static_int8

    source, data = _sabotaged_search_inputs(tmp_path, export_dir)

    def choose_float(*args):
        return [], {"declined": "no mix worth building (constructed)"}

    out = tmp_path / "graph"
    out.mkdir()
    calibration = _calibrate(tmp_path, export_dir, data_dir)
    params = {
        "precision": "int8_mixed",
        "int8": {"placement": "onnxruntime_cpu", "exclude_nodes": [], "keep_output_layer": False},
        "cpu_dot_product": "avx512_vnni",
    }
    job = GraphJob(source, out / "model.onnx", params, {"calibration": calibration, "data": data}, out)
    details = static_int8.to_int8(job, choose_float)
    assert details["declined"] == "no mix worth building (constructed)" and not (out / "model.onnx").exists()


@pytest.mark.parametrize(
    "rounds, declined",
    [([0.5, 0.55, 0.52, 0.5, 0.53], True), ([0.98, 1.04, 1.01, 0.97, 1.03], True), ([1.6, 1.7, 1.65, 1.62, 1.68], False)],
)
def test_a_mix_within_budget_is_built_only_when_faster_than_fp32_by_its_interval(tmp_path, export_dir, rounds, declined):
    """On the CPU placement the candidate mixes are timed against fp32 (constructed timings here):
    slower than fp32, or not faster by its interval, is no trade-off."""
    from precisionflow import stats
    from precisionflow.quant import mixed

    def timer(source, graphs, batch, confidence, timing):
        low, high = stats.ratio_interval(rounds, confidence)
        timed = {"geomean": geometric_mean(rounds), "interval": [low, high], "rounds": rounds, "window_s": timing["window_s"]}
        return {name: timed for name in graphs}

    source = export_dir / "model.onnx"
    images = np.random.default_rng(0).random((8, 8, 8, 1), dtype=np.float32)
    labels = np.zeros(8, dtype=np.int64)
    # int8 itself, as choose() measured it on the selection split: straddling the 5-point budget
    record = {"max_drop_points": 5.0, "of": 2, "split": "val", "trials": {"0": {"drop": 2.0, "low": -1.0, "high": 6.5}}}
    ranges = calibrate.measure_ranges(source, images, {"method": "minmax", "batch_size": 8})
    from precisionflow.quant import judges

    judge = judges.TopOne(np.zeros((8, 4), dtype=np.float32), labels, 0.95)
    kept, why = mixed.fastest_mix(
        source,
        ranges,
        ["conv0", "logits"],
        ["logits"],
        images,
        judge,
        tmp_path,
        ("onnxruntime_cpu", 7),
        record,
        0.95,
        timer,
        timing={"rounds": 5, "window_s": 0.1},
    )
    assert bool(why) == declined and (kept == []) == declined
    assert record["fastest"] == "chosen" and "speed_vs_fp32" in record
    if declined:
        assert "not faster than fp32 by its interval" in why and "(5 rounds of 0.1 s)" in why
        # the reason quotes int8's own measurement, never an unmeasured "int8 breaks the budget"
        assert "int8 itself drops +2.00 [-1.00, +6.50] points on the val split" in why and "UNDECIDED" in why


def test_a_mix_is_timed_as_the_side_by_side_ratio_is_and_its_reason_says_how(tmp_path, export_dir):
    """The mix's speed is taken by compare_speed's method and settings (windows, not a few calls),
    with the machine's load beside it; a NOT BUILT reason quotes the figure with its rounds, names
    outlying rounds and a noisy figure, and says when the machine was shared."""
    from precisionflow.quant import mixed

    source = export_dir / "model.onnx"
    images = np.random.default_rng(0).random((4, 8, 8, 1), dtype=np.float32)
    timed = mixed.time_against_fp32(source, {"same": source}, images, 0.95, {"rounds": 4, "window_s": 0.02})["same"]
    assert len(timed["rounds"]) == 4 and timed["window_s"] == 0.02 and timed["interval"][0] <= timed["geomean"]
    assert set(timed["machine"]) == {"cpu_count", "loadavg_1m", "finished_loadavg_1m", "other_cores"}
    # the rounds a seventh-batch run quoted (9 rounds of 3 calls): 0.29 lies beyond 3 scaled MADs
    rounds = [1.11, 1.68, 0.29, 1.53, 3.50, 1.73, 0.64, 1.71, 0.62]
    assert stats.outlying_rounds(rounds) == [2] and stats.outlying_rounds([1.0] * 5) == []
    # quoted by the figure its interval is of: their geometric mean 1.15x, not their median 1.53x
    found = stats.ratio_stats(rounds, [1.0] * len(rounds))
    low, high = stats.ratio_interval(rounds, 0.95)
    figure = {"geomean": found["geomean"], "interval": [low, high], "rounds": rounds, "window_s": 0.1, "outliers": [2]}
    figure.update(noisy=found["noisy"], error_percent=found["error_percent"])
    said = mixed.speed_said("b1", figure)
    assert said == "b1: 1.15x [0.65, 2.03] (9 rounds of 0.1 s; 1 outlying: 0.29; noisy: a standard error of 24.8%)"
    # the table's rule (stats.unsound_ratio): rounds whose median lies outside the interval are not to be trusted
    rounds = [0.97, 10.5, 0.92, 0.85, 10.1, 0.90, 9.9, 0.95, 13.6]
    bimodal = dict(figure, rounds=rounds, interval=list(stats.ratio_interval(rounds, 0.95)), outliers=[], noisy=False)
    assert mixed.speed_said("b1", bimodal).endswith(
        "; not to be trusted: the rounds' median 0.97x lies outside the interval [1.01, 7.55]: bimodal or outlying rounds)"
    )
    # a tight interval keeps its ends apart, as the table's line does (stats.interval_digits)
    tight = dict(figure, geomean=1.4808, interval=[1.4803, 1.4813], outliers=[], noisy=False, rounds=[1.4802, 1.481])
    assert mixed.speed_said("b1", tight).startswith("b1: 1.481x [1.480, 1.481] (2 rounds")
    quiet = {"cpu_count": 2, "loadavg_1m": 0.2, "finished_loadavg_1m": 0.3, "other_cores": 0.1}
    busy = dict(quiet, other_cores=1.4)
    assert mixed.machine_said([{"machine": quiet}]) == ""
    assert mixed.machine_said([{"machine": quiet}, {"machine": busy}]) == (
        ", timed while other processes kept 1.40 cores busy (a shared machine)"
    )


def test_an_int8_op_alone_between_float_ops_joins_them(tmp_path):
    """a -> b -> c (convolutions with ReLUs between): keeping a and c float leaves b alone in int8,
    paying a quantize and a dequantize for one op, so it joins them; with only a float, b keeps its
    int8 neighbour c and stays int8."""
    from onnx import TensorProto, helper, numpy_helper

    from precisionflow.quant import mixed

    weights = [numpy_helper.from_array(np.ones((2, 2, 1, 1), np.float32), f"w{i}") for i in range(3)]
    nodes, current = [], "x"
    for i, name in enumerate("abc"):
        nodes.append(helper.make_node("Conv", [current, f"w{i}"], [f"{name}_out"], name=name))
        nodes.append(helper.make_node("Relu", [f"{name}_out"], [f"{name}_relu"], name=f"{name}_relu"))
        current = f"{name}_relu"
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, [1, 2, 4, 4])],
        weights,
    )
    onnx.save(helper.make_model(graph), str(tmp_path / "chain.onnx"))
    assert mixed.join_isolated_int8(tmp_path / "chain.onnx", ["a", "b", "c"], ["a", "c"]) == ["a", "c", "b"]
    assert mixed.join_isolated_int8(tmp_path / "chain.onnx", ["a", "b", "c"], ["a"]) == ["a"]


def test_the_search_always_measures_int8_itself_on_the_selection_split():
    """A NOT BUILT reason once said "int8 breaks the budget" where int8 was never measured (measured
    afterwards: UNDECIDED, +0.00 [-2.58, +2.58])."""
    from precisionflow.quant import mixed

    labels = np.zeros(200, dtype=np.int64)
    asked = []

    def predictions(kept):  # 10 images lost with no op float, none with 3 or more
        asked.append(kept)
        wrong = np.zeros(200, dtype=bool)
        wrong[: max(0, 10 - 4 * kept)] = True
        return np.where(wrong, 1, 0)

    chosen, record = mixed.choose(8, predictions, labels.copy(), labels, 2.0, 0.95)
    assert 0 in asked and "0" in record["trials"] and chosen >= 1
    assert record["chosen_trial"] == chosen  # the trial the built mix's figures are read from
    assert "int8 itself drops +5.00" in mixed.int8_itself(record) and "beyond the budget" in mixed.int8_itself(record)


def test_int8_mixeds_cpu_graph_job_takes_the_timing_exclusivity():
    from precisionflow.config.compose import expand
    from precisionflow.pipeline.plan import build_plan

    plan = build_plan(expand(["precisions=[fp32,int8,int8_mixed]"]), "/tmp/precisionflow-mixed-timing")
    graphs = {key: spec for key, spec in plan["nodes"].items() if key.startswith("quantize_onnx/")}
    timed = sorted(key for key, spec in graphs.items() if spec["resources"].get("timing"))
    assert timed and all(key.startswith("quantize_onnx/int8_mixed-ortcpu") for key in timed), timed
