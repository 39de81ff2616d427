"""Segmented leftmost-first DFA scan over per-row class ids, and path recovery.

What: for each partition (rows ``offsets[p] .. offsets[p+1]``), find the
matches the reference engine finds, from dense DFA tables
(``gpu_mr.pattern.dfa.DfaTables``): at each start row run the DFA until it
dies, remembering the last position where a match ended; report (start, end
exclusive); resume per AFTER MATCH SKIP (after an empty match or no match:
the next row). SKIP TO FIRST/LAST v needs the match's mapping, so the scan
recovers it (``recover_path``) to find the row to resume at. A second kernel
recovers the mapping of every reported match, one independent job per match.
The specification of the scan is ``gpu_mr.pattern.dfa.match_spans``.

Dead-state memo: a search that finds no match proves that every (DFA state,
row) it passed through leads to no match (row-local DEFINEs: the future
depends only on the state and the rows ahead). Later searches of the
partition that reach such a pair stop at once. This is the reference engine's
dead-thread memo at DFA granularity, and it keeps shapes like ``A+ B`` over a
long run of A rows linear instead of quadratic.

Path recovery: re-walk the match's rows to get the DFA state before each row,
then follow the lineage tables backwards from the thread that reached MATCH:
each thread knows its parent thread and the CONSUME instruction (variable,
``{- -}`` mark) it took. O(match length), exact by construction.

Why plain functions: the same bodies compile with ``numba.njit`` for the CPU
engine and ``numba.cuda.jit(device=True)`` for the GPU engine; the host
drivers here only decide which. Output slots are per partition (a partition
of n rows has at most n matches, one per start row), so partitions run in
parallel without coordination, and matches land in a deterministic order.
Cost: O(rows scanned) per partition; O(match length) per recovered match.
"""

from __future__ import annotations

import numpy as np

SKIP_PAST_LAST_ROW = 0
SKIP_TO_NEXT_ROW = 1
SKIP_TO_FIRST = 2
SKIP_TO_LAST = 3

# Error codes a scan reports per partition (the host raises the message).
ERR_NONE = 0
ERR_SKIP_NO_ROW = 1          # SKIP TO FIRST/LAST v, but no row of the match is v
ERR_SKIP_TO_FIRST_ROW = 2    # SKIP TO ... lands on the match's first row: endless loop


def recover_path(classes, s, e, lo, hi, trans, start_first, start_other, parent_thread,
                 parent_inst, match_thread, end_thread, inst_var, inst_excluded, states,
                 labels, excluded, out):
    """Write the variable id and ``{- -}`` mark of rows ``s .. e-1`` of the
    match ``[s, e)`` at ``labels[out ...]`` / ``excluded[out ...]``;
    ``states[out ...]`` is scratch of the same length."""
    if e <= s:
        return
    state = start_first if s == lo else start_other
    for q in range(s, e):
        states[out + q - s] = state
        state = trans[state, classes[q]]
    if e == hi:
        thread = end_thread[state]
    else:
        thread = match_thread[state, classes[e]]
    for q in range(e - 1, s - 1, -1):
        before = states[out + q - s]
        c = classes[q]
        inst = parent_inst[before, c, thread]
        labels[out + q - s] = inst_var[inst]
        excluded[out + q - s] = inst_excluded[inst]
        thread = parent_thread[before, c, thread]


def make_scan_partition(recover_one):
    """The partition scan around a (plain or compiled) path recovery."""
    def scan_partition(classes, lo, hi, trans, matched, end_accept, start_first, start_other,
                       skip_mode, skip_vars, parent_thread, parent_inst, match_thread, end_thread,
                       inst_var, inst_excluded, out_start, out_end, seen_state, seen_search,
                       search_failed, scratch_states, scratch_labels, scratch_excluded, err):
        """Scan one partition; write its matches at slots ``lo, lo+1, ...`` of
        ``out_start`` / ``out_end``; return how many. ``err[0:2]`` = (code, slot
        of the failing match) when AFTER MATCH SKIP TO a variable cannot resume.
        ``seen_state`` / ``seen_search`` / ``search_failed`` are the dead-state
        memo (per row: the state and start row of the last search there, and per
        start row whether its search failed), ``scratch_*`` room for one match's
        path (SKIP TO a variable only); all are indexed by absolute row."""
        n_out = 0
        pos = lo
        while pos < hi:
            state = start_first if pos == lo else start_other
            best = -1
            q = pos
            while True:
                if q == hi:
                    if end_accept[state]:
                        best = hi
                    break
                if seen_state[q] == state and search_failed[seen_search[q]]:
                    break                       # a failed search passed here: no match ahead
                seen_state[q] = state
                seen_search[q] = pos
                c = classes[q]
                if matched[state, c]:
                    best = q
                state = trans[state, c]
                if state == 0:
                    break
                q += 1
            if best < 0:
                search_failed[pos] = True
                pos += 1
                continue
            slot = lo + n_out
            out_start[slot] = pos
            out_end[slot] = best
            n_out += 1
            if best == pos or skip_mode == SKIP_TO_NEXT_ROW:
                pos += 1
            elif skip_mode == SKIP_PAST_LAST_ROW:
                pos = best
            else:
                recover_one(classes, pos, best, lo, hi, trans, start_first, start_other,
                            parent_thread, parent_inst, match_thread, end_thread, inst_var,
                            inst_excluded, scratch_states, scratch_labels, scratch_excluded, pos)
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
        return n_out
    return scan_partition


def make_scan_driver(scan_one, prange):
    """The loop over partitions (parallel where ``prange`` is numba's)."""
    def scan_partitions(classes, offsets, trans, matched, end_accept, start_first, start_other,
                        skip_mode, skip_vars, parent_thread, parent_inst, match_thread,
                        end_thread, inst_var, inst_excluded, out_start, out_end, counts,
                        seen_state, seen_search, search_failed, scratch_states, scratch_labels,
                        scratch_excluded, errors):
        for p in prange(offsets.shape[0] - 1):
            counts[p] = scan_one(classes, offsets[p], offsets[p + 1], trans, matched,
                                 end_accept, start_first, start_other, skip_mode, skip_vars,
                                 parent_thread, parent_inst, match_thread, end_thread, inst_var,
                                 inst_excluded, out_start, out_end, seen_state, seen_search,
                                 search_failed, scratch_states, scratch_labels,
                                 scratch_excluded, errors[p])
    return scan_partitions


def make_recover_driver(recover_one, prange):
    """Path recovery for every match, independently (parallel where numba's)."""
    def recover_all(classes, match_lo, match_hi, starts, ends, label_offsets, trans,
                    start_first, start_other, parent_thread, parent_inst, match_thread,
                    end_thread, inst_var, inst_excluded, states, labels, excluded):
        for i in prange(starts.shape[0]):
            recover_one(classes, starts[i], ends[i], match_lo[i], match_hi[i], trans,
                        start_first, start_other, parent_thread, parent_inst, match_thread,
                        end_thread, inst_var, inst_excluded, states, labels, excluded,
                        label_offsets[i])
    return recover_all


# Plain Python: the reference for the kernel tests.
scan_partitions = make_scan_driver(make_scan_partition(recover_path), range)
recover_all = make_recover_driver(recover_path, range)
_compiled = None


def _cpu_kernels():
    """numba.njit versions, compiled on first use (numba is the `cpu` extra).
    Partitions and matches run in parallel threads; compiled code is cached
    on disk so later processes skip the compile."""
    global _compiled
    if _compiled is None:
        import numba
        body = numba.njit(nogil=True, cache=True)
        driver = numba.njit(nogil=True, parallel=True, cache=True)
        recover = body(recover_path)
        _compiled = (driver(make_scan_driver(body(make_scan_partition(recover)), numba.prange)),
                     driver(make_recover_driver(recover, numba.prange)))
    return _compiled


def run_scan(classes: np.ndarray, offsets: np.ndarray, tables, skip_mode: int,
             skip_vars: int = 0, compiled: bool = True) -> tuple:
    """Host driver of the scan: ``(starts, ends exclusive, partitions, errors)``.

    ``starts``/``ends`` are int64 arrays of every match in partition and start
    order, ``partitions`` the partition of each, ``errors`` an int64 array
    ``(n_partitions, 2)`` of (code, index into the returned matches).
    ``tables`` is a :class:`gpu_mr.pattern.dfa.DfaTables`; ``skip_vars`` the
    bitmask of variables of SKIP TO FIRST/LAST.
    """
    n = classes.shape[0]
    n_parts = offsets.shape[0] - 1
    out_start = np.empty(n, dtype=np.int64)
    out_end = np.empty(n, dtype=np.int64)
    counts = np.zeros(max(n_parts, 0), dtype=np.int64)
    seen_state = np.full(n, -1, dtype=np.int32)
    seen_search = np.zeros(n, dtype=np.int64)
    search_failed = np.zeros(n, dtype=np.bool_)
    path_scratch = n if skip_mode in (SKIP_TO_FIRST, SKIP_TO_LAST) else 0
    scratch_states = np.empty(path_scratch, dtype=np.int32)
    scratch_labels = np.empty(path_scratch, dtype=np.int16)
    scratch_excluded = np.empty(path_scratch, dtype=np.uint8)
    errors = np.zeros((max(n_parts, 0), 2), dtype=np.int64)
    fn = _cpu_kernels()[0] if compiled else scan_partitions
    t = tables
    fn(classes, offsets, t.trans, t.matched, t.end_accept, np.int32(t.start_first),
       np.int32(t.start_other), np.int32(skip_mode), np.int64(skip_vars), t.parent_thread,
       t.parent_inst, t.match_thread, t.end_thread, t.inst_var, t.inst_excluded, out_start,
       out_end, counts, seen_state, seen_search, search_failed, scratch_states, scratch_labels,
       scratch_excluded, errors)
    # Compact the per-partition slot ranges into one array, in order.
    partitions = np.repeat(np.arange(n_parts, dtype=np.int64), counts)
    first_slot = np.repeat(offsets[:-1].astype(np.int64), counts)
    base = np.zeros(n_parts + 1, dtype=np.int64)
    np.cumsum(counts, out=base[1:])
    slots = first_slot + (np.arange(int(base[-1]), dtype=np.int64) - np.repeat(base[:-1], counts))
    failing = np.flatnonzero(errors[:, 0])
    errors[failing, 1] = base[failing] + errors[failing, 1] - offsets[failing]
    return out_start[slots], out_end[slots], partitions, errors


def run_recovery(classes: np.ndarray, offsets: np.ndarray, starts: np.ndarray,
                 ends: np.ndarray, partitions: np.ndarray, tables,
                 compiled: bool = True) -> tuple:
    """Host driver of path recovery: ``(label_offsets, labels, excluded)`` for
    the matches ``[starts, ends)`` (CSR layout of ``engines.base.MatchArrays``)."""
    lengths = np.maximum(ends - starts, 0)
    label_offsets = np.zeros(starts.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=label_offsets[1:])
    total = int(label_offsets[-1])
    labels = np.empty(total, dtype=np.int16)
    excluded = np.empty(total, dtype=np.uint8)
    states = np.empty(total, dtype=np.int32)
    match_lo = offsets[partitions].astype(np.int64)
    match_hi = offsets[partitions + 1].astype(np.int64)
    fn = _cpu_kernels()[1] if compiled else recover_all
    t = tables
    fn(classes, match_lo, match_hi, starts, ends, label_offsets, t.trans,
       np.int32(t.start_first), np.int32(t.start_other), t.parent_thread, t.parent_inst,
       t.match_thread, t.end_thread, t.inst_var, t.inst_excluded, states, labels, excluded)
    return label_offsets, labels, excluded.astype(bool)
