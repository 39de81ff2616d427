"""Compiled, GIL-free kernels over independent ranges, on every core.

What: ``split(weights_cum, parts)`` cuts a range of jobs into pieces of about
equal work; ``run_pieces(fn, pieces)`` calls ``fn(lo, hi)`` for each piece on
a shared pool of Python threads and returns the results in order.
Why: the MEASURES kernels (segmented aggregates, FIRST/LAST landings,
gathers) are numba functions compiled with ``nogil=True`` whose jobs (the
matches, the output rows) are independent. One call per piece, each on its
own thread, runs them on all cores without a ``prange`` twin of every kernel
and without numba's threading layer (whose work-queue fallback serves one
parallel launch at a time: the scan's).
Cost: about 0.1 ms of thread hand-off per call; work below ``MIN_WORK`` per
thread is not split (it would cost more than it saves).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

# Jobs' work (elements, output rows) below which one thread runs them all:
# a split costs about 0.1 ms, which this much work repays.
MIN_WORK = 200_000

_pool = None
_pool_pid = None                 # the process that made the pool (a fork child needs its own)
_pool_lock = threading.Lock()


def thread_count() -> int:
    """numba's thread count (NUMBA_NUM_THREADS, set_num_threads), which the
    scan's parallel kernels use too; the CPU count without numba."""
    try:
        import numba
        return max(1, int(numba.get_num_threads()))
    except ImportError:
        return max(1, os.cpu_count() or 1)


def _executor(workers: int) -> ThreadPoolExecutor:
    """The shared pool, with at least ``workers`` threads. A process forked
    after the pool was made (Spark's Python workers are) gets a new one: the
    parent's threads do not exist there, and work given to them would never
    run."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid() or _pool._max_workers < workers:
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpu_mr")
            _pool_pid = os.getpid()
        return _pool


def split(work_before, parts: int = 0) -> list:
    """``(lo, hi)`` job ranges of about equal work, at most ``parts`` (0:
    :func:`thread_count`) and none under ``MIN_WORK``. ``work_before``: the
    work of the jobs before each job, one more entry than jobs (a CSR
    offsets array: jobs ``lo .. hi-1`` do ``work_before[hi] -
    work_before[lo]``).

    >>> import numpy as np
    >>> split(np.arange(0, 1_000_001, 1000), parts=2)
    [(0, 500), (500, 1000)]
    >>> split(np.array([0, 5, 9]), parts=2)
    [(0, 2)]
    """
    jobs = len(work_before) - 1
    if jobs <= 0:
        return []
    total = int(work_before[-1]) - int(work_before[0])
    parts = min(parts or thread_count(), max(1, total // MIN_WORK), jobs)
    if parts <= 1:
        return [(0, jobs)]
    targets = int(work_before[0]) + total * np.arange(1, parts) // parts
    cuts = np.searchsorted(work_before, targets, side="left").tolist()
    bounds = sorted(set([0] + [min(max(c, 0), jobs) for c in cuts] + [jobs]))
    return list(zip(bounds[:-1], bounds[1:]))


def split_even(jobs: int, work_per_job: int = 1, parts: int = 0) -> list:
    """:func:`split` for ``jobs`` jobs of equal work.

    >>> split_even(10, 100_000, parts=2)
    [(0, 5), (5, 10)]
    """
    if jobs <= 0:
        return []
    parts = min(parts or thread_count(), max(1, jobs * work_per_job // MIN_WORK), jobs)
    bounds = [jobs * i // parts for i in range(parts + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def run_pieces(fn, pieces: list) -> list:
    """``[fn(lo, hi) for (lo, hi) in pieces]``, the pieces on threads of their
    own (the first on the calling thread) when there are several."""
    if len(pieces) <= 1:
        return [fn(lo, hi) for lo, hi in pieces]
    pool = _executor(len(pieces) - 1)
    futures = [_submit(pool, fn, lo, hi) for lo, hi in pieces[1:]]
    first = fn(*pieces[0])
    return [first] + [f.result() for f in futures]


def run_all(fn, items: list) -> list:
    """``[fn(item) for item in items]`` on the shared pool, at most
    :func:`thread_count` at a time: each thread (the calling one too) takes
    the next item not yet taken until none is left, so items of unequal
    cost even out. The first failing item's exception (in item order) is
    raised once every thread has stopped; no item starts after a failure."""
    workers = min(thread_count(), len(items))
    if workers <= 1:
        return [fn(item) for item in items]
    results: list = [None] * len(items)
    failed: dict = {}
    lock = threading.Lock()
    taken = [0]

    def drain() -> None:
        while True:
            with lock:
                i = taken[0]
                taken[0] += 1
            # after a failure no new item starts: every item before the
            # failing one was taken already (in order), so the first failure
            # in item order is still found
            if i >= len(items) or failed:
                return
            try:
                results[i] = fn(items[i])
            except BaseException as exc:      # raised below, in item order
                failed[i] = exc
    # one drain per thread, not a future per item: the pool's threads would
    # take the items one by one while the calling thread did only the first
    pool = _executor(workers - 1)
    futures = [_submit(pool, drain) for _ in range(workers - 1)]
    drain()
    for f in futures:
        f.result()
    if failed:
        raise failed[min(failed)]
    return results


# Work the pool's threads do while no other waits (start_background): the
# foreground tasks submitted and not yet started, and the background jobs
# under way, under one condition.
_background_cond = threading.Condition()
_queued = [0]
_backgrounds: list = []


def _reset_after_fork() -> None:
    """In a forked child (Spark's Python workers are forked): none of the
    parent's threads exist there, so no lock may stay held by one and no
    background job is under way."""
    global _pool_lock, _background_cond
    _pool_lock = threading.Lock()
    _background_cond = threading.Condition()
    _queued[0] = 0
    _backgrounds.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _submit(pool, fn, *args):
    """``pool.submit(fn, *args)`` as a foreground task: background jobs
    stop taking new items while it waits, and resume on its thread after."""
    with _background_cond:
        _queued[0] += 1

    def task():
        with _background_cond:
            _queued[0] -= 1
        try:
            return fn(*args)
        finally:
            _wake_background(pool)
    return pool.submit(task)


def _wake_background(pool) -> None:
    """A pool thread just came free: hand it background items, if any wait."""
    with _background_cond:
        for job in _backgrounds:
            if job.waiting() and job.drains == 0 and _queued[0] == 0:
                job.drains += 1
                pool.submit(job.drain, False)
                return


class Background:
    """``fn(i)`` for ``i`` in ``0 .. n-1`` on the pool's threads while they
    have nothing else to do (:func:`start_background`); :meth:`finish`
    runs what is left on the calling thread and returns the answers."""

    def __init__(self, fn, n: int):
        self.fn, self.n = fn, n
        self.next = 0
        self.drains = 0                 # pool threads taking items now
        self.results: list = [None] * n
        self.failed: dict = {}

    def waiting(self) -> bool:
        return self.next < self.n and not self.failed

    def drain(self, finishing: bool) -> None:
        """Take items one by one; on a pool thread, stop as soon as a
        foreground task waits for it (``finishing``: the caller's thread,
        which takes every item left)."""
        while True:
            with _background_cond:
                if (not self.waiting() or (not finishing and _queued[0] > 0)):
                    if not finishing:
                        self.drains -= 1
                        _background_cond.notify_all()
                    return
                i = self.next
                self.next += 1
            try:
                self.results[i] = self.fn(i)
            except BaseException as exc:      # raised by finish, in item order
                with _background_cond:
                    self.failed[i] = exc

    def finish(self) -> list:
        """Every item's answer, in order, once all are done; the first
        failing item's exception (in item order) is raised."""
        with _background_cond:            # a pool thread shares what is left
            if self.waiting() and self.drains == 0 and thread_count() > 1:
                self.drains += 1
                _executor(1).submit(self.drain, False)
        self.drain(True)
        with _background_cond:
            while self.drains:
                _background_cond.wait()
            if self in _backgrounds:
                _backgrounds.remove(self)
        if self.failed:
            raise self.failed[min(self.failed)]
        return self.results


def start_background(fn, n: int) -> Background:
    """``fn(i)`` for ``i`` in ``0 .. n-1``, started on the pool's threads
    and run while no foreground work (:func:`run_pieces`, :func:`run_all`)
    waits for them, one short item at a time; the caller gets the answers
    from :meth:`Background.finish`, which runs whatever is left.
    Why: between the parallel stages of a query one thread runs alone
    (Python between kernels, the output table), and the pool's threads
    wait; a memory-bound pass that can wait for its answer (the order
    key's check within partitions) fills those gaps. A foreground task
    waits for at most one item; items should be short.

    >>> job = start_background(lambda i: i * i, 5)
    >>> job.finish()
    [0, 1, 4, 9, 16]
    """
    job = Background(fn, n)
    if thread_count() <= 1 or n == 0:
        return job                        # finish() runs everything
    pool = _executor(1)
    with _background_cond:
        _backgrounds.append(job)
        if _queued[0] == 0:
            job.drains += 1
            pool.submit(job.drain, False)
    return job


def least(values: np.ndarray):
    """``values.min()`` (NaN wins, as in numpy) in pieces on all cores:
    numpy's reductions release the GIL, and a min over millions of values
    is a memory-bound pass (2.4 -> 1.3 ms for 1e7 doubles on two cores).

    >>> least(np.array([3.0, 1.0, np.nan, 2.0]))
    nan
    """
    pieces = split_even(values.shape[0])
    if len(pieces) <= 1:
        return values.min()
    # np.min, not min(): a NaN must win whichever piece holds it
    return np.min(np.array(run_pieces(lambda a, b: values[a:b].min(), pieces)))
