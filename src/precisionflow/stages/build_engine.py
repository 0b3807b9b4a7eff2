"""build_engine: one engine per (precision graph, target, engine settings).

The engine JSON records backend and version, device name, compute capability, driver, precision,
build time, size and the hash of the graph it was built from; loading checks them."""

from pathlib import Path
from typing import Any, Dict

from precisionflow.backends import get_backend
from precisionflow.nodeio import read_node, write_json_atomic

PACKAGES = ("onnx", "onnxruntime")


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    backend = get_backend(params["engine"]["backend"])
    graph_node = read_node(inputs["graph"])
    precision = graph_node["summary"]["precision"]
    description = backend.build(inputs["graph"] / "model.onnx", out, params["engine"], params["target_def"], precision)
    description.update({
        "target": params["target"],
        "precision": precision,
        "graph_sha256": graph_node["summary"]["graph_sha256"],
    })
    write_json_atomic(out / "engine.json", description)
    return description
