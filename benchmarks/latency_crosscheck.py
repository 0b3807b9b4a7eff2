"""Issue 5: does precisionflow's batch-1 latency agree with an independent measurement, and how
much do the figures move from run to run?

For each graph: build the engine with the project's backend, then alternate ROUNDS times between
(a) the project's measurement (engine.prepare + timing.repeated_windows, as evaluate_engine does)
and (b) a plain ONNX Runtime loop on the same precision graph written apart from the project
(engines_on_device.independent_latency_ms). Alternating spreads machine noise over both.

    PYTHONPATH=src .venv/bin/python benchmarks/latency_crosscheck.py --inputs DIR [--device cpu]
        -> benchmarks/results/latency_crosscheck_<device>.json
"""

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from engines_on_device import independent_latency_ms
from precisionflow.measure import speed, timing
from precisionflow.backends import onnxruntime_backend as backend

ROUNDS = 7
WINDOW = {"repeats": 1, "warmup_s": 0.2, "duration_s": 1.0, "min_iterations": 50}


def cv_percent(values) -> float:
    return float(100 * np.std(values) / np.mean(values))


def crosscheck(graph: Path, device: str, images: np.ndarray) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        description = backend.build(
            graph, Path(scratch), {"optimization_level": "all", "intra_op_threads": 1}, {"device": device}
        )
        engine = backend.load(Path(scratch), description, {"device": device})
        batch = speed.timing_batch(images, 1)
        ours, plain = [], []
        for _ in range(ROUNDS):
            ours.append(timing.repeated_windows(engine.prepare(batch), 1, WINDOW)["mean_ms"])
            plain.append(independent_latency_ms(graph, device, batch)["mean_ms"])
    return {
        "ours_mean_ms_per_round": ours,
        "plain_mean_ms_per_round": plain,
        "ours_median_ms": float(np.median(ours)),
        "plain_median_ms": float(np.median(plain)),
        "difference_percent": float(100 * (np.median(ours) / np.median(plain) - 1)),
        "ours_cv_percent_across_rounds": cv_percent(ours),
        "plain_cv_percent_across_rounds": cv_percent(plain),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inputs", type=Path, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args()
    if args.device == "cuda":
        import onnxruntime

        onnxruntime.preload_dlls()
    report = {}
    for model_dir in sorted(p for p in args.inputs.iterdir() if p.is_dir()):
        with np.load(model_dir / "data.npz") as data:
            images = data["x_test"]
        for graph in sorted(model_dir.glob("*/model.onnx")):
            key = f"{model_dir.name}/{graph.parent.name}"
            report[key] = crosscheck(graph, args.device, images)
            row = report[key]
            print(
                f"{key:<30} ours {row['ours_median_ms']:.4f} ms  plain {row['plain_median_ms']:.4f} ms  "
                f"diff {row['difference_percent']:+.1f}%  cv ours {row['ours_cv_percent_across_rounds']:.1f}% "
                f"plain {row['plain_cv_percent_across_rounds']:.1f}%",
                flush=True,
            )
    out = args.out / f"latency_crosscheck_{args.device}.json"
    out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
