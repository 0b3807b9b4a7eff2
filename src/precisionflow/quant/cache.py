"""The calibration cache: the one interface between range sources (PTQ, QAT) and quantization.

A calibrate node holds
  ranges.json             {"ranges": {tensor: [min, max]}, "lineage": {...}} -- ours, read by quantize_onnx
  ort/                    ONNX Runtime's calibration.json / .flatbuffers / .cache tables
TensorRT's native text cache (TensorRT <= 10, DeepStream, tao-converter) carries the TensorRT
version in its header, so it is written where that version is known (write_trt_cache, used when
the cache is exported with an engine's MLflow run): changing the header version re-exports the
text, it does not recalibrate.
Lineage (graph hash, sample hash, method, count, versions) travels with it; a cache is refused
for any graph other than the one it was computed on.
"""

import struct
from pathlib import Path
from typing import Dict, Tuple

from precisionflow.errors import LineageError
from precisionflow.nodeio import read_json, write_json_atomic

RANGES_FILE = "ranges.json"
TRT_CACHE_FILE = "calibration.trt.cache"
# The header's last field names the TensorRT calibrator (CalibrationAlgoType) the ranges match;
# TensorRT's calibrators skip a cache whose header names another one, so the name must be true.
TRT_ALGORITHMS = {
    "entropy": "EntropyCalibration2",  # KL-divergence thresholds, as IInt8EntropyCalibrator2
    "minmax": "MinMaxCalibration",  # the observed |x| maximum, as IInt8MinMaxCalibrator
    # a quantile of |x| (clipping the tail): TensorRT's quantile-based calibrator is the legacy one
    "percentile": "LegacyCalibration",
}
QAT_ALGORITHM = "MinMaxCalibration"  # QAT's learned ranges are used as they are: amax / 127, no search

Ranges = Dict[str, Tuple[float, float]]


def trt_version_code(version: str) -> str:
    """TensorRT's NV_TENSORRT_VERSION: 10.14.1 -> 101401 (10.x: MMmmpp), 8.6.1 -> 8601 (8.x: Mmpp)."""
    try:
        major, minor, patch = (int(part) for part in (version.split(".") + ["0", "0"])[:3])
    except ValueError as err:
        raise ValueError(f"calibration.tensorrt_version: expected 'major.minor.patch', found '{version}'.") from err
    return str(major * 10000 + minor * 100 + patch if major >= 10 else major * 1000 + minor * 100 + patch)


def scale_of(low: float, high: float) -> float:
    """Symmetric int8 scale: amax / 127 (zero point 0)."""
    return max(abs(low), abs(high)) / 127.0


def trt_algorithm(lineage: Dict) -> str:
    """The calibrator name of a cache's header, from the lineage of its ranges."""
    if lineage.get("source") == "qat":
        return QAT_ALGORITHM
    method = lineage.get("method")
    if method not in TRT_ALGORITHMS:
        raise LineageError(
            f"calibration cache lineage: expected a method among {sorted(TRT_ALGORITHMS)} (or QAT ranges), "
            f"found '{method}'; recalibrate (delete the calibrate node and run again)."
        )
    return TRT_ALGORITHMS[method]


def to_trt_text(ranges: Ranges, tensorrt_version: str, algorithm: str = TRT_ALGORITHMS["entropy"]) -> str:
    lines = [f"TRT-{trt_version_code(tensorrt_version)}-{algorithm}"]
    for name in sorted(ranges):
        lines.append(f"{name}: {struct.pack('!f', scale_of(*ranges[name])).hex()}")
    return "\n".join(lines) + "\n"


def parse_trt_text(text: str) -> Tuple[str, Dict[str, float]]:
    """(header, {tensor: scale}) of a TensorRT calibration cache."""
    header, *lines = [line for line in text.splitlines() if line.strip()]
    scales = {}
    for line in lines:
        name, _, hex_scale = line.rpartition(": ")
        scales[name] = struct.unpack("!f", bytes.fromhex(hex_scale.strip()))[0]
    return header, scales


def write_cache(folder: Path, ranges: Ranges, lineage: Dict) -> None:
    folder = Path(folder)
    write_json_atomic(
        folder / RANGES_FILE, {"ranges": {k: [float(lo), float(hi)] for k, (lo, hi) in ranges.items()}, "lineage": lineage}
    )
    _write_ort_tables(folder / "ort", ranges)


def write_trt_cache(cache_folder: Path, target: Path, tensorrt_version: str) -> Path:
    """TensorRT's text cache of a calibrate node's ranges, written to `target` (another node's folder)."""
    data = read_json(Path(cache_folder) / RANGES_FILE)
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    Path(target).write_text(
        to_trt_text(
            {name: tuple(bounds) for name, bounds in data["ranges"].items()}, tensorrt_version, trt_algorithm(data["lineage"])
        )
    )
    return Path(target)


def _write_ort_tables(folder: Path, ranges: Ranges) -> None:
    """ONNX Runtime's tables (calibration.json, .flatbuffers, .cache: what its TensorRT provider
    reads as dynamic ranges). Each holds one symmetric dynamic range per tensor, and ONNX Runtime's
    writer takes max(highest, lowest) -- for [-53.08, 31.03] that is 31.03, understating the tensor.
    So they are written from the symmetric range [-m, m], m = the largest absolute value; the exact
    asymmetric ranges stay in ranges.json."""
    import numpy as np
    from onnxruntime.quantization.calibrate import TensorData
    from onnxruntime.quantization.quant_utils import write_calibration_table

    folder.mkdir(parents=True, exist_ok=True)
    table = {}
    for name, (low, high) in ranges.items():
        bound = np.float32(max(abs(low), abs(high)))
        table[name] = TensorData(lowest=-bound, highest=bound)
    write_calibration_table(table, dir=str(folder))


def load_cache(folder: Path, graph_sha256: str) -> Tuple[Ranges, Dict]:
    """Ranges and lineage of a cache, refused unless it was computed on the graph with this hash."""
    data = read_json(Path(folder) / RANGES_FILE)
    lineage = data["lineage"]
    if lineage.get("graph_sha256") != graph_sha256:
        raise LineageError(
            f"The calibration cache in {folder} was computed on graph {lineage.get('graph_sha256', '?')[:16]} "
            f"(model node {lineage.get('model_node', '?')}, source {lineage.get('source', '?')}), but the graph "
            f"being quantized is {graph_sha256[:16]}. Expected a cache of this graph: delete {folder} and run "
            "precisionflow run again (it recalibrates this model) instead of reusing another model's cache."
        )
    return {name: (lo, hi) for name, (lo, hi) in data["ranges"].items()}, lineage
