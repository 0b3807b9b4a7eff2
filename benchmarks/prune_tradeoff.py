"""What channel pruning buys: for each model, a sweep prune.ratio=0,0.25,0.5 (each retrained the
same way by finetune_model), then the fp32 engines of the three points timed side by side in one
process (alternating rounds, batch 1 and 32); params, FLOPs, ONNX size and top-1 after retraining
from the nodes. Also the sweep-sharing count of issue 11 (plans only, nothing run).

    python benchmarks/prune_tradeoff.py > benchmarks/results/prune_tradeoff.json
    python benchmarks/prune_tradeoff.py --models resnet_mini --set finetune.epochs=10   # one model, longer retraining
    python benchmarks/prune_tradeoff.py --models efficientnet_b0_64px --ratios 0 0.3    # a user's saved EfficientNetB0
"""

import argparse

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

WORK = Path(os.environ.get("PRUNE_BENCH_DIR", "/tmp/prune_bench"))
RATIOS = (0.0, 0.25, 0.5)
MODELS = {
    "small_cnn": ["model=small_cnn", "train.epochs=8", "finetune.epochs=4", "images=32"],
    "resnet_mini": ["model=resnet_mini", "train.epochs=8", "finetune.epochs=4", "images=32"],
    "resnet50_64px": [
        "model=resnet50",
        "train.epochs=3",
        "finetune.epochs=2",
        "images=64",
        "train.batch_size=32",
        "finetune.batch_size=32",
    ],
    # A user's model (model=keras_file): tf_keras.applications.EfficientNetB0, saved untrained as a .keras file.
    "efficientnet_b0_64px": [
        "model=keras_file",
        f"model.path={WORK / 'efficientnet_b0.keras'}",
        "train.epochs=20",
        "finetune.epochs=5",
        "images=64",
        "train.batch_size=32",
        "finetune.batch_size=32",
    ],
}


def saved_user_models() -> None:
    """The .keras files the keras_file entries name (made once, untrained, 10 classes, linear head)."""
    path = WORK / "efficientnet_b0.keras"
    if not path.exists():
        from precisionflow.modeling.tfenv import import_tensorflow

        keras = import_tensorflow()[1]
        WORK.mkdir(parents=True, exist_ok=True)
        keras.applications.EfficientNetB0(weights=None, input_shape=(64, 64, 3), classes=10, classifier_activation=None).save(
            path
        )


def image_folder(size: int) -> Path:
    folder = WORK / f"shapes{size}"
    if not folder.exists():
        per_class = 150 if size == 32 else 60
        subprocess.run(
            [
                sys.executable,
                str(Path(__file__).parent / "generated_images.py"),
                str(folder),
                "--per-class",
                str(per_class),
                "--size",
                str(size),
            ],
            check=True,
            capture_output=True,
        )
    return folder


def overrides(name: str):
    settings = [s for s in MODELS[name] if not s.startswith("images=")]
    size = int(next(s for s in MODELS[name] if s.startswith("images=")).split("=")[1])
    return settings + [
        "dataset=image_folder",
        f"dataset.path={image_folder(size)}",
        f"dataset.image_size=[{size},{size}]",
        "prune=channel",
        "finetune.mode=fp32",
        "precisions=[fp32]",
        "targets=[cpu]",
        "tracking.enabled=false",
    ]


def run_sweep(name: str) -> Path:
    results = WORK / name / "results"
    results.parent.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "precisionflow.cli",
        "run",
        "-m",
        f"results_dir={results}",
        f"prune.ratio={','.join(str(r) for r in RATIOS)}",
        *overrides(name),
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=results.parent)
    if done.returncode != 0:
        raise SystemExit(done.stdout[-3000:] + done.stderr[-3000:])
    return results


def points(results: Path):
    """{ratio: (evaluation metrics, engine folder, prune summary, onnx bytes)}."""
    from precisionflow.nodeio import named_lineage, read_json

    found = {}
    for metrics_file in results.glob("evaluate_engine/*/metrics.json"):
        lineage = named_lineage(metrics_file.parent)
        ratio = lineage["prune_model"]["params"]["prune"]["ratio"]
        graph = results / f"quantize_onnx/{lineage['quantize_onnx']['id']}/model.onnx"
        found[ratio] = (
            read_json(metrics_file),
            results / f"build_engine/{lineage['build_engine']['id']}",
            lineage["prune_model"]["summary"],
            graph.stat().st_size,
        )
    return found


def side_by_side(found, rounds: int = 12, window_s: float = 0.2):
    """Throughput of every ratio's fp32 engine in alternating rounds; ratio to the unpruned one."""
    from precisionflow import stats
    from precisionflow.measure import speed, timing
    from precisionflow.backends import onnxruntime_backend
    from precisionflow.nodeio import read_json
    from precisionflow.datasets.store import Split

    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[-1:])  # the engines' one thread, one CPU
    engines = {
        ratio: onnxruntime_backend.load(folder, read_json(folder / "engine.json"), {"device": "cpu"})
        for ratio, (_, folder, _, _) in found.items()
    }
    data_dir = next(iter(found.values()))[1].parent.parent / "prepare_dataset"
    images = Split(next(data_dir.iterdir()), "test").head(32)
    table = {}
    for size in (1, 32):
        batch = speed.timing_batch(images, size)
        sides = {
            ratio: (lambda seconds, run=engine.prepare(batch), size=size: timing.window_throughput(run, size, seconds))  # noqa: B008 -- bound once per engine
            for ratio, engine in sorted(engines.items())
        }
        for side in sides.values():
            side(0.2)  # warm-up
        measured = timing.alternating_rounds(sides, rounds, window_s)
        table[f"b{size}"] = {
            str(ratio): {
                "throughput_sps": float(np.median(values)),
                "latency_vs_unpruned": 1.0 / stats.ratio_stats(values, measured[0.0])["geomean"],
                "throughput_ratio": stats.ratio_stats(values, measured[0.0]),
            }
            for ratio, values in measured.items()
        }
    return table


def sweep_sharing() -> dict:
    """Jobs in one DAG for the 24-point sweep vs the sum over 24 one-point pipelines (plans only)."""
    from precisionflow.config.compose import expand
    from precisionflow.pipeline.plan import build_plan

    base = ["prune=channel", "finetune.mode=fp32"]
    one_dag = len(
        build_plan(
            expand(
                base + ["prune.ratio=0,0.25,0.5", "precisions=[fp32,fp16,int8,int8_qat]", "targets=[local,cpu]"], multirun=True
            ),
            str(WORK / "plan"),
        )["nodes"]
    )
    separate = 0
    for ratio in RATIOS:
        for precision in ("fp32", "fp16", "int8", "int8_qat"):
            for target in ("local", "cpu"):
                # a pipeline for one engine point still needs its fp32 engine (every engine is compared with it)
                precisions = "fp32" if precision == "fp32" else f"fp32,{precision}"
                point = expand(base + [f"prune.ratio={ratio}", f"precisions=[{precisions}]", f"targets=[{target}]"])
                separate += len(build_plan(point, str(WORK / "plan"))["nodes"])
    return {"one_dag_jobs": one_dag, "separate_pipelines_jobs": separate, "ratio": round(one_dag / separate, 3)}


def main() -> None:
    global RATIOS
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--set", nargs="*", default=[], help="overrides replacing the model's own (e.g. finetune.epochs=10)")
    parser.add_argument("--ratios", nargs="+", type=float, default=list(RATIOS), help="prune.ratio values (0 first)")
    args = parser.parse_args()
    RATIOS = tuple(args.ratios)
    if any(name.startswith("efficientnet") for name in args.models):
        saved_user_models()
    for name in args.models:
        keys = {item.split("=")[0] for item in args.set}
        MODELS[name] = [s for s in MODELS[name] if s.split("=")[0] not in keys] + args.set
    report = {"sweep_sharing": sweep_sharing(), "models": {}, "overrides": {name: MODELS[name] for name in args.models}}
    for name in args.models:
        found = points(run_sweep(name))
        timing_table = side_by_side(found)
        report["models"][name] = {
            str(ratio): {
                "top1_after_retraining": metrics["top1"],
                "params": summary["params_after"],
                "mflops": round(summary["flops_after"] / 1e6, 3),
                "onnx_bytes": onnx_bytes,
                "engine_bytes": metrics["engine"]["engine_bytes"],
                "latency_vs_unpruned_b1": round(timing_table["b1"][str(ratio)]["latency_vs_unpruned"], 3),
                "latency_vs_unpruned_b32": round(timing_table["b32"][str(ratio)]["latency_vs_unpruned"], 3),
                "throughput_b1": round(timing_table["b1"][str(ratio)]["throughput_sps"], 1),
                "throughput_b32": round(timing_table["b32"][str(ratio)]["throughput_sps"], 1),
            }
            for ratio, (metrics, _, summary, onnx_bytes) in sorted(found.items())
        }
        report["models"][name]["side_by_side"] = timing_table
        print(json.dumps({name: report["models"][name]}, default=str)[:400], file=sys.stderr, flush=True)
    print(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
