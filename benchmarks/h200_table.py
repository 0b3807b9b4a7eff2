"""The H200 table of the README, from the node folders the GPU machine sent back.

Reads benchmarks/results/h200/*_collected.tar.xz (evaluate_engine, compare_speed and build_engine
node folders collected by `python -m precisionflow.pipeline.remote collect` on the H200) and prints one
row per engine: its CUDA options, accuracy and agreement with fp32, p50/p99 at batch 1,
throughput at batch 1/32/128 and with 1/4/8 streams (device clock for batch figures, host clock
for streams), and the side-by-side ratio to the fp32 engine of the same sweep point.

    python benchmarks/h200_table.py > benchmarks/results/h200/table.md
"""

import io
import json
import tarfile
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "h200"
RECORD_FILES = ("node.json", "metrics.json")


def node_files(archive: Path):
    """{node key: {file name: parsed JSON}} of one collected tarball: each node's record files
    (node.json, metrics.json); the other files a results folder holds need not be JSON."""
    nodes = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if member.isfile() and parts[-1] in RECORD_FILES and len(parts) >= 3:
                key = f"{parts[-3]}/{parts[-2]}"
                nodes.setdefault(key, {})[parts[-1]] = json.load(io.TextIOWrapper(tar.extractfile(member)))
    return nodes


def options(engine: dict) -> str:
    cuda = engine.get("cuda_options") or {}
    parts = ["TF32" if cuda.get("use_tf32") == "1" else "no TF32", "NHWC" if cuda.get("prefer_nhwc") == "1" else "NCHW"]
    parts.append("graph" if cuda.get("enable_cuda_graph") == "1" else "no graph")
    return " ".join(parts)


def rows(archive: Path):
    nodes = node_files(archive)
    ratios = {}
    for key, files in nodes.items():
        if key.startswith("compare_speed/") and "metrics.json" in files:
            engine_key = files["node.json"]["inputs"]["engine"]
            ratios[engine_key] = files["metrics.json"]["settings"]
    for key, files in sorted(nodes.items()):
        if not key.startswith("evaluate_engine/") or "metrics.json" not in files:
            continue
        metrics, engine_key = files["metrics.json"], files["node.json"]["inputs"]["engine"]
        batch, streams = metrics["speed"]["batch"], metrics["speed"]["streams"]
        ratio = ratios.get(engine_key, {}).get("b128", {}).get("vs_fp32", {}).get("median")
        ratio1 = ratios.get(engine_key, {}).get("b1", {}).get("vs_fp32", {}).get("median")
        yield [
            archive.name.split("_collected")[0],
            metrics["precision"],
            options(metrics["engine"]),
            metrics["engine"]["executed"].get("executed_precision", "?"),
            f"{metrics['top1']:.3f}",
            f"{metrics['agreement']:.3f}",
            f"{batch['1']['p50_ms']:.3f}",
            f"{batch['1']['p99_ms']:.3f}",
            *[f"{batch[size]['throughput_sps']:,.0f}" for size in ("1", "32", "128")],
            *[f"{streams[count]['throughput_sps']:,.0f}" for count in ("1", "4", "8")],
            f"{ratio1:.2f}" if ratio1 else "-",
            f"{ratio:.2f}" if ratio else "-",
        ]


def main() -> None:
    header = [
        "model",
        "precision",
        "options",
        "ran",
        "top1",
        "agree",
        "p50 b1 ms",
        "p99 b1 ms",
        "b1 /s",
        "b32 /s",
        "b128 /s",
        "1 stream /s",
        "4 streams /s",
        "8 streams /s",
        "x fp32 b1",
        "x fp32 b128",
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for archive in sorted(RESULTS.glob("*_collected.tar.xz")):
        for row in rows(archive):
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
