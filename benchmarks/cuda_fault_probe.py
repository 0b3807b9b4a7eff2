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

Second round, on one precision graph (the fault was found to need neither a second process nor a
particular algorithm search): `--graph FILE` compares, each in a fresh process, one session
capturing all sizes then replaying them in turn (as compare_speed did), the same without going
back to an earlier size (as evaluate_engine does), one session per size, and precisionflow's own
backend (which gives each captured size its own session):

    python benchmarks/cuda_fault_probe.py --graph model.onnx OUT.json
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

SIZES = (1, 32, 128)


def worker(engine_file: str, options_json: str, algo: str, rounds: int, mode: str = "revisit") -> None:
    import numpy as np
    import onnxruntime as ort

    if mode == "backend":
        return backend_worker(engine_file, json.loads(options_json), rounds)
    options = dict(json.loads(options_json))
    if algo != "as_built":
        options["cudnn_conv_algo_search"] = algo
    session_options = ort.SessionOptions()
    session_options.log_severity_level = 3

    def new_session():
        return ort.InferenceSession(
            engine_file, session_options, providers=[("CUDAExecutionProvider", options), "CPUExecutionProvider"]
        )

    session = new_session()
    graphs = options.get("enable_cuda_graph") == "1"
    model_input, model_output = session.get_inputs()[0], session.get_outputs()[0]
    slots, sums = [], {}
    for graph_id, size in enumerate(SIZES, start=1):
        if mode == "per_size" and graph_id > 1:
            session = new_session()
        x = np.random.default_rng(size).random([size] + [int(d) for d in model_input.shape[1:]], dtype=np.float32)
        x_gpu = ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
        y_gpu = ort.OrtValue.ortvalue_from_shape_and_type(
            [size] + [int(d) for d in model_output.shape[1:]], np.float32, "cuda", 0
        )
        binding = session.io_binding()
        binding.bind_ortvalue_input(model_input.name, x_gpu)
        binding.bind_ortvalue_output(model_output.name, y_gpu)
        run_options = ort.RunOptions()
        if graphs:
            run_options.add_run_config_entry("gpu_graph_id", str(graph_id))
        for _ in range(3):  # capture (graphs) and warm up, as the timing stages do
            session.run_with_iobinding(binding, run_options)
        slots.append((size, session, binding, run_options, y_gpu, x_gpu))
        if mode == "no_revisit":  # time this size now, never come back to it (evaluate_engine's order)
            for _ in range(20 * rounds):
                session.run_with_iobinding(binding, run_options)
            sums[size] = float(np.abs(y_gpu.numpy()).sum())
    started = time.perf_counter()
    for _ in range(rounds if mode != "no_revisit" else 0):  # revisit every size in turn, as compare_speed's rounds do
        for size, owner, binding, run_options, y_gpu, _ in slots:
            for _ in range(20):
                owner.run_with_iobinding(binding, run_options)
            sums[size] = float(np.abs(y_gpu.numpy()).sum())
    print(json.dumps({"ok": True, "sums": sums, "seconds": round(time.perf_counter() - started, 2)}), flush=True)


def backend_worker(graph_file: str, cuda: dict, rounds: int) -> None:
    """precisionflow's own ONNX Runtime backend: build the engine, prepare every size, revisit them."""
    import tempfile

    import numpy as np

    from precisionflow.backends import onnxruntime_backend

    target_def = {"device": "cuda", "expect_device": ""}
    params = {"optimization_level": "all", "intra_op_threads": 1, "cuda": cuda}
    with tempfile.TemporaryDirectory() as folder:
        description = onnxruntime_backend.build(Path(graph_file), Path(folder), params, target_def, "fp16")
        engine = onnxruntime_backend.load(Path(folder), description, target_def)
        shape = [int(d) for d in engine.session.get_inputs()[0].shape[1:]]
        runs = {size: engine.prepare(np.random.default_rng(size).random([size] + shape, dtype=np.float32)) for size in SIZES}
        for run_once in runs.values():
            for _ in range(3):
                run_once()
        seconds = {}
        for _ in range(rounds):
            for size, run_once in runs.items():
                seconds[size] = sum(run_once() for _ in range(20)) / 20
        sums = {size: float(np.abs(engine.slot(size).output.numpy()).sum()) for size in SIZES}
    print(
        json.dumps(
            {
                "ok": True,
                "sums": sums,
                "device_ms": {k: round(v * 1e3, 4) for k, v in seconds.items()},
                "sessions": 1 + len(engine.graph_sessions),
            }
        ),
        flush=True,
    )


def graph_cases(graph: Path, out: Path, rounds: int) -> None:
    """The second round: each way of replaying, on one graph, in a fresh process."""
    options = {
        "device_id": "0",
        "prefer_nhwc": "1",
        "enable_cuda_graph": "1",
        "cudnn_conv_algo_search": "EXHAUSTIVE",
        "use_tf32": "1",
    }
    cuda = {"prefer_nhwc": True, "cuda_graph": True, "cudnn_conv_algo_search": "EXHAUSTIVE", "use_tf32": True}
    results = []
    for mode in ("revisit", "no_revisit", "per_size", "backend", "revisit"):
        settings = cuda if mode == "backend" else options
        command = [sys.executable, __file__, "--worker", str(graph), json.dumps(settings), "as_built", str(rounds), mode]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        errors = [line[:300] for line in done.stderr.splitlines() if "CUDA" in line or "rror" in line][-3:]
        result = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout.strip() else {}
        results.append({"mode": mode, "exit": done.returncode, **result, "errors": errors})
        print(mode, done.returncode, result.get("sums"), flush=True)
        out.write_text(json.dumps({"graph": str(graph), "options": options, "cases": results}, indent=1))


def upstream_keys(plan: dict, key: str):
    """Every node the plan builds `key` from, transitively."""
    for source in plan["nodes"][key]["inputs"].values():
        yield source
        yield from upstream_keys(plan, source)


def engines(bundle: Path, match: str):
    """(name, engine file, CUDA options) of built engines whose lineage (e.g. export_onnx/mobilenet_v2-...) matches."""
    plan = json.loads((bundle / "plan.json").read_text())
    found = []
    for description_path in sorted((bundle / "results" / "build_engine").glob("*/engine.json")):
        key = f"build_engine/{description_path.parent.name}"
        if key in plan["nodes"] and any(match in source for source in upstream_keys(plan, key)):
            description = json.loads(description_path.read_text())
            found.append(
                (
                    description_path.parent.name,
                    str(description_path.parent / description["engine_file"]),
                    description.get("cuda_options") or {"device_id": "0"},
                )
            )
    return found


def run_case(label: str, chosen, algo: str, together: bool, rounds: int, timeout: float):
    """Start one worker per engine in `chosen` (all at once, or each after the last finished)."""
    commands = [
        [sys.executable, __file__, "--worker", file, json.dumps(options), algo, str(rounds)] for _, file, options in chosen
    ]
    outcomes = []
    if together:
        processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for command in commands]
        finished = [process.communicate(timeout=timeout) for process in processes]
        codes = [process.returncode for process in processes]
    else:
        finished, codes = [], []
        for command in commands:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
            finished.append((done.stdout, done.stderr))
            codes.append(done.returncode)
    for (name, _, _), (out, err), code in zip(chosen, finished, codes, strict=True):
        errors = [line for line in err.splitlines() if "CUDA" in line or "error" in line.lower()][-3:]
        result = json.loads(out.strip().splitlines()[-1]) if code == 0 and out.strip() else {"ok": False}
        outcomes.append({"engine": name, "exit": code, **result, "errors": errors})
    print(label, [(o["engine"], o["exit"]) for o in outcomes], flush=True)
    return {"case": label, "algo": algo, "together": together, "workers": outcomes}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), *sys.argv[6:7])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--graph":
        graph_cases(Path(sys.argv[2]), Path(sys.argv[3]), rounds=6)
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
    cases = [
        ("alone, as built", "as_built", False),
        ("together x2, as built", "as_built", True),
        ("together x2 again, as built", "as_built", True),
        ("together x2, HEURISTIC", "HEURISTIC", True),
        ("together x2, DEFAULT", "DEFAULT", True),
        ("alone again, as built", "as_built", False),
    ]
    results, started = [], time.monotonic()
    for label, algo, together in cases:
        if time.monotonic() - started > args.seconds:
            break
        workers = chosen * 2 if together else chosen  # two processes per engine at once
        results.append(run_case(label, workers, algo, together, args.rounds, timeout=120))
        args.out.write_text(json.dumps({"engines": [name for name, _, _ in chosen], "cases": results}, indent=1))


if __name__ == "__main__":
    main()
