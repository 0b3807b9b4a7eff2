"""Content hashes: graphs, caches and inputs are identified by what they hold."""

import hashlib
from pathlib import Path


def file_hash(path: Path) -> str:
    """sha256 of a file (graphs are identified by content: lineage checks compare these)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
