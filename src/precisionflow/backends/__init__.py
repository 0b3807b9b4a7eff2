"""Engine backends behind one small interface.

A backend module provides:
  build(graph_path, out_dir, engine_params, target_def, precision) -> dict   # engine description (engine.json)
  load(engine_dir, description) -> Engine                          # refuses other devices/runtimes
  describe_runtime(target_def) -> dict                             # what this machine would use
An Engine has run(batch: np.ndarray) -> np.ndarray and `description`.
"""

import importlib
from typing import Any, Dict

from precisionflow.errors import ConfigError, EngineMismatchError

# A named target's engine runtime version when the target declares none (target_defs.<t>.backend_version):
# whatever the machine that builds has, read there and recorded in engine.json; in the ids, this text.
READ_WHERE_BUILT = "read where built"

BACKENDS = {"onnxruntime": "precisionflow.backends.onnxruntime_backend", "tensorrt": "precisionflow.backends.tensorrt_backend"}


def get_backend(name: str):
    if name not in BACKENDS:
        raise ConfigError(f"engine.backend: expected one of {sorted(BACKENDS)}, found '{name}'.")
    return importlib.import_module(BACKENDS[name])


def engine_loader(engine_dir):
    """A function loading a fresh instance of a built engine (timing and serving stages load several)."""
    from pathlib import Path

    from precisionflow.nodeio import read_json, read_node

    node = read_node(Path(engine_dir))
    description = read_json(Path(engine_dir) / "engine.json")
    backend = get_backend(description["backend"])
    return lambda: backend.load(Path(engine_dir), description, node["params"]["target_def"])


def check_buildable_here(params: Dict[str, Any]) -> Dict[str, Any]:
    """The runtime this machine offers a build_engine node, or why it cannot build it (device, version)."""
    from precisionflow.devices import check_device

    runtime = get_backend(params["engine"]["backend"]).describe_runtime(params["target_def"])
    check_device(runtime, params["target_def"])
    check_runtime(params["runtime"], runtime, params["target"])
    return runtime


def check_runtime(planned: Dict[str, str], found: Dict[str, Any], target: str) -> None:
    """Refuse to build with another backend version than the node's id names (any version, where the
    id says it is read where built: engine.json records the one found)."""
    if planned["backend_version"] not in (found["backend_version"], READ_WHERE_BUILT):
        raise EngineMismatchError(
            f"Target '{target}' was planned with {found['backend']} {planned['backend_version']}, this machine has "
            f"{found['backend_version']}: the engine's id would not describe it. Plan with "
            f"target_defs.{target}.backend_version={found['backend_version']} (the version on that target's "
            "machines), or install the planned version here."
        )
