"""Run one planned node: `python -m precisionflow.pipeline.runner --plan PLAN --node STAGE/ID`.

Snakemake rules call this; tests and scripts may call run_node() directly. Before the stage runs,
the runner checks that this process has the code and package versions the node's id was computed
from (otherwise the id would claim something the output is not). The stage function gets its
params, its input node folders and a fresh output folder; the runner checks the node's
thresholds, adds node.json (params, inputs, identity, package versions, timings) and publishes the
folder atomically.
"""

import argparse
import importlib
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any, Dict

from precisionflow import identity
from precisionflow.errors import PrecisionflowError, StageError
from precisionflow.nodeio import (
    NODE_FILE,
    content_hashes,
    declined,
    file_stats,
    read_json,
    staged_node_dir,
    verify_node,
    write_json_atomic,
)


def package_versions(names) -> Dict[str, str]:
    versions = {"python": platform.python_version(), "precisionflow": identity.installed_version("precisionflow")}
    versions.update(identity.package_versions(names))
    return versions


def check_identity(spec: Dict[str, Any], stage_module) -> Dict[str, str]:
    """Refuse to run where the code or a package differs from what the node's id covers."""
    sources = identity.node_source_hashes(spec["stage"], spec["params"])
    planned = spec.get("identity") or {}
    found = {
        "code": identity.code_hash(spec["stage"], sources),
        "packages": identity.package_versions(getattr(stage_module, "PACKAGES", ())),
    }
    for key in ("code", "packages"):
        if key in planned and planned[key] != found[key]:
            raise StageError(
                f"Node {spec['stage']}/{spec['id']} was planned with {key} {planned[key]}, but this process has "
                f"{found[key]}: its id would not describe its output. Plan again in this environment "
                "(precisionflow run plans anew), or run the job where it was planned."
            )
    return sources


def peak_rss_mb(who: int = resource.RUSAGE_SELF) -> float:
    """Peak resident memory so far (Linux reports kB) of this process, imports included, or of its
    largest finished child (RUSAGE_CHILDREN: compare_speed's timing processes)."""
    return round(resource.getrusage(who).ru_maxrss / 1024, 1)


def declined_upstream(stage, spec: Dict[str, Any], inputs: Dict[str, Path]) -> Dict[str, Any]:
    """A node whose input built nothing builds nothing either (an engine of no graph, the speed of
    no engine), and says why; the aggregate stages (AGGREGATES = True) run and list it instead."""
    if getattr(stage, "AGGREGATES", False):
        return {}
    for role, folder in sorted(inputs.items()):
        why = declined(folder)
        if why:
            return {"declined": why, "declined_upstream": f"{spec['inputs'][role]}"}
    return {}


def run_node(plan: Dict[str, Any], key: str, results_dir: Path = None) -> Dict[str, Any]:
    """`results_dir` replaces the plan's where the plan was made on another machine (a GPU node
    given the plan and its upstream node folders: see precisionflow.pipeline.remote)."""
    if key not in plan["nodes"]:
        raise StageError(
            f"Node {key} is not in this plan; `python -m precisionflow.pipeline.remote nodes --plan PLAN` lists them."
        )
    spec = plan["nodes"][key]
    results = Path(results_dir or plan["results_dir"])
    inputs = {role: results / upstream for role, upstream in spec["inputs"].items()}
    for input_dir in inputs.values():
        verify_node(input_dir)  # refuses unfinished upstream nodes and ones edited since they finished
    stage = importlib.import_module(f"precisionflow.stages.{spec['stage']}")
    sources = check_identity(spec, stage)
    started = time.time()
    from precisionflow.pipeline import gpuslots

    with staged_node_dir(results / key) as out, gpuslots.for_node(spec, results) as gpu:
        summary = declined_upstream(stage, spec, inputs) or stage.run(spec["params"], inputs, out) or {}
        if spec.get("limits") and "declined" not in summary:
            stage.check(spec["limits"], summary)  # a failed check publishes nothing
        record = {
            **{k: spec[k] for k in ("stage", "id", "params", "inputs")},
            "identity": {**spec.get("identity", {}), "sources": sources},
            "code_version": identity.code_hash(spec["stage"], sources),
            "versions": package_versions(getattr(stage, "PACKAGES", ())),
            "host": platform.node(),
            "timings": {
                "started": started,
                "finished": time.time(),
                "seconds": round(time.time() - started, 3),
                "peak_rss_mb": peak_rss_mb(),
                "children_peak_rss_mb": peak_rss_mb(resource.RUSAGE_CHILDREN),
            },
            "summary": summary,
            **({"gpu_slot": gpu} if gpu else {}),  # which GPU of the node ran it, and what ran beside it
            "files": content_hashes(out),
            "file_stats": file_stats(out),
        }
        write_json_atomic(out / NODE_FILE, record)
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plan", required=True, type=Path)
    parser.add_argument("--node", required=True, help="STAGE/ID as in the plan")
    parser.add_argument("--results", type=Path, help="the results folder here, if not the plan's (plan made on another machine)")
    args = parser.parse_args(argv)
    try:
        record = run_node(read_json(args.plan), args.node, args.results)
    except PrecisionflowError as err:
        print(f"precisionflow: {args.node}: {err}", file=sys.stderr)
        return 2
    print(f"{args.node}: done in {record['timings']['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
