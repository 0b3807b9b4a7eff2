"""One precisionflow run per results folder, and recovery from a run that died (kill -9, a crash,
a lost SSH session).

`precisionflow run` holds an exclusive lock on <results>/.precisionflow-run.lock (flock: released by
the kernel when the process dies, so a dead run never blocks the next one). A second run on the same
folder fails at once, naming the holder. With the lock held no other run of precisionflow is live
there, so what a dead run left is stale and is cleared before Snakemake starts: its hidden staging
folders (never consumed: a node is published by one rename), and Snakemake's own directory lock --
unless a Snakemake process started by hand is still running in that folder, which is respected.
Outputs the dead run left half-made are rerun (`--rerun-incomplete`).
"""

import contextlib
import fcntl
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Iterator, List

from precisionflow.errors import PrecisionflowError

LOCK_NAME = ".precisionflow-run.lock"


class RunLockedError(PrecisionflowError):
    pass


@contextlib.contextmanager
def exclusive_run(results: Path) -> Iterator[None]:
    results = Path(results)
    results.mkdir(parents=True, exist_ok=True)
    handle = open(results / LOCK_NAME, "a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise RunLockedError(
                f"Another precisionflow run is using {results} ({holder}). Wait for it to finish, or give this "
                "run its own folder (results_dir=...)."
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {platform.node()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        handle.flush()
        yield
    finally:
        handle.close()  # closing releases the lock


def live_snakemake_in(workdir: Path) -> List[int]:
    """PIDs of Snakemake processes working in `workdir` (started by hand, outside precisionflow)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if Path(os.readlink(proc / "cwd")) == workdir and b"snakemake" in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return [pid for pid in found if pid != os.getpid()]


def recover(results: Path, workdir: Path) -> List[str]:
    """Clear what a dead run left (call with the run lock held); the notes say what was cleared."""
    notes = []
    staging = [path for path in Path(results).glob("*/.*.tmp-*") if path.is_dir()]
    for path in staging:
        shutil.rmtree(path, ignore_errors=True)
    if staging:
        notes.append(f"removed {len(staging)} unfinished node folder(s) a run that died left behind")
    locks = list((Path(workdir) / ".snakemake" / "locks").glob("*.lock"))
    if locks:
        running = live_snakemake_in(Path(workdir))
        if running:
            raise RunLockedError(
                f"Snakemake processes {running} are running in {workdir} (started outside "
                "precisionflow): wait for them to finish."
            )
        for lock in locks:
            lock.unlink()
        notes.append("cleared the directory lock of a Snakemake run that died")
    return notes
