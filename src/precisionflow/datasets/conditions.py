"""Conditions: named tags on images (long shadows, dusk, small objects, one camera), where a
precision's loss concentrates while the average hides it.

Where tags come from:
  * a sidecar CSV a user writes for an image folder (dataset.conditions=<file>): a header
    `file,conditions`, then one row per tagged image -- its path relative to dataset.path and its
    tags separated by ';' (an image with no row has no tags);
  * shadow_cars: what its generator drew (shadow length and darkness, vehicle size, clutter,
    contrast), binned into tags (shadow_cars.scene_conditions).
A data node keeps one list of tags per image of each split (conditions_<split>.json); every figure
per condition is computed from it at judging time. numpy and the standard library only.
"""

import csv
import difflib
import json
import re
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np

from precisionflow.errors import ConfigError

FILE = "conditions_{}.json"
TAG = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
SEPARATOR = ";"


def sidecar_path(conditions: str, data_path: str) -> Path:
    """Where dataset.conditions points: an absolute path as it is; a relative one from the current
    folder, else beside the data folder (its parent), else inside it -- the first that exists (the
    first place, if none does: reading it then fails, naming all three)."""
    given = Path(conditions).expanduser()
    if given.is_absolute():
        return given
    data = Path(data_path).expanduser().resolve()
    places = [Path.cwd() / given, data.parent / given, data / given]
    return next((place for place in places if place.is_file()), places[0]).resolve()


def read_sidecar(path: Path, known_files: Iterable[str]) -> Dict[str, List[str]]:
    """{relative image path: tags} of a user's conditions CSV, checked against the folder's files."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"dataset.conditions: expected a CSV file (header 'file,conditions'), found no file at {path}. "
            "A relative path is looked for in the current folder, then beside the data folder, then in it. "
            "Write one, or leave dataset.conditions unset."
        )
    known = set(known_files)
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    if not rows or [cell.strip() for cell in rows[0][:2]] != ["file", "conditions"]:
        raise ConfigError(f"{path}:1: expected the header 'file,conditions', found {rows[0] if rows else 'an empty file'}.")
    found: Dict[str, List[str]] = {}
    for line, row in enumerate(rows[1:], start=2):
        found[_checked_file(path, line, row, known)] = _checked_tags(path, line, row)
    return found


def _checked_file(path: Path, line: int, row: List[str], known: set) -> str:
    if len(row) < 2:
        raise ConfigError(f"{path}:{line}: expected 'file,conditions', found {row}.")
    name = row[0].strip()
    if name not in known:
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f" Did you mean '{close[0]}'?" if close else " Paths are relative to dataset.path."
        raise ConfigError(f"{path}:{line}: '{name}' is not an image of the data set's folder.{hint}")
    return name


def _checked_tags(path: Path, line: int, row: List[str]) -> List[str]:
    tags = [tag.strip() for tag in row[1].split(SEPARATOR)]
    if not any(tags) or any(not TAG.match(tag) for tag in tags):
        raise ConfigError(
            f"{path}:{line}: expected tags like 'dusk;camera_2' (letters, digits, _ . -, separated by ';'), found '{row[1]}'."
        )
    return sorted(set(tags))


def save(folder: Path, split: str, tags: Sequence[Sequence[str]]) -> None:
    from precisionflow.nodeio import write_json_atomic

    write_json_atomic(Path(folder) / FILE.format(split), {"tags": [sorted(each) for each in tags]})


def load(data_dir: Path, split: str) -> Optional[List[List[str]]]:
    """One list of tags per image of the split, or None when the data set has no conditions."""
    path = Path(data_dir) / FILE.format(split)
    return json.loads(path.read_text())["tags"] if path.is_file() else None


def groups(tags: Optional[Sequence[Sequence[str]]]) -> Dict[str, np.ndarray]:
    """{tag: indices of the images carrying it}, tags sorted."""
    if not tags:
        return {}
    found: Dict[str, List[int]] = {}
    for index, each in enumerate(tags):
        for tag in each:
            found.setdefault(tag, []).append(index)
    return {tag: np.asarray(found[tag]) for tag in sorted(found)}


def counts(tags: Optional[Sequence[Sequence[str]]]) -> Dict[str, int]:
    return {tag: len(indices) for tag, indices in groups(tags).items()}


def check_named(named: Iterable[str], known: Iterable[str], where: str) -> None:
    """Conditions a setting names must exist in the data set: a typo fails at planning."""
    known = sorted(set(known))
    for name in named:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            raise ConfigError(
                f"{where}: no condition '{name}' in the data set (it has {known or 'none'})."
                + (f" Did you mean '{close[0]}'?" if close else "")
            )
