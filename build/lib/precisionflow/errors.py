"""Errors a user can cause. Each message says what was expected, what was found, where, what to do."""


class PrecisionflowError(Exception):
    """Base class: the CLI prints these without a traceback."""


class ConfigError(PrecisionflowError):
    """The configuration (conf/ or overrides) is invalid."""


class DataError(PrecisionflowError):
    """Input data is missing, unreadable or inconsistent."""


class StageError(PrecisionflowError):
    """A stage could not produce its output (e.g. training diverged, export mismatch)."""


class LineageError(PrecisionflowError):
    """An artifact belongs to another model/graph/runtime than the one it is applied to."""


class EngineMismatchError(PrecisionflowError):
    """An engine was built for another device or runtime version than the current one."""


class CudaError(PrecisionflowError):
    """A CUDA runtime call failed: a device or driver fault, not a wrong engine (rebuilding will not help)."""
