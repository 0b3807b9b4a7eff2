"""The registry of precisions: name -> PrecisionSpec (spec.py). Each built-in precision is one file
here; `register` adds one (a plug-in or a test)."""

from typing import Dict, List, Optional

from precisionflow.errors import ConfigError
from precisionflow.precisions.spec import PrecisionSpec

REGISTRY: Dict[str, PrecisionSpec] = {}


def register(spec: PrecisionSpec) -> PrecisionSpec:
    REGISTRY[spec.name] = spec
    return spec


def names() -> List[str]:
    return list(REGISTRY)


def get(name: str) -> PrecisionSpec:
    """The spec of a precision; a name the registry lacks is a config error naming the choices."""
    if name not in REGISTRY:
        raise ConfigError(f"precisions: expected one of [{', '.join(REGISTRY)}], found '{name}'.{closest(name)}")
    return REGISTRY[name]


def closest(name: str) -> str:
    import difflib

    close = difflib.get_close_matches(str(name).lower(), list(REGISTRY), n=1, cutoff=0.4)
    return f" Did you mean '{close[0]}'?" if close else ""


def find(name: str) -> Optional[PrecisionSpec]:
    """The spec, or None for a name that is no precision (the fp32 twin's evaluation row)."""
    return REGISTRY.get(name)


def reference() -> PrecisionSpec:
    return next(spec for spec in REGISTRY.values() if spec.is_reference)


def is_reference(name: str) -> bool:
    return name == reference().name


PLUGIN_VARIABLE = "PRECISIONFLOW_PRECISIONS"  # comma-separated modules, each defining SPEC
PLUGIN_SOURCES: Dict[str, str] = {}  # plug-in precision -> its source file's sha256 (in its graph node's id)


def _register_builtins() -> None:
    from precisionflow.precisions import bf16, fp16, fp32, int8, int8_dynamic, int8_mixed, int8_qat

    for module in (fp32, fp16, int8, int8_qat, int8_mixed, int8_dynamic, bf16):
        register(module.SPEC)


def _register_plugins() -> None:
    """Precisions from modules named in PRECISIONFLOW_PRECISIONS: no edit of this package needed.
    The jobs Snakemake starts inherit the variable, so they know the same precisions."""
    import hashlib
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
        spec = getattr(module, "SPEC", None)
        if not isinstance(spec, PrecisionSpec):
            raise ConfigError(f"{PLUGIN_VARIABLE}: module '{module_name}' defines no SPEC (a PrecisionSpec): add one.")
        register(spec)
        with open(module.__file__, "rb") as handle:
            PLUGIN_SOURCES[spec.name] = hashlib.sha256(handle.read()).hexdigest()


_register_builtins()
_register_plugins()
