"""Issue 43, item 4: is the int8_mixed the workflow builds worth building?

The review's case: MobileNetV2 trained on real photo patches at 64x64, where post-training int8
FAILs and fp32 is slow on the CPU; here with a validation split large enough to resolve a 2-point
budget (30% of 2,880 images: 864, where one image is 0.12 points and no flip reaches 0.44). The
workflow's own stages run fp32, int8 and int8_mixed on the CPU placement; the table gives each
row's test top-1 change against fp32 with its interval, its side-by-side speed over fp32 with its
interval, the ops float / int8 as built -- or, for int8_mixed, NOT BUILT and why -- and the
search's record (trials, the candidate mixes' speed against fp32).

    .venv/bin/python benchmarks/int8_mixed_worth.py [LABEL [OVERRIDE ...]] -> benchmarks/results/int8_mixed_worth_LABEL.json

The review's own case had the default validation split (10%: 288 images, which cannot resolve 2
points): `int8_mixed_worth.py small_val_after dataset.val_fraction=0.1`.

Run it from an older checkout (PYTHONPATH=<checkout>/src) for the "before" figures.
"""

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, QUICK_TIMING, ROOT, run_sweep, save  # noqa: E402

OVERRIDES = [
    "model=mobilenet_v2",
    "dataset=image_folder",
    "dataset.image_size=[64,64]",
    "dataset.test_fraction=0.3",
    "dataset.val_fraction=0.3",
    "train.epochs=10",
    "precisions=[fp32,int8,int8_mixed]",
    "int8.simulate_tensorrt=false",
    "int8.mixed_max_val_drop=2.0",
    *[o for o in QUICK_TIMING if not o.startswith("evaluate.ratio_rounds")],
    "evaluate.ratio_rounds=8",
]


def photos() -> Path:
    folder = OUT / "photo_patches64_n2880"
    if not folder.exists():
        command = [
            sys.executable,
            str(ROOT / "benchmarks" / "photo_patches.py"),
            str(folder),
            "--per-class",
            "360",
            "--seed",
            "1",
        ]
        subprocess.run(command, check=True)
    return folder


def read(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def rows(results: Path):
    from precisionflow.reporting.compare import ratio_values

    ratios = {}
    for folder in results.glob("compare_speed/*"):
        node, metrics = read(folder / "node.json"), read(folder / "metrics.json")
        if metrics:
            ratios[node["inputs"]["engine"]] = ratio_values(metrics)
    found = []
    for folder in sorted(results.glob("quantize_onnx/*")) + sorted(results.glob("evaluate_engine/fp32-*")):
        node = read(folder / "node.json")
        summary = node["summary"]
        row = {"node": folder.name, "precision": node["params"]["precision"]}
        if summary.get("declined"):
            row.update({"built": False, "why": summary["declined"], "search": summary.get("mixed_search")})
            found.append(row)
            continue
        if node["stage"] == "quantize_onnx":
            row.update({"kept_float": len(summary.get("kept_float", [])), "search": summary.get("mixed_search")})
            evaluation = next(
                (
                    e
                    for e in results.glob("evaluate_engine/*")
                    if read(results / read(e / "node.json")["inputs"]["engine"] / "node.json")["inputs"]["graph"]
                    == f"quantize_onnx/{folder.name}"
                ),
                None,
            )
        else:
            evaluation = folder
        metrics = read(evaluation / "metrics.json")
        engine_key = read(evaluation / "node.json")["inputs"]["engine"]
        row.update(
            {
                "built": True,
                "ran": metrics["engine"]["executed"]["executed_precision"],
                "top1": round(metrics["top1"], 4),
                "change_vs_fp32": metrics.get("drop"),
                "agreement": metrics.get("agreement"),
                "speed_vs_fp32": ratios.get(engine_key),
            }
        )
        found.append(row)
    return found


def main() -> None:
    label = sys.argv[1] if len(sys.argv) > 1 else "after"
    results = OUT / f"int8_mixed_worth_{label}"
    seconds = run_sweep(results, [*OVERRIDES, f"dataset.path={photos()}", *sys.argv[2:]])
    found = rows(results)
    for row in found:
        print(json.dumps({k: v for k, v in row.items() if k != "search"})[:1500], flush=True)
    summary = (max(results.glob("report/*/summary.txt"), key=lambda p: p.stat().st_mtime)).read_text()
    print(summary, flush=True)
    save(
        f"int8_mixed_worth_{label}.json",
        {"overrides": OVERRIDES, "wall_s": round(seconds, 1), "rows": found, "summary_txt": summary},
    )


if __name__ == "__main__":
    main()
