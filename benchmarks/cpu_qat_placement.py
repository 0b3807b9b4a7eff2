"""Issue 31: why int8_qat engines on the CPU placement disagreed with their QAT models, and the fixes.

Two causes, found on this machine:
1. On an x86 CPU without VNNI, ONNX Runtime's U8S8 kernels sum pairs of uint8 x int8 products in
   int16 (vpmaddubsw), which saturates when activation codes sit high -- a symmetric range puts
   the zero point at 128, and QAT learns symmetric ranges. Fix: 7-bit weights (reduce_range).
2. The placement quantized tensors QAT never rounded, with ranges measured on the float export of
   a model that relies on QAT's clipping (ResNet-50's pooled features: 0..33,546, so every pooled
   value rounded to 0). Fix: learned ranges carried through range-preserving ops, and no Q/DQ
   where QAT trained none (the float output layer's logits).
For each model's finished qat_placements run, this builds the int8_qat CPU graph from the same
cache three ways -- 8-bit weights and every Q/DQ (before), 7-bit weights, 7-bit weights and only
QAT's Q/DQ (now) -- and scores each on the test split against the QAT model in TensorFlow
(fake-quant on): agreement, top-1, what ran; and the speed of "now" against "before" side by side
(batch 32, alternating rounds).

    .venv/bin/python benchmarks/qat_placements.py mobilenet_v2 resnet50   (the runs it reads)
    .venv/bin/python benchmarks/cpu_qat_placement.py [mobilenet_v2 resnet50] [default=<a results folder>]
        -> benchmarks/results/cpu_qat_placement.json
(`default=/tmp/fresh/results`: the default experiment's own folder, after `precisionflow run`.)
"""

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, save  # noqa: E402


def cpu_flags() -> list:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return sorted(flag for flag in flags if "vnni" in flag or flag in ("avx2", "avx512f", "avx512bw", "amx_int8"))


def session(path: Path):
    import onnxruntime as ort

    from precisionflow.quant import qdq

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(
        str(path), options, providers=["CPUExecutionProvider"], disabled_optimizers=qdq.ORT_DISABLED_OPTIMIZERS
    )


def ran(path: Path) -> str:
    import onnx
    import onnxruntime as ort

    from precisionflow.backends.executed import compute_op_types
    from precisionflow.quant import qdq

    with tempfile.TemporaryDirectory() as folder:
        options = ort.SessionOptions()
        options.optimized_model_filepath = str(Path(folder) / "optimised.onnx")
        ort.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"], disabled_optimizers=qdq.ORT_DISABLED_OPTIMIZERS
        )
        counts = compute_op_types(onnx.load(options.optimized_model_filepath))
    return f"int8 {counts.get('int8', 0)}/{sum(counts.values())}"


def measure(results: Path) -> list:
    import onnx

    from precisionflow.datasets.store import Split
    from precisionflow import stats
    from precisionflow.measure import timing
    from precisionflow.hashing import file_hash
    from precisionflow.quant import cache, qdq

    node = json.loads(next(results.glob("quantize_onnx/int8_qat-ortcpu-*/node.json")).read_text())
    source = results / node["inputs"]["onnx"] / "model.onnx"
    ranges, lineage = cache.load_cache(results / node["inputs"]["calibration"], file_hash(source))
    test = Split(results / node["inputs"]["data"], "test")
    images = test.images(np.arange(len(test))).astype(np.float32)
    qat_logits = np.load(next(results.glob("finetune_model/qat-*/qat_logits.npy")))
    nodes = qdq.quantizable_nodes(onnx.load(str(source)), (), True)
    rows, runners = [], {}
    with tempfile.TemporaryDirectory() as folder:
        variants = {
            "8-bit weights, every Q/DQ (before)": (False, None),
            "7-bit weights, every Q/DQ": (True, None),
            "7-bit weights, only QAT's Q/DQ (now)": (True, lineage["ranges"]["learned_tensors"]),
        }
        for index, (name_of, (seven_bit, trained)) in enumerate(variants.items()):
            graph = Path(folder) / f"v{index}.onnx"
            qdq.quantize_int8(source, graph, ranges, nodes, "onnxruntime_cpu", trained, 7 if seven_bit else 8)
            engine = session(graph)
            name = engine.get_inputs()[0].name
            predicted = engine.run(None, {name: images})[0].argmax(1)
            batch = images[:32]
            runners[index] = lambda s, engine=engine, name=name, batch=batch: timing.window_throughput(
                lambda: engine.run(None, {name: batch}), len(batch), s
            )
            rows.append(
                {
                    "graph": name_of,
                    "ran": ran(graph),
                    "agreement_with_qat_model": round(float(np.mean(predicted == qat_logits.argmax(1))), 4),
                    "top1": round(float(np.mean(predicted == test.labels)), 4),
                    "test_images": len(test),
                }
            )
        measured = timing.alternating_rounds({0: runners[0], 2: runners[2]}, rounds=8, window_s=0.5)
    speed = stats.ratio_stats(measured[2], measured[0])
    rows[2]["throughput_vs_before_b32"] = {key: round(speed[key], 3) for key in ("geomean", "min", "max")}
    return rows


def main() -> None:
    found = {"cpu_flags": cpu_flags(), "models": {}}
    for model in sys.argv[1:] or ["mobilenet_v2", "resnet50"]:
        model, _, folder = model.partition("=")
        found["models"][model] = measure(Path(folder) if folder else OUT / "qat_placements" / model)
        print(model, json.dumps(found["models"][model]), flush=True)
    save("cpu_qat_placement.json", found)


if __name__ == "__main__":
    main()
