"""Why a planned node will run: which key, file, code or package version differs from the closest
node of the same stage that already exists (or that none exists, or that an upstream node is new).

Used by `precisionflow plan --why` and `precisionflow run -n`.
"""

import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from precisionflow.nodeio import NODE_FILE, read_json
from precisionflow.reporting.tracking import flatten


def differences(planned: Dict[str, Any], existing: Dict[str, Any], results: Optional[Path] = None) -> List[str]:
    """Human-readable differences between a planned node and an existing node.json. An upstream is
    "(new)" only when no node folder of it exists yet (`results` given), else "(another node)"."""
    found = []
    new = dict(_by_name(flatten(planned["params"], "params")))
    old = dict(_by_name(flatten(existing.get("params", {}), "params")))
    for key in sorted(set(new) | set(old)):
        if new.get(key, "<unset>") != old.get(key, "<unset>"):
            found.append(f"{key[len('params.') :]}: {old.get(key, '<unset>')!r} -> {new.get(key, '<unset>')!r}")
    for role in sorted(set(planned["inputs"]) | set(existing.get("inputs", {}))):
        if planned["inputs"].get(role) != existing.get("inputs", {}).get(role):
            upstream = planned["inputs"].get(role, "<none>")
            exists = results is not None and (results / upstream / NODE_FILE).is_file()
            found.append(f"upstream {role}: {upstream} ({'another node' if exists else 'new'})")
    old_identity = existing.get("identity", {})
    for package, version in planned.get("identity", {}).get("packages", {}).items():
        if old_identity.get("packages", {}).get(package, version) != version:
            found.append(f"package {package}: {old_identity['packages'][package]} -> {version}")
    old_code = old_identity.get("code") or existing.get("code_version")
    if old_code and old_code != planned.get("identity", {}).get("code"):
        found.append(f"code of {planned['stage']} changed ({_changed_sources(planned, old_identity)})")
    return found


_NODE_ID = re.compile(r"(\w+/[\w.\-]+?)-[0-9a-f]{12}\b")


def _by_name(pairs):
    """Params keyed by node (the report's budgets per evaluation) compared by the node's readable
    name, not its id: a new id with the same budget is no change ('<unset>' -> 2.0 x 144 lines)."""
    return [(_NODE_ID.sub(r"\1", key), value) for key, value in pairs]


def slug(node_id: str) -> str:
    """The readable part of a node id (fp16-local-fdfdc6efd758 -> fp16-local)."""
    return node_id.rsplit("-", 1)[0]


def _changed_sources(planned: Dict[str, Any], old_identity: Dict[str, Any]) -> str:
    from precisionflow import identity

    now = identity.node_source_hashes(planned["stage"], planned["params"])
    before = old_identity.get("sources", {})
    changed = sorted(rel for rel in set(now) | set(before) if now.get(rel) != before.get(rel))
    return ", ".join(changed) or "its import closure"


def closest(planned: Dict[str, Any], stage_dir: Path, limit: int = 300) -> Tuple[Optional[str], List[str]]:
    """The existing node of the stage with the fewest differences, and those differences. Like is
    compared with like: among nodes of the same readable name (precision, target, model) when any
    exists -- an fp32 build is never explained by its differences from an int8 build."""
    best: Tuple[Optional[str], List[str]] = (None, [])
    markers = sorted(stage_dir.glob(f"*/{NODE_FILE}"), key=lambda p: p.stat().st_mtime, reverse=True)[:limit]
    alike = [marker for marker in markers if slug(marker.parent.name) == slug(planned.get("id", ""))]
    markers = alike or markers
    for marker in markers:
        found = differences(planned, read_json(marker), stage_dir.parent)
        if best[0] is None or len(found) < len(best[1]):
            best = (marker.parent.name, found)
    return best


def places(nodes: Dict[str, Dict[str, Any]]) -> Dict[str, str]:
    """{node key: its place in the lineage}: its stage and, by input role (numbers left off), the
    places of its inputs -- no parameter. A node and its counterpart in another configuration of
    the same shape hold the same place: the main model's export and a QAT twin's export do not."""
    import hashlib

    from precisionflow.pipeline.flow import role_kind

    found: Dict[str, str] = {}

    def place(key: str) -> str:
        if key not in found:
            spec = nodes[key]
            inputs = sorted(
                f"{role_kind(role)}={place(source) if source in nodes else source}" for role, source in spec["inputs"].items()
            )
            found[key] = hashlib.sha256(f"{spec['stage']}({','.join(inputs)})".encode()).hexdigest()[:16]
        return found[key]

    for key in nodes:
        place(key)
    return found


def counterpart(
    key: str, spec: Dict[str, Any], plan: Dict[str, Any], baseline: Dict[str, Any]
) -> Tuple[Optional[str], List[str]]:
    """The node holding `key`'s place in `baseline` (the configuration without the changed keys),
    the closest of them where several do, and the differences; (None, []) where none does."""
    mine = places(plan["nodes"])[key]
    theirs = places(baseline["nodes"])
    candidates = [other for other, where in theirs.items() if where == mine and other != key]
    best: Tuple[Optional[str], List[str]] = (None, [])
    for other in candidates:
        found = differences(spec, baseline["nodes"][other], Path(plan["results_dir"]))
        if best[0] is None or len(found) < len(best[1]):
            best = (other, found)
    return best


def explain(plan: Dict[str, Any], baseline: Optional[Dict[str, Any]] = None) -> List[str]:
    """One line per planned node that has no finished output, saying why it will run: against the
    node holding the same place in `baseline` (the configuration its changed keys were changed
    from) where one does, else against the closest finished node of its stage."""
    results = Path(plan["results_dir"])
    lines = []
    for key, spec in plan["nodes"].items():
        if (results / key / NODE_FILE).is_file():
            continue
        name, found, label = None, [], ""
        if baseline is not None and key not in baseline["nodes"]:
            other, found = counterpart(key, spec, plan, baseline)
            name = other and other.split("/", 1)[1]
            label = " (the configuration without the overrides)" if other else ""
            if other is None:
                lines += [key, "    new: no node holds this place in the configuration without the overrides"]
                continue
        if name is None:
            name, found = closest(spec, results / spec["stage"])
        lines.append(f"{key}" + (f"  [vs {name}{label}]" if name else ""))
        # one reason per line, each cut to fit a terminal: a report node has hundreds of upstream roles
        reasons = found if name else ["no earlier node of this stage"]
        lines += [f"    {shorten(reason)}" for reason in reasons[:MAX_REASONS]]
        if len(reasons) > MAX_REASONS:
            lines.append(f"    ... and {len(reasons) - MAX_REASONS} more")
    return lines


def baseline_overrides(overrides) -> List[str]:
    """The configuration the changed keys were changed from: the overrides that choose a preset or
    a config group (experiment=..., dataset=...) and where results go -- not the keys changed."""
    kept = []
    for override in overrides:
        key, _, value = override.partition("=")
        key = key.lstrip("+~")
        if key == "results_dir" or ("." not in key and "," not in value and not value.startswith("[")):
            kept.append(override)
    return kept


def explain_changes(plan: Dict[str, Any]) -> List[str]:
    """explain() against the configuration the plan's changed keys were changed from."""
    from precisionflow.config.compose import expand
    from precisionflow.pipeline.plan import build_plan

    from precisionflow.errors import PrecisionflowError

    overrides = list(plan.get("overrides") or [])
    kept = baseline_overrides(overrides)
    try:
        baseline = build_plan(expand(kept), plan["results_dir"], kept) if kept != overrides else None
    except PrecisionflowError:  # without the changed keys it is no valid configuration (an image folder's path)
        baseline = None
    return explain(plan, baseline)


MAX_REASONS = 12
WIDTH = 116


def shorten(text: str) -> str:
    return text if len(text) <= WIDTH else text[: WIDTH - 3] + "..."
