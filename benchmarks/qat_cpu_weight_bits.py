"""Issue 43, item 3: how much of int8_qat's CPU-placement disagreement with its QAT model the 7-bit weights make.

The CPU int8_qat graph rebuilt from a finished run's own cache (benchmarks/qat_unseen_data.py) with 7-bit weights
(quant/qdq.cpu_weight_bits: the workflow's choice on a CPU without VNNI or a dot product) and with 8-bit ones, each scored against the QAT model's test predictions.

    PYTHONPATH=src .venv/bin/python benchmarks/qat_cpu_weight_bits.py benchmarks/out/qat_unseen_data/<set>-<model>
"""

import json
import sys
import tempfile
from pathlib import Path
import numpy as np
import onnx
import onnxruntime as ort
from precisionflow.quant import qdq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import qat_cpu_graph_inputs  # noqa: E402

run = qat_cpu_graph_inputs(Path(sys.argv[1]))
source, ranges, lineage, images, qat = (run[key] for key in ("source", "ranges", "lineage", "images", "qat"))
nodes = qdq.quantizable_nodes(onnx.load(str(source)), (), True)
for bits in (7, 8):
    bits7 = bits == 7
    with tempfile.TemporaryDirectory() as folder:
        graph = Path(folder) / "g.onnx"
        qdq.quantize_int8(source, graph, ranges, nodes, "onnxruntime_cpu", lineage["ranges"]["learned_tensors"], bits)
        s = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"], disabled_optimizers=qdq.ORT_DISABLED_OPTIMIZERS)
        pred = np.concatenate(
            [s.run(None, {s.get_inputs()[0].name: images[i : i + 64]})[0].argmax(1) for i in range(0, len(images), 64)]
        )
    print(
        json.dumps(
            {"results": Path(sys.argv[1]).name, "weights_7bit": bits7, "disagree": int(np.sum(pred != qat)), "n": len(qat)}
        ),
        flush=True,
    )
