"""Gather a finished run's precision graphs and test data into one folder for engines_on_device.py.

    .venv/bin/python benchmarks/collect_graphs.py RESULTS_DIR NAME OUT_DIR

Takes the newest report of RESULTS_DIR, and for each of its engines copies the precision graph
(quantize_onnx/<node>/model.onnx), the test split and the fp32 reference logits.
"""

import shutil
import sys
from pathlib import Path

import numpy as np

from precisionflow.nodeio import read_node


def main() -> None:
    results, out = Path(sys.argv[1]), Path(sys.argv[3]) / sys.argv[2]
    report = max(results.glob("report/*/node.json"), key=lambda p: p.stat().st_mtime).parent
    for role, key in read_node(report)["inputs"].items():
        if not role.startswith("eval"):
            continue
        eval_dir = results / key
        graph_key = read_node(results / read_node(eval_dir)["inputs"]["engine"])["inputs"]["graph"]
        label = graph_key.split("/")[1].rsplit("-", 1)[0]  # e.g. int8, int8_mixed-keep3
        method = read_node(results / graph_key)["summary"].get("calibration_method")
        if method and label.startswith("int8") and not label.startswith("int8_qat"):
            label += f"-{method}"
        (out / label).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(results / graph_key / "model.onnx", out / label / "model.onnx")
        shutil.copyfile(
            results / read_node(eval_dir)["inputs"]["reference"] / "reference_logits.npy", out / "reference_logits.npy"
        )
        with np.load(results / read_node(eval_dir)["inputs"]["data"] / "data.npz") as data:
            np.savez(out / "data.npz", x_test=data["x_test"], y_test=data["y_test"])
    print(f"graphs of {report.name} -> {out}: {sorted(p.name for p in out.iterdir())}")


if __name__ == "__main__":
    main()
