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
from typing import Optional

import numpy as np

from . import buffers as B
from .prefetch import prefetch
from .threads import run_pieces, split, split_even

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
# Python 3.12 made sum() of floats compensated (Neumaier); the interpreter's
# SUM and AVG of DOUBLE are whatever sum() does on this Python.
COMPENSATED_SUM = sum([1e100, 1.0, -1e100]) != 0.0
# Below this many elements the plain Python bodies cost at most a few ms and
# never wait for numba to load or compile the kernels (cached on disk).
JIT_MIN_ELEMENTS = 2_000


# Segments ahead whose first row a kernel asks for (kernels/prefetch.py):
# each segment ends at a mispredicted loop exit the CPU cannot load past, and
# where matches lie far apart each waited for its row from memory (a SUM
# over 170,000 matches spread over 1e7 rows, one thread: 3.7 -> 1.3 ms).
PREFETCH_SEGMENTS = 16


# Every kernel walks segments (matches): segment i owns elements
# offsets[i]:offsets[i + 1], element e is row starts[i] + e - offsets[i] and
# counts when member[labels[e]] (the aggregated variable) and, if has_valid,
# valid[row] (the value is not NULL). Empty ``labels`` (EVERY_ROW): every
# element is a member, so an aggregate over all of a match's rows never
# makes the engine write the labels (engines/base.py DeferredMatchArrays).
# With per_element each element gets the value so far (RUNNING in ALL
# ROWS); else each segment gets its total. Elements and rows are indexed
# unsigned (they are never negative): numba then adds no negative-index
# wraparound test to each load and store (about a tenth of a kernel's time).

def segment_count(valid, has_valid, member, labels, starts, offsets, per_element, out):
    """Counted elements so far."""
    every = labels.shape[0] == 0
    m = offsets.shape[0] - 1
    for i in range(m):
        if has_valid and i + PREFETCH_SEGMENTS < m:
            prefetch(valid, starts[i + PREFETCH_SEGMENTS])
        c = 0
        base = starts[i] - offsets[i]
        for e in range(offsets[i], offsets[i + 1]):
            ue = np.uint64(e)             # unsigned: see above
            ur = np.uint64(base + e)
            if (every or member[labels[ue]]) and (not has_valid or valid[ur]):
                c += 1
            if per_element:
                out[ue] = c
        if not per_element:
            out[i] = c


def segment_sum_int(values, valid, has_valid, member, labels, starts, offsets, per_element,
                    out, counts):
    """Int64 sums so far, and in ``counts`` (unless empty) the counted
    elements so far (AVG needs both: one walk); True (and stop) when a sum
    leaves the BIGINT range."""
    every = labels.shape[0] == 0
    with_counts = counts.shape[0] > 0
    m = offsets.shape[0] - 1
    for i in range(m):
        if i + PREFETCH_SEGMENTS < m:
            prefetch(values, starts[i + PREFETCH_SEGMENTS])
        acc = 0
        n = 0
        base = starts[i] - offsets[i]
        for e in range(offsets[i], offsets[i + 1]):
            ue = np.uint64(e)             # unsigned: see above
            ur = np.uint64(base + e)
            if (every or member[labels[ue]]) and (not has_valid or valid[ur]):
                x = int(values[ur])
                if (x > 0 and acc > INT64_MAX - x) or (x < 0 and acc < INT64_MIN - x):
                    return True
                acc = acc + x
                n += 1
            if per_element:
                out[ue] = acc
                if with_counts:
                    counts[ue] = n
        if not per_element:
            out[i] = acc
            if with_counts:
                counts[i] = n
    return False


def segment_sum_float(values, valid, has_valid, member, labels, starts, offsets, per_element,
                      compensated, out, counts):
    """Float64 sums so far, as Python's ``sum`` of the values: ``0 + x0``
    first, then left to right, compensated on Python >= 3.12 (Neumaier, with
    CPython's final correction rule); counts as ``segment_sum_int``. True
    when a counted value is NaN."""
    every = labels.shape[0] == 0
    with_counts = counts.shape[0] > 0
    nan = False
    m = offsets.shape[0] - 1
    for i in range(m):
        if i + PREFETCH_SEGMENTS < m:
            prefetch(values, starts[i + PREFETCH_SEGMENTS])
        f = 0.0
        c = 0.0
        n = 0
        base = starts[i] - offsets[i]
        for e in range(offsets[i], offsets[i + 1]):
            ue = np.uint64(e)             # unsigned: see above
            ur = np.uint64(base + e)
            if (every or member[labels[ue]]) and (not has_valid or valid[ur]):
                x = float(values[ur])
                nan |= x != x
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
            if per_element:
                out[ue] = f + c if compensated and c != 0.0 and math.isfinite(c) else f
                if with_counts:
                    counts[ue] = n
        if not per_element:
            out[i] = f + c if compensated and c != 0.0 and math.isfinite(c) else f
            if with_counts:
                counts[i] = n
    return nan


def segment_arg_extreme(keys, valid, has_valid, member, labels, starts, offsets, per_element,
                        want_max, row_base, out):
    """The row of the MIN (MAX if ``want_max``) key so far, the first of
    equal ones (as Python's ``min``/``max``), plus ``row_base`` (the rows of
    ``keys`` being a piece of a column from that row: no pass afterwards to
    shift them); -1 before any. True when a counted key is NaN (where
    Python's answer depends on the order)."""
    every = labels.shape[0] == 0
    nan = False
    m = offsets.shape[0] - 1
    for i in range(m):
        if i + PREFETCH_SEGMENTS < m:
            prefetch(keys, starts[i + PREFETCH_SEGMENTS])
        best = -1
        base = starts[i] - offsets[i]
        for e in range(offsets[i], offsets[i + 1]):
            r = base + e
            ue = np.uint64(e)             # unsigned: see above
            ur = np.uint64(r)
            if (every or member[labels[ue]]) and (not has_valid or valid[ur]):
                k = keys[ur]
                nan |= k != k
                if best < 0:
                    best = r
                elif want_max:
                    if k > keys[np.uint64(best)]:
                        best = r
                elif k < keys[np.uint64(best)]:
                    best = r
            if per_element:
                out[ue] = best + row_base if best >= 0 else -1
        if not per_element:
            out[i] = best + row_base if best >= 0 else -1
    return nan


def find_member(member, labels, lo, hi, k, from_end, row_of_lo, out):
    """Per query q, the k-th (0-based) element of lo[q]..hi[q] (inclusive)
    whose label is a member, counted from hi[q] backwards if ``from_end``;
    -1 if there are not that many. With ``row_of_lo`` (length > 0) the
    element's row instead, ``row_of_lo[q]`` being element lo[q]'s. Cost: the
    elements walked."""
    to_rows = row_of_lo.shape[0] > 0
    for q in range(lo.shape[0]):
        found = -1
        c = 0
        if from_end:
            e = hi[q]
            while e >= lo[q]:
                if member[labels[e]]:
                    if c == k:
                        found = e
                        break
                    c += 1
                e -= 1
        else:
            e = lo[q]
            while e <= hi[q]:
                if member[labels[e]]:
                    if c == k:
                        found = e
                        break
                    c += 1
                e += 1
        if to_rows and found >= 0:
            found += row_of_lo[q] - lo[q]
        out[q] = found


KERNELS = (segment_count, segment_sum_int, segment_sum_float, segment_arg_extreme, find_member)
_compiled = None


# True once this process asked for the compiled kernels, or its plain bodies
# have walked WARM_AFTER elements (see kernels(); as kernels/gather.py's).
warm = False
plain_elements = 0
WARM_AFTER = 50_000


def _cpu_kernels():
    """numba.njit versions, compiled on first use; None without numba."""
    global _compiled, warm
    warm = True
    if _compiled is None:
        try:
            import numba
        except ImportError:                       # numba is the `cpu` extra
            _compiled = False
            return None
        jit = numba.njit(nogil=True, cache=True)    # on-disk cache: later processes skip compiling
        _compiled = tuple(jit(k) for k in KERNELS)
    return _compiled or None


def kernels(n: int, compiled=None) -> tuple:
    """The kernels (in ``KERNELS`` order) for ``n`` elements: numba-compiled
    when ``compiled`` (None: when n is large enough to repay loading them,
    or ``warm``: they are loaded already, or the plain bodies have walked
    enough elements to have paid for the load) and numba is installed,
    else the plain bodies."""
    global warm, plain_elements
    if compiled is None:
        compiled = n >= JIT_MIN_ELEMENTS or warm
        if not compiled:
            plain_elements += n
            warm = plain_elements >= WARM_AFTER
    return (_cpu_kernels() if compiled else None) or KERNELS


_NO_VALID = np.ones(1, dtype=bool)
_NO_ROWS = np.zeros(0, dtype=np.int64)
#: The ``labels`` of segments whose every element counts (see above).
EVERY_ROW = np.zeros(0, dtype=np.int16)


class Segments:
    """The shared arguments: ``member`` (bool per variable id: the rows that
    count), ``labels`` (per element; :data:`EVERY_ROW`: all count), ``starts``
    (first row per segment), ``offsets`` (segment bounds in elements),
    ``valid`` (per row, or None: no NULL), ``per_element``, ``compiled``
    (see :func:`kernels`) and ``threads`` (False: run on the calling thread,
    for a caller that hands its own pieces to the cores)."""

    def __init__(self, member, labels, starts, offsets, valid=None, per_element=False,
                 compiled=None, threads=True):
        self.member, self.labels, self.starts, self.offsets = member, labels, starts, offsets
        self.valid = _NO_VALID if valid is None else valid
        self.has_valid = valid is not None
        self.per_element = bool(per_element)
        # element indices are global: a per-element output spans all before the last
        self.size = (int(offsets[-1]) if offsets.shape[0] else 0) if per_element \
            else offsets.shape[0] - 1
        self.k = kernels(int(offsets[-1] - offsets[0]) if offsets.shape[0] else 0, compiled)
        self.threads = threads

    def args(self):
        return (self.valid, self.has_valid, self.member, self.labels, self.starts, self.offsets,
                self.per_element)

    def run(self, which: int, outs: tuple, before: tuple = (), after: tuple = ()) -> bool:
        """``self.k[which](*before, *self.args(), *after, *outs)`` over all
        the segments: when compiled, in pieces of about equal elements on all
        cores (threads.py; the kernels release the GIL). True when any
        piece returned True. ``outs``: per segment or per element, as
        ``per_element`` says (an empty array: not wanted)."""
        fn = self.k[which]
        pieces = (split(self.offsets) if self.k is not KERNELS and self.threads
                  else [(0, self.size)])
        if len(pieces) <= 1:
            return bool(fn(*before, *self.args(), *after, *outs))
        per_element = self.per_element

        def piece(a, b):
            return fn(*before, self.valid, self.has_valid, self.member, self.labels,
                      self.starts[a:b], self.offsets[a:b + 1], per_element, *after,
                      *[o if per_element or not o.shape[0] else o[a:b] for o in outs])
        return any(bool(flag) for flag in run_pieces(piece, pieces))


def segmented_count(seg: Segments, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Counted elements per segment (or so far, per element). ``out``: where
to write (``seg.size`` slots), else a new array; the same for the others.

    >>> import numpy as np
    >>> seg = Segments(np.array([True, False]), np.array([0, 1, 0, 0], np.int16),
    ...                np.array([5, 7]), np.array([0, 2, 4]), per_element=True)
    >>> segmented_count(seg).tolist()
    [1, 1, 1, 2]
    """
    if out is None:
        out = B.empty(seg.size, np.int64)
    seg.run(0, (out,))
    return out


def segmented_sum(values: np.ndarray, seg: Segments, out: Optional[np.ndarray] = None,
                  counts: Optional[np.ndarray] = None):
    """Sums of ``values`` (per row; int64 or float64) over the counted
    elements, and their counts into ``counts`` if given (int64, as ``out``).
    Returns ``(sums, inexact)``; ``inexact``: an int64 sum left
    the BIGINT range (``sums`` is then incomplete), or a float value counted
    was NaN.

    >>> import numpy as np
    >>> seg = Segments(np.array([True]), np.zeros(4, np.int16), np.array([0, 2]),
    ...                np.array([0, 2, 4]), valid=np.array([True, True, False, True]))
    >>> sums, bad = segmented_sum(np.array([1, 2, 3, 4]), seg)
    >>> sums.tolist(), bad
    ([3, 4], False)
    """
    counts = _NO_ROWS if counts is None else counts
    if values.dtype.kind == "f":
        if out is None:
            out = B.empty(seg.size, np.float64)
        return out, seg.run(2, (out, counts), (values,), (COMPENSATED_SUM,))
    if out is None:
        out = B.empty(seg.size, np.int64)
    return out, seg.run(1, (out, counts), (values,))


def segmented_arg_extreme(keys: np.ndarray, seg: Segments, want_max: bool,
                          out: Optional[np.ndarray] = None, report_nan: bool = False,
                          row_base: int = 0):
    """The row of the MIN/MAX of ``keys`` (per row) over the counted elements,
    the first of equal keys, plus ``row_base``; -1 where none. With
    ``report_nan``, ``(rows, whether a counted key was NaN)``.

    >>> import numpy as np
    >>> seg = Segments(np.array([True]), np.zeros(4, np.int16), np.array([0, 3]),
    ...                np.array([0, 3, 4]), per_element=True)
    >>> segmented_arg_extreme(np.array([3, 1, 1, 5, 0]), seg, False).tolist()
    [0, 1, 1, 3]
    """
    if out is None:
        out = B.empty(seg.size, np.int64)
    nan = seg.run(3, (out,), (keys,), (bool(want_max), np.int64(row_base)))
    return (out, bool(nan)) if report_nan else out


def find_members(member: np.ndarray, labels: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 k: int, from_end: bool, compiled=None,
                 row_of_lo: Optional[np.ndarray] = None) -> np.ndarray:
    """Per query, the k-th member element of ``lo..hi`` from the start (or
    from the end), -1 if none (FIRST/LAST landing per match); with
    ``row_of_lo`` (the row of each ``lo`` element) its row instead.

    >>> import numpy as np
    >>> find_members(np.array([False, True]), np.array([1, 0, 1, 1], np.int16),
    ...              np.array([0, 0]), np.array([3, 3]), 1, True).tolist()
    [2, 2]
    """
    out = np.empty(lo.shape[0], dtype=np.int64)
    rows = _NO_ROWS if row_of_lo is None else row_of_lo
    fn = kernels(labels.shape[0], compiled)[4]
    # a landing walks a few elements: a few units of work per query
    pieces = split_even(lo.shape[0], 4) if fn is not KERNELS[4] else [(0, lo.shape[0])]

    def piece(a, b):
        fn(member, labels, lo[a:b], hi[a:b], int(k), bool(from_end),
           rows[a:b] if rows.shape[0] else rows, out[a:b])
    run_pieces(piece, pieces)
    return out
