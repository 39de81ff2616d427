"""The register machine on a CUDA device: one thread per partition.

What: the device driver of kernels/registers.py's ``run_partitions`` (the
Pike VM whose threads carry registers, for DEFINEs that read the match so
far). The query's module (gpu_mr/engines/gpu_registers.py builds it) holds
the clones of those bodies with the query's generated APPLY / PRED, each
compiled with ``numba.cuda.jit(device=True)``, and :func:`partition_kernel`
as its ``cuda.jit`` kernel: thread ``j`` runs ``run_partitions`` over its
one partition ``jobs[j]`` with its own slices of every buffer (thread
lists, register rows, seen entries, back-pointer log, stack, counters) and
its own output region for matches and labels; the columns, constants and
program are shared and read-only. :func:`run_on_device` launches it in
rounds and handles each thread's status as the host driver
(engines/registers.py ``_drive``) does:

- DONE: the partition's matches stay in that round's output region;
- GROW: that partition's buffer grows fourfold and only the partitions that
  stopped are launched again, resuming at the search that stopped (their
  counters carried, their output so far copied into the new region);
- ERROR / FALLBACK / SKIP_ERROR: the partition is returned as failed, for
  the caller to rerun with the reference engine (exact result or error).

Finally every finished partition's matches are copied, in partition order,
to places given by an exclusive prefix sum of the per-partition counts
(:func:`gather_output`, one thread per partition): deterministic, no
atomics.

Why: DESIGN.md §5 and §6: registers of fixed size run on the GPU too, with
no second copy of the matching logic; one thread per partition because a
search's registers depend on every row before it in the match (no
speculative chunks, unlike the DFA scan of kernels/gpu_scan.py).
Cost: the host driver's, spread over partitions: O(rows scanned x live
threads x DEFINE cost) per partition, on one device thread each, so a few
huge partitions run serially; memory per thread proportional to its
partition's length (capped at the host's first sizes) plus O(NFA states).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .registers import (B_LABELS, B_LOG, B_MATCHES, B_POOL, B_SEEN, B_THREADS, C_DETAIL, C_POS,
                        DONE, GROW, N_COUNTERS, run_partitions)

# Partitions per launch: enough threads to fill an H100-class device, while
# the per-thread scratch sized by NFA states (seen marks, stack) stays small.
MAX_JOBS = 1 << 17


# ------------------------------------------------------------ kernel bodies

def partition_kernel(jobs, offsets, start_state, op, out, out2, var, excl, skip_kind, skip_set,
                     init_i, init_f, base, size, th_state, th_node, th_reg, pool_i, pool_f,
                     seen_stamp, seen_head, ent_row, ent_next, stack, log_par, log_var, log_exc,
                     ctr, icols, fcols, valid, ci, cf, horizon, timed, m_part, m_num, m_start,
                     m_end, labels, lexc, out_ctr, status):
    """Thread ``j``: ``run_partitions`` over partition ``jobs[j]`` alone (the
    offsets up to its end, starting at it), on its slices: from
    ``base[j, b]``, ``size[j, b]`` entries of buffer ``b`` (twice that for
    the two halves of the thread lists and register rows), and row ``j`` of
    the per-thread arrays. Its source is compiled in the query's module,
    where ``run_partitions`` is the query's clone (the import above is for
    reading only)."""
    j = cuda.grid(1)
    if j < jobs.shape[0]:
        p = jobs[j]
        t0 = base[j, B_THREADS]
        t1 = t0 + 2 * size[j, B_THREADS]
        r0 = base[j, B_POOL]
        r1 = r0 + 2 * size[j, B_POOL]
        s0 = base[j, B_SEEN]
        s1 = s0 + size[j, B_SEEN]
        g0 = base[j, B_LOG]
        g1 = g0 + size[j, B_LOG]
        m0 = base[j, B_MATCHES]
        m1 = m0 + size[j, B_MATCHES]
        l0 = base[j, B_LABELS]
        l1 = l0 + size[j, B_LABELS]
        st, _ = run_partitions(
            offsets[:p + 2], p, start_state, op, out, out2, var, excl, skip_kind, skip_set,
            init_i, init_f, th_state[t0:t1], th_node[t0:t1], th_reg[t0:t1], pool_i[r0:r1],
            pool_f[r0:r1], seen_stamp[j], seen_head[j], ent_row[s0:s1], ent_next[s0:s1],
            stack[j], log_par[g0:g1], log_var[g0:g1], log_exc[g0:g1], ctr[j], icols, fcols,
            valid, ci, cf, m_part[m0:m1], m_num[m0:m1], m_start[m0:m1], m_end[m0:m1],
            labels[l0:l1], lexc[l0:l1], out_ctr[j], horizon, timed)
        status[j] = st


def gather_output(src_m, src_l, n_m, n_l, dst_m, dst_l, s_part, s_num, s_start, s_end,
                  s_labels, s_lexc, d_part, d_num, d_start, d_end, d_labels, d_lexc):
    """Thread ``i`` copies region ``i``: ``n_m[i]`` matches from ``src_m[i]``
    to ``dst_m[i]``, ``n_l[i]`` labels from ``src_l[i]`` to ``dst_l[i]``."""
    i = cuda.grid(1)
    if i < src_m.shape[0]:
        a, b = src_m[i], dst_m[i]
        for t in range(n_m[i]):
            d_part[b + t] = s_part[a + t]
            d_num[b + t] = s_num[a + t]
            d_start[b + t] = s_start[a + t]
            d_end[b + t] = s_end[a + t]
        a, b = src_l[i], dst_l[i]
        for t in range(n_l[i]):
            d_labels[b + t] = s_labels[a + t]
            d_lexc[b + t] = s_lexc[a + t]


_gather: list = []


def gather_kernel():
    """:func:`gather_output` compiled (the same for every query: once)."""
    if not _gather:
        _gather.append(cuda.jit(gather_output))
    return _gather[0]


# ------------------------------------------------------------- host driver

class _Output:
    """One round's output buffers (on the device) and its regions."""

    def __init__(self, xp, n_matches: int, n_labels: int):
        self.m_part, self.m_num, self.m_start, self.m_end = \
            (xp.zeros(max(1, n_matches), dtype=np.int64) for _ in range(4))
        self.labels = xp.zeros(max(1, n_labels), dtype=np.int16)
        self.lexc = xp.zeros(max(1, n_labels), dtype=np.bool_)

    def arrays(self) -> tuple:
        return (self.m_part, self.m_num, self.m_start, self.m_end, self.labels, self.lexc)


def _copy_regions(backend, gather, src: _Output, dst: _Output, src_m, src_l, n_m, n_l, dst_m,
                  dst_l) -> None:
    if len(src_m) == 0:
        return
    d = backend.to_device
    backend.launch(gather, len(src_m), *(d(np.asarray(a, dtype=np.int64)) for a in
                                         (src_m, src_l, n_m, n_l, dst_m, dst_l)),
                   *src.arrays(), *dst.arrays())


def run_on_device(backend, kernel, offsets: np.ndarray, program: tuple, columns: tuple,
                  first_sizes, n_states: int, ki: int, kf: int) -> tuple:
    """Run ``kernel`` (a query's :func:`partition_kernel`) over every
    non-empty partition.

    ``offsets``: the partition offsets (host); ``program``: the device
    arrays and scalars ``(start_state, op, out, out2, var, excl, skip_kind,
    skip_set, init_i, init_f)``; ``columns``: ``(icols, fcols, valid, ci,
    cf, horizon, timed)`` on the device (``horizon``: a time limit's per-row
    horizons, a dummy unless ``timed``); ``first_sizes(lengths)``: the first sizes of the
    six buffers (K.B_*) per partition, an int64 array (partitions x 6);
    ``ki``, ``kf``: registers per row.

    Returns ``(arrays, label_offsets, failed)``: the matches of the
    partitions that finished as device arrays ``(partition, number, start,
    end inclusive, labels, excluded)`` in partition order, their CSR label
    offsets (device), and the ascending partitions whose threads stopped
    with ERROR, FALLBACK or SKIP_ERROR (their output dropped).
    """
    xp = backend.xp
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    parts = np.flatnonzero(lengths > 0).astype(np.int64)
    d_offsets = backend.to_device(offsets)
    gather = gather_kernel()
    counts = np.zeros((len(lengths), 2), dtype=np.int64)    # matches, labels per partition
    finished: list = []         # (output, jobs' partitions, their match / label starts)
    failed: list = []
    for w in range(0, len(parts), MAX_JOBS):
        wave = parts[w:w + MAX_JOBS]
        sizes = np.asarray(first_sizes(lengths[wave]), dtype=np.int64).reshape(len(wave), 6)
        ctr = np.zeros((len(wave), N_COUNTERS), dtype=np.int64)
        ctr[:, C_POS] = -1
        out_ctr = np.zeros((len(wave), 2), dtype=np.int64)
        carried = None      # (output, match starts, label starts) of the jobs resuming
        while len(wave):
            # element counts per buffer: two halves of the thread lists and register rows
            elems = sizes * np.array([2, 2, 1, 1, 1, 1], dtype=np.int64)
            base = np.zeros_like(elems)
            np.cumsum(elems[:-1], axis=0, out=base[1:])
            total = elems.sum(axis=0)
            output = _Output(xp, int(total[B_MATCHES]), int(total[B_LABELS]))
            if carried is not None:
                prev, prev_m, prev_l = carried
                _copy_regions(backend, gather, prev, output, prev_m, prev_l, out_ctr[:, 0],
                              out_ctr[:, 1], base[:, B_MATCHES], base[:, B_LABELS])
            status = _launch(backend, kernel, wave, d_offsets, program, columns, base, sizes,
                             total, ctr, out_ctr, output, n_states, ki, kf)
            done = status == DONE
            grow = status == GROW
            for j in np.flatnonzero(~done & ~grow):
                failed.append(int(wave[j]))
            if done.any():
                counts[wave[done]] = out_ctr[done]
                finished.append((output, wave[done], base[done, B_MATCHES],
                                 base[done, B_LABELS]))
            if not grow.any():
                break
            which = ctr[grow, C_DETAIL]             # the buffer that was full
            sizes = sizes[grow]
            sizes[np.arange(len(sizes)), which] *= 4
            carried = (output, base[grow, B_MATCHES], base[grow, B_LABELS])
            wave, ctr, out_ctr = wave[grow], ctr[grow], out_ctr[grow]
    return _compact(backend, gather, counts, finished) + (sorted(failed),)


def _launch(backend, kernel, wave, d_offsets, program, columns, base, sizes, total, ctr,
            out_ctr, output: _Output, n_states: int, ki: int, kf: int) -> np.ndarray:
    """One launch over the jobs ``wave``; their counters come back into
    ``ctr`` and ``out_ctr``, and the statuses are returned (host)."""
    xp = backend.xp
    d = backend.to_device
    n = len(wave)
    i64 = np.int64

    def zeros(count, dtype=i64):
        return xp.zeros(max(1, int(count)), dtype=dtype)
    th_state, th_node, th_reg = (zeros(total[B_THREADS]) for _ in range(3))
    pool_i = xp.zeros((max(1, int(total[B_POOL])), ki), dtype=i64)
    pool_f = xp.zeros((max(1, int(total[B_POOL])), kf), dtype=np.float64)
    seen_stamp = xp.full((n, n_states), -1, dtype=i64)
    seen_head = xp.zeros((n, n_states), dtype=i64)
    ent_row, ent_next = zeros(total[B_SEEN]), zeros(total[B_SEEN])
    stack = xp.zeros((n, 2 * n_states + 4), dtype=i64)
    log_par, log_var = zeros(total[B_LOG]), zeros(total[B_LOG])
    log_exc = zeros(total[B_LOG], np.bool_)
    d_ctr, d_out_ctr = d(ctr), d(out_ctr)
    status = xp.zeros(n, dtype=i64)
    backend.launch(kernel, n, d(wave), d_offsets, *program, d(base), d(sizes), th_state,
                   th_node, th_reg, pool_i, pool_f, seen_stamp, seen_head, ent_row, ent_next,
                   stack, log_par, log_var, log_exc, d_ctr, *columns, *output.arrays(),
                   d_out_ctr, status)
    ctr[:] = backend.to_host(d_ctr)
    out_ctr[:] = backend.to_host(d_out_ctr)
    return backend.to_host(status)


def _compact(backend, gather, counts: np.ndarray, finished: list) -> tuple:
    """Every finished partition's output copied to its place in partition
    order (exclusive prefix sums of the counts), and the CSR label offsets."""
    xp = backend.xp
    first = np.zeros((len(counts) + 1, 2), dtype=np.int64)
    np.cumsum(counts, axis=0, out=first[1:])
    n_m, n_l = (int(x) for x in first[-1])
    result = _Output(xp, n_m, n_l)
    for output, parts, src_m, src_l in finished:
        _copy_regions(backend, gather, output, result, src_m, src_l, counts[parts, 0],
                      counts[parts, 1], first[parts, 0], first[parts, 1])
    arrays = tuple(a[:n] for a, n in zip(result.arrays(), (n_m,) * 4 + (n_l,) * 2))
    label_offsets = xp.zeros(n_m + 1, dtype=np.int64)
    if n_m:
        xp.cumsum(arrays[3] - arrays[2] + 1, out=label_offsets[1:])
    return arrays, label_offsets
