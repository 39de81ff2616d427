"""Gathers of column values at output rows (MEASURES and output assembly).

What: ``gather_fixed`` copies the values of a fixed-width column (ints,
floats, dates, timestamps: read as unsigned words of their width) at up to
``GATHER_SETS`` arrays of row numbers at once, -1 meaning "no row" (a NULL),
with the validity of each value where the column has NULLs, from one chunk
of the column (rows outside the chunk are left alone: the caller runs it
once per chunk).
``repeat_strings`` repeats the values of a small string array (the partition
keys, one per partition) into an Arrow string layout; ``take_strings`` does
it one output at a time (CLASSIFIER). ``spread`` writes a per-match value
(or the match's index, or its first row counted on) at every element of
the match: ALL ROWS PER MATCH output rows when every row of every match is
one.
Why: an Arrow ``take`` per measure reads the column once per measure (each
output row's value sits in a cache line of its own), builds an index array
with a NULL mask first, and needs a combined copy of a chunked column; one
pass here fetches every value the measures need from the same rows of a
match (FIRST, LAST, MIN of one column lie a few rows apart) while their
cache lines are in, straight from the chunk's buffers.
Cost: O(output rows x row sets) per chunk, one cache line per distinct row.
"""

from __future__ import annotations

import numpy as np

from .prefetch import prefetch

try:
    from numba.extending import register_jitable
except ImportError:                  # the plain bodies still run without numba
    def register_jitable(fn):
        return fn

# Row sets one call gathers (the arity of gather_fixed).
GATHER_SETS = 4


# Output rows per block: every row set's loop over a block runs while the
# block's source cache lines are still in (the sets' rows lie close together).
GATHER_BLOCK = 1024
# Outputs ahead whose source row a gather asks for (kernels/prefetch.py): the
# rows of matches far apart are a cache line each, which the hardware's
# prefetcher does not follow (all_rows on one partition of 1e7 rows, 513k
# outputs: the measures 21.8 -> 15.9 ms; 16 to 256 measured).
GATHER_AHEAD = 128


@register_jitable
def gather_block(values, valid, has_valid, lo, hi, rows, out, out_valid, a, b):
    """Outputs ``a .. b - 1`` of one row set (a loop of its own: a simple
    loop per set runs about twice as fast as one loop over every set)."""
    n = hi - lo
    for o in range(a, b):
        uo = np.uint64(o)           # unsigned: no wraparound test per load and store
        if o + GATHER_AHEAD < b:
            prefetch(values, rows[uo + np.uint64(GATHER_AHEAD)] - lo)
        r = rows[uo] - lo
        if r >= 0 and r < n:
            out[uo] = values[np.uint64(r)]
            if has_valid:
                out_valid[uo] = valid[np.uint64(r)]


def gather_fixed(values, valid, has_valid, lo, hi, first_out, end_out, k, rows0, rows1, rows2,
                 rows3, out0, out1, out2, out3, valid0, valid1, valid2, valid3):
    """For the first ``k`` row sets and outputs ``first_out .. end_out - 1``:
    ``out[o] = values[rows[o] - lo]`` where ``lo <= rows[o] < hi``, and with
    ``has_valid`` ``valid_out[o]`` = the chunk's ``valid`` byte there; other
    outputs untouched."""
    for a in range(first_out, end_out, GATHER_BLOCK):
        b = min(a + GATHER_BLOCK, end_out)
        gather_block(values, valid, has_valid, lo, hi, rows0, out0, valid0, a, b)
        if k > 1:
            gather_block(values, valid, has_valid, lo, hi, rows1, out1, valid1, a, b)
        if k > 2:
            gather_block(values, valid, has_valid, lo, hi, rows2, out2, valid2, a, b)
        if k > 3:
            gather_block(values, valid, has_valid, lo, hi, rows3, out3, valid3, a, b)


def repeat_strings(src_offsets, src_data, index, out_offsets, out_data):
    """Value ``index[o]`` of the source (Arrow offsets, sliced to its rows,
    and data) as value ``o`` of the output; ``out_offsets`` has
    ``len(index) + 1`` slots and ``out_data`` the total length. A run of one
    value (a partition's matches) is written by doubling copies."""
    m = index.shape[0]
    out_offsets[0] = 0
    pos = 0
    o = 0
    while o < m:
        i = index[o]
        a = src_offsets[i]
        length = src_offsets[i + 1] - a
        e = o + 1
        while e < m and index[e] == i:
            e += 1
        for j in range(e - o):
            out_offsets[o + j + 1] = pos + (j + 1) * length
        total = (e - o) * length
        if total > 0:
            out_data[pos:pos + length] = src_data[a:a + length]
            done = length
            while done < total:
                step = min(done, total - done)
                out_data[pos + done:pos + done + step] = out_data[pos:pos + step]
                done += step
        pos += total
        o = e


def string_bytes(lengths, index, lo, hi):
    """The bytes of values ``index[lo:hi]`` of the source (``lengths``: each
    value's): where a piece of :func:`take_strings`'s output starts."""
    total = 0
    for o in range(lo, hi):
        total += lengths[np.uint64(index[np.uint64(o)])]
    return total


def take_strings(padded, width, lengths, index, lo, hi, pos, end, out_offsets, out_data):
    """Outputs ``lo .. hi - 1`` of ``repeat_strings`` for an index that
    changes value often (CLASSIFIER: a run per variable), the piece's bytes
    ``pos .. end - 1``. ``padded``: value ``i``'s bytes at ``i * width``,
    zero-padded to ``width`` (the longest value's length). An output copies
    ``width`` bytes and the next overwrites the padding: a copy of constant
    length has no data-dependent loop exit, and unsigned indices need no
    wraparound test (4.6 million outputs on one thread: 7.8 ms, where one
    exact copy each took 21). Near ``end`` an output copies its own length,
    so that pieces on other threads never meet."""
    if lo == 0:
        out_offsets[0] = 0
    p = np.uint64(pos)
    uw = np.uint64(width)
    stop = np.uint64(end)
    for o in range(lo, hi):
        uo = np.uint64(o)
        i = np.uint64(index[uo])
        length = np.uint64(lengths[i])
        a = i * uw
        n = uw if p + uw <= stop else length
        for b in range(n):
            ub = np.uint64(b)
            out_data[p + ub] = padded[a + ub]
        p += length
        out_offsets[uo + np.uint64(1)] = p


def string_runs(src_offsets, src_data, counts, out_offsets, out_data):
    """Value ``p`` of the source (Arrow offsets and data) repeated
    ``counts[p]`` times, ``p`` ascending, into an Arrow string layout
    (``out_offsets``: ``counts.sum() + 1`` slots): a partition key at each
    of its partition's output rows. One pass with no Python loop per run
    (1.3 -> 0.1 ms for a million outputs in 100 runs); a run's bytes are
    its value copied once and then doubled."""
    out_offsets[0] = 0
    o = np.uint64(1)
    pos = np.uint64(0)
    for p in range(counts.shape[0]):
        a = np.uint64(src_offsets[p])
        width = np.uint64(src_offsets[p + 1]) - a
        c = np.uint64(counts[p])
        for j in range(c):
            out_offsets[o + np.uint64(j)] = pos + (np.uint64(j) + np.uint64(1)) * width
        total = c * width
        if total > 0:
            for b in range(width):
                out_data[pos + np.uint64(b)] = src_data[a + np.uint64(b)]
            done = width
            while done < total:
                step = min(done, total - done)
                for b in range(step):
                    out_data[pos + done + np.uint64(b)] = out_data[pos + np.uint64(b)]
                done += step
        pos += total
        o += c


# Elements one store loop of :func:`spread` writes per match whatever its
# length (the next match overwrites the excess): most matches are shorter.
SPREAD_WIDTH = 8


def spread(values, use_index, label_offsets, first, last, step, out):
    """For matches ``first .. last-1``, every element ``e`` of match ``i``
    (``label_offsets[i] <= e < label_offsets[i + 1]``), ``k`` its place in
    the match from 0: ``out[e] = values[i] + k * step``, all int64 (other
    8-byte values as int64 views, ``step`` 0) (``use_index``: ``i
    + k * step``, ``values`` unread). With ``step`` 0 a per-match value at
    each of its elements, with 1 each element's row from its match's start
    or its running ``COUNT(*)`` from 1: ALL ROWS PER MATCH output rows when
    every row of every match is one, in one pass instead of numpy's repeat,
    arange, gather and add (and on all cores, in pieces of matches).
    A match of at most ``SPREAD_WIDTH`` elements writes that many (a store
    loop of constant length: no mispredicted exit per match, 12.3 -> 4.8 ms
    for a million matches on one thread); one near the piece's end writes
    its own, so that pieces on other threads never meet."""
    uw = np.uint64(SPREAD_WIDTH)
    stop = np.uint64(label_offsets[last])
    for i in range(first, last):
        lo = np.uint64(label_offsets[i])
        n = np.uint64(label_offsets[i + 1]) - lo
        v = i if use_index else values[i]
        if n <= uw and lo + uw <= stop:
            n = uw
        for k in range(n):
            out[lo + np.uint64(k)] = v + k * step


DRIVERS = (gather_fixed, repeat_strings, string_bytes, take_strings, spread, string_runs)
_compiled = None
# True once this process asked for the compiled kernels, or its plain bodies
# have handled ``WARM_AFTER`` values: callers that would run the plain
# bodies on a small input (to spare a one-off query the kernels' load, tens
# of milliseconds) take the compiled ones from then on (a plain body costs
# about a microsecond a value, on every call).
warm = False
plain_values = 0
WARM_AFTER = 50_000


def use_compiled(n: int, min_values: int) -> bool:
    """Whether a job of ``n`` values takes the compiled kernels: from
    ``min_values`` on, or once ``warm``; a job left to the plain bodies
    counts toward ``WARM_AFTER``."""
    global warm, plain_values
    if n >= min_values or warm:
        return True
    plain_values += n
    warm = plain_values >= WARM_AFTER
    return False


def kernels(compiled: bool = True) -> tuple:
    """``DRIVERS`` compiled with numba (cached on disk) when ``compiled`` and
    numba is installed, else the plain bodies."""
    global _compiled, warm
    if not compiled:
        return DRIVERS
    if _compiled is None:
        try:
            import numba
        except ImportError:
            _compiled = False
            return DRIVERS
        jit = numba.njit(nogil=True, cache=True)
        _compiled = tuple(jit(f) for f in DRIVERS)
    warm = bool(_compiled)
    return _compiled or DRIVERS
