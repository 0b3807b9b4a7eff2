"""evaluate_engine: how accurate and how fast one engine really is.

Accuracy on the whole test split, per class, and per-sample agreement with the fp32 Keras
reference (the samples whose prediction flipped are listed in flipped.csv); latency and
throughput at each timing batch size and with concurrent streams, measured like trtexec
(speed.py, timing.py). Imports numpy and the engine's backend only, so it also runs on a GPU
machine without TensorFlow.
"""

import csv
from pathlib import Path
from typing import Any, Dict

import numpy as np

from precisionflow.measure import speed
from precisionflow.backends import get_backend
from precisionflow.reporting.compare import HEADLINE_METRICS, PER_SAMPLE_FILE, task_of
from precisionflow.datasets.store import Split, predict_in_batches
from precisionflow.nodeio import read_json, read_node, write_json_atomic
from precisionflow.measure.targets import device_params, timing_settings
from precisionflow.stages import NodeContext

PACKAGES = ("numpy",)  # the backend's own version is in params["runtime"]


def node_params(at: NodeContext) -> Dict[str, Any]:
    cfg, precision, target, runtime = at.cfg, at.precision, at.target, at.runtime
    evaluate = {"batch_size": cfg["evaluate"]["batch_size"], **timing_settings(cfg, target)}
    task = {"task": cfg["task"]}
    if cfg["task"] == "detection":  # decoding and box matching: read only for detection
        task["detection"] = dict(cfg["evaluate"]["detection"])
    return {
        "evaluate": evaluate,
        "precision": precision,
        **task,
        "backend": cfg["engine"]["backend"],
        **device_params(cfg, target, runtime),
    }


def predict(engine, test: Split, batch_size: int) -> np.ndarray:
    """The engine's logits on the test split, read a batch at a time (only N x classes is kept)."""
    return predict_in_batches(engine.run, test, batch_size)


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def accuracy_report(logits, reference_logits, labels, class_names) -> Dict[str, Any]:
    predicted, reference = logits.argmax(axis=1), reference_logits.argmax(axis=1)
    per_class = {
        name: float(np.mean(predicted[labels == index] == index))
        for index, name in enumerate(class_names)
        if np.any(labels == index)
    }
    report = {
        "test_images": int(len(labels)),
        "top1": float(np.mean(predicted == labels)),
        "reference_top1": float(np.mean(reference == labels)),
        "agreement": float(np.mean(predicted == reference)),
        "flipped": int(np.sum(predicted != reference)),
        "flipped_to_wrong": int(np.sum((predicted != reference) & (reference == labels))),
        "flipped_to_right": int(np.sum((predicted != reference) & (predicted == labels))),
        "max_abs_logit_diff": float(np.max(np.abs(logits - reference_logits))),
        "non_finite_outputs": int(np.sum(~np.isfinite(logits))),
        "per_class_top1": per_class,
    }
    if len(class_names) > 5:
        top5 = np.argsort(-logits, axis=1)[:, :5]
        report["top5"] = float(np.mean(np.any(top5 == labels[:, None], axis=1)))
    return report


def write_flipped(path: Path, logits, reference_logits, labels) -> None:
    """Every test sample the engine decides differently from fp32, both predictions with their
    confidence, and which side was right -- flips go both ways."""
    predicted, reference = logits.argmax(axis=1), reference_logits.argmax(axis=1)
    confidence, reference_confidence = softmax(logits).max(axis=1), softmax(reference_logits).max(axis=1)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["test_index", "label", "fp32_prediction", "fp32_confidence", "engine_prediction", "engine_confidence", "right"]
        )
        for index in np.flatnonzero(predicted != reference):
            right = "fp32" if reference[index] == labels[index] else "engine" if predicted[index] == labels[index] else "neither"
            writer.writerow(
                [
                    int(index),
                    int(labels[index]),
                    int(reference[index]),
                    round(float(reference_confidence[index]), 4),
                    int(predicted[index]),
                    round(float(confidence[index]), 4),
                    right,
                ]
            )


def agreement_with(logits: np.ndarray, other_logits: np.ndarray) -> Dict[str, float]:
    return {
        "agreement": float(np.mean(logits.argmax(axis=1) == other_logits.argmax(axis=1))),
        "max_abs_logit_diff": float(np.max(np.abs(logits - other_logits))),
    }


def qat_fidelity(logits: np.ndarray, inputs: Dict[str, Path]) -> Dict[str, Any]:
    """int8_qat: does the engine compute what QAT trained? Against the QAT model in TensorFlow with
    fake-quant on (deployed == trained), and against the fine-tuned model with fake-quant off
    (the seeds' "QAT within 1% of fp32" compares those two)."""
    return {
        "vs_qat_model": agreement_with(logits, np.load(inputs["qat_model"] / "qat_logits.npy", allow_pickle=False)),
        "vs_qat_float": agreement_with(logits, np.load(inputs["qat_export"] / "reference_logits.npy", allow_pickle=False)),
    }


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    engine_node = read_node(inputs["engine"])
    description = read_json(inputs["engine"] / "engine.json")
    backend = get_backend(description["backend"])
    load = lambda: backend.load(inputs["engine"], description, engine_node["params"]["target_def"])
    engine = load()
    test = Split(inputs["data"], "test")
    reference_logits = np.load(inputs["reference"] / "reference_logits.npy", allow_pickle=False)
    logits = predict(engine, test, params["evaluate"]["batch_size"])
    if params.get("task") == "detection":
        from precisionflow.detection.evaluation import report as detection_report

        metrics = detection_report(logits, reference_logits, test, params["detection"], out, inputs)
    else:
        metrics = accuracy_report(logits, reference_logits, test.labels, test.classes)
        # Per image, so a verdict can pair this engine with its fp32 engine on the same images.
        np.savez(
            out / PER_SAMPLE_FILE,
            predictions=logits.argmax(axis=1).astype(np.int32),
            labels=np.asarray(test.labels, dtype=np.int32),
        )
        if "qat_model" in inputs:
            metrics["qat"] = qat_fidelity(logits, inputs)
        write_flipped(out / "flipped.csv", logits, reference_logits, test.labels)
    metrics["task"] = params.get("task", "classification")
    metrics["speed"] = speed.measure(load, speed.timing_images(test, params["evaluate"]), params["evaluate"], engine)
    metrics.update({"precision": params["precision"], "target": params["target"], "engine": description})
    write_json_atomic(out / "metrics.json", metrics)
    return {key: metrics[key] for key in HEADLINE_METRICS[task_of(metrics)] + ("precision", "target")}
