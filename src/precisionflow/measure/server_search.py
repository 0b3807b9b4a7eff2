"""The Server search, in one room: the largest request rate whose latency percentile stays within
the bound (max_server_rate: verify, widen, bisect, re-verify), the serve stage's search around it
(server_search: batch-1 first, short probes and full-length confirmation, the climb and the
descent), and the repeated searches as one answer (combined_searches). LoadGen runs come in as a
function (`run`), so every rule here is tested on constructed outcomes; measure/serving.py runs them.
"""

import math
from typing import Any, Callable, Dict, List


def max_server_rate(
    valid_at: Callable[[float], bool], start: float, precision: float, max_runs: int = 14, ceiling: float = None
) -> Dict[str, Any]:
    """The largest rate `valid_at` accepts, by search: verify a lower bound (halving from `start`
    until one is valid), double -- never past `ceiling`, the Offline rate no Server rate exceeds --
    until a run fails twice in a row, bisect (geometrically) until the bracket is within
    `precision`, then re-verify the answer -- results are not monotonic in the rate, so a rate that
    fails on re-verification is stepped down. {"rate": highest valid or None, "bracket": [valid,
    failed], "runs": [(rate, valid), ...]}."""
    runs: List[tuple] = []

    def check(rate: float) -> bool:
        runs.append((round(rate, 3), valid_at(rate)))
        return runs[-1][1]

    low = start
    while not (check(low) or check(low)):  # a start that fails once may have met a rare stall: try it again
        low /= 2
        if len(runs) >= max_runs // 2 or low < 1e-3:
            return {"rate": None, "bracket": [None, runs[-1][0]], "runs": runs}
    # Capped at the ceiling, a 0.8x Offline start bisects [0.8x, 1x]: uncapped it doubled to 1.6x, a
    # rate no Server run can hold (on this CPU the cap saved runs, not ratio:
    # benchmarks/results/serving_cpu_ratio/README.md, second comparison).
    cap = ceiling or math.inf
    high = min(low * 2, cap)
    # A failure stops the widening only when it repeats: one transient failure (a warm-up, a hiccup
    # of the host) at a low rate once trapped a search at a tenth of the engine's rate.
    while len(runs) < max_runs and high > low and (check(high) or check(high)):
        low, high = high, min(high * 2, cap)
    while high / low > 1 + precision and len(runs) < max_runs:
        middle = math.sqrt(low * high)
        low, high = (middle, high) if check(middle) else (low, middle)
    verified = check(low)
    while not verified and len(runs) < max_runs + 3:  # re-verification failed: step down
        high, low = low, low / (1 + precision)
        verified = check(low)
    if not verified:  # a rate no run confirmed is no rate (a failed search gives no figure)
        return {"rate": None, "bracket": [None, round(high, 3)], "runs": runs}
    return {"rate": round(low, 3), "bracket": [round(low, 3), round(high, 3)], "runs": runs}


def combined_searches(repeats) -> Dict[str, Any]:
    """The repeated searches as one answer: the median search -- by rate, a search that found none
    counting lowest; with an even count the lower of the two middle ones -- and its whole record
    (curve, runs, rate, bracket, the run at the rate), so every figure of the answer comes from one
    search; `repeats` keeps each search's answer and bracket for the ratio's pairs, `chosen` which
    search it is. No rate when the median search found none (then most searches found none)."""
    ranked = sorted(range(len(repeats)), key=lambda i: (repeats[i]["rate"] is not None, repeats[i]["rate"] or 0.0))
    index = ranked[(len(ranked) - 1) // 2]
    chosen = repeats[index]
    found = {
        **chosen,
        "repeats": [_brief(each) for each in repeats],
        "chosen": f"search {index + 1} of {len(repeats)} (the median by rate)",
    }
    if chosen["rate"] is None:
        missed = sum(each["rate"] is None for each in repeats)
        found["why"] = f"{missed} of {len(repeats)} searches found no valid rate" + (
            f" (search {index + 1}: {chosen['why']})" if chosen.get("why") else ""
        )
    return found


def _brief(searched: Dict[str, Any]) -> Dict[str, Any]:
    """One search's answer, bracket and how many LoadGen runs it took (every run it made: the
    curve holds the full-length confirmations that the short probes' "runs" list does not)."""
    runs = searched.get("curve") or searched.get("runs") or []
    return {"rate": searched["rate"], "bracket": searched["bracket"], "runs": len(runs)}


# what a Server run keeps in the search's curve
CURVE_KEYS = (
    "target_qps",
    "valid",
    "p50_ns",
    "p90_ns",
    "p99_ns",
    "max_ns",
    "overloaded",
    "early_stopping",
    "batches",
    "where_time_went",
)


def server_search(
    run, single: Dict[str, Any], settings: Dict[str, Any], start: float = None, ceiling: float = None
) -> Dict[str, Any]:
    """The largest valid Server rate, or the reason there is none (batch-1 latency over the bound).
    With search_duration_ms shorter than min_duration_ms the start is tried at full length first and
    short runs search only where full-length runs find no rate (`confirm`). `ceiling`: the Offline
    rate, above which no Server rate can lie."""
    bound_ms, percentile = settings["latency_bound_ms"], settings["percentile"]
    # the configured percentile of SingleStream's batch-1 latency, where LoadGen printed it (a
    # level it does not print proves nothing here: the search decides)
    tail_ns = (single.get("percentiles_ns") or {}).get(f"{float(percentile):g}")
    if tail_ns is not None and tail_ns / 1e6 > bound_ms:
        return {
            "rate": None,
            "bracket": [None, None],
            "why": f"no rate meets p{100 * percentile:g} <= {bound_ms:g} ms: batch-1 p{100 * percentile:g} is {tail_ns / 1e6:.2f} ms",
            "batch1_over_bound": True,  # the one case where "no rate" is proven, not merely not found
            "curve": [],
            "at_rate": None,
        }
    curve = []

    probe_ms = settings.get("search_duration_ms") or settings["min_duration_ms"]
    probing = probe_ms < settings["min_duration_ms"]

    def valid_at(rate: float, duration_ms: int = None) -> bool:
        result = run("Server", rate, duration_ms=duration_ms or probe_ms)
        curve.append({key: result.get(key) for key in CURVE_KEYS})
        curve[-1]["duration_ms"] = duration_ms or probe_ms
        curve[-1]["asked_qps"] = rate  # the rate as asked: LoadGen's own record rounds it
        return bool(result["valid"])

    start = start or 0.5 * 1e9 / max(single.get("mean_ns", 1e6), 1.0)  # half of what one stream completes

    def search():
        return max_server_rate(valid_at, start, settings["search_precision"], ceiling=ceiling)

    if probing:
        searched = confirm(
            search, start, ceiling, lambda rate: valid_at(rate, settings["min_duration_ms"]), settings.get("full_length_climb", 0)
        )
    else:
        searched = search()
    # The run that holds the answer, matched by the rate it was asked for (the search rounds it to
    # 3 decimals, the same rounding here): LoadGen's target_qps is rounded in its own way, and below
    # ~500/s a relative tolerance lost the match (215.2146 vs 215.215).
    answer = searched["rate"]
    valid_runs = [point for point in curve if point["valid"] and answer is not None and round(point["asked_qps"], 3) == answer]
    return {**searched, "curve": curve, "at_rate": valid_runs[-1] if valid_runs else None}


def confirm(probe, start: float, ceiling: float, valid_at_full_length, climb_runs: int = 0) -> Dict[str, Any]:
    """The Server rate from full-length runs, the short probes (`probe()`, the search in short runs)
    only where those find none. The start (0.8x Offline, `ceiling` the Offline rate; with no valid
    Offline the probes search first) at full length first: one that holds climbs (`climb`), one
    that fails steps down (`descend`), each in at most `climb_runs` full-length runs; then the
    probes, and their answer at full length. The first that holds is the rate, its bracket's top the
    lowest rate that failed at full length (the Offline rate when nothing above was tried); none
    holding is no rate. Short runs fail on rare stalls that a full-length p99 absorbs, so they never
    run first and never decide a rate by themselves."""

    def answer(searched, rate, top):
        return {
            **searched,
            "confirmed_at_full_length": True,
            "rate": rate and round(rate, 3),
            "bracket": [rate and round(rate, 3), top and round(top, 3)],
        }

    full_length_runs = []

    def at_full_length(rate: float) -> bool:  # each full-length run kept, as the probes keep theirs
        full_length_runs.append((round(rate, 3), valid_at_full_length(rate)))
        return full_length_runs[-1][1]

    failed_above = None
    if start and ceiling:  # without a valid Offline the start is a guess from SingleStream: probe first
        if at_full_length(start):
            return answer({"runs": full_length_runs}, *climb(start, ceiling, at_full_length, climb_runs))
        held, failed_above = descend(start, ceiling, at_full_length, climb_runs)
        if held:
            return answer({"runs": full_length_runs}, held, failed_above)
    searched = probe()
    probed = searched["rate"]
    tops = [top for top in (searched["bracket"][1], failed_above) if top]
    searched = {**searched, "runs": full_length_runs + list(searched.get("runs", []))}
    if probed and at_full_length(probed):
        searched["runs"].append(full_length_runs[-1])
        return answer(searched, probed, min(tops) if tops else None)
    why = "no rate the short probes found held in a full-length run" if probed else searched.get("why")
    return {
        **answer(searched, None, failed_above or searched["bracket"][1]),
        "why": why or "the short probes found no valid rate",
    }


CLIMB_STEP = 0.05  # of the Offline rate: MLPerf's GPU submissions sit at 0.83-0.88x Offline


def climb(rate: float, ceiling: float, valid_at_full_length, runs: int):
    """(the highest rate that held, the lowest that failed or the ceiling), climbing from a confirmed
    `rate` by CLIMB_STEP x ceiling in at most `runs` full-length runs; the first failure stops the
    climb, and the runs left halve the step between the two (a 5% step alone reports 0.85x for an
    engine that holds 0.89x)."""
    for used in range(runs):
        higher = rate + CLIMB_STEP * ceiling
        if higher >= ceiling:
            break
        if not valid_at_full_length(higher):
            return refine(rate, higher, valid_at_full_length, runs - used - 1)
        rate = higher
    return rate, ceiling


def descend(failed: float, ceiling: float, valid_at_full_length, runs: int):
    """(the first rate that held, the lowest that failed), stepping down from a `failed` rate by
    CLIMB_STEP x ceiling in at most `runs` full-length runs, the runs left halving the step above
    the rate that held; (None, the lowest that failed) when none held."""
    for used in range(runs):
        lower = failed - CLIMB_STEP * ceiling
        if lower <= 0:
            break
        if valid_at_full_length(lower):
            return refine(lower, failed, valid_at_full_length, runs - used - 1)
        failed = lower
    return None, failed


def refine(held: float, failed: float, valid_at_full_length, runs: int):
    """(held, failed) narrowed by bisection in at most `runs` full-length runs: each run at the middle
    moves whichever end its outcome says."""
    for _ in range(runs):
        middle = (held + failed) / 2
        if valid_at_full_length(middle):
            held = middle
        else:
            failed = middle
    return held, failed
