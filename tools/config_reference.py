"""Write docs/reference/config.md from the configuration schema (schema.py) and the built-in
defaults: every key, its type, its default and the comment beside it in the schema. Generated, so
it cannot drift; `make docs` runs it, and tests/test_docs.py checks the committed page is current.

    .venv/bin/python tools/config_reference.py [--check]
"""

import ast
import dataclasses
import sys
import typing
from enum import Enum
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_FILES = [
    ROOT / "src" / "precisionflow" / name for name in ("schema.py", "budgets.py", "detection/boxes.py")
]  # BudgetConf, DetectionEvalConf
PAGE = ROOT / "docs" / "reference" / "config.md"


def comments(extra_sources=()) -> dict:
    """{(class name, field name): the comment on the field's line or the lines just above it}, from
    the schema and from the files that define the precisions' own settings (`extra_sources`)."""
    found = {}
    for source in [*SCHEMA_FILES, *extra_sources]:
        found.update(file_comments(Path(source).read_text()))
    return found


def file_comments(text: str) -> dict:
    lines = text.splitlines()
    found = {}
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                line = lines[item.lineno - 1]
                text = [line.split("#", 1)[1].strip()] if "#" in line else []
                above = item.lineno - 2
                while above >= 0 and lines[above].strip().startswith("#"):
                    text.insert(0, lines[above].strip().lstrip("#").strip())
                    above -= 1
                found[(node.name, item.target.id)] = " ".join(text)
    return found


def type_name(kind) -> str:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is typing.Union:
        inner = [type_name(arg) for arg in args if arg is not type(None)]
        return " or ".join(inner) + " or null"
    if origin in (list, typing.List):
        return f"list of {type_name(args[0])}"
    if origin in (dict, typing.Dict):
        return f"mapping of {type_name(args[1])}"
    if isinstance(kind, type) and issubclass(kind, Enum):
        return " \\| ".join(f"`{member.value}`" for member in kind)
    return getattr(kind, "__name__", str(kind))


def rows(schema, prefix: str, notes: dict, composed: dict):
    """(key, type, default, meaning) per key. The default is the value the default run uses (conf/
    composed, as `precisionflow run` and `precisionflow config` compose it); under a mapping's
    `<name>` (a section a user adds: a target, a precision's budget) it is the schema's."""
    hints = typing.get_type_hints(schema)
    for field in dataclasses.fields(schema):
        key, kind = f"{prefix}{field.name}", hints[field.name]
        inner = typing.get_args(kind)[0] if typing.get_origin(kind) is typing.Union else kind
        if dataclasses.is_dataclass(inner):
            yield from rows(inner, key + ".", notes, composed)
            continue
        note = notes.get((schema.__name__, field.name), "").replace("|", "\\|")
        values = typing.get_args(kind)[1] if typing.get_origin(kind) in (dict, typing.Dict) else None
        if dataclasses.is_dataclass(values):  # a mapping of sections (target_defs): the mapping, then each key
            yield key, type_name(kind), shown_sections(key, field, composed), note
            yield from rows(values, key + ".<name>.", notes, composed)
            continue
        yield key, type_name(kind), shown_value(key, field, composed), note


def composed_value(key: str, composed: dict):
    """The default run's value of `key`, or MISSING under a `<name>` section."""
    value = composed
    for part in key.split("."):
        if part == "<name>" or not isinstance(value, dict) or part not in value:
            return dataclasses.MISSING
        value = value[part]
    return value


def shown_value(key: str, field, composed: dict) -> str:
    value = composed_value(key, composed)
    if value is dataclasses.MISSING:
        return shown_default(field)
    value = [item.value if isinstance(item, Enum) else item for item in value] if isinstance(value, list) else value
    value = value.value if isinstance(value, Enum) else value
    return "null" if value is None else repr(value).replace("|", "\\|")


def shown_sections(key: str, field, composed: dict) -> str:
    value = composed_value(key, composed)
    if not isinstance(value, dict):
        return shown_default(field)
    return "{" + ", ".join(f"{name}: ..." for name in value) + "}"  # each section's keys have rows


def shown_default(field) -> str:
    if field.default_factory is not dataclasses.MISSING:
        default = field.default_factory()
        if isinstance(default, dict) and all(dataclasses.is_dataclass(v) for v in default.values()):
            return "{" + ", ".join(f"{name}: ..." for name in default) + "}"  # each section's keys have rows
    else:
        default = field.default
    default = default.value if isinstance(default, Enum) else default
    return "null" if default is None else repr(default).replace("|", "\\|")


def page() -> str:
    import inspect

    sys.path.insert(0, str(ROOT / "src"))
    from precisionflow import precisions
    from precisionflow.config.compose import expand, with_precision_sections

    Config = with_precision_sections()
    composed = expand(
        []
    )[
        0
    ]  # the default run's configuration: conf/ composed over the schema  # a precision's own settings are a section like any other
    notes = comments(inspect.getsourcefile(spec.graph.settings) for spec in precisions.with_settings())
    lines = [
        "# Configuration reference",
        "",
        "Every key precisionflow reads, generated from `src/precisionflow/schema.py` and the settings each",
        "precision declares (`PrecisionSpec.graph.settings`; a plug-in's too: run the tool with",
        "`PRECISIONFLOW_PRECISIONS` set) by",
        "`tools/config_reference.py` (`make docs`): the key, its type, its default and the schema's comment.",
        "The default is the value `precisionflow run` uses with no overrides (`conf/` composed over the",
        "schema; under `<name>`, a section you add, the schema's); presets and overrides change it:",
        "`precisionflow config [overrides]` prints what a run would use. Unknown keys, wrong types and bad",
        "choices are refused before anything runs.",
        "",
        "| key | type | default | meaning |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{key}` | {kind} | `{default}` | {note} |" for key, kind, default, note in rows(Config, "", notes, composed)]
    return "\n".join(lines) + "\n"


def main() -> int:
    from generated_page import write_or_check

    text = page()
    return write_or_check(PAGE, text, "tools/config_reference.py", f"{text.count(chr(10)) - 9} keys")


if __name__ == "__main__":
    sys.exit(main())
