"""Atomic writes and the node folder protocol.

A node's outputs are written into a hidden temporary folder beside the final one and renamed
into place only after node.json (written last) is complete, so a crashed or killed stage never
leaves a half-written artifact where a downstream stage could read it.
"""

import contextlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

from precisionflow.errors import StageError
from precisionflow.hashing import file_hash

NODE_FILE = "node.json"


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(path: Path, directory: bool = False) -> None:
    """mkstemp/mkdtemp create 0600 files and 0700 folders whatever the umask: published, they would
    lock a teammate on a shared results folder out. Give them what open()/mkdir() would have."""
    os.chmod(path, (0o777 if directory else 0o666) & ~current_umask())


def write_json_atomic(path: Path, data: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=True, default=str)
    follow_umask(Path(tmp))
    os.replace(tmp, path)


def node_files(node_dir: Path) -> Dict[str, Path]:
    """{relative path: path} of every file a node wrote (node.json aside). Snakemake's own markers
    (.snakemake_timestamp in directory outputs, written after the job) are not the node's."""
    node_dir = Path(node_dir)
    return {
        str(path.relative_to(node_dir)): path
        for path in sorted(node_dir.rglob("*"))
        if path.is_file() and path.name not in (NODE_FILE, PACKED_FILE) and not path.name.startswith(".snakemake")
    }


def content_hashes(node_dir: Path) -> Dict[str, str]:
    """{relative path: sha256} of every file a node wrote: recorded in node.json."""
    return {name: file_hash(path) for name, path in node_files(node_dir).items()}


def file_stats(node_dir: Path) -> Dict[str, list]:
    """{relative path: [size, mtime_ns]} of every file a node wrote, recorded beside the hashes: a run
    compares these before it starts (a stat per file) and hashes only files whose stat changed."""
    found = {}
    for name, path in node_files(node_dir).items():
        stat = path.stat()
        found[name] = [stat.st_size, stat.st_mtime_ns]
    return found


# A node folder shipped to another machine holds only the files its readers open there, some of
# them cut down (the data node's test split): it names them here, and only the others are checked.
PACKED_FILE = ".packed.json"


def verify_node(node_dir: Path) -> Dict[str, Any]:
    """A finished node whose files are as it wrote them: one edited, replaced, added or removed since
    (a foreign calibration cache, an engine file copied in) is refused before anything reads it."""
    from precisionflow.errors import LineageError

    record = read_node(node_dir)
    if "files" not in record:
        return record  # written before nodes recorded their files
    found, recorded = content_hashes(node_dir), dict(record["files"])
    packed = Path(node_dir) / PACKED_FILE
    if packed.is_file():
        rewritten = set(read_json(packed)["rewritten"])
        recorded = {name: digest for name, digest in recorded.items() if name in found and name not in rewritten}
        found = {name: digest for name, digest in found.items() if name not in rewritten}
    changed = sorted(name for name in set(found) | set(recorded) if found.get(name) != recorded.get(name))
    if changed:
        raise LineageError(
            f"{node_dir}: {', '.join(changed)} changed after the node finished (its node.json recorded other contents). "
            "Results are never edited in place: delete that folder and run precisionflow run again, which recomputes it."
        )
    return record


def verify_finished_node(node_dir: Path) -> Dict[str, Any]:
    """verify_node for every finished node before a run starts, cheap when nothing changed: files
    with the size and modification time they were recorded with are taken as unchanged (as git
    does); any difference in names or stats means a full content check. Returns the node's record."""
    record = read_node(node_dir)
    recorded = record.get("file_stats")
    if recorded is None or file_stats(node_dir) != recorded:
        verify_node(node_dir)
    return record


def read_json(path: Path) -> Any:
    with open(path) as handle:
        return json.load(handle)


def read_node(node_dir: Path) -> Dict[str, Any]:
    """The node.json of a finished node; a clear error if the node never finished."""
    marker = Path(node_dir) / NODE_FILE
    if not marker.is_file():
        raise StageError(
            f"Expected a finished node at {node_dir} (its {NODE_FILE}), found none. "
            "Run the workflow (precisionflow run) so the upstream stage completes first."
        )
    return read_json(marker)


def declined(node_dir: Path) -> Optional[str]:
    """Why a finished node built nothing (int8_mixed when no mix of int8 and float helps), or None.
    A declined node holds only its node.json; every node downstream of it declines too (the
    runner), and the aggregate stages list it as "not built" instead of reading its files."""
    marker = Path(node_dir) / NODE_FILE
    if not marker.is_file():
        return None
    return (read_json(marker).get("summary") or {}).get("declined")


CONTROLLER_VARIABLE = "PRECISIONFLOW_CONTROLLER"  # set by pipeline/runlock.py's run_environment


def controller_gone() -> Optional[str]:
    """Why this job must not publish, or None: the `precisionflow run` that started it (same host)
    is no longer running -- it was killed, and the next run will recompute this node under its own
    control. A job on another host (SLURM) cannot see its controller and publishes as before."""
    import platform

    found = os.environ.get(CONTROLLER_VARIABLE, "")
    host, _, rest = found.partition(":")
    if not found or host != platform.node():
        return None
    pid, _, started = rest.partition(":")
    try:
        alive = process_start(int(pid)) == started  # the same process, not a reused pid
    except ValueError:
        alive = False
    return None if alive else f"the precisionflow run that started this job (pid {pid}) is gone"


def process_start(pid: int) -> str:
    """When a process started, as a mark that names it (with its pid) for as long as it runs: on
    Linux its start in clock ticks since boot (/proc/<pid>/stat), which no change of the wall clock
    moves -- psutil's create_time is boot time + ticks, and boot time is read off the wall clock, so a
    clock step made a live run look gone and its jobs refused to publish; elsewhere create_time.
    '' for a process that does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return "t" + stat[stat.rindex(")") + 2 :].split()[19]  # field 22: starttime (fields after comm)
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return ""  # Linux, and no such process
    except (OSError, ValueError, IndexError):
        pass
    import psutil

    try:
        return f"{psutil.Process(pid).create_time():.3f}"
    except psutil.NoSuchProcess:
        return ""


@contextlib.contextmanager
def staged_node_dir(final_dir: Path) -> Iterator[Path]:
    """Yield a temporary folder; on success it replaces `final_dir` in one rename."""
    final_dir = Path(final_dir)
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final_dir.name}.tmp-", dir=final_dir.parent))
    follow_umask(tmp, directory=True)
    try:
        yield tmp
        if not (tmp / NODE_FILE).is_file():
            raise StageError(f"internal: {tmp} finished without {NODE_FILE}")
        gone = controller_gone()
        if gone:  # its work would be published beside the next run's recomputation of it: run twice
            raise StageError(f"{gone}: {final_dir.name} not published; the next precisionflow run recomputes it")
        # Snakemake creates the output's parent folder before the job; an existing folder here
        # holds no finished node (Snakemake would not have scheduled the job), so it can go.
        if final_dir.exists():
            shutil.rmtree(final_dir)
        os.rename(tmp, final_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def role_kind(role: str) -> str:
    """A numbered role (eval00003: an aggregate stage's fourth evaluation) is of its kind (eval)."""
    return re.sub(r"\d{5}$", "", role)  # the planner numbers them with five digits


def node_key(record: Dict[str, Any]) -> str:
    return f"{record['stage']}/{record['id']}"


def lineage(node_dir: Path) -> Dict[str, Dict[str, Any]]:
    """node.json of a node and of everything upstream of it, keyed by node key ("<stage>/<id>").

    A DAG, not a chain: an int8_qat engine has two trainings (train, QAT fine-tune) and two exports
    (its own and the fp32 reference), and each is its own entry. Nodes live at
    <results>/<stage>/<id> and name their inputs by key, so lineage is walked from the artifact alone.
    """
    results = Path(node_dir).parent.parent
    root = read_node(node_dir)
    found: Dict[str, Dict[str, Any]] = {node_key(root): root}
    pending = list(root["inputs"].values())
    while pending:
        key = pending.pop()
        if key not in found:
            found[key] = read_node(results / key)
            pending.extend(found[key]["inputs"].values())
    return found


def named_lineage(node_dir: Path, primary_roles=("engine", "data")) -> Dict[str, Dict[str, Any]]:
    """Lineage with readable, unique names: the chain the artifact was built from (reached through
    `primary_roles`) by stage name ("train_model", "finetune_model", "export_onnx", ...); a second
    node of a stage on that chain by its role ("int8.quantize_onnx"); side inputs by role
    ("reference.export_onnx": the fp32 export every engine is compared with)."""
    records = lineage(node_dir)
    root = read_node(node_dir)
    named: Dict[str, Dict[str, Any]] = {root["stage"]: root}
    seen = {node_key(root)}
    first = [(role, key) for role, key in sorted(root["inputs"].items()) if role in primary_roles]
    side = [(role, key) for role, key in sorted(root["inputs"].items()) if role not in primary_roles]
    for edges, prefix_all in ((first, False), (side, True)):
        queue = [(role, key, role) for role, key in edges]
        while queue:
            role, key, origin = queue.pop(0)
            if key in seen:
                continue
            seen.add(key)
            record = records[key]
            name = (
                record["stage"]
                if not prefix_all and record["stage"] not in named
                else f"{origin if prefix_all else role}.{record['stage']}"
            )
            named[name] = record
            queue.extend((child_role, child, origin) for child_role, child in sorted(record["inputs"].items()))
    return named
