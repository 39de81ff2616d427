"""Segmented running aggregates over the rows of matches (MEASURES).

What: the labels of every match lie end to end in one array of "elements"
(``MatchArrays.labels``), match ``i`` owning ``offsets[i]:offsets[i + 1]``.
Given a value per element and a mask of the elements that count (rows mapped
to the aggregated variable, value not NULL), each kernel writes, for every
element, the aggregate over the counted elements of its match up to and
including it: a running SUM (BIGINT, with overflow detection; DOUBLE, in
exactly the order and arithmetic of Python's ``sum``) or the position of the
running MIN/MAX (the first extreme is kept, as Python's ``min``/``max`` do).
measures.py reads the value at each output row's running or final end.
Why kernels: a float sum must be sequential per match to be bit-identical to
the interpreter (numpy's pairwise sums are not, and subtracting prefix sums
across matches is not exact); the bodies are plain functions so that the
same code compiles with ``numba.njit`` now and ``numba.cuda.jit(device=True)``
later (one thread per match).
Cost: one pass over the elements, O(total match length).
"""

from __future__ import annotations

import math

import numpy as np

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
# Python 3.12 made sum() of floats compensated (Neumaier); the interpreter's
# SUM and AVG of DOUBLE are whatever sum() does on this Python.
COMPENSATED_SUM = sum([1e100, 1.0, -1e100]) != 0.0
# Below this many elements the plain bodies beat numba's compile time.
JIT_MIN_ELEMENTS = 20_000


def running_sum_int(values, take, offsets, out):
    """Running int64 sums per segment; True (and stop) on overflow."""
    for i in range(offsets.shape[0] - 1):
        acc = 0
        for e in range(offsets[i], offsets[i + 1]):
            if take[e]:
                x = int(values[e])
                if (x > 0 and acc > INT64_MAX - x) or (x < 0 and acc < INT64_MIN - x):
                    return True
                acc = acc + x
            out[e] = acc
    return False


def running_sum_float(values, take, offsets, compensated, out):
    """Running float64 sums per segment, as Python's ``sum`` of the values:
    ``0 + x0`` first, then left to right, compensated on Python >= 3.12
    (Neumaier, with CPython's final correction rule)."""
    for i in range(offsets.shape[0] - 1):
        f = 0.0
        c = 0.0
        n = 0
        for e in range(offsets[i], offsets[i + 1]):
            if take[e]:
                x = float(values[e])
                if n == 0:
                    f = 0.0 + x
                elif compensated:
                    t = f + x
                    if abs(f) >= abs(x):
                        c += (f - t) + x
                    else:
                        c += (x - t) + f
                    f = t
                else:
                    f = f + x
                n += 1
            if compensated and c != 0.0 and math.isfinite(c):
                out[e] = f + c
            else:
                out[e] = f


def running_arg_extreme(keys, take, offsets, want_max, out):
    """Per element, the element holding the running MIN (MAX if ``want_max``)
    of its segment's counted keys, the first of equal ones; -1 if none yet."""
    for i in range(offsets.shape[0] - 1):
        best = -1
        for e in range(offsets[i], offsets[i + 1]):
            if take[e]:
                if best < 0:
                    best = e
                elif want_max:
                    if keys[e] > keys[best]:
                        best = e
                elif keys[e] < keys[best]:
                    best = e
            out[e] = best


_compiled = None


def _cpu_kernels():
    """numba.njit versions, compiled on first use; None without numba."""
    global _compiled
    if _compiled is None:
        try:
            import numba
        except ImportError:                       # numba is the `cpu` extra
            _compiled = False
            return None
        jit = numba.njit(nogil=True)
        _compiled = (jit(running_sum_int), jit(running_sum_float), jit(running_arg_extreme))
    return _compiled or None


def _pick(n: int, compiled):
    if compiled is None:
        compiled = n >= JIT_MIN_ELEMENTS
    kernels = _cpu_kernels() if compiled else None
    return kernels or (running_sum_int, running_sum_float, running_arg_extreme)


def segmented_sum(values: np.ndarray, take: np.ndarray, offsets: np.ndarray,
                  compiled=None):
    """Running sums of ``values`` (int64 or float64) where ``take``, per segment.

    Returns ``(out, overflow)``; ``overflow`` is True when an int64 sum left
    the BIGINT range (``out`` is then incomplete). ``compiled``: None picks
    numba for large inputs, the plain bodies for small ones.

    >>> import numpy as np
    >>> out, bad = segmented_sum(np.array([1, 2, 3, 4]), np.array([True, False, True, True]),
    ...                          np.array([0, 2, 4]))
    >>> out.tolist(), bad
    ([1, 1, 3, 7], False)
    """
    n = values.shape[0]
    sum_int, sum_float, _ = _pick(n, compiled)
    if values.dtype.kind == "f":
        out = np.empty(n, dtype=np.float64)
        sum_float(values.astype(np.float64, copy=False), take, offsets, COMPENSATED_SUM, out)
        return out, False
    out = np.empty(n, dtype=np.int64)
    bad = sum_int(values.astype(np.int64, copy=False), take, offsets, out)
    return out, bool(bad)


def segmented_arg_extreme(keys: np.ndarray, take: np.ndarray, offsets: np.ndarray,
                          want_max: bool, compiled=None) -> np.ndarray:
    """Per element, the element index of the running MIN/MAX of its segment
    (first of equal keys; -1 before the first counted element).

    >>> import numpy as np
    >>> segmented_arg_extreme(np.array([3, 1, 1, 5]), np.ones(4, bool), np.array([0, 3, 4]),
    ...                       False).tolist()
    [0, 1, 1, 3]
    """
    n = keys.shape[0]
    out = np.empty(n, dtype=np.int64)
    _pick(n, compiled)[2](keys, take, offsets, bool(want_max), out)
    return out
