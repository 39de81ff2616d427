"""The DFA scan and path recovery on a CUDA device: speculative chunks of
partitions, boundary repair, compaction by prefix sums.

What: the GPU twin of kernels/scan.py's host drivers. The kernel bodies are
the same ``register_jitable`` functions (``scan_partition``,
``recover_paths``), compiled here with ``numba.cuda.jit``; only the way work
is split differs. Every partition is cut into chunks of ``chunk_rows`` rows,
one thread each, so that one 1e9-row partition fills the device as well as
1e5 small ones do:

1. ``scan_chunks``: each thread scans its chunk as if a search started at
   its first row (speculation), starting searches only inside the chunk but
   reading on to its partition's end, and records its matches in slots from
   its first row, their count, and the row its next search would start at.
2. ``repair_chunks``: one thread per chunk repairs it as if the true scan
   entered it where chunk k-1's speculation left (``r``). If ``r`` is a
   row where chunk k's speculative scan also started a search, both scans
   are the same from there on (the scan is a function of where a search
   starts), so chunk k keeps its speculative matches from ``r`` on. Else
   the true scan is replayed one search at a time from ``r`` (matches
   written to the chunk's repair slots) until it reaches such a row, or
   leaves the chunk (then the chunk's speculation is dropped whole and it
   leaves at the replay's row). With AFTER MATCH SKIP TO NEXT ROW every row
   starts a search, so speculation is always right; past the last row, a
   replay ends at the first row not inside a speculative match, usually
   within a match or two.
2b. ``repair_chains``: one thread per partition walks its chunks in order,
   but visits only the few whose entry step 2 got wrong: those after a
   chunk that leaves off its speculation (a replay that crossed a whole
   chunk, or an undecided search). It jumps from one such chunk to the
   next (their list comes from a compaction), redoing each chunk after
   one until a chunk leaves where its speculation did. Before this step a
   single thread walked every chunk of its partition: on an H100 one
   1e9-row partition's scan took 1.8 s against 68 ms for 10,000
   partitions (2026-11-28), a million dependent reads in a row.
3. ``gather_matches``: per match, one of a chunk's repaired then kept
   speculative matches is copied to its place given by an exclusive prefix
   sum over chunks (its chunk found by a binary search over that sum):
   deterministic order, no atomics.
4. ``recover_matches``: one thread per match runs ``recover_paths``.

The bodies of these steps (``scan_chunk``, ``repair_speculated``,
``repair_chain``, ``gather_match``, ``recover_match``) live in
kernels/chunks.py, whose CPU drivers run them over cores for long
partitions. In a stream of batches the
last partition is open: a search reaching its end undecided stops the true
scan there (the repair drops later chunks' matches) and the next batch
resumes at that row. SKIP TO FIRST/LAST recovers paths inside the scan into
scratch indexed by row, which chunks of one partition would share: that mode
runs one chunk per partition. The dead-state memo (``dead_state``) is shared by all threads:
every value written is a fact (a DFA state from which no match follows at
that row), whoever wrote it, so races only lose memo hits.

Why this split: DESIGN.md §5's speculative chunking with boundary repair, as
in parallel lexing and regex matching over chunks (the scan's state is the
row a search starts at, and scans that agree on one such row agree after).
Cost: O(rows) speculative work, plus the replayed searches at chunk
boundaries (usually a few rows each); memory per row: the class id (1 B),
two int32 slots (8 B, int64 past 2**31 rows) and the int16 memo (2 B).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from . import compiled_once
from .chunks import (gather_match, recover_match, repair_chain, repair_speculated, scan_chunk,
                     scan_in_chunks)
from .scan import horizon_args, scan_ranges


# Rows per speculative chunk on a device: enough threads for any H100-class
# GPU at 1e8 rows and more, while each thread's run stays long enough that a
# boundary repair is rare work.
DEVICE_CHUNK_ROWS = 1024


@compiled_once
def kernels():
    """The kernels (numba.cuda compiles each on its first launch)."""
    # The kernels read the module global ``cuda``: the simulator swaps it in a
    # kernel's globals for its own thread-aware module, which a closure
    # variable would hide.
    @cuda.jit
    def scan_chunks(classes, chunk_lo, chunk_stop, chunk_hi, chunk_part_start, chunk_open,
                    trans, steps, end_accept, start_first, start_other, skip_mode, skip_vars,
                    lineage, match_thread, end_thread, horizon, timed, out_start, out_end, counts,
                    dead_state, scratch_states, scratch_labels, scratch_excluded, slot_part_start,
                    slot_hi, slot_out, errors):
        k = cuda.grid(1)
        if k < chunk_lo.shape[0]:
            scan_chunk(k, classes, chunk_lo, chunk_stop, chunk_hi, chunk_part_start,
                       chunk_open, trans, steps, end_accept, start_first, start_other, skip_mode,
                       skip_vars, lineage, match_thread, end_thread, horizon, timed, out_start,
                       out_end, counts, dead_state, scratch_states, scratch_labels,
                       scratch_excluded, slot_part_start, slot_hi, slot_out, errors)

    @cuda.jit
    def repair_chunks(chunk_part, part_first_chunk, classes, chunk_lo, chunk_stop, chunk_hi,
                      chunk_part_start, chunk_open, trans, steps, end_accept, start_first,
                      start_other, skip_mode, skip_vars, lineage, match_thread, end_thread,
                      horizon, timed, out_start, out_end, counts, spec_exit, fix_start, fix_end,
                      fix_counts, drops, dead_state, scratch_states, scratch_labels,
                      scratch_excluded, slot_part_start, slot_hi, slot_out, errors, replay_err):
        k = cuda.grid(1)
        if k < chunk_lo.shape[0]:
            repair_speculated(
                k, chunk_part, part_first_chunk, classes, chunk_lo, chunk_stop, chunk_hi,
                chunk_part_start, chunk_open, trans, steps, end_accept, start_first,
                start_other, skip_mode, skip_vars, lineage, match_thread, end_thread, horizon,
                timed, out_start, out_end, counts, spec_exit, fix_start, fix_end, fix_counts,
                drops, dead_state, scratch_states, scratch_labels, scratch_excluded,
                slot_part_start, slot_hi, slot_out, errors, replay_err)

    @cuda.jit
    def repair_chains(part_first_chunk, suspects, part_first_suspect, classes, chunk_lo,
                      chunk_stop, chunk_hi, chunk_part_start, chunk_open, trans, steps,
                      end_accept, start_first, start_other, skip_mode, skip_vars, lineage,
                      match_thread, end_thread, horizon, timed, out_start, out_end, counts,
                      spec_exit, fix_start, fix_end, fix_counts, drops, dead_state,
                      scratch_states, scratch_labels, scratch_excluded, slot_part_start,
                      slot_hi, slot_out, errors, replay_err):
        p = cuda.grid(1)
        if p < part_first_chunk.shape[0] - 1:
            repair_chain(
                p, part_first_chunk, suspects, part_first_suspect, classes, chunk_lo,
                chunk_stop, chunk_hi, chunk_part_start, chunk_open, trans, steps, end_accept,
                start_first, start_other, skip_mode, skip_vars, lineage, match_thread,
                end_thread, horizon, timed, out_start, out_end, counts, spec_exit, fix_start,
                fix_end, fix_counts, drops, dead_state, scratch_states, scratch_labels,
                scratch_excluded, slot_part_start, slot_hi, slot_out, errors, replay_err)

    @cuda.jit
    def gather_matches(chunk_lo, chunk_part, out_start, out_end, counts, fix_start, fix_end,
                       fix_counts, drops, first_out, starts, ends, partitions):
        o = cuda.grid(1)
        if o < starts.shape[0]:
            gather_match(o, chunk_lo, chunk_part, out_start, out_end, counts, fix_start,
                         fix_end, fix_counts, drops, first_out, starts, ends, partitions)

    @cuda.jit
    def recover_matches(classes, match_part_start, match_hi, starts, ends, label_offsets,
                        trans, start_first, start_other, lineage, match_thread, end_thread,
                        horizon, timed, states, labels, excluded):
        i = cuda.grid(1)
        if i < starts.shape[0]:
            recover_match(i, classes, match_part_start, match_hi, starts, ends,
                          label_offsets, trans, start_first, start_other, lineage, match_thread,
                          end_thread, horizon, timed, states, labels, excluded)

    return {"scan": scan_chunks, "repair": repair_chunks, "chain": repair_chains,
            "gather_match": gather_matches, "recover": recover_matches}


# Each kernel's body, by the kernel's name: a kernel runs its body once per
# thread index below its job count (tests run the bodies compiled for the CPU).
BODIES = {"scan": scan_chunk, "repair": repair_speculated, "chain": repair_chain,
          "gather_match": gather_match, "recover": recover_match}


def launch(backend, name: str, jobs: int, *args) -> None:
    """Run kernel ``name`` over ``jobs`` thread indices."""
    backend.launch(kernels()[name], jobs, *args)


class DeviceTables:
    """A ``DfaTables`` with its arrays on the device (they are small)."""

    def __init__(self, backend, tables):
        d = backend.to_device
        self.trans = d(tables.trans)
        self.steps = d(tables.steps)
        self.end_accept = d(tables.end_accept)
        self.lineage = d(tables.lineage)
        self.match_thread = d(tables.match_thread)
        self.end_thread = d(tables.end_thread)
        self.start_first = np.int32(tables.start_first)
        self.start_other = np.int32(tables.start_other)


def run_scan(backend, classes, offsets: np.ndarray, tables: DeviceTables, skip_mode: int,
             skip_vars: int, chunk_rows: int, scan_from: int = -1, continues: bool = False,
             open_end: bool = False, end_margin: int = 0, horizon=None) -> tuple:
    """Device driver of the scan: ``(starts, ends exclusive, partitions,
    failure, resume)`` with the match arrays on the device in partition and
    start order; ``failure`` is None or ``(code, match index, partition)``
    of the first partition whose AFTER MATCH SKIP TO a variable cannot
    resume; ``resume`` the row the last partition's next search starts at.
    ``offsets`` (host) are the partition offsets; the stream arguments are
    those of ``kernels.scan.run_scan``; ``horizon`` (on the device) too."""
    xp = backend.xp
    scan_lo, scan_hi, part_start = scan_ranges(offsets, scan_from, continues, open_end,
                                               end_margin)

    def run(name, jobs, *args):
        launch(backend, name, jobs, *args)
    starts, ends, partitions, errors, first_out, chunk_lo, _ = scan_in_chunks(
        xp, run, classes, scan_lo, scan_hi, part_start, open_end, tables, skip_mode, skip_vars,
        chunk_rows, horizon, gather_each_match=True)
    n_chunks = chunk_lo.shape[0]
    failure = None
    failing = xp.flatnonzero(errors[:, 0])
    if failing.shape[0]:
        # One chunk per partition in the SKIP TO modes: chunk = partition.
        c = backend.scalar(failing[0])
        code, slot = (int(x) for x in backend.to_host(errors[c, :2]))
        index = backend.scalar(first_out[c]) + slot - backend.scalar(chunk_lo[c])
        failure = (code, index, c)
    resume = backend.scalar(errors[-1, 2]) if n_chunks else 0
    return starts, ends, partitions, failure, resume


def run_recovery(backend, classes, offsets: np.ndarray, starts, ends, partitions,
                 tables: DeviceTables, continues: bool = False, horizon=None) -> tuple:
    """Device driver of path recovery: ``(label_offsets, labels, excluded)``
    on the device, the CSR layout of ``engines.base.MatchArrays``.
    ``continues``: the first partition began in an earlier batch;
    ``horizon``: as for :func:`run_scan`."""
    xp = backend.xp
    lengths = xp.maximum(ends - starts, 0)
    label_offsets = xp.zeros(starts.shape[0] + 1, dtype=np.int64)
    xp.cumsum(lengths, out=label_offsets[1:])
    total = backend.scalar(label_offsets[-1])
    labels = xp.empty(total, dtype=np.int16)
    excluded = xp.empty(total, dtype=np.uint8)
    states = xp.empty(max(total, 1), dtype=np.int32)
    offsets = np.asarray(offsets, dtype=np.int64)
    part_start = offsets[:-1].copy()
    if continues and part_start.size:
        part_start[0] = -1
    match_part_start = backend.to_device(part_start)[partitions]
    match_hi = backend.to_device(offsets[1:])[partitions]
    t = tables
    launch(backend, "recover", starts.shape[0], classes, match_part_start, match_hi, starts,
           ends, label_offsets, t.trans, t.start_first, t.start_other, t.lineage, t.match_thread,
           t.end_thread, *horizon_args(horizon, xp), states, labels, excluded)
    return label_offsets, labels, excluded
