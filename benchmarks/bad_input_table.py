"""The bad-input table of tests/test_bad_config_table.py with the messages as a user sees them,
and how long the whole table takes (each case composes, plans and stops before Snakemake).

    python benchmarks/bad_input_table.py > benchmarks/results/bad_input_cases.md
"""

import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from precisionflow import cli  # noqa: E402
from tests.test_bad_config_table import CASES, CATEGORIES  # noqa: E402


def main() -> None:
    print("| category | case | overrides | exit | message (stderr, one line) |\n|---|---|---|---|---|")
    started = time.perf_counter()
    for category, case, overrides in ((c, case, overrides) for c, cases in CATEGORIES.items() for case, overrides, _ in cases):
        with tempfile.TemporaryDirectory() as folder:
            tmp = Path(folder)
            (tmp / "x.keras").write_text("not a zip")
            given = overrides(tmp) if callable(overrides) else overrides
            error = io.StringIO()
            with contextlib.redirect_stderr(error):
                code = cli.main(["run", f"results_dir={tmp / 'results'}", *given])
            shown = " ".join(o.replace(folder, "<tmp>") for o in given)
            message = error.getvalue().strip().replace(folder, "<tmp>").replace("|", "\\|")
            print(f"| {category} | {case} | `{shown}` | {code} | {message} |")
    counts = ", ".join(f"{category} {len(cases)}" for category, cases in CATEGORIES.items())
    print(f"\n{len(CASES)} cases ({counts}) in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
