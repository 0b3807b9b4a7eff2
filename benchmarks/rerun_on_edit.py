"""Issue 31: which stages of the default experiment rerun when a shared module is edited.

For each module every stage imports (nodeio.py, pipeline/runner.py, errors.py) and for the
report's template: the nodes whose id changes after (a) a prose-only edit -- a reworded docstring,
new comments, blank lines -- and (b) one line of code added. Planning only (nothing trains): the
package is copied, the copy edited and made the package the code identity reads.

    .venv/bin/python benchmarks/rerun_on_edit.py  -> benchmarks/results/rerun_on_edit.json
"""

import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import save  # noqa: E402

SHARED = ["nodeio.py", "pipeline/runner.py", "errors.py"]
TEMPLATE = "reporting/templates/report.html.j2"


def prose_only(text: str) -> str:
    reworded = text.replace('"""', '"""Reworded. ', 1).replace("\nclass ", "\n# a new comment\n\n\nclass ", 1)
    return reworded.replace("\ndef ", "\n# another comment\n\n\ndef ", 1) + "\n# trailing comment\n"


def code_line(text: str) -> str:
    return text + "\nEDITED = 1\n"


def template_edit(text: str) -> str:
    return text + "<!-- edited -->\n"


def rerun_stages(relative: str, edit) -> dict:
    """{stage: nodes whose id changed} after `edit` of one file of a copy of the package."""
    from precisionflow.config.compose import expand
    from precisionflow import identity
    from precisionflow.pipeline import plan as planning

    point = expand([])[0]
    plan_ids = lambda: set(planning.build_plan([point], "/tmp/precisionflow-rerun-bench")["nodes"])  # noqa: E731
    original = identity.PACKAGE_DIR
    identity.clear_caches()
    before = plan_ids()
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "precisionflow"
        shutil.copytree(original, copy, ignore=shutil.ignore_patterns("__pycache__"))
        path = copy / relative
        path.write_text(edit(path.read_text()))
        identity.PACKAGE_DIR = copy
        identity.clear_caches()
        try:
            after = plan_ids()
        finally:
            identity.PACKAGE_DIR = original
            identity.clear_caches()
    return dict(sorted(Counter(key.split("/")[0] for key in before - after).items())), len(before)


def main() -> None:
    rows = []
    for relative in SHARED:
        for name, edit in (("comments and docstring only", prose_only), ("one line of code", code_line)):
            changed, planned = rerun_stages(relative, edit)
            rows.append(
                {
                    "file": relative,
                    "edit": name,
                    "nodes_planned": planned,
                    "nodes_rerun": sum(changed.values()),
                    "by_stage": changed,
                }
            )
            print(rows[-1], flush=True)
    changed, planned = rerun_stages(TEMPLATE, template_edit)
    rows.append(
        {
            "file": TEMPLATE,
            "edit": "an HTML comment",
            "nodes_planned": planned,
            "nodes_rerun": sum(changed.values()),
            "by_stage": changed,
        }
    )
    print(rows[-1], flush=True)
    save("rerun_on_edit.json", {"experiment": "the default (precisionflow run, no overrides)", "rows": rows})


if __name__ == "__main__":
    main()
