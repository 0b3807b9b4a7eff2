"""Whether an engine's batch-1 streams take turns because of cuDNN's fused Conv+bias, and what the
fusion buys one caller. Runs on the GPU machine, over the engines a run built there.

The fusion is a provider option of ONNX Runtime's CUDA provider (`fuse_conv_bias`), applied when a
session loads the engine file, so the same file loaded with it on and off separates it from
everything else: precisionflow's own backend loads each engine both ways and times its streams
exactly as evaluate_engine does (one session shared by 1, 4 and 8 threads, each with its own device
buffers, no CUDA graph) and one caller's batch sizes (CUDA graph as built, three windows each), in
rounds whose order alternates. Findings: docs/hardware.md, "Batch-1 streams".

    python benchmarks/streams_fusion_probe.py RESULTS OUT.json [--seconds 2] [--rounds 2]
                                              [--batches 1 128] [--batch-seconds 1]

RESULTS: a results folder holding build_engine nodes (engine.json beside the engine file). An
engine built without the fusion is loaded as built only; on a CPU every engine is (the option is
CUDA's), which is how this runs here as a smoke test.
"""

import argparse
import json
from pathlib import Path

import numpy as np


STREAMS = (1, 4, 8)


def engines(results: Path):
    """(node name, engine folder, description, target_def) of each built engine in RESULTS."""
    if not (results / "build_engine").is_dir():
        raise SystemExit(f"no build_engine nodes under {results}: expected RESULTS/build_engine/<node>/engine.json")
    for folder in sorted((results / "build_engine").iterdir()):
        description_file, node_file = folder / "engine.json", folder / "node.json"
        if description_file.is_file() and node_file.is_file():
            node = json.loads(node_file.read_text())
            yield folder.name, folder, json.loads(description_file.read_text()), node["params"]["target_def"]


def fusion_sides(description: dict) -> list:
    """The settings to load with: as built, and with the fusion off where it was built on."""
    cuda = description.get("cuda_settings")
    if not (cuda and cuda.get("fuse_conv_bias")):
        return [("as built", description)]
    return [("fused", description), ("not fused", {**description, "cuda_settings": {**cuda, "fuse_conv_bias": False}})]


def rates(folder: Path, description: dict, target_def: dict, seconds: float, batches=(), batch_seconds: float = 1.0) -> dict:
    """evaluate_engine's figures (speed.measure) for the engine loaded with `description`: batch-1
    streams (1/4/8 threads sharing one session) and, for `batches`, one caller's batches (three
    windows of `batch_seconds` each)."""
    from precisionflow.backends import onnxruntime_backend as backend
    from precisionflow.measure import speed

    load = lambda: backend.load(folder, description, target_def)  # noqa: E731
    engine = load()
    shape = engine.session.get_inputs()[0].shape
    images = np.random.default_rng(0).standard_normal((max([1, *batches]), *shape[1:])).astype(np.float32)
    timing = {"stream_batch_size": 1, "warmup_s": 0.2, "repeats": 3, "min_iterations": 5}
    streams = speed.measure(
        load, images, {**timing, "timing_batch_sizes": [], "streams": list(STREAMS), "duration_s": seconds}, engine
    )
    found = {
        "streams": {
            count: {key: figures.get(key) for key in ("throughput_sps", "p50_ms", "engines")}
            for count, figures in streams["streams"].items()
        }
    }
    if batches:
        timed = speed.measure(
            load, images, {**timing, "timing_batch_sizes": list(batches), "streams": [], "duration_s": batch_seconds}, engine
        )
        found["batch"] = {
            size: {key: figures.get(key) for key in ("throughput_sps", "p50_ms")} for size, figures in timed["batch"].items()
        }
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seconds", type=float, default=2.0, help="each streams window")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every side, the order alternating")
    parser.add_argument("--batches", type=int, nargs="*", default=[1, 128], help="one caller's batch sizes, timed too")
    parser.add_argument("--batch-seconds", type=float, default=1.0, help="each of a batch size's three windows")
    args = parser.parse_args()
    found = {}
    for name, folder, description, target_def in engines(args.results):
        sides = fusion_sides(description)
        rounds = []
        for index in range(args.rounds):  # alternating order: neither side always meets the machine first
            ordered = sides if index % 2 == 0 else list(reversed(sides))
            rounds.append(
                {
                    side: rates(folder, settings, target_def, args.seconds, args.batches, args.batch_seconds)
                    for side, settings in ordered
                }
            )
        found[name] = {
            "device_name": description.get("device_name"),
            "cuda_settings": description.get("cuda_settings"),
            "rounds": rounds,
        }
        for side in (side for side, _ in sides):
            streams = " / ".join(
                f"{round_[side]['streams'][count]['throughput_sps']:,.0f}" for round_ in rounds for count in ("1", "8")
            )
            batches = " / ".join(
                f"b{size} {figures['throughput_sps']:,.0f}"
                for round_ in rounds
                for size, figures in round_[side].get("batch", {}).items()
            )
            print(f"{name:32s} {side:10s} 1 / 8 streams per round: {streams}; one caller: {batches or '-'}")
    if not found:
        raise SystemExit(
            f"no build_engine nodes with engine.json under {args.results}: expected RESULTS/build_engine/<node>/engine.json"
        )
    args.out.write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main()
