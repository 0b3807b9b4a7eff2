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


def _register_builtins() -> None:
    from precisionflow.precisions import fp16, fp32, int8, int8_dynamic, int8_mixed, int8_qat

    for module in (fp32, fp16, int8, int8_qat, int8_mixed, int8_dynamic):
        register(module.SPEC)


_register_builtins()
