"""How many node ids an edit changes (issue 53): a code line in precisions/int8_qat.py, a new
precision file, and a code line in precisions/fp16.py, against the plans of
`precisions=[fp32,fp16]` and of a 2-model sweep. Run from the checkout to measure:

    .venv/bin/python benchmarks/ids_changed_by_edits.py > benchmarks/results/ids_changed_by_edits.txt

(the same script run against an older checkout with PYTHONPATH=<that checkout>/src gives "before")."""

import shutil
import sys
import tempfile
from pathlib import Path

from precisionflow import identity
from precisionflow.config.compose import expand
from precisionflow.pipeline.plan import build_plan

PLANS = {
    "fp32+fp16": (["precisions=[fp32,fp16]"], False),
    "2-model sweep": (["model=resnet_mini,small_cnn", "precisions=[fp32,fp16]"], True),
}
NEW_PRECISION = (
    "from precisionflow.precisions.fp32 import copy_graph\n"
    "from precisionflow.precisions.spec import GraphRecipe, PrecisionSpec\n\n"
    'SPEC = PrecisionSpec(name="toy", summary="a copy of fp32", graph=GraphRecipe(make=copy_graph))\n'
)


def code_line(text: str) -> str:
    return text.replace("\n\n", "\n\nCHANGED = 1\n", 1)


EDITS = {
    "code line in int8_qat.py": ("precisions/int8_qat.py", code_line),
    "new precision file toy.py": ("precisions/toy.py", lambda text: NEW_PRECISION),
    "code line in fp16.py": ("precisions/fp16.py", code_line),
}


def ids(overrides, multirun, package: Path):
    identity.PACKAGE_DIR = package
    identity.clear_caches()
    return set(build_plan(expand(overrides, multirun=multirun), "/tmp/precisionflow-ids-bench")["nodes"])


def main() -> None:
    original = identity.PACKAGE_DIR
    for plan, (overrides, multirun) in PLANS.items():
        base = ids(overrides, multirun, original)
        for edit, (relative, change) in EDITS.items():
            with tempfile.TemporaryDirectory() as scratch:
                copy = Path(scratch) / "precisionflow"
                shutil.copytree(original, copy, ignore=shutil.ignore_patterns("__pycache__"))
                path = copy / relative
                path.write_text(change(path.read_text() if path.exists() else ""))
                changed = base - ids(overrides, multirun, copy)
            stages = sorted({key.split("/")[0] for key in changed})
            print(f"{plan:14s} | {edit:26s} | {len(changed):2d} of {len(base):2d} ids changed | {', '.join(stages)}")
    identity.PACKAGE_DIR = original
    sys.stdout.flush()


if __name__ == "__main__":
    main()
