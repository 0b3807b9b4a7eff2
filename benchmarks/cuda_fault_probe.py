"""Which condition makes an engine's run fault on the GPU (CUDA error 700/715)? Runs on the GPU machine.

Seen on the H200 (issue 25): MobileNetV2's compare_speed workers died with CUDA errors 700/715
where the evaluation jobs of the same engines, and every ResNet-50 job, ran clean. compare_speed
differed in two ways: its side processes loaded their engines at the same time, and each one
prepared every batch size before timing any (a captured CUDA graph per size, replayed again after
the others were captured). This probe separates the two with plain ONNX Runtime sessions (none of
precisionflow's code): each worker process loads one engine with the provider options it was built
with (cuDNN's algorithm search overridable), captures batch sizes 1, 32, 128, then replays them in
turn for a few rounds and reports a checksum of its outputs; workers run alone or N at once.

    python benchmarks/cuda_fault_probe.py BUNDLE OUT.json [--match mobilenet_v2] [--seconds 240]
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

SIZES = (1, 32, 128)


def worker(engine_file: str, options_json: str, algo: str, rounds: int) -> None:
    import numpy as np
    import onnxruntime as ort

    options = dict(json.loads(options_json))
    if algo != "as_built":
        options["cudnn_conv_algo_search"] = algo
    session_options = ort.SessionOptions()
    session_options.log_severity_level = 3
    session = ort.InferenceSession(engine_file, session_options, providers=[("CUDAExecutionProvider", options),
                                                                            "CPUExecutionProvider"])
    graphs = options.get("enable_cuda_graph") == "1"
    model_input, model_output = session.get_inputs()[0], session.get_outputs()[0]
    slots = []
    for graph_id, size in enumerate(SIZES, start=1):
        x = np.random.default_rng(size).random([size] + [int(d) for d in model_input.shape[1:]], dtype=np.float32)
        x_gpu = ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
        y_gpu = ort.OrtValue.ortvalue_from_shape_and_type([size] + [int(d) for d in model_output.shape[1:]],
                                                          np.float32, "cuda", 0)
        binding = session.io_binding()
        binding.bind_ortvalue_input(model_input.name, x_gpu)
        binding.bind_ortvalue_output(model_output.name, y_gpu)
        run_options = ort.RunOptions()
        if graphs:
            run_options.add_run_config_entry("gpu_graph_id", str(graph_id))
        for _ in range(3):  # capture (graphs) and warm up, as the timing stages do
            session.run_with_iobinding(binding, run_options)
        slots.append((size, binding, run_options, y_gpu, x_gpu))
    sums = {}
    started = time.perf_counter()
    for _ in range(rounds):  # revisit every captured size in turn, as compare_speed's rounds do
        for size, binding, run_options, y_gpu, _ in slots:
            for _ in range(20):
                session.run_with_iobinding(binding, run_options)
            sums[size] = float(np.abs(y_gpu.numpy()).sum())
    print(json.dumps({"ok": True, "sums": sums, "seconds": round(time.perf_counter() - started, 2)}), flush=True)


def engines(bundle: Path, match: str):
    """(name, engine file, CUDA options) of built engines whose node mentions `match`."""
    found = []
    for description_path in sorted((bundle / "results" / "build_engine").glob("*/engine.json")):
        description = json.loads(description_path.read_text())
        node = json.loads((description_path.parent / "node.json").read_text())
        if match in json.dumps(node["inputs"]) + json.dumps(node.get("params", {})) or match in json.dumps(description):
            found.append((description_path.parent.name, str(description_path.parent / description["engine_file"]),
                          description.get("cuda_options") or {"device_id": "0"}))
    return found


def run_case(label: str, chosen, algo: str, together: bool, rounds: int, timeout: float):
    """Start one worker per engine in `chosen` (all at once, or each after the last finished)."""
    commands = [[sys.executable, __file__, "--worker", file, json.dumps(options), algo, str(rounds)]
                for _, file, options in chosen]
    outcomes = []
    if together:
        processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for command in commands]
        finished = [process.communicate(timeout=timeout) for process in processes]
        codes = [process.returncode for process in processes]
    else:
        finished, codes = [], []
        for command in commands:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
            finished.append((done.stdout, done.stderr))
            codes.append(done.returncode)
    for (name, _, _), (out, err), code in zip(chosen, finished, codes):
        errors = [line for line in err.splitlines() if "CUDA" in line or "error" in line.lower()][-3:]
        result = json.loads(out.strip().splitlines()[-1]) if code == 0 and out.strip() else {"ok": False}
        outcomes.append({"engine": name, "exit": code, **result, "errors": errors})
    print(label, [(o["engine"], o["exit"]) for o in outcomes], flush=True)
    return {"case": label, "algo": algo, "together": together, "workers": outcomes}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("bundle", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--match", default="mobilenet_v2")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=240, help="stop starting new cases after this")
    args = parser.parse_args()
    chosen = [entry for entry in engines(args.bundle, args.match) if "int8" not in entry[0]]
    print("engines:", [name for name, _, _ in chosen], flush=True)
    cases = [("alone, as built", "as_built", False), ("together x2, as built", "as_built", True),
             ("together x2 again, as built", "as_built", True), ("together x2, HEURISTIC", "HEURISTIC", True),
             ("together x2, DEFAULT", "DEFAULT", True), ("alone again, as built", "as_built", False)]
    results, started = [], time.monotonic()
    for label, algo, together in cases:
        if time.monotonic() - started > args.seconds:
            break
        workers = chosen * 2 if together else chosen  # two processes per engine at once
        results.append(run_case(label, workers, algo, together, args.rounds, timeout=120))
        args.out.write_text(json.dumps({"engines": [name for name, _, _ in chosen], "cases": results}, indent=1))


if __name__ == "__main__":
    main()
