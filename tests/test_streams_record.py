"""The streams table docs/hardware.md stands on (benchmarks/results/streams_across_jobs.md) is what
benchmarks/streams_across_jobs.py reads from the collected GPU results kept beside it: a results
folder added, removed or changed without the table made again fails here. And the probe that can
settle its cause (benchmarks/streams_fusion_probe.py) loads a fused engine both ways."""

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


def test_the_fusion_probe_loads_a_fused_engine_both_ways_and_any_other_as_built():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from streams_fusion_probe import fusion_sides

    cuda = {"prefer_nhwc": True, "cuda_graph": True, "fuse_conv_bias": True, "use_tf32": True}
    fused = {"device": "cuda", "cuda_settings": cuda}
    sides = dict(fusion_sides(fused))
    assert list(sides) == ["fused", "not fused"]
    assert sides["fused"] is fused
    assert sides["not fused"]["cuda_settings"] == {**cuda, "fuse_conv_bias": False}
    assert cuda["fuse_conv_bias"] is True  # the description as built is left as it was
    for built_without in ({"device": "cuda", "cuda_settings": {**cuda, "fuse_conv_bias": False}}, {"device": "cpu"}):
        assert fusion_sides(built_without) == [("as built", built_without)]
