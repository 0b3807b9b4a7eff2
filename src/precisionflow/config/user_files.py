"""A user's configuration folder (--config-dir), checked file by file against the schema before
Hydra composes anything: an unknown key, a wrong type or a bad choice is named with its file, its
line and its key path, and the closest valid key or choice -- the same quality as a mistake on
the command line (Hydra alone says "ConfigKeyError raised while composing config").
"""

import dataclasses
import difflib
import typing
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Any, List, Optional, Tuple

from precisionflow.errors import ConfigError

HYDRA_KEYS = {"defaults", "hydra"}  # Hydra's own keys in any config file


def group_schemas():
    """{group folder: the schema class of one of its files} (experiment files are global)."""
    from precisionflow import schema

    return {
        "dataset": schema.DatasetConf,
        "model": schema.ModelConf,
        "train": schema.TrainConf,
        "prune": schema.PruneConf,
        "finetune": schema.FinetuneConf,
        "calibration": schema.CalibrationConf,
        "engine": schema.EngineConf,
        "evaluate": schema.EvaluateConf,
        "tracking": schema.TrackingConf,
        "experiment": schema.Config,
    }


def check_folder(folder: Path) -> None:
    """Check every YAML file of the groups precisionflow knows; the first mistake is raised."""
    files = tuple(sorted((str(path), path.stat().st_mtime_ns) for path in Path(folder).glob("*/*.yaml")))
    _check_files(files)


@lru_cache(maxsize=8)
def _check_files(files: Tuple[Tuple[str, int], ...]) -> None:
    schemas = group_schemas()
    for name, _ in files:
        path = Path(name)
        group = path.parent.name
        if group in schemas:
            check_file(path, schemas[group], [] if group == "experiment" else [group])


def check_file(path: Path, schema: type, prefix: List[str] = ()) -> None:
    import yaml

    try:
        root = yaml.compose(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: not valid YAML ({getattr(err, 'problem', err)}). Fix the file's syntax.") from None
    if root is not None:
        _check_mapping(path, root, schema, list(prefix))


def _check_mapping(path: Path, node, schema: type, keys: List[str]) -> None:
    import yaml

    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(
            f"{path}:{node.start_mark.line + 1}: {'.'.join(keys) or 'the file'}: expected a mapping of keys, found a value."
        )
    hints = typing.get_type_hints(schema)
    names = [field.name for field in dataclasses.fields(schema)]
    for key_node, value_node in node.value:
        key = key_node.value
        if len(keys) <= 1 and key in HYDRA_KEYS:  # a group file's or an experiment's own Hydra keys
            continue
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.5)
            hint = f" Did you mean '{close[0]}'?" if close else f" Valid keys here: {', '.join(names)}."
            raise ConfigError(f"{path}:{key_node.start_mark.line + 1}: {'.'.join(keys + [key])}: no such key.{hint}")
        _check_value(path, value_node, hints[key], keys + [key])


def _check_value(path: Path, node, kind: Any, keys: List[str]) -> None:
    import yaml

    kind = _unwrap_optional(kind)
    if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null"):
        return
    if dataclasses.is_dataclass(kind):
        _check_mapping(path, node, kind, keys)
    elif isinstance(kind, type) and issubclass(kind, Enum):
        _check_choice(path, node, kind, keys)
    elif kind in (int, float, bool) and isinstance(node, yaml.ScalarNode):
        _check_scalar(path, node, kind, keys)


def _check_choice(path: Path, node, kind: type, keys: List[str]) -> None:
    choices = [member.value for member in kind]
    value = getattr(node, "value", None)
    if isinstance(value, str) and value not in choices and "${" not in value:
        close = difflib.get_close_matches(value, choices, n=1, cutoff=0.4)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ConfigError(
            f"{path}:{node.start_mark.line + 1}: {'.'.join(keys)}: expected one of [{', '.join(choices)}], found '{value}'.{hint}"
        )


def _check_scalar(path: Path, node, kind: type, keys: List[str]) -> None:
    tag = node.tag.rsplit(":", 1)[-1]
    accepted = {int: ("int",), float: ("int", "float"), bool: ("bool",)}[kind]
    if tag not in accepted and "${" not in node.value:
        raise ConfigError(f"{path}:{node.start_mark.line + 1}: {'.'.join(keys)}: expected {kind.__name__}, found '{node.value}'.")


def _unwrap_optional(kind: Any) -> Any:
    args = [arg for arg in typing.get_args(kind) if arg is not type(None)]
    if typing.get_origin(kind) is typing.Union and len(args) == 1:
        return args[0]
    return kind


def user_folder() -> Optional[Path]:
    import os

    from precisionflow.assets import USER_CONFIG_ENV

    named = os.environ.get(USER_CONFIG_ENV)
    return Path(named) if named else None
