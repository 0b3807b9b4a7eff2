"""The detection table (issue 15): the detection default (shadow_cars, center_net) with every
calibrator -- fp32, fp16, int8 by entropy / minmax / percentile calibration, int8_qat -- in ONE
sweep (one Snakemake DAG, one report), so every row comes from the same run.

    python benchmarks/detection_table.py [extra overrides]

Writes benchmarks/results/detection_table.txt (the printed table and verdicts) and
detection_table.json (per engine: mAP@.5, mAP, spurious/lost/shadow boxes per 100 images, box
agreement, ratios), and says whether entropy PTQ shows more spurious boxes than QAT here.
Run it alone on the machine.
"""

import csv
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, RESULTS, run_sweep  # noqa: E402

COLUMNS = (
    "precision",
    "variant",
    "ran",
    "map50",
    "map",
    "box_agreement",
    "spurious_100",
    "lost_100",
    "shadow_100",
    "qat_agreement",
    "p50_ms_b1",
    "sps_bmax",
    "x_fp32_b1",
    "x_fp32_bmax",
    "x_tf_bmax",
    "node",
)


def main() -> None:
    results = OUT / f"detection-{time.strftime('%Y%m%d-%H%M%S')}"
    overrides = ["experiment=detection", "calibration=entropy,minmax,percentile", *sys.argv[1:]]
    wall = run_sweep(results, overrides)
    report = max(results.glob("report/*/summary.csv"), key=lambda p: p.stat().st_mtime)
    with open(report) as handle:
        rows = [{key: row[key] for key in COLUMNS} for row in csv.DictReader(handle) if row["precision"] != "tensorflow"]
    by_variant = {(row["precision"], row["variant"]): row for row in rows}
    entropy, qat = by_variant.get(("int8", "entropy")), next((r for r in rows if r["precision"] == "int8_qat"), None)
    finding = None
    if entropy and qat:
        more = float(entropy["spurious_100"]) > float(qat["spurious_100"])
        finding = (
            f"entropy PTQ: {entropy['spurious_100']} spurious boxes per 100 images ({entropy['shadow_100']} on shadows); "
            f"QAT: {qat['spurious_100']} ({qat['shadow_100']} on shadows) -> entropy PTQ shows "
            f"{'MORE' if more else 'NOT more'} spurious boxes than QAT here."
        )
    text = (report.parent / "summary.txt").read_text()
    verdicts = json.loads((report.parent / "verdicts.json").read_text())
    out = {
        "overrides": overrides,
        "wall_seconds": round(wall, 1),
        "report": str(report.parent),
        "rows": rows,
        "verdicts": [{k: v[k] for k in ("precision", "verdict", "breaches", "node")} for v in verdicts],
        "finding": finding,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "detection_table.json").write_text(json.dumps(out, indent=2) + "\n")
    (RESULTS / "detection_table.txt").write_text(
        f"$ python benchmarks/detection_table.py {' '.join(sys.argv[1:])}\n\n" + text + "\n" + (finding or "") + "\n"
    )
    print(text)
    print(finding)


if __name__ == "__main__":
    main()
