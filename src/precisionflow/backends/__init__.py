"""Engine backends behind one small interface.

A backend module provides:
  build(graph_path, out_dir, engine_params, target_def, precision) -> dict   # engine description (engine.json)
  load(engine_dir, description) -> Engine                          # refuses other devices/runtimes
  describe_runtime(target_def) -> dict                             # what this machine would use
An Engine has run(batch: np.ndarray) -> np.ndarray and `description`.
"""

import importlib

from precisionflow.errors import ConfigError

BACKENDS = {
    "onnxruntime": "precisionflow.backends.onnxruntime_backend",
    "tensorrt": "precisionflow.backends.tensorrt_backend",
}


def get_backend(name: str):
    if name not in BACKENDS:
        raise ConfigError(f"engine.backend: expected one of {sorted(BACKENDS)}, found '{name}'.")
    return importlib.import_module(BACKENDS[name])
