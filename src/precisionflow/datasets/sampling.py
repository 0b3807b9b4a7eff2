"""Samples that stand for their split: seeded, stratified draws (calibration, int8_mixed's ranking).

Files are listed class by class, so "the first N images" of a pre-split folder is one or two
classes. A calibration sample is instead drawn: each stratum (a class; with conditions, a class and
condition pair) gets a share of the sample proportional to its share of the split (largest
remainders, and at least one image per stratum while the sample is large enough for that), the
images within a stratum drawn at random with a fixed seed. numpy only.
"""

from typing import Dict, List, Optional, Sequence

import numpy as np

RULES = ("stratified", "random", "first")
RULE_VERSION = "stratified-largest-remainder-v1"  # recorded and hashed: a new rule is a new calibration


def allocation(stratum_sizes: Dict[str, int], count: int) -> Dict[str, int]:
    """Images per stratum for a sample of `count`: proportional to the strata's sizes (largest
    remainders), every non-empty stratum at least one while `count` allows, never more than a stratum holds."""
    sizes = {name: size for name, size in stratum_sizes.items() if size > 0}
    total = sum(sizes.values())
    count = min(count, total)
    if not sizes or count <= 0:
        return {name: 0 for name in stratum_sizes}
    floor_one = count >= len(sizes)
    shares = {name: count * size / total for name, size in sizes.items()}
    given = {name: min(size, max(int(shares[name]), 1 if floor_one else 0)) for name, size in sizes.items()}
    # Hand out what is left by largest remainder (ties: the larger stratum, then the name), then take
    # back any excess that the floor of one created, from the strata most above their share.
    order = sorted(sizes, key=lambda name: (-(shares[name] - int(shares[name])), -sizes[name], name))
    while sum(given.values()) < count:
        for name in order:
            if sum(given.values()) < count and given[name] < sizes[name]:
                given[name] += 1
    while sum(given.values()) > count:
        name = max((n for n in given if given[n] > 1), key=lambda n: (given[n] - shares[n], n))
        given[name] -= 1
    return {name: given.get(name, 0) for name in stratum_sizes}


def draw(strata: Sequence, count: int, seed: int, rule: str = "stratified") -> np.ndarray:
    """Sorted indices of a sample of `count` images (all of them if there are fewer).

    `strata`: one key per image (its class, or class and condition); None for every image where
    images carry none (a detector's split), which makes a stratified draw a plain random one."""
    if rule not in RULES:
        raise ValueError(f"sampling rule: expected one of {RULES}, found '{rule}'")
    size = len(strata)
    count = min(count, size)
    if rule == "first":
        return np.arange(count)
    rng = np.random.default_rng(seed)
    keys = np.asarray([str(key) for key in strata])
    if rule == "random" or all(key == "None" for key in keys):
        return np.sort(rng.choice(size, size=count, replace=False))
    names, inverse = np.unique(keys, return_inverse=True)
    members = {name: np.flatnonzero(inverse == index) for index, name in enumerate(names)}
    wanted = allocation({name: len(found) for name, found in members.items()}, count)
    picked = [rng.choice(members[name], size=wanted[name], replace=False) for name in names if wanted[name]]
    return np.sort(np.concatenate(picked)) if picked else np.arange(0)


def counts(keys: Sequence, names: Optional[List[str]] = None) -> Dict[str, int]:
    """{name: images} of a drawn sample, every name listed (0 where none was drawn)."""
    found: Dict[str, int] = {name: 0 for name in names or []}
    for key in keys:
        found[str(key)] = found.get(str(key), 0) + 1
    return found


def thin_strata(found: Dict[str, int], minimum: int) -> Dict[str, int]:
    """The strata a sample holds fewer than `minimum` images of."""
    return {name: count for name, count in found.items() if count < minimum}


def split_strata(split, tags: Optional[List[List[str]]] = None) -> List[Optional[str]]:
    """One stratum key per image of a data node's split: its class name and its condition tags
    ("car|shadow_long+small_vehicle"); None where images carry neither."""
    classes = [None] * len(split) if split.labels is None else [split.classes[label] for label in split.labels.tolist()]
    if not tags:
        return classes
    return [f"{name or ''}|{'+'.join(each)}" for name, each in zip(classes, tags, strict=True)]


def sample_split(split, count: int, rule: str, seed: int, exclude: Sequence[str] = ()) -> Dict[str, object]:
    """{"indices": sorted indices drawn from `split`, "per_class": {class: images drawn},
    "per_condition": {tag: images drawn} (where the data set has conditions), "rule", "seed"}.
    Images carrying a tag in `exclude` are never drawn (a calibration without, e.g., long shadows)."""
    from precisionflow.datasets import conditions

    tags = conditions.load(split.data_dir, split.name)
    eligible = np.arange(len(split))
    if exclude and tags:
        eligible = np.asarray([i for i, each in enumerate(tags) if not set(each) & set(exclude)], dtype=np.int64)
    strata = split_strata(split, tags)
    indices = eligible[draw([strata[i] for i in eligible], count, seed, rule)]
    record: Dict[str, object] = {"indices": indices, "rule": rule, "seed": seed, "rule_version": RULE_VERSION}
    if split.labels is not None:
        record["per_class"] = counts([split.classes[split.labels[i]] for i in indices.tolist()], list(split.classes))
    if tags is not None:
        known = sorted({tag for each in tags for tag in each})
        record["per_condition"] = counts([tag for i in indices.tolist() for tag in tags[i]], known)
        record["excluded_conditions"] = list(exclude)
        record["eligible"] = int(len(eligible))
    return record
