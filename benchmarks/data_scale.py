"""Memory at scale (issue 10): a generated folder of 224x224 JPEGs, 10 classes, at two sizes,
through the whole workflow (prepare -> 1-epoch training -> export -> calibration -> int8 graph ->
engines -> evaluation -> timing -> report -> MLflow), dataset.cache=disk; each job's peak resident
memory comes from its node.json (the runner records getrusage's ru_maxrss of the job's process).

    python benchmarks/data_scale.py                       # 2,000 and 20,000 images
    python benchmarks/data_scale.py --sizes 2000 --cache memory

Writes benchmarks/results/data_scale.json (raw: every node's stage, seconds, peak MB) and prints
the per-stage table. The model is the same at both sizes (a small CNN at 224x224 input) so the
only thing that grows is the data. Run it alone on the machine.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, RESULTS, nodes, run_sweep  # noqa: E402
from generated_images import SHAPES, make_image  # noqa: E402

import numpy as np  # noqa: E402

STAGES = (
    "prepare_dataset",
    "train_model",
    "export_onnx",
    "calibrate",
    "quantize_onnx",
    "build_engine",
    "evaluate_engine",
    "compare_speed",
    "benchmark_framework",
    "report",
    "track_mlflow",
)


def image_folder(count: int, size: int) -> Path:
    """<OUT>/images-<count>: count/10 JPEGs per class (kept between runs: generating is not measured)."""
    folder = OUT / f"images-{count}-{size}"
    done = folder / ".complete"
    if done.exists():
        return folder
    rng = np.random.default_rng(count)
    for shape in SHAPES:
        (folder / shape).mkdir(parents=True, exist_ok=True)
        for index in range(count // len(SHAPES)):
            make_image(shape, size, rng).save(folder / shape / f"{index:05d}.jpg", quality=90)
    done.write_text("")
    return folder


def overrides(folder: Path, size: int, cache: str):
    return [
        "dataset=image_folder",
        f"dataset.path={folder}",
        f"dataset.image_size=[{size},{size}]",
        f"dataset.cache={cache}",
        "model.filters=[8,8]",
        "model.dense_units=32",
        "train.epochs=1",
        "train.batch_size=64",
        "precisions=[fp32,int8]",
        "calibration.num_samples=128",
        "evaluate.duration_s=0.3",
        "evaluate.warmup_s=0.05",
        "evaluate.timing_batch_sizes=[1,32]",
        "evaluate.streams=[]",
    ]


def measure(count: int, size: int, cache: str):
    folder = image_folder(count, size)
    results = OUT / f"data_scale-{count}-{cache}-{time.strftime('%Y%m%d-%H%M%S')}"
    wall = run_sweep(results, overrides(folder, size, cache))
    rows = []
    for stage in STAGES:
        for record in nodes(results, stage):
            rows.append(
                {
                    "stage": stage,
                    "node": record["id"],
                    "seconds": record["timings"]["seconds"],
                    # the job's process or its largest child process (compare_speed times in children)
                    "peak_rss_mb": max(record["timings"]["peak_rss_mb"], record["timings"].get("children_peak_rss_mb", 0)),
                    **(
                        {"images_per_second": record["summary"]["images_per_second"], "sizes": record["summary"]["sizes"]}
                        if stage == "prepare_dataset"
                        else {}
                    ),
                }
            )
    data_bytes = sum(p.stat().st_size for p in results.glob("prepare_dataset/*/x_*.npy"))
    return {
        "images": count,
        "image_size": size,
        "cache": cache,
        "wall_seconds": round(wall, 1),
        "data_node_mb": round(data_bytes / 2**20, 1),
        "float32_arrays_would_be_mb": round(count * size * size * 3 * 4 / 2**20),
        "nodes": rows,
    }


def table(runs):
    by_stage = {}
    for run in runs:
        for row in run["nodes"]:
            peak = by_stage.setdefault(row["stage"], {}).get(run["images"], 0)
            by_stage[row["stage"]][run["images"]] = max(peak, row["peak_rss_mb"])
    sizes = [run["images"] for run in runs]
    lines = ["stage".ljust(20) + "".join(f"peak MB @{n}".rjust(16) for n in sizes) + ("   ratio" if len(sizes) == 2 else "")]
    for stage, peaks in by_stage.items():
        line = stage.ljust(20) + "".join(f"{peaks.get(n, float('nan')):16.1f}" for n in sizes)
        if len(sizes) == 2:
            line += f"   {peaks[sizes[1]] / peaks[sizes[0]]:.3f}"
        lines.append(line)
    for run in runs:
        prepare = next(row for row in run["nodes"] if row["stage"] == "prepare_dataset")
        lines.append(
            f"{run['images']} images: prepare_dataset {prepare['images_per_second']} images/s "
            f"({prepare['seconds']} s), data node {run['data_node_mb']} MB of uint8 "
            f"(float32 arrays: {run['float32_arrays_would_be_mb']} MB), workflow wall {run['wall_seconds']} s"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--cache", default="disk", choices=["memory", "disk", "none"])
    parser.add_argument("--name", default="data_scale")
    args = parser.parse_args()
    runs = [measure(count, args.image_size, args.cache) for count in args.sizes]
    text = table(runs)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps({"cpu_count": os.cpu_count(), "runs": runs}, indent=2) + "\n")
    (RESULTS / f"{args.name}.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
