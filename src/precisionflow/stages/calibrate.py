"""calibrate: activation ranges of an fp32 graph -> a calibration cache with lineage.

source=ptq: ONNX Runtime's calibrator (entropy, minmax or percentile) on samples of one split.
source=qat: the ranges quantization-aware fine-tuning learned (mapped to this graph's tensors by
export_onnx), with minmax-measured ranges for tensors QAT had no quantizer on.
The cache depends on the graph, the samples and the method only -- not on any GPU -- so one
calibration serves every target's int8 engine.
"""

import hashlib
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from precisionflow.errors import ConfigError
from precisionflow.hashing import file_hash
from precisionflow.nodeio import read_json, read_node
from precisionflow.quant import cache, qdq
from precisionflow.quant.reader import array_reader, graph_input_name
from precisionflow.datasets.facts import DataFacts
from precisionflow.datasets.store import Split
from precisionflow.stages import NodeContext

PACKAGES = ("onnx", "onnxruntime", "numpy")
CALIBRATION_KEYS = ("method", "num_samples", "batch_size", "split", "sampling", "seed", "exclude_conditions")
# Ranges for every tensor either placement quantizes: TensorRT's (inputs of Conv/MatMul/Gemm and of
# residual Adds) and ONNX Runtime's CPU placement (outputs of the ops it fuses into integer kernels).
CALIBRATED_OPS = [
    "Add",
    "Mul",
    "Relu",
    "Clip",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "Concat",
    "Reshape",
    "Flatten",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "Sigmoid",
    "HardSigmoid",
    "HardSwish",
    "LeakyRelu",
    "Pad",
]


# The entropy calibrator's histogram: 2048 bins searched for the 128-level threshold of least KL
# divergence, as TensorRT's EntropyCalibration2 does. ONNX Runtime's defaults (128 bins, 128 levels)
# leave the search a single candidate -- the full range -- so "entropy" ranges were minmax ranges.
ENTROPY_HISTOGRAM = {"num_bins": 2048, "num_quantized_bins": 128}


def node_params(at: NodeContext) -> Dict[str, Any]:
    """source=ptq: the configured calibrator; source=qat: learned ranges, minmax only fills
    tensors QAT has no quantizer on. The percentile is read only by the percentile method; the
    TensorRT cache header version only when a cache is exported (track_mlflow)."""
    cfg, source = at.cfg, at.source
    params = {key: cfg["calibration"][key] for key in CALIBRATION_KEYS}
    params["source"] = source
    if source == "qat":
        params["method"] = "minmax"
    if params["method"] == "percentile":
        params["percentile"] = cfg["calibration"]["percentile"]
    return params


def preflight(at: NodeContext, data: DataFacts) -> List[str]:
    """Before anything runs, the calibration settings against what the data node will hold
    (datasets.facts.DataFacts): more samples than the split has and a condition name the test split
    does not carry are refused; a sample that would barely see some classes or conditions gives
    the warnings returned (printed once per plan)."""
    calibration = at.cfg["calibration"]
    from precisionflow.datasets import conditions

    split, wanted = calibration["split"], calibration["num_samples"]
    available = data.split_sizes[split]
    if wanted > available:
        raise ConfigError(
            f"calibration.num_samples={wanted}, but the {split} split has {available} images: lower "
            "calibration.num_samples (or calibrate on a larger split, calibration.split=train|val)."
        )
    warnings = [thin_class_warning(data.classes(split), calibration)]
    calibration_tags = data.conditions(split)
    if calibration_tags is not None or calibration["exclude_conditions"]:
        test_tags = data.conditions("test") or {}
        conditions.check_named(calibration["exclude_conditions"], test_tags, "calibration.exclude_conditions")
        warnings.append(coverage_warning(test_tags, calibration_tags or {}, calibration, available))
    return [warning for warning in warnings if warning]


def coverage_warning(
    test_tags: Dict[str, int], calibration_tags: Dict[str, int], calibration: Dict[str, Any], split_images: int
) -> Optional[str]:
    """The warning for conditions the test split holds but the calibration sample would hold (about)
    fewer than calibration.min_per_class images of -- absent, excluded or rare; None if none."""
    excluded = set(calibration["exclude_conditions"])
    kept = split_images - sum(calibration_tags.get(tag, 0) for tag in excluded)  # about: tags overlap
    share = min(1.0, calibration["num_samples"] / max(kept, 1))
    thin = {
        tag: (0 if tag in excluded else int(calibration_tags.get(tag, 0) * share), count)
        for tag, count in sorted(test_tags.items())
        if count and (tag in excluded or calibration_tags.get(tag, 0) * share < calibration["min_per_class"])
    }
    if not thin:
        return None
    named = ", ".join(
        f"{tag} (test {count}, calibration about {drawn}{', excluded' if tag in excluded else ''})"
        for tag, (drawn, count) in thin.items()
    )
    return (
        f"precisionflow: warning: the calibration sample would hold fewer than calibration.min_per_class="
        f"{calibration['min_per_class']} images of condition(s) the test split holds: {named}. The int8 ranges "
        "barely see them: read their per-condition rows beside this coverage."
    )


def thin_class_warning(class_counts: Optional[Dict[str, int]], calibration: Dict[str, Any]) -> Optional[str]:
    """The warning for classes a calibration sample would hold fewer than calibration.min_per_class
    images of (the sample drawn as calibration.sampling draws it), naming them; None if none."""
    from precisionflow.datasets import sampling

    if not class_counts:
        return None
    count, rule = calibration["num_samples"], str(getattr(calibration["sampling"], "value", calibration["sampling"]))
    if rule == "first":  # files are listed class by class: the first N fill the first classes
        planned, left = {}, count
        for name, size in class_counts.items():
            planned[name], left = min(size, left), left - min(size, left)
    elif rule == "stratified":
        planned = sampling.allocation(class_counts, count)
    else:
        total = max(sum(class_counts.values()), 1)
        planned = {name: round(count * size / total) for name, size in class_counts.items()}
    thin = sampling.thin_strata(planned, calibration["min_per_class"])
    if not thin:
        return None
    named = ", ".join(f"{name} ({found})" for name, found in sorted(thin.items(), key=lambda item: item[1]))
    return (
        f"precisionflow: warning: the {calibration['split']} split's calibration sample ({count} images, "
        f"sampling={rule}) would hold fewer than calibration.min_per_class={calibration['min_per_class']} images of "
        f"{len(thin)} class(es): {named}. The int8 ranges then barely see them: raise calibration.num_samples, "
        "use sampling=stratified, or add images of those classes."
    )


def _calibrator(graph: Path, params: Dict[str, Any], scratch: Path):
    from onnxruntime.quantization import CalibrationMethod, create_calibrator

    methods = {
        "entropy": CalibrationMethod.Entropy,
        "minmax": CalibrationMethod.MinMax,
        "percentile": CalibrationMethod.Percentile,
    }
    if params["method"] not in methods:
        raise ConfigError(f"calibration.method: expected one of {sorted(methods)}, found '{params['method']}'.")
    extra = {"percentile": params["percentile"]} if params["method"] == "percentile" else {}
    if params["method"] == "entropy":
        extra = dict(ENTROPY_HISTOGRAM)
    op_types = list(qdq.COMPUTE_OPS) + CALIBRATED_OPS
    return create_calibrator(
        str(graph),
        op_types,
        augmented_model_path=str(scratch / "augmented.onnx"),
        calibrate_method=methods[params["method"]],
        extra_options=extra,
    )


def calibration_samples(data_dir: Path, params: Dict[str, Any]):
    """(the drawn images as float32, the draw's record: rule, seed, images per class)."""
    from precisionflow.datasets import sampling

    split = Split(data_dir, params["split"])  # only the samples drawn are read
    if len(split) < params["num_samples"]:
        raise ConfigError(
            f"calibration.num_samples={params['num_samples']} but the '{params['split']}' split holds "
            f"{len(split)} images; lower num_samples or calibrate on a larger split."
        )
    drawn = sampling.sample_split(
        split, params["num_samples"], params.get("sampling", "first"), params.get("seed", 0), params.get("exclude_conditions", ())
    )
    indices = drawn.pop("indices")
    return split.images(indices), {**drawn, "indices_sha256": hashlib.sha256(indices.tobytes()).hexdigest()}


# ONNX Runtime's calibrators hold every calibrated tensor of every sample given to one collect_data
# call before reducing them (ResNet-50 at 224x224: ~100 MB per image; 128 images were killed at
# 14 GB). Samples are given in calls that stay under this many bytes of activations.
ACTIVATION_BUDGET_BYTES = 2 * 1024**3


def samples_per_call(
    calibrator, input_name: str, samples: np.ndarray, batch_size: int, budget: int = ACTIVATION_BUDGET_BYTES
) -> int:
    """How many samples one collect_data call may take: all of them when their activations fit the
    budget (the result is then exactly ONNX Runtime's one-call calibration), else as many as fit, in
    whole batches. Later calls merge into earlier ones: min/max exactly, histograms (entropy,
    percentile) by ONNX Runtime's histogram merge, which is close but not identical."""
    one = np.ascontiguousarray(samples[:1], dtype=np.float32)
    per_sample = sum(np.asarray(value).nbytes for value in calibrator.infer_session.run(None, {input_name: one}))
    fitting = max(1, budget // max(per_sample, 1))
    if fitting >= len(samples):
        return len(samples)
    return max(batch_size, batch_size * (fitting // batch_size)) if fitting >= batch_size else fitting


def measure_ranges(graph: Path, samples: np.ndarray, params: Dict[str, Any], budget: int = ACTIVATION_BUDGET_BYTES):
    with tempfile.TemporaryDirectory(prefix="pf-calib-") as scratch:
        # ONNX Runtime's calibrator writes model-inferred.onnx next to the graph it is given: give it a
        # copy in scratch, never the export node's own file (a finished node is never written, and two
        # calibrations of one export would delete each other's file).
        graph = Path(shutil.copy(graph, Path(scratch) / "model.onnx"))
        calibrator = _calibrator(graph, params, Path(scratch))
        name = graph_input_name(graph)
        per_call = samples_per_call(calibrator, name, samples, params["batch_size"], budget)
        for start in range(0, len(samples), per_call):
            calibrator.collect_data(array_reader(name, samples[start : start + per_call], params["batch_size"]))
        computed = calibrator.compute_data()
    # minmax gives 1-element arrays, entropy/percentile scalars.
    return {name: tuple(float(np.asarray(v).reshape(-1)[0]) for v in data.range_value) for name, data in computed.data.items()}


def qat_ranges(export_dir: Path, measured):
    """Learned QAT ranges where the fine-tune learned one; measured (minmax) ranges elsewhere.

    QAT learns one range per quantized layer output; ONNX Runtime also puts Q/DQ on tensors QAT
    has no quantizer for (e.g. a conv's pre-activation output), and those keep a measured range.
    """
    learned = read_json(export_dir / "qat_tensor_ranges.json")["ranges"]
    unknown = sorted(set(learned) - set(measured))
    ranges = dict(measured)
    ranges.update({name: tuple(bounds) for name, bounds in learned.items()})
    return ranges, {
        "learned": len(learned),
        "measured": len(set(measured) - set(learned)),
        "not_measured": unknown,
        "learned_tensors": sorted(learned),
    }


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    graph = inputs["onnx"] / "model.onnx"
    samples, drawn = calibration_samples(inputs["data"], params)
    started = time.perf_counter()
    ranges = measure_ranges(graph, samples, params)
    lineage = {
        "source": params["source"],
        "method": params["method"],
        "settings": params,
        "graph_sha256": file_hash(graph),
        "samples_sha256": hashlib.sha256(samples.tobytes()).hexdigest(),
        "sample_count": int(len(samples)),
        "sample": drawn,  # how it was drawn and how many images of each class it holds
        "model_node": inputs["onnx"].name,
    }
    if params["source"] == "qat":
        ranges, counts = qat_ranges(inputs["onnx"], ranges)
        lineage.update({"training_node": read_node(inputs["onnx"])["inputs"]["model"], "ranges": counts})
    seconds = time.perf_counter() - started
    cache.write_cache(out, ranges, lineage)
    return {
        "tensors": len(ranges),
        "seconds": round(seconds, 3),
        "method": params["method"],
        "source": params["source"],
        "sample_count": len(samples),
        "sample_per_class": drawn.get("per_class"),
        "sample_per_condition": drawn.get("per_condition"),
        "graph_sha256": lineage["graph_sha256"],
    }
