"""Segmented leftmost-first DFA scan over per-row class ids, and path recovery.

What: for each partition (rows ``offsets[p] .. offsets[p+1]``), find the
matches the reference engine finds, from dense DFA tables
(``gpu_mr.pattern.dfa.DfaTables``): at each start row run the DFA until it
dies, remembering the last position where a match ended; report (start, end
exclusive); resume per AFTER MATCH SKIP (after an empty match or no match:
the next row). SKIP TO FIRST/LAST v needs the match's mapping, so the scan
recovers it to find the row to resume at, from the states its search stored
row by row (the backward walk of ``recover_paths``). A second kernel
recovers the mapping of every reported match, one independent job per match.
The specification of the scan is ``gpu_mr.pattern.dfa.match_spans``.

Dead-state memo: a search that finds no match proves that every (DFA state,
row) it passed through leads to no match (row-local DEFINEs: the future
depends only on the state and the rows ahead). After a failed search longer
than MEMO_MIN_ROWS the scan walks it again and records those pairs; later
searches of the partition that reach one stop at once. This is the reference
engine's dead-thread memo at DFA granularity, and it keeps shapes like
``A+ B`` over a long run of A rows linear instead of quadratic; short failed
searches (the usual kind) cost nothing extra, and the memo array is only
read below the last row recorded.

Path recovery: re-walk the match's rows to get the DFA state before each row,
then follow the lineage tables backwards from the thread that reached MATCH:
each thread knows its parent thread and the CONSUME instruction (variable,
``{- -}`` mark) it took. O(match length), exact by construction.

Why plain functions: the same bodies compile with ``numba.njit`` for the CPU
engine and ``numba.cuda.jit(device=True)`` for the GPU engine; the host
drivers here only decide which. The bodies are ``register_jitable`` (plain
Python when called from Python, compiled into their caller when called from
numba), and every function is module-level, so numba's disk cache finds them
in later processes. Output slots are per partition (a partition
of n rows has at most n matches, one per start row), so partitions run in
parallel without coordination, and matches land in a deterministic order.
Cost: O(rows scanned) per partition; O(match length) per recovered match.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Optional

import numpy as np

try:
    from numba import prange
    from numba.extending import register_jitable
except ImportError:                  # the plain bodies still run without numba
    prange = range

    def register_jitable(fn):
        return fn

SKIP_PAST_LAST_ROW = 0
SKIP_TO_NEXT_ROW = 1
SKIP_TO_FIRST = 2
SKIP_TO_LAST = 3

# Error codes a scan reports per partition (the host raises the message).
ERR_NONE = 0
ERR_SKIP_NO_ROW = 1          # SKIP TO FIRST/LAST v, but no row of the match is v
ERR_SKIP_TO_FIRST_ROW = 2    # SKIP TO ... lands on the match's first row: endless loop

# A failed search at least this long is recorded in the dead-state memo:
# rescanning shorter ones costs less than recording them.
MEMO_MIN_ROWS = 16

# With a time limit, the class a search steps with at its horizon: no
# variable holds (bitmask 0, which is also dense index 0: the tables of a
# time-limited query always hold it, and it sorts first).
EMPTY_CLASS = 0


@register_jitable
def recover_paths(classes, first, last, match_part_start, match_hi, starts, ends, out_at,
                  trans, start_first, start_other, lineage, match_thread, end_thread, horizon,
                  timed, states, labels, excluded):
    """For matches ``first .. last-1`` (``[starts[i], ends[i])``, partition
    starting at ``match_part_start[i]`` -- -1 when it lies before the rows at
    hand -- and ending at ``match_hi[i]``), write each row's variable id and
    ``{- -}`` mark at ``labels[out_at[i] ...]`` / ``excluded[...]``;
    ``states[out_at[i] ...]`` is scratch of the same length. A range, not one
    match, so that the CPU amortises the call over many matches (a GPU thread
    takes a range of one). ``horizon``/``timed``: as for ``scan_partition``
    (a match that ends at its start's horizon was found by the empty class
    there)."""
    for i in range(first, last):
        s = starts[i]
        e = ends[i]
        out = out_at[i]
        if e <= s:
            continue
        state = start_first if s == match_part_start[i] else start_other
        for q in range(s, e):
            states[out + q - s] = state
            state = trans[state, classes[q]]
        # the labels, walked back from the MATCH thread (written out here and
        # in scan_partition: a call per match passing arrays counts their
        # references, which made the serial recovery three times slower)
        if e == match_hi[i]:
            thread = end_thread[state]
        elif timed and e == horizon[s]:
            thread = match_thread[state, EMPTY_CLASS]
        else:
            thread = match_thread[state, classes[e]]
        for q in range(e - 1, s - 1, -1):
            before = states[out + q - s]
            c = classes[q]
            step = lineage[before, c, thread]    # one lookup: parent, variable, mark
            labels[out + q - s] = (step >> 16) & 0xFFFF
            excluded[out + q - s] = (step >> 32) & 1
            thread = step & 0xFFFF


@register_jitable
def scan_partition(classes, lo, hi, stop, out_base, part_start, open_end, trans, steps,
                   end_accept, start_first, start_other, skip_mode, skip_vars, lineage,
                   match_thread, end_thread, horizon, timed, out_start, out_end, dead_state,
                   scratch_states, scratch_labels, scratch_excluded, slot_part_start, slot_hi,
                   slot_out, err):
    """Scan rows ``lo .. hi-1`` of one partition, starting searches only
    below ``stop`` (``hi`` for a whole partition; a chunk's end when the GPU
    splits a partition, whose searches still read on to ``hi``); write its
    matches at slots ``out_base, out_base+1, ...`` of ``out_start`` /
    ``out_end``; return how many. ``part_start``: the partition's first
    row, or -1 when it lies before ``lo`` (a stream resuming mid-partition).
    ``open_end``: the partition goes on past ``hi`` (rows not yet read): a
    search that reaches ``hi`` undecided stops the scan. ``err[2]`` is the
    row the next search would start at (where a later batch, or the next
    chunk, resumes). ``err[0:2]`` = (code, slot of the failing match) when
    AFTER MATCH SKIP TO a variable cannot resume.
    ``dead_state[r]`` is the dead-state memo (1 + a state from which no
    match follows at row r; 0 none), ``scratch_*`` room for one match's
    path and ``slot_*`` its bounds (SKIP TO a variable only); all are
    indexed by absolute row. With ``timed`` (a time limit), a search
    starting at row s consumes no row at or after ``horizon[s]``: there it
    takes one step with the empty class (a match ending before that row is
    kept, every other thread dies) and ends; else ``horizon`` is a dummy."""
    n_out = 0
    pos = lo
    memo_end = lo - 1               # dead_state holds nothing at or beyond this + 1
    keep_states = skip_mode == SKIP_TO_FIRST or skip_mode == SKIP_TO_LAST
    err[2] = hi
    while pos < stop:
        state = start_first if pos == part_start else start_other
        best = -1
        q = pos
        cut = hi                            # the search's horizon, when before hi
        if timed and horizon[pos] < hi:
            cut = horizon[pos]
        # the hot loop: rows before the search's horizon; its ends after it
        # (unsigned indices: numba adds no negative-index wraparound test)
        dead = False
        while q < cut:
            uq = np.uint64(q)
            if keep_states:                 # SKIP TO a variable: for the path, below
                scratch_states[uq] = state
            if q <= memo_end and dead_state[uq] == state + 1:
                dead = True                 # a failed search passed here: no match ahead
                break
            step = steps[np.uint64(state), np.uint64(classes[uq])]  # next * 2 + match before q
            best = q if step & 1 else best
            state = step >> 1
            if state == 0:
                dead = True
                break
            q += 1
        if not dead:
            if q == hi:
                if open_end:
                    err[2] = pos            # undecided until more rows arrive
                    return n_out
                if end_accept[state]:
                    best = hi
            else:                           # out of time: no variable may take row q
                best = q if steps[state, EMPTY_CLASS] & 1 else best
        if best < 0:
            # Record the dead pairs of this search, unless its horizon ended
            # it: later searches (horizons no earlier) may go further.
            if q - pos >= MEMO_MIN_ROWS and (q < cut or cut == hi):
                state = start_first if pos == part_start else start_other
                for r in range(pos, q):
                    dead_state[r] = state + 1
                    state = trans[state, classes[r]]
                if q - 1 > memo_end:
                    memo_end = q - 1
            pos += 1
            continue
        slot = out_base + n_out
        out_start[slot] = pos
        out_end[slot] = best
        n_out += 1
        if best == pos or skip_mode == SKIP_TO_NEXT_ROW:
            pos += 1
        elif skip_mode == SKIP_PAST_LAST_ROW:
            pos = best
        else:
            slot_part_start[slot] = part_start
            slot_hi[slot] = hi
            slot_out[slot] = pos
            # the path from the states the search stored (rows pos .. q), as
            # recover_paths walks it; the state after the match's last row:
            # stored before row ``best``, unless the search stopped at best
            # alive (its end or horizon)
            after = state if best == q and not dead else scratch_states[np.uint64(best)]
            if best == hi:
                thread = end_thread[after]
            elif timed and best == cut:
                thread = match_thread[after, EMPTY_CLASS]
            else:
                thread = match_thread[after, classes[best]]
            for r in range(best - 1, pos - 1, -1):
                step = lineage[scratch_states[r], classes[r], thread]
                scratch_labels[r] = (step >> 16) & 0xFFFF
                scratch_excluded[r] = (step >> 32) & 1
                thread = step & 0xFFFF
            target = -1
            for r in range(pos, best):
                if (skip_vars >> scratch_labels[r]) & 1:
                    target = r
                    if skip_mode == SKIP_TO_FIRST:
                        break
            if target < 0 or target == pos:
                err[0] = ERR_SKIP_NO_ROW if target < 0 else ERR_SKIP_TO_FIRST_ROW
                err[1] = slot
                return n_out
            pos = target
    err[2] = pos
    return n_out


# The drivers: loops over independent jobs, one serial and one parallel (the
# same loop; numba's disk cache keys on the function, not its compile flags,
# so each variant needs a function of its own). Each body is called per
# partition / per chunk of matches, so the call is amortised.

def scan_partitions(classes, scan_lo, scan_hi, part_start, open_end, trans, steps, end_accept,
                    start_first, start_other, skip_mode, skip_vars, lineage, match_thread,
                    end_thread, horizon, timed, out_start, out_end, counts, dead_state,
                    scratch_states, scratch_labels, scratch_excluded, slot_part_start, slot_hi,
                    slot_out, errors):
    for p in range(scan_lo.shape[0]):
        counts[p] = scan_partition(
            classes, scan_lo[p], scan_hi[p], scan_hi[p], scan_lo[p], part_start[p], open_end[p],
            trans, steps, end_accept, start_first, start_other, skip_mode, skip_vars, lineage,
            match_thread, end_thread, horizon, timed, out_start, out_end, dead_state,
            scratch_states, scratch_labels, scratch_excluded, slot_part_start, slot_hi,
            slot_out, errors[p])


def scan_partitions_parallel(classes, scan_lo, scan_hi, part_start, open_end, trans, steps,
                             end_accept, start_first, start_other, skip_mode, skip_vars, lineage,
                             match_thread, end_thread, horizon, timed, out_start, out_end,
                             counts, dead_state, scratch_states, scratch_labels,
                             scratch_excluded, slot_part_start, slot_hi, slot_out, errors,
                             groups):
    """As scan_partitions, one thread per group of consecutive partitions
    (``groups[g] .. groups[g+1]``, about equal in rows): the balance does not
    depend on how the threading layer schedules the loop."""
    for g in prange(groups.shape[0] - 1):
        for p in range(groups[g], groups[g + 1]):
            counts[p] = scan_partition(
                classes, scan_lo[p], scan_hi[p], scan_hi[p], scan_lo[p], part_start[p],
                open_end[p], trans, steps, end_accept, start_first, start_other, skip_mode,
                skip_vars, lineage, match_thread, end_thread, horizon, timed, out_start, out_end,
                dead_state, scratch_states, scratch_labels, scratch_excluded, slot_part_start,
                slot_hi, slot_out, errors[p])


# Matches per call of the recovery body on the CPU: enough to amortise the call.
RECOVER_CHUNK = 4096


def recover_all(classes, match_part_start, match_hi, starts, ends, label_offsets, trans,
                start_first, start_other, lineage, match_thread, end_thread, horizon, timed,
                states, labels, excluded):
    n = starts.shape[0]
    for chunk in range((n + RECOVER_CHUNK - 1) // RECOVER_CHUNK):
        first = chunk * RECOVER_CHUNK
        recover_paths(classes, first, min(n, first + RECOVER_CHUNK), match_part_start,
                      match_hi, starts, ends, label_offsets, trans, start_first, start_other,
                      lineage, match_thread, end_thread, horizon, timed, states, labels,
                      excluded)


def recover_all_parallel(classes, match_part_start, match_hi, starts, ends, label_offsets,
                         trans, start_first, start_other, lineage, match_thread, end_thread,
                         horizon, timed, states, labels, excluded):
    n = starts.shape[0]
    for chunk in prange((n + RECOVER_CHUNK - 1) // RECOVER_CHUNK):
        first = chunk * RECOVER_CHUNK
        recover_paths(classes, first, min(n, first + RECOVER_CHUNK), match_part_start,
                      match_hi, starts, ends, label_offsets, trans, start_first, start_other,
                      lineage, match_thread, end_thread, horizon, timed, states, labels,
                      excluded)


def mark_present(classes, seen):
    """``seen[c] = 1`` for every class id ``c`` in ``classes`` (one pass, no
    int64 copy as ``np.bincount`` would make of uint8 ids)."""
    for i in range(classes.shape[0]):
        seen[classes[i]] = 1


_mark_present = None


def pack_bits(masks, shifts, always, bits):
    """``bits[r] = always | (masks[k][r] << shifts[k]) for every k`` in one
    vectorised pass (uint8 masks of 0/1), instead of a numpy pass per mask
    and per shift. (Marking the classes present in the same loop would stop
    it vectorising: mark_present is a pass of its own.)"""
    for r in range(bits.shape[0]):
        b = always
        for k in range(len(masks)):
            b |= masks[k][r] << shifts[k]
        bits[r] = b


_pack_bits = None


def packed_bits(masks: list, shifts: list, always: int, n: int, dtype) -> np.ndarray:
    """``pack_bits``'s bits as ``dtype``."""
    global _pack_bits
    bits = np.empty(n, dtype=dtype)
    if not masks:
        bits[:] = always
        return bits
    if _pack_bits is None:
        import numba
        _pack_bits = numba.njit(nogil=True, cache=True)(pack_bits)
    _pack_bits(tuple(masks), np.asarray(shifts, dtype=np.int64), np.int64(always), bits)
    return bits


def present_classes(classes: np.ndarray, n_classes: int) -> list:
    """The class ids that occur in ``classes``, ascending."""
    global _mark_present
    if _mark_present is None:
        import numba
        _mark_present = numba.njit(nogil=True, cache=True)(mark_present)
    seen = np.zeros(n_classes, dtype=np.uint8)
    _mark_present(classes, seen)
    return np.flatnonzero(seen).tolist()


def horizon_args(horizon, xp=np) -> tuple:
    """The kernels' (horizon, timed) arguments: without a time limit a
    one-element dummy array, never read."""
    if horizon is None:
        return xp.zeros(1, dtype=np.int64), np.bool_(False)
    return horizon, np.bool_(True)


def memo_shared_ok(tables) -> bool:
    """Whether speculative chunks, which share the dead-state memo, stay
    exact under a time limit. A memo entry says "no match from this state
    here" for searches whose horizon lies past where that search died; a
    chunk may read one written by a later-starting search (a later
    horizon). A search cut earlier steps with the empty class instead of a
    row's own, which can only end a match that the row's class would not
    when whether a match ends depends on the class: only a possessive
    quantifier's guard makes it so. (``tables.steps`` on the host or the
    device.)"""
    matched = tables.steps & 1
    return bool((matched == matched[:, :1]).all())


_compiled: dict = {}

# Below this many rows a parallel launch costs more than it saves.
PARALLEL_MIN_ROWS = 50_000


def _row_balanced_groups(sizes: np.ndarray) -> np.ndarray:
    """Boundaries of groups of consecutive partitions, one group per thread
    (a few more, so that one partition larger than a thread's share leaves
    the others work to take), each about an equal share of the rows."""
    import numba
    groups = max(1, min(len(sizes), 4 * numba.get_num_threads()))
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    cuts = np.searchsorted(starts, np.arange(groups) * (starts[-1] + sizes[-1]) / groups)
    return np.unique(np.concatenate((cuts, [len(sizes)]))).astype(np.int64)

# numba's threading layer is the process's (we do not pick it: user code
# shares it). Its work-queue fallback serves one parallel launch at a time (a
# second one from another Python thread aborts the process), so our launches
# take turns: a thread that finds one under way runs the serial kernel.
_parallel_lock = threading.Lock()


@contextmanager
def _kernels_for(work: int, parallel_ok: bool, compiled: bool):
    """The (scan, recovery) kernels for ``work`` rows: the plain Python bodies
    unless ``compiled``; parallel when the work is large enough and no other
    thread is in a parallel launch."""
    if not compiled:
        yield scan_partitions, recover_all
    elif work >= PARALLEL_MIN_ROWS and parallel_ok and _parallel_lock.acquire(blocking=False):
        try:
            yield _cpu_kernels(True)
        finally:
            _parallel_lock.release()
    else:
        yield _cpu_kernels(False)


def _cpu_kernels(parallel: bool = False):
    """numba.njit versions (scan, recovery), compiled on first use and cached
    on disk so later processes load them instead of compiling. The parallel
    ones run partitions and chunks of matches on all cores."""
    hit = _compiled.get(parallel)
    if hit is None:
        import numba
        jit = numba.njit(nogil=True, parallel=parallel, cache=True)
        if parallel:
            hit = (jit(scan_partitions_parallel), jit(recover_all_parallel))
        else:
            hit = (jit(scan_partitions), jit(recover_all))
        _compiled[parallel] = hit
    return hit


def scan_ranges(offsets, scan_from: int = -1, continues: bool = False, open_end: bool = False,
                end_margin: int = 0) -> tuple:
    """Per partition (host int64 arrays): the first row a search may start
    at, the end of its scan, and its first row (-1 when it began in an
    earlier batch) -- the stream arguments of :func:`run_scan` applied to
    the partition offsets."""
    offsets = np.asarray(offsets, dtype=np.int64)
    n_parts = offsets.shape[0] - 1
    scan_lo, scan_hi, part_start = offsets[:-1].copy(), offsets[1:].copy(), offsets[:-1].copy()
    if n_parts and scan_from >= 0:
        scan_lo[0] = scan_from
        if continues:
            part_start[0] = -1
    if n_parts and open_end:
        scan_hi[-1] = max(scan_lo[-1], scan_hi[-1] - end_margin)
    return scan_lo, scan_hi, part_start


def run_scan(classes: np.ndarray, offsets: np.ndarray, tables, skip_mode: int,
             skip_vars: int = 0, compiled: bool = True, scan_from: int = -1,
             continues: bool = False, open_end: bool = False, end_margin: int = 0,
             horizon: Optional[np.ndarray] = None) -> tuple:
    """Host driver of the scan: ``(starts, ends exclusive, partitions, errors)``.

    ``starts``/``ends`` are int64 arrays of every match in partition and start
    order, ``partitions`` the partition of each, ``errors`` an int64 array
    ``(n_partitions, 3)`` of (code, index into the returned matches, row to
    resume at). ``tables`` is a :class:`gpu_mr.pattern.dfa.DfaTables`;
    ``skip_vars`` the bitmask of variables of SKIP TO FIRST/LAST.

    For a stream of row batches: ``scan_from`` is where scanning starts in
    the first partition (rows before it are look-back for PREV), which is
    the continuation of an earlier batch's partition when ``continues``; with
    ``open_end`` the last partition goes on in later batches: its last
    ``end_margin`` rows (whose NEXT(...) is unknown yet) are not scanned and a
    search still undecided at the end is left for the next batch.

    ``horizon`` (a time limit; int64 per row, as ``gpu_mr.horizons`` gives
    it): a search starting at row s consumes only rows before
    ``horizon[s]``; the tables must then hold the empty class
    (``EMPTY_CLASS``).
    """
    n = classes.shape[0]
    n_parts = offsets.shape[0] - 1
    scan_lo, scan_hi, part_start = scan_ranges(offsets, scan_from, continues, open_end,
                                               end_margin)
    open_flags = np.zeros(n_parts, dtype=np.bool_)
    if n_parts and open_end:
        open_flags[-1] = True
    if (compiled and n >= CHUNKED_MIN_ROWS and n_parts
            and skip_mode in (SKIP_PAST_LAST_ROW, SKIP_TO_NEXT_ROW)):
        chunked = _chunked_scan(classes, scan_lo, scan_hi, part_start, open_end, tables,
                                skip_mode, skip_vars, horizon)
        if chunked is not None:
            return chunked
    out_start = np.empty(n, dtype=np.int64)
    out_end = np.empty(n, dtype=np.int64)
    counts = np.zeros(n_parts, dtype=np.int64)
    dead_state = np.zeros(n, dtype=np.int32)   # calloc: pages cost only where written
    path_scratch = n if skip_mode in (SKIP_TO_FIRST, SKIP_TO_LAST) else 0
    scratch_states = np.empty(path_scratch, dtype=np.int32)
    scratch_labels = np.empty(path_scratch, dtype=np.int16)
    scratch_excluded = np.empty(path_scratch, dtype=np.uint8)
    slot_part_start = np.empty(path_scratch, dtype=np.int64)
    slot_hi = np.empty(path_scratch, dtype=np.int64)
    slot_out = np.empty(path_scratch, dtype=np.int64)
    errors = np.zeros((n_parts, 3), dtype=np.int64)
    t = tables
    args = (classes, scan_lo, scan_hi, part_start, open_flags, t.trans, t.steps, t.end_accept,
            np.int32(t.start_first), np.int32(t.start_other), np.int32(skip_mode),
            np.int64(skip_vars), t.lineage, t.match_thread, t.end_thread,
            *horizon_args(horizon), out_start, out_end, counts, dead_state, scratch_states,
            scratch_labels, scratch_excluded, slot_part_start, slot_hi, slot_out, errors)
    with _kernels_for(n, n_parts > 1, compiled) as kernels:
        if compiled and kernels is _compiled.get(True):
            kernels[0](*args, _row_balanced_groups(scan_hi - scan_lo))
        else:
            kernels[0](*args)
    # Compact the per-partition slot ranges (from each scan's first row) in order.
    partitions = np.repeat(np.arange(n_parts, dtype=np.int64), counts)
    base = np.zeros(n_parts + 1, dtype=np.int64)
    np.cumsum(counts, out=base[1:])
    slots = (np.repeat(scan_lo, counts)
             + (np.arange(int(base[-1]), dtype=np.int64) - np.repeat(base[:-1], counts)))
    failing = np.flatnonzero(errors[:, 0])
    errors[failing, 1] = base[failing] + errors[failing, 1] - scan_lo[failing]
    return out_start[slots], out_end[slots], partitions, errors


# From this many rows, a few long partitions are scanned in speculative
# chunks on all cores (kernels/chunks.py) when one thread per partition would
# leave cores idle; the chunks are at least CHUNK_MIN_ROWS long, so that the
# boundary repairs stay a negligible share.
CHUNKED_MIN_ROWS = 1_000_000
CHUNK_MIN_ROWS = 65_536
CHUNK_THREADS = None        # None: numba's thread count (tests set more)
_chunk_drivers: dict = {}


def _chunked_scan(classes, scan_lo, scan_hi, part_start, open_end: bool, tables,
                  skip_mode: int, skip_vars: int, horizon=None):
    """``run_scan``'s result from speculative chunks of the partitions on all
    cores, or None when partition-level parallelism is good enough (the
    widest partition is at most one thread's share), another thread holds
    the parallel launch, or the chunks' shared memo would not be exact
    (:func:`memo_shared_ok`)."""
    import numba
    threads = CHUNK_THREADS or numba.get_num_threads()
    n = classes.shape[0]
    widths = scan_hi - scan_lo
    widest = int(widths.max())
    if threads < 2 or widest <= n // threads:
        return None
    if horizon is not None and not memo_shared_ok(tables):
        return None
    if not _parallel_lock.acquire(blocking=False):
        return None
    try:
        from . import chunks as C
        if not _chunk_drivers:
            jit = numba.njit(nogil=True, parallel=True, cache=True)
            _chunk_drivers.update({name: jit(fn) for name, fn in C.CPU_DRIVERS.items()})

        def launch(name, jobs, *args):
            _chunk_drivers[name](jobs, *args)
        chunk_rows = max(CHUNK_MIN_ROWS, -(-widest // (4 * threads)))
        starts, ends, partitions, errors, _, _, part_first_chunk = C.scan_in_chunks(
            np, launch, classes, scan_lo, scan_hi, part_start, open_end, tables, skip_mode,
            skip_vars, chunk_rows, horizon)
    finally:
        _parallel_lock.release()
    # Per partition: no SKIP errors in these modes; the row its last chunk
    # resumes at (the stream's resume row for the last partition).
    part_errors = np.zeros((len(scan_lo), 3), dtype=np.int64)
    part_errors[:, 2] = errors[part_first_chunk[1:] - 1, 2]
    return starts, ends, partitions, part_errors


def run_recovery(classes: np.ndarray, offsets: np.ndarray, starts: np.ndarray,
                 ends: np.ndarray, partitions: np.ndarray, tables, compiled: bool = True,
                 continues: bool = False, horizon: Optional[np.ndarray] = None) -> tuple:
    """Host driver of path recovery: ``(label_offsets, labels, excluded)`` for
    the matches ``[starts, ends)`` (CSR layout of ``engines.base.MatchArrays``).
    ``continues``: the first partition began in an earlier batch;
    ``horizon``: as for :func:`run_scan`."""
    lengths = np.maximum(ends - starts, 0)
    label_offsets = np.zeros(starts.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=label_offsets[1:])
    total = int(label_offsets[-1])
    labels = np.empty(total, dtype=np.int16)
    excluded = np.empty(total, dtype=np.uint8)
    states = np.empty(total, dtype=np.int32)
    part_start = offsets[:-1].astype(np.int64)
    if continues and part_start.size:
        part_start[0] = -1
    match_part_start = part_start[partitions]
    match_hi = offsets[partitions + 1].astype(np.int64)
    t = tables
    with _kernels_for(total, True, compiled) as kernels:
        fn = kernels[1]
        fn(classes, match_part_start, match_hi, starts, ends, label_offsets, t.trans,
           np.int32(t.start_first), np.int32(t.start_other), t.lineage, t.match_thread,
           t.end_thread, *horizon_args(horizon), states, labels, excluded)
    return label_offsets, labels, excluded.astype(bool)
