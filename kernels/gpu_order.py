"""Whether sorted-looking rows are in order, and where partitions change, in
one pass on a CUDA device.

What: for up to ``MAX_ARRAYS`` key arrays that compare plainly ascending
(gpu_mr/device_frames.py builds them: NULL and NaN helpers, values with
DESC turned over), thread i compares rows i and i + 1 lexicographically:
a pair in the wrong order sets ``wrong[0]``, and a pair that differs in
one of the first ``n_partition`` arrays (a new partition starts at row
i + 1) appends i + 1 to ``starts`` by an atomic add on ``count`` (few
partitions: few atomics), or sets ``changed[i]`` where the caller asks for
a flag per pair instead (too many partitions to note).
Why: the array expressions for the same check (``a[:-1] > a[1:]``, then
``==``, ``&``, ``any`` per array, and ``!=`` again for the offsets) read
each key array four to five times and write a byte per row each time: on
an H100 the order check of 1e9 rows over two int64 keys took 47 ms, where
one read of the keys takes under 6 ms (2026-11-28).
Cost: one read of each key array (neighbours share cache lines), 8 bytes
per partition noted (a byte per row where there are more than
``MAX_NOTED_STARTS`` partitions, and a second pass).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from . import compiled_once
from .scan import register_jitable

MAX_ARRAYS = 4


@register_jitable
def _compare(x, y):
    """0 when equal, 1 when ``x`` sorts first, 2 when ``y`` does."""
    if x == y:
        return 0
    return 1 if x < y else 2


@register_jitable
def pair_order(i, n_arrays, a0, a1, a2, a3):
    """``(k, wrong)``: the first array in which rows i and i+1 differ
    (``n_arrays`` when none does) and whether row i+1 sorts before row i.
    Each array is compared in its own type: a variable holding values of
    several arrays would be unified to one type by numba (int64 timestamps
    as float64, where neighbours 1 ns apart compare equal)."""
    c = _compare(a0[i], a0[i + 1])
    if c != 0:
        return 0, c == 2
    if n_arrays > 1:
        c = _compare(a1[i], a1[i + 1])
        if c != 0:
            return 1, c == 2
    if n_arrays > 2:
        c = _compare(a2[i], a2[i + 1])
        if c != 0:
            return 2, c == 2
    if n_arrays > 3:
        c = _compare(a3[i], a3[i + 1])
        if c != 0:
            return 3, c == 2
    return n_arrays, False


@compiled_once
def kernels():
    """The kernels by name (numba.cuda compiles each on its first launch)."""
    # module-global ``cuda``: the simulator swaps in its own (see gpu_scan.py)
    order = cuda.jit(device=True)(pair_order)

    @cuda.jit
    def adjacent_pairs(pairs, n_arrays, n_partition, a0, a1, a2, a3, wrong, changed, starts,
                       count):
        i = cuda.grid(1)
        if i < pairs:
            k, bad = order(i, n_arrays, a0, a1, a2, a3)
            if bad:
                wrong[0] = 1            # every writer writes the same value
            if changed.shape[0] > 0:
                changed[i] = k < n_partition
            elif k < n_partition:       # a partition starts at row i + 1: note it
                slot = cuda.atomic.add(count, 0, 1)
                if slot < starts.shape[0]:
                    starts[slot] = i + 1

    return {"adjacent": adjacent_pairs}


# Partition starts noted by the pass itself (an atomic append each), up to
# this many; past it the pass runs again writing a flag per pair (a
# byte per row, then a compaction: 6 of the check's 14 ms at 1e9 rows in
# 10,000 partitions on an H200, 2026-11-28, against 7 ms for one partition).
MAX_NOTED_STARTS = 1 << 22


def adjacent_order(backend, arrays: list, n_partition: int,
                   max_noted: int = MAX_NOTED_STARTS) -> tuple:
    """``(in order, partition starts)`` for ``arrays`` (1 to ``MAX_ARRAYS``
    device key arrays of equal length n >= 2, most significant first):
    whether every adjacent pair is in order, and the rows (host int64,
    ascending) after a pair that differs in one of the first
    ``n_partition`` arrays: where a partition starts (None when
    ``n_partition`` is 0)."""
    if not 1 <= len(arrays) <= MAX_ARRAYS:
        raise ValueError(f"adjacent_order takes 1 to {MAX_ARRAYS} key arrays, "
                         f"not {len(arrays)}")
    xp = backend.xp
    n = int(arrays[0].shape[0])
    padded = list(arrays) + [arrays[0]] * (MAX_ARRAYS - len(arrays))   # never read
    wrong = xp.zeros(1, dtype=np.int32)
    count = xp.zeros(1, dtype=np.int64)
    starts = xp.empty(min(n - 1, max_noted) if n_partition else 0, dtype=np.int64)
    no_flags = xp.empty(0, dtype=np.bool_)
    args = (np.int64(n - 1), np.int64(len(arrays)), np.int64(n_partition), *padded, wrong)
    backend.launch(kernels()["adjacent"], n - 1, *args, no_flags, starts, count)
    in_order = not bool(backend.to_host(wrong)[0])
    if not n_partition:
        return in_order, None
    noted = int(backend.to_host(count)[0])
    if noted <= starts.shape[0]:
        return in_order, np.sort(np.asarray(backend.to_host(starts[:noted]), dtype=np.int64))
    changed = xp.empty(n - 1, dtype=np.bool_)      # too many to note: a flag per pair
    backend.launch(kernels()["adjacent"], n - 1, *args, changed, starts[:0], count)
    return in_order, np.asarray(backend.to_host(xp.flatnonzero(changed)), np.int64) + 1
