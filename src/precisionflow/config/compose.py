"""Hydra composition and sweep expansion, composing as few times as possible.

Hydra's compose() costs ~135 ms, so a sweep is not composed once per point. Overrides are split
into *group* overrides (`model=...`, `experiment=...`: they pick YAML files, so they need a
compose) and *value* overrides (`train.epochs=2,4`: they only set a key). We compose once per
distinct combination of group choices, check each distinct (key, value) pair once against the
structured schema, then build every sweep point as a plain dict.
"""

import copy
import itertools
from enum import Enum
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from precisionflow import precisions
from precisionflow.errors import ConfigError

DECISION_SPLITS = ("train", "val")  # splits a choice (calibration, ops kept in float) may look at


def group_dirs(group: str) -> List[Path]:
    """Every folder that holds choices of a config group: the user's, then the built-in one."""
    from precisionflow.assets import conf_dirs

    return [folder / group for folder in conf_dirs() if (folder / group).is_dir()]


def group_choices(group: str) -> List[str]:
    return sorted({p.stem for folder in group_dirs(group) for p in folder.glob("*.yaml")})


def _parse(overrides: Sequence[str]):
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        return OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as err:
        raise ConfigError(f"Could not parse the overrides {list(overrides)}: {err}") from err


def _choices(override) -> List[Any]:
    """The values one override takes: several for a sweep, one otherwise."""
    from hydra.core.override_parser.types import ValueType

    if override.value_type == ValueType.INTERVAL_SWEEP:
        raise ConfigError(
            f"'{override.input_line}': interval sweeps need an optimisation sweeper; "
            "list the values (a=1,2,3) or use range(start,stop,step)."
        )
    if override.is_sweep_override():
        return list(override.sweep_string_iterator() if _is_group(override) else override.sweep_iterator())
    return [override.get_value_element_as_str() if _is_group(override) else override.value()]


def _is_group(override) -> bool:
    return bool(group_dirs(override.key_or_group.split("@")[0]))


def _override_prefix(override) -> str:
    from hydra.core.override_parser.types import OverrideType

    return {OverrideType.ADD: "+", OverrideType.FORCE_ADD: "++", OverrideType.DEL: "~"}.get(override.type, "")


def _compose(group_overrides: Tuple[str, ...]):
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from precisionflow.schema import register

    from precisionflow.assets import builtin_conf_dir

    from precisionflow.config import user_files

    folder = user_files.user_folder()
    if folder is not None and folder.is_dir():  # its files checked key by key, with file and line
        user_files.check_folder(folder)
    register(with_precision_sections())
    # A user's folder (--config-dir) is put ahead of this one by the search-path plugin in
    # src/hydra_plugins/precisionflow_searchpath.
    try:
        with initialize_config_dir(config_dir=str(builtin_conf_dir()), version_base=None):
            return compose(config_name="config", overrides=list(group_overrides))
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(_group_error(str(err), group_overrides)) from err


def with_precision_sections() -> type:
    """The schema's Config, plus one section per precision that declares its own settings (a
    plug-in's PrecisionSpec.graph.settings): `toy.alpha=3` is then a typed key like any other. A section
    that would replace one of the configuration's own is refused."""
    import dataclasses

    from precisionflow.schema import Config

    own = {f.name for f in dataclasses.fields(Config)}
    extra = []
    for spec in precisions.with_settings():
        if spec.name in own:
            raise ConfigError(
                f"precision '{spec.name}': its settings section would replace the configuration's own "
                f"'{spec.name}' section; name the precision otherwise."
            )
        extra.append((spec.name, spec.graph.settings, dataclasses.field(default_factory=spec.graph.settings)))
    return dataclasses.make_dataclass("Config", extra, bases=(Config,)) if extra else Config


def _group_error(message: str, group_overrides) -> str:
    """Hydra's multi-line answer as one line: the unknown choice, the choices there are, the closest."""
    import difflib
    import re

    missing = re.search(r"Could not (?:find|load) '([^/']+)/([^']+)'", message)
    if missing:
        group, choice = missing.groups()
        options = group_choices(group)
        close = difflib.get_close_matches(choice, options, n=1, cutoff=0.4)
        hint = f" Did you mean {group}={close[0]}?" if close else ""
        return f"{group}={choice}: no such choice; choices of {group}: {', '.join(options)}.{hint}"
    first = next((line.strip() for line in message.splitlines() if line.strip()), message)
    return f"{first} (overrides {list(group_overrides)})"


def _checked_value(cfg, key: str, value: Any, adds: set = frozenset()) -> Any:
    """Set key=value on the structured config (the schema checks it) and return the stored value.
    Keys given with Hydra's '+' (adding an entry to a free-form mapping, e.g. +evaluate.budgets.fp16)
    may be new; any other unknown key is refused."""
    import contextlib

    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    try:
        with open_dict(cfg) if key in adds and _free_form_parent(cfg, key) else contextlib.nullcontext():
            OmegaConf.update(cfg, key, value, merge=False)
        node = OmegaConf.select(cfg, key)
        return OmegaConf.to_container(node, resolve=True, enum_to_str=True) if OmegaConf.is_config(node) else _plain(node)
    except (OmegaConfBaseException, ValueError) as err:
        raise ConfigError(_value_error(cfg, key, value, err)) from err


def _refuse_object_targets(key: str) -> None:
    """precisionflow never instantiates classes named in a configuration (components are chosen by
    group: model=..., dataset=...): a `_target_` key would do nothing or, in code that did, run anything."""
    if "_target_" in key.split("."):
        raise ConfigError(
            f"{key}: precisionflow builds no objects named in the configuration, so _target_ keys "
            "are refused. Choose a component with its group (model=..., dataset=..., engine=...)."
        )


def _free_form_parent(cfg, key: str) -> bool:
    """'+' adds entries only to the free-form mappings (evaluate.budgets, stage_resources):
    everywhere else the schema's keys are the only ones, and a new key is a typo to refuse."""
    from omegaconf import OmegaConf

    parts = key.split(".")
    for depth in range(len(parts) - 1, 0, -1):
        node = OmegaConf.select(cfg, ".".join(parts[:depth]))
        if node is not None:
            return OmegaConf.is_dict(node) and OmegaConf.get_type(node) is dict
    return False


def _value_error(cfg, key: str, value: Any, err: Exception) -> str:
    """One line: an unknown key with the closest valid ones, or what the key expects."""
    import difflib

    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    if isinstance(err, (ConfigKeyError, ConfigAttributeError)) and "not in" in str(err):
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(cfg, parent) if parent else cfg
        if node is None:  # the section itself does not exist: name the top-level ones
            parent, leaf, node = "", key.split(".")[0], cfg
        valid = sorted(node.keys()) if OmegaConf.is_dict(node) else []
        close = difflib.get_close_matches(leaf, valid, n=2, cutoff=0.5)
        where = f"{parent}." if parent else ""
        hint = f" Did you mean {' or '.join(where + c for c in close)}?" if close else f" Valid keys here: {', '.join(valid)}."
        return f"{key}: no such key.{hint}"
    choices = _enum_choices(cfg, key)
    if choices and str(value) not in choices:  # a schema Enum: its choices, and the closest one
        by_lower = {choice.lower(): choice for choice in choices}
        close = difflib.get_close_matches(str(value).lower(), list(by_lower), n=1, cutoff=0.4)
        hint = f" Did you mean '{by_lower[close[0]]}'?" if close else ""
        return f"{key}: expected one of [{', '.join(choices)}], found '{value}'.{hint}"
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), str(err))
    return f"{key}={value!r}: {first}{closest_in_list(first)}"


def closest_in_list(message: str) -> str:
    """For a list of choices (precisions=[fp32,int9]): OmegaConf names the bad item and the choices
    but suggests none; the closest one, as for a single choice."""
    import difflib
    import re

    found = re.search(r"Invalid value '([^']+)', expected one of \[([^\]]+)\]", message)
    if not found:
        return ""
    choices = [choice.strip() for choice in found.group(2).split(",")]
    close = difflib.get_close_matches(found.group(1).lower(), [c.lower() for c in choices], n=1, cutoff=0.4)
    return f". Did you mean '{choices[[c.lower() for c in choices].index(close[0])]}'?" if close else ""


def _enum_choices(cfg, key: str) -> List[str]:
    """The values a key's schema Enum allows ([] for any other key)."""
    from omegaconf import OmegaConf

    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if node is None or not OmegaConf.is_dict(node):
        return []
    try:
        kind = OmegaConf.get_type(node._get_node(leaf))  # the schema's type of that field
    except (AttributeError, KeyError, TypeError):
        return []
    return [member.value for member in kind] if isinstance(kind, type) and issubclass(kind, Enum) else []


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def _set_dotted(tree: Dict[str, Any], key: str, value: Any) -> None:
    *parents, leaf = key.split(".")
    for part in parents:
        tree = tree[part]
    tree[leaf] = copy.deepcopy(value)


def expand(overrides: Sequence[str] = (), multirun: bool = False) -> List[Dict[str, Any]]:
    """Return one plain, validated config dict per sweep point (in Hydra's order)."""
    from omegaconf import OmegaConf

    parsed = _parse(overrides)
    sweeps = [o.input_line for o in parsed if o.is_sweep_override()]
    if sweeps and not multirun:
        raise ConfigError(f"{sweeps} sweep over several values; add -m (--multirun) to run a sweep.")
    for override in parsed:
        if _override_prefix(override) == "~":
            raise ConfigError(f"'{override.input_line}': deleting keys is not supported; set a value instead.")
    groups = [o for o in parsed if _is_group(o)]
    values = [o for o in parsed if not _is_group(o)]
    group_choices = [[f"{_override_prefix(o)}{o.key_or_group}={c}" for c in _choices(o)] for o in groups]
    value_choices = [[(o.key_or_group, v) for v in _choices(o)] for o in values]
    for override in values:
        _refuse_object_targets(override.key_or_group)
    adds = {o.key_or_group for o in values if _override_prefix(o) in ("+", "++")}

    points = []
    for group_combo in itertools.product(*group_choices):
        cfg = _compose(tuple(group_combo))
        base = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
        checked = {}
        for key, value in {kv for choice in value_choices for kv in ((k, _freeze(v)) for k, v in choice)}:
            checked[(key, value)] = _checked_value(cfg, key, _thaw(value), adds)
        for value_combo in itertools.product(*value_choices):
            point = copy.deepcopy(base)
            for key, value in value_combo:
                _set_dotted(point, key, checked[(key, _freeze(value))])
            validate(point)
            points.append(point)
    return points


def _freeze(value: Any) -> Any:
    """A hashable stand-in for an override value (lists become tuples)."""
    if isinstance(value, (list, tuple)):
        return ("__list__",) + tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return ("__dict__",) + tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, tuple) and value and value[0] == "__list__":
        return [_thaw(v) for v in value[1:]]
    if isinstance(value, tuple) and value and value[0] == "__dict__":
        return {k: _thaw(v) for k, v in value[1:]}
    return value


# Choices typed as plain strings in the schema: refused at composition, with the closest valid one.
# Keys read only by one choice of a component: set for another choice, they would be silently ignored.
ONLY_WITH = {
    "dataset.path": ("dataset.name", ("image_folder", "coco_folder")),
    "model.path": ("model.name", ("keras_file",)),
    "dataset.num_images": ("dataset.name", ("shadow_cars",)),
    "dataset.conditions": ("dataset.name", ("image_folder", "coco_folder")),
}
DETECTION_DATASETS = ("shadow_cars", "coco_folder")
DETECTION_MODELS = ("center_net", "keras_file")  # a user's Keras detector follows center_net's output contract


def _get(cfg: Dict[str, Any], key: str):
    for part in key.split("."):
        cfg = cfg[part]
    return cfg


def check_choices(cfg: Dict[str, Any]) -> None:

    uri = cfg["tracking"]["uri"]
    if uri is not None and not str(uri).startswith(("sqlite:///", "http://", "https://", "postgresql://", "mysql://", "file:")):
        raise ConfigError(
            f"tracking.uri: expected a store URI (sqlite:///path.db, http(s)://host:port of an mlflow server, "
            f"postgresql://...), found '{uri}'; or leave it null for results/mlflow.db."
        )
    if cfg["dataset"]["cache"] == "none" and cfg["dataset"]["name"] != "image_folder":
        raise ConfigError(
            f"dataset.cache=none keeps image files where they are, but dataset '{cfg['dataset']['name']}' "
            "has no image files: choose dataset.cache=memory or disk."
        )
    for key, (selector, readers) in ONLY_WITH.items():
        if _get(cfg, key) and _get(cfg, selector) not in readers:
            raise ConfigError(
                f"{key} is set, but {selector}={_get(cfg, selector)} does not read it (only "
                f"{' / '.join(readers)} does): choose {selector.split('.')[0]}={readers[0]}, or drop {key}."
            )


def check_task(cfg: Dict[str, Any]) -> None:
    """Data set, model and precisions that fit the task, refused before anything runs."""
    dataset, model = cfg["dataset"]["name"], cfg["model"]["name"]
    if cfg["task"] == "classification":
        if dataset in DETECTION_DATASETS:
            raise ConfigError(
                f"dataset={dataset} is a detection data set but task=classification: add task=detection "
                "(or use experiment=detection)."
            )
        if model == "center_net":
            raise ConfigError("model=center_net is a detector but task=classification: add task=detection.")
        return
    if dataset not in DETECTION_DATASETS:
        raise ConfigError(
            f"task=detection needs a detection data set ({' or '.join(DETECTION_DATASETS)}), found "
            f"dataset={dataset}: use dataset=shadow_cars, or dataset=coco_folder dataset.path=<folder>."
        )
    if model not in DETECTION_MODELS:
        raise ConfigError(
            f"task=detection needs a detector (model=center_net, or model=keras_file with its output "
            f"contract), found model={model}."
        )
    refused = [name for name in cfg["precisions"] if "detection" not in precisions.get(name).support.tasks]
    if refused:
        spec = precisions.get(refused[0])
        working = [name for name in precisions.names() if "detection" in precisions.get(name).support.tasks]
        raise ConfigError(
            f"precisions: {spec.support.why_not_detection}; drop {spec.name} for task=detection ({', '.join(working)} work)."
        )
    if cfg["prune"]["method"] != "none":
        raise ConfigError(
            "prune.method: pruning a detector is not supported yet (its head is not a classifier's); "
            "use prune=none with task=detection."
        )
    if dataset == "shadow_cars" and (cfg["dataset"]["num_images"] or 0) < 20:
        raise ConfigError(f"dataset.num_images: expected at least 20 scenes, found {cfg['dataset']['num_images']}.")


def check_finetune(cfg: Dict[str, Any]) -> None:
    """A fine-tune that runs (finetune.mode, or the QAT fine-tune every int8_qat engine comes from)
    must train: with 0 epochs an int8_qat engine would carry untrained quantization ranges."""
    finetune = cfg["finetune"]
    why = (
        "finetune.mode=" + finetune["mode"]
        if finetune["mode"] != "none"
        else "int8_qat engines come from a QAT fine-tune"
        if any(precisions.get(name).graph.from_qat_finetune for name in cfg["precisions"])
        else ""
    )
    for leaf in ("epochs", "batch_size"):
        if why and finetune[leaf] < 1:
            raise ConfigError(f"finetune.{leaf}: expected an integer >= 1 ({why}), found {finetune[leaf]}.")


def check_precisions(cfg: Dict[str, Any]) -> None:
    """Names the registry knows, the reference among them, each one on a backend that runs it."""
    if not cfg["precisions"]:
        raise ConfigError(f"precisions: expected at least one of {', '.join(precisions.names())}; found an empty list.")
    for name in cfg["precisions"]:
        precisions.get(name)  # an unknown name: the choices and the closest one
    reference = precisions.reference().name
    if reference not in cfg["precisions"]:
        raise ConfigError(
            f"precisions: expected {reference} among {list(cfg['precisions'])} -- every engine is compared with "
            f"the {reference} one; add {reference} (e.g. 'precisions=[{reference},fp16]')."
        )
    backend = str(getattr(cfg["engine"]["backend"], "value", cfg["engine"]["backend"]))
    for name in cfg["precisions"]:
        spec = precisions.get(name)
        if backend not in spec.support.backends:
            raise ConfigError(
                f"precisions: {name} with engine.backend={backend}: {spec.support.why_not_tensorrt or 'not supported'}. "
                f"Use engine.backend={spec.support.backends[0]} for {name}, or drop it."
            )


# Serving settings (evaluate.serving, and a target's serving overrides): (key, the test, what is expected).
SERVING_RULES = (
    ("latency_bound_ms", lambda v: v is None or v > 0, "a bound > 0 ms, or null (15 ms on a GPU, 33 ms on a CPU)"),
    ("percentile", lambda v: 0 < v < 1, "a fraction strictly between 0 and 1 (0.99 = p99)"),
    ("min_duration_ms", lambda v: v > 0, "a duration > 0 ms"),
    ("search_duration_ms", lambda v: v is None or v > 0, "a duration > 0 ms, or null (= min_duration_ms)"),
    ("min_query_count", lambda v: v >= 1, "an integer >= 1"),
    ("max_batch", lambda v: v >= 1, "an integer >= 1"),
    ("max_wait_ms", lambda v: v >= 0, "a wait >= 0 ms"),
    ("workers", lambda v: v >= 1, "an integer >= 1"),
    ("search_precision", lambda v: v > 0, "a bracket width > 0 (0.1 = within 10%)"),
    ("search_repeats", lambda v: v >= 1, "an integer >= 1 (2 or more for a ratio with an interval)"),
    ("full_length_climb", lambda v: v >= 0, "an integer >= 0"),
    ("server_next_batch", lambda v: v in ("when_ready", "when_gpu_frees"), "when_ready or when_gpu_frees"),
)


def check_override_keys(cfg: Dict[str, Any]) -> None:
    """A target's (and on_gpu's) `timing` and `serving` are partial overrides, so a free-form dict in
    the schema: every key is checked here against the section it overrides, with the closest name
    (a typo such as latency_bond_ms would otherwise plan, change an id, and set nothing)."""
    import difflib

    from precisionflow.measure.targets import TIMING_KEYS, TIMING_OVERRIDE_KEYS

    known = {"timing": TIMING_KEYS + TIMING_OVERRIDE_KEYS, "serving": tuple(cfg["evaluate"]["serving"])}
    places = {f"target_defs.{name}": target for name, target in cfg["target_defs"].items()}
    places["on_gpu"] = cfg.get("on_gpu") or {}
    for where, holder in places.items():
        for section, keys in known.items():
            for key in holder.get(section) or {}:
                if key not in keys:
                    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
                    hint = f" Did you mean '{close[0]}'?" if close else ""
                    raise ConfigError(
                        f"{where}.{section}.{key}: no such setting; expected one of [{', '.join(keys)}].{hint} "
                        f"Fix or drop the key."
                    )


def check_serving(cfg: Dict[str, Any]) -> None:
    """Every serving setting before any job: a bound of -5 ms once trained, built, timed and served
    everything, then FAILed three engines with "no rate meets p99 <= -5 ms"."""
    from precisionflow.measure.targets import serving_settings

    check_override_keys(cfg)
    places = {"evaluate.serving": cfg["evaluate"]["serving"]}
    for target in cfg["targets"]:
        places[f"target_defs.{target}.serving"] = serving_settings(cfg, target)
    for where, settings in places.items():
        for key, holds, expected in SERVING_RULES:
            value = settings.get(key)
            if key not in settings:
                continue
            try:
                fine = holds(value)
            except TypeError:
                fine = False
            if not fine:
                raise ConfigError(f"{where}.{key}: expected {expected}, found {value!r}. Set {where}.{key}=<value> accordingly.")


def validate(cfg: Dict[str, Any]) -> None:
    """Checks across keys that a type schema cannot express."""
    check_choices(cfg)
    check_precisions(cfg)
    check_task(cfg)
    for name in cfg["precisions"]:  # what each precision itself refuses (PrecisionSpec.check_config)
        precisions.get(name).check_config(cfg)
    unknown = [t for t in cfg["targets"] if t not in cfg["target_defs"]]
    if unknown:
        raise ConfigError(
            f"targets: {unknown} not defined; known targets: {sorted(cfg['target_defs'])}. "
            "Define one under target_defs in conf/ or pick a known one."
        )
    check_target_facts(cfg)
    check_sizes(cfg)
    check_finetune(cfg)
    if cfg["model"]["name"] == "keras_file":  # before pruning reads the file's layer graph
        from precisionflow.modeling.models import check_user_model_file

        check_user_model_file(cfg["model"])
    check_pruning(cfg)
    check_data_and_engine(cfg)
    check_splits_and_rounds(cfg)
    check_serving(cfg)
    from precisionflow.reporting.budget import check_config

    check_config(cfg["evaluate"])
    fractions = cfg["dataset"]["val_fraction"] + cfg["dataset"]["test_fraction"]
    if not 0 < fractions < 1:
        raise ConfigError(f"dataset.val_fraction + test_fraction: expected between 0 and 1, found {fractions}.")


def check_target_facts(cfg: Dict[str, Any]) -> None:
    """A target's device and CPU are its own facts, never the planning machine's: a plan means the
    same wherever it is made. Only `local` (the machine that plans and runs it) may leave its device
    to `auto`, which asks this machine for a GPU."""
    from precisionflow.cpu_features import DECLARABLE

    for target in cfg["targets"]:
        target_def = cfg["target_defs"][target]
        where = f"target_defs.{target}"
        if target_def["device"] not in ("auto", "cuda", "cpu"):
            raise ConfigError(f"{where}.device: expected auto, cuda or cpu, found {target_def['device']!r}.")
        if target_def["device"] == "auto" and target != "local":
            raise ConfigError(
                f"{where}.device: auto would take the device of whichever machine plans the run; a named "
                f"target declares its own. Set {where}.device=cuda (its engines run on a GPU) or cpu."
            )
        declared = target_def.get("cpu_dot_product") or ""
        if declared and declared not in DECLARABLE:
            raise ConfigError(
                f"{where}.cpu_dot_product: expected one of {', '.join(DECLARABLE)} (or empty: read where the int8 "
                f"graph is made), found {declared!r}. Set it to the integer dot product its CPU has (/proc/cpuinfo flags)."
            )


def check_sizes(cfg: Dict[str, Any]) -> None:
    """Counts and batch sizes a run cannot do without."""
    for key, minimum in (
        ("train.epochs", 1),
        ("train.batch_size", 1),
        ("evaluate.batch_size", 1),
        ("calibration.num_samples", 1),
        ("calibration.batch_size", 1),
        ("int8.report_samples", 1),
    ):
        section, leaf = key.split(".")
        if cfg[section][leaf] < minimum:
            raise ConfigError(f"{key}: expected an integer >= {minimum}, found {cfg[section][leaf]}.")


def check_data_and_engine(cfg: Dict[str, Any]) -> None:
    """The data set's folder and channels, the timing batches, and TensorRT's largest batch."""
    if any(b < 1 for b in cfg["evaluate"]["timing_batch_sizes"]):
        raise ConfigError(f"evaluate.timing_batch_sizes: expected positive sizes, found {cfg['evaluate']['timing_batch_sizes']}.")
    if cfg["dataset"]["name"] in ("image_folder", "coco_folder") and not cfg["dataset"]["path"]:
        raise ConfigError(
            f"dataset.path: dataset={cfg['dataset']['name']} needs the folder of your images; add dataset.path=/path/to/images."
        )
    if cfg["dataset"]["channels"] not in (1, 3):
        raise ConfigError(f"dataset.channels: expected 1 (grey) or 3 (RGB), found {cfg['dataset']['channels']}.")
    engine = cfg["engine"]
    if engine["backend"] == "tensorrt":
        largest = max(
            cfg["evaluate"]["timing_batch_sizes"] + [cfg["evaluate"]["batch_size"], cfg["evaluate"]["stream_batch_size"]]
        )
        if largest > engine["max_batch"]:
            raise ConfigError(
                f"engine.max_batch={engine['max_batch']} but evaluation runs batches of {largest}; "
                "raise engine.max_batch or lower the evaluate batch sizes."
            )


def check_splits_and_rounds(cfg: Dict[str, Any]) -> None:
    """Decisions never read the test split; a side-by-side ratio needs rounds to stand on."""
    for key in ("calibration.split", "int8.report_split"):
        section, leaf = key.split(".")
        if cfg[section][leaf] not in DECISION_SPLITS:
            raise ConfigError(
                f"{key}: expected one of {list(DECISION_SPLITS)}, found '{cfg[section][leaf]}'. It feeds a decision "
                "(calibration ranges, ops kept in float), and decisions never look at the test split: it only scores."
            )
    if cfg["evaluate"]["ratio_rounds"] < 2 or cfg["evaluate"]["ratio_window_s"] <= 0:
        raise ConfigError(
            f"evaluate.ratio_rounds / ratio_window_s: expected at least 2 rounds of a positive window, "
            f"found {cfg['evaluate']['ratio_rounds']} / {cfg['evaluate']['ratio_window_s']}."
        )


def check_pruning(cfg: Dict[str, Any]) -> None:
    """Pruning's settings, that channel pruning can follow a user's saved model (its layers read from
    the file's config, without TensorFlow: a layer it cannot follow fails here, naming it, before the
    model is trained), and that a pruned model is retrained."""
    if cfg["prune"]["method"] == "none":
        return
    from precisionflow.modeling import models, pruning

    if cfg["prune"]["method"] == "channel":
        pruning.check_settings(cfg["prune"])
        user_model = cfg["model"]["name"] == "keras_file" and cfg["model"].get("path")
        graph = models.saved_layer_graph(cfg["model"]["path"]) if user_model else None
        if graph is not None:
            try:
                pruning.check_config(graph, cfg["prune"])
            except pruning.PruneError as err:
                raise pruning.PruneError(f"prune=channel cannot prune model.path={cfg['model']['path']}: {err}") from None
    if cfg["finetune"]["mode"] == "none":
        raise ConfigError(
            f"prune={cfg['prune']['method']}: a pruned model must be retrained before export (as TLT "
            "does); choose finetune.mode=fp32, finetune=mixed_float16 or finetune=qat."
        )
