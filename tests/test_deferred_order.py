"""The order key's check left for later (frames.sort_for_matching_deferred)
and the query run on the unchecked input (api.py): the check answers
exactly as the one-pass check does, for every piece of it, across chunk
borders and partition starts, ascending and descending, integers and
floats with NaN; a query over input found out of order afterwards gives
the answer of the sorted input; an error raised on unchecked input is
raised only when the input is in order."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

pytest.importorskip("numba", reason="the cpu extra (numba) is not installed")

import gpu_mr  # noqa: E402
from gpu_mr import frames  # noqa: E402
from gpu_mr.engines.cpu import CpuEngine  # noqa: E402


@pytest.fixture
def small_deferral(monkeypatch):
    # deferred from a few rows on, in pieces of a few rows: every path at test sizes
    monkeypatch.setattr(frames, "DEFER_MIN_ROWS", 8)
    monkeypatch.setattr(frames, "ORDER_JOB_ROWS", 5)


def _table(keys, ts, chunks=1, ts_type=pa.int64()):
    n = len(keys)
    cuts = [n * i // chunks for i in range(chunks + 1)]
    batches = [pa.record_batch([pa.array(keys[a:b], pa.string()),
                                pa.array(ts[a:b], ts_type)], names=["k", "ts"])
               for a, b in zip(cuts, cuts[1:])]
    return pa.Table.from_batches(batches)


def _one_pass(table, ascending=True):
    """In order by the one-pass check (the sort it would do otherwise)."""
    return frames.sort_for_matching(table, ["k"], [("ts", ascending, False)]).was_sorted


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(1, 30), min_size=1, max_size=8),
       chunks=st.integers(1, 4), ascending=st.booleans(), floats=st.booleans(),
       swap=st.one_of(st.none(), st.integers(0, 10**6)), nan_at=st.one_of(st.none(),
                                                                          st.integers(0, 10**6)),
       seed=st.integers(0, 2**31 - 1))
def test_deferred_check_answers_as_the_one_pass_check(sizes, chunks, ascending, floats, swap,
                                                     nan_at, seed):
    frames_defer = frames.DEFER_MIN_ROWS, frames.ORDER_JOB_ROWS
    frames.DEFER_MIN_ROWS, frames.ORDER_JOB_ROWS = 2, 3
    try:
        rng = np.random.default_rng(seed)
        keys = [f"s{p:03d}" for p, size in enumerate(sizes) for _ in range(size)]
        ts = np.concatenate([np.sort(rng.integers(0, 50, size)) for size in sizes])
        if not ascending:
            ts = np.concatenate([np.sort(rng.integers(0, 50, size))[::-1] for size in sizes])
        ts = ts.astype(np.float64) if floats else ts
        if swap is not None and len(ts) > 1:
            i = swap % (len(ts) - 1)
            ts[i], ts[i + 1] = ts[i + 1], ts[i]
        if floats and nan_at is not None:
            ts[nan_at % len(ts)] = np.nan
        table = _table(keys, ts.tolist(), min(chunks, len(keys)),
                       pa.float64() if floats else pa.int64())
        want = _one_pass(table, ascending)
        data, check = frames.sort_for_matching_deferred(table, ["k"], [("ts", ascending, False)])
        if check is None:          # checked now (one row, or out of order at a chunk border)
            assert data.was_sorted == want
            return
        assert data.was_sorted
        assert data.partition_offsets.tolist() == np.flatnonzero(
            np.r_[True, np.array(keys[1:]) != np.array(keys[:-1]), True]).tolist()
        # each piece alone, in any order, then all of them
        order = rng.permutation(len(check))
        answers = {int(i): check.run(int(i)) for i in order}
        assert all(answers.values()) == want
        assert check.in_order() == want
    finally:
        frames.DEFER_MIN_ROWS, frames.ORDER_JOB_ROWS = frames_defer


def test_no_deferral_for_other_keys_or_small_inputs(small_deferral):
    t = _table(["a"] * 10, list(range(10)))
    assert frames.sort_for_matching_deferred(t, ["k"], [("ts", True, False)])[1] is not None
    # two partition keys, a NULL, fewer rows than DEFER_MIN_ROWS: checked now
    t2 = t.append_column("k2", pa.array(["x"] * 10))
    assert frames.sort_for_matching_deferred(t2, ["k", "k2"], [("ts", True, False)])[1] is None
    t3 = _table(["a"] * 10, [None] + list(range(9)))
    assert frames.sort_for_matching_deferred(t3, ["k"], [("ts", True, False)])[1] is None
    small = _table(["a"] * 4, list(range(4)))
    assert frames.sort_for_matching_deferred(small, ["k"], [("ts", True, False)])[1] is None


QUERY = """PARTITION BY k ORDER BY ts
MEASURES FIRST(A.ts) AS a, LAST(B.ts) AS b, COUNT(*) AS n, MATCH_NUMBER() AS m
ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
PATTERN (A B+) DEFINE B AS v > PREV(v)"""


def _values_table(n_parts, rows, seed, out_of_order):
    rng = np.random.default_rng(seed)
    keys = [f"p{p:02d}" for p in range(n_parts) for _ in range(rows)]
    ts = np.concatenate([np.arange(rows) * 10 for _ in range(n_parts)])
    if out_of_order:
        i = int(rng.integers(0, len(ts) - 1))
        if keys[i] == keys[i + 1]:
            ts[i], ts[i + 1] = ts[i + 1], ts[i]
    return pa.table({"k": keys, "ts": ts, "v": rng.integers(0, 5, len(keys))})


@pytest.mark.parametrize("out_of_order", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_query_over_unchecked_input_answers_as_over_sorted(out_of_order, seed, small_deferral):
    table = _values_table(7, 40, seed, out_of_order)
    got = gpu_mr.match_recognize(table, QUERY, engine="cpu")
    CpuEngine.checks_order_later = False
    try:
        want = gpu_mr.match_recognize(table, QUERY, engine="cpu")
    finally:
        CpuEngine.checks_order_later = True
    assert got.equals(want)
    assert got.equals(gpu_mr.match_recognize(table, QUERY, engine="reference"))


SKIP_ERROR = """PARTITION BY k ORDER BY ts
MEASURES COUNT(*) AS n
ONE ROW PER MATCH AFTER MATCH SKIP TO FIRST A
PATTERN (A B+) DEFINE B AS v > PREV(v)"""


def test_errors_on_unchecked_input_wait_for_the_check(small_deferral):
    # SKIP TO FIRST A lands on a match's first row: an error, whatever the order
    table = _values_table(3, 30, 0, False)
    with pytest.raises(gpu_mr.GpuMrError) as in_order:
        gpu_mr.match_recognize(table, SKIP_ERROR, engine="cpu")
    CpuEngine.checks_order_later = False
    try:
        with pytest.raises(gpu_mr.GpuMrError) as plain:
            gpu_mr.match_recognize(table, SKIP_ERROR, engine="cpu")
    finally:
        CpuEngine.checks_order_later = True
    assert str(in_order.value) == str(plain.value)


def test_an_error_only_the_unsorted_rows_raise_is_not_raised(small_deferral, monkeypatch):
    # the engine fails on the unchecked input; the input was out of order,
    # so the sorted input decides (here: no error)
    table = _values_table(3, 30, 1, True)
    calls = []
    real = CpuEngine.find_matches

    def failing_first(self, query, data):
        calls.append(data.was_sorted)
        if len(calls) == 1:
            raise RuntimeError("raised on the unchecked rows")
        return real(self, query, data)
    monkeypatch.setattr(CpuEngine, "find_matches", failing_first)
    got = gpu_mr.match_recognize(table, QUERY, engine="cpu")
    assert calls == [True, False]            # again, over the sorted input
    assert got.equals(gpu_mr.match_recognize(table, QUERY, engine="reference"))
