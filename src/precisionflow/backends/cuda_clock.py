"""Device-side timing on an NVIDIA GPU: CUDA events around the work, through the CUDA runtime
library ONNX Runtime's CUDA provider already loads (ctypes; no torch, no cupy on a lean GPU node).

A host clock around a synchronous inference call measures the launch overhead, the GPU's work and
the final synchronisation together. Here the engine runs on a stream we own (ONNX Runtime's
`user_compute_stream`), the call returns once its work is queued (run option
`disable_synchronize_execution_providers`), and two events recorded on that stream bracket the work:
their difference is what the GPU took, gaps it sat starved by the host included, host code after
the last kernel excluded. trtexec reports GPU compute time the same way.
"""

import ctypes
from typing import Callable, Optional

CUDART_NAMES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so")
NON_BLOCKING = 1  # cudaStreamNonBlocking: no implicit synchronisation with the legacy default stream


def load_cudart() -> Optional[ctypes.CDLL]:
    """The CUDA runtime library, or None where none can be loaded (no GPU stack: host timing only)."""
    for name in CUDART_NAMES:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


class CudaError(RuntimeError):
    pass


class CudaClock:
    """One CUDA stream and two events: `stream_pointer` is handed to ONNX Runtime, `time(fn)` gives
    the device seconds of the work fn() queues on that stream."""

    def __init__(self, cudart: ctypes.CDLL):
        self.cudart = cudart
        self.stream = ctypes.c_void_p()
        self._check(cudart.cudaStreamCreateWithFlags(ctypes.byref(self.stream), NON_BLOCKING), "cudaStreamCreateWithFlags")
        self.start, self.end = ctypes.c_void_p(), ctypes.c_void_p()
        for event in (self.start, self.end):
            self._check(cudart.cudaEventCreate(ctypes.byref(event)), "cudaEventCreate")

    def _check(self, status: int, call: str) -> None:
        if status != 0:
            raise CudaError(f"{call} failed with CUDA error {status}")

    @property
    def stream_pointer(self) -> int:
        return int(self.stream.value or 0)

    def time(self, queue_work: Callable[[], object]) -> float:
        """Seconds the GPU spent between the events recorded before and after queue_work()."""
        self._check(self.cudart.cudaEventRecord(self.start, self.stream), "cudaEventRecord")
        queue_work()
        self._check(self.cudart.cudaEventRecord(self.end, self.stream), "cudaEventRecord")
        self._check(self.cudart.cudaEventSynchronize(self.end), "cudaEventSynchronize")
        elapsed_ms = ctypes.c_float()
        self._check(self.cudart.cudaEventElapsedTime(ctypes.byref(elapsed_ms), self.start, self.end), "cudaEventElapsedTime")
        return elapsed_ms.value / 1000.0

    def synchronize(self) -> None:
        self._check(self.cudart.cudaStreamSynchronize(self.stream), "cudaStreamSynchronize")
