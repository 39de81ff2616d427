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
Totals over every row of short segments (the usual ONE ROW PER MATCH sum,
MIN or MAX over a match or one variable's run) take the ``_blocks``
kernels: a fixed block of ``BLOCK_ROWS`` rows per segment, the rows past
its end masked, so the CPU predicts every loop exit; where lengths vary, a
loop over the segment's own rows mispredicts its exit at nearly every
segment (see ``BLOCK_ROWS``).
Cost: one pass over the elements, O(total match length); a block's rows
for a segment shorter than one.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from . import buffers as B
from .bits import as_float, as_key
from .prefetch import prefetch
from .scan import register_jitable
from .threads import run_pieces, split, split_even

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
# The bits of -inf and +inf as int64 (segment_arg_extreme_blocks).
FLOAT_MIN_BITS, FLOAT_MAX_BITS = -0x10000000000000, 0x7FF0000000000000
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


def far_bits(dtype, want_max: bool) -> int:
    """The int64 bits of the value no key passes toward a MIN (MAX if
    ``want_max``): +inf or the largest integer (-inf or the smallest)."""
    if dtype.kind == "f":
        return FLOAT_MIN_BITS if want_max else FLOAT_MAX_BITS
    return INT64_MIN if want_max else INT64_MAX


def add_checked(acc, x) -> tuple:
    """``(acc + x, whether the sum left the BIGINT range)`` for int64
    ``acc`` and ``x``. Compiled: the sum wraps and the sign rule tells (no
    branch); in plain Python, integers are exact and the range tells. Not
    kernels/registers.py's ``add_i64``: its tests of the operands' signs
    are branches on the data (the block sum took 10.4 ms with them, 6.3
    without)."""
    total = acc + x
    return total, total > INT64_MAX or total < INT64_MIN


try:
    from numba.core import types as _types
    from numba.extending import overload as _overload

    @_overload(add_checked, target="cpu")
    def _add_checked_typed(acc, x):
        if not (isinstance(acc, _types.Integer) and isinstance(x, _types.Integer)):
            return None

        def wrapping(acc, x):
            total = np.int64(acc) + np.int64(x)
            # overflow: both operands' signs differ from the result's
            return total, ((np.int64(acc) ^ total) & (np.int64(x) ^ total)) < 0
        return wrapping
except ImportError:                  # the plain bodies still run without numba
    pass


# Rows a short segment's total reads at once, whatever its length (up to
# this many): a loop of fixed length, whose exit the CPU predicts, with the
# rows past the segment masked out. A loop over the segment's own rows
# mispredicts its exit at about every segment where the lengths vary (tick
# data's matches: 1 to 10 rows), about 4 ns each: half of a sum's time
# (v_shape's 1.05M matches in 1e7 rows, one thread: 8.9 -> 5.7 ms).
BLOCK_ROWS = 8
# Segments whose lengths tell whether blocks pay (Segments.blocks_pay).
LENGTH_SAMPLE = 64


def block_masks() -> np.ndarray:
    """The masks of the ``_blocks`` kernels: entry ``n * BLOCK_ROWS + k``
    is all ones where row ``k`` of a block lies in a segment of ``n`` rows,
    else 0. Passed to the kernels, not read as a global: numba would fold a
    global array's values into the code, and LLVM, seeing the comparison
    again, would branch around the loads (kernels/bits.py)."""
    k = np.arange(BLOCK_ROWS)
    inside = k[None, :] < np.arange(BLOCK_ROWS + 1)[:, None]
    return np.where(inside, -1, 0).astype(np.int64).ravel()


@register_jitable
def _block(s, e0, e1, n):
    """A segment of the ``_blocks`` kernels (first row ``s``, elements ``e0
    .. e1 - 1``) over ``n`` rows: ``(s, its length, whether it is read as
    a block (at most BLOCK_ROWS rows, the block inside the rows), its row
    of the masks)``. Scalars only: a helper taking arrays that LLVM leaves
    a call counts their references at every call (a float sum took 170
    ms, not 6.6)."""
    length = e1 - e0
    return s, length, length <= BLOCK_ROWS and s + BLOCK_ROWS <= n, np.uint64(length * BLOCK_ROWS)


def segment_sum_int_blocks(values, starts, offsets, masks, out, counts):
    """:func:`segment_sum_int`'s totals where every row of a segment counts
    and none is NULL: a segment of at most ``BLOCK_ROWS`` rows whose block
    lies inside ``values`` is summed over the whole block, masked
    (``masks``: :func:`block_masks`), a longer one row by row. True (and
    stop) when a sum leaves the BIGINT range, checked once per segment.
    ``counts`` (unless empty): the segments' lengths."""
    with_counts = counts.shape[0] > 0
    n = values.shape[0]
    m = offsets.shape[0] - 1
    bad = False
    for i in range(m):
        if i + PREFETCH_SEGMENTS < m:
            prefetch(values, starts[i + PREFETCH_SEGMENTS])
        s, length, blocked, row = _block(starts[i], offsets[i], offsets[i + 1], n)
        acc = 0
        if blocked:
            first = np.uint64(s)
            for k in range(BLOCK_ROWS):
                uk = np.uint64(k)
                acc, over = add_checked(acc, int(values[first + uk]) & int(masks[row + uk]))
                bad |= over
        else:
            for k in range(length):
                acc, over = add_checked(acc, int(values[np.uint64(s + k)]))
                bad |= over
        if bad:
            return True             # (a plain-Python sum could not be stored)
        out[i] = acc
        if with_counts:
            counts[i] = length
    return False


def segment_sum_float_blocks(bits, starts, offsets, compensated, masks, out, counts):
    """:func:`segment_sum_float`'s totals where every row of a segment
    counts and none is NULL, over the values' IEEE bits (``bits``: the
    float64 values viewed as int64), blocks as
    :func:`segment_sum_int_blocks`. The rows past a segment read as +0.0,
    which leaves Python's sum as it is: ``f + 0.0`` is ``f`` (``f`` is never
    -0.0: the sum starts at ``0 + x0``), and compensated, the correction
    gains ``+0.0`` (or turns NaN where ``f`` is infinite, where the final
    rule returns ``f`` either way). True when a value is NaN."""
    with_counts = counts.shape[0] > 0
    n = bits.shape[0]
    m = offsets.shape[0] - 1
    nan = False
    for i in range(m):
        if i + PREFETCH_SEGMENTS < m:
            prefetch(bits, starts[i + PREFETCH_SEGMENTS])
        s, length, blocked, row = _block(starts[i], offsets[i], offsets[i + 1], n)
        f = 0.0
        c = 0.0
        if blocked:
            first = np.uint64(s)
            x = as_float(int(bits[first]) & int(masks[row]))
            nan |= x != x
            f = 0.0 + x
            for k in range(1, BLOCK_ROWS):
                uk = np.uint64(k)
                x = as_float(int(bits[first + uk]) & int(masks[row + uk]))
                nan |= x != x
                f, c = _sum_step(f, c, x, compensated)
        else:
            for k in range(length):
                x = as_float(int(bits[np.uint64(s + k)]))
                nan |= x != x
                if k == 0:
                    f = 0.0 + x
                else:
                    f, c = _sum_step(f, c, x, compensated)
        out[i] = f + c if compensated and c != 0.0 and math.isfinite(c) else f
        if with_counts:
            counts[i] = length
    return nan


@register_jitable
def _sum_step(f, c, x, compensated):
    """Python's ``sum`` of floats after the first: ``(f + x, c)``, or
    compensated (Python >= 3.12, Neumaier) the correction ``c`` gaining the
    lost low part (as :func:`segment_sum_float`)."""
    if not compensated:
        return f + x, c
    t = f + x
    if abs(f) >= abs(x):
        c += (f - t) + x
    else:
        c += (x - t) + f
    return t, c


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


def segment_arg_extreme_blocks(keys, bits, starts, offsets, want_max, row_base, far, masks,
                               out):
    """:func:`segment_arg_extreme`'s totals where every row of a segment
    counts and none is NULL, blocks as :func:`segment_sum_int_blocks`:
    ``bits`` are ``keys`` (float64 or int64) viewed as int64, and the rows
    past a segment read as ``far`` (the bits of the far end of the order:
    :func:`far_bits`), which no row after the segment's first can beat:
    the first of equal keys stays."""
    nan = False
    n = keys.shape[0]
    m = offsets.shape[0] - 1
    for i in range(m):
        if i + PREFETCH_SEGMENTS < m:
            prefetch(keys, starts[i + PREFETCH_SEGMENTS])
        s, length, blocked, row = _block(starts[i], offsets[i], offsets[i + 1], n)
        if length == 0:
            out[i] = -1
            continue
        best = s
        v = keys[np.uint64(s)]
        nan |= v != v
        if blocked:
            first = np.uint64(s)
            for k in range(1, BLOCK_ROWS):
                uk = np.uint64(k)
                keep = int(masks[row + uk])
                x = as_key((int(bits[first + uk]) & keep) | (far & ~keep), keys)
                nan |= x != x
                take = -np.int64(x > v if want_max else x < v)
                best ^= take & ((s + k) ^ best)
                v = max(x, v) if want_max else min(x, v)
        else:
            for k in range(1, length):
                x = keys[np.uint64(s + k)]
                nan |= x != x
                if x > v if want_max else x < v:
                    best = s + k
                    v = x
        out[i] = best + row_base
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


KERNELS = (segment_count, segment_sum_int, segment_sum_float, segment_arg_extreme, find_member,
           segment_sum_int_blocks, segment_sum_float_blocks, segment_arg_extreme_blocks)
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
_BLOCK_MASKS = block_masks()
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

    def run(self, which: int, outs: tuple, before: tuple = (), after: tuple = (),
            rows_only: bool = False) -> bool:
        """``self.k[which](*before, *self.args(), *after, *outs)`` over all
        the segments (``rows_only``: the segments' ``starts, offsets`` in
        place of ``self.args()``, for the ``_blocks`` kernels): when
        compiled, in pieces of about equal elements on all cores
        (threads.py; the kernels release the GIL). True when any piece
        returned True. ``outs``: per segment or per element, as
        ``per_element`` says (an empty array: not wanted)."""
        fn = self.k[which]
        pieces = (split(self.offsets) if self.k is not KERNELS and self.threads
                  else [(0, self.size)])
        args = (self.starts, self.offsets) if rows_only else self.args()
        if len(pieces) <= 1:
            return bool(fn(*before, *args, *after, *outs))
        per_element = self.per_element

        def piece(a, b):
            if rows_only:
                inner = (self.starts[a:b], self.offsets[a:b + 1])
            else:
                inner = (self.valid, self.has_valid, self.member, self.labels,
                         self.starts[a:b], self.offsets[a:b + 1], per_element)
            return fn(*before, *inner, *after,
                      *[o if per_element or not o.shape[0] else o[a:b] for o in outs])
        return any(bool(flag) for flag in run_pieces(piece, pieces))

    def blocks_pay(self) -> bool:
        """Whether the ``_blocks`` kernels apply and pay: every row of a
        segment counts, none is NULL, only the totals are wanted, and the
        lengths of the first ``LENGTH_SAMPLE`` segments are not all alike
        (segments of one length, a one-row variable's, say, make a loop
        whose exit the CPU predicts, over fewer rows than a block's)."""
        if self.labels.shape[0] or self.has_valid or self.per_element:
            return False
        head = np.diff(self.offsets[:LENGTH_SAMPLE + 1])
        return head.shape[0] > 1 and bool(head.min() != head.max())


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
    blocks = seg.blocks_pay()
    if values.dtype.kind == "f":
        if out is None:
            out = B.empty(seg.size, np.float64)
        if blocks:
            return out, seg.run(6, (out, counts), (values.view(np.int64),),
                                (COMPENSATED_SUM, _BLOCK_MASKS), rows_only=True)
        return out, seg.run(2, (out, counts), (values,), (COMPENSATED_SUM,))
    if out is None:
        out = B.empty(seg.size, np.int64)
    if blocks:
        return out, seg.run(5, (out, counts), (values,), (_BLOCK_MASKS,), rows_only=True)
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
    if seg.blocks_pay() and keys.dtype.kind in "fi" and keys.dtype.itemsize == 8:
        nan = seg.run(7, (out,), (keys, keys.view(np.int64)),
                      (bool(want_max), np.int64(row_base),
                       np.int64(far_bits(keys.dtype, want_max)), _BLOCK_MASKS), rows_only=True)
    else:
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
