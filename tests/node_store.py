"""One store of upstream nodes for the whole test session: the end-to-end tests that are not about
training share their data sets, trained models and graphs through precisionflow's own node ids.

A test asks `seed(results, overrides)` before its run: the store (one results folder per session,
shared by the pytest-xdist workers under a file lock) builds what that configuration needs up to the
engines -- `precisionflow run ... -- --omit-from build_engine`, the path users take before `ship` --
only where a node is missing, and the test's results folder gets copies of exactly the plan's
upstream node folders. The test's own run then finds them finished, as after `precisionflow land`:
every reuse is a check of exact reruns (an id that named different content would be rebuilt or
refused by the runner's identity check). Tests about training, killing or writing those nodes build
their own.
"""

import fcntl
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, List

SHARED_STAGES = ("prepare_dataset", "train_model", "prune_model", "finetune_model", "export_onnx", "calibrate", "quantize_onnx")


class NodeStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.results = self.root / "results"
        self.built: List[str] = []  # configurations this process had the store build (for the log)

    @contextmanager
    def locked(self):
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def upstream_keys(self, overrides: Iterable[str]) -> List[str]:
        """The plan's nodes of the shared stages for these overrides (planned in this process: no job runs)."""
        from precisionflow.nodeio import read_json
        from precisionflow.pipeline.plan import plan_from_overrides

        plan = read_json(plan_from_overrides([*overrides, f"results_dir={self.results}"]))
        return sorted(key for key, node in plan["nodes"].items() if node["stage"] in SHARED_STAGES)

    def seed(self, results: Path, overrides: Iterable[str]) -> List[str]:
        """Copy the finished upstream nodes of `overrides` into `results` (built in the store first
        where missing); returns their keys."""
        overrides = [o for o in overrides if not o.startswith("results_dir=")]
        with self.locked():
            keys = self.upstream_keys(overrides)
            if any(not (self.results / key / "node.json").is_file() for key in keys):
                self.build(overrides)
            for key in keys:
                if not (Path(results) / key).exists():
                    shutil.copytree(self.results / key, Path(results) / key)  # copy2: the mtimes Snakemake reads
        return keys

    def donate(self, results: Path, overrides: Iterable[str]) -> List[str]:
        """The finished upstream nodes of `overrides` that a test built in its own `results` and the
        store lacks, copied in (as `land` takes a GPU node's folders): a test that had to train --
        first_run, whose point is a first run -- spares the later tests of its configuration another
        training. Returns the keys copied."""
        overrides = [o for o in overrides if not o.startswith("results_dir=")]
        copied = []
        with self.locked():
            for key in self.upstream_keys(overrides):
                source, target = Path(results) / key, self.results / key
                if (source / "node.json").is_file() and not target.exists():
                    shutil.copytree(source, target)  # copy2: the mtimes Snakemake reads
                    copied.append(key)
            restamp([self.results / key for key in copied])
        return copied

    def build(self, overrides: List[str]) -> None:
        command = [sys.executable, "-m", "precisionflow.cli", "run", "--cores", "2", f"results_dir={self.results}"]
        done = subprocess.run(
            [*command, *overrides, "--", "--omit-from", "build_engine"], capture_output=True, text=True, cwd=self.root
        )
        assert done.returncode == 0, "the node store could not build:\n" + done.stdout[-3000:] + done.stderr[-3000:]
        self.built.append(" ".join(overrides))


def restamp(folders: List[Path]) -> None:
    """Give donated nodes times after everything already in the store, keeping their own order. The
    store may hold an input of theirs that it built itself after the donor's run (the data set, for
    a test that ran first): kept as they were, a donated node would be older than its input, and
    Snakemake -- which reruns by modification time -- would rerun it in every test seeded from it
    (seen with three workers: one job more than the test expects)."""
    import os
    import time

    now = time.time()
    ordered = sorted(folders, key=lambda folder: (folder / "node.json").stat().st_mtime)
    for index, folder in enumerate(ordered):
        stamp = now + 0.01 * index
        for path in [*folder.rglob("*"), folder]:
            os.utime(path, (stamp, stamp))


def store_root(basetemp: Path) -> Path:
    """One folder for every worker of the session: pytest-xdist's workers have basetemp
    .../pytest-N/popen-gwK, a plain run .../pytest-N."""
    session = basetemp.parent if basetemp.name.startswith("popen-") else basetemp
    return session / "node-store"
