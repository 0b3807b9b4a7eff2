import pytest

from precisionflow.errors import LineageError
from precisionflow.quant import cache

RANGES = {"conv0:0": (-2.5, 3.75), "dense/MatMul:0": (-0.125, 0.1), "logits": (-10.0, 12.7)}


@pytest.mark.parametrize("version, code", [("10.14.1", "101401"), ("11.4.0", "110400"), ("8.6.1", "8601")])
def test_header_version_follows_nv_tensorrt_version(version, code):
    assert cache.trt_version_code(version) == code


def test_trt_cache_round_trips_to_the_same_scales(tmp_path):
    text = cache.to_trt_text(RANGES, "10.14.1")
    header, scales = cache.parse_trt_text(text)
    assert header == "TRT-101401-EntropyCalibration2"
    assert set(scales) == set(RANGES)
    for name, (low, high) in RANGES.items():
        assert scales[name] == pytest.approx(max(abs(low), abs(high)) / 127, rel=1e-7)
    # big-endian float32 bits: 3.75 / 127
    assert "conv0:0: 3cf1e3c8" in text


def test_cache_writes_all_formats(tmp_path):
    cache.write_cache(tmp_path, RANGES, {"graph_sha256": "abc", "source": "ptq", "method": "entropy"})
    for name in ("ranges.json", "ort/calibration.json", "ort/calibration.flatbuffers", "ort/calibration.cache"):
        assert (tmp_path / name).is_file(), name
    ranges, lineage = cache.load_cache(tmp_path, "abc")
    assert ranges == RANGES and lineage["source"] == "ptq"
    text = cache.write_trt_cache(tmp_path, tmp_path / "export" / "calibration.trt.cache", "10.14.1").read_text()
    header, scales = cache.parse_trt_text(text)
    assert header == "TRT-101401-EntropyCalibration2" and set(scales) == set(RANGES)


def test_cache_of_another_model_is_refused(tmp_path):
    cache.write_cache(tmp_path, RANGES, {"graph_sha256": "a" * 64, "source": "ptq", "model_node": "opset17-111"})
    with pytest.raises(LineageError) as caught:
        cache.load_cache(tmp_path, "b" * 64)
    message = str(caught.value)
    assert "computed on graph aaaaaaaaaaaaaaaa" in message
    assert "model node opset17-111" in message
    assert f"delete {tmp_path} and run precisionflow run again" in message


@pytest.mark.parametrize(
    "lineage, algorithm",
    [
        ({"source": "ptq", "method": "entropy"}, "EntropyCalibration2"),
        ({"source": "ptq", "method": "minmax"}, "MinMaxCalibration"),
        ({"source": "ptq", "method": "percentile"}, "LegacyCalibration"),
        ({"source": "qat", "method": "minmax"}, "MinMaxCalibration"),  # QAT's learned ranges, used as they are
    ],
)
def test_trt_cache_header_names_the_method_that_made_the_ranges(tmp_path, lineage, algorithm):
    cache.write_cache(tmp_path, RANGES, {"graph_sha256": "abc", **lineage})
    header, _ = cache.parse_trt_text(cache.write_trt_cache(tmp_path, tmp_path / "x.cache", "10.14.1").read_text())
    assert header == f"TRT-101401-{algorithm}"
    # the form TensorRT's calibrators check: TRT-<NV_TENSORRT_VERSION>-<CalibrationAlgoType name>
    assert algorithm in {"EntropyCalibration2", "EntropyCalibration", "MinMaxCalibration", "LegacyCalibration"}


def test_a_cache_of_unknown_method_gets_no_header_it_did_not_earn(tmp_path):
    cache.write_cache(tmp_path, RANGES, {"graph_sha256": "abc", "source": "ptq", "method": "magic"})
    with pytest.raises(LineageError, match="expected a method among"):
        cache.write_trt_cache(tmp_path, tmp_path / "x.cache", "10.14.1")


def test_onnx_runtimes_cache_holds_the_largest_absolute_value(tmp_path):
    import json

    ranges = {"logits": (-53.08, 31.03), "relu": (0.0, 6.0)}
    cache.write_cache(tmp_path, ranges, {"source": "ptq", "method": "entropy", "graph_sha256": "x"})
    written = dict(line.split() for line in (tmp_path / "ort" / "calibration.cache").read_text().splitlines())
    assert float(written["logits"]) == pytest.approx(53.08) and float(written["relu"]) == pytest.approx(6.0)
    exact = json.loads((tmp_path / "ranges.json").read_text())["ranges"]
    assert exact["logits"] == pytest.approx([-53.08, 31.03])  # the asymmetric range is kept where quantize_onnx reads it
