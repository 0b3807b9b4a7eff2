"""int8_mixed's search record, read back with typed fields.

The search (mixed.py) writes its record as JSON into the graph node's summary (`mixed_search`);
the reasons, the console and MLflow read it. Its trials are keyed by how many of the order's ops
stayed float ("0" is int8 itself), and the graph built is either the trial the bisection chose or
that mix with its isolated int8 ops joined to the float around them (`fastest`): these readers ask
this module which, rather than each indexing the JSON its own way.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

INT8_ITSELF = 0  # the trial with no op kept in float
JOINED = "isolated int8 ops joined to float"  # the candidate mix that joins isolated int8 ops to float
DROP = "drop"  # a classifier trial's figure (top-1 drop in points); a detector's is "spurious_per_image"


@dataclass(frozen=True)
class Trial:
    """One measured mix on the selection split: its overall figure with the interval, and (where
    the search held them) per condition and the mAP drops."""

    kept: Optional[int]  # how many of the order's first ops stayed float (None: the joined mix)
    figure: str  # "drop" (top-1 points) or "spurious_per_image"
    value: float
    low: float
    high: float
    conditions: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    map_drop: Optional[Dict[str, Any]] = None
    map50_drop_by_condition: Dict[str, Dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def read(cls, kept: Optional[int], figure: str, fields: Dict[str, Any]) -> "Trial":
        return cls(
            kept=kept,
            figure=figure,
            value=fields[figure],
            low=fields["low"],
            high=fields["high"],
            conditions=dict(fields.get("conditions") or {}),
            map_drop=fields.get("map_drop"),
            map50_drop_by_condition=dict(fields.get("map50_drop_by_condition") or {}),
        )


@dataclass(frozen=True)
class SearchRecord:
    figure: str  # the key of every trial's overall figure (the search's judge.key)
    unit: str
    split: str  # the selection split the search judged on
    trials: Dict[int, Trial]
    chosen: Optional[int]  # the trial the bisection chose (None: a record without one, e.g. by count)
    built_joined: bool  # the graph built is the chosen mix with its isolated int8 ops joined to float
    joined: Optional[Trial]  # that joined mix's overall figure, where it was measured

    @classmethod
    def read(cls, record: Dict[str, Any]) -> "SearchRecord":
        figure = record.get("trial_key", DROP)
        joined = record.get("joined")
        return cls(
            figure=figure,
            unit=record.get("unit", ""),
            split=record.get("split", "selection"),
            trials={int(kept): Trial.read(int(kept), figure, fields) for kept, fields in (record.get("trials") or {}).items()},
            chosen=record.get("chosen_trial"),
            built_joined=record.get("fastest") == JOINED,
            joined=Trial(None, figure, joined[figure], *joined["interval"]) if joined else None,
        )

    @property
    def int8_itself(self) -> Optional[Trial]:
        return self.trials.get(INT8_ITSELF)

    @property
    def built(self) -> Optional[Trial]:
        """The figures of the graph that was built: the joined mix where that was kept, else the
        chosen trial."""
        if self.built_joined:
            return self.joined
        return self.trials.get(self.chosen) if self.chosen is not None else None
