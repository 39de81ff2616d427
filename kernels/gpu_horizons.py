"""A time limit's per-row horizons on a CUDA device, one thread per row.

What: ``horizon[s]`` as gpu_mr/horizons.py defines it (the first row at or
after s of s's partition whose clock is NULL or above ``last[s]``, the last
clock value in time for a match starting at s; the partition's end if none;
s itself when s's clock is NULL), for rows already sorted on the device.
Thread s finds its partition by a binary search over the partition offsets
and its horizon by a binary search over its partition's rows from s: the
clock ascends there with its NULLs at one end (after the rows when NULLS
LAST; before s when NULLS FIRST), so "NULL or above last[s]" is false then
true along ``[s, end)``.
Why: the host's sweep (horizons.py) is sequential per partition; on a
device every row is independent, so that the horizons of data already on
the device never come to the host. The body is a plain function, checked
against the host's sweep on the CPU (tests/test_time_limits.py).
Cost: O(log partitions + log partition length) per row, no extra memory.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from . import compiled_once
from .chunks import partition_of


def horizon_at(s, values, valid, last, offsets):
    """The horizon of row ``s`` (see the module docstring)."""
    if not valid[s]:
        return s
    lo = partition_of(s, offsets, 0, offsets.shape[0] - 1)    # s's partition
    end = offsets[lo + 1]
    a, b = s, end                               # first q in [s, end) out of time
    bound = last[s]
    while a < b:
        mid = (a + b) // 2
        if valid[mid] and values[mid] <= bound:
            a = mid + 1
        else:
            b = mid
    return a


@compiled_once
def kernels():
    """The kernels by name (numba.cuda compiles each on its first launch)."""
    # module-global ``cuda``: the simulator swaps in its own (see gpu_scan.py)
    at = cuda.jit(device=True)(horizon_at)

    @cuda.jit
    def horizons(values, valid, last, offsets, out):
        s = cuda.grid(1)
        if s < out.shape[0]:
            out[s] = at(s, values, valid, last, offsets)

    return {"horizons": horizons}


def run_horizons(backend, values, valid, last, offsets) -> object:
    """Every row's horizon (device int64) for device ``values`` (int64
    clock storage), ``valid`` (bool), ``last`` (int64) and ``offsets``."""
    xp = backend.xp
    n = int(values.shape[0])
    out = xp.empty(n, dtype=np.int64)
    backend.launch(kernels()["horizons"], n, values, valid, last,
                   backend.to_device(np.asarray(offsets, dtype=np.int64)), out)
    return out
