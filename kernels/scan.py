"""Segmented leftmost-first DFA scan over per-row class ids.

What: for each partition (rows ``offsets[p] .. offsets[p+1]``), find the
matches the reference engine finds, with AFTER MATCH SKIP PAST LAST ROW or
TO NEXT ROW, from a dense DFA table (pattern/dfa.py): at each start row, run
the DFA until it dies, remembering the last position where a match ended;
report (start, end exclusive); resume per the skip (after an empty match:
the next row). Output is written in partition and start order; its
specification is ``gpu_mr.pattern.dfa.match_spans``.
Why plain functions: the same body compiles with ``numba.njit`` for the CPU
engine and, later, ``numba.cuda.jit(device=True)`` for the GPU engine; the
host driver here only decides which.
Cost: O(rows scanned); a failing search rescans its rows from the next start
(linear for the usual shapes, quadratic in the worst case; the dead-state
memo of the reference engine is the known remedy).
"""

from __future__ import annotations

import numpy as np

SKIP_PAST_LAST_ROW = 0
SKIP_TO_NEXT_ROW = 1


def scan_partition(classes, lo, hi, trans, matched, end_accept, start_first, start_other,
                   skip_mode, out_start, out_end, n_out):
    """Scan one partition; append matches at ``n_out``; return the new count.

    ``classes[r]`` is the dense class index of row r, ``trans[s, c]`` the next
    state (0 = dead), ``matched[s, c]`` whether a match ends before the row,
    ``end_accept[s]`` whether one ends at the partition's end.
    """
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
            c = classes[q]
            if matched[state, c]:
                best = q
            state = trans[state, c]
            if state == 0:
                break
            q += 1
        if best < 0:
            pos += 1
            continue
        out_start[n_out] = pos
        out_end[n_out] = best
        n_out += 1
        if best == pos or skip_mode == SKIP_TO_NEXT_ROW:
            pos += 1
        else:
            pos = best
    return n_out


def make_driver(scan_one):
    """The loop over partitions, around a (plain or compiled) partition scan."""
    def scan_partitions(classes, offsets, trans, matched, end_accept, start_first, start_other,
                        skip_mode, out_start, out_end):
        n_out = 0
        for p in range(offsets.shape[0] - 1):
            n_out = scan_one(classes, offsets[p], offsets[p + 1], trans, matched, end_accept,
                             start_first, start_other, skip_mode, out_start, out_end, n_out)
        return n_out
    return scan_partitions


scan_partitions = make_driver(scan_partition)      # plain Python: the reference for tests
_compiled = None


def _cpu_kernels():
    """numba.njit versions, compiled on first use (numba is the `cpu` extra)."""
    global _compiled
    if _compiled is None:
        import numba
        jit = numba.njit(nogil=True)
        _compiled = jit(make_driver(jit(scan_partition)))
    return _compiled


def run_scan(classes: np.ndarray, offsets: np.ndarray, trans: np.ndarray, matched: np.ndarray,
             end_accept: np.ndarray, start_first: int, start_other: int, skip_mode: int,
             compiled: bool = True) -> tuple:
    """Host driver: (starts, ends exclusive) of every match, as int64 arrays.

    At most one match starts at each row, so ``len(classes)`` bounds the output.
    """
    n = classes.shape[0]
    out_start = np.empty(n, dtype=np.int64)
    out_end = np.empty(n, dtype=np.int64)
    fn = _cpu_kernels() if compiled else scan_partitions
    count = fn(classes, offsets, trans, matched, end_accept, np.int32(start_first),
               np.int32(start_other), np.int32(skip_mode), out_start, out_end)
    return out_start[:count], out_end[:count]
