"""Which ops lose which images: each quantizable op run alone in the lower precision, judged overall
and per condition on the selection split (never test).

For every op, a graph with only that op quantized runs the selection split. Two figures per
condition: the task's decision metric against the float graph with its interval (quant/judges.py:
the paired top-1 drop for a classifier, spurious boxes per image for a detector) and the mean
|output change| (continuous, so it ranks ops even where one op alone flips no image). The table is
what an engineer reads after "int8 FAILs on dim images" (the ops that cost `dim` most), and the
order the mix search keeps ops in float follows it: the ops that disturb the failing conditions'
images most go first (ranked_for).

The trial graph is made by a callable (`quantized_outputs(ops) -> outputs`), so nothing here assumes
int8: a mix of any precision pair ranks its ops the same way. numpy only (judges.py for intervals).
"""

from typing import Callable, Dict, List, Sequence

import numpy as np

OVERALL = "(all)"  # the row of every image of the split, beside the condition rows
METRICS = ("top1_drop_points", "spurious_per_image")  # a row holds one: its task's (judges.py)
COUNTS = ("images", "lost", "gained", "spurious")


def value(row: Dict) -> float:
    """A row's decision metric, whichever task's it is: larger is worse for both."""
    return next(row[metric] for metric in METRICS if metric in row)


def subsets(images: int, groups: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """{name: image indices}: every image first, then each condition's."""
    return {OVERALL: np.arange(images), **{tag: np.asarray(idx) for tag, idx in groups.items()}}


def table(
    nodes: Sequence[str],
    quantized_outputs: Callable[[List[str]], np.ndarray],
    reference: np.ndarray,
    where: Dict[str, np.ndarray],
    judge,
) -> List[Dict]:
    """One row per (op, subset): the op alone quantized, its figure with interval (judge.figures)
    and its mean |output change| on that subset's images."""
    images = len(reference)
    rows = []
    for op in nodes:
        outputs = quantized_outputs([op])
        change = np.abs(outputs - reference).reshape(images, -1).mean(axis=1)
        figures = judge.figures(outputs, where)
        for name, idx in where.items():
            figure = figures[name]
            rows.append(
                {
                    "op": op,
                    "condition": name,
                    "images": int(len(idx)),
                    judge.metric: round(figure.value, 3),
                    "low": round(figure.low, 3),
                    "high": round(figure.high, 3),
                    **figure.counts,
                    "output_change": round(float(change[idx].mean()) if len(idx) else 0.0, 6),
                }
            )
    return rows


def ranked_on(rows: List[Dict], subset: str) -> List[str]:
    """The ops, most damaging to `subset`'s images first, by what a budget is judged with: the
    upper end of the op's interval (an op that flips many images both ways has a small net drop
    but a wide interval, which fails a budget as surely as a loss does), then its figure, then its
    output change (one op alone rarely flips an image; the continuous change orders the rest)."""
    mine = [row for row in rows if row["condition"] == subset]
    return [row["op"] for row in sorted(mine, key=lambda row: (-worst_end(row), -value(row), -row["output_change"], row["op"]))]


def worst_end(row: Dict) -> float:
    """The upper end of a row's interval (the end a budget is judged by); its figure where it has none."""
    high = row.get("high")
    return float(high) if high is not None and np.isfinite(high) else value(row)


def order(rows: List[Dict], failing: Sequence[str]) -> List[str]:
    """The order ops are kept in float: round-robin over the failing subsets, worst first, each
    contributing its most damaging op not yet taken. With no failing subset, the overall ranking
    alone (the search before conditions were judged)."""
    lists = [ranked_on(rows, subset) for subset in failing] or [ranked_on(rows, OVERALL)]
    taken: List[str] = []
    while len(taken) < len(lists[0]):  # every list ranks every op
        for ranked in lists:
            following = next((op for op in ranked if op not in taken), None)
            if following is not None:
                taken.append(following)
    return taken


def worst_ops(rows: List[Dict], count: int) -> List[str]:
    """The `count` ops with the largest figure (top-1 drop, spurious boxes) on any subset, worst
    first (the heat map's rows)."""
    worst: Dict[str, float] = {}
    for row in rows:
        worst[row["op"]] = max(worst.get(row["op"], float("-inf")), value(row))
    return sorted(worst, key=lambda op: -worst[op])[:count]


def costliest(rows: List[Dict], subset: str, count: int = 3) -> List[Dict]:
    """The `count` ops that cost `subset` most (the console names them when a row FAILs it)."""
    by_op = {row["op"]: row for row in rows if row["condition"] == subset}
    return [by_op[op] for op in ranked_on(rows, subset)[:count]]


def write_csv(rows: List[Dict], path) -> None:
    import csv

    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))  # the task's columns (table())
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path) -> List[Dict]:
    import csv

    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [
        {key: (int(text) if key in COUNTS else text if key in ("op", "condition") else float(text)) for key, text in row.items()}
        for row in rows
    ]
