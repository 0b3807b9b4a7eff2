"""One precisionflow run per results folder, and recovery from a run that died (kill -9, a crash,
a lost SSH session).

`precisionflow run` holds an exclusive lock on <results>/.precisionflow-run.lock (filelock's
FileLock: an flock on Unix, released by the kernel when the process dies, so a dead run never
blocks the next one); who holds it is written beside it (.precisionflow-run.holder). A second run
on the same folder fails at once, naming the holder. With the lock held no other run of precisionflow is live
there, so what a dead run left is stale and is cleared before Snakemake starts: its hidden staging
folders (never consumed: a node is published by one rename), and Snakemake's own directory lock --
unless a Snakemake process started by hand is still running in that folder, which is respected.
Outputs the dead run left half-made are rerun (`--rerun-incomplete`).

Killing only `precisionflow run` and Snakemake leaves their jobs running (a training finishes its
epochs with nobody to publish it). Every process of a run carries the results folder in its
environment (RESULTS_VARIABLE), so recovery first stops those of the dead run -- SIGTERM, then
SIGKILL after a grace period -- and waits for them to exit before it touches any folder.
"""

import contextlib
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Iterator, List

from precisionflow.errors import PrecisionflowError
from precisionflow.nodeio import CONTROLLER_VARIABLE

RESULTS_VARIABLE = "PRECISIONFLOW_RESULTS"  # set for Snakemake and inherited by every job it starts
# "host:pid:start time" of `precisionflow run`: a job on the same host publishes its node only while
# that process lives (nodeio.controller_gone), so a job left alone never publishes twice.
GRACE_S = 10
LOCK_NAME = ".precisionflow-run.lock"
HOLDER_NAME = ".precisionflow-run.holder"


class RunLockedError(PrecisionflowError):
    pass


@contextlib.contextmanager
def exclusive_run(results: Path) -> Iterator[None]:
    from filelock import FileLock, Timeout

    results = Path(results)
    results.mkdir(parents=True, exist_ok=True)
    lock = FileLock(results / LOCK_NAME, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        holder = (results / HOLDER_NAME).read_text().strip() if (results / HOLDER_NAME).is_file() else ""
        raise RunLockedError(
            f"Another precisionflow run is using {results} ({holder or 'another process'}). Wait for it to finish, or "
            "give this run its own folder (results_dir=...)."
        ) from None
    try:
        (results / HOLDER_NAME).write_text(f"pid {os.getpid()} on {platform.node()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        yield
    finally:
        lock.release()


def live_snakemake_in(workdir: Path) -> List[int]:
    """PIDs of Snakemake processes working in `workdir` (started by hand, outside precisionflow)."""
    import psutil

    found = []
    for process in psutil.process_iter(["pid", "cwd", "cmdline"]):
        info = process.info
        if info["pid"] != os.getpid() and info["cwd"] and Path(info["cwd"]) == Path(workdir):
            if any("snakemake" in part for part in info["cmdline"] or []):
                found.append(info["pid"])
    return found


def run_environment(results: Path) -> dict:
    """The environment `precisionflow run` gives Snakemake: its jobs are known as this folder's."""
    return {**os.environ, RESULTS_VARIABLE: str(Path(results).resolve()), CONTROLLER_VARIABLE: controller_id()}


def controller_id() -> str:
    from precisionflow.nodeio import process_start

    return f"{platform.node()}:{os.getpid()}:{process_start(os.getpid())}"


@contextlib.contextmanager
def stopping_jobs_on_signal(results: Path) -> Iterator[None]:
    """While a run is under way, SIGTERM and SIGINT to `precisionflow run` (what CI, `timeout` and
    Ctrl-C send) stop Snakemake and every job it started -- every process carrying this results
    folder in its environment -- then exit with 128 + the signal. Without this, a plain `kill` left
    Snakemake and its running job alive under PID 1 (still there 40 s later)."""
    import signal
    import sys

    def stop(signum, _frame):
        print(f"precisionflow: {signal.Signals(signum).name}: stopping Snakemake and its jobs.", file=sys.stderr, flush=True)
        stop_orphans(results)
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def orphans_of(results: Path) -> list:
    """Live processes of a run on `results` (with the run lock held: of a run that died)."""
    import psutil

    wanted, found = str(Path(results).resolve()), []
    for process in psutil.process_iter(["pid"]):
        if process.pid == os.getpid():
            continue
        try:
            if process.environ().get(RESULTS_VARIABLE) == wanted:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def stop_orphans(results: Path, grace_s: float = GRACE_S) -> List[int]:
    """Stop the jobs a dead run left running and wait until they are gone; their PIDs."""
    import psutil

    found = orphans_of(results)
    for process in found:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.terminate()
    _, alive = psutil.wait_procs(found, timeout=grace_s)
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(alive, timeout=grace_s)
    return sorted(process.pid for process in found)


def recover(results: Path, workdir: Path) -> List[str]:
    """Clear what a dead run left (call with the run lock held); the notes say what was cleared."""
    notes = []
    stopped = stop_orphans(results)
    if stopped:
        notes.append(f"stopped {len(stopped)} job process(es) a run that died left running (pids {stopped})")
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
