"""Write docs/reference/precisions.md from the precision registry (src/precisionflow/precisions/):
one row per registered precision, every field of its spec. Generated, so it cannot drift; `make docs`
runs it, and tests/test_docs.py checks the committed page is current.

    .venv/bin/python tools/precision_reference.py [--check]
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "precisions.md"
sys.path.insert(0, str(ROOT / "src"))


def cell(value) -> str:
    if value in (None, False, "", ()):
        return "--"
    if value is True:
        return "yes"
    if isinstance(value, tuple):
        return ", ".join(value)
    return str(value)


def field_of(spec, dotted: str):
    part, field = dotted.split(".")
    return getattr(getattr(spec, part), field)


def page() -> str:
    from precisionflow import precisions

    columns = (
        ("calibration", "graph.calibration"),
        ("fine-tune", "graph.from_qat_finetune"),
        ("builds on", "graph.builds_on"),
        ("per placement", "graph.per_placement"),
        ("TensorRT simulation row", "tensorrt.simulated_on_cpu"),
        ("judged against", None),
        ("label: runs in", "judging.runs_in"),
        ("backends", "support.backends"),
        ("tasks", "support.tasks"),
    )
    lines = [
        "# Precisions",
        "",
        "Every precision precisionflow knows, generated from its registry (`src/precisionflow/precisions/`, one",
        "file per precision) by `tools/precision_reference.py` (`make docs`). Adding one:",
        "[How to add a precision](../how-to/add-a-precision.md).",
        "",
        "| precision | what it is | " + " | ".join(title for title, _ in columns) + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    for name in precisions.names():
        spec = precisions.get(name)
        against = (
            "itself (the reference)" if spec.judging.is_reference else "its fp32 twin" if spec.judging.against_twin else "fp32"
        )
        values = [against if field is None else cell(field_of(spec, field)) for _, field in columns]
        lines.append(f"| `{name}` | {spec.summary} | " + " | ".join(values) + " |")
    refusals = [
        f"* `{name}`: {why}."
        for name in precisions.names()
        for why in (precisions.get(name).support.why_not_tensorrt, precisions.get(name).support.why_not_detection)
        if why
    ]
    lines += ["", "Refused at planning, with the reason:", "", *refusals] if refusals else []
    return "\n".join(lines) + "\n"


def main() -> int:
    from generated_page import write_or_check

    text = page()
    return write_or_check(PAGE, text, "tools/precision_reference.py", f"{len(text.splitlines())} lines")


if __name__ == "__main__":
    sys.exit(main())
