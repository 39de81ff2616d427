"""Each row's place in its partition on a CUDA device, one thread per row.

What: ``pos[r]`` (rows before r in its partition) and ``rest[r]`` (rows after
it), for the DEFINE masks' PREV/NEXT: row r - k exists in r's partition when
``pos[r] >= k``. Thread r finds its partition by a binary search over the
partitions its block of rows spans. Either output may be omitted (an
empty array).
Why: the array expression for the same thing (an arange, a searchsorted,
two gathers and their differences) holds six int64 temporaries per row at
once: 48 GB for 1e9 rows, more than the columns themselves, and enough to
run an 80 GB device out of memory. Here nothing is allocated beyond the
outputs, which are int32 whenever the rows fit.
Cost: a binary search per block of 1,024 rows, then per row one over the
partitions its block spans (usually one step), one write per output.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from . import compiled_once
from .chunks import partition_of


# Rows per block of the two-level search: each block's first and last rows'
# partitions are found first (one binary search per block), so a row searches
# only the partitions its block spans, usually one or two.
BLOCK_SHIFT = 10


@compiled_once
def kernels():
    """The kernels by name (numba.cuda compiles each on its first launch)."""
    # module-global ``cuda``: the simulator swaps in its own (see gpu_scan.py)
    @cuda.jit
    def positions(offsets, block_first, pos, rest):
        r = cuda.grid(1)
        n = offsets[offsets.shape[0] - 1]
        if r < n:
            b = r >> BLOCK_SHIFT
            p = partition_of(r, offsets, block_first[b], block_first[b + 1] + 1)
            if pos.shape[0] > 0:
                pos[r] = r - offsets[p]
            if rest.shape[0] > 0:
                rest[r] = offsets[p + 1] - 1 - r

    return {"positions": positions}


def run_positions(backend, offsets, n: int, want_pos: bool, want_rest: bool):
    """``(pos, rest)`` as device arrays for ``n`` rows split by ``offsets``
    (host or device, n + 1 entries ending at n); an output not wanted is None."""
    xp = backend.xp
    dtype = np.int32 if n < 2 ** 31 else np.int64
    offs = xp.asarray(offsets, dtype=np.int64)
    # the partition of each block's first row, then of the last row (n - 1):
    # block b's rows lie in partitions block_first[b] .. block_first[b + 1]
    firsts = xp.minimum(xp.arange(0, n + (1 << BLOCK_SHIFT), 1 << BLOCK_SHIFT,
                                  dtype=np.int64), max(n - 1, 0))
    block_first = xp.searchsorted(offs[1:], firsts, side="right").astype(np.int64)
    pos = xp.empty(n if want_pos else 0, dtype=dtype)
    rest = xp.empty(n if want_rest else 0, dtype=dtype)
    backend.launch(kernels()["positions"], n, offs, block_first, pos, rest)
    return (pos if want_pos else None), (rest if want_rest else None)
