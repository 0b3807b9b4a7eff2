"""Write a generated docs page, or with --check say whether the committed one is current (the
generators under tools/ share this; tests/test_docs.py runs each with --check)."""

import sys
from pathlib import Path


def write_or_check(page: Path, text: str, generator: str, what: str) -> int:
    if "--check" in sys.argv:
        current = page.read_text() if page.is_file() else ""
        if current != text:
            print(f"{page} is out of date: run `.venv/bin/python {generator}`", file=sys.stderr)
            return 1
        return 0
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text)
    print(f"wrote {page} ({what})")
    return 0
