"""On a GPU: precisionflow's ONNX Runtime engine beside a plain ONNX Runtime loop on the same graph file.

Part `engines` (issue 40, item 1), for every graph in GRAPH_DIR (benchmarks/h200_graphs.py):
  plain      one CUDA session per batch size, prefer_nhwc, a CUDA graph, IO binding to device
             buffers, TF32 on, cudnn_conv_algo_search HEURISTIC (and EXHAUSTIVE at b128): images/s
             from back-to-back calls over a window, batch-1 p50 from per-call host times.
  engine     the product's build (backends.onnxruntime_backend.build, engine.onnxruntime of
             experiment=h200) and load, timed as evaluate_engine times it (prepare(): device events),
             plus the host rate of the same calls back to back.
  plain_on_engine_file  the plain loop on the engine file the product saved (engine.onnx).
Part `b1`: batch 1 only, in rounds of fresh sessions (plain HEURISTIC / EXHAUSTIVE, engine with and
without device events), the order turning each round.
Part `serving` (item 2): the product's system under test (measure.serving.BatchingSUT through
stages.serve_engine.serve_side's pieces) on the engine, LoadGen Offline, SingleStream and Server at
fixed fractions of its Offline; the same with host-synchronised runners, to tell the clock's share.

Writes one JSON line per figure to OUT (append), so a run cut short keeps what it measured.
    python3 benchmarks/engine_vs_plain.py engines GRAPH_DIR OUT.jsonl
    python3 benchmarks/engine_vs_plain.py serving GRAPH_DIR OUT.jsonl --graphs resnet50_product_fp16 ...
"""

import argparse
import gc
import os
import json
import shutil
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

H200_CUDA = {
    "prefer_nhwc": True,
    "cuda_graph": True,
    "cudnn_conv_algo_search": "EXHAUSTIVE",
    "use_tf32": True,
    "fuse_conv_bias": os.environ.get("FUSE", "1") == "1",
}
BATCHES = (1, 32, 128)


def emit(out: Path, record: dict) -> None:
    line = json.dumps(record)
    print(line, flush=True)
    with open(out, "a") as handle:
        handle.write(line + "\n")


def io_types(session):
    model_input, model_output = session.get_inputs()[0], session.get_outputs()[0]
    as_dtype = lambda t: np.float16 if "float16" in t else np.float32  # noqa: E731
    return model_input, model_output, as_dtype(model_input.type), as_dtype(model_output.type)


def plain_session(path: Path, algo: str, batch: int, extra=None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    provider = {
        "device_id": 0,
        "cudnn_conv_algo_search": algo,
        "prefer_nhwc": "1",
        "enable_cuda_graph": "1",
        "use_tf32": "1",
        **({"fuse_conv_bias": "1"} if H200_CUDA["fuse_conv_bias"] else {}),
        **(extra or {}),
    }
    session = ort.InferenceSession(str(path), options, providers=[("CUDAExecutionProvider", provider)])
    model_input, model_output, in_type, out_type = io_types(session)
    shape = [batch] + [int(d) for d in model_input.shape[1:]]
    x = ort.OrtValue.ortvalue_from_numpy(np.random.default_rng(0).random(shape, dtype=np.float32).astype(in_type), "cuda", 0)
    y = ort.OrtValue.ortvalue_from_shape_and_type([batch] + [int(d) for d in model_output.shape[1:]], out_type, "cuda", 0)
    binding = session.io_binding()
    binding.bind_ortvalue_input(model_input.name, x)
    binding.bind_ortvalue_output(model_output.name, y)
    return lambda: session.run_with_iobinding(binding), (session, x, y, binding)


def rate_and_p50(run_once, batch: int, seconds: float):
    for _ in range(10):
        run_once()
    times, started = [], time.perf_counter()
    while time.perf_counter() - started < seconds:
        begin = time.perf_counter()
        run_once()
        times.append(time.perf_counter() - begin)
    return batch * len(times) / (time.perf_counter() - started), 1000 * float(np.median(times))


def plain(path: Path, algo: str, batch: int, seconds: float, extra=None) -> dict:
    run_once, _keep = plain_session(path, algo, batch, extra)
    per_s, p50 = rate_and_p50(run_once, batch, seconds)
    return {"per_s": round(per_s), "p50_ms": round(p50, 4)}


def build_engine(path: Path, where: Path, cuda=None):
    from precisionflow.backends import onnxruntime_backend as backend

    device = os.environ.get("PF_DEVICE", "cuda")  # cpu: a smoke run of this script on a machine without a GPU
    params = {"optimization_level": "all", "intra_op_threads": 1, "cuda": dict(cuda or H200_CUDA) if device == "cuda" else None}
    target = {"device": device}
    where.mkdir(parents=True, exist_ok=True)
    precision = "fp16" if "fp16" in path.name else "fp32"
    description = backend.build(path, where, params, target, precision)
    return description, (lambda: backend.load(where, description, target))


def engine_figures(load, batch: int, seconds: float) -> dict:
    """The engine's figures: host clock around each call, and the device's own where it is timed."""
    engine = load()
    images = np.random.default_rng(0).random((batch, *engine.session.get_inputs()[0].shape[1:]), dtype=np.float32)
    timed = engine.prepare(images)
    for _ in range(10):
        timed()
    device, host, started = [], [], time.perf_counter()
    while time.perf_counter() - started < seconds:
        begin = time.perf_counter()
        seconds_on_device = timed()
        host.append(time.perf_counter() - begin)
        if engine.device_timed:
            device.append(float(seconds_on_device))
    wall = time.perf_counter() - started
    figures = {"host_per_s": round(batch * len(host) / wall), "host_p50_ms": round(1000 * float(np.median(host)), 4)}
    if device:
        figures.update(
            device_per_s=round(batch / float(np.mean(device))), device_p50_ms=round(1000 * float(np.median(device)), 4)
        )
    return figures


def prepared(graph_dir: Path, name: str, work: Path) -> Path:
    from h200_graphs import refill

    path = work / f"{name}.onnx"
    if not path.exists():
        shutil.copy(graph_dir / f"{name}.onnx", path)
        refill(path)
    return path


def engines(graph_dir: Path, out: Path, names, seconds: float, work: Path) -> None:
    for name in names:
        path = prepared(graph_dir, name, work)
        for batch in BATCHES:
            emit(
                out,
                {"graph": name, "what": "plain", "algo": "HEURISTIC", "batch": batch, **plain(path, "HEURISTIC", batch, seconds)},
            )
        emit(out, {"graph": name, "what": "plain", "algo": "EXHAUSTIVE", "batch": 128, **plain(path, "EXHAUSTIVE", 128, seconds)})
        description, load = build_engine(path, work / f"engine-{name}")
        emit(
            out,
            {
                "graph": name,
                "what": "engine_built",
                "cuda_settings": description["cuda_settings"],
                "executed": description["executed"].get("label"),
                "graph_refused": description["cuda_graph_refused"],
                "nhwc_refused": description["nhwc_refused"],
                "engine_bytes": description["engine_bytes"],
            },
        )
        for batch in BATCHES:
            emit(out, {"graph": name, "what": "engine", "batch": batch, **engine_figures(load, batch, seconds)})
        engine_file = work / f"engine-{name}" / "engine.onnx"
        emit(
            out,
            {
                "graph": name,
                "what": "plain_on_engine_file",
                "algo": "HEURISTIC",
                "batch": 128,
                **plain(engine_file, "HEURISTIC", 128, seconds),
            },
        )


def batch_one_rounds(graph_dir: Path, out: Path, names, seconds: float, work: Path, rounds: int) -> None:
    """Batch 1, in rounds: each round a fresh plain session (HEURISTIC and EXHAUSTIVE), a fresh engine
    timed as evaluate_engine times it (device events) and a fresh engine timed like the loop (host
    clock around a synchronised call, no events), the order turning each round. One session per
    variant was one sample of cuDNN's per-session choices; the rounds say how far those move."""
    from precisionflow.backends import onnxruntime_backend as backend

    variants = ("plain_HEURISTIC", "plain_EXHAUSTIVE", "engine_events", "engine_no_events")
    for name in names:
        path = prepared(graph_dir, name, work)
        description, _ = build_engine(path, work / f"engine-{name}")
        target = {"device": "cuda"}
        for round_index in range(rounds):
            turn = round_index % len(variants)
            for variant in variants[turn:] + variants[:turn]:
                if variant.startswith("plain_"):
                    figures = plain(path, variant.split("_")[1], 1, seconds)
                else:
                    load = partial(backend.load, work / f"engine-{name}", description, target, timed=variant == "engine_events")
                    figures = engine_figures(load, 1, seconds)
                gc.collect()
                emit(out, {"graph": name, "what": "b1_round", "round": round_index, "variant": variant, **figures})


def serving_settings(seconds: float) -> dict:
    """The serve stage's settings on the H200 (experiment=h200's bound), with runs of `seconds`."""
    return {
        "latency_bound_ms": 15.0,
        "percentile": 0.99,
        "min_duration_ms": int(seconds * 1000),
        "min_query_count": 500,
        "max_batch": 128,
        "max_wait_ms": 1.0,
        "workers": 1,
        "server_next_batch": "when_ready",
        "seed": 1,
        "samples": 64,
    }


def serving(graph_dir: Path, out: Path, names, fractions, seconds: float, work: Path, max_batch: int) -> None:
    from precisionflow.measure import serving as srv
    from precisionflow.stages import serve_engine

    settings = {
        "latency_bound_ms": 15.0,
        "percentile": 0.99,
        "min_duration_ms": int(seconds * 1000),
        "min_query_count": 500,
        "max_batch": max_batch,
        "max_wait_ms": 1.0,
        "workers": 1,
        "server_next_batch": "when_ready",
        "seed": 1,
        "samples": 64,
        "scenarios": [],
    }
    for name in names:
        path = prepared(graph_dir, name, work)
        _description, load = build_engine(path, work / f"engine-{name}")
        images = np.random.default_rng(0).random((max(64, max_batch), 224, 224, 3), dtype=np.float32)
        engine, runners, largest_s = serve_engine.runners_of(None, images, max_batch, load=load)
        host_runners = {size: engine.slot(size).run for size in runners}
        for label, chosen in (("product_runners", runners), ("host_sync_runners", host_runners)):
            make = lambda scenario, r=chosen: srv.BatchingSUT(r, max_batch, 0.001, 1, 10**9)  # noqa: E731
            logs = Path(tempfile.mkdtemp())
            offline = srv.run_scenario(make, "Offline", settings, logs / "off", rate=max_batch / largest_s)
            base = offline.get("samples_per_second") or 0
            emit(
                out,
                {
                    "graph": name,
                    "what": "serve",
                    "runners": label,
                    "scenario": "Offline",
                    "per_s": base,
                    "valid": offline["valid"],
                    "batches": offline["batches"],
                },
            )
            single = srv.run_scenario(make, "SingleStream", settings, logs / "ss")
            emit(
                out,
                {
                    "graph": name,
                    "what": "serve",
                    "runners": label,
                    "scenario": "SingleStream",
                    "p50_ms": single.get("p50_ns", 0) / 1e6,
                    "p99_ms": single.get("p99_ns", 0) / 1e6,
                    "valid": single["valid"],
                },
            )
            for fraction in fractions:
                server = srv.run_scenario(make, "Server", settings, logs / f"s{fraction}", rate=fraction * base)
                emit(
                    out,
                    {
                        "graph": name,
                        "what": "serve",
                        "runners": label,
                        "scenario": "Server",
                        "fraction": fraction,
                        "target": round(fraction * base),
                        "valid": server["valid"],
                        "p50_ms": server.get("p50_ns", 0) / 1e6,
                        "p99_ms": server.get("p99_ns", 0) / 1e6,
                        "batches": server["batches"],
                    },
                )


def options_matrix(graph_dir: Path, out: Path, names, seconds: float, work: Path) -> None:
    """The plain loop with and without cuDNN's conv+bias fusion, and on the graph with its Conv biases removed."""
    import onnx

    for name in names:
        path = prepared(graph_dir, name, work)
        stripped = work / f"{name}_nobias.onnx"
        model = onnx.load(str(path))
        for node in model.graph.node:
            if node.op_type == "Conv" and len(node.input) == 3:
                del node.input[2]
        onnx.save(model, str(stripped))
        for label, graph, extra in (
            ("as_exported", path, {}),
            ("fuse_conv_bias", path, {"fuse_conv_bias": "1"}),
            ("conv_biases_removed", stripped, {}),
        ):
            for batch in (1, 128):
                emit(
                    out,
                    {
                        "graph": name,
                        "what": "options",
                        "variant": label,
                        "batch": batch,
                        **plain(graph, "HEURISTIC", batch, seconds, extra),
                    },
                )


def serving_stage(graph_dir: Path, out: Path, names, seconds: float, work: Path, verify_s: float, probe_s: float = 0) -> None:
    """The serve stage's own choices (stages.serve_engine.serve_with: no batch wait outside Server, the
    Server batch bounded by the latency bound, the rate search) on the product's engine, runs of
    `seconds`; then the found rate verified in one run of `verify_s`, and 0.8x Offline tried as long.
    With `probe_s`: the stage as experiment=h200 runs it -- every run `seconds` long except the
    search's probes (`probe_s`), whose answer the stage confirms at full length itself."""
    from precisionflow.measure import serving as srv
    from precisionflow.stages import serve_engine

    settings = {
        **serving_settings(seconds),
        "scenarios": ["SingleStream", "Server"],
        "search_precision": 0.05,
        "search_repeats": 1,
        **({"search_duration_ms": int(probe_s * 1000)} if probe_s else {}),
        "full_length_climb": int(os.environ.get("CLIMB", "0")),  # the GPU targets' 3: CLIMB=3
    }
    for name in names:
        path = prepared(graph_dir, name, work)
        _description, load = build_engine(path, work / f"engine-{name}")
        images = np.random.default_rng(0).random((128, 224, 224, 3), dtype=np.float32)
        _engine, runners, service_s = serve_engine.runners_of(None, images, 128, load=load)
        logs = Path(tempfile.mkdtemp())
        found = serve_engine.serve_with(runners, service_s, settings, logs)
        server = found["Server"]
        emit(
            out,
            {
                "graph": name,
                "what": "serve_stage",
                "engine_call_ms": found["engine_call_ms"],
                "server_max_batch": found["server_max_batch"],
                "offline": found["Offline"].get("samples_per_second"),
                "offline_valid": found["Offline"]["valid"],
                "single_p50_ms": found["SingleStream"].get("p50_ns", 0) / 1e6,
                "single_valid": found["SingleStream"]["valid"],
                "server_rate": server.get("rate"),
                "why": server.get("why"),
                "server_over_offline": found.get("server_over_offline"),
                "bracket": server.get("bracket"),
                "confirmed_at_full_length": server.get("confirmed_at_full_length"),
                "curve": [
                    {k: c.get(k) for k in ("target_qps", "valid", "p99_ns", "duration_ms", "batches", "where_time_went")}
                    for c in server["curve"]
                ],
            },
        )
        if probe_s:
            continue  # the stage confirmed its own answer at full length
        long = dict(settings, min_duration_ms=int(verify_s * 1000))
        batch = found["server_max_batch"]
        chosen = {size: r for size, r in runners.items() if size <= batch}
        make = lambda scenario, chosen=chosen, batch=batch: srv.BatchingSUT(chosen, batch, 0.001, 1, 10**9)  # noqa: E731
        offline = found["Offline"].get("samples_per_second") or 0
        for label, rate in (("found_rate", server.get("rate")), ("0.8x_offline", 0.8 * offline)):
            if not rate or (label == "0.8x_offline" and (server.get("rate") or 0) >= rate):
                continue
            verified = srv.run_scenario(make, "Server", long, logs / f"verify-{label}", rate=rate)
            emit(
                out,
                {
                    "graph": name,
                    "what": "serve_verify",
                    "at": label,
                    "rate": round(rate),
                    "seconds": verify_s,
                    "valid": verified["valid"],
                    "p99_ms": verified.get("p99_ns", 0) / 1e6,
                    "where_time_went": verified["where_time_went"],
                    "batches": verified["batches"],
                },
            )


def serving_side(graph_dir: Path, out: Path, names, work: Path, settings_file: Path) -> None:
    """One side of the serve stage as a workflow run of experiment=h200 serves it: the settings it
    composes (SETTINGS_FILE, written by benchmarks/h200_side_settings.py: 60-s runs, 4-s probes,
    search_repeats 2, full_length_climb 3) through stages.serve_engine.serve_with, unchanged. Every
    LoadGen run is recorded as it ends (a call cut short keeps them); the side's whole answer last,
    for serve_engine.server_ratio against the other side (benchmarks/h200_side_settings.py ratio)."""
    from precisionflow.measure import serving as srv
    from precisionflow.stages import serve_engine

    settings = {**json.loads(settings_file.read_text()), "samples": 64}  # as serve_engine.run adds
    measured = srv.run_scenario

    def recorded(make_sut, scenario, scenario_settings, folder, rate=0.0, **kwargs):
        result = measured(make_sut, scenario, scenario_settings, folder, rate, **kwargs)
        brief = {k: result.get(k) for k in ("valid", "target_qps", "samples_per_second", "p50_ns", "p99_ns", "batches")}
        emit(
            out,
            {"graph": name, "what": "run", "scenario": scenario, "seconds": scenario_settings["min_duration_ms"] / 1000, **brief},
        )
        return result

    srv.run_scenario = recorded
    for name in names:
        path = prepared(graph_dir, name, work)
        _description, load = build_engine(path, work / f"engine-{name}")
        images = np.random.default_rng(0).random((settings["max_batch"], 224, 224, 3), dtype=np.float32)
        _engine, runners, service_s = serve_engine.runners_of(None, images, settings["max_batch"], load=load)
        found = serve_engine.serve_with(runners, service_s, settings, Path(tempfile.mkdtemp()))
        emit(out, {"graph": name, "what": "side", "settings": settings, "found": found})


class ProbeHandoff:
    """../shared/probes/serving's Handoff design behind the interface run_scenario expects."""

    def __init__(self, runners, max_batch):
        from sut_probe import Handoff

        self.inner = Handoff(runners, max_batch, 0.001)
        from precisionflow.measure.serving import Timeline

        self.handle, self.batches, self.overloaded, self.queue_limit = self.inner.sut, {}, False, 0
        self.timeline = Timeline()

    def close(self):
        self.inner.close()


def sut_matrix(graph_dir: Path, out: Path, names, fraction: float, seconds: float, work: Path) -> None:
    """Which half makes the product's Server tail: its SUT or its runners (each crossed with the probe's)."""
    import sut_probe
    from precisionflow.measure import serving as srv
    from precisionflow.stages import serve_engine

    settings = serving_settings(seconds)
    for name in names:
        path = prepared(graph_dir, name, work)
        _description, load = build_engine(path, work / f"engine-{name}")
        images = np.random.default_rng(0).random((128, 224, 224, 3), dtype=np.float32)
        _engine, product_runners, largest_s = serve_engine.runners_of(None, images, 128, load=load)
        sut_probe.ALGO[0] = "HEURISTIC"
        probe_runners = sut_probe.make_runners(str(path), "cuda", 128, True)
        offline = srv.run_scenario(
            lambda s, runners=product_runners: srv.BatchingSUT(runners, 128, 0.001, 1, 10**9),
            "Offline",
            settings,
            Path(tempfile.mkdtemp()),
            rate=128 / largest_s,
        )
        rate = fraction * offline["samples_per_second"]
        emit(out, {"graph": name, "what": "sut", "offline": offline["samples_per_second"], "rate": round(rate)})
        for sut_name in ("product_sut", "probe_handoff"):
            for runner_name, runners in (("product_runners", product_runners), ("probe_runners", probe_runners)):
                if sut_name == "product_sut":
                    make = lambda s, r=runners: srv.BatchingSUT(r, 128, 0.001, 1, 10**9)  # noqa: E731
                else:
                    make = lambda s, r=runners: ProbeHandoff(r, 128)  # noqa: E731
                found = srv.run_scenario(make, "Server", settings, Path(tempfile.mkdtemp()), rate=rate)
                emit(
                    out,
                    {
                        "graph": name,
                        "what": "sut",
                        "sut": sut_name,
                        "runners": runner_name,
                        "valid": found["valid"],
                        "p50_ms": found.get("p50_ns", 0) / 1e6,
                        "p99_ms": found.get("p99_ns", 0) / 1e6,
                    },
                )


def ceiling(graph_dir: Path, out: Path, names, fractions, seconds: float, work: Path) -> None:
    """How far above 0.8x Offline the stage's Server holds: the stage's own SUT (its Server batch bound,
    1-ms wait, queue limit) on the product's engine, Offline as the stage runs it, then Server at each
    fraction of that Offline in one run of `seconds`, lowest first; the first INVALID ends the climb."""
    from precisionflow.measure import serving as srv
    from precisionflow.stages import serve_engine

    settings = {**serving_settings(seconds), "scenarios": []}
    for name in names:
        path = prepared(graph_dir, name, work)
        _description, load = build_engine(path, work / f"engine-{name}")
        images = np.random.default_rng(0).random((128, 224, 224, 3), dtype=np.float32)
        _engine, runners, service_s = serve_engine.runners_of(None, images, 128, load=load)
        batch = serve_engine.server_max_batch(service_s, 0.015, 0.001)
        limit = srv.queue_limit(0.015, service_s[batch], batch, 1)
        chosen = {size: r for size, r in runners.items() if size <= batch}
        logs = Path(tempfile.mkdtemp())
        offline = srv.run_scenario(
            lambda s, runners=runners: srv.BatchingSUT(runners, 128, 0.0, 1, 10**9),
            "Offline",
            dict(settings, min_duration_ms=10000),
            logs / "offline",
            rate=2 * 128 / service_s[128],
        )
        base = offline.get("samples_per_second") or 0
        emit(out, {"graph": name, "what": "ceiling_offline", "per_s": base, "valid": offline["valid"], "server_max_batch": batch})
        for fraction in fractions:
            server = srv.run_scenario(
                lambda s, chosen=chosen, batch=batch, limit=limit: srv.BatchingSUT(chosen, batch, 0.001, 1, limit),
                "Server",
                settings,
                logs / f"s{fraction}",
                rate=fraction * base,
            )
            emit(
                out,
                {
                    "graph": name,
                    "what": "ceiling_server",
                    "fraction": fraction,
                    "target": round(fraction * base),
                    "seconds": seconds,
                    "valid": server["valid"],
                    "p50_ms": server.get("p50_ns", 0) / 1e6,
                    "p99_ms": server.get("p99_ns", 0) / 1e6,
                    "where_time_went": server.get("where_time_went"),
                },
            )
            if not server["valid"]:
                break


def bf16_on_gpu(graph_dir: Path, out: Path, names, seconds: float, work: Path) -> None:
    """The bf16 precision's GPU graph (precisions/bf16.py, placement tensorrt) built by the product's
    ONNX Runtime backend on the GPU: what its label says ran, its speed at b128 beside the fp32 engine's,
    and how far its outputs move from fp32 on the same inputs; also on the graph first converted to
    opset 22, where Conv's schema takes bfloat16."""
    import onnx
    from onnx import version_converter

    from precisionflow.backends import onnxruntime_backend as backend
    from precisionflow.precisions import bf16
    from precisionflow.precisions.spec import GraphJob

    device = os.environ.get("PF_DEVICE", "cuda")
    target = {"device": device}
    params = {"optimization_level": "all", "intra_op_threads": 1, "cuda": dict(H200_CUDA) if device == "cuda" else None}
    for name in names:
        path = prepared(graph_dir, name, work)
        images = np.random.default_rng(0).random((128, 224, 224, 3), dtype=np.float32)
        fp32_description, fp32_load = build_engine(path, work / f"engine-{name}")
        fp32_engine = fp32_load()
        reference = fp32_engine.run(images)
        timed = device == "cuda"  # engine_figures reads device events (a CPU smoke run checks the rest)
        emit(out, {"graph": name, "what": "bf16_reference", **(engine_figures(fp32_load, 128, seconds) if timed else {})})
        opset22 = work / f"{name}_opset22.onnx"
        onnx.save(version_converter.convert_version(onnx.load(str(path)), 22), str(opset22))
        for variant, source in (("as_exported", path), ("opset22", opset22)):
            graph = work / f"{name}_{variant}_bf16.onnx"
            record = {"graph": name, "what": "bf16", "variant": variant}
            try:
                job = GraphJob(source, graph, {"bf16": {"placement": "tensorrt"}}, {}, work)
                record["conversion"] = bf16.to_bf16(job)
                where = work / f"engine-{name}-{variant}-bf16"
                where.mkdir(parents=True, exist_ok=True)
                description = backend.build(graph, where, params, target, "bf16")
                record["executed"] = description["executed"]
                load = lambda where=where, description=description: backend.load(where, description, target)  # noqa: E731
                outputs = load().run(images)
                record["max_abs_diff"] = float(np.max(np.abs(outputs - reference)))
                record["top1_agreement"] = float(np.mean(outputs.argmax(1) == reference.argmax(1)))
                record.update(engine_figures(load, 128, seconds) if timed else {})
            except Exception as error:  # the record says what failed; the next variant still runs
                record["error"] = f"{type(error).__name__}: {str(error)[:400]}"
            emit(out, record)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("part", choices=("engines", "b1", "serving", "options", "sut", "stage", "side", "ceiling", "bf16"))
    parser.add_argument("graph_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--graphs", nargs="*")
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--fractions", default="0.5,0.8")
    parser.add_argument("--max-batch", type=int, default=128)
    parser.add_argument("--verify-seconds", type=float, default=60.0)
    parser.add_argument("--probe-seconds", type=float, default=0.0, help="stage: the search's probing runs")
    parser.add_argument("--work", type=Path, default=Path("/root/evp"))
    parser.add_argument("--settings", type=Path, help="side: the serve stage's settings (JSON)")
    parser.add_argument("--rounds", type=int, default=3, help="b1: rounds of the four variants")
    args = parser.parse_args()
    import onnxruntime

    if hasattr(onnxruntime, "preload_dlls"):
        onnxruntime.preload_dlls()
    if os.environ.get("GC_OFF"):  # is Python's garbage collector the Server tail? (sut part)
        gc.disable()
    args.work.mkdir(parents=True, exist_ok=True)
    names = args.graphs or sorted(p.stem for p in args.graph_dir.glob("*.onnx"))
    emit(args.out, {"what": "setup", "onnxruntime": onnxruntime.__version__, "part": args.part, "graphs": names})
    if args.part == "engines":
        engines(args.graph_dir, args.out, names, args.seconds, args.work)
    elif args.part == "b1":
        batch_one_rounds(args.graph_dir, args.out, names, args.seconds, args.work, args.rounds)
    elif args.part == "stage":
        serving_stage(args.graph_dir, args.out, names, args.seconds, args.work, args.verify_seconds, args.probe_seconds)
    elif args.part == "side":
        serving_side(args.graph_dir, args.out, names, args.work, args.settings)
    elif args.part == "ceiling":
        ceiling(args.graph_dir, args.out, names, [float(f) for f in args.fractions.split(",")], args.seconds, args.work)
    elif args.part == "bf16":
        bf16_on_gpu(args.graph_dir, args.out, names, args.seconds, args.work)
    elif args.part == "options":
        options_matrix(args.graph_dir, args.out, names, args.seconds, args.work)
    elif args.part == "sut":
        sut_matrix(args.graph_dir, args.out, names, float(args.fractions.split(",")[0]), args.seconds, args.work)
    else:
        fractions = [float(f) for f in args.fractions.split(",")]
        serving(args.graph_dir, args.out, names, fractions, args.seconds, args.work, args.max_batch)


if __name__ == "__main__":
    main()
