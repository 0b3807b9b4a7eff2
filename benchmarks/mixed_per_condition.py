"""Issue 52: int8_mixed judged per condition -- real photo patches with a dim condition.

Photo patches (benchmarks/photo_patches.py: two photographs scikit-learn ships, 8 classes) at
32x32; every 5th image dimmed to DIM_FACTOR of its brightness and tagged `dim` in a sidecar.
Calibration leaves the dim images out (calibration.exclude_conditions=[dim]: ranges fitted to bright
scenes, the way a calibration set drawn from daytime footage is), so post-training int8 has few
levels left for dim pixels. fp32, int8 and int8_mixed on the CPU placement, judged overall
(2 points) and per condition (max_condition_drop), the search held to the same budgets on the
validation split. Per condition, each row: the drop with its interval on the selection split (the
search's) and on test (the verdict's), ops float / int8 as built, speed over fp32 with its interval,
and the search's time against the whole run.

    .venv/bin/python benchmarks/mixed_per_condition.py LABEL DIM_FACTOR [OVERRIDE ...]
        -> benchmarks/results/mixed_per_condition_LABEL_dimDIM_FACTOR.json
    .venv/bin/python benchmarks/mixed_per_condition.py LABEL noiseSIGMA [OVERRIDE ...]
        every 5th image with Gaussian noise of that sigma (in pixel levels), tagged `noisy`

"before": the same command with PYTHONPATH=<a checkout before issue 52>/src (the search then read
the overall drop only).
"""

import json
import re
import subprocess
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, QUICK_TIMING, ROOT, save  # noqa: E402
from photo_patches import change_every  # noqa: E402

DIM_EVERY = 5
OVERRIDES = [
    "model=resnet_mini",
    "dataset=image_folder",
    "dataset.image_size=[32,32]",
    "dataset.test_fraction=0.3",
    "dataset.val_fraction=0.3",
    "train.epochs=10",
    "precisions=[fp32,int8,int8_mixed]",
    "int8.simulate_tensorrt=false",
    "evaluate.budget.max_top1_drop=2.0",
    "evaluate.budget.max_condition_drop=6.0",
    "int8.mixed_max_val_drop=2.0",
    *[o for o in QUICK_TIMING if not o.startswith(("evaluate.ratio_rounds", "evaluate.timing_batch_sizes"))],
    "evaluate.ratio_rounds=6",
    "evaluate.timing_batch_sizes=[1,32]",
]


def photos_with_condition(condition: str, per_class: int = 300) -> tuple:
    """(image folder, conditions sidecar, tag): photo patches, every DIM_EVERY-th changed and tagged:
    "0.04" dims it to that fraction of its brightness (`dim`), "noise40" adds Gaussian noise of
    sigma 40 pixel levels (`noisy`)."""
    noise = condition.startswith("noise")
    tag = "noisy" if noise else "dim"
    folder = OUT / f"photo_patches32_{'' if noise else 'dim'}{condition}_n{8 * per_class}"
    sidecar = folder.parent / f"{folder.name}-conditions.csv"
    if sidecar.is_file():
        return folder, sidecar, tag
    command = [sys.executable, str(ROOT / "benchmarks" / "photo_patches.py"), str(folder), "--per-class", str(per_class)]
    subprocess.run([*command, "--size", "32", "--seed", "2"], check=True)
    rows = ["file,conditions", *change_every(folder, DIM_EVERY, condition)]
    sidecar.write_text("\n".join(rows) + "\n")
    return folder, sidecar, tag


def read(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def graphs(results: Path):
    """Each quantize node: ops float / int8 as built (or why not built), the search's record and time."""
    found = {}
    for folder in sorted(results.glob("quantize_onnx/*")):
        node = read(folder / "node.json")
        summary, search = node["summary"], (node["summary"].get("mixed_search") or {})
        found[folder.name] = {
            "precision": node["params"]["precision"],
            "built": not summary.get("declined"),
            "why_not": summary.get("declined"),
            "ops_float": len(summary.get("kept_float") or []),
            "ops_int8": summary.get("quantized_nodes"),
            "seconds": (node.get("timings") or {}).get("seconds"),
            "search": {
                key: search.get(key)
                for key in (
                    "split",
                    "images",
                    "drop_points",
                    "drop_interval",
                    "spurious_per_image",
                    "interval",
                    "max_spurious_per_image",
                    "map_drop",
                    "max_map_drop",
                    "conditions",
                    "condition_limits",
                    "budget_met",
                    "fastest",
                    "speed_vs_fp32",
                    "joined",
                    "of",
                )
                if key in search
            }
            | {
                "int8_itself": (search.get("trials") or {}).get("0"),
                "costliest": search.get("costliest"),
                "kept": search.get("kept"),
                "ranked_for": search.get("ranked_for"),
                "trials": search.get("trials"),
            },
        }
    return found


def engines(results: Path):
    report = max(results.glob("report/*/verdicts.json"), key=lambda path: path.stat().st_mtime)
    keys = (
        "precision",
        "node",
        "ran",
        "verdict",
        "drop",
        "per_condition",
        "speed",
        "checks",
        "costly_ops",
        "validation_conditions",
    )
    return [{key: entry.get(key) for key in keys} for entry in json.loads(report.read_text())]


def summarize(label: str, results: Path) -> None:
    """Re-read a results folder's quantize nodes into a saved JSON (their times and search records)."""
    from _common import RESULTS

    path = RESULTS / label
    found = json.loads(path.read_text())
    found["graphs"] = graphs(results)  # not the engines: a later run in the folder wrote the newest report
    path.write_text(json.dumps(found, indent=1) + "\n")


def run_and_read(results: Path, overrides, said, console: Path) -> dict:
    """`precisionflow run` into `results`, its console kept at `console`; what it measured: each
    quantize node's search (graphs), each engine's verdict (engines) and the console's verdict lines."""
    command = [sys.executable, "-m", "precisionflow.cli", "run", "--cores", "2", f"results_dir={results}", *overrides]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    console.write_text(done.stdout + done.stderr)
    if done.returncode not in (0, 1):
        raise SystemExit(f"run failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return {
        "command": " ".join(said),
        "overrides": overrides,
        "exit": done.returncode,
        "wall_s": round(wall, 1),
        "graphs": graphs(results),
        "engines": engines(results),
        "console_budgets": done.stdout[done.stdout.find("Budgets (") :],
    }


def main() -> None:
    if sys.argv[1] == "--summarize":  # --summarize RESULT_JSON_NAME RESULTS_DIR
        summarize(sys.argv[2], Path(sys.argv[3]))
        return
    label, condition, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    folder, sidecar, tag = photos_with_condition(condition)
    named = condition if condition.startswith("noise") else f"dim{float(condition)}"
    # one folder per data set: "after" reuses "before"'s training, calibration and int8
    results = OUT / f"mixed-per-condition-{named}" / re.sub(r"[^A-Za-z0-9_.-]", "_", "-".join(sorted(extra)) or "default")
    given = {override.split("=", 1)[0] for override in extra}  # an OVERRIDE replaces the default of its key
    defaults = [override for override in OVERRIDES if override.split("=", 1)[0] not in given]
    overrides = [*defaults, f"calibration.exclude_conditions=[{tag}]", f"dataset.path={folder}", f"dataset.conditions={sidecar}"]
    overrides += extra
    said = ["benchmarks/mixed_per_condition.py", label, condition, *extra]
    found = run_and_read(results, overrides, said, OUT / f"mixed_per_condition_{label}_{named}_stdout.txt")
    suffix = re.sub(r"[^A-Za-z0-9_.-]", "_", "-".join(sorted(extra)))
    save(f"mixed_per_condition_{label}_{named}{'_' + suffix if suffix else ''}.json", found)
    print(found["console_budgets"])


if __name__ == "__main__":
    main()
