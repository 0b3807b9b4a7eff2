"""The streams table docs/hardware.md stands on (benchmarks/results/streams_across_jobs.md) is what
benchmarks/streams_across_jobs.py reads from the collected GPU results kept beside it: a results
folder added, removed or changed without the table made again fails here."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_recorded_streams_table_is_what_the_collected_gpu_results_give():
    made = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "streams_across_jobs.py")], capture_output=True, text=True, check=True
    )
    recorded = (ROOT / "benchmarks" / "results" / "streams_across_jobs.md").read_text()
    assert made.stdout == recorded, (
        "benchmarks/results/streams_across_jobs.md differs from what the collected GPU results give: run "
        "`python benchmarks/streams_across_jobs.py > benchmarks/results/streams_across_jobs.md` and check "
        "the figures docs/hardware.md quotes from it"
    )
    fp16_rows = [line for line in recorded.splitlines() if "| resnet50 | fp16 | H100" in line and "fused conv+bias" in line]
    assert fp16_rows, "the table lost the H100 fp16 rows docs/hardware.md quotes"
