"""Cross-check the workflow's GPU timings with an independent loop (runs on the GPU machine).

For every engine that evaluate_engine measured in a shipped bundle (precisionflow.pipeline.remote), time
the same engine file with a plain ONNX Runtime loop written here without precisionflow's code:
one session with the engine's recorded CUDA provider options, IO binding with input and output
buffers on the GPU, back-to-back synchronous runs on the host clock. Prints and writes, per engine
and batch size, both figures and their ratio (the workflow's come from CUDA events on the device).

    python benchmarks/gpu_crosscheck.py BUNDLE OUT.json [--seconds 2] [--batches 1 128]
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort


def plain_session(engine_dir: Path, description: dict):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    cuda = {key: value for key, value in (description.get("cuda_options") or {"device_id": "0"}).items()}
    return ort.InferenceSession(
        str(engine_dir / description["engine_file"]), options, providers=[("CUDAExecutionProvider", cuda), "CPUExecutionProvider"]
    )


def time_loop(session, batch_size: int, seconds: float, graph_id: int) -> dict:
    model_input, model_output = session.get_inputs()[0], session.get_outputs()[0]
    shape_in = [batch_size] + [int(d) for d in model_input.shape[1:]]
    shape_out = [batch_size] + [int(d) for d in model_output.shape[1:]]
    x = ort.OrtValue.ortvalue_from_numpy(np.random.default_rng(0).random(shape_in, dtype=np.float32), "cuda", 0)
    y = ort.OrtValue.ortvalue_from_shape_and_type(shape_out, np.float32, "cuda", 0)
    binding = session.io_binding()
    binding.bind_ortvalue_input(model_input.name, x)
    binding.bind_ortvalue_output(model_output.name, y)
    run_options = ort.RunOptions()
    run_options.add_run_config_entry("gpu_graph_id", str(graph_id))
    for _ in range(20):
        session.run_with_iobinding(binding, run_options)
    latencies = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        session.run_with_iobinding(binding, run_options)
        latencies.append(time.perf_counter() - start)
    latencies.sort()
    return {
        "iterations": len(latencies),
        "mean_ms": 1000 * float(np.mean(latencies)),
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "throughput_sps": batch_size * len(latencies) / sum(latencies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bundle", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 128])
    args = parser.parse_args()
    results = args.bundle / "results"
    rows = []
    for metrics_file in sorted(results.glob("evaluate_engine/*/metrics.json")):
        metrics = json.loads(metrics_file.read_text())
        node = json.loads((metrics_file.parent / "node.json").read_text())
        engine_dir = results / node["inputs"]["engine"]
        description = json.loads((engine_dir / "engine.json").read_text())
        session = plain_session(engine_dir, description)
        for graph_id, size in enumerate(args.batches, start=1):
            ours = metrics["speed"]["batch"].get(str(size))
            if ours is None:
                continue
            plain = time_loop(session, size, args.seconds, graph_id)
            row = {
                "evaluation": metrics_file.parent.name,
                "graph": node["inputs"]["engine"],
                "precision": metrics["precision"],
                "cuda_options": description.get("cuda_options"),
                "batch": size,
                "workflow_clock": ours.get("clock"),
                "workflow_mean_ms": ours["mean_ms"],
                "workflow_host_mean_ms": (ours.get("host") or {}).get("mean_ms"),
                "plain_mean_ms": plain["mean_ms"],
                "workflow_sps": ours["throughput_sps"],
                "plain_sps": plain["throughput_sps"],
                "plain_over_workflow_mean": plain["mean_ms"] / ours["mean_ms"],
            }
            rows.append(row)
            print(
                f"{row['evaluation']:<28} b{size:<4} workflow {ours['mean_ms']:8.3f} ms ({ours.get('clock')})  "
                f"plain loop {plain['mean_ms']:8.3f} ms  ratio {row['plain_over_workflow_mean']:.3f}",
                flush=True,
            )
        del session
    args.out.write_text(json.dumps({"onnxruntime": ort.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
