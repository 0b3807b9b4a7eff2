"""Issue 52, the detector half: int8_mixed on the shadow story (experiment=shadow_shift, CPU placement).

The preset's calibration never draws a shadow_long scene and its budgets are spurious boxes per
image: 0.1 overall, 0.2 on any condition. fp32, int8 and int8_mixed, the search holding the same
budgets on the validation split (spurious boxes per image overall and per condition, the count
interval the verdicts use), the verdict read on test. Per condition, each row: spurious boxes per
image with interval on the selection split (the search's) and on test (the verdict's), ops float /
int8 as built, speed over fp32 with its interval, and the search's time against the whole run.

    .venv/bin/python benchmarks/mixed_detector_shadow.py LABEL [OVERRIDE ...]
        -> benchmarks/results/mixed_detector_shadow_LABEL.json

"before": issue 52's detector half did not exist -- int8_mixed was refused for task=detection
("drop int8_mixed for task=detection"), so int8's FAIL had no remedy to read.
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, QUICK_TIMING, save  # noqa: E402
from mixed_per_condition import run_and_read  # noqa: E402

OVERRIDES = [
    "experiment=shadow_shift",
    "precisions=[fp32,int8,int8_mixed]",
    "int8.simulate_tensorrt=false",
    *[o for o in QUICK_TIMING if not o.startswith(("evaluate.ratio_rounds", "evaluate.timing_batch_sizes"))],
    "evaluate.ratio_rounds=6",
    "evaluate.timing_batch_sizes=[1,32]",
]


def main() -> None:
    label, extra = sys.argv[1], sys.argv[2:]
    results = OUT / "mixed-detector-shadow" / (re.sub(r"[^A-Za-z0-9_.-]", "_", "-".join(sorted(extra))) or "default")
    given = {override.split("=", 1)[0] for override in extra}  # an OVERRIDE replaces the default of its key
    overrides = [override for override in OVERRIDES if override.split("=", 1)[0] not in given] + extra
    said = ["benchmarks/mixed_detector_shadow.py", label, *extra]
    found = run_and_read(results, overrides, said, OUT / f"mixed_detector_shadow_{label}_stdout.txt")
    save(f"mixed_detector_shadow_{label}.json", found)
    print(found["console_budgets"])


if __name__ == "__main__":
    main()
