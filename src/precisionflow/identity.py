"""What a node's id covers besides its parameters: the code it runs and the packages it calls.

A stage's code is the import closure of its module inside this package -- every module it
imports, at the top or lazily inside a function, transitively, plus modules named in strings
(the backend registry) -- together with the runner that executes every stage. It is derived from
the source, never listed by hand, so a new helper module is covered the day it is imported.

Package versions are read from installed metadata (nothing is imported), so planning stays fast
and a machine with another TensorFlow, tf2onnx or ONNX Runtime gets new node ids for exactly the
stages that call them.
"""

import ast
import hashlib
import json
import re
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, distributions, version
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from precisionflow.hashing import file_hash

PACKAGE = "precisionflow"
PACKAGE_DIR = Path(__file__).resolve().parent  # src/precisionflow
RUNNER_MODULE = f"{PACKAGE}.pipeline.runner"
_MODULE_STRING = re.compile(rf"^{PACKAGE}(\.\w+)+$")


def module_file(module: str) -> Optional[Path]:
    """The source file of a module of this package (None for anything else)."""
    if module != PACKAGE and not module.startswith(PACKAGE + "."):
        return None
    parts = module.split(".")[1:]
    candidate = PACKAGE_DIR.joinpath(*parts)
    for path in (candidate.with_suffix(".py"), candidate / "__init__.py"):
        if path.is_file():
            return path
    return None


@lru_cache(maxsize=None)
def _parsed(path: Path) -> ast.Module:
    """A file's syntax tree, parsed once per process (planning reads every closure's files: 401
    parses of 81 files cost ~4 s of a no-op rerun's planning)."""
    return ast.parse(path.read_text(), filename=str(path))


# What a source file's syntax tree says (its digest, the package modules it names), kept on disk by
# the file's content hash: a no-op rerun re-planned 81 files' trees (~2 s of its ~8 s of CPU);
# with the content as the key an edited file can never be read from a stale entry.
CACHE_FILE = "source-trees-v1.json"
_tree_facts: Optional[Dict[str, Dict]] = None
CACHE_ENTRIES = 2000


def _cache_path() -> Path:
    import os

    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "precisionflow" / CACHE_FILE


def _facts_of(path: Path) -> Dict:
    """{"digest", "names"} of a Python file, from the disk cache when its content is known."""
    global _tree_facts
    if _tree_facts is None:
        try:
            _tree_facts = json.loads(_cache_path().read_text())
        except (OSError, ValueError):
            _tree_facts = {}
    content = hashlib.sha256(path.read_bytes()).hexdigest()
    if content not in _tree_facts:
        if len(_tree_facts) >= CACHE_ENTRIES:  # old versions of files pile up: start afresh
            _tree_facts = {}
        _tree_facts[content] = {"digest": _tree_digest(path), "names": _named_modules(path)}
        _save_facts()
    return _tree_facts[content]


def _save_facts() -> None:
    """Written whole and renamed into place; a machine where the cache cannot be written plans
    without it."""
    import os
    import tempfile

    target = _cache_path()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".trees.", dir=target.parent)
        with os.fdopen(fd, "w") as handle:
            json.dump(_tree_facts, handle)
        os.replace(tmp, target)
    except OSError:
        pass


@lru_cache(maxsize=None)
def _imported_modules(path: Path) -> Tuple[str, ...]:
    """Modules of this package that `path` imports anywhere in its body, or names in a string."""
    return tuple(name for name in _facts_of(path)["names"] if module_file(name) is not None)


def _named_modules(path: Path) -> List[str]:
    """Modules of this package `path` imports, or names in a string (a registry's module names)."""
    named = [
        node.value
        for node in ast.walk(_parsed(path))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_STRING.match(node.value)
    ]
    return [name for name in imported_names(path) + named if name == PACKAGE or name.startswith(PACKAGE + ".")]


def imported_names(path: Path) -> List[str]:
    """Every absolute module name a file imports, of this package or not (a plug-in's helpers)."""
    found = []
    for node in ast.walk(_parsed(Path(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return found


def file_digest(relative: str) -> str:
    """The digest a node id holds for one of the package's files (relative to the package)."""
    return _file_digest(relative)


def _with_parents(module: str) -> List[str]:
    """Importing a.b.c runs a/__init__.py and a/b/__init__.py first."""
    parts = module.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts) + 1)]


def data_files(path: Path) -> List[Path]:
    """The package's non-Python files a module reads: named, relative to the package, in its
    module-level `DATA_FILES` tuple (a template, a table). They are part of its code."""
    for node in _parsed(path).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DATA_FILES" for t in node.targets):
            return [PACKAGE_DIR / value.value for value in ast.walk(node.value) if isinstance(value, ast.Constant)]
    return []


@lru_cache(maxsize=None)
def import_closure(module: str) -> Tuple[str, ...]:
    """Relative paths (inside the package) of every source file `module` may execute, and the data
    files those read."""
    seen, pending = set(), [module, RUNNER_MODULE]
    while pending:
        name = pending.pop()
        for each in _with_parents(name):
            path = module_file(each)
            if path is None or path in seen:
                continue
            seen.add(path)
            seen.update(data_files(path))
            pending.extend(_imported_modules(path))
    return tuple(sorted(str(path.relative_to(PACKAGE_DIR)) for path in seen))


def _without_docstrings(tree: ast.AST) -> ast.AST:
    """The tree less every module, class and function docstring: prose, not behaviour."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                node.body = node.body[1:] or [ast.Pass()]
    return tree


@lru_cache(maxsize=None)
def _file_digest(relative: str) -> str:
    """A Python file's digest is that of its syntax tree without docstrings (ast.dump holds neither
    comments nor layout): editing a comment, a docstring or the formatting reruns nothing. Any
    other file (a template) is hashed byte for byte."""
    path = PACKAGE_DIR / relative
    if path.suffix != ".py":
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return _facts_of(path)["digest"]


def _tree_digest(path: Path) -> str:
    tree = _without_docstrings(ast.parse(path.read_text(), filename=str(path)))  # its own copy: this one is cut
    return hashlib.sha256(stable_dump(tree).encode()).hexdigest()


def stable_dump(node) -> str:
    """The syntax tree as text, the same on every Python version that parses the file alike:
    fields that are empty or None are left out (Python 3.12 added FunctionDef.type_params, always
    [] here; ast.dump would give the same code another id on a GPU node's newer Python)."""
    if isinstance(node, ast.AST):
        parts = []
        for name, value in ast.iter_fields(node):
            if value is None or value == []:
                continue
            parts.append(f"{name}={stable_dump(value)}")
        return f"{type(node).__name__}({', '.join(parts)})"
    if isinstance(node, list):
        return "[" + ", ".join(stable_dump(item) for item in node) + "]"
    return repr(node)


def backend_files() -> Dict[str, str]:
    """{backend name: its module's file}: the engine stages load one of them by name. Read from
    backends/__init__.py's text, not imported: an import here would enter every stage's closure."""
    text = (PACKAGE_DIR / "backends" / "__init__.py").read_text()
    pairs = re.findall(r'"(\w+)":\s*"' + PACKAGE + r'\.backends\.(\w+)"', text)
    return {name: f"backends/{module}.py" for name, module in pairs}


def node_backend(params: Dict) -> Optional[str]:
    """The engine backend a node's params name (engine stages), else None."""
    return (params.get("engine") or {}).get("backend") or params.get("backend")


def source_hashes(stage: str, backend: Optional[str] = None, precision: Optional[str] = None) -> Dict[str, str]:
    """{relative file: sha256} of the code a stage runs. An engine stage names its backend: the
    other backends' modules (reachable only by name) are not its code, so editing the TensorRT
    backend leaves ONNX Runtime engines and their measurements as they are. A node of a precision
    adds that precision's module and what it imports (the registry loads it by name, so no other
    precision is in any closure): editing int8_qat.py reruns int8_qat's nodes and their dependants."""
    closure = import_closure(f"{PACKAGE}.stages.{stage}")
    if backend is not None:
        others = {path for name, path in backend_files().items() if name != backend}
        closure = tuple(relative for relative in closure if relative not in others)
    if precision is not None and module_file(f"{PACKAGE}.precisions.{precision}") is not None:
        closure = tuple(sorted(set(closure) | set(import_closure(f"{PACKAGE}.precisions.{precision}"))))
    return {relative: _file_digest(relative) for relative in closure}


def node_source_hashes(stage: str, params: Dict) -> Dict[str, str]:
    """source_hashes for one node: its stage, the backend and the precision its params name. The
    planner, the runner's check and `plan --why` all read a node's code through this."""
    return source_hashes(stage, node_backend(params), params.get("precision"))


def code_hash(stage: str, hashes: Optional[Dict[str, str]] = None) -> str:
    hashes = hashes if hashes is not None else source_hashes(stage)
    digest = hashlib.sha256("".join(f"{rel}:{sha}\n" for rel, sha in sorted(hashes.items())).encode())
    return digest.hexdigest()[:12]


def clear_caches() -> None:
    """Forget file hashes (tests edit sources; a long-lived process may re-plan)."""
    import_closure.cache_clear()
    _file_digest.cache_clear()
    _parsed.cache_clear()
    _imported_modules.cache_clear()


# Distributions that provide the same module: whichever is installed is the one called.
# Distributions that provide one module: the version is read from whichever is installed.
ALTERNATIVES = {
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu"),
    "tensorflow": ("tensorflow", "tensorflow-cpu"),
    "tensorrt": ("tensorrt", "tensorrt-cu13", "tensorrt-cu12", "tensorrt-cu11", "tensorrt-lean", "tensorrt-dispatch"),
}


# Import names of the distributions whose versions ids record, where they differ from the name.
IMPORT_NAMES = {"mlcommons-loadgen": "mlperf_loadgen", "tf-keras": "tf_keras", "scikit-learn": "sklearn"}


def installed_version(package: str) -> str:
    """The version of `package` as this interpreter imports it: the distribution installed in the
    folder the import system finds the module in (a GPU image with a CPU onnxruntime in its
    site-packages and onnxruntime-gpu first on PYTHONPATH records the GPU build's version), else
    the first of its names installed anywhere; the module itself is not imported."""
    names = ALTERNATIVES.get(package, (package,))
    root = _import_root(IMPORT_NAMES.get(package, package.replace("-", "_")))
    if root is not None:
        wanted = {_normal(name) for name in names}
        for name in names:
            # found by its folder's name (distributions(name=...)): reading every distribution's
            # metadata in a large site-packages took 2.5 s of a 2.6-s plan
            for dist in distributions(name=name, path=[root]):
                if _normal(dist.metadata["Name"] or "") in wanted:
                    return dist.version
    for name in names:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return "not installed"


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _import_root(module: str) -> Optional[str]:
    """The sys.path folder `module` is imported from, or None (not found, or not from a folder)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    origin = Path(spec.origin)
    return str(origin.parent.parent if spec.submodule_search_locations else origin.parent)


def package_versions(packages: Iterable[str]) -> Dict[str, str]:
    return {name: installed_version(name) for name in sorted(packages)}


def path_sha256(path: Path) -> str:
    """Content hash of a file, or of every file under a folder (SavedModel), by relative name."""
    path = Path(path)
    if path.is_file():
        return file_hash(path)
    digest = hashlib.sha256()
    for each in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(f"{each.relative_to(path)}:{file_hash(each)}\n".encode())
    return digest.hexdigest()
