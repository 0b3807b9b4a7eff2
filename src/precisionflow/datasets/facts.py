"""What a data node will hold, known at planning before anything is decoded: the images per split,
and per split the images of each class and of each condition (None where the data set does not
list them). data_splits.py states them (`data_splits.facts`); the stages that check
their settings against the data before anything runs (calibrate's pre-flight, the precisions'
planning warnings) read them from here, never from each other."""

from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

Counts = Optional[Dict[str, int]]


@dataclass
class DataFacts:
    split_sizes: Dict[str, int]
    # Listed on first use: a plan that calibrates nothing lists no folder's classes.
    class_counts_of: Callable[[str], Counts]
    condition_counts_of: Callable[[str], Counts]
    _seen: Dict[tuple, Counts] = field(default_factory=dict, repr=False)

    def classes(self, split: str) -> Counts:
        """{class: images} the split will hold; None where classes are not listed from files."""
        return self._once(("classes", split), self.class_counts_of)

    def conditions(self, split: str) -> Counts:
        """{condition tag: images} the split will carry; None where the data set has no conditions."""
        return self._once(("conditions", split), self.condition_counts_of)

    def _once(self, key: tuple, count: Callable[[str], Counts]) -> Counts:
        if key not in self._seen:
            self._seen[key] = count(key[1])
        return self._seen[key]
