"""Issue 31: why an int8_qat engine on the CPU placement disagreed with its QAT model, and the fix.

On an x86 CPU without VNNI, ONNX Runtime's U8S8 kernels sum pairs of uint8 x int8 products in int16
(vpmaddubsw), which saturates when activation codes sit high -- a symmetric range puts the zero
point at 128, and QAT learns symmetric ranges. For each model's finished qat_placements run, this
builds the int8_qat CPU graph from the same cache twice, weights in 8 bits (before) and in 7 bits
(ONNX Runtime's reduce_range, now the CPU placement's), and scores both on the test split against
the QAT model in TensorFlow (fake-quant on): agreement, top-1, what ran, and speed side by side
(batch 32, alternating rounds).

    .venv/bin/python benchmarks/qat_placements.py mobilenet_v2 resnet50   (the runs it reads)
    .venv/bin/python benchmarks/cpu_weight_bits.py [mobilenet_v2 resnet50] [default=<a results folder>]
        -> benchmarks/results/cpu_weight_bits.json
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
    from precisionflow.measure import timing
    from precisionflow.pipeline.nodeio import file_hash
    from precisionflow.quant import cache, qdq

    node = json.loads(next(results.glob("quantize_onnx/int8_qat-ortcpu-*/node.json")).read_text())
    source = results / node["inputs"]["onnx"] / "model.onnx"
    ranges, _ = cache.load_cache(results / node["inputs"]["calibration"], file_hash(source))
    test = Split(results / node["inputs"]["data"], "test")
    images = test.images(np.arange(len(test))).astype(np.float32)
    qat_logits = np.load(next(results.glob("finetune_model/qat-*/qat_logits.npy")))
    nodes = qdq.quantizable_nodes(onnx.load(str(source)), (), True)
    rows, runners = [], {}
    with tempfile.TemporaryDirectory() as folder:
        for bits in (8, 7):
            graph = Path(folder) / f"w{bits}.onnx"
            qdq.CPU_WEIGHTS_7BIT = bits == 7
            qdq.quantize_int8(source, graph, ranges, nodes, "onnxruntime_cpu")
            engine = session(graph)
            name = engine.get_inputs()[0].name
            predicted = engine.run(None, {name: images})[0].argmax(1)
            batch = images[:32]
            runners[bits] = lambda s, engine=engine, name=name, batch=batch: timing.window_throughput(
                lambda: engine.run(None, {name: batch}), len(batch), s
            )
            rows.append(
                {
                    "weight_bits": bits,
                    "ran": ran(graph),
                    "agreement_with_qat_model": round(float(np.mean(predicted == qat_logits.argmax(1))), 4),
                    "top1": round(float(np.mean(predicted == test.labels)), 4),
                    "test_images": len(test),
                }
            )
        measured = timing.alternating_rounds({bits: runners[bits] for bits in (8, 7)}, rounds=8, window_s=0.5)
    speed = timing.ratio_stats(measured[7], measured[8])
    rows[1]["throughput_vs_8bit_b32"] = {key: round(speed[key], 3) for key in ("median", "min", "max")}
    return rows


def main() -> None:
    found = {"cpu_flags": cpu_flags(), "models": {}}
    for model in sys.argv[1:] or ["mobilenet_v2", "resnet50"]:
        model, _, folder = model.partition("=")
        found["models"][model] = measure(Path(folder) if folder else OUT / "qat_placements" / model)
        print(model, json.dumps(found["models"][model]), flush=True)
    save("cpu_weight_bits.json", found)


if __name__ == "__main__":
    main()
