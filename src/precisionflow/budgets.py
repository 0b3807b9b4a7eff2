"""Release budgets: their keys (BudgetConf, a section of the configuration schema) and the merge
every reader applies -- evaluate.budget, with evaluate.budgets.<precision>'s set keys on top.

Small and on its own so that what reads a budget imports only this: the report and the verdicts
(reporting/budget.py), and int8_mixed, whose search holds the per-condition budgets while it chooses
its graph -- so those are in its graph's id, and an edit here reruns exactly those nodes.
"""

from dataclasses import dataclass, field, fields
from typing import Any, Dict, Optional


@dataclass
class BudgetConf:
    """What an engine may cost against the fp32 engine of its model and target; null = not checked.
    Thresholds, not parameters: they never enter a node id (precisionflow check re-reads results) --
    except the per-condition ones for int8_mixed, whose search holds them while choosing its graph."""

    max_top1_drop: Optional[float] = None  # top-1 points (0-100 scale) below fp32
    min_agreement: Optional[float] = None  # share of test samples predicted as fp32 predicts them
    max_class_drop: Optional[float] = None  # the worst single class's top-1 drop, in points
    min_qat_agreement: Optional[float] = None  # int8_qat: agreement with the QAT model itself
    min_speedup: Optional[float] = None  # throughput over the fp32 engine, measured side by side
    min_server_speedup: Optional[float] = None  # largest valid Server rate over the fp32 engine's, same bound
    speedup_at: str = "bmax"  # b1 | bmax | streams: which setting min_speedup reads
    max_map_drop: Optional[float] = None  # detection: mAP@[.5:.95] points (0-100 scale) below fp32
    max_spurious_per_image: Optional[float] = None  # detection: boxes matching neither truth nor fp32, per image
    # Per condition (images tagged by the data set, datasets/conditions.py), each condition judged on its
    # own images with a multiplicity correction across conditions:
    # the task's accuracy on any condition: top-1 points below fp32; a detector's mAP@.5 points (its images alone)
    max_condition_drop: Optional[float] = None
    max_condition_spurious_per_image: Optional[float] = None  # detection: spurious boxes per image on any condition
    # A limit for one named condition (the task's figure above): e.g. {shadow_long: 0.2}.
    condition_limits: Dict[str, float] = field(default_factory=dict)


BUDGET_KEYS = tuple(each.name for each in fields(BudgetConf))


def budget_for(evaluate: Dict[str, Any], precision: str) -> Dict[str, Any]:
    """evaluate.budget with evaluate.budgets.<precision>'s set keys on top."""
    merged = {key: (evaluate.get("budget") or {}).get(key) for key in BUDGET_KEYS}
    merged.update((evaluate.get("budgets") or {}).get(precision) or {})
    merged["speedup_at"] = merged["speedup_at"] or "bmax"
    merged["confidence"] = evaluate["confidence"]  # the schema gives every configuration one
    merged["accept_undecided"] = evaluate["accept_undecided"]
    return merged
