"""Verdict rules: numbers in, PASS / FAIL / UNDECIDED out, each with the sentence that says why.

The one home of every rule that judges an engine: accuracy drops, agreements, per-class drops
(with a multiplicity correction), spurious boxes, speed ratios, and the choice of a "fastest"
engine. Nothing here reads a node folder or formats a table: budget.py gathers the numbers,
report.py and the CLI print them. numpy and the standard library only (`precisionflow check` and
the planner import it); scipy only for the speed interval's t quantile.

Every verdict reads an interval, never a bare estimate:
  PASS      the whole interval is within the budget,
  FAIL      the whole interval is beyond it,
  UNDECIDED the interval straddles it -- this sample cannot tell -- or there is no interval at all
            (one speed round, a missing per-image series, a search with no valid rate).
An engine with no budget set reads "no budget", not PASS.

The method per check:
  top-1 drop (overall, per class, per condition)  Newcombe's paired interval with continuity
      correction from the discordant images; groups: Holm-corrected one-sided p-values for FAIL
  agreement shares                                 Wilson score interval
  counts per image (spurious boxes)                stats.COUNT_METHOD; groups: Bonferroni for FAIL
  mAP drop (overall, per condition's mAP@.5)       MAP_METHOD
  speed ratios                                     SPEED_METHOD
  Server rate ratios                               SERVER_METHOD

Minimum evidence per check (below it, or with a zero-width interval from a handful of identical
rounds or searches, the verdict is UNDECIDED and says why -- a zero-width interval from a few
samples is no evidence of no variance): MIN_RESAMPLES bootstrap resamples for a mAP drop, MIN_ROUNDS rounds for a
speed ratio, MIN_SEARCHES paired searches for a Server ratio, one test image for a share. Missing
or malformed inputs (None, NaN, a record without its rounds) are UNDECIDED with the reason, never
an exception: the exit code of `precisionflow check` gates releases.
"""

import math
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from precisionflow import stats

PASS, FAIL, UNDECIDED = stats.PASS, stats.FAIL, stats.UNDECIDED
SPEED_METHOD = (
    "geometric mean of the per-round ratios (rounds alternate the sides), Student t interval of their mean log, exponentiated"
)
SERVER_METHOD = "geometric mean of paired Server searches' ratios (sides in alternating order), Student t interval of their mean log, exponentiated"
MIN_RESAMPLES = 1000  # a percentile interval's tails need ~1,000 resamples (Efron & Tibshirani)
MIN_ROUNDS = 2  # a t interval needs two rounds; with two it is wide (t = 12.7 at 95%), as it should be
MIN_SEARCHES = 2  # paired Server searches per side


def finite(*values: Any) -> bool:
    """True when every value is a real, finite number (not None, not NaN, not a string)."""
    try:
        return all(isinstance(value, (int, float, np.number)) and math.isfinite(float(value)) for value in values)
    except (TypeError, ValueError):
        return False


def no_limit(limit: Any, subject: str) -> Optional[Dict[str, str]]:
    """UNDECIDED when a budget's limit is no finite number (None, NaN, a string): every check asks
    this first, so none can raise on it."""
    return (
        None if finite(limit) else judged(UNDECIDED, f"{subject}: the budget's limit {limit!r} is no finite number; set a number")
    )


def usable_rounds(rounds: Any) -> tuple:
    """(the positive finite values of `rounds`, how many were dropped): a non-finite, zero or
    negative round is no measurement, and is counted where the figure is shown."""
    values = list(rounds) if isinstance(rounds, (list, tuple, np.ndarray)) else []
    usable = stats.positive_finite([r for r in values if finite(r)])  # finite(): strings and None are no numbers
    return usable, len(values) - len(usable)


def degenerate(low: float, high: float) -> bool:
    """A zero-width interval, to a float's precision: identical samples (or samples a rounding
    apart), not a measured absence of variance."""
    return not high - low > 1e-9 * max(abs(high), abs(low), 1e-300)


def judged(verdict: str, text: str) -> Dict[str, str]:
    return {"verdict": verdict, "text": text}


NO_BUDGET = "no budget"
NOT_APPLIED = "not applied"  # a budget key set for a row it cannot judge (min_qat_agreement on a row with no QAT model)
REFERENCE = "reference"  # the fp32 engine the others are judged against: nothing of its own to judge


def overall(found: List[Dict[str, str]]) -> str:
    """An engine's verdict from its checks: any FAIL fails it, else any UNDECIDED leaves it
    undecided; with no check at all (no budget set), or only budgets that do not apply to it
    (NOT_APPLIED, each named in its check), it is "no budget", never PASS."""
    applied = [entry for entry in found if entry["verdict"] != NOT_APPLIED]
    if not applied:
        return NO_BUDGET
    verdicts_found = {entry["verdict"] for entry in applied}
    return FAIL if FAIL in verdicts_found else UNDECIDED if UNDECIDED in verdicts_found else PASS


def not_applied(key: str, why: str) -> Dict[str, str]:
    """A budget key that cannot judge this row, named so that it does not vanish in silence."""
    return judged(NOT_APPLIED, f"{key} not applied: {why}")


def cannot_tell(n: int, what: str, one_unit: str, needed: Optional[int]) -> str:
    """The UNDECIDED sentence: what this many images cannot tell, and how many would."""
    decide = (
        f"about {needed} images would decide" if needed else "no number of images decides an estimate that sits on its budget"
    )
    return f"{n} test images cannot tell: one image = {one_unit}; {what}; {decide}"


# ---- accuracy -------------------------------------------------------------------------------


def drop_check(drop: stats.PairedDrop, limit: float, subject: str) -> Dict[str, str]:
    """A top-1 drop (points, paired against the reference) that may be at most `limit`."""
    refused = no_limit(limit, subject)
    if refused:
        return refused
    if not isinstance(drop, stats.PairedDrop):
        return judged(UNDECIDED, f"{subject}: no paired drop measured ({drop!r}), so no interval (max {limit})")
    if not drop.n or not finite(drop.drop, drop.low, drop.high):
        return judged(UNDECIDED, f"{subject}: no paired test images ({drop.n}), so no interval (max {limit})")
    verdict = stats.verdict_at_most(drop.low, drop.high, limit)
    text = (
        f"{subject} {drop.drop:+.2f} points [{drop.low:+.2f}, {drop.high:+.2f}] ({100 * drop.confidence:g}% interval; "
        f"{drop.b} image(s) lost, {drop.c} gained; max {limit})"
    )
    if verdict == UNDECIDED:
        text += "; " + cannot_tell(
            drop.n,
            f"the drop's interval straddles the budget {limit}",
            f"{drop.per_image_step:.2f} points",
            stats.images_to_decide_drop(drop, limit),
        )
    return judged(verdict, text)


def share_check(successes: int, n: int, limit: float, confidence: float, subject: str) -> Dict[str, str]:
    """A share of the test images (agreement) that must be at least `limit`; UNDECIDED with no image."""
    refused = no_limit(limit, subject)
    if refused:
        return refused
    if not finite(successes, n) or n <= 0:
        return judged(UNDECIDED, f"{subject}: no test images to count ({successes} of {n}), so no interval (min {limit})")
    if not 0 <= successes <= n:
        return judged(UNDECIDED, f"{subject}: {successes} of {n} is no share (expected 0 to {n}); the count is broken")
    low, high = stats.wilson(successes, n, confidence)
    verdict = stats.verdict_at_least(low, high, limit)
    text = f"{subject} {successes / n:.4f} [{low:.4f}, {high:.4f}] ({n - successes} of {n} differ; min {limit})"
    if verdict == UNDECIDED:
        text += "; " + cannot_tell(
            n,
            f"the interval straddles the minimum {limit}",
            f"{1 / n:.4f} of agreement",
            stats.images_to_decide_share(successes, n, limit, confidence),
        )
    return judged(verdict, text)


def mean_check(per_image: Sequence[float], estimate: float, limit: float, confidence: float, subject: str) -> Dict[str, str]:
    """A per-image mean of counts (spurious boxes per image) that may be at most `limit`, judged by
    stats.count_interval; UNDECIDED without a per-image series (an estimate alone is no interval)."""
    refused = no_limit(limit, subject)
    if refused:
        return refused
    series = list(per_image) if isinstance(per_image, (list, tuple, np.ndarray)) else []
    shown = f"{estimate:.3f}" if finite(estimate) else str(estimate)
    if not finite(*series):
        why = "its per-image series holds a missing or non-finite value"
        return judged(UNDECIDED, f"{subject} {shown} (max {limit}): {why}, so no interval; rerun its evaluation")
    if series and (not finite(estimate) or abs(estimate - float(np.mean(series))) > 1e-6 * max(1.0, abs(float(np.mean(series))))):
        why = f"the estimate is not its per-image series' mean ({float(np.mean(series)):.3f})"
        return judged(
            UNDECIDED, f"{subject} {shown} (max {limit}): {why}, so the record contradicts itself; rerun its evaluation"
        )
    bounds = stats.count_interval(series, confidence)
    if bounds is None:
        why = "no per-image series" if not series else f"{len(series)} identical values bound nothing"
        return judged(UNDECIDED, f"{subject} {shown} (max {limit}): {why}, so no interval; rerun its evaluation")
    per_image = series
    low, high = bounds
    verdict = stats.verdict_at_most(low, high, limit)
    text = f"{subject} {estimate:.3f} [{low:.3f}, {high:.3f}] ({stats.COUNT_METHOD}; max {limit})"
    if verdict == UNDECIDED:
        text += f"; {len(per_image)} test images cannot tell: the interval straddles the budget {limit}"
    return judged(verdict, text)


MAP_METHOD = "bootstrap over images, paired (the same images for both engines), pycocotools' matches re-weighted"


def map_drop_check(drop: float, resampled: Sequence[float], limit: float, confidence: float, subject: str) -> Dict[str, str]:
    """A mAP drop in points (fp32 minus the engine, pycocotools' estimate) that may be at most
    `limit`, judged by the percentile interval of its paired bootstrap resamples; UNDECIDED
    without them (an estimate alone is no interval)."""
    refused = no_limit(limit, subject)
    if refused:
        return refused
    resampled = list(resampled) if isinstance(resampled, (list, tuple, np.ndarray)) else []
    shown = f"{drop:+.2f}" if finite(drop) else str(drop)
    if not finite(drop, *resampled):
        return judged(
            UNDECIDED, f"{subject} {shown} points below fp32 (max {limit}): a missing or non-finite drop, so no interval"
        )
    if len(resampled) < MIN_RESAMPLES:
        return judged(
            UNDECIDED,
            f"{subject} {shown} points below fp32 (max {limit}): {len(resampled)} resampled drops, fewer than the "
            f"{MIN_RESAMPLES} a percentile interval needs ({MAP_METHOD})",
        )
    # (a zero-width interval from 1,000 paired resamples is evidence: both engines boxed alike)
    low, high = stats.percentile_interval(resampled, confidence)
    verdict = stats.verdict_at_most(low, high, limit)
    text = f"{subject} {drop:+.2f} points below fp32 [{low:+.2f}, {high:+.2f}] ({MAP_METHOD}, {len(resampled)} resamples; max {limit})"
    if verdict == UNDECIDED:
        text += "; the test images cannot tell: the interval straddles the budget"
    return judged(verdict, text)


# ---- many groups at once (classes, conditions) ----------------------------------------------


def holm(p_values: Sequence[float]) -> List[float]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1), in the input order."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    adjusted = np.empty_like(p)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[index]))
        adjusted[index] = running
    return adjusted.tolist()


def p_above(drop: stats.PairedDrop, limit: float) -> float:
    """One-sided p-value of "the drop is at most `limit`" against "it is larger", by inverting the
    paired interval: one minus the one-sided level at which the interval's lower end reaches
    `limit` (0.5 or more when the estimate itself is within the budget)."""
    if drop.n == 0 or drop.drop <= limit:
        return 1.0 if drop.n == 0 else 0.5
    counts = (drop.both, drop.b, drop.c, drop.neither)
    low_level, high_level = 0.5, 1 - 1e-12  # the lower bound falls as the level rises: bisect
    for _ in range(60):
        middle = (low_level + high_level) / 2
        lower = 100 * stats.newcombe_interval(*counts, 2 * middle - 1)[0]
        low_level, high_level = (middle, high_level) if lower > limit else (low_level, middle)
    return 1.0 - low_level


def group_drop_checks(
    drops: Dict[str, stats.PairedDrop], limit: float, confidence: float, kind: str, kinds: str
) -> List[Dict[str, str]]:
    """One budget over many groups (classes, conditions): the groups that break it, else the worst.

    PASS needs every group's interval within the budget: an intersection-union test, so no
    correction is needed for it. FAIL claims that at least one group breaks it, and with many
    groups that claim gets many chances: a group FAILs only when its one-sided p-value, Holm-adjusted
    across the groups, is below the level its interval uses. A group neither PASSing nor FAILing
    leaves the budget UNDECIDED."""
    if not drops:
        return []
    names = list(drops)
    alpha = (1 - confidence) / 2  # the one-sided level of a two-sided `confidence` interval
    if not finite(limit):
        return [no_limit(limit, f"{kind} top-1 drop")]
    measured = {name: isinstance(drops[name], stats.PairedDrop) for name in names}
    p_values = [p_above(drops[name], limit) if measured[name] else 1.0 for name in names]
    adjusted = dict(zip(names, holm(p_values), strict=True))
    correction = f"Holm-corrected across {len(names)} {kinds}"
    entries = {}
    for name in names:
        entry = drop_check(drops[name], limit, f"{kind} '{name}' top-1 drop")
        if entry["verdict"] == FAIL and adjusted[name] >= alpha:
            entry = judged(
                UNDECIDED, entry["text"] + f"; beyond the budget alone, not after the {correction} (p {adjusted[name]:.3f})"
            )
        elif entry["verdict"] == FAIL:
            entry = judged(FAIL, entry["text"] + f"; {correction}: p {adjusted[name]:.4f}")
        entries[name] = entry
    failing = [entries[name] for name in names if entries[name]["verdict"] == FAIL]
    if failing:
        return failing
    undecided = [name for name in names if entries[name]["verdict"] == UNDECIDED]
    if undecided:  # the first group that cannot tell (not all of them)
        return [entries[max(undecided, key=lambda name: drops[name].high if measured[name] else math.inf)]]
    worst = max(names, key=lambda name: drops[name].high)
    return [judged(PASS, entries[worst]["text"] + f"; the worst of {len(names)} {kinds}")]


def _mean_or_none(per_image: Any) -> Optional[float]:
    series = list(per_image) if isinstance(per_image, (list, tuple, np.ndarray)) else []
    return float(np.mean(series)) if series and finite(*series) else None


def group_mean_checks(
    values: Dict[str, Sequence[float]], limit: float, confidence: float, subject: str, kinds: str
) -> List[Dict[str, str]]:
    """One budget on a per-image mean (spurious boxes per image) over many groups, judged by
    bonferroni_groups (count intervals)."""
    checks = {
        name: mean_check(per_image, _mean_or_none(per_image), limit, confidence, f"{subject} on '{name}'")
        for name, per_image in values.items()
    }
    strict = 1 - (1 - confidence) / max(len(values), 1)

    def beyond_at_strict(name: str) -> bool:
        return (stats.count_interval(values[name], strict) or (limit, limit))[0] > limit

    def estimate(name: str) -> float:
        return float(np.mean(values[name])) if len(values[name]) else 0.0

    return bonferroni_groups(checks, beyond_at_strict, estimate, strict, kinds)


def group_resampled_checks(
    groups: Dict[str, tuple], limit: float, confidence: float, subject: str, kinds: str
) -> List[Dict[str, str]]:
    """One budget on a bootstrapped drop (a detector's mAP@.5 per condition) over many groups,
    `groups` {name: (estimate in points, its paired resamples)}, judged by bonferroni_groups
    (percentile intervals of the resamples)."""
    groups = {name: group if isinstance(group, tuple) and len(group) == 2 else (None, None) for name, group in groups.items()}
    checks = {
        name: map_drop_check(estimate, resampled, limit, confidence, f"{subject} on '{name}'")
        for name, (estimate, resampled) in groups.items()
    }
    strict = 1 - (1 - confidence) / max(len(groups), 1)
    return bonferroni_groups(
        checks,
        lambda name: stats.percentile_interval(groups[name][1], strict)[0] > limit,
        lambda name: groups[name][0],
        strict,
        kinds,
    )


def bonferroni_groups(checks: Dict[str, Dict[str, str]], beyond_at_strict, estimate, strict: float, kinds: str):
    """One budget over many groups from each group's own check: PASS needs every group's interval
    within it (no correction needed); a group FAILs only when its interval at the Bonferroni level
    (`strict` = 1 - (1 - confidence) / groups) is beyond it too (`beyond_at_strict(name)`) -- a
    bootstrap has no p-value to step down with, so this is the plainer of the two corrections.
    Returns the failing checks, else the first undecided one, else the worst group's PASS."""
    if not checks:
        return []
    entries = {}
    for name, entry in checks.items():
        if entry["verdict"] == FAIL:
            held = beyond_at_strict(name)
            level = f"the Bonferroni level over {len(checks)} {kinds}"
            entry = judged(
                FAIL if held else UNDECIDED,
                entry["text"] + (f"; beyond it at {level} ({100 * strict:.2f}%)" if held else f"; not beyond it at {level}"),
            )
        entries[name] = entry
    failing = [entry for entry in entries.values() if entry["verdict"] == FAIL]
    if failing:
        return failing
    undecided = [entry for entry in entries.values() if entry["verdict"] == UNDECIDED]
    if undecided:
        return undecided[:1]
    worst = max(checks, key=estimate)
    return [judged(PASS, entries[worst]["text"] + f"; the worst of {len(checks)} {kinds}")]


def worst_group(drops: Dict[str, stats.PairedDrop]) -> Optional[tuple]:
    """(name, drop in points) of the group nearest to breaking a drop budget -- judged as the budget
    judges, by the upper end of its interval (then by its estimate): a condition whose flips went
    both ways can have a small estimate and still be the one a max_condition_drop fails; None
    without groups."""
    if not drops:
        return None
    name = max(drops, key=lambda key: (drops[key].high, drops[key].drop))
    return name, round(drops[name].drop, 2)


# ---- speed ----------------------------------------------------------------------------------


def speed_interval(rounds: Optional[Sequence[float]], confidence: float) -> Optional[tuple]:
    """(low, high) of a speed ratio from its per-round ratios (a t interval on their logarithms:
    stats.ratio_interval), or None with fewer than MIN_ROUNDS positive finite rounds or when the
    rounds are identical to a float's precision (a zero-width interval is no evidence of no variance)."""
    usable, _ = usable_rounds(rounds)
    if len(usable) < MIN_ROUNDS:
        return None
    bounds = stats.ratio_interval(usable, confidence)
    return None if bounds is None or degenerate(*bounds) else bounds


def _no_interval_reason(rounds: Optional[Sequence[float]]) -> str:
    usable, dropped = usable_rounds(rounds)
    if len(usable) < MIN_ROUNDS:
        also = f" ({dropped} non-finite or non-positive dropped)" if dropped else ""
        return f"{len(usable)} usable round(s){also}, fewer than the {MIN_ROUNDS} an interval needs"
    return f"{len(usable)} identical rounds: a zero-width interval is no evidence of no variance"


def speed_check(
    ratio: Optional[Dict[str, Any]], limit: float, at: str, confidence: float, timed: bool
) -> Optional[Dict[str, str]]:
    """A speed-up over fp32 (side by side) that must be at least `limit`; None for an untimed row
    (a simulation has no speed to judge, which is not a failure). Method: SPEED_METHOD, at least
    MIN_ROUNDS usable rounds (non-finite ones dropped and counted) with some spread. The figure is
    the usable rounds' geometric mean, whatever the record says -- the estimate the interval is of;
    outlying rounds are named beside it (none is dropped). Where the rounds' median lies outside
    that interval, the rounds are bimodal or hold outliers (a noisy timing) and the check is
    UNDECIDED, never faster (stats.unsound_ratio)."""
    if not timed:
        return None
    subject = f"speed-up over fp32 at {at}"
    refused = no_limit(limit, subject)
    if refused:
        return refused
    if not ratio:
        return judged(UNDECIDED, f"no side-by-side speed-up at {at} measured yet (min {limit}x): run its compare_speed job")
    rounds = ratio.get("rounds") if isinstance(ratio, dict) else None
    usable, dropped = usable_rounds(rounds)
    estimate = stats.geometric_mean(usable)
    shown = f"{estimate:.2f}x" if estimate is not None else "(no usable round recorded)"
    bounds = speed_interval(rounds, confidence)
    if bounds is None:
        why = _no_interval_reason(rounds)
        return judged(
            UNDECIDED, f"{subject} {shown}: {why}, so no interval (min {limit}x); time more rounds (evaluate.ratio_rounds)"
        )
    low, high = bounds
    counted = f"{len(usable)} alternating rounds" + (f", {dropped} non-finite dropped" if dropped else "")
    outlying = stats.outlying_rounds(usable)
    if outlying:
        counted += f"; outlying: {', '.join(f'{usable[i]:.2f}' for i in outlying)}"
    unsound = stats.unsound_ratio(usable, low, high)
    if unsound:
        return judged(
            UNDECIDED,
            f"{subject} {estimate:.2f}x: {unsound} ({counted}: {', '.join(f'{r:.2f}' for r in usable)}), a noisy timing "
            f"(min {limit}x); time again on a quieter machine",
        )
    verdict = stats.verdict_at_least(low, high, limit)
    d = stats.interval_digits(low, high)
    text = (
        f"{subject} {estimate:.{d}f}x [{low:.{d}f}, {high:.{d}f}] ({100 * confidence:g}% interval over {counted}; min {limit}x)"
    )
    if verdict == UNDECIDED:
        text += "; the rounds cannot tell: time more rounds (evaluate.ratio_rounds) or on a quieter machine"
    return judged(verdict, text)


def fastest(candidates: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Which engine is fastest, judged with the intervals.

    `candidates`: {"name", "geomean", "low", "high"} per engine; one without an interval (low or
    high None: one round, identical rounds) cannot be named fastest and is left out. Returns
    {"winner": candidate} when its lower end is above every other's upper end, else {"tied": [the
    candidates whose interval reaches the best one's lower end]}, best first."""
    measured = [c for c in candidates if finite(c.get("geomean"), c.get("low"), c.get("high")) and c["high"] > c["low"]]
    ranked = sorted(measured, key=lambda c: c["geomean"], reverse=True)
    if not ranked:
        return {"tied": []}
    best = ranked[0]
    tied = [c for c in ranked[1:] if c["high"] >= best["low"]]
    return {"winner": best} if not tied else {"tied": [best] + tied}


WIDE_SERVER_RATIO = 2.0  # an interval whose ends differ more than twofold: the pairs disagree


def server_ratio_at(ratio: Optional[Dict[str, Any]], confidence: float) -> Optional[Dict[str, Any]]:
    """A serve node's Server ratio (its per-pair ratios and their geometric mean) with the interval at
    `confidence` (evaluate.confidence), computed here where every other check's is -- never in the
    measuring node. Fewer than MIN_SEARCHES pairs or identical pairs: no interval, `why` says so; an
    interval wider than WIDE_SERVER_RATIO x says that the pairs disagree and shows them."""
    if not isinstance(ratio, dict) or not ratio:
        return None
    pairs, _ = usable_rounds(ratio.get("per_pair"))
    found = {key: value for key, value in ratio.items() if key not in ("low", "high", "why")}
    found["pairs"], found["confidence"] = len(pairs), confidence
    if pairs:  # the figure is the pairs' geometric mean (what the interval bounds), whatever the record says
        found["geomean"] = round(stats.geometric_mean(pairs), 3)
    bounds = speed_interval(pairs, confidence)
    if bounds is None:
        why = (
            f"{len(pairs)} paired search(es), fewer than the {MIN_SEARCHES} an interval needs"
            if len(pairs) < MIN_SEARCHES
            else f"{len(pairs)} paired searches gave the same ratio: a zero-width interval is no evidence of no noise"
        )
        return {**found, "low": None, "high": None, "why": why}
    low, high = round(bounds[0], 3), round(bounds[1], 3)
    unsound = stats.unsound_ratio(pairs, low, high, of="pairs")
    if unsound:
        found["why"] = unsound
    elif high > WIDE_SERVER_RATIO * low:
        shown = ", ".join(f"{r:.2f}" for r in pairs)
        found["why"] = f"the {len(pairs)} paired searches disagree ({shown}): too few or too noisy to inform"
    return {**found, "low": low, "high": high}


def malformed_serve_record(served: Dict[str, Any]) -> str:
    """What in a serve node's metrics.json is not the shape the check reads (a truncated or hand-edited
    file), or "": each part the check opens must be a mapping where present."""
    parts = {"settings": served.get("settings"), "results": served.get("results")}
    results = served.get("results") if isinstance(served.get("results"), dict) else {}
    for side in ("engine", "fp32"):
        parts[f"results.{side}"] = results.get(side)
        if isinstance(results.get(side), dict):
            parts[f"results.{side}.Server"] = results[side].get("Server")
    parts["server_ratio"] = served.get("server_ratio")
    for name, value in parts.items():
        if value is not None and not isinstance(value, dict):
            return f"{name} is {type(value).__name__} {str(value)[:40]!r}, not a mapping"
    return ""


def server_check(served: Optional[Dict[str, Any]], limit: float, timed: bool, confidence: float) -> Optional[Dict[str, str]]:
    """The largest valid Server rate over the fp32 engine's under the same bound, which must be at
    least `limit`: judged by SERVER_METHOD over at least MIN_SEARCHES paired searches, at
    `confidence`. A side with no valid rate is UNDECIDED (a search that found none may have met a
    stall), unless its batch-1 latency alone exceeds the bound: then no rate can hold, a FAIL that
    says so. An interval whose pairs disagree (server_ratio_at) is UNDECIDED. None for an untimed row."""
    if not timed:
        return None
    refused = no_limit(limit, "Server rate over the fp32 engine's")
    if refused:
        return refused
    if not isinstance(served, dict) or not served:
        return judged(
            UNDECIDED, f"no serving run measured yet (min {limit}x the fp32 engine's Server rate): run its serve_engine job"
        )
    malformed = malformed_serve_record(served)
    if malformed:
        return judged(UNDECIDED, f"the serve record is malformed ({malformed}): rerun its serve_engine job")
    bound = (served.get("settings") or {}).get("latency_bound_ms")
    within = f"p99 <= {bound:g} ms" if finite(bound) else "the latency bound"
    results = served.get("results") or {}
    engine = (results.get("engine") or {}).get("Server") or {}
    if engine.get("rate") is not None and not finite(engine["rate"]):
        return judged(UNDECIDED, f"the engine's Server rate {engine['rate']!r} is no finite number: rerun its serve_engine job")
    if engine.get("rate") is None:
        why = engine.get("why") or f"no Server rate met {within} at any rate tried"
        if engine.get("batch1_over_bound"):
            return judged(FAIL, f"{why}: batch-1 latency alone exceeds the bound, so no rate can meet it")
        return judged(UNDECIDED, f"{why}; one search's miss is no proof that no rate holds: rerun its serve_engine job")
    fp32 = (results.get("fp32") or {}).get("Server") or {}
    ratio = server_ratio_at(served.get("server_ratio"), confidence)
    if ratio is None:
        why = fp32.get("why") if fp32 else "no fp32 side was served"
        return judged(UNDECIDED, f"the fp32 engine has no valid Server rate within {within} to compare with ({why})")
    if not finite(ratio.get("geomean"), ratio.get("low"), ratio.get("high")):
        searches = ratio.get("pairs")
        figure = f"{ratio['geomean']:.2f}x fp32's" if finite(ratio.get("geomean")) else "no finite ratio to fp32's"
        return judged(
            UNDECIDED,
            f"Server rate {engine['rate']:g}/s within {within}, {figure}: "
            f"{ratio.get('why') or f'no interval ({searches} paired searches; {MIN_SEARCHES} with some spread needed)'} "
            f"(min {limit}x); raise evaluate.serving.search_repeats",
        )
    pairs = ratio.get("pairs")
    if ratio.get("why"):  # an interval, but the pairs disagree: no verdict rests on it
        return judged(
            UNDECIDED,
            f"Server rate {engine['rate']:g}/s within {within}, {ratio['geomean']:.2f}x fp32's "
            f"[{ratio['low']:.2f}, {ratio['high']:.2f}]: {ratio['why']} (min {limit}x); raise evaluate.serving.search_repeats",
        )
    verdict = stats.verdict_at_least(ratio["low"], ratio["high"], limit)
    return judged(
        verdict,
        f"Server rate within {within} {engine['rate']:g}/s, {ratio['geomean']:.2f}x fp32's "
        f"[{ratio['low']:.2f}, {ratio['high']:.2f}] ({SERVER_METHOD}, {pairs} pairs; min {limit}x)",
    )
