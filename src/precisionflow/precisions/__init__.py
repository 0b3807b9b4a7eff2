"""The registry of precisions: name -> PrecisionSpec (spec.py). Each built-in precision is one file
here, named as the precision and defining SPEC; `register` adds one (a plug-in or a test).

Built-ins are found by file name and imported by name, one at a time, when first asked for -- never
all at once: a node's id covers the import closure of the code it runs (identity.py), and a
registry that imported every precision put every precision into every closure (one line added to
int8_qat.py changed 12 of the 16 ids of an fp32+fp16 plan). A node of precision P hashes P's
module (pipeline/plan.py, identity.precision_hashes) and nothing of the others.
"""

import functools
import dataclasses
import importlib
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from precisionflow.errors import ConfigError
from precisionflow.precisions.spec import PrecisionSpec

REGISTRY: Dict[str, PrecisionSpec] = {}  # the precisions loaded so far, and every plug-in
REFERENCE_NAME = "fp32"  # the precision every other engine is judged against
# How built-ins are listed (names(), the docs): these first, any other file after them by name.
DISPLAY_ORDER = ("fp32", "fp16", "int8", "int8_qat", "int8_mixed", "int8_dynamic", "bf16")
_DEFINES_SPEC = re.compile(r"^SPEC\s*=", re.MULTILINE)


@functools.lru_cache(maxsize=None)
def builtin_names() -> Tuple[str, ...]:
    """The built-in precisions: this folder's modules that define SPEC at their top level (read as
    text, not imported)."""
    found = [
        path.stem
        for path in Path(__file__).parent.glob("*.py")
        if path.stem != "__init__" and _DEFINES_SPEC.search(path.read_text())
    ]
    rank = {name: index for index, name in enumerate(DISPLAY_ORDER)}
    return tuple(sorted(found, key=lambda name: (rank.get(name, len(rank)), name)))


def register(spec: PrecisionSpec) -> PrecisionSpec:
    """Add a precision, refusing one the planner could not place (a clear message, never a
    traceback at planning): a name that is taken or is no identifier, or a `builds_on` that names no
    precision, itself, or a chain that comes back to it."""
    if not str(spec.name).isidentifier():
        raise ConfigError(f"precision '{spec.name}': expected a name usable as an identifier (letters, digits, _).")
    settings, base = spec.graph.settings, spec.graph.builds_on
    if settings is not None and not dataclasses.is_dataclass(settings):
        raise ConfigError(f"precision '{spec.name}': settings must be a dataclass type, found {settings!r}.")
    if base is not None:
        chain, current = [spec.name], base
        while current is not None:
            if current == spec.name or current in chain:
                raise ConfigError(
                    f"precision '{spec.name}': builds_on forms a cycle ({' -> '.join([*chain, current])}); "
                    "a precision builds on one that does not build on it."
                )
            if current not in names():
                raise ConfigError(
                    f"precision '{spec.name}': builds_on='{current}' is no precision; expected one of "
                    f"[{', '.join(names())}].{closest(current)}"
                )
            chain.append(current)
            current = get(current).graph.builds_on
        if get(base).graph.per_placement and not spec.graph.per_placement:
            # it reads its base's graph, and the base has one per placement: so does it, or a CPU
            # target would get the base's TensorRT-placed graph
            spec = dataclasses.replace(spec, graph=dataclasses.replace(spec.graph, per_placement=True))
    REGISTRY[spec.name] = spec
    return spec


def names() -> List[str]:
    return list(dict.fromkeys([*builtin_names(), *REGISTRY]))


def _load_builtin(name: str) -> None:
    module = importlib.import_module(f"precisionflow.precisions.{name}")  # a file of this folder (builtin_names)
    spec = getattr(module, "SPEC", None)
    if not isinstance(spec, PrecisionSpec) or spec.name != name:
        raise ConfigError(
            f"precisions/{name}.py: expected SPEC = PrecisionSpec(name='{name}', ...) (a built-in's file is named "
            f"as its precision), found {getattr(spec, 'name', spec)!r}."
        )
    register(spec)


def get(name: str) -> PrecisionSpec:
    """The spec of a precision; a name the registry lacks is a config error naming the choices."""
    if name not in REGISTRY and name in builtin_names():
        _load_builtin(name)
    if name not in REGISTRY:
        raise ConfigError(f"precisions: expected one of [{', '.join(names())}], found '{name}'.{closest(name)}")
    return REGISTRY[name]


def closest(name: str) -> str:
    import difflib

    close = difflib.get_close_matches(str(name).lower(), names(), n=1, cutoff=0.4)
    return f" Did you mean '{close[0]}'?" if close else ""


def find(name: str) -> Optional[PrecisionSpec]:
    """The spec, or None for a name that is no precision (the fp32 twin's evaluation row)."""
    return get(name) if name in names() else None


def calibrated_by(name: str) -> Optional[str]:
    """ "ptq", "qat" or None: the calibration a precision's graph reads (None also for a row of no
    precision: int8_qat's fp32 twin)."""
    spec = find(name)
    return spec.graph.calibration if spec is not None else None


def runs_in(name: str) -> Optional[str]:
    """How a precision's "ran" label is read ("integer", "fp16", ...); None for a row of no precision."""
    spec = find(name)
    return spec.judging.runs_in if spec is not None else None


def with_settings() -> List[PrecisionSpec]:
    """The precisions that declare settings of their own (loads every built-in: planning only)."""
    return [spec for spec in (get(name) for name in names()) if spec.graph.settings is not None]


def reference() -> PrecisionSpec:
    return get(REFERENCE_NAME)


def is_reference(name: str) -> bool:
    return name == REFERENCE_NAME


PLUGIN_VARIABLE = "PRECISIONFLOW_PRECISIONS"  # comma-separated modules, each defining SPEC
PLUGIN_SOURCES: Dict[str, str] = {}  # plug-in precision -> the sha256 of its code (in its graph node's id)
PLUGIN_FILES: Dict[str, List[str]] = {}  # plug-in precision -> its module and the modules beside it that it imports


def _register_plugins() -> None:
    """Precisions from modules named in PRECISIONFLOW_PRECISIONS: no edit of this package needed.
    The jobs Snakemake starts inherit the variable, so they know the same precisions."""
    import importlib
    import os

    for module_name in filter(None, (name.strip() for name in os.environ.get(PLUGIN_VARIABLE, "").split(","))):
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            raise ConfigError(
                f"{PLUGIN_VARIABLE}: expected importable modules, found '{module_name}' ({err}). Put its folder on "
                "PYTHONPATH, or unset the variable."
            ) from err
        except TypeError as err:  # a spec written for another shape of PrecisionSpec
            raise ConfigError(
                f"{PLUGIN_VARIABLE}: module '{module_name}' could not define its SPEC ({err}). Expected "
                "PrecisionSpec(name=..., summary=..., graph=GraphRecipe(make=...), judging=..., support=..., "
                "tensorrt=...): see docs/how-to/add-a-precision.md."
            ) from err
        spec = getattr(module, "SPEC", None)
        if not isinstance(spec, PrecisionSpec):
            raise ConfigError(f"{PLUGIN_VARIABLE}: module '{module_name}' defines no SPEC (a PrecisionSpec): add one.")
        register(spec)
        PLUGIN_FILES[spec.name], PLUGIN_SOURCES[spec.name] = plugin_code(module.__file__)


def plugin_code(path: str):
    """([the plug-in's file and the files beside it that it imports], the sha256 of that code and
    of every precisionflow module it imports, with their own import closures): editing a helper
    the plug-in imports, or a precisionflow module it builds on, changes its graph nodes' ids."""
    import hashlib

    from precisionflow import identity

    files, pending, package_modules = [], [Path(path).resolve()], set()
    while pending:
        current = pending.pop()
        if current in files:
            continue
        files.append(current)
        for name in identity.imported_names(current):
            if name.split(".")[0] == identity.PACKAGE:
                package_modules.add(name)
            elif (current.parent / f"{name.replace('.', '/')}.py").is_file():  # a helper beside it
                pending.append(current.parent / f"{name.replace('.', '/')}.py")
    digest = hashlib.sha256()
    for each in files:
        digest.update(each.read_bytes())
    for relative in sorted({rel for name in package_modules for rel in identity.import_closure(name)}):
        digest.update(f"{relative}:{identity.file_digest(relative)}\n".encode())
    return [str(each) for each in files], digest.hexdigest()


_register_plugins()
