"""Batch-1 streams on the GPU, across every GPU job whose node folders came back: how each engine's
throughput grows from one thread to several threads sharing its session (evaluate_engine's
`speed.streams`, recorded on the GPU machine). Reads the collected results folders kept under
benchmarks/results/ (collected.tar.xz, or *_collected.tar.xz); measures nothing itself.

    python benchmarks/streams_across_jobs.py > benchmarks/results/streams_across_jobs.md
"""

import sys
from pathlib import Path

from h200_table import node_files  # {node key: {file name: parsed JSON}} of a collected archive

RESULTS = Path(__file__).resolve().parent / "results"
COLUMNS = ("job", "model", "precision", "GPU", "options", "1 stream /s", "4 streams /s", "8 streams /s", "8 / 1")


def engine_records(archive: Path):
    """(model, metrics) of each evaluate_engine node in a collected results archive that ran on a GPU;
    the model is named by the node's reference graph (export_onnx/<model>-...)."""
    for key, files in node_files(archive).items():
        metrics = files.get("metrics.json") or {}
        if (
            key.startswith("evaluate_engine/")
            and metrics.get("engine", {}).get("device") == "cuda"
            and metrics.get("speed", {}).get("streams")
        ):
            reference = files["node.json"]["inputs"].get("reference", "-/-")
            yield reference.split("/")[1].split("-")[0], metrics


def options(engine: dict) -> str:
    """The CUDA provider options the engine ran with, named as the report names them."""
    passed = engine.get("cuda_options") or {}
    named = [
        ("TF32", passed.get("use_tf32")),
        ("NHWC", passed.get("prefer_nhwc")),
        ("fused conv+bias", passed.get("fuse_conv_bias")),
        ("CUDA graph", passed.get("enable_cuda_graph")),
    ]
    return ", ".join(name for name, on in named if on == "1") or "-"


def row(job: str, model: str, metrics: dict) -> list:
    engine, streams = metrics["engine"], metrics["speed"]["streams"]
    rate = {int(count): entry.get("throughput_sps") for count, entry in streams.items()}
    growth = rate[8] / rate[1] if rate.get(8) and rate.get(1) else None
    return [
        job,
        model,
        engine.get("precision", "-"),
        engine.get("device_name", "-").replace("NVIDIA ", ""),
        options(engine),
        *(f"{rate[count]:,.0f}" if rate.get(count) else "-" for count in (1, 4, 8)),
        f"{growth:.2f}" if growth else "-",
    ]


def main() -> None:
    archives = sorted(RESULTS.rglob("collected.tar.xz")) + sorted(RESULTS.rglob("*_collected.tar.xz"))
    rows = [row(str(archive.relative_to(RESULTS)), *record) for archive in archives for record in engine_records(archive)]
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for each in rows:
        print("| " + " | ".join(each) + " |")
    print(f"\n{len(rows)} GPU engines in {len(set(r[0] for r in rows))} collected results folders", file=sys.stderr)


if __name__ == "__main__":
    main()
