"""How long the report stage takes for 100 engines (generated evaluation and ratio nodes).

Writes a results folder of generated nodes -- a data node (digits-sized images), one fp32 reference
export, 100 engines over 4 targets with evaluations (random accuracies, flipped samples, speed
figures) and their side-by-side ratio jobs -- then times report.run on it in a fresh process.

    python benchmarks/report_100.py      # writes benchmarks/results/report_100.json
"""

import json
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, save  # noqa: E402

PRECISIONS = ("fp32", "fp16", "int8", "int8_qat", "int8_mixed")
BUDGET = {
    "max_top1_drop": 1.0,
    "min_agreement": 0.99,
    "max_class_drop": 5.0,
    "min_qat_agreement": None,
    "min_speedup": None,
    "speedup_at": "bmax",
}


def write_node(results: Path, key: str, inputs: dict, summary: dict = None, files: dict = None, params: dict = None) -> Path:
    folder = results / key
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in (files or {}).items():
        (folder / name).write_text(content if isinstance(content, str) else json.dumps(content))
    stage, node = key.split("/")
    (folder / "node.json").write_text(
        json.dumps(
            {"stage": stage, "id": node, "params": params or {}, "inputs": inputs, "summary": summary or {}, "versions": {}}
        )
    )
    return folder


def speed(rng, latency_ms: float) -> dict:
    window = lambda: {
        "p50_ms": latency_ms,
        "p99_ms": latency_ms * 1.5,
        "cv_percent": float(rng.uniform(1, 9)),
        "noisy": False,
        "throughput_sps": 1000 / latency_ms,
    }
    return {
        "batch": {"1": window(), "32": window()},
        "streams": {"4": {"throughput_sps": 4000 / latency_ms}},
        "conditions": {"run": "2026-11-30T06:00:00", "loadavg_1m": 1.0},
    }


def generate(results: Path, engines: int = 100) -> dict:
    rng = np.random.default_rng(0)
    images = rng.random((450, 8, 8, 1), dtype=np.float32)
    labels = rng.integers(0, 10, 450)
    data = results / "prepare_dataset" / "digits-0"
    data.mkdir(parents=True)
    np.savez(data / "data.npz", x_test=images, y_test=labels)
    write_node(results, "prepare_dataset/digits-0", {}, files={"meta.json": {"classes": [str(i) for i in range(10)]}})
    write_node(results, "train_model/small_cnn-0", {"data": "prepare_dataset/digits-0"})
    write_node(results, "export_onnx/x-0", {"model": "train_model/small_cnn-0", "data": "prepare_dataset/digits-0"})
    inputs = {}
    for index in range(engines):
        precision, target = PRECISIONS[index % 5], f"t{index // 25}"
        graph = write_node(
            results,
            f"quantize_onnx/{precision}-{index}",
            {"onnx": "export_onnx/x-0"},
            {
                "precision": precision,
                "calibration_source": "ptq" if precision == "int8" else None,
                "calibration_method": "entropy",
                "quantized_fraction": 0.75,
            },
        )
        engine = f"build_engine/{precision}-{index}"
        write_node(results, engine, {"graph": f"quantize_onnx/{graph.name}"})
        flipped = rng.choice(450, int(rng.integers(0, 30)), replace=False)
        rows = "test_index,label,fp32_prediction,engine_prediction\n" + "".join(
            f"{i},{labels[i]},{labels[i]},{(labels[i] + 1) % 10}\n" for i in flipped
        )
        metrics = {
            "top1": float(rng.uniform(0.9, 0.98)),
            "agreement": 1 - len(flipped) / 450,
            "flipped": len(flipped),
            "per_class_top1": {str(c): float(rng.uniform(0.85, 1)) for c in range(10)},
            "precision": precision,
            "target": target,
            "speed": speed(rng, float(rng.uniform(0.01, 0.1))),
            "engine": {"engine_bytes": 150000, "device": "cpu", "executed": {"executed_precision": "fp32", "as_requested": True}},
        }
        key = f"evaluate_engine/{precision}-{target}-{index}"
        write_node(
            results,
            key,
            {"engine": engine, "data": "prepare_dataset/digits-0", "reference": "export_onnx/x-0"},
            files={"metrics.json": metrics, "flipped.csv": rows},
            params={"precision": precision, "target": target},
        )
        ratios = {
            "settings": {
                s: {
                    "vs_fp32": {"geomean": 1.1, "noisy": False, "cv_percent": 2.0},
                    "vs_tf": {"geomean": 10.0, "noisy": False, "cv_percent": 2.0},
                }
                for s in ("b1", "b32", "s4")
            }
        }
        write_node(results, f"compare_speed/{precision}-{index}", {"engine": engine}, files={"metrics.json": ratios})
        inputs[f"eval{index:05d}"] = str(results / key)
        inputs[f"speed{index:05d}"] = str(results / f"compare_speed/{precision}-{index}")
    return inputs


def main() -> None:
    import subprocess

    results = OUT / "report_100" / "results"
    if results.exists():
        shutil.rmtree(results)
    inputs = generate(results)
    out = OUT / "report_100" / "out"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (OUT / "report_100" / "inputs.json").write_text(json.dumps(inputs))
    budgets = {f"evaluate_engine/{Path(path).name}": BUDGET for role, path in inputs.items() if role.startswith("eval")}
    (OUT / "report_100" / "params.json").write_text(json.dumps({"budgets": budgets}))
    script = (
        "import json, sys, time; from pathlib import Path\n"
        "started = time.perf_counter()\n"
        "from precisionflow.stages import report\n"
        f"root = Path({str(OUT / 'report_100')!r})\n"
        "inputs = {k: Path(v) for k, v in json.loads((root / 'inputs.json').read_text()).items()}\n"
        "report.run(json.loads((root / 'params.json').read_text()), inputs, root / 'out')\n"
        "print('SECONDS', time.perf_counter() - started)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    seconds = float(done.stdout.strip().splitlines()[-1].split()[1])
    images = len(list(out.glob("figures/*.png")))
    save(
        "report_100.json",
        {
            "engines": 100,
            "targets": 4,
            "seconds_including_imports": round(seconds, 2),
            "pictures": images,
            "html_bytes": (out / "report.html").stat().st_size,
        },
    )


if __name__ == "__main__":
    main()
