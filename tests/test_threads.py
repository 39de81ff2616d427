"""kernels/threads.py: how work is cut into pieces and run on threads."""

from __future__ import annotations

import os
import signal
import sys

import numpy as np
import pytest

from gpu_mr.kernels import threads


def test_split_balances_work_and_covers_every_job(monkeypatch):
    monkeypatch.setattr(threads, "MIN_WORK", 10)
    work = np.concatenate(([0], np.cumsum([100, 1, 1, 1, 1, 100, 1, 1])))
    pieces = threads.split(work, parts=2)
    assert pieces[0][0] == 0 and pieces[-1][1] == 8
    assert all(a < b for a, b in pieces)
    assert all(p[1] == q[0] for p, q in zip(pieces, pieces[1:]))
    assert threads.split(np.array([0]), parts=4) == []
    monkeypatch.setattr(threads, "MIN_WORK", 10**9)
    assert threads.split(work, parts=4) == [(0, 8)]      # too little work to split


@pytest.mark.parametrize("jobs,parts", [(0, 3), (1, 3), (7, 3), (10, 1), (5, 8)])
def test_split_even_covers_every_job(jobs, parts, monkeypatch):
    monkeypatch.setattr(threads, "MIN_WORK", 1)
    pieces = threads.split_even(jobs, parts=parts)
    covered = [j for a, b in pieces for j in range(a, b)]
    assert covered == list(range(jobs))
    assert len(pieces) <= max(parts, 1)


def test_run_pieces_keeps_order_and_raises():
    pieces = [(0, 3), (3, 5), (5, 9)]
    assert threads.run_pieces(lambda a, b: (a, b), pieces) == pieces

    def boom(a, b):
        if a == 3:
            raise ValueError("piece 3")
        return a
    with pytest.raises(ValueError, match="piece 3"):
        threads.run_pieces(boom, pieces)


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin",
                    reason="needs fork")
def test_a_forked_child_gets_a_pool_of_its_own():
    """Spark's Python workers are forked: a pool made before the fork has no
    threads in the child, so the child must make its own (else its work
    would wait forever)."""
    assert threads.run_pieces(lambda a, b: a, [(0, 1), (1, 2)]) == [0, 1]
    pid = os.fork()
    if pid == 0:                                     # the child: exit code says it all
        ok = False
        try:
            signal.alarm(20)                         # a wait forever fails, not hangs
            ok = threads.run_pieces(lambda a, b: b, [(0, 1), (1, 2)]) == [1, 2]
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_run_all_keeps_every_thread_busy(monkeypatch):
    """Every thread takes items until none is left: four items that each
    wait for a second one to run beside them all pass on two threads (with
    a future per item, the pool's one thread ran items 1-3 alone, one by
    one, while the calling thread did item 0)."""
    import threading
    monkeypatch.setattr(threads, "thread_count", lambda: 2)
    monkeypatch.setattr(threads, "_pool", None)      # a pool of one thread, made here
    together = threading.Barrier(2, timeout=10)

    def item(i):
        together.wait()
        return i * i
    assert threads.run_all(item, list(range(4))) == [0, 1, 4, 9]


def test_run_all_raises_the_first_failing_item(monkeypatch):
    monkeypatch.setattr(threads, "thread_count", lambda: 2)

    def item(i):
        if i in (3, 5):
            raise ValueError(f"item {i}")
        return i
    with pytest.raises(ValueError, match="item 3"):
        threads.run_all(item, list(range(8)))
    assert threads.run_all(item, [0, 1, 2]) == [0, 1, 2]
    assert threads.run_all(item, []) == []


@pytest.mark.parametrize("at", [0, 4, 9])
def test_least_is_numpys_min_in_pieces(at, monkeypatch):
    monkeypatch.setattr(threads, "MIN_WORK", 1)
    monkeypatch.setattr(threads, "thread_count", lambda: 3)
    values = np.arange(10, dtype=np.float64) + 5
    values[at] = -1.0
    assert threads.least(values) == -1.0
    values[at] = np.nan                         # a NaN wins in whichever piece it lies
    assert np.isnan(threads.least(values))
    ints = np.arange(10, dtype=np.int64)
    ints[at] = np.iinfo(np.int64).min
    assert threads.least(ints) == ints.min()


def test_run_all_starts_no_item_after_a_failure(monkeypatch):
    import time
    monkeypatch.setattr(threads, "thread_count", lambda: 2)
    ran = []

    def item(i):
        ran.append(i)
        if i == 1:
            raise ValueError("item 1")
        time.sleep(0.002)
        return i
    with pytest.raises(ValueError, match="item 1"):
        threads.run_all(item, list(range(50)))
    assert len(ran) < 10


def test_background_items_all_answered_in_order_beside_foreground_work():
    import threading as th
    import time
    ran_on = []

    def item(i):
        ran_on.append(th.get_ident())
        time.sleep(0.0005)
        return i * i
    job = threads.start_background(item, 40)
    # foreground work runs meanwhile, and is not starved by the background
    for _ in range(5):
        assert threads.run_pieces(lambda a, b: a + b, [(0, 1), (2, 3)]) == [1, 5]
        assert threads.run_all(lambda x: -x, [1, 2, 3]) == [-1, -2, -3]
    assert job.finish() == [i * i for i in range(40)]
    assert job.finish() == [i * i for i in range(40)]          # again: the same answers
    assert len(ran_on) == 40                                   # each item once
    if threads.thread_count() > 1:
        assert len(set(ran_on)) >= 1


def test_background_raises_the_first_failing_item_and_stops():
    def item(i):
        if i in (3, 7):
            raise ValueError(f"item {i}")
        return i
    job = threads.start_background(item, 10)
    with pytest.raises(ValueError, match="item 3"):
        job.finish()


def test_background_with_one_thread_runs_at_finish(monkeypatch):
    monkeypatch.setattr(threads, "thread_count", lambda: 1)
    seen = []
    job = threads.start_background(lambda i: seen.append(i) or i, 3)
    assert seen == []                       # nothing ran before finish
    assert job.finish() == [0, 1, 2]


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin",
                    reason="needs fork")
def test_a_forked_child_starts_without_the_parents_background_work():
    """A fork taken while a background job is under way (a query on another
    thread): the child's own background work and pieces run, none of the
    parent's is left waiting there."""
    import time
    gate = []

    def slow(i):
        time.sleep(0.002)
        gate.append(i)
        return i
    job = threads.start_background(slow, 200)
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            signal.alarm(20)
            ok = (threads._backgrounds == [] and threads._queued[0] == 0
                  and threads.start_background(lambda i: i + 1, 3).finish() == [1, 2, 3]
                  and threads.run_pieces(lambda a, b: b, [(0, 1), (1, 2)]) == [1, 2])
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert job.finish() == list(range(200))
    assert os.waitstatus_to_exitcode(status) == 0
