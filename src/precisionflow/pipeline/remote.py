"""Train here, build and measure there: a target's engine nodes run on a GPU machine that has only
numpy, onnx and the engine runtime (no TensorFlow, Snakemake, Hydra or MLflow), like a lean GPU
node image on a cluster.

    here:   precisionflow ship --target h200 --to BUNDLE [overrides]  # plan; pack what the h200 nodes read
    there:  python -m precisionflow.pipeline.remote doctor BUNDLE   # what this machine can build of it
            python -m precisionflow.pipeline.remote run BUNDLE      # build_engine, evaluate_engine, compare_speed
            python -m precisionflow.pipeline.remote collect BUNDLE OUT [--without-engine-files]
    here:   precisionflow land --from OUT [overrides]        # their node folders join results/
            precisionflow run [overrides]                   # report and MLflow finish here

Each node runs through the same runner as under Snakemake (precisionflow.pipeline.runner), so its identity
checks hold there too: the node's code, numpy/onnx versions and engine runtime must be what the
plan names (target_defs.<target>.backend_version says which runtime that machine has).
"""

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, List

from precisionflow.errors import LineageError, PrecisionflowError, StageError
from precisionflow.nodeio import NODE_FILE, PACKED_FILE, read_json, write_json_atomic

# What the GPU stages open of each upstream node, by the role the node plays for them. The data
# node travels with its test split only: no GPU stage reads another split (copied verbatim, so its
# recorded hashes still hold for the files that travel).
FILES_BY_ROLE = {
    "graph": ("model.onnx",),
    "reference": ("reference_logits.npy",),
    "qat_export": ("reference_logits.npy",),
    "qat_model": ("qat_logits.npy",),
    "data": ("meta.json", "x_test.npy", "y_test.npy", "objects_test.npz"),
}
# What the GPU stages import besides the engine runtime, by task: a detection evaluation scores
# boxes with pycocotools. Checked by `doctor` and before `run` starts anything.
TASK_MODULES = {"classification": ("numpy", "onnx"), "detection": ("numpy", "onnx", "pycocotools")}
# LoadGen travels with the runtime packages; a GPU engine's build times Conv+bias fusion on and off and
# keeps it by the ratio's interval (stats.ratio_interval: scipy's t quantile) -- found missing on the
# H100 on 2026-12-06, where `doctor` had said every module was there.
STAGE_MODULES = {"serve_engine": ("mlperf_loadgen",), "build_engine": ("scipy",)}
# What the runner itself needs for every node: a GPU slot's lock (pipeline/gpuslots.py) and the check
# that the run which started a job is alive (nodeio.staged_node_dir).
RUNNER_MODULES = ("filelock", "psutil")
# A data node holds labels (classification) or boxes (detection): the one it has travels.
ONE_OF = {"y_test.npy", "objects_test.npz"}


def target_nodes(plan: Dict[str, Any], target: str) -> List[str]:
    """The target's engine, evaluation and ratio nodes, each after the nodes it reads."""
    from precisionflow.pipeline.flow import gpu_stages

    stages = gpu_stages()
    chosen = [key for key, spec in plan["nodes"].items() if spec["stage"] in stages and spec["params"].get("target") == target]
    if not chosen:
        targets = sorted({s["params"]["target"] for s in plan["nodes"].values() if s["stage"] == "build_engine"})
        raise StageError(
            f"The plan has no engine nodes for target '{target}'; its targets: {targets}. Plan with targets=[{target}]."
        )
    return sorted(chosen, key=lambda key: stages.index(plan["nodes"][key]["stage"]))


def upstream_roles(plan: Dict[str, Any], keys: List[str]) -> Dict[str, set]:
    """{upstream node key: roles it plays} for the nodes outside `keys` that `keys` read."""
    roles: Dict[str, set] = {}
    for key in keys:
        for role, upstream in plan["nodes"][key]["inputs"].items():
            if upstream not in keys:
                roles.setdefault(upstream, set()).add(role)
    return roles


def pack(plan: Dict[str, Any], target: str, bundle: Path) -> Dict[str, Any]:
    """Write BUNDLE/plan.json, BUNDLE/manifest.json and the upstream files the target's nodes read."""
    keys = target_nodes(plan, target)
    results = Path(plan["results_dir"])
    roles = upstream_roles(plan, keys)
    missing = [key for key in roles if not (results / key / NODE_FILE).is_file()]
    if missing:
        raise LineageError(
            f"These nodes must be finished here before shipping: {missing}. Run "
            "`precisionflow run [overrides] -- --omit-from build_engine` first."
        )
    bundle = Path(bundle)
    if bundle.exists() and any(bundle.iterdir()):
        raise StageError(f"{bundle} is not empty: ship into a new folder (nothing was overwritten).")
    for key, node_roles in sorted(roles.items()):
        if "data" in node_roles and read_json(results / key / "meta.json")["storage"] == "files":
            raise StageError(
                f"{key} keeps file paths of this machine, not pixels (dataset.cache=none): ship a plan "
                "made with dataset.cache=disk (or memory), whose data node holds the images."
            )
    files = []
    for key, node_roles in sorted(roles.items()):
        target_dir = bundle / "results" / key
        target_dir.mkdir(parents=True)
        shutil.copy2(results / key / NODE_FILE, target_dir / NODE_FILE)
        for role in sorted(node_roles):
            for name in FILES_BY_ROLE.get(role, ()):
                if name in ONE_OF and not (results / key / name).exists():
                    continue
                shutil.copy2(results / key / name, target_dir / name)
                files.append(f"{key}/{name}")
        write_json_atomic(target_dir / PACKED_FILE, {"rewritten": []})
    write_json_atomic(bundle / "plan.json", plan)
    manifest = {"target": target, "nodes": keys, "upstream_files": files, "plugins": pack_plugins(plan, keys, bundle)}
    write_json_atomic(bundle / "manifest.json", manifest)
    return manifest


PLUGIN_FOLDER = "plugins"


def pack_plugins(plan: Dict[str, Any], keys: List[str], bundle: Path) -> List[str]:
    """The plug-in precisions (PRECISIONFLOW_PRECISIONS) the shipped nodes name: their module and
    the helpers beside it, copied to BUNDLE/plugins; `remote run` registers them there, so the
    nodes' ids (which hash that code) hold on the GPU machine too."""
    from precisionflow import precisions

    used = {plan["nodes"][key]["params"].get("precision") for key in keys} & set(precisions.PLUGIN_FILES)
    modules = []
    for name in sorted(used):
        files = [Path(each) for each in precisions.PLUGIN_FILES[name]]
        for each in files:
            (bundle / PLUGIN_FOLDER).mkdir(exist_ok=True)
            shutil.copy2(each, bundle / PLUGIN_FOLDER / each.relative_to(files[0].parent))
        modules.append(files[0].stem)
    return modules


def use_shipped_plugins(bundle: Path) -> None:
    """Make the bundle's plug-in precisions importable and registered here (and in the node
    processes run_spread starts), before anything imports the precision registry."""
    import os

    plugins = read_json(Path(bundle) / "manifest.json").get("plugins") or []
    if not plugins:
        return
    folder = str((Path(bundle) / PLUGIN_FOLDER).resolve())
    sys.path.insert(0, folder)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [folder, os.environ.get("PYTHONPATH", "")]))
    os.environ["PRECISIONFLOW_PRECISIONS"] = ",".join(plugins)
    if "precisionflow.precisions" in sys.modules:  # already loaded without them: register them now
        sys.modules["precisionflow.precisions"]._register_plugins()


def failure_line(err: BaseException) -> str:
    """One line for a failed node, whatever the exception holds (an EOFError has no message)."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0][:300]}" if text else f"{type(err).__name__} (no message)"


def run_bundle(bundle: Path, keep_going: bool = False) -> List[Dict[str, Any]]:
    """Run every node of the bundle not finished yet, in order, through the runner. With
    keep_going, a failed node does not stop the others (those reading it fail on their own)."""
    from precisionflow.pipeline.runner import run_node

    import os
    import time

    bundle = Path(bundle)
    plan, manifest = read_json(bundle / "plan.json"), read_json(bundle / "manifest.json")
    missing = missing_modules(plan, manifest["nodes"])
    if missing:  # before any node runs: an hour of engine builds would end in evaluations that cannot import
        raise StageError(f"This machine lacks what the bundle's evaluations import: {missing_text(missing)}.")
    # One run id for the figures of this invocation, as Snakemake's onstart gives a local run.
    os.environ.setdefault("PRECISIONFLOW_RUN", time.strftime("%Y-%m-%dT%H:%M:%S"))
    from precisionflow.pipeline.gpuslots import allowed_devices

    gpus = len(allowed_devices())
    if gpus > 1:  # a job per GPU at once, each in a process of its own (its CUDA_VISIBLE_DEVICES is its own)
        return run_spread(bundle, plan, manifest["nodes"], gpus, keep_going)
    done, failed = [], []
    for key in manifest["nodes"]:
        if (bundle / "results" / key / NODE_FILE).is_file():
            continue
        try:
            record = run_node(plan, key, bundle / "results")
        except Exception as err:  # noqa: BLE001 -- reported with the node; nothing half-written is published
            if not keep_going:
                raise
            print(f"{key}: FAILED: {failure_line(err)}", flush=True)
            failed.append(key)
            continue
        print(f"{key}: done in {record['timings']['seconds']} s", flush=True)
        done.append(record)
    if failed:
        raise StageError(f"{len(failed)} nodes failed: {failed}")
    return done


def run_spread(bundle: Path, plan: Dict[str, Any], keys: List[str], workers: int, keep_going: bool) -> List[Dict[str, Any]]:
    """The bundle's nodes over `workers` processes: a node starts once its upstream nodes in the
    bundle are finished; each process takes a GPU slot through the runner (gpuslots.py). A CUDA
    fault fails that node's process only; with keep_going the rest run."""
    import subprocess
    import sys
    import time

    results = bundle / "results"
    finished = lambda key: (results / key / NODE_FILE).is_file()  # noqa: E731
    waiting = [key for key in keys if not finished(key)]
    running: Dict[str, Any] = {}
    done, failed = [], []
    flags = ["-S"] if sys.flags.no_site else []
    while waiting or running:
        for key in [k for k in waiting if len(running) < workers]:
            upstream = [u for u in plan["nodes"][key]["inputs"].values() if u in keys]
            if any(u in failed for u in upstream):
                waiting.remove(key)
                failed.append(key)
                print(f"{key}: FAILED: an upstream node failed", flush=True)
            elif all(finished(u) for u in upstream):
                waiting.remove(key)
                command = [sys.executable, *flags, "-m", "precisionflow.pipeline.runner", "--plan", str(bundle / "plan.json")]
                running[key] = subprocess.Popen([*command, "--node", key, "--results", str(results)])
        for key, process in list(running.items()):
            if process.poll() is None:
                continue
            del running[key]
            if process.returncode == 0:
                done.append(read_json(results / key / NODE_FILE))
                continue
            failed.append(key)
            print(f"{key}: FAILED (exit {process.returncode}); its messages are above", flush=True)
            if not keep_going:
                waiting.clear()
        time.sleep(0.2)
    if failed:
        raise StageError(f"{len(failed)} nodes failed: {failed}")
    return done


def collect(bundle: Path, out: Path, without_engine_files: bool = False) -> List[str]:
    """Copy the finished GPU node folders to OUT (engine files left out when asked: an engine runs
    only where it was built, and large ones cannot travel back)."""
    bundle, out = Path(bundle), Path(out)
    manifest = read_json(bundle / "manifest.json")
    copied = []
    for key in manifest["nodes"]:
        source = bundle / "results" / key
        if not (source / NODE_FILE).is_file():
            continue
        engine_file = read_json(source / "engine.json")["engine_file"] if (source / "engine.json").is_file() else None
        ignore = shutil.ignore_patterns(engine_file) if without_engine_files and engine_file else None
        shutil.copytree(source, out / key, ignore=ignore)
        if ignore:  # the node says so: its record names a file it no longer holds (nodeio.verify_node)
            write_json_atomic(out / key / PACKED_FILE, {"rewritten": [], "left_out": [engine_file]})
        copied.append(key)
    return copied


def land(collected: Path, plan: Dict[str, Any]) -> List[str]:
    """Bring node folders collected on the GPU machine into this plan's results (never overwriting)."""
    results = Path(plan["results_dir"])
    landed = []
    for node_file in sorted(Path(collected).glob(f"*/*/{NODE_FILE}")):
        key = f"{node_file.parent.parent.name}/{node_file.parent.name}"
        if key not in plan["nodes"]:
            raise LineageError(
                f"{node_file.parent} is not a node of this plan (another configuration, or code "
                "changed since it was shipped): ship again from this plan."
            )
        if read_json(node_file)["id"] != plan["nodes"][key]["id"]:
            raise LineageError(f"{node_file} names another node id than its folder.")
        if (results / key).exists():
            continue  # already here: results are never overwritten
        staging = results / key.split("/")[0] / f".landing-{node_file.parent.name}"
        shutil.copytree(node_file.parent, staging)
        staging.rename(results / key)
        landed.append(key)
    return landed


def missing_modules(plan: Dict[str, Any], keys: List[str]) -> Dict[str, List[str]]:
    """{module: the bundle's nodes that need it} for modules this machine cannot import."""
    import importlib.util

    needed: Dict[str, List[str]] = {}
    for key in keys:
        task = plan["nodes"][key].get("params", {}).get("task", "classification")
        stage = key.split("/")[0]  # a node key is STAGE/ID
        modules = TASK_MODULES.get(task, ()) if stage == "evaluate_engine" else STAGE_MODULES.get(stage, ())
        for module in (*RUNNER_MODULES, *modules):
            needed.setdefault(module, []).append(key)
    return {module: nodes for module, nodes in needed.items() if importlib.util.find_spec(module) is None}


def missing_text(missing: Dict[str, List[str]]) -> str:
    return "; ".join(
        f"{module} (needed by {len(nodes)} node(s), e.g. {nodes[0]}): install it there (pip install {module}, "
        "the version requirements.lock names) or unpack its wheel into the runtime folder on PYTHONPATH"
        for module, nodes in sorted(missing.items())
    )


def doctor(bundle: Path) -> str:
    """This machine's devices and runtimes, and whether it can build the bundle's engines."""
    from precisionflow.devices import cpu_name, gpu_facts
    from precisionflow.backends import check_buildable_here

    plan, manifest = read_json(Path(bundle) / "plan.json"), read_json(Path(bundle) / "manifest.json")
    gpu = gpu_facts()
    lines = [f"CPU: {cpu_name()}", f"GPU: {gpu['device_name']} (compute {gpu['compute_capability']}, driver {gpu['driver']})"]
    for key in manifest["nodes"]:
        params = plan["nodes"][key]["params"]
        if plan["nodes"][key]["stage"] != "build_engine":
            continue
        try:
            runtime = check_buildable_here(params)
            lines.append(f"  {key}: buildable ({runtime['backend']} {runtime['backend_version']} on {runtime['device_name']})")
        except (PrecisionflowError, ImportError) as err:
            lines.append(f"  {key}: NOT buildable here: {err}")
    missing = missing_modules(plan, manifest["nodes"])
    lines.append(
        f"Evaluations: CANNOT run here: missing {missing_text(missing)}"
        if missing
        else "Evaluations: every module they import is here"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("doctor").add_argument("bundle", type=Path)
    run_parser = commands.add_parser("run")
    run_parser.add_argument("bundle", type=Path)
    run_parser.add_argument("--keep-going", action="store_true", help="run the other nodes when one fails")
    collect_parser = commands.add_parser("collect")
    collect_parser.add_argument("bundle", type=Path)
    collect_parser.add_argument("out", type=Path)
    collect_parser.add_argument("--without-engine-files", action="store_true")
    args = parser.parse_args(argv)
    try:
        use_shipped_plugins(args.bundle)
        if args.command == "run":
            run_bundle(args.bundle, args.keep_going)
        elif args.command == "doctor":
            print(doctor(args.bundle))
        else:
            print(json.dumps(collect(args.bundle, args.out, args.without_engine_files), indent=1))
    except PrecisionflowError as err:
        print(f"precisionflow.pipeline.remote: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
