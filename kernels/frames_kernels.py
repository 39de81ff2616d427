"""Sortedness passes over adjacent rows of sort keys (frames.py's check).

What: for one key column (or one chunk of it), compare every adjacent row
pair ``(i, i + 1)`` under the key's direction and NULL placement, refine a
byte per pair that says "still tied on every key so far", and report whether
a pair that was still tied is out of order. Numeric, boolean and temporal
keys are read as numpy values; string and binary keys straight from their
Arrow offsets and data buffers (no combined copy, no Arrow comparison
arrays). ``tie_breaks`` turns the tie bytes left after the partition keys
into partition offsets. ``string_then_number`` fuses the usual pair (a
string partition key, a numeric order key, no NULLs) into one pass that
writes the partition starts directly (no tie bytes).
Why compiled: on already sorted input (the usual historical store) this
check is the whole cost of sorting, and Arrow's adjacent comparisons cost
two passes plus boolean arrays per key (a string ``equal`` alone ran at about
7 numpy passes on 1e7 rows). Strings: sorted partition keys come in long runs
of equal values, so the string pass checks blocks of ``STRING_BLOCK`` pairs at
once -- every length in the block equal and the block's bytes periodic with
that length (byte ``q`` equals byte ``q + length``) means every pair in it is
tied -- in two branch-free loops that vectorise; a block that fails is
compared pair by pair (bytewise, UTF-8 byte order is code point order),
except in the fused pass (``string_then_number``), which first looks for the
end of the block's first run by binary search, checks the run as a block
and the pair across its end on its own, and goes on from there (10,000
partitions over 1e7 rows, one thread: 11.7 -> 6.9 ms).
Cost: one pass over each key's buffers; O(rows) whatever the data, at most
one pairwise comparison per pair plus the block checks.

The fused pass can leave the order key out (``partition_cuts``): the
partitions alone, the order key checked later within them, in pieces
(``order_between_cuts``; frames.sort_for_matching_deferred).

Bodies are ``register_jitable`` and module-level (numba's disk cache finds
them), those that allocate nothing without numba's reference counts
(kernels/jitable.py ``uncounted``: the per-block calls took 16.0 -> 10.3 ms
on 100,000 partitions); ``compiled()`` returns the njit versions, None
without numba.
"""

from __future__ import annotations

import numpy as np

from .jitable import uncounted
from .prefetch import prefetch_range

try:
    from numba.extending import register_jitable
except ImportError:                  # the plain bodies still run without numba
    def register_jitable(fn):
        return fn

# Pairs per block of the string pass's fast check: long enough to amortise
# the block's setup, short enough that a block holding a partition boundary
# costs little to redo pair by pair.
STRING_BLOCK = 256
# The string passes ask for the offsets of the block two ahead: a block
# reads its offsets, then its bytes, and with 8-byte offsets (large_string,
# pandas 3's strings) the hardware prefetcher fell behind those bursts
# (1e7 rows, one thread: 10.8 -> about 5.5 ms; 4-byte offsets unchanged).
OFFSETS_AHEAD = 2 * STRING_BLOCK


@uncounted
def refine_key(values, undecided, first, descending):
    """One key's pass over adjacent row pairs ``(i, i + 1)`` of a key without
    NULLs. ``undecided[i]`` says the pair ties on every earlier key (with
    ``first`` there is no earlier key: every pair ties and ``undecided`` is
    not read). Refines ``undecided`` in place to the pairs that still tie and
    returns False when a tied pair is out of order under this key. NaN is
    above every number and equal to NaN; ``-0.0`` equals ``0.0``. Branch-free
    (bitwise on 0/1 bytes) so that it vectorises."""
    m = values.shape[0] - 1
    u = undecided.view(np.uint8)
    bad = np.uint8(0)
    if first:           # a loop of its own: fresh ``undecided`` pages unread
        for i in range(m):
            a = values[i]
            b = values[i + 1]
            x = b if descending else a      # pair out of order: x above y
            y = a if descending else b
            x_nan = np.uint8(x != x)
            y_nan = np.uint8(y != y)
            bad |= np.uint8(x > y) | (x_nan & (y_nan ^ 1))
            u[i] = np.uint8(x == y) | (x_nan & y_nan)
        return bad == 0
    for i in range(m):
        a = values[i]
        b = values[i + 1]
        x = b if descending else a
        y = a if descending else b
        x_nan = np.uint8(x != x)
        y_nan = np.uint8(y != y)
        after = np.uint8(x > y) | (x_nan & (y_nan ^ 1))
        eq = np.uint8(x == y) | (x_nan & y_nan)
        t = u[i]
        bad |= t & after
        u[i] = t & eq
    return bad == 0


@uncounted
def refine_key_nulls(values, valid, undecided, first, descending, nulls_first):
    """:func:`refine_key` for a key with NULLs: ``valid`` holds 0/1 bytes
    (0: NULL, whatever ``values`` holds there); NULL equals NULL and goes
    first or last per ``nulls_first`` whatever the direction. With ``first``
    the bytes ``undecided`` holds are read but make no difference."""
    m = values.shape[0] - 1
    u = undecided.view(np.uint8)
    f = np.uint8(first)
    nf = np.uint8(nulls_first)
    bad = np.uint8(0)
    for i in range(m):
        a = values[i]
        b = values[i + 1]
        va = valid[i]
        vb = valid[i + 1]
        x = b if descending else a
        y = a if descending else b
        x_nan = np.uint8(x != x)
        y_nan = np.uint8(y != y)
        after = np.uint8(x > y) | (x_nan & (y_nan ^ 1))
        eq = np.uint8(x == y) | (x_nan & y_nan)
        both = va & vb
        after = ((both & after) | ((va ^ 1) & vb & (nf ^ 1))
                 | (va & (vb ^ 1) & nf))
        eq = (both & eq) | ((va | vb) ^ 1)
        t = u[i] | f
        bad |= t & after
        u[i] = t & eq
    return bad == 0


@uncounted
def compare_strings(offsets, data, i, j):
    """-1, 0 or 1: value ``i`` below, equal to or above value ``j`` (bytewise,
    a prefix below the longer value)."""
    a0 = offsets[i]
    la = offsets[i + 1] - a0
    b0 = offsets[j]
    lb = offsets[j + 1] - b0
    for k in range(min(la, lb)):
        x = data[a0 + k]
        y = data[b0 + k]
        if x != y:
            return 1 if x > y else -1
    if la == lb:
        return 0
    return 1 if la > lb else -1


@uncounted
def next_equal(offsets, data, i):
    """Whether values ``i`` and ``i + 1`` are equal: lengths, then every byte
    in one branch-free loop over slices (the usual answer on sorted keys, and
    about twice as quick as :func:`compare_strings` there)."""
    a0 = offsets[i]
    a1 = offsets[i + 1]
    b1 = offsets[i + 2]
    if a1 - a0 != b1 - a1:
        return False
    a = data[a0:a1]
    b = data[a1:b1]
    d = np.uint32(0)
    for k in range(a.shape[0]):
        d |= np.uint32(a[k]) ^ np.uint32(b[k])
    return d == 0


@uncounted
def block_tied(offsets, data, valid, has_valid, lo, hi):
    """Whether values ``lo .. hi`` (inclusive) are all equal and not NULL:
    one length for all, and the bytes they span periodic with that length.
    Loops over slices, eight bytes a word where they can: the bounds-checked
    indexing of the plain form does not vectorise (about 3x slower)."""
    a0 = offsets[lo]
    length = offsets[lo + 1] - a0
    ends = offsets[lo + 1:hi + 2]
    begins = offsets[lo:hi + 1]
    diff = 0
    for j in range(ends.shape[0]):
        diff |= (ends[j] - begins[j]) ^ length
    if diff != 0:
        return False
    if has_valid:
        v = valid[lo:hi + 1]
        all_valid = np.uint8(1)
        for j in range(v.shape[0]):
            all_valid &= v[j]
        if all_valid == 0:
            return False
    nb = (hi - lo) * length
    nw = nb // 8
    a = data[a0:a0 + 8 * nw].view(np.uint64)
    b = data[a0 + length:a0 + length + 8 * nw].view(np.uint64)
    acc = np.uint64(0)
    for k in range(nw):
        acc |= a[k] ^ b[k]
    x = data[a0 + 8 * nw:a0 + nb]
    y = data[a0 + length + 8 * nw:a0 + length + nb]
    for k in range(x.shape[0]):
        acc |= np.uint64(x[k] ^ y[k])
    return acc == 0


@uncounted
def refine_string_key(offsets, data, valid, has_valid, undecided, first, descending,
                      nulls_first):
    """:func:`refine_key_nulls` for a string or binary key in Arrow's layout:
    value ``i`` is ``data[offsets[i]:offsets[i + 1]]`` (``offsets`` already
    sliced to the rows at hand), ``valid`` 0/1 bytes when ``has_valid``.
    Returns False at the first tied pair out of order (``undecided`` is then
    incomplete)."""
    m = offsets.shape[0] - 2
    u = undecided.view(np.uint8)
    i = 0
    while i < m:
        hi = min(i + STRING_BLOCK, m)
        if offsets.itemsize == 8:    # 4-byte offsets keep up without (and lost 3%)
            prefetch_range(offsets, i + OFFSETS_AHEAD, i + OFFSETS_AHEAD + STRING_BLOCK + 1)
        if hi - i == STRING_BLOCK and block_tied(offsets, data, valid, has_valid, i, hi):
            if first:
                u[i:hi] = 1
            i = hi           # tied pairs: in order, ties unchanged
            continue
        for j in range(i, hi):
            t = np.uint8(1) if first else u[j]
            if t == 0:
                continue
            va = (not has_valid) or valid[j] != 0
            vb = (not has_valid) or valid[j + 1] != 0
            if va and vb:
                c = 0 if next_equal(offsets, data, j) else compare_strings(offsets, data, j,
                                                                           j + 1)
                after = c < 0 if descending else c > 0
                eq = c == 0
            elif va:                 # value, then NULL
                after = nulls_first
                eq = False
            elif vb:                 # NULL, then value
                after = not nulls_first
                eq = False
            else:
                after = False
                eq = True
            if after:
                return False
            u[j] = np.uint8(eq)
        i = hi
    return True


@uncounted
def pair_after(a, b, descending):
    """Whether a numeric pair is out of order, NaN above every number and
    equal to NaN (:func:`refine_key`'s rules)."""
    x = b if descending else a
    y = a if descending else b
    x_nan = x != x
    y_nan = y != y
    return (x > y) or (x_nan and not y_nan)


@uncounted
def string_then_number(offsets, data, values, descending, cuts, with_numbers):
    """One pass over a string partition key and a numeric order key, both
    without NULLs (the usual ``PARTITION BY symbol ORDER BY ts``): where the
    strings tie, the numbers must be in order; where they differ, ascending,
    and the pair starts a partition (``cuts[...] = i + 1``). Returns the
    number of cuts written, or -1 when a pair is out of order. No tie bytes
    are written: blocks of equal strings check their numbers directly.
    Without ``with_numbers`` the numbers are not read (``values`` may be
    anything): the partitions alone, their order checked later
    (:func:`numbers_between_cuts`)."""
    m = offsets.shape[0] - 2
    count = 0
    i = 0
    while i < m:
        hi = min(i + STRING_BLOCK, m)
        if offsets.itemsize == 8:    # 4-byte offsets keep up without (and lost 3%)
            prefetch_range(offsets, i + OFFSETS_AHEAD, i + OFFSETS_AHEAD + STRING_BLOCK + 1)
        if hi - i == STRING_BLOCK and block_tied(offsets, data, offsets, False, i, hi):
            if with_numbers and not numbers_in_order(values, i, hi, descending):
                return -1
            i = hi
            continue
        if hi - i == STRING_BLOCK:
            # a block holding a partition border: where value i's run ends
            # (a binary search, as if sorted), the run checked as a block,
            # the pair across the border on its own, the rest from there
            b = run_end(offsets, data, i, hi)
            if b > i + 1 and b < hi and block_tied(offsets, data, offsets, False, i, b - 1):
                if with_numbers and not numbers_in_order(values, i, b - 1, descending):
                    return -1
                c = compare_strings(offsets, data, b - 1, b)
                if c > 0:
                    return -1
                if c < 0:
                    cuts[count] = b
                    count += 1
                elif with_numbers and pair_after(values[b - 1], values[b], descending):
                    return -1
                i = b
                continue
        for j in range(i, hi):
            c = 0 if next_equal(offsets, data, j) else compare_strings(offsets, data, j, j + 1)
            if c > 0:
                return -1
            if c < 0:
                cuts[count] = j + 1
                count += 1
            elif with_numbers and pair_after(values[j], values[j + 1], descending):
                return -1
        i = hi
    return count


@uncounted
def numbers_in_order(values, lo, hi, descending):
    """Whether every pair ``(j, j + 1)``, ``lo <= j < hi``, of a numeric key
    without NULLs is in order (:func:`refine_key`'s rules, branch-free)."""
    va = values[lo:hi]
    vb = values[lo + 1:hi + 1]
    bad = np.uint8(0)
    for j in range(va.shape[0]):
        x = vb[j] if descending else va[j]
        y = va[j] if descending else vb[j]
        x_nan = np.uint8(x != x)
        y_nan = np.uint8(y != y)
        bad |= np.uint8(x > y) | (x_nan & (y_nan ^ 1))
    return bad == 0


@uncounted
def numbers_between_cuts(values, cuts, lo, hi, descending):
    """Whether every pair ``(j, j + 1)``, ``lo <= j < hi``, of a numeric key
    without NULLs is in order (:func:`numbers_in_order`) but those across
    a partition's start (``cuts``: ascending rows that begin one)."""
    a = lo
    k = np.searchsorted(cuts, lo + 1)
    while k < cuts.shape[0] and cuts[k] <= hi:
        if not numbers_in_order(values, a, cuts[k] - 1, descending):
            return False
        a = cuts[k]
        k += 1
    return numbers_in_order(values, a, hi, descending)


@uncounted
def same_value(offsets, data, i, j):
    """Whether values ``i`` and ``j`` are equal (lengths, then bytes)."""
    a0 = offsets[i]
    la = offsets[i + 1] - a0
    b0 = offsets[j]
    if offsets[j + 1] - b0 != la:
        return False
    for k in range(la):
        if data[a0 + k] != data[b0 + k]:
            return False
    return True


@uncounted
def run_end(offsets, data, lo, hi):
    """The first ``j`` in ``lo + 1 .. hi`` whose value differs from value
    ``lo``, by binary search as if the values were sorted (``hi + 1`` when
    value ``hi`` equals it); the caller checks what it assumed."""
    if same_value(offsets, data, lo, hi):
        return hi + 1
    a = lo          # value a equals value lo
    b = hi          # value b differs
    while b - a > 1:
        mid = (a + b) // 2
        if same_value(offsets, data, lo, mid):
            a = mid
        else:
            b = mid
    return b


@register_jitable
def tie_breaks(ties, words, count, n):
    """Offsets ``[0, i + 1 for every pair i no longer tied, n]``: ``ties``
    holds 0/1 bytes, ``words`` its leading bytes as uint64 (eight ties at a
    time: whole runs of ties are skipped a word at a time), ``count`` the
    number of zero bytes."""
    out = np.empty(count + 2, np.int64)
    out[0] = 0
    j = 1
    all_tied = np.uint64(0x0101010101010101)
    for k in range(words.shape[0]):
        if words[k] != all_tied:
            for i in range(8 * k, 8 * k + 8):
                if ties[i] == 0:
                    out[j] = i + 1
                    j += 1
    for i in range(8 * words.shape[0], ties.shape[0]):
        if ties[i] == 0:
            out[j] = i + 1
            j += 1
    out[j] = n
    return out


# Module-level drivers: what numba compiles (and caches on disk).

def partition_and_order(offsets, data, values, descending, cuts):
    return string_then_number(offsets, data, values, descending, cuts, True)


def partition_cuts(offsets, data, values, cuts):
    return string_then_number(offsets, data, values, False, cuts, False)


def order_between_cuts(values, cuts, lo, hi, descending):
    return numbers_between_cuts(values, cuts, lo, hi, descending)


def refine_numbers(values, undecided, first, descending):
    return refine_key(values, undecided, first, descending)


def refine_numbers_nulls(values, valid, undecided, first, descending, nulls_first):
    return refine_key_nulls(values, valid, undecided, first, descending, nulls_first)


def refine_strings(offsets, data, valid, has_valid, undecided, first, descending,
                   nulls_first):
    return refine_string_key(offsets, data, valid, has_valid, undecided, first, descending,
                             nulls_first)


def partition_offsets(ties, words, count, n):
    return tie_breaks(ties, words, count, n)


DRIVERS = (refine_numbers, refine_numbers_nulls, refine_strings, partition_offsets,
           partition_and_order, partition_cuts, order_between_cuts)
_compiled = None


def compiled():
    """njit versions of ``DRIVERS`` (same order), compiled on first use and
    cached on disk; None without numba (the ``cpu`` extra)."""
    global _compiled
    if _compiled is None:
        try:
            import numba
        except ImportError:
            _compiled = False
            return None
        jit = numba.njit(nogil=True, cache=True)
        _compiled = tuple(jit(f) for f in DRIVERS)
    return _compiled or None
