"""The GPU acceptance, over the path users take (docs/how-to/gpu-node.md): plan and train here, where
there is no GPU; build, measure and serve on the GPU node through `precisionflow ship` and
`python -m precisionflow.pipeline.remote run`; land the node folders here and let `precisionflow run`
finish the report and MLflow. Nothing is built or served beside the workflow: the table is read from
the landed node folders. It stands for docs/hardware.md's "The users' path on an H100" tables (goals:
engine >= 0.97x a plain ONNX Runtime loop at b128, Offline >= 0.97x the engine's b128, Server >= 0.88x
Offline, the Server ratio's interval within +-10% of its figure, the geometric mean of its pairs).

    here:   python benchmarks/gpu_acceptance.py prepare WORK [overrides...]
            (photo patches at 224 px, every 5th dimmed and tagged `dim`, the model trained, `ship --target h200`)
            python benchmarks/gpu_acceptance.py pack WORK PLAN --target h100 --run-seconds 10 --lean LEAN.tar.xz --parts DIR [overrides...]
            (a plan for the card that comes, over WORK's trained model: shipped with the code its ids name,
            behind the lean packages -- numpy, onnx, onnxruntime-gpu, LoadGen, scipy, filelock, psutil and
            their needs, unpacked and xz-compressed -- split into DIR/partNN; LEAN_BYTES printed)
    there:  bash benchmarks/gpu_path.sh stage DIR/partNN     (one call per part)
            bash benchmarks/gpu_path.sh start LEAN_BYTES; bash benchmarks/gpu_path.sh wait 540 (until it ends)
    here:   python benchmarks/gpu_acceptance.py land WORK COLLECTED.tar.xz
            python benchmarks/gpu_acceptance.py table WORK [CROSSCHECK.json]
            (PLAN in place of WORK for a packed plan: its overrides.txt names WORK's results)

The default target, run by `precisionflow run` on the GPU machine itself (TensorFlow, Snakemake and the
rest shipped; WORK's dataset and trained model found done there by id):

    here:   python benchmarks/gpu_acceptance.py pack-default WORK PLAN --lean LEAN.tar.xz --env ENV.tar.xz --parts DIR [overrides...]
            (ENV: `bash benchmarks/gpu_env.sh ENV.tar.xz`, the lock's other packages for the GPU machine's Python)
    there:  bash benchmarks/gpu_path.sh stage DIR/partNN     (one call per part)
            bash benchmarks/gpu_path.sh start-default LEAN_BYTES ENV_BYTES; bash benchmarks/gpu_path.sh wait 540 partial
    here:   python benchmarks/gpu_acceptance.py land-default PLAN COLLECTED.tar.xz
            python benchmarks/gpu_acceptance.py table PLAN [CROSSCHECK.json]

`--device cpu` on prepare plans the same path for the CPU target `cpu` (a test runs it end to end:
tests/test_remote.py); WORK/overrides.txt keeps the overrides every step uses.
"""

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

# A model trained here at 224 px on images made from a package (scikit-learn's two photographs), so the
# accuracy rows mean something beside the speed; the target's own serving settings but for the run
# length, set to the GPU defaults' 20 s (on_gpu.serving; h200's own 60 s would not fit the lent machine).
GPU_OVERRIDES = [
    "experiment=h200",
    "precisions=[fp32,fp16]",
    "model=resnet50",
    "dataset=image_folder",
    "dataset.image_size=[224,224]",
    "train.epochs=4",
    "train.batch_size=16",  # 38 steps an epoch: batch statistics settle (at 64, 10 steps left inference at chance)
    "train.learning_rate=0.001",
    "target_defs.h200.serving.min_duration_ms=20000",
]
# The same path on a CPU, small enough for a test: a named CPU target, shipped and run by `remote`.
CPU_OVERRIDES = [
    "targets=[cpu]",
    "target_defs.cpu.framework=false",
    "precisions=[fp32,fp16]",
    "model=small_cnn",
    "dataset=image_folder",
    "dataset.image_size=[16,16]",
    "train.epochs=1",
    "evaluate.duration_s=0.05",
    "evaluate.warmup_s=0.01",
    "evaluate.timing_batch_sizes=[1,8]",
    "evaluate.repeats=2",
    "evaluate.streams=[2]",
    "evaluate.ratio_rounds=2",
    "evaluate.ratio_window_s=0.03",
    "evaluate.serving.min_duration_ms=300",
    "evaluate.serving.min_query_count=480",
    "evaluate.serving.search_precision=0.5",
    "evaluate.serving.search_repeats=2",
    "evaluate.serving.max_batch=8",
]
PART_BYTES = 50_000_000  # a part and the working tree (~7 MB) must travel in one call (64 MiB)


def precisionflow(*args: str) -> str:
    """A precisionflow command, as a user types it; its output, or the reason it failed. Exit 1 of
    `run` is a verdict (an engine FAILed or is UNDECIDED), not a failure: its output is returned."""
    done = subprocess.run([sys.executable, "-m", "precisionflow.cli", *args], capture_output=True, text=True, cwd=ROOT)
    if done.returncode == 1 and args[0] == "run" and "engines within budget" in done.stdout:
        return done.stdout + "\n(exit 1: not every engine is within its budget)"
    if done.returncode != 0:
        raise SystemExit(f"precisionflow {' '.join(args)} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done.stdout


def overrides_of(work: Path) -> list:
    return (work / "overrides.txt").read_text().split()


def prepare(work: Path, device: str, per_class: int, extra: list) -> None:
    """Images, training and everything upstream of the engines here; the target's bundle shipped."""
    work.mkdir(parents=True, exist_ok=True)
    photos, sidecar = photos_with_dim_condition(work, per_class, size=224 if device == "cuda" else 16)
    overrides = [
        *(GPU_OVERRIDES if device == "cuda" else CPU_OVERRIDES),
        f"dataset.path={photos}",
        f"dataset.conditions={sidecar}",
    ]
    overrides += [f"results_dir={work / 'results'}", *extra]
    (work / "overrides.txt").write_text("\n".join(overrides) + "\n")
    print(precisionflow("run", "--cores", "2", *overrides, "--", "--omit-from", "build_engine"))
    target = "h200" if device == "cuda" else "cpu"
    print(precisionflow("ship", "--target", target, "--to", str(work / "bundle"), *overrides))


DIM_EVERY, DIM_FACTOR = 5, "0.3"  # every 5th patch at 30% of its brightness: fp16 against fp32 there too


def photos_with_dim_condition(work: Path, per_class: int, size: int) -> tuple:
    """(the image folder, its conditions sidecar): photo patches, every DIM_EVERY-th dimmed and tagged
    `dim`, so the report judges fp16 against fp32 on the dim images as well as on all of them."""
    from photo_patches import change_every, write_patches

    photos, sidecar = work / "photos", work / "photos-conditions.csv"
    if not sidecar.is_file():  # written last: a folder without it is made again
        shutil.rmtree(photos, ignore_errors=True)
        write_patches(photos, per_class, size, seed=0)
        rows = ["file,conditions", *change_every(photos, DIM_EVERY, DIM_FACTOR)]
        sidecar.write_text("\n".join(rows) + "\n")
    return photos, sidecar


def pack(work: Path, plan_dir: Path, target: str, run_seconds: float, lean: Path, parts: Path, extra: list) -> None:
    """A plan for one GPU target over WORK's trained model (its results folder: nothing upstream is made
    again), shipped with a copy of the code its ids name (gpu_path.sh runs that copy, whatever this
    checkout holds by then), then split behind the lean packages into PARTS/partNN."""
    overrides = [o for o in overrides_of(work) if not o.startswith("target_defs.h200.serving.")]
    overrides += [*target_overrides(target, run_seconds), *extra]
    plan_dir.mkdir(parents=True, exist_ok=True)
    (plan_dir / "overrides.txt").write_text("\n".join(overrides) + "\n")
    print(precisionflow("run", "--cores", "2", *overrides, "--", "--omit-from", "build_engine"))
    bundle = plan_dir / "bundle"
    print(precisionflow("ship", "--target", target, "--to", str(bundle), *overrides))
    shutil.copytree(ROOT / "src", bundle / "code", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    split_payload(plan_dir, lean, parts)


REUSED_STAGES = ("prepare_dataset", "train_model")  # their ids name code and packages, not the machine


def pack_default(work: Path, plan_dir: Path, lean: Path, env: Path, parts: Path, extra: list) -> None:
    """`precisionflow run` with the default target on the GPU machine itself, as a user with a GPU and
    TensorFlow runs it: WORK's photos and the nodes trained here (the same ids there; every later node,
    the export included -- its id names onnxruntime-gpu there --, is made there), WORK's overrides less
    the named target's, split behind LEAN and ENV (the lock's other packages, unpacked for the GPU
    machine's Python) into PARTS/partNN."""
    from precisionflow.pipeline.plan import plan_from_overrides

    overrides = [o for o in overrides_of(work) if not o.startswith(("experiment=", "target_defs.h200."))] + extra
    plan_dir.mkdir(parents=True, exist_ok=True)
    (plan_dir / "overrides.txt").write_text("\n".join(overrides) + "\n")
    results = results_dir(plan_dir)
    planned = read(plan_from_overrides(overrides))["nodes"]  # here only to name the nodes the machine reuses
    reused = [key for key in planned if key.split("/")[0] in REUSED_STAGES and (results / key / "node.json").is_file()]
    if len(reused) != len(REUSED_STAGES):
        raise SystemExit(f"expected WORK's {' and '.join(REUSED_STAGES)} done in {results}, found {reused}: run prepare first")
    (work / "default-overrides.txt").write_text("\n".join(overrides) + "\n")
    members = [work / "default-overrides.txt", *photos_of(overrides), *(results / key for key in reused)]
    work_xz = plan_dir / "work.tar.xz"
    listed = " ".join(str(member.relative_to("/")) for member in members)
    subprocess.run(f"tar cf - -C / {listed} | xz -6 -T2 > {work_xz}", shell=True, check=True)  # noqa: S602
    write_parts(parts, [lean, env, work_xz])
    print(f"LEAN_BYTES={lean.stat().st_size} ENV_BYTES={env.stat().st_size}; {len(list(parts.glob('part*')))} parts in {parts}")


def photos_of(overrides: list) -> list:
    """The image folder and conditions sidecar the overrides name (absolute paths)."""
    return [Path(override_value(overrides, "dataset.path")), Path(override_value(overrides, "dataset.conditions"))]


def override_value(overrides: list, key: str) -> str:
    """The value `key=VALUE` sets among the overrides."""
    return next(item.split("=", 1)[1] for item in overrides if item.startswith(f"{key}="))


def target_overrides(target: str, run_seconds: float) -> list:
    """The h200 preset's settings for TARGET (conf/experiment/h200.yaml: runtime, no TensorFlow, the
    preset's timing) with serving runs of RUN_SECONDS: a lent machine's call lasts at most 10 minutes."""
    import yaml

    preset = yaml.safe_load((ROOT / "conf" / "experiment" / "h200.yaml").read_text())["target_defs"]["h200"]
    settings = [f"target_defs.{target}.{key}={hydra_value(value)}" for key, value in preset.items()]
    return [f"targets=[{target}]", *settings, f"target_defs.{target}.serving.min_duration_ms={int(run_seconds * 1000)}"]


def hydra_value(value) -> str:
    """VALUE in Hydra's override grammar: {a:1,b:[1,2]}, [1,2], false, "1.31.1"."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{hydra_value(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(item) for item in value) + "]"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def split_payload(plan_dir: Path, lean: Path, parts: Path) -> None:
    """LEAN (lean.tar.xz) then PLAN_DIR's bundle, xz-compressed, cut into PARTS/partNN."""
    bundle_xz = plan_dir / "bundle.tar.xz"
    subprocess.run(f"tar cf - -C {plan_dir / 'bundle'} . | xz -6 -T2 > {bundle_xz}", shell=True, check=True)  # noqa: S602
    write_parts(parts, [lean, bundle_xz])
    print(f"LEAN_BYTES={lean.stat().st_size}; {len(list(parts.glob('part*')))} parts in {parts}")


def write_parts(parts: Path, archives: list) -> None:
    """ARCHIVES one after another, cut into PARTS/partNN of PART_BYTES (the lean packages first, so a
    payload's first parts are every payload's)."""
    parts.mkdir(parents=True, exist_ok=True)
    for old in parts.glob("part*"):
        old.unlink()
    index, carried = 0, b""
    for archive in archives:
        with archive.open("rb") as stream:
            while chunk := stream.read(PART_BYTES - len(carried)):
                carried += chunk
                if len(carried) == PART_BYTES:
                    (parts / f"part{index:02d}").write_bytes(carried)
                    index, carried = index + 1, b""
    if carried:
        (parts / f"part{index:02d}").write_bytes(carried)


def land(work: Path, collected: Path) -> None:
    """The GPU node's folders into this plan's results, then the report and MLflow as a user gets them."""
    unpacked = work / "collected"
    unpacked.mkdir(exist_ok=True)
    with tarfile.open(collected) as archive:
        archive.extractall(unpacked, filter="data")
    print(precisionflow("land", "--from", str(unpacked), *overrides_of(work)))
    print(precisionflow("run", "--cores", "2", *overrides_of(work)))


def land_default(plan_dir: Path, collected: Path) -> None:
    """The default target's run on the GPU machine -- its results folder, report and MLflow made
    there -- unpacked into PLAN/results (never over an earlier landing), with the plan that run made
    as PLAN/bundle/plan.json, so `table PLAN` reads that run's nodes."""
    landed = plan_dir / "results"
    if landed.exists():
        raise SystemExit(f"{landed} holds a landed run already: land into another PLAN folder, or delete it first")
    landed.mkdir(parents=True)
    with tarfile.open(collected) as archive:
        archive.extractall(landed, filter="data")
    done = lambda plan: sum((landed / key / "node.json").is_file() for key in plan["nodes"])  # noqa: E731
    served = [
        plan
        for plan in (read(path) for path in sorted((landed / ".plans").glob("*.json")))
        if any(key.startswith("serve_engine/") and (landed / key / "node.json").is_file() for key in plan["nodes"])
    ]
    if not served:
        raise SystemExit(f"no plan in {collected} served an engine there: the run stopped before serving (its run.log says why)")
    (plan_dir / "bundle").mkdir(exist_ok=True)
    (plan_dir / "bundle" / "plan.json").write_text(json.dumps(max(served, key=done), indent=1))
    for summary in sorted((landed / "report").glob("*/summary.txt")):
        print(summary.read_text())


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def results_dir(work: Path) -> Path:
    """WORK/results where a run landed there (land-default; prepare's WORK names it too), else the
    results folder WORK's overrides name (a packed plan's is the prepared model's)."""
    if (work / "results").is_dir():
        return work / "results"
    return Path(override_value(overrides_of(work), "results_dir"))


def planned_nodes(work: Path) -> list:
    """The node keys ("stage/id") of the plan the job ran: the shipped bundle's copy (its ids name the
    code that ran, whatever this checkout holds now), else the plan WORK/overrides.txt makes here."""
    from precisionflow.pipeline.plan import plan_from_overrides

    shipped = work / "bundle" / "plan.json"
    return sorted(read(shipped if shipped.is_file() else plan_from_overrides(overrides_of(work)))["nodes"])


def table(work: Path, crosscheck: Path = None) -> str:
    """docs/hardware.md's table, from the landed node folders (and the plain loop's cross-check): a row
    for every side a serve node measured -- its engine, and the reference side it served beside it
    (fp32 beside fp16, for the Server ratio) -- so every LoadGen run of the job is counted."""
    results = results_dir(work)
    plain = {}
    if crosscheck and crosscheck.is_file():
        plain = {(row["precision"], row["batch"]): row for row in read(crosscheck)["rows"]}
    lines = [
        "| side | top1 | agree | engine bmax /s | x plain loop | Offline /s | x engine | Server /s | Server / Offline "
        "| x fp32 Server [95%] | Server batch | run s | runs | longest call ms (median, max) "
        "| slow calls: gc / size switch / host / other (excess ms) "
        "| GPU s |",
        "|---" * 16 + "|",
    ]
    planned = planned_nodes(work)  # this plan's nodes only: WORK/results may hold earlier plans' nodes too
    evaluations = evaluations_by_engine(results, planned)  # read once: every side looks its engine up
    for serve_dir in sorted(results / key for key in planned if key.startswith("serve_engine/")):
        served = read(serve_dir / "metrics.json")
        precision = evaluation_of(evaluations, f"build_engine/{served['sides']['engine']}")["precision"]
        job_s = target_seconds(results, planned, served["target"])
        for side, engine_id in served["sides"].items():
            label = precision if side == "engine" else f"{side} beside {precision}"
            evaluated = evaluation_of(evaluations, f"build_engine/{engine_id}")
            ratio_cell = server_ratio_cell(served.get("server_ratio")) if side == "engine" else "-"
            cells = side_cells(served, side, evaluated, plain, ratio_cell)
            lines.append("| " + " | ".join([label, *cells, f"{job_s:.0f}"]) + " |")
    return "\n".join(lines)


def target_seconds(results: Path, planned: list, target: str) -> float:
    """The seconds the target's nodes ran on its machine (the engines, evaluations, ratios, serving),
    less each node's wait for its GPU slot: where the runner started nodes side by side (`precisionflow
    run --cores N`), a node's seconds count from its start, its wait for the GPU included."""
    keys = [key for key in planned if f"-{target}-" in key and (results / key / "node.json").is_file()]
    from precisionflow.pipeline.console import slot_wait_s

    nodes = [read(results / key / "node.json") for key in keys]
    return sum(node["timings"]["seconds"] - slot_wait_s(node) for node in nodes)


def evaluations_by_engine(results: Path, planned: list) -> dict:
    """{"build_engine/<id>": the metrics of its evaluation node}, for this plan's landed evaluations."""
    found = {}
    for key in planned:
        if key.startswith("evaluate_engine/") and (results / key / "node.json").is_file():
            found[read(results / key / "node.json")["inputs"]["engine"]] = read(results / key / "metrics.json")
    return found


def evaluation_of(evaluations: dict, engine_key: str) -> dict:
    if engine_key not in evaluations:
        raise SystemExit(f"no evaluation of {engine_key} landed: land the job's node folders first")
    return evaluations[engine_key]


SLOW_CAUSES = ("gc", "size_switch", "host", "unexplained")  # measure/serving.py's stalls(), in its order


def side_cells(served: dict, side: str, evaluated: dict, plain: dict, ratio_cell: str) -> list:
    """One side's cells of the table (all but the label and the job's GPU seconds)."""
    measured = served["results"][side]
    largest = max(evaluated["speed"]["batch"], key=int)  # 128 on the GPU target
    bmax = evaluated["speed"]["batch"][largest]["throughput_sps"]
    offline = (measured.get("Offline") or {}).get("samples_per_second")
    server = (measured.get("Server") or {}).get("rate")
    runs = measured.get("runs") or []
    longest = sorted(run["longest_call_ms"] for run in runs if run.get("longest_call_ms") is not None)
    slow = {cause: sum(run["slow_calls"].get(cause, 0) for run in runs) for cause in SLOW_CAUSES}
    excess = {cause: sum(run["slow_excess_ms"].get(cause, 0) for run in runs) for cause in slow}
    recorded = {cause for run in runs for cause in run["slow_calls"]}  # "host": records since the GPU's own time was kept
    row = plain.get((evaluated["precision"], int(largest)))
    return [
        f"{evaluated['top1']:.3f}",
        f"{evaluated.get('agreement', 1.0):.3f}",
        f"{bmax:,.0f}",
        f"{bmax / row['plain_sps']:.3f}" if row else "-",
        f"{offline:,.0f}" if offline else "INVALID",
        f"{offline / bmax:.3f}" if offline else "-",
        f"{server:,.0f}" if server else "none",
        f"{measured.get('server_over_offline', '-')}",
        ratio_cell,
        server_batch_cell(measured),
        f"{served['settings']['min_duration_ms'] / 1000:g}",
        str(len(runs)),
        f"{longest[len(longest) // 2]:.1f}, {longest[-1]:.1f}" if longest else "-",
        " / ".join(f"{slow[cause]} ({excess[cause]:.0f})" if cause in recorded else "-" for cause in slow),
    ]


def server_batch_cell(measured: dict) -> str:
    """How the side's Server batched: its batch size, "overlapped" where a ready batch queued behind
    the one in flight, "closed as the GPU frees" where the next batch filled until then
    (serving.server_next_batch), "x N instances" where N engine instances served (serving.workers)."""
    cell = str(measured.get("server_max_batch", "-"))
    if measured.get("server_next_batch") == "when_gpu_frees":
        cell += " closed as the GPU frees"
    elif measured.get("server_overlap"):
        cell += " overlapped"
    if measured.get("instances", 1) > 1:
        cell += f" x {measured['instances']} instances"
    return cell


def server_ratio_cell(recorded) -> str:
    """The fp16/fp32 Server ratio (the report's, at 95%) with its interval, or why it has none (the
    report's own words); "ref" for the reference's own node."""
    from precisionflow.reporting.report_rows import interval_missing
    from precisionflow.reporting.verdict_rules import server_ratio_at

    ratio = server_ratio_at(recorded, 0.95)
    if not ratio:
        return "ref"
    if ratio.get("low") is None or ratio.get("high") is None:
        return f"{ratio['geomean']} ({interval_missing(ratio)})"
    return f"{ratio['geomean']} [{ratio['low']}, {ratio['high']}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    prep = commands.add_parser("prepare")
    prep.add_argument("work", type=Path)
    prep.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    prep.add_argument("--per-class", type=int, default=110)
    packing = commands.add_parser("pack")
    packing.add_argument("work", type=Path)
    packing.add_argument("plan", type=Path)
    packing.add_argument("--target", required=True, help="the GPU target the card that comes is (h100, h200)")
    packing.add_argument("--run-seconds", type=float, default=10)
    packing.add_argument("--lean", type=Path, required=True, help="the lean packages, unpacked then tar | xz")
    packing.add_argument("--parts", type=Path, required=True, help="a git-ignored folder (.gpu_parts/NAME)")
    default = commands.add_parser("pack-default", help="the default target, run by `precisionflow run` on the GPU machine")
    default.add_argument("work", type=Path)
    default.add_argument("plan", type=Path)
    default.add_argument("--lean", type=Path, required=True, help="the lean packages, unpacked then tar | xz")
    default.add_argument(
        "--env", type=Path, required=True, help="the lock's other packages for the GPU machine's Python, unpacked then tar | xz"
    )
    default.add_argument("--parts", type=Path, required=True, help="a git-ignored folder (.gpu_parts/NAME)")
    landing_default = commands.add_parser("land-default", help="the default target's collected results, beside PLAN")
    landing_default.add_argument("plan", type=Path)
    landing_default.add_argument("collected", type=Path)
    landing = commands.add_parser("land")
    landing.add_argument("work", type=Path)
    landing.add_argument("collected", type=Path)
    tabled = commands.add_parser("table")
    tabled.add_argument("work", type=Path)
    tabled.add_argument("crosscheck", type=Path, nargs="?")
    args, extra = parser.parse_known_args()
    if extra and args.command not in ("prepare", "pack", "pack-default"):  # land and table take WORK's own overrides
        parser.error(f"{args.command} takes no overrides (it reads WORK/overrides.txt); found {' '.join(extra)}")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if args.command == "prepare":
        prepare(args.work, args.device, args.per_class, extra)
    elif args.command == "pack":
        pack(args.work, args.plan, args.target, args.run_seconds, args.lean, args.parts, extra)
    elif args.command == "pack-default":
        pack_default(args.work, args.plan, args.lean, args.env, args.parts, extra)
    elif args.command == "land-default":
        land_default(args.plan, args.collected)
    elif args.command == "land":
        land(args.work, args.collected)
    else:
        print(table(args.work, args.crosscheck))


if __name__ == "__main__":
    main()
