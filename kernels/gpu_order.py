"""Whether sorted-looking rows are in order, and where partitions change, in
one pass on a CUDA device.

What: for up to ``MAX_ARRAYS`` key arrays that compare plainly ascending
(gpu_mr/device_frames.py builds them: NULL and NaN helpers, values with
DESC turned over), thread i compares rows i and i + 1 lexicographically:
a pair in the wrong order sets ``wrong[0]``, and ``changed[i]`` says
whether the pair differs in one of the first ``n_partition`` arrays (a new
partition starts at row i + 1).
Why: the array expressions for the same check (``a[:-1] > a[1:]``, then
``==``, ``&``, ``any`` per array, and ``!=`` again for the offsets) read
each key array four to five times and write a byte per row each time: on
an H100 the order check of 1e9 rows over two int64 keys took 47 ms, where
one read of the keys takes under 6 ms (2026-11-28).
Cost: one read of each key array (neighbours share cache lines), a byte
per row written when there are partition keys.
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
    def adjacent_pairs(pairs, n_arrays, n_partition, a0, a1, a2, a3, wrong, changed):
        i = cuda.grid(1)
        if i < pairs:
            k, bad = order(i, n_arrays, a0, a1, a2, a3)
            if bad:
                wrong[0] = 1            # every writer writes the same value
            if changed.shape[0] > 0:
                changed[i] = k < n_partition

    return {"adjacent": adjacent_pairs}


def adjacent_order(backend, arrays: list, n_partition: int) -> tuple:
    """``(in order, changed)`` for ``arrays`` (1 to ``MAX_ARRAYS`` device
    key arrays of equal length n >= 2, most significant first): whether
    every adjacent pair is in order, and (device bool, n - 1) whether each
    pair differs in one of the first ``n_partition`` arrays (None when
    ``n_partition`` is 0)."""
    if not 1 <= len(arrays) <= MAX_ARRAYS:
        raise ValueError(f"adjacent_order takes 1 to {MAX_ARRAYS} key arrays, "
                         f"not {len(arrays)}")
    xp = backend.xp
    n = int(arrays[0].shape[0])
    padded = list(arrays) + [arrays[0]] * (MAX_ARRAYS - len(arrays))   # never read
    wrong = xp.zeros(1, dtype=np.int32)
    changed = xp.empty(n - 1 if n_partition else 0, dtype=np.bool_)
    backend.launch(kernels()["adjacent"], n - 1, np.int64(n - 1), np.int64(len(arrays)),
                   np.int64(n_partition), *padded, wrong, changed)
    return not bool(backend.to_host(wrong)[0]), (changed if n_partition else None)
