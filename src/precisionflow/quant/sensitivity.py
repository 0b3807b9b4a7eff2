"""Which ops lose which images: each quantizable op run alone in the lower precision, judged overall
and per condition on the selection split (never test).

For every op, a graph with only that op quantized runs the selection split. Two figures per
condition: the decision metric -- the top-1 drop against the float graph, paired on the same
images, with its interval -- and the mean |output change| (continuous, so it ranks ops even where
one op alone flips no image). The table is what an engineer reads after "int8 FAILs on dim images"
(the ops that cost `dim` most), and the order the mix search keeps ops in float follows it: the
ops that disturb the failing conditions' images most go first (ranked_for).

The trial graph is made by a callable (`quantized_outputs(ops) -> outputs`), so nothing here assumes
int8: a mix of any precision pair ranks its ops the same way. numpy only (stats.py for intervals).
"""

from typing import Callable, Dict, List, Sequence

import numpy as np

from precisionflow import stats

OVERALL = "(all)"  # the row of every image of the split, beside the condition rows
FIELDS = ("op", "condition", "images", "top1_drop_points", "low", "high", "lost", "gained", "output_change")


def subsets(labels: np.ndarray, groups: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """{name: image indices}: every image first, then each condition's."""
    return {OVERALL: np.arange(len(labels)), **{tag: np.asarray(idx) for tag, idx in groups.items()}}


def drops_on(
    reference_right: np.ndarray, engine_right: np.ndarray, where: Dict[str, np.ndarray], confidence: float
) -> Dict[str, stats.PairedDrop]:
    """{subset: paired top-1 drop of the engine against the reference on that subset's images}."""
    return {name: stats.paired_drop(reference_right[idx], engine_right[idx], confidence) for name, idx in where.items()}


def table(
    nodes: Sequence[str],
    quantized_outputs: Callable[[List[str]], np.ndarray],
    reference: np.ndarray,
    labels: np.ndarray,
    where: Dict[str, np.ndarray],
    confidence: float,
) -> List[Dict]:
    """One row per (op, subset): the op alone quantized, its top-1 drop with interval and its mean
    |output change| on that subset's images."""
    reference_right = reference.argmax(1) == labels
    rows = []
    for op in nodes:
        outputs = quantized_outputs([op])
        change = np.abs(outputs - reference).reshape(len(labels), -1).mean(axis=1)
        drops = drops_on(reference_right, outputs.argmax(1) == labels, where, confidence)
        for name, idx in where.items():
            drop = drops[name]
            rows.append(
                {
                    "op": op,
                    "condition": name,
                    "images": int(len(idx)),
                    "top1_drop_points": round(drop.drop, 3),
                    "low": round(drop.low, 3),
                    "high": round(drop.high, 3),
                    "lost": drop.b,
                    "gained": drop.c,
                    "output_change": round(float(change[idx].mean()) if len(idx) else 0.0, 6),
                }
            )
    return rows


def ranked_on(rows: List[Dict], subset: str) -> List[str]:
    """The ops, most damaging to `subset`'s images first: by top-1 drop, then by output change
    (one op alone rarely flips an image; the continuous change orders the rest)."""
    mine = [row for row in rows if row["condition"] == subset]
    return [row["op"] for row in sorted(mine, key=lambda row: (-row["top1_drop_points"], -row["output_change"], row["op"]))]


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
    """The `count` ops with the largest top-1 drop on any subset, worst first (the heat map's rows)."""
    worst: Dict[str, float] = {}
    for row in rows:
        worst[row["op"]] = max(worst.get(row["op"], float("-inf")), row["top1_drop_points"])
    return sorted(worst, key=lambda op: -worst[op])[:count]


def costliest(rows: List[Dict], subset: str, count: int = 3) -> List[Dict]:
    """The `count` ops that cost `subset` most (the console names them when a row FAILs it)."""
    by_op = {row["op"]: row for row in rows if row["condition"] == subset}
    return [by_op[op] for op in ranked_on(rows, subset)[:count]]


def write_csv(rows: List[Dict], path) -> None:
    import csv

    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path) -> List[Dict]:
    import csv

    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    numbers = ("images", "lost", "gained")
    return [
        {
            key: (int(value) if key in numbers else value if key in ("op", "condition") else float(value))
            for key, value in row.items()
        }
        for row in rows
    ]
