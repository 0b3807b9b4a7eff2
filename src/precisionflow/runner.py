"""Run one planned node: `python -m precisionflow.runner --plan PLAN --node STAGE/ID`.

Snakemake rules call this; tests and scripts may call run_node() directly. The stage function
gets its params, its input node folders and a fresh output folder; the runner adds node.json
(params, inputs, code version, package versions, timings) and publishes the folder atomically.
"""

import argparse
import importlib
import importlib.metadata
import platform
import sys
import time
from pathlib import Path
from typing import Any, Dict

from precisionflow.errors import PrecisionflowError
from precisionflow.nodeio import NODE_FILE, read_json, read_node, staged_node_dir, write_json_atomic
from precisionflow.plan import code_versions


def package_versions(names) -> Dict[str, str]:
    versions = {"python": platform.python_version(), "precisionflow": _version("precisionflow")}
    versions.update({name: _version(name) for name in names})
    return versions


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def run_node(plan: Dict[str, Any], key: str) -> Dict[str, Any]:
    spec = plan["nodes"][key]
    results = Path(plan["results_dir"])
    inputs = {role: results / upstream for role, upstream in spec["inputs"].items()}
    for input_dir in inputs.values():
        read_node(input_dir)  # refuses unfinished upstream nodes
    stage = importlib.import_module(f"precisionflow.stages.{spec['stage']}")
    started = time.time()
    with staged_node_dir(results / key) as out:
        summary = stage.run(spec["params"], inputs, out)
        record = {
            **spec,
            "code_version": code_versions()[spec["stage"]],
            "versions": package_versions(getattr(stage, "PACKAGES", ())),
            "host": platform.node(),
            "timings": {"started": started, "finished": time.time(), "seconds": round(time.time() - started, 3)},
            "summary": summary or {},
        }
        write_json_atomic(out / NODE_FILE, record)
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plan", required=True, type=Path)
    parser.add_argument("--node", required=True, help="STAGE/ID as in the plan")
    args = parser.parse_args(argv)
    try:
        record = run_node(read_json(args.plan), args.node)
    except PrecisionflowError as err:
        print(f"precisionflow: {args.node}: {err}", file=sys.stderr)
        return 2
    print(f"{args.node}: done in {record['timings']['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
