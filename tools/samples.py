"""The README's and getting-started's sample output, from the program as it is (`make samples`).

    .venv/bin/python tools/samples.py run [RESULTS_DIR]   # run the default experiment, rewrite the samples
    .venv/bin/python tools/samples.py --check             # every node id a sample cites is one a fresh plan makes

A sample sits between `<!-- sample:NAME cpu=FLAG -->` and `<!-- /sample:NAME -->` (NAME: table or
verdicts), fenced. `run` runs `precisionflow run` (the default experiment) into a scratch results
folder, keeps its console under benchmarks/results/, and puts the table and the verdict lines in
place, the CPU's integer dot-product flag in the opening marker (the CPU placement's int8 figures
depend on it: 8-bit weights with VNNI, 7 without).

The check is tests/test_docs.py's: a sample whose model ids (train_model, finetune_model) a fresh
clone would not train has drifted from the program, and fails the suite until `make samples` is
run again. Engine and evaluation ids are not checked: they hold the machine (its CPU's name, the
runtime's version), so they are the sample machine's, by design.
"""

import datetime
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
FILES = {"README.md": ("table", "verdicts"), "docs/getting-started.md": ("table",)}
BLOCK = re.compile(r"(<!-- sample:(\w+)(?: cpu=(\S+))? -->\n```\n)(.*?)(\n```\n<!-- /sample:\2 -->)", re.DOTALL)
MODEL_ID = re.compile(r"\b((?:train_model|finetune_model)/[A-Za-z0-9_.-]+-[0-9a-f]{12})\b")
MODEL_LINE = re.compile(r"^model: (\S+) \(([0-9a-f]{12})\)", re.MULTILINE)


def blocks(text: str) -> List[re.Match]:
    return list(BLOCK.finditer(text))


def cited(path: Path) -> set:
    """The model node keys the file's samples cite (the table's 'model:' line included)."""
    found = set()
    for block in blocks(path.read_text()):
        found.update(MODEL_ID.findall(block.group(4)))
        found.update(f"train_model/{name}-{digest}" for name, digest in MODEL_LINE.findall(block.group(4)))
    return found


def planned_keys() -> set:
    """The node keys of the default experiment's plan on this checkout."""
    from precisionflow.config.compose import expand
    from precisionflow.pipeline.plan import build_plan

    with tempfile.TemporaryDirectory() as scratch:
        return set(build_plan(expand([]), str(Path(scratch) / "results"))["nodes"])


def drifted() -> List[str]:
    """'FILE: KEY' for each model id a sample cites that a fresh plan does not make; [] when none."""
    planned = planned_keys()
    return [f"{name}: {key}" for name in FILES for key in sorted(cited(ROOT / name) - planned)]


def console_parts(console: str) -> Dict[str, str]:
    """The table (from 'model:' to its '(more columns' line) and the verdict lines (from 'Budgets (')."""
    start = console.index("model: ")
    end = console.index("\n", console.index("(more columns", start))
    budgets = console.index("Budgets (")
    verdicts_end = console.find("\n\n", budgets)
    return {"table": console[start:end], "verdicts": console[budgets : verdicts_end if verdicts_end > 0 else None]}


def rewrite(path: Path, parts: Dict[str, str], cpu_flag: str) -> None:
    def replaced(block: re.Match) -> str:
        name = block.group(2)
        opening = f"<!-- sample:{name} cpu={cpu_flag} -->\n```\n"
        return opening + parts[name].rstrip("\n") + block.group(5)

    text = path.read_text()
    path.write_text(BLOCK.sub(replaced, text))


def run(results: Path) -> None:
    from precisionflow.cpu_features import integer_dot_product

    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "precisionflow.cli", "run", f"results_dir={results}"], capture_output=True, text=True, cwd=ROOT
    )
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"the default run failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    day = datetime.date.today().isoformat()
    kept = ROOT / "benchmarks" / "results" / f"default_run_console_{day}_samples.txt"
    kept.write_text(done.stdout + done.stderr)
    parts, flag = console_parts(done.stdout), integer_dot_product() or "none"
    for name in FILES:
        rewrite(ROOT / name, parts, flag)
    print(f"samples rewritten from a {seconds / 60:.1f}-minute default run (exit {done.returncode}); console: {kept}")


def main() -> None:
    if sys.argv[1:2] == ["--check"]:
        found = drifted()
        print("\n".join(found) if found else "the samples cite only ids a fresh plan makes")
        raise SystemExit(1 if found else 0)
    if sys.argv[1:2] == ["run"]:
        results = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp(prefix="pf-samples-")) / "results"
        run(results)
        return
    raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
