"""Which class values occur in a column of small integers, on a CUDA device.

What: for per-row values below 256 (the DEFINE masks' variable bitmasks,
eight variables at most), the set of values present, as a host bool array.
Each thread ORs the values of its rows (a grid-stride loop: neighbouring
threads read neighbouring bytes) into four 64-bit words of its own, and one
reduction over the threads' words gives the set.
Why: ``cupy.bincount`` does the same with an atomic add per row into a
handful of counters, all rows contending for the same few addresses: on an
H100 it took 37 ms for 1e9 rows (27 GB/s, 2026-11-28), as long as the whole
DFA scan of 10,000 partitions. Here each thread writes once and the only
shared work is a 32-byte-per-thread reduction.
Cost: one read of the column; ``THREADS`` x 32 bytes of scratch.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from . import compiled_once

# Threads of the grid-stride loop on a device: enough to fill any H100-class
# GPU, few enough that their words reduce in a blink.
THREADS = 1 << 20


def or_into_words(values, lo, hi, step):
    """The four 64-bit words whose bit v (word v // 64, bit v % 64) is set
    for each value v among ``values[lo:hi:step]``."""
    w0 = np.uint64(0)
    w1 = np.uint64(0)
    w2 = np.uint64(0)
    w3 = np.uint64(0)
    for i in range(lo, hi, step):
        v = np.uint64(values[i])
        bit = np.uint64(1) << (v & np.uint64(63))
        word = v >> np.uint64(6)
        if word == 0:
            w0 |= bit
        elif word == 1:
            w1 |= bit
        elif word == 2:
            w2 |= bit
        else:
            w3 |= bit
    return w0, w1, w2, w3


@compiled_once
def kernels():
    """The kernels by name (numba.cuda compiles each on its first launch)."""
    # module-global ``cuda``: the simulator swaps in its own (see gpu_scan.py)
    body = cuda.jit(device=True)(or_into_words)

    @cuda.jit
    def present_words(values, words):
        t = cuda.grid(1)
        if t < words.shape[0]:
            w0, w1, w2, w3 = body(values, t, values.shape[0], words.shape[0])
            words[t, 0] = w0
            words[t, 1] = w1
            words[t, 2] = w2
            words[t, 3] = w3

    return {"present": present_words}


def present_values(backend, values, n_values: int) -> np.ndarray:
    """Host bool array of ``n_values`` (at most 256): whether each value
    occurs in the device integer array ``values`` (every value below
    ``n_values``)."""
    if not 0 < n_values <= 256:
        raise ValueError(f"present_values counts values below 256, not {n_values}")
    xp = backend.xp
    n = int(values.shape[0])
    threads = max(1, min(n, 64 if backend.simulated else THREADS))
    words = xp.zeros((threads, 4), dtype=np.uint64)
    if n:
        backend.launch(kernels()["present"], threads, values, words)
    while words.shape[0] > 1:          # halving ORs: plain array operations on any backend
        half = words.shape[0] // 2
        folded = words[:half] | words[half:2 * half]
        if words.shape[0] % 2:
            folded[0] |= words[-1]
        words = folded
    merged = backend.to_host(words[0])
    bits = np.unpackbits(merged.astype("<u8").view(np.uint8), bitorder="little")
    return bits[:n_values].astype(bool)
