"""Helpers shared by the benchmark scripts: run a sweep through the CLI, read node summaries."""

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
RESULTS = ROOT / "benchmarks" / "results"


# The shortest timing a benchmark about accuracy or graphs can use: its speed figures are not the point.
QUICK_TIMING = [
    "evaluate.duration_s=0.05",
    "evaluate.warmup_s=0.01",
    "evaluate.repeats=2",
    "evaluate.ratio_rounds=2",
    "evaluate.ratio_window_s=0.02",
    "evaluate.timing_batch_sizes=[1]",
    "evaluate.streams=[]",
    "evaluate.serving.enabled=false",
    "evaluate.accept_undecided=true",
    "tracking.enabled=false",
]


def shapes_folder(name: str = "shapes64", per_class: int = 150, size: int = 64) -> Path:
    """A generated shapes image folder under benchmarks/out (benchmarks/make_shapes.py), made once."""
    folder = OUT / name
    if not folder.exists():
        command = [sys.executable, str(ROOT / "benchmarks" / "make_shapes.py"), str(folder)]
        subprocess.run([*command, "--per-class", str(per_class), "--size", str(size)], check=True)
    return folder


def run_sweep(results: Path, overrides: List[str]) -> float:
    """Run `precisionflow run -m` into `results`; return its wall time in seconds."""
    command = [sys.executable, "-m", "precisionflow.cli", "run", "-m", f"results_dir={results}", *overrides]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    # Exit 1 with a budget verdict means the run finished and an engine broke its budget (or the
    # test split could not tell): its
    # figures are what the benchmark reads (the verdict is part of what it reports).
    if done.returncode == 1 and ("broke it" in done.stdout or "undecided" in done.stdout):
        print(done.stdout[done.stdout.index("Budgets (") :], flush=True)
    elif done.returncode != 0:
        raise SystemExit(f"sweep failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def nodes(results: Path, stage: str) -> List[Dict]:
    return [json.loads(p.read_text()) for p in sorted(results.glob(f"{stage}/*/node.json"))]


def newest_summary(results: Path) -> str:
    report = max(results.glob("report/*/summary.csv"), key=lambda p: p.stat().st_mtime)
    return report.read_text()


def save(name: str, data) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / name).write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(json.dumps(data, indent=2, default=str))


def qat_cpu_graph_inputs(results: Path) -> Dict:
    """What rebuilding a finished run's CPU int8_qat graph needs (its newest quantize node): the
    fp32 source graph, the QAT cache's ranges and lineage, the test images, and the QAT model's and
    the exported graph's test predictions."""
    import numpy as np

    from precisionflow.datasets.store import Split
    from precisionflow.hashing import file_hash
    from precisionflow.quant import cache

    newest = max(results.glob("quantize_onnx/int8_qat-ortcpu-*/node.json"), key=lambda p: p.stat().st_mtime)
    node = json.loads(newest.read_text())
    source = results / node["inputs"]["onnx"] / "model.onnx"
    ranges, lineage = cache.load_cache(results / node["inputs"]["calibration"], file_hash(source))
    test = Split(results / node["inputs"]["data"], "test")
    export = json.loads((results / node["inputs"]["onnx"] / "node.json").read_text())
    return {
        "source": source,
        "ranges": ranges,
        "lineage": lineage,
        "images": test.images(np.arange(len(test))).astype(np.float32),
        "qat": np.load(results / export["inputs"]["model"] / "qat_logits.npy").argmax(1),
        "reference": np.load(results / node["inputs"]["onnx"] / "reference_logits.npy").argmax(1),
    }
