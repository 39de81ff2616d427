"""Large scratch and result arrays from Arrow's memory pool.

What: ``empty(shape, dtype)`` and ``zeros(shape, dtype)``: numpy arrays
whose memory comes from pyarrow's default memory pool (mimalloc or
jemalloc) from ``POOL_MIN_BYTES`` up, from numpy below it.
Why: numpy takes large arrays from glibc, which maps each one afresh and
unmaps it when it is freed, so every call of the engine faults in and
zeroes again the pages it freed a moment before. On the CPU engine's V-shape
over 1e7 rows, run in a loop, that was about 26 ms of 68 (the per-row
pre-states and classes, the per-match arrays: some 150 MB a call). Arrow's
pool keeps freed pages and hands them out again.
Cost: a pool allocation takes about the time of numpy's; freed memory
stays with the pool until its allocator returns it to the system (after a
short delay). Arrays keep their pool buffer alive through ``.base``.
"""

from __future__ import annotations

import numpy as np

# Below this, numpy's own small-array cache and glibc's heap serve as well.
POOL_MIN_BYTES = 1 << 20

try:
    import pyarrow as _pa
except ImportError:                 # the kernels still run on numpy alone
    _pa = None


def empty(shape, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array, from the pool when large."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    size = count * dtype.itemsize
    if _pa is None or size < POOL_MIN_BYTES:
        return np.empty(shape, dtype=dtype)
    buffer = _pa.allocate_buffer(size)
    return np.frombuffer(buffer, dtype=dtype, count=count).reshape(shape)


def zeros(shape, dtype) -> np.ndarray:
    """:func:`empty`, filled with zeros."""
    out = empty(shape, dtype)
    out.fill(0)
    return out
