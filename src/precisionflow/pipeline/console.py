"""The console of `precisionflow run`: one line per finished job, not Snakemake's job blocks.

Snakemake's whole output goes to a log file (<results>/logs/run-<time>.log; Snakemake keeps its
own in .snakemake/log/ too); the console gets a line per finished job (progress, node, seconds),
training's per-epoch lines and warnings, and any error block in full. `--verbose` passes
everything through, as before.
"""

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, TextIO, Tuple

RULE = re.compile(r"^(?:local)?rule (\w+):$")
OUTPUT = re.compile(r"^\s+output: (.*/(\w+)/([^/\s]+)/node\.json)")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)")
TARGET_STATS = re.compile(r"^all\s+(\d+)\s*$")  # the target rule's line of Snakemake's job stats
PROGRESS = re.compile(r"^(\d+) of (\d+) steps \(\d+%\) done")
ERROR_START = re.compile(
    r"^(Error in rule|RuleException|WorkflowError|MissingOutputException|CalledProcessError|Exiting because|Traceback)"
)
# Snakemake's own vocabulary and Keras' progress bars: kept in the log file, left off the console.
# Everything else -- a stage's own lines (training's "epoch N:" line, warnings, "Training loss
# became nan"), the SLURM executor's "submitted with SLURM jobid" -- is shown.
NOISE = re.compile(
    r"^(\s|$|\[\w{3} \w{3} +\d+ [\d:]+ \d{4}\]|Select jobs to execute|Execute \d+ jobs|Building DAG|Using shell|"
    r"Provided (cores|resources)|Rules claiming|Job stats|job +count|-+ +-+|[\w-]+ +\d+$|Assuming unrestricted|SNAKEMAKE|=+$|"
    r"Complete log|Elapsed time|Using workflow specific profile|[IWE]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] |\d{4}/\d\d/\d\d [\d:]+ INFO |Epoch \d+/\d+|\d+/\d+ - |WARNING: All log messages before absl|Nothing to be done|Waiting for)"
)


class QuietConsole:
    """Reads Snakemake's output line by line: everything to `log`, the lines that matter to `out`."""

    def __init__(self, log: TextIO, out: TextIO = sys.stdout):
        self.log, self.out = log, out
        self.jobs: Dict[str, Tuple[str, float, str]] = {}  # jobid -> (stage/node, started, its node.json)
        self.pending: Optional[List[str]] = None  # a job block being read: [stage, node, node.json]
        self.finished: Optional[Tuple[str, float, str]] = None
        self.in_error = False
        self.lines_shown = 0
        self.target_jobs = 0  # Snakemake's target rule ('all' in its job stats): counted in its total, runs nothing

    def feed(self, line: str) -> None:
        self.log.write(line)
        text = line.rstrip("\n")
        if self.in_error or ERROR_START.match(text):
            self.in_error = bool(text.strip()) or not ERROR_START.match(text)
            self.show(text)
            if not text.strip():
                self.in_error = False
            return
        self._track(text)

    def _track(self, text: str) -> None:
        rule, output, jobid = RULE.match(text), OUTPUT.match(text), JOBID.match(text)
        finished, progress = FINISHED.match(text), PROGRESS.match(text)
        if rule:
            self.pending = [rule.group(1), "", ""]
        elif output and self.pending is not None:
            self.pending = [output.group(2), output.group(3), output.group(1)]
        elif jobid and self.pending is not None:
            stage, node, node_file = self.pending
            self.jobs[jobid.group(1)] = (f"{stage}/{node}" if node else stage, time.monotonic(), node_file)
            self.pending = None
        elif finished:
            name, started, node_file = self.jobs.get(finished.group(1), (finished.group(2), time.monotonic(), ""))
            self.finished = (name, time.monotonic() - started, node_file)
        elif progress and self.finished:
            name, seconds, node_file = self.finished
            if name != "all":  # Snakemake's target rule: nothing ran, and the total shown leaves it out
                total = int(progress.group(2)) - self.target_jobs
                self.show(f"[{progress.group(1):>3}/{total}] {name}  {seconds:.0f} s{gpu_wait_text(node_file)}")
            self.finished = None
        elif TARGET_STATS.match(text):
            self.target_jobs = int(TARGET_STATS.match(text).group(1))
        elif not NOISE.match(text) or "submitted with SLURM jobid" in text:  # where a cluster job's log is
            self.show(text)

    def show(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()
        self.lines_shown += 1


def gpu_wait_text(node_file: str) -> str:
    """The progress line's tail where the node waited for its GPU slot (jobs started side by side with
    one GPU take it in turn), e.g. ", 495 s of them waiting for the GPU": a job's seconds count from
    its start, so without it an evaluation that ran 30 s after 495 s in the queue reads as 526 s."""
    from precisionflow.nodeio import read_json

    try:
        waited = slot_wait_s(read_json(Path(node_file)))
    except (OSError, ValueError, AttributeError):  # no node file (a target rule, a failed job): no wait to tell
        return ""
    return f", {waited:.0f} s of them waiting for the GPU" if waited >= 1 else ""


def slot_wait_s(record: Dict) -> float:
    """The seconds a finished node waited for its GPU slot (its node.json's `gpu_slot`, as the runner
    records it from gpuslots.for_node); 0 for a node that took none. Its `timings.seconds` include them.
    (Here, not in gpuslots: the runner's own modules are part of every node's id.)"""
    return float((record.get("gpu_slot") or {}).get("waited_s", 0.0))


def run_quietly(command: List[str], cwd: Path, env: dict, log_path: Path) -> int:
    """Run Snakemake with its output filtered (QuietConsole); its exit code."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    print(f"precisionflow: Snakemake's full output: {log_path} (precisionflow run --verbose shows it here)")
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        console = QuietConsole(log)
        for line in process.stdout:
            console.feed(line)
        return process.wait()
