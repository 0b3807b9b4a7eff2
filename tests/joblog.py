"""What ran when, read from Snakemake's own log (.snakemake/log/*.snakemake.log): the tests check with it that
a timing job ran alone (a test helper: nothing in the package reads Snakemake's log).

The log lists job starts ("rule NAME:" / "localrule NAME:" followed by "jobid: N") and ends
("Finished jobid: N") in the order they happened. From that order alone -- no clock needed --
`overlaps` finds every job that started or was running while a timing job was running.
"""

import re
from pathlib import Path
from typing import Iterable, List, Tuple

TIMING_RULES = ("evaluate_engine", "compare_speed", "benchmark_framework", "serve_engine")
_START = re.compile(r"^(?:local)?rule (\w+):$")
_JOBID = re.compile(r"^\s+jobid: (\d+)$")
_FINISH = re.compile(r"^Finished jobid: (\d+)")

Event = Tuple[str, str, str]  # ("start" | "finish", job id, rule)


def events(log_text: str) -> List[Event]:
    found: List[Event] = []
    rules = {}
    pending_rule = None
    for line in log_text.splitlines():
        if _START.match(line):
            pending_rule = _START.match(line).group(1)
        elif pending_rule and _JOBID.match(line):
            job = _JOBID.match(line).group(1)
            rules[job] = pending_rule
            found.append(("start", job, pending_rule))
            pending_rule = None
        elif _FINISH.match(line):
            job = _FINISH.match(line).group(1)
            found.append(("finish", job, rules.get(job, "?")))
    return found


def overlaps(found: Iterable[Event], timing_rules=TIMING_RULES) -> List[str]:
    """Every pair (timing job, other job) whose run intervals overlap, as readable lines."""
    running = {}
    problems = []
    for kind, job, rule in found:
        if kind == "finish":
            running.pop(job, None)
            continue
        others = [f"{other_rule}#{other}" for other, other_rule in running.items()]
        timing_running = [f"{r}#{j}" for j, r in running.items() if r in timing_rules]
        if rule in timing_rules and others:
            problems.append(f"{rule}#{job} started while {', '.join(others)} ran")
        elif timing_running:
            problems.append(f"{rule}#{job} started while {', '.join(timing_running)} ran")
        running[job] = rule
    return problems


def max_concurrency(found: Iterable[Event]) -> int:
    running, most = set(), 0
    for kind, job, _ in found:
        (running.add if kind == "start" else running.discard)(job)
        most = max(most, len(running))
    return most


def latest_log(workdir: Path) -> Path:
    logs = sorted((Path(workdir) / ".snakemake" / "log").glob("*.snakemake.log"))
    if not logs:
        raise FileNotFoundError(f"no Snakemake log under {workdir}/.snakemake/log")
    return logs[-1]
