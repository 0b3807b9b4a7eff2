"""Why int8_mixed built nothing, in words a reader can act on: the budgets a record holds, a trial's
figures against them, and -- where no trial met them -- whether the selection split could resolve
the budget at all or which budget the last trial missed and by how much."""

from typing import Any, Dict, Tuple

import numpy as np

from precisionflow.quant.mixed_record import DROP, SearchRecord, Trial


def nothing_to_build(record: Dict[str, Any], chosen: int) -> str:
    """Why no mix is worth building on accuracy alone, or ''."""
    if not record["budget_met"]:
        remedy = (
            "set a budget this split can resolve (or a larger split)"
            if record.get("unresolvable")
            else "loosen the budget it names, or exclude the op left in int8 (int8.exclude_nodes)"
        )
        return (
            f"no mix of int8 and float kept {record['unit']} within {budgets_text(record)} by its interval on "
            f"the {record['split']} split ({record.get('why_not_met', '')}); an engine with nearly every op in float "
            f"buys no speed over fp32: nothing built. Read the int8 and fp32 rows, or {remedy}."
        )
    if chosen == 0:
        search = SearchRecord.read(record)
        return (
            f"int8 itself is within the budget on the {search.split} split ({trial_text(search, search.int8_itself)}, "
            f"budgets {budgets_text(record)}): int8_mixed would be the int8 graph again -- nothing built; read the int8 row."
        )
    return ""


def overall_limit(record: Dict[str, Any]):
    """The overall budget the search held: top-1 points, spurious boxes per image, or None (a
    detector budgeted per condition only)."""
    return record["max_drop_points"] if "max_drop_points" in record else record.get("max_spurious_per_image")


def record_limits(record: Dict[str, Any]) -> Dict[str, float]:
    """{judged subset: budget} as the search's record holds them (overall, the mAP drops, conditions)."""
    from precisionflow.quant.judges import MAP, map50_key
    from precisionflow.quant.sensitivity import OVERALL

    limits = {} if overall_limit(record) is None else {OVERALL: overall_limit(record)}
    if record.get("max_map_drop") is not None:
        limits[MAP] = record["max_map_drop"]
    limits.update(record.get("condition_limits") or {})
    return {**limits, **{map50_key(tag): limit for tag, limit in (record.get("map50_limits") or {}).items()}}


def budgets_text(record: Dict[str, Any]) -> str:
    """'2.0 points overall, dim 5.0' -- the budgets a mix must hold, as the search read them."""
    named = ", ".join(f"{name} {limit}" for name, limit in (record.get("condition_limits") or {}).items())
    overall = overall_limit(record)
    said = [f"{overall} {record.get('unit', 'points')} overall"] if overall is not None else []
    if record.get("max_map_drop") is not None:
        said.append(f"mAP drop {record['max_map_drop']} points")
    if record.get("map50_limits"):
        said.append(f"mAP@.5 drop {next(iter(record['map50_limits'].values()))} points on each condition")
    return ", ".join(said + ([named] if named else []))


def trial_text(search: SearchRecord, trial: Trial) -> str:
    """One trial's overall figure as words: 'drop +2.10 [0.40, 3.90] points' or '0.05 [0.02, 0.09]
    spurious boxes per image'."""
    if trial.figure == DROP:
        return f"drop {trial.value:+.2f} [{trial.low:+.2f}, {trial.high:+.2f}] points"
    said = f"{trial.value:.3f} [{trial.low:.3f}, {trial.high:.3f}] {search.unit}"
    if trial.map_drop:
        drop = trial.map_drop
        said += f", a mAP drop of {drop['drop']:+.2f} [{drop['low']:+.2f}, {drop['high']:+.2f}] points"
    return said


def why_not_met(figures: Dict[str, Any], limits: Dict[str, float], judge) -> Tuple[str, bool]:
    """(which budgets the last trial (all but one op float) still did not clear, by how much; whether
    any of them is finer than its images can ever resolve -- the only case that blames the split)."""
    from precisionflow.quant.judges import MAP, map50_tag
    from precisionflow.quant.sensitivity import OVERALL

    said, unresolvable = [], False
    for name, limit in limits.items():
        figure = figures[name]
        if figure.high <= limit:
            continue
        if name == MAP or map50_tag(name):
            what = "the mAP drop" if name == MAP else f"the mAP@.5 drop on '{map50_tag(name)}'"
            said.append(
                f"{what} on {figure.n} images: {figure.value:+.2f} [{figure.low:+.2f}, {figure.high:+.2f}] points against {limit}"
            )
            continue
        subject = "the selection split" if name == OVERALL else f"condition '{name}'"
        finer = np.isfinite(figure.smallest_passable) and limit < figure.smallest_passable
        unresolvable = unresolvable or finer
        resolution = (
            f"; the smallest budget {figure.n} images can ever pass is {figure.smallest_passable:.2f}: this split cannot resolve it"
            if finer
            else f", {figure.high - limit:.2f} beyond it"
        )
        said.append(
            f"{subject}'s {figure.n} images: {figure.value:+.2f} [{figure.low:+.2f}, {figure.high:+.2f}] against {limit} "
            f"(one image = {figure.per_image_step:.2f} {judge.unit}{resolution})"
        )
    return "no trial's interval cleared every budget; with all but one op in float: " + "; ".join(said), unresolvable
