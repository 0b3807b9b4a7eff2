"""Build and measure engines from precision graphs with the project's own backend and speed code,
plus an independent plain ONNX Runtime timing loop of the same graphs (the cross-check).

Needs only numpy, onnx and onnxruntime (the GPU machine has no TensorFlow/Snakemake/MLflow):

    PYTHONPATH=src python benchmarks/engines_on_device.py --inputs DIR --out OUT [--device cuda|cpu]

DIR holds one folder per model: data.npz (x_test, y_test), reference_logits.npy and one folder per
precision with model.onnx -- benchmarks/collect_graphs.py makes it from a finished run.
"""

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

SETTINGS = {
    "timing_batch_sizes": [1, 32, 128],
    "warmup_s": 0.5,
    "duration_s": 1.0,
    "min_iterations": 50,
    "repeats": 3,
    "streams": [1, 4, 8],
    "stream_batch_size": 1,
}


def independent_latency_ms(graph: Path, device: str, batch: np.ndarray, runs: int = 2000) -> dict:
    """A plain ONNX Runtime loop, written apart from precisionflow's timing code."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    providers = (
        [("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
    )
    session = ort.InferenceSession(str(graph), options, providers=providers)
    name = session.get_inputs()[0].name
    if device == "cuda":
        binding = session.io_binding()
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(batch, "cuda", 0))
        binding.bind_output(session.get_outputs()[0].name, "cuda", 0)
        call = lambda: session.run_with_iobinding(binding)
    else:
        call = lambda: session.run(None, {name: batch})
    for _ in range(200):
        call()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return {"mean_ms": 1000 * float(np.mean(samples)), "median_ms": 1000 * float(np.median(samples))}


def measure_graph(graph: Path, engine_dir: Path, device: str, images, labels, reference) -> dict:
    from precisionflow.measure import speed
    from precisionflow.backends import onnxruntime_backend as backend
    from precisionflow.stages.evaluate_engine import accuracy_report, predict

    engine_dir.mkdir(parents=True, exist_ok=True)
    params = {"optimization_level": "all", "intra_op_threads": 1}
    description = backend.build(graph, engine_dir, params, {"device": device})
    load = lambda: backend.load(engine_dir, description, {"device": device})
    accuracy = accuracy_report(predict(load(), images, 64), reference, labels, [str(i) for i in range(reference.shape[1])])
    measured = speed.measure(load, images, SETTINGS)
    ours = measured["batch"]["1"]
    plain = independent_latency_ms(graph, device, speed.timing_batch(images, 1))
    return {
        "engine": description,
        "accuracy": {k: v for k, v in accuracy.items() if k != "per_class_top1"},
        "speed": measured,
        "independent_b1": plain,
        "b1_mean_ms_ours_vs_plain_percent": 100 * (ours["mean_ms"] / plain["mean_ms"] - 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inputs", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    if args.device == "cuda":
        import onnxruntime

        onnxruntime.preload_dlls()  # the pip CUDA/cuDNN libraries onnxruntime-gpu was built against
    results = {"host": platform.node(), "settings": SETTINGS, "models": {}}
    for model_dir in sorted(p for p in args.inputs.iterdir() if p.is_dir()):
        with np.load(model_dir / "data.npz") as data:
            images, labels = data["x_test"], data["y_test"]
        reference = np.load(model_dir / "reference_logits.npy")
        for graph in sorted(model_dir.glob("*/model.onnx")):
            key = f"{model_dir.name}/{graph.parent.name}"
            results["models"][key] = measure_graph(graph, args.out / "engines" / key, args.device, images, labels, reference)
            row = results["models"][key]
            print(
                f"{key:<28} top1 {row['accuracy']['top1']:.4f} agree {row['accuracy']['agreement']:.4f} "
                f"b1 p50 {row['speed']['batch']['1']['p50_ms']:.4f} ms  b128 {row['speed']['batch']['128']['throughput_sps']:.0f}/s "
                f"8 streams {row['speed']['streams']['8']['throughput_sps']:.0f}/s  vs plain {row['b1_mean_ms_ours_vs_plain_percent']:+.1f}%",
                flush=True,
            )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"engines_{args.device}.json").write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
