"""Unanchored DFA scan for AFTER MATCH SKIP PAST LAST ROW: each row read once.

What: for each partition, run the unanchored leftmost-first automaton
(``gpu_mr.pattern.dfa.UnanchoredDfa``) over the rows, one step per row,
storing the state before each row. It finds the matches of
``gpu_mr.pattern.dfa.match_spans`` (its specification) without retrying a
failed start at the next row: every start is a thread of the one search. A
match is known by its end and the thread that reached MATCH; a second kernel
walks each match back through the lineage tables from that thread, writing
each row's variable and ``{- -}`` mark, until it reaches the seed injected at
some row: the match's start. A third copies the labels into the CSR layout of
``engines.base.MatchArrays``.
Why: the anchored scan (kernels/scan.py) takes about 1.6 DFA steps per row
on tick data, with an unpredictable branch per failed start, and its path
recovery walks every match twice (forward for the states, back for the
labels). Here the hot loop is a table lookup and two stores per row with
no branch on the data in the usual case (where a match ends, and the next
search starting at that row, are conditional moves: on tick data both
happen every few rows, too often to predict), and recovery is the
backward walk alone.
After a match the search goes on while higher-priority threads live (they
may extend or replace it); when none is left, the next search starts at the
match's end, so the rows between are read again (usually none: the search
dies on the row after its match, and the table goes straight on to the
next search's state).
Kernel layout as in kernels/scan.py (see its header): ``register_jitable``
bodies, module-level drivers compiled by ``numba.njit(nogil=True,
cache=True)``, a ``prange`` variant of each, per-partition output slots from
the partition's first row. Matches never overlap in this mode, so per-row
arrays (pre-states, labels) need no slots.
Cost: one DFA step per row plus the rows re-read after each match; O(match
length) per match for the walk and the copy; 2 bytes per row of pre-states
(4 past 32,767 states).
"""

from __future__ import annotations

import numpy as np

from . import scan as S
from .scan import prange, register_jitable

# UnanchoredTables.match_thread's mark of an empty match (pattern/dfa.py).
EMPTY_MATCH = -2


def pack_moves(tables) -> tuple:
    """``(moves, shift)``: the scan's one lookup per row. ``moves[(state <<
    shift) + class]`` = ``next << shift << 9 | restart << 8 | code``: the
    next state's row offset in ``moves`` (the class axis padded to ``1 <<
    shift`` columns, so that the hot loop needs no multiply), ``code`` the
    match that ends before the row (0 none, 1 empty, 2 + its MATCH thread).
    ``restart``: the step kills the search right after its match ends
    there, so the next search starts at this very row: the move goes
    straight to that search's state after the row (when that step notes no
    match itself), and the scan records the match without leaving its loop.
    Only other deaths (a match that ended rows earlier, or an empty one)
    reach state 0 and the slow path."""
    steps = tables.steps.astype(np.int64)
    n_states, n_classes = steps.shape
    shift = max(0, int(n_classes - 1).bit_length())
    mt = tables.match_thread.astype(np.int64)
    matched = (steps & 1).astype(bool)
    code = np.where(matched, np.where(mt == EMPTY_MATCH, 1, mt + 2), 0)
    nxt = steps >> 1
    fresh = steps[tables.start_other]                    # a new search's step, per class
    restart = (nxt == 0) & (code >= 2) & ((fresh & 1) == 0)[None, :]
    restart[0] = False                                   # the dead state is never stepped
    nxt = np.where(restart, (fresh >> 1)[None, :], nxt)
    move = (nxt << shift) << 9 | restart.astype(np.int64) << 8 | code   # code < 256: MAX_THREADS
    dtype = np.int32 if int(move.max()) < 2 ** 31 else np.int64
    moves = np.zeros((n_states, 1 << shift), dtype=dtype)
    moves[:, :n_classes] = move
    return moves.ravel(), shift


@register_jitable
def scan_partition(classes, lo, hi, moves, shift, end_accept, start_first, start_other,
                   end_code, pre, out_end, out_code, out_base):
    """Scan rows ``lo .. hi-1`` (a whole partition) with :func:`pack_moves`'
    table: ``pre[q]`` = the state before row ``q``; each match's end
    (exclusive) and code at slots ``out_base, out_base+1, ...`` of
    ``out_end`` / ``out_code``; return how many."""
    n_out = 0
    q = lo
    off = start_first << shift
    best = -1
    code = 0
    while q < hi:
        while q < hi:
            m = moves[np.uint64(off + classes[q])]    # unsigned: no wraparound on the chain
            c = m & 0xFF
            restart = (m >> 8) & 1
            # Branch-free: where a match ends (often) and where the search
            # restarts at its end (as often) are data the CPU cannot predict,
            # so each choice is arithmetic (numba compiles `a if c else b`
            # here to a branch, which cost a tenth of the scan's time).
            ended = np.int64(c != 0)
            best += ended * (q - best)
            code += ended * (c - code)
            state = off >> shift
            pre[q] = state + restart * (start_other - state)
            out_end[out_base + n_out] = best          # kept only when n_out moves on
            out_code[out_base + n_out] = code
            n_out += restart
            best += restart * (-1 - best)
            off = m >> 9
            q += 1
            if off == 0:                 # rare: the search died, its match ended earlier
                break
        if off != 0 and end_accept[off >> shift]:     # q == hi, alive
            best = hi
            code = end_code[off >> shift]
        if best < 0:
            break                        # at the end, no match since the last one
        out_end[out_base + n_out] = best
        out_code[out_base + n_out] = code
        n_out += 1
        q = best + 1 if code == 1 else best
        off = start_other << shift       # q > lo: a match at lo ends past lo or is empty
        best = -1
    return n_out


def flat_lineage(tables) -> tuple:
    """``(lineage, class shift, thread shift)``: the tables' lineage words as
    one flat array indexed ``(state << class shift | class) << thread shift |
    thread`` (both axes padded to powers of two), so that the walk's
    dependent lookup per row needs shifts, no multiplies."""
    n_states, n_classes, width = tables.lineage.shape
    class_shift = max(0, int(n_classes - 1).bit_length())
    thread_shift = max(0, int(width - 1).bit_length())
    flat = np.zeros((n_states, 1 << class_shift, 1 << thread_shift), dtype=np.int64)
    flat[:, :n_classes, :width] = tables.lineage
    return flat.ravel(), class_shift, thread_shift


@register_jitable
def walk_matches(classes, first, last, ends, codes, pre, lineage, class_shift, thread_shift,
                 starts):
    """For matches ``first .. last-1`` (exclusive end ``ends[i]``, code as
    :func:`scan_partition` writes it): walk back from the MATCH thread
    through the lineage of the pre-states; set ``starts[i]``; return where
    the matches' labels begin in ``pre``. The walk overwrites ``pre`` with
    them (``variable - ({- -} mark << 15)``: bit 15 the mark), in order, ending at row
    ``ends[last-1]``: going backwards, it writes at or after the row it has
    just read and reads no row after it again, and the matches of a chunk
    lie between the previous chunk's last end and its own, so chunks run
    in parallel and no n-row buffer is needed."""
    p = ends[last - 1] if last > first else 0
    for i in range(last - 1, first - 1, -1):
        q = ends[i]
        c = codes[i]
        if c != 1:
            t = c - 2
            while True:
                q -= 1
                row = (np.int64(pre[q]) << class_shift) | classes[q]
                # parent | var, mark, start bits; unsigned: no wraparound on the chain
                step = lineage[np.uint64((row << thread_shift) | t)]
                p -= 1
                # the mark as the sign: bit 15 of an int16, and int32 alike
                pre[p] = ((step >> 16) & 0x7FFF) - (((step >> 32) & 1) << 15)
                t = step & 0xFFFF
                if (step >> 33) & 1:
                    break
        starts[i] = q
    return p


@register_jitable
def copy_chunk(first, last, label_offsets, begin, packed, labels, excluded):
    """The labels and marks of matches ``first .. last-1`` from where
    :func:`walk_matches` left them (``packed[begin ...]``) to their place
    in the CSR layout."""
    out = label_offsets[first]
    count = label_offsets[last] - out
    # slices indexed from 0 by a range: no negative-index wraparound test per
    # element, so the loop vectorises
    src = packed[begin:begin + count]
    dst_labels = labels[out:out + count]
    dst_excluded = excluded[out:out + count]
    for k in range(count):
        v = src[k]
        dst_labels[k] = v & 0x7FFF
        dst_excluded[k] = ((v >> 15) & 1) != 0


def compact_slots(counts, scan_lo, out_end, out_code, ends, codes, partitions):
    """Every match in partition order: its end, code and partition, from the
    per-partition slot ranges (``counts[p]`` slots from row ``scan_lo[p]``);
    one pass instead of numpy's repeat / arange / gather over the matches."""
    i = 0
    for p in range(counts.shape[0]):
        base = scan_lo[p]
        for k in range(counts[p]):
            ends[i] = out_end[base + k]
            codes[i] = out_code[base + k]
            partitions[i] = p
            i += 1


# The drivers: serial and parallel loops over independent jobs (one function
# each: numba's disk cache keys on the function, not its flags).

def scan_partitions(classes, scan_lo, scan_hi, moves, shift, end_accept, start_first,
                    start_other, end_code, pre, out_end, out_code, counts):
    for p in range(scan_lo.shape[0]):
        counts[p] = scan_partition(classes, scan_lo[p], scan_hi[p], moves, shift, end_accept,
                                   start_first, start_other, end_code, pre, out_end, out_code,
                                   scan_lo[p])


def scan_partitions_parallel(classes, scan_lo, scan_hi, moves, shift, end_accept, start_first,
                             start_other, end_code, pre, out_end, out_code, counts, groups):
    """One thread per group of consecutive partitions (``groups[g] ..
    groups[g+1]``, about equal in rows)."""
    for g in prange(groups.shape[0] - 1):
        for p in range(groups[g], groups[g + 1]):
            counts[p] = scan_partition(classes, scan_lo[p], scan_hi[p], moves, shift,
                                       end_accept, start_first, start_other, end_code, pre,
                                       out_end, out_code, scan_lo[p])


# Matches per call of the walk and copy bodies: enough to amortise the call.
WALK_CHUNK = 4096
# Below this many matches a parallel walk costs more than it saves (as
# kernels.scan.PARALLEL_MIN_ROWS for rows: a launch wakes every thread).
PARALLEL_MIN_MATCHES = 16_384


def walk_all(classes, ends, codes, pre, lineage, class_shift, thread_shift, starts, begins):
    n = ends.shape[0]
    for chunk in range(begins.shape[0]):
        first = chunk * WALK_CHUNK
        begins[chunk] = walk_matches(classes, first, min(n, first + WALK_CHUNK), ends, codes,
                                     pre, lineage, class_shift, thread_shift, starts)


def walk_all_parallel(classes, ends, codes, pre, lineage, class_shift, thread_shift, starts,
                      begins):
    n = ends.shape[0]
    for chunk in prange(begins.shape[0]):
        first = chunk * WALK_CHUNK
        begins[chunk] = walk_matches(classes, first, min(n, first + WALK_CHUNK), ends, codes,
                                     pre, lineage, class_shift, thread_shift, starts)


def copy_all(label_offsets, begins, packed, labels, excluded):
    n = label_offsets.shape[0] - 1
    for chunk in range(begins.shape[0]):
        first = chunk * WALK_CHUNK
        copy_chunk(first, min(n, first + WALK_CHUNK), label_offsets, begins[chunk], packed,
                   labels, excluded)


def copy_all_parallel(label_offsets, begins, packed, labels, excluded):
    n = label_offsets.shape[0] - 1
    for chunk in prange(begins.shape[0]):
        first = chunk * WALK_CHUNK
        copy_chunk(first, min(n, first + WALK_CHUNK), label_offsets, begins[chunk], packed,
                   labels, excluded)


_compiled: dict = {}


def _cpu_kernels(parallel: bool) -> tuple:
    """numba.njit (scan, walk, copy[, compact]), compiled on first use and
    cached on disk; the parallel ones run groups of partitions / chunks of
    matches on all cores (compacting the slots is serial: one pass)."""
    hit = _compiled.get(parallel)
    if hit is None:
        import numba
        jit = numba.njit(nogil=True, parallel=parallel, cache=True)
        if parallel:
            hit = (jit(scan_partitions_parallel), jit(walk_all_parallel), jit(copy_all_parallel))
        else:
            hit = (jit(scan_partitions), jit(walk_all), jit(copy_all), jit(compact_slots))
        _compiled[parallel] = hit
    return hit


def prefers_chunks(offsets: np.ndarray) -> bool:
    """Whether ``kernels.scan.run_scan`` would cut the partitions into
    speculative chunks on all cores (a partition wider than one thread's
    share): this scan runs a partition on one thread, so there the anchored
    chunked scan is the faster one."""
    import numba
    n = int(offsets[-1] - offsets[0]) if offsets.shape[0] else 0
    if n < S.CHUNKED_MIN_ROWS or offsets.shape[0] < 2:
        return False
    threads = S.CHUNK_THREADS or numba.get_num_threads()
    return threads >= 2 and int(np.diff(offsets).max()) > n // threads


def run_unanchored(classes: np.ndarray, offsets: np.ndarray, tables,
                   compiled: bool = True) -> tuple:
    """Every match of AFTER MATCH SKIP PAST LAST ROW and its path, from one
    unanchored scan: ``(starts, ends exclusive, partitions, errors,
    label_offsets, labels, excluded)``, what ``kernels.scan.run_scan`` and
    ``run_recovery`` return together for whole partitions (no stream
    arguments; ``errors`` holds no error, and each partition's end as the
    row to resume at). ``tables`` is a
    :class:`gpu_mr.pattern.dfa.UnanchoredTables`; ``compiled=False`` runs
    the plain Python bodies."""
    offsets = np.asarray(offsets, dtype=np.int64)
    n = classes.shape[0]
    n_parts = offsets.shape[0] - 1
    scan_lo, scan_hi = offsets[:-1].copy(), offsets[1:].copy()
    t = tables
    moves, shift = pack_moves(t)
    end_code = np.where(t.end_thread >= 0, t.end_thread + 2, 0).astype(np.int32)
    pre = np.empty(n, dtype=np.int16 if t.n_states <= np.iinfo(np.int16).max else np.int32)
    out_end = np.empty(n, dtype=np.int64)
    out_code = np.empty(n, dtype=np.int32)
    counts = np.zeros(n_parts, dtype=np.int64)
    args = (classes, scan_lo, scan_hi, moves, np.int64(shift), t.end_accept,
            np.int64(t.start_first), np.int64(t.start_other), end_code, pre, out_end, out_code,
            counts)
    parallel = bool(compiled and n >= S.PARALLEL_MIN_ROWS
                    and S._parallel_lock.acquire(blocking=False))
    try:
        serial = (_cpu_kernels(False) if compiled
                  else (scan_partitions, walk_all, copy_all, compact_slots))
        wide = _cpu_kernels(True) if parallel else serial
        if parallel and n_parts > 1:
            wide[0](*args, S._row_balanced_groups(scan_hi - scan_lo))
        else:
            serial[0](*args)
        n_matches = int(counts.sum())
        ends = np.empty(n_matches, dtype=np.int64)
        codes = np.empty(n_matches, dtype=np.int32)
        partitions = np.empty(n_matches, dtype=np.int64)
        serial[3](counts, scan_lo, out_end, out_code, ends, codes, partitions)
        starts = np.empty_like(ends)
        begins = np.empty(-(-ends.shape[0] // WALK_CHUNK), dtype=np.int64)
        lineage, class_shift, thread_shift = flat_lineage(t)
        walk = wide[1] if ends.shape[0] >= PARALLEL_MIN_MATCHES else serial[1]
        walk(classes, ends, codes, pre, lineage, np.int64(class_shift), np.int64(thread_shift),
             starts, begins)                                 # the labels go into pre
        label_offsets = np.zeros(ends.shape[0] + 1, dtype=np.int64)
        np.cumsum(ends - starts, out=label_offsets[1:])
        total = int(label_offsets[-1])
        labels = np.empty(total, dtype=np.int16)
        excluded = np.empty(total, dtype=np.bool_)
        copy = wide[2] if total >= S.PARALLEL_MIN_ROWS and begins.shape[0] > 1 else serial[2]
        copy(label_offsets, begins, pre, labels, excluded)
    finally:
        if parallel:
            S._parallel_lock.release()
    errors = np.zeros((n_parts, 3), dtype=np.int64)
    errors[:, 2] = scan_hi
    return starts, ends, partitions, errors, label_offsets, labels, excluded
