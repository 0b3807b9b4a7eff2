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

from precisionflow.errors import CudaError

CUDART_NAMES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so")
NON_BLOCKING = 1  # cudaStreamNonBlocking: no implicit synchronisation with the legacy default stream
HOST_TO_DEVICE, DEVICE_TO_HOST = 1, 2  # cudaMemcpyKind


def load_cudart() -> Optional[ctypes.CDLL]:
    """The CUDA runtime library, or None where none can be loaded (no GPU stack: host timing only)."""
    for name in CUDART_NAMES:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def check_status(cudart, status: int, call: str) -> None:
    """A failed CUDA call, named with CUDA's own error string: a device fault, never "rebuild the engine"."""
    if status != 0:
        name = ""
        if hasattr(cudart, "cudaGetErrorString"):
            cudart.cudaGetErrorString.restype = ctypes.c_char_p
            name = (cudart.cudaGetErrorString(status) or b"").decode(errors="replace")
        raise CudaError(
            f"{call} failed with CUDA error {status}{f' ({name})' if name else ''}. This is a fault of the "
            "GPU, its driver or the memory a kernel touched (error 700: an illegal address), not of the "
            "engine's provenance: rebuilding will not help. Check nvidia-smi and the job's log; a sticky "
            "error leaves the process unusable, so the job must be run again in a new process."
        )


class DeviceBuffer:
    """`nbytes` of device memory, freed once (close or garbage collection)."""

    def __init__(self, cudart, nbytes: int):
        self.cudart, self.nbytes = cudart, max(int(nbytes), 1)
        self.pointer = ctypes.c_void_p()
        check_status(cudart, cudart.cudaMalloc(ctypes.byref(self.pointer), ctypes.c_size_t(self.nbytes)), "cudaMalloc")

    @property
    def address(self) -> int:
        return int(self.pointer.value or 0)

    def copy_from_host(self, host_address: int, nbytes: int, stream: ctypes.c_void_p) -> None:
        check_status(
            self.cudart,
            self.cudart.cudaMemcpyAsync(
                self.pointer, ctypes.c_void_p(host_address), ctypes.c_size_t(nbytes), HOST_TO_DEVICE, stream
            ),
            "cudaMemcpyAsync (host to device)",
        )

    def copy_to_host(self, host_address: int, nbytes: int, stream: ctypes.c_void_p) -> None:
        check_status(
            self.cudart,
            self.cudart.cudaMemcpyAsync(
                ctypes.c_void_p(host_address), self.pointer, ctypes.c_size_t(nbytes), DEVICE_TO_HOST, stream
            ),
            "cudaMemcpyAsync (device to host)",
        )

    def close(self) -> None:
        if self.pointer.value:
            self.cudart.cudaFree(self.pointer)
            self.pointer = ctypes.c_void_p()

    def __del__(self):
        self.close()


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
        check_status(self.cudart, status, call)

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

    def close(self) -> None:
        """Destroy the events and the stream (once): a context that goes away releases what it made."""
        for event in (self.start, self.end):
            if event.value:
                self.cudart.cudaEventDestroy(event)
                event.value = None
        if self.stream.value:
            self.cudart.cudaStreamDestroy(self.stream)
            self.stream.value = None

    def __del__(self):
        if getattr(self, "cudart", None) is not None and hasattr(self, "end"):
            self.close()


class QueuedRun:
    """A prepared batch on a CudaClock's stream, run whole (calling it: the device seconds, as
    CudaClock.time) or in two halves: start() queues the work between two events and returns at
    once; finish(slot) waits until the GPU is past the second and returns the seconds between them
    -- the batch's own time on the GPU, from when the stream reached it (a batch queued behind
    another starts when that one ends). A caller that queues the next batch before it waits on the
    last keeps the GPU busy while the host answers; the stream still runs the batches one after
    another. At most RING - 1 may be in flight."""

    RING = 4

    def __init__(self, clock: CudaClock, queue_work: Callable[[], object]):
        self.clock, self.queue_work = clock, queue_work
        self.events = [(self._event(), self._event()) for _ in range(self.RING)]  # (begins, ends) per slot
        self.started = 0

    def _event(self) -> ctypes.c_void_p:
        event = ctypes.c_void_p()
        check_status(self.clock.cudart, self.clock.cudart.cudaEventCreate(ctypes.byref(event)), "cudaEventCreate")
        return event

    def __call__(self) -> float:
        return self.clock.time(self.queue_work)

    def start(self) -> int:
        slot = self.started % self.RING
        begins, ends = self.events[slot]
        cudart, stream = self.clock.cudart, self.clock.stream
        check_status(cudart, cudart.cudaEventRecord(begins, stream), "cudaEventRecord")
        self.queue_work()
        check_status(cudart, cudart.cudaEventRecord(ends, stream), "cudaEventRecord")
        self.started += 1
        return slot

    def finish(self, slot: int) -> float:
        begins, ends = self.events[slot]
        cudart = self.clock.cudart
        check_status(cudart, cudart.cudaEventSynchronize(ends), "cudaEventSynchronize")
        elapsed_ms = ctypes.c_float()
        check_status(cudart, cudart.cudaEventElapsedTime(ctypes.byref(elapsed_ms), begins, ends), "cudaEventElapsedTime")
        return elapsed_ms.value / 1000.0

    def close(self) -> None:
        for event in (event for pair in self.events for event in pair):
            if event.value:
                self.clock.cudart.cudaEventDestroy(event)
                event.value = None

    def __del__(self):
        if getattr(self, "events", None):
            self.close()
