"""Speculative chunks of partitions: the kernel bodies and the plan, for the
GPU's threads and the CPU's cores alike.

What: a partition's scan cut into chunks of rows, each scanned as if a
search started at its first row (``scan_chunk``); a pass per chunk that
repairs it from where its predecessor's speculation left
(``repair_speculated``) and a walk per partition over the few chunks whose
entry that got wrong (``repair_chain``); the compaction of every chunk's
kept matches (``gather_chunk``); and ``chunk_plan``, which cuts partitions into chunks.
The algorithm is described in kernels/gpu_scan.py's header. The bodies are
``register_jitable`` plain functions: kernels/gpu_scan.py compiles them into
``numba.cuda`` kernels, and the CPU drivers here run them over all cores
(``prange``) when a few long partitions would leave cores idle.
Cost: O(rows) speculative work plus the replayed searches at chunk
boundaries (usually a match or two each).
"""

from __future__ import annotations

import numpy as np

from .scan import (SKIP_TO_FIRST, SKIP_TO_LAST, SKIP_TO_NEXT_ROW, horizon_args, memo_shared_ok,
                   recover_paths, register_jitable, scan_partition)

try:
    from numba import prange
except ImportError:                  # the plain bodies still run without numba
    prange = range


@register_jitable
def scan_chunk(k, classes, chunk_lo, chunk_stop, chunk_hi, chunk_part_start, chunk_open, trans,
               steps, end_accept, start_first, start_other, skip_mode, skip_vars, lineage,
               match_thread, end_thread, horizon, timed, out_start, out_end, counts, dead_state,
               scratch_states, scratch_labels, scratch_excluded, slot_part_start, slot_hi,
               slot_out, errors):
    """Speculative scan of chunk ``k`` (kernels/gpu_scan.py's header, step 1)."""
    counts[k] = scan_partition(
        classes, chunk_lo[k], chunk_hi[k], chunk_stop[k], chunk_lo[k], chunk_part_start[k],
        chunk_open[k], trans, steps, end_accept, start_first, start_other, skip_mode, skip_vars,
        lineage, match_thread, end_thread, horizon, timed, out_start, out_end, dead_state,
        scratch_states, scratch_labels, scratch_excluded, slot_part_start, slot_hi, slot_out,
        errors[k])


@register_jitable
def recover_match(i, classes, match_part_start, match_hi, starts, ends, label_offsets, trans,
                  start_first, start_other, lineage, match_thread, end_thread, horizon, timed,
                  states, labels, excluded):
    """Path recovery of match ``i`` (kernels/gpu_scan.py's header, step 4)."""
    recover_paths(classes, i, i + 1, match_part_start, match_hi, starts, ends, label_offsets,
                  trans, start_first, start_other, lineage, match_thread, end_thread, horizon,
                  timed, states, labels, excluded)


@register_jitable
def repair_chunk(k, entry, classes, chunk_lo, chunk_stop, chunk_hi, chunk_part_start, chunk_open,
                 trans, steps, end_accept, start_first, start_other, skip_mode, skip_vars,
                 lineage, match_thread, end_thread, horizon, timed, out_start, out_end, counts,
                 spec_exit, fix_start, fix_end, fix_counts, drops, dead_state, scratch_states,
                 scratch_labels, scratch_excluded, slot_part_start, slot_hi, slot_out, errors,
                 replay_err):
    """Chunk ``k``'s matches when the true scan enters it at row ``entry``
    (at or after its first row): how many speculative matches it drops
    (``drops[k]``), the replayed ones (``fix_counts[k]``, in its repair
    slots from its first row) and the row the true scan leaves it at
    (``errors[k, 2]``; below ``chunk_stop[k]`` an undecided search of an
    open partition, where the true scan stops). ``spec_exit`` holds the
    speculative scan's leaving rows; ``replay_err[k]`` is scratch."""
    lo = chunk_lo[k]
    n_spec = counts[k]
    pos = entry
    exit_row = spec_exit[k]
    m = 0                               # speculative matches before pos are dropped
    n_fix = 0
    if pos != lo:                       # else speculation started right here
        # Speculation started searches at every row up to where it stopped
        # (its last, undecided search, if any), except inside its matches.
        spec_end = spec_exit[k] if spec_exit[k] < chunk_stop[k] else chunk_stop[k]
        while True:
            if pos >= chunk_stop[k]:    # the replay left the chunk: drop all speculation
                m = n_spec
                exit_row = pos
                break
            while m < n_spec and out_start[lo + m] < pos and out_end[lo + m] <= pos:
                m += 1
            if pos <= spec_end and (m == n_spec or out_start[lo + m] >= pos):
                break                   # pos started a speculative search: in step
            # replay one true search from pos
            n_fix += scan_partition(
                classes, pos, chunk_hi[k], pos + 1, lo + n_fix, chunk_part_start[k],
                chunk_open[k], trans, steps, end_accept, start_first, start_other, skip_mode,
                skip_vars, lineage, match_thread, end_thread, horizon, timed, fix_start, fix_end,
                dead_state, scratch_states, scratch_labels, scratch_excluded, slot_part_start,
                slot_hi, slot_out, replay_err[k])
            if replay_err[k, 2] == pos:  # undecided until more rows arrive
                m = n_spec
                exit_row = pos
                break
            pos = replay_err[k, 2]
    drops[k] = m
    fix_counts[k] = n_fix
    errors[k, 2] = exit_row


@register_jitable
def repair_speculated(k, chunk_part, part_first_chunk, classes, chunk_lo, chunk_stop, chunk_hi,
                      chunk_part_start, chunk_open, trans, steps, end_accept, start_first,
                      start_other, skip_mode, skip_vars, lineage, match_thread, end_thread,
                      horizon, timed, out_start, out_end, counts, spec_exit, fix_start, fix_end,
                      fix_counts, drops, dead_state, scratch_states, scratch_labels,
                      scratch_excluded, slot_part_start, slot_hi, slot_out, errors, replay_err):
    """Repair chunk ``k`` as if the true scan entered it where chunk k-1's
    speculation left (kernels/gpu_scan.py's header, step 2): right for
    every chunk whose predecessor's speculation was the true scan, which
    :func:`repair_chain` then checks. A partition's first chunk, and a
    chunk after an undecided speculative search, are left to it."""
    if part_first_chunk[chunk_part[k]] == k:
        return
    entry = spec_exit[k - 1]
    if entry < chunk_stop[k - 1]:
        return
    repair_chunk(k, entry, classes, chunk_lo, chunk_stop, chunk_hi, chunk_part_start, chunk_open,
                 trans, steps, end_accept, start_first, start_other, skip_mode, skip_vars,
                 lineage, match_thread, end_thread, horizon, timed, out_start, out_end, counts,
                 spec_exit, fix_start, fix_end, fix_counts, drops, dead_state, scratch_states,
                 scratch_labels, scratch_excluded, slot_part_start, slot_hi, slot_out, errors,
                 replay_err)


@register_jitable
def repair_chain(p, part_first_chunk, suspects, part_first_suspect, classes, chunk_lo,
                 chunk_stop, chunk_hi, chunk_part_start, chunk_open, trans, steps, end_accept,
                 start_first, start_other, skip_mode, skip_vars, lineage, match_thread,
                 end_thread, horizon, timed, out_start, out_end, counts, spec_exit, fix_start,
                 fix_end, fix_counts, drops, dead_state, scratch_states, scratch_labels,
                 scratch_excluded, slot_part_start, slot_hi, slot_out, errors, replay_err):
    """Walk partition ``p``'s chunks in order, visiting only those whose
    entry differs from what :func:`repair_speculated` assumed (step 2b of
    kernels/gpu_scan.py's header). ``suspects`` (sorted) are the chunks
    whose leaving row differs from their speculation's, or whose
    speculation ended undecided; partition p's are ``suspects[
    part_first_suspect[p]:part_first_suspect[p + 1]]``. A chunk entered
    where its predecessor's speculation left was repaired right, and so
    leaves where its speculation left unless it is a suspect: the walk
    jumps from suspect to suspect, redoing the chunks after each until a
    chunk leaves where its speculation did."""
    last = part_first_chunk[p + 1]
    s = part_first_suspect[p]
    s_end = part_first_suspect[p + 1]
    k = part_first_chunk[p] + 1
    while k < last:
        e = errors[k - 1, 2]            # the row the true scan leaves chunk k-1 at
        if e < chunk_stop[k - 1]:
            # an undecided search in chunk k-1: the true scan ends there
            for j in range(k, last):
                drops[j] = counts[j]
                fix_counts[j] = 0
                errors[j, 2] = e
            return
        if e == spec_exit[k - 1]:
            # chunk k was repaired from the right row; so were the chunks
            # after it up to the next suspect, which leaves off speculation
            while s < s_end and suspects[s] < k:
                s += 1
            if s == s_end:
                return
            k = suspects[s] + 1
            continue
        repair_chunk(k, e, classes, chunk_lo, chunk_stop, chunk_hi, chunk_part_start, chunk_open,
                     trans, steps, end_accept, start_first, start_other, skip_mode, skip_vars,
                     lineage, match_thread, end_thread, horizon, timed, out_start, out_end,
                     counts, spec_exit, fix_start, fix_end, fix_counts, drops, dead_state,
                     scratch_states, scratch_labels, scratch_excluded, slot_part_start, slot_hi,
                     slot_out, errors, replay_err)
        k += 1


@register_jitable
def gather_chunk(k, chunk_lo, chunk_part, out_start, out_end, counts, fix_start, fix_end,
                 fix_counts, drops, first_out, starts, ends, partitions):
    """Copy chunk ``k``'s replayed, then kept speculative, matches to their
    place ``first_out[k] ...`` of the compacted arrays."""
    lo = chunk_lo[k]
    o = first_out[k]
    for i in range(fix_counts[k]):
        starts[o] = fix_start[lo + i]
        ends[o] = fix_end[lo + i]
        partitions[o] = chunk_part[k]
        o += 1
    for i in range(drops[k], counts[k]):
        starts[o] = out_start[lo + i]
        ends[o] = out_end[lo + i]
        partitions[o] = chunk_part[k]
        o += 1


@register_jitable
def partition_of(r, offsets, lo, hi):
    """The partition p with ``offsets[p] <= r < offsets[p + 1]``, the last
    such p when empty partitions share an offset, searched among
    ``lo <= p < hi`` (where it must lie)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if offsets[mid] <= r:
            lo = mid
        else:
            hi = mid
    return lo


@register_jitable
def gather_match(o, chunk_lo, chunk_part, out_start, out_end, counts, fix_start, fix_end,
                 fix_counts, drops, first_out, starts, ends, partitions):
    """Copy compacted match ``o`` from its chunk: the same copies as
    :func:`gather_chunk`, one match per thread index. On a device a thread
    per chunk copied its ~150 matches alone, each write 1,024 rows' worth
    of matches away from its neighbour thread's: 36 ms of a 55 ms scan at
    1e9 rows on an H200 (2026-11-28). Here neighbouring threads copy
    neighbouring matches, and each finds its chunk by a binary search over
    ``first_out`` (the threads of a warp mostly walk the same path)."""
    lo = partition_of(o, first_out, 0, first_out.shape[0] - 1)     # o's chunk
    j = o - first_out[lo]
    base = chunk_lo[lo]
    if j < fix_counts[lo]:
        starts[o] = fix_start[base + j]
        ends[o] = fix_end[base + j]
    else:
        i = base + drops[lo] + j - fix_counts[lo]
        starts[o] = out_start[i]
        ends[o] = out_end[i]
    partitions[o] = chunk_part[lo]


def chunk_plan(xp, scan_lo, scan_hi, part_start, open_last: bool, chunk_rows: int) -> tuple:
    """Cut every partition's scan range ``scan_lo[p] .. scan_hi[p]`` (host
    arrays) into chunks of ``chunk_rows`` rows (its last one shorter; an
    empty range gets one empty chunk): ``(part_first_chunk, chunk_part,
    chunk_lo, chunk_stop, chunk_hi, chunk_part_start, chunk_open)`` in the
    array module ``xp`` (numpy, or cupy: then on the device). ``open_last``:
    the last partition goes on in later rows."""
    scan_lo, scan_hi, part_start = (xp.asarray(a, dtype=np.int64)
                                    for a in (scan_lo, scan_hi, part_start))
    n_parts = scan_lo.shape[0]
    per_part = xp.maximum((scan_hi - scan_lo + (chunk_rows - 1)) // chunk_rows, 1)
    part_first_chunk = xp.zeros(n_parts + 1, dtype=np.int64)
    xp.cumsum(per_part, out=part_first_chunk[1:])
    n_chunks = int(part_first_chunk[-1])
    # Each chunk's partition: a binary search, not xp.repeat (cupy's needs
    # its counts on the host).
    chunk_part = xp.searchsorted(part_first_chunk[1:], xp.arange(n_chunks, dtype=np.int64),
                                 side="right")
    chunk_lo = scan_lo[chunk_part] + (
        xp.arange(n_chunks, dtype=np.int64) - part_first_chunk[:-1][chunk_part]) * chunk_rows
    chunk_hi = scan_hi[chunk_part]
    chunk_lo = xp.minimum(chunk_lo, chunk_hi)
    chunk_stop = xp.minimum(chunk_lo + chunk_rows, chunk_hi)
    chunk_open = (chunk_part == n_parts - 1) & bool(open_last)
    return (part_first_chunk, chunk_part, chunk_lo, chunk_stop, chunk_hi,
            part_start[chunk_part], chunk_open)


def scan_in_chunks(xp, launch, classes, scan_lo, scan_hi, part_start, open_end: bool,
                   tables, skip_mode: int, skip_vars: int, chunk_rows: int,
                   horizon=None, gather_each_match: bool = False) -> tuple:
    """Speculative scan, repair and compaction of every partition's scan
    range (host arrays, as ``scan.scan_ranges`` gives them) in chunks of
    ``chunk_rows``: ``(starts, ends exclusive, partitions, errors,
    first_out, chunk_lo, part_first_chunk)`` in the array module ``xp``.
    ``errors`` is per chunk (code, slot, row its true scan leaves at);
    ``first_out[k]`` where chunk k's matches begin. ``launch(name, jobs,
    *args)`` runs a body (``CPU_DRIVERS`` on the cores, or the CUDA kernels
    of kernels/gpu_scan.py) over ``jobs`` indices; ``tables`` has the
    arrays of ``pattern.dfa.DfaTables`` (on the device for the GPU);
    ``horizon`` the per-row horizons of a time limit (``scan.run_scan``),
    in ``xp``, or None. ``gather_each_match``: the compaction runs
    ``gather_match`` per match (a device's choice) instead of
    ``gather_chunk`` per chunk (the cores': each copies a run of memory)."""
    n = classes.shape[0]
    if skip_mode in (SKIP_TO_FIRST, SKIP_TO_LAST):
        chunk_rows = max(n, 1)          # path scratch is per row: one chunk per partition
    elif horizon is not None and not memo_shared_ok(tables):
        chunk_rows = max(n, 1)          # chunks sharing the memo would not be exact
    (part_first_chunk, chunk_part, chunk_lo, chunk_stop, chunk_hi, chunk_part_start,
     chunk_open) = chunk_plan(xp, scan_lo, scan_hi, part_start, open_end, chunk_rows)
    n_chunks, n_parts = chunk_lo.shape[0], len(scan_lo)
    slot_type = np.int32 if n < 2 ** 31 - 1 else np.int64
    out_start = xp.empty(max(n, 1), dtype=slot_type)
    out_end = xp.empty(max(n, 1), dtype=slot_type)
    counts = xp.zeros(n_chunks, dtype=np.int64)
    dead_state = xp.zeros(max(n, 1), dtype=np.int16)   # 1 + state: the DFA cap is 10,000
    path_scratch = n if skip_mode in (SKIP_TO_FIRST, SKIP_TO_LAST) else 1
    scratch = (dead_state, xp.empty(path_scratch, dtype=np.int32),
               xp.empty(path_scratch, dtype=np.int16), xp.empty(path_scratch, dtype=np.uint8),
               xp.empty(path_scratch, dtype=np.int64), xp.empty(path_scratch, dtype=np.int64),
               xp.empty(path_scratch, dtype=np.int64))
    errors = xp.zeros((n_chunks, 3), dtype=np.int64)
    t = tables
    dfa_args = (t.trans, t.steps, t.end_accept, np.int32(t.start_first),
                np.int32(t.start_other), np.int32(skip_mode), np.int64(skip_vars), t.lineage,
                t.match_thread, t.end_thread, *horizon_args(horizon, xp))
    launch("scan", n_chunks, classes, chunk_lo, chunk_stop, chunk_hi, chunk_part_start,
           chunk_open, *dfa_args, out_start, out_end, counts, *scratch, errors)
    fix_counts = xp.zeros(n_chunks, dtype=np.int64)
    drops = xp.zeros(n_chunks, dtype=np.int64)
    fix_start = fix_end = out_start[:1]         # unused unless a partition has two chunks
    if n_chunks > n_parts and (skip_mode != SKIP_TO_NEXT_ROW or open_end):
        fix_start = xp.empty(n, dtype=slot_type)
        fix_end = xp.empty(n, dtype=slot_type)
        replay_err = xp.zeros((n_chunks, 3), dtype=np.int64)
        spec_exit = errors[:, 2].copy()
        chunk_args = (classes, chunk_lo, chunk_stop, chunk_hi, chunk_part_start, chunk_open,
                      *dfa_args, out_start, out_end, counts, spec_exit, fix_start, fix_end,
                      fix_counts, drops, *scratch, errors, replay_err)
        launch("repair", n_chunks, chunk_part, part_first_chunk, *chunk_args)
        suspects = xp.flatnonzero((errors[:, 2] != spec_exit) | (spec_exit < chunk_stop))
        if suspects.shape[0]:
            part_first_suspect = xp.searchsorted(suspects, part_first_chunk)
            launch("chain", n_parts, part_first_chunk, suspects, part_first_suspect,
                   *chunk_args)
    first_out = xp.zeros(n_chunks + 1, dtype=np.int64)
    xp.cumsum(fix_counts + counts - drops, out=first_out[1:])
    total = int(first_out[-1])
    starts = xp.empty(total, dtype=np.int64)
    ends = xp.empty(total, dtype=np.int64)
    partitions = xp.empty(total, dtype=np.int64)
    launch(*(("gather_match", total) if gather_each_match else ("gather", n_chunks)),
           chunk_lo, chunk_part, out_start, out_end, counts, fix_start, fix_end, fix_counts,
           drops, first_out, starts, ends, partitions)
    return starts, ends, partitions, errors, first_out, chunk_lo, part_first_chunk


# CPU drivers: one thread index per chunk (or partition), over all cores.
# One module-level function per body, so that numba's disk cache finds each.

def scan_chunks_parallel(jobs, *args):
    for k in prange(jobs):
        scan_chunk(k, *args)


def repair_chunks_parallel(jobs, *args):
    for k in prange(jobs):
        repair_speculated(k, *args)


def repair_chains_parallel(jobs, *args):
    for p in prange(jobs):
        repair_chain(p, *args)


def gather_chunks_parallel(jobs, *args):
    for k in prange(jobs):
        gather_chunk(k, *args)


CPU_DRIVERS = {"scan": scan_chunks_parallel, "repair": repair_chunks_parallel,
               "chain": repair_chains_parallel, "gather": gather_chunks_parallel}
