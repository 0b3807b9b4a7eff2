"""Issue 43, item 3: which images an int8_qat engine decides differently from its QAT model.

For each int8_qat evaluation of a finished run (benchmarks/qat_unseen_data.py), the engine is run
again on the test split and compared with the QAT model's logits: how many disagree, the QAT
model's top-2 margin on those images, where those margins rank among all images (a percentile:
0.05 = they are all among the 5% nearest ties), and the largest logit difference.

    PYTHONPATH=src .venv/bin/python benchmarks/qat_disagreement_margins.py benchmarks/out/qat_unseen_data/<set>-<model>
"""

import json
import sys
from pathlib import Path
import numpy as np
from precisionflow.datasets.store import Split
from precisionflow.backends import get_backend
from precisionflow.nodeio import read_json, read_node
from precisionflow.stages.evaluate_engine import predict

results = Path(sys.argv[1])
for ev in sorted(results.glob("evaluate_engine/int8_qat-*")):
    node = read_node(ev)
    engine_dir = results / node["inputs"]["engine"]
    d = read_json(engine_dir / "engine.json")
    engine = get_backend(d["backend"]).load(engine_dir, d, read_node(engine_dir)["params"]["target_def"])
    logits = predict(engine, Split(results / node["inputs"]["data"], "test"), 64)
    q = np.load(results / node["inputs"]["qat_model"] / "qat_logits.npy")
    s = np.sort(q, 1)
    margin = s[:, -1] - s[:, -2]
    rel = margin / (np.abs(q).max(1) + 1e-9)
    off = logits.argmax(1) != q.argmax(1)
    ranks = np.array([np.mean(margin < m) for m in margin[off]])
    print(
        json.dumps(
            {
                "node": ev.name,
                "disagree": int(off.sum()),
                "n": len(q),
                "margin_median_all": round(float(np.median(margin)), 3),
                "margin_of_disagreeing": [round(float(m), 3) for m in np.sort(margin[off])][:20],
                "their_margin_percentile_max": round(float(ranks.max()), 3) if len(ranks) else None,
                "max_abs_logit_diff": round(float(np.max(np.abs(logits - q))), 3),
            }
        ),
        flush=True,
    )
