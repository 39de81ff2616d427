"""Where the GPU engine's arrays live: cupy on a CUDA device, or numpy under
numba's CUDA simulator.

What: :func:`detect` returns a :class:`Backend` -- the array module (``xp``),
numba's ``cuda`` module, and whether it is the simulator -- or the reason no
device can be used. The GPU engine's code is written once against ``xp`` (the
subset of the numpy API cupy has) and ``cuda.jit`` kernels, so the same code
runs on a real device and, with ``NUMBA_ENABLE_CUDASIM=1``, on machines
without one (CI), with numpy standing in for cupy.
Why: as awkward-array's backend objects (STYLE.md): one code path serves both,
and the simulator exercises the GPU engine's own path, not the CPU engine's.
Cost: detection runs once per process (importing numba.cuda and cupy takes
about a second); moves between host and device are explicit calls here.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np


@dataclass(frozen=True)
class Backend:
    xp: object               # cupy, or numpy under the simulator
    cuda: object             # numba.cuda (the simulator's when simulated)
    simulated: bool
    device: str              # the device's name, for explain() and benchmarks

    def to_device(self, array):
        """One contiguous device copy of a host array (under the simulator no
        copy, unless the array is read-only: the simulator writes every
        kernel argument back after a launch)."""
        if self.simulated:
            out = np.ascontiguousarray(array)
            return out if out.flags.writeable else out.copy()
        return self.xp.ascontiguousarray(self.xp.asarray(array))

    def to_host(self, array) -> np.ndarray:
        """A host copy of a device array; large ones come through pinned
        staging buffers (transfer.py: a copy into pageable memory ran at
        about 3 GB/s on an H100 machine)."""
        if self.simulated or isinstance(array, np.ndarray):
            return np.asarray(array)
        from .transfer import to_host_staged
        with span(self, "to host"):
            return to_host_staged(self, array)

    def scalar(self, value) -> int:
        """A device scalar (a 0-d array) as a host int: one small transfer."""
        return int(value)

    def threads_per_block(self, jobs: int) -> int:
        # The simulator runs each thread of a block as a Python thread: small
        # blocks keep it quick; on a device 128 keeps every SM busy.
        return 8 if self.simulated else 128

    def launch(self, kernel, jobs: int, *args) -> None:
        """Run ``kernel`` with at least ``jobs`` threads (kernels check bounds)."""
        if jobs <= 0:
            return
        block = self.threads_per_block(jobs)
        grid = (jobs + block - 1) // block
        if _kernel_times is None:
            kernel[grid, block](*args)
            return
        self.synchronize()              # profiling: each launch timed alone
        start = time.perf_counter()
        kernel[grid, block](*args)
        self.synchronize()
        _record(getattr(getattr(kernel, "py_func", None), "__name__", type(kernel).__name__),
                time.perf_counter() - start)

    def synchronize(self) -> None:
        if not self.simulated:
            self.cuda.synchronize()

    def free_memory(self):
        """Bytes the device can still give (its free memory plus what the
        array pool holds unused); None under the simulator."""
        if self.simulated:
            return None
        free, _total = self.xp.cuda.runtime.memGetInfo()
        pool = self.xp.get_default_memory_pool()
        return int(free) + int(pool.total_bytes() - pool.used_bytes())

    def release_memory(self) -> None:
        if not self.simulated:
            self.xp.get_default_memory_pool().free_all_blocks()

    @staticmethod
    def is_out_of_memory(exc: BaseException) -> bool:
        """cupy's OutOfMemoryError, or a CUDA driver error saying so (a
        numba.cuda launch or copy)."""
        return (type(exc).__name__ == "OutOfMemoryError"
                or "CUDA_ERROR_OUT_OF_MEMORY" in str(exc) or "out of memory" in str(exc))


_detected: Union[Backend, str, None] = None
# {kernel name: (seconds, launches)} while kernel_times() is active, else None
_kernel_times: Optional[dict] = None


@contextlib.contextmanager
def span(backend: "Backend", name: str):
    """While ``kernel_times`` is active, time the block (synchronised at
    both ends) under ``[name]``, kernels and array operations alike; else
    nothing. The engine's stages are spans, so one profiled run says where
    its time goes."""
    if _kernel_times is None:
        yield
        return
    backend.synchronize()
    start = time.perf_counter()
    try:
        yield
    finally:
        backend.synchronize()
        _record(f"[{name}]", time.perf_counter() - start)


def _record(key: str, seconds: float) -> None:
    total, count = _kernel_times.get(key, (0.0, 0))
    _kernel_times[key] = (total + seconds, count + 1)


@contextlib.contextmanager
def kernel_times():
    """Time every kernel ``Backend.launch`` runs inside the block, each
    launch synchronised alone (for benchmarks: it removes any overlap), and
    every :func:`span`: yields ``{kernel name or [span]: (seconds, count)}``,
    filled as they run. Array-module operations (sorts, scans, reductions)
    count only inside spans."""
    global _kernel_times
    saved, _kernel_times = _kernel_times, {}
    try:
        yield _kernel_times
    finally:
        _kernel_times = saved


def simulator_requested() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def detect() -> Union[Backend, str]:
    """The backend of this process, or why there is none (a sentence naming
    the fix). Decided once per process."""
    global _detected
    if _detected is None:
        _detected = _probe()
    return _detected


def _probe() -> Union[Backend, str]:
    import importlib.util
    if not simulator_requested() and importlib.util.find_spec("cupy") is None:
        # Checked first: importing numba.cuda costs a second we need not spend.
        return ("no CUDA device: cupy is not installed (pip install 'gpu_mr[gpu]' on a machine "
                "with an NVIDIA GPU)")
    from .kernels import restore_numpy_names_numba_cuda_reads
    restore_numpy_names_numba_cuda_reads()
    try:
        from numba import cuda
    except ImportError:                                   # pragma: no cover
        return "numba is not installed (pip install 'gpu_mr[gpu]')"
    if simulator_requested():
        return Backend(np, cuda, True, "numba CUDA simulator")
    import cupy
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:            # no driver, or a broken one: cupy says which
        return f"no CUDA device: {exc}"
    if count == 0 or not cuda.is_available():
        return "no CUDA device is visible to this process"
    name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
    return Backend(cupy, cuda, False, name.decode() if isinstance(name, bytes) else str(name))

