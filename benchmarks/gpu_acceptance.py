"""One command that checks a GPU: the workflow's engine and serving nodes for fp32 and fp16, on the
default target (`local`, planned as on a GPU machine) and on a named one (`h200`), beside a plain
ONNX Runtime loop on the same graph. It stands for docs/hardware.md's "Right on the GPU by default"
table (the goals: engine >= 0.97x the plain loop at b128, Offline >= 0.97x the engine's b128,
Server >= 0.88x Offline, the Server ratio's interval within +-10% of its median).

Two steps, because the GPU machine has only numpy, onnx, onnxruntime-gpu and LoadGen:

    here:   python benchmarks/gpu_acceptance.py plan benchmarks/results/gpu_acceptance/params.json
    there:  python3 -S benchmarks/gpu_acceptance.py run benchmarks/results/gpu_acceptance/params.json \\
                GRAPH_DIR OUT_DIR --job A

`plan` composes the configuration and plans it with the project's own code; for `local` it plans
as the GPU machine would (devices.has_nvidia_gpu true), so the parameters are exactly what a user's
run there takes. `run` builds each engine with backends/onnxruntime_backend.build, times it at b128
as evaluate_engine does, times the plain loop, then serves each target's fp16 engine beside its
fp32 engine with stages/serve_engine.run unchanged (one serve job, the two sides' searches in
turns, as the workflow's serve node runs them) and writes one JSON per (target, precision) under
OUT_DIR/<job>/. `table FOLDER` prints docs/hardware.md's table from those JSONs. GRAPH_DIR holds rn50_fp32.onnx and rn50_fp16.onnx (ResNet-50 224 with a bias
on every Conv: ../shared/probes/serving/randw_bias.py, then fp16 with float inputs and outputs).
`--run-length-ms` shortens the serving runs where the time on the machine cannot hold the
target's own (the JSON records the length used); `--device cpu` smoke-runs it on a CPU.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

TARGETS = ("local", "h200")
PRECISIONS = ("fp32", "fp16")
IMAGE_SHAPE = (224, 224, 3)


def plan(out: Path) -> None:
    """Each (target, precision)'s build_engine and serve_engine parameters, as the planner gives them."""
    from precisionflow import devices
    from precisionflow.config.compose import expand
    from precisionflow.pipeline.plan import PlanBuilder

    devices.has_nvidia_gpu = lambda: True  # `local` as planned on the GPU machine
    devices.gpu_facts = lambda selector=None: {
        "device_name": "NVIDIA H200",
        "compute_capability": "9.0",
        "driver": "",
        "gpu": "0",
    }
    found = {}
    for target in TARGETS:
        overrides = [f"targets=[{target}]", "precisions=[fp32,fp16]", f"target_defs.{target}.framework=false"]
        builder = PlanBuilder()
        builder.add_point(expand(overrides)[0])
        for precision in PRECISIONS:
            found[f"{target}/{precision}"] = {
                stage: next(n.params for key, n in builder.nodes.items() if key.startswith(f"{stage}/{precision}-"))
                for stage in ("build_engine", "serve_engine")
            }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(found, indent=1, sort_keys=True, default=str) + "\n")
    print(f"wrote {out}")


def data_node(folder: Path, count: int = 256) -> Path:
    """A data node's test split (random pixels, 1000 classes) as serve_engine reads it."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    np.save(folder / "x_test.npy", rng.integers(0, 256, (count, *IMAGE_SHAPE), dtype=np.uint8))
    np.save(folder / "y_test.npy", rng.integers(0, 1000, count).astype(np.int64))
    meta = {
        "classes": [str(i) for i in range(1000)],
        "input_shape": list(IMAGE_SHAPE),
        "pixel_divisor": 255.0,
        "sizes": {"test": count},
        "storage": "memory",
    }
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


def build(graph: Path, folder: Path, params: dict, precision: str, device: str) -> dict:
    from precisionflow.backends import onnxruntime_backend as backend
    from precisionflow.nodeio import write_json_atomic

    target_def = {
        **params["target_def"],
        "device": device,
        "expect_device": params["target_def"]["expect_device"] if device == "cuda" else "",
    }
    engine = dict(params["engine"]) if device == "cuda" else {k: v for k, v in params["engine"].items() if k != "cuda"}
    folder.mkdir(parents=True, exist_ok=True)
    description = backend.build(graph, folder, engine, target_def, precision)
    write_json_atomic(folder / "engine.json", description)
    write_json_atomic(folder / "node.json", {"params": {"target_def": target_def}, "summary": description})
    return description


def engine_rate(folder: Path, images: np.ndarray, batch: int, seconds: float) -> float:
    """Images/s of the built engine at `batch`, timed as evaluate_engine times it (prepare(): the
    device's own clock where it has one, else the host's around each call)."""
    from precisionflow.backends import engine_loader
    from precisionflow.measure import speed, timing

    engine = engine_loader(folder)()
    run_once = engine.prepare(speed.timing_batch(images, batch))
    device_times = []
    host = timing.time_runs(run_once, 0.5, seconds, 20, device_times if getattr(engine, "device_timed", False) else None)
    return round(batch / float(np.median(device_times or host)))


def plain_rate(graph: Path, batch: int, seconds: float, device: str, fuse: bool) -> float:
    """A plain ONNX Runtime loop on the same graph: one session, IO binding to device buffers, NHWC,
    a CUDA graph, TF32 and (where the engine kept it) fused Conv+bias; on a CPU a plain run loop."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if device != "cuda":
        session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        feed = {session.get_inputs()[0].name: np.random.default_rng(0).random((batch, *IMAGE_SHAPE), dtype=np.float32)}
        run_once = lambda: session.run(None, feed)  # noqa: E731
    else:
        cuda = {
            "device_id": 0,
            "cudnn_conv_algo_search": "EXHAUSTIVE",
            "prefer_nhwc": "1",
            "enable_cuda_graph": "1",
            "use_tf32": "1",
        }
        cuda.update({"fuse_conv_bias": "1"} if fuse else {})
        session = ort.InferenceSession(str(graph), options, providers=[("CUDAExecutionProvider", cuda)])
        model_input, model_output = session.get_inputs()[0], session.get_outputs()[0]
        x = ort.OrtValue.ortvalue_from_numpy(np.random.default_rng(0).random((batch, *IMAGE_SHAPE), dtype=np.float32), "cuda", 0)
        y = ort.OrtValue.ortvalue_from_shape_and_type([batch, int(model_output.shape[1])], np.float32, "cuda", 0)
        binding = session.io_binding()
        binding.bind_ortvalue_input(model_input.name, x)
        binding.bind_ortvalue_output(model_output.name, y)
        run_once = lambda: session.run_with_iobinding(binding)  # noqa: E731
    for _ in range(10):
        run_once()
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        run_once()
        calls += 1
    return round(batch * calls / (time.perf_counter() - started))


def figures(served: dict, side: str) -> dict:
    found = served["results"].get(side) or {}
    offline = (found.get("Offline") or {}).get("samples_per_second")
    server = (found.get("Server") or {}).get("rate")
    return {"offline": offline, "server": server, "server_over_offline": found.get("server_over_offline")}


def call_maxima(found) -> list:
    """Every LoadGen run's longest engine call (ms) in a side's record, in run order: a cold call or a
    stall inside a measurement shows here."""
    if isinstance(found, dict):
        calls = found.get("engine_call_ms")
        own = [calls["max"]] if isinstance(calls, dict) and "max" in calls else []
        return own + [m for key, value in found.items() if key != "engine_call_ms" for m in call_maxima(value)]
    if isinstance(found, list):
        return [m for value in found for m in call_maxima(value)]
    return []


def timed_engines(planned: dict, target: str, graph_dir: Path, work: Path, images: np.ndarray, device: str, seconds: float):
    """Build fp32 and fp16 for `target` and time each against the plain loop, before any serving: a
    job cut short by the machine's time still returns these."""
    from precisionflow.identity import installed_version

    found = {}
    for precision in PRECISIONS:
        graph = graph_dir / f"rn50_{precision}.onnx"
        folder = work / f"engine-{target}-{precision}"
        started = time.perf_counter()
        built = build(graph, folder, planned[f"{target}/{precision}"]["build_engine"], precision, device)
        fused = (built.get("conv_bias_fusion") or {}).get("kept", False)
        found[precision] = {
            "target": target,
            "precision": precision,
            "device": built.get("device_name"),
            "onnxruntime": installed_version("onnxruntime"),
            "engine_settings": built.get("cuda_settings"),
            "conv_bias_fusion": built.get("conv_bias_fusion"),
            "build_seconds": round(time.perf_counter() - started, 1),
            "engine_b128": engine_rate(folder, images, 128, seconds),
            "plain_b128": plain_rate(graph, 128, seconds, device, fused),
        }
    return found


def run(
    params_file: Path, graph_dir: Path, out: Path, job: str, device: str, run_length_ms: int, seconds: float, targets
) -> None:
    """Per target: both engines built and timed, then one serve job -- fp16 beside its fp32 engine,
    their searches in turns, as the workflow's serve node runs it -- whose two sides give the fp16 and
    the fp32 record (serving fp32 alone first would only repeat its side at twice the GPU time)."""
    from precisionflow.reporting.verdict_rules import server_ratio_at
    from precisionflow.stages import serve_engine

    planned = json.loads(params_file.read_text())
    work = out / job / "work"
    data = data_node(work / "data")
    images = np.load(data / "x_test.npy")[:128].astype(np.float32) / 255.0
    for target in targets:
        records = timed_engines(planned, target, graph_dir, work, images, device, seconds)
        print(json.dumps(records), flush=True)
        serve_params = json.loads(json.dumps(planned[f"{target}/fp16"]["serve_engine"]))
        if run_length_ms:
            serve_params["serving"]["min_duration_ms"] = run_length_ms
        serve_out = work / f"serve-{target}"
        serve_out.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        inputs = {"engine": work / f"engine-{target}-fp16", "fp32_engine": work / f"engine-{target}-fp32", "data": data}
        serve_engine.run(serve_params, inputs, serve_out)
        serve_seconds = round(time.perf_counter() - started, 1)
        served = json.loads((serve_out / "metrics.json").read_text())
        ratio = server_ratio_at(served.get("server_ratio"), 0.95)
        for precision, side in (("fp16", "engine"), ("fp32", "fp32")):
            found = served["results"].get(side) or {}
            record = {
                "job": job,
                **records[precision],
                "served_as": f"side '{side}' of the fp16-vs-fp32 serve job",
                "settings_for": serve_params.get("settings_for"),
                **figures(served, side),
                "server_ratio_fp16_over_fp32": {k: ratio.get(k) for k in ("median", "low", "high", "pairs", "per_pair", "why")}
                if ratio
                else None,
                "run_length_s": serve_params["serving"]["min_duration_ms"] / 1000,
                "server_max_batch": found.get("server_max_batch"),
                "engine_call_ms": found.get("engine_call_ms"),
                "longest_call_ms_per_run": call_maxima({k: v for k, v in found.items() if k != "engine_call_ms"}),
                "chosen_search": (found.get("Server") or {}).get("chosen"),
                "searches": [repeat.get("rate") for repeat in (found.get("Server") or {}).get("repeats", [])],
                "serve_seconds_both_sides": serve_seconds,
            }
            for ratio_name, numerator, denominator in (
                ("engine_over_plain", "engine_b128", "plain_b128"),
                ("offline_over_engine", "offline", "engine_b128"),
            ):
                top, bottom = record[numerator], record[denominator]
                record[ratio_name] = round(top / bottom, 3) if top and bottom else None
            (out / job).mkdir(parents=True, exist_ok=True)
            (out / job / f"{target}-{precision}.json").write_text(json.dumps(record, indent=1) + "\n")
            print(json.dumps(record), flush=True)


def table(folder: Path) -> str:
    """The docs' table from every job's records under `folder` (<job>/<target>-<precision>.json)."""
    head = (
        "| job | target | precision | engine b128 /s (x plain loop) | Offline /s (x engine b128) | Server /s | Server / Offline "
        "| fp16/fp32 Server ratio [95%] | run length | longest call per run, ms |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for path in sorted(folder.glob("*/*-*.json")):
        if path.name.endswith("_metrics.json"):  # the serve node's own metrics, kept beside the records
            continue
        r = json.loads(path.read_text())
        ratio = r.get("server_ratio_fp16_over_fp32") or {}
        interval = (
            f"{ratio['median']} [{ratio['low']}, {ratio['high']}]" if ratio.get("low") is not None else (ratio.get("why") or "--")
        )
        calls = r.get("longest_call_ms_per_run") or []
        lines.append(
            f"| {r['job']} | {r['target']} | {r['precision']} | {r['engine_b128']:,} ({r['engine_over_plain']}) "
            f"| {r['offline'] or '--'} ({r['offline_over_engine']}) | {r['server'] or '--'} | {r['server_over_offline'] or '--'} "
            f"| {interval} | {r['run_length_s']:g} s | {max(calls) if calls else '--'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    planning = steps.add_parser("plan")
    planning.add_argument("out", type=Path)
    running = steps.add_parser("run")
    running.add_argument("params", type=Path)
    running.add_argument("graph_dir", type=Path)
    running.add_argument("out", type=Path)
    running.add_argument("--job", default="A")
    running.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    running.add_argument("--run-length-ms", type=int, default=0, help="serving runs of this length (0: the plan's)")
    running.add_argument("--seconds", type=float, default=3.0, help="each b128 timing window")
    running.add_argument("--targets", nargs="+", default=list(TARGETS), choices=TARGETS)
    tabling = steps.add_parser("table")
    tabling.add_argument("folder", type=Path)
    args = parser.parse_args()
    if args.step == "plan":
        plan(args.out)
    elif args.step == "table":
        print(table(args.folder))
    else:
        run(args.params, args.graph_dir, args.out, args.job, args.device, args.run_length_ms, args.seconds, args.targets)


if __name__ == "__main__":
    main()
