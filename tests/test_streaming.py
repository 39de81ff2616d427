"""match_recognize_batches: record batches in, pieces out, partitions spanning
batches. Concatenated pieces must equal match_recognize over all the rows,
whatever the batch boundaries."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("numba", reason="the cpu extra (numba) is not installed")

import gpu_mr  # noqa: E402
from gpu_mr.engines.cpu import choose_path  # noqa: E402
from gpu_mr.errors import DataError, GpuMrError  # noqa: E402
from gpu_mr.streaming import physical_reach  # noqa: E402

from test_cpu_engine import row_local_clauses  # noqa: E402
from test_registers import other_types_queries  # noqa: E402
from test_registers import queries as register_queries  # noqa: E402
from test_registers import tables as register_tables  # noqa: E402

FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"


def split(table: pa.Table, cuts: list) -> list:
    bounds = sorted({0, table.num_rows} | {min(c, table.num_rows) for c in cuts})
    return [table.slice(a, b - a) for a, b in zip(bounds, bounds[1:])]


def streamed(table, clause, cuts, engine="auto"):
    pieces = list(gpu_mr.match_recognize_batches(split(table, cuts), clause, engine=engine))
    return pa.concat_tables(pieces) if pieces else None


def assert_streamed_gives_the_reference(table, clause, cuts, engine="auto") -> None:
    """``table`` cut at ``cuts`` and streamed through ``engine`` gives the
    reference engine's whole-table output, or raises its kind of error."""
    try:
        want = gpu_mr.match_recognize(table, clause, engine="reference")
    except GpuMrError as exc:
        with pytest.raises(type(exc)):
            streamed(table, clause, cuts, engine=engine)
        return
    got = streamed(table, clause, cuts, engine=engine)
    if got is None:
        assert want.num_rows == 0
    else:
        assert got.equals(want), f"\n{clause}\n{cuts}\n{got.to_pylist()}\n{want.to_pylist()}"


@st.composite
def sorted_tables(draw):
    n = draw(st.integers(1, 40))
    small = st.one_of(st.none(), st.integers(0, 3)) if draw(st.booleans()) else st.integers(0, 3)
    p = sorted(draw(st.integers(0, 2)) for _ in range(n))
    return pa.table({
        "p": pa.array(p, pa.int64()),
        "ts": pa.array(list(range(n)), pa.int64()),
        "a": pa.array([draw(st.integers(0, 3)) for _ in range(n)], pa.int64()),
        "b": pa.array([draw(small) for _ in range(n)], pa.int64()),
        "c": pa.array([draw(st.integers(0, 3)) for _ in range(n)], pa.int64()),
    })


MEASURES = ("MEASURES COUNT(*) AS n, MATCH_NUMBER() AS mno, FIRST(ts) AS s, LAST(ts) AS e, "
            "CLASSIFIER() AS cls, PREV(FIRST(a), 2) AS before, NEXT(LAST(c), 1) AS after")


@settings(max_examples=1500 if FULL else 150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(row_local_clauses(), sorted_tables(), st.lists(st.integers(0, 40), max_size=6),
       st.sampled_from(["ONE ROW PER MATCH", "ALL ROWS PER MATCH",
                        "ALL ROWS PER MATCH OMIT EMPTY MATCHES"]))
def test_pieces_equal_the_whole(clause, table, cuts, rows):
    clause = clause.replace("MEASURES COUNT(*) AS n", f"{MEASURES} {rows}")
    assert_streamed_gives_the_reference(table, clause, cuts)


def test_a_long_partition_in_many_batches():
    rng = np.random.default_rng(3)
    n = 200_000
    t = pa.table({"sym": np.repeat(["A", "B"], n // 2), "ts": np.arange(n),
                  "price": np.round(100 + np.cumsum(rng.normal(size=n)), 2)})
    clause = """PARTITION BY sym ORDER BY ts
        MEASURES FIRST(A.ts) AS s, LAST(C.ts) AS e, MATCH_NUMBER() AS mno, LAST(B.price) AS low
        PATTERN (A B+ C+) DEFINE B AS price < PREV(price), C AS price > PREV(price)"""
    want = gpu_mr.match_recognize(t, clause, engine="cpu")
    pieces = list(gpu_mr.match_recognize_batches(t.to_batches(max_chunksize=7_777), clause))
    assert len(pieces) > 10
    assert pa.concat_tables(pieces).equals(want)


def test_state_dependent_queries_stream_batch_by_batch(monkeypatch):
    # the register machine runs each batch, carrying the search under way
    # (engines/registers.py find_matches_in_batch), not whole partitions
    from gpu_mr.engines import registers
    calls = []
    real = registers.find_matches_in_batch
    monkeypatch.setattr(registers, "find_matches_in_batch",
                        lambda *a, **k: calls.append(a[1].table.num_rows) or real(*a, **k))
    t = pa.table({"p": [1] * 40, "ts": list(range(40)), "x": [i % 7 for i in range(40)]})
    clause = ("PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n, MATCH_NUMBER() AS mno "
              "PATTERN (A B+) DEFINE B AS x > A.x")
    got = pa.concat_tables(gpu_mr.match_recognize_batches(t.to_batches(max_chunksize=4), clause,
                                                          engine="cpu"))
    assert got.equals(gpu_mr.match_recognize(t, clause, engine="reference"))
    # one call a batch and one for the last carry, each on a batch and the few
    # rows carried, never the whole partition
    assert len(calls) == 11 and max(calls) < 12, calls


@st.composite
def stateful_streams(draw):
    """test_registers.py's random state-dependent queries over its random
    tables, sorted by (p, ts) as a stream arrives."""
    table = draw(register_tables()).sort_by([("p", "ascending"), ("ts", "ascending")])
    return draw(st.one_of(register_queries(), other_types_queries())), table


@settings(max_examples=1500 if FULL else 200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stateful_streams(), st.lists(st.integers(0, 12), max_size=6),
       st.sampled_from(["ONE ROW PER MATCH", "ALL ROWS PER MATCH"]))
def test_state_dependent_pieces_equal_the_whole(stream, cuts, rows):
    clause, table = stream
    measures = ("MEASURES COUNT(*) AS n, MATCH_NUMBER() AS mno, FIRST(ts) AS first_ts, "
                "CLASSIFIER() AS cls, PREV(FIRST(a), 2) AS before, NEXT(LAST(c), 1) AS after")
    clause = clause.replace("MEASURES COUNT(*) AS n", f"{measures} {rows}")
    try:
        query = gpu_mr.compile(clause, schema=table.schema).query
    except GpuMrError:
        query = None        # both engines raise it (below)
    if query is not None and (not query.history_dependent or choose_path(query)[0] is None):
        return              # row-local (the test above), or not on the CPU engine
    assert_streamed_gives_the_reference(table, clause, cuts, engine="cpu")


def test_unsorted_batches_are_a_data_error():
    t = pa.table({"p": [2, 1], "ts": [1, 2], "x": [1, 2]})
    with pytest.raises(DataError, match="sorted by"):
        list(gpu_mr.match_recognize_batches(t.to_batches(max_chunksize=1),
                                            "PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n "
                                            "PATTERN (A) DEFINE A AS x > 0"))


def test_bad_batches_argument():
    with pytest.raises(GpuMrError, match="RecordBatch"):
        list(gpu_mr.match_recognize_batches("ticks.parquet", "PATTERN (A) DEFINE A AS x > 0"))


def test_physical_reach():
    q = gpu_mr.compile("ORDER BY ts MEASURES PREV(FIRST(a), 2) AS x, NEXT(a, 3) AS y "
                       "PATTERN (A) DEFINE A AS a > PREV(a)").query
    assert physical_reach(q) == (2, 3)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
def test_a_define_raising_unreached_mid_stream_resumes_on_the_reference(size):
    # 10 / x fails at x = 0 (row 7), but no search evaluates B there, so the
    # reference gives four matches and no error; a batch holding row 7
    # cannot be answered by masks, and the partition under way resumes on
    # the reference matcher with its match count.
    t = pa.table({"ts": list(range(12)), "x": [1, 2, 3, 4, 5, 6, 1, 0, 1, 2, 5, 9]})
    q = ("ORDER BY ts MEASURES MATCH_NUMBER() AS mno, FIRST(ts) AS s "
         "PATTERN (A B) DEFINE A AS x > 1, B AS 10 / x > 1")
    want = gpu_mr.match_recognize(t, q, engine="reference")
    assert want.num_rows == 4
    got = pa.concat_tables(gpu_mr.match_recognize_batches(t.to_batches(max_chunksize=size), q))
    assert got.equals(want)


def test_anchor_and_numbering_after_resuming_on_the_reference():
    t = pa.table({"p": [1] * 8 + [2] * 4, "ts": list(range(12)),
                  "x": [2, 3, 1, 0, 2, 3, 2, 3, 2, 3, 2, 3]})
    q = ("PARTITION BY p ORDER BY ts MEASURES MATCH_NUMBER() AS mno, FIRST(ts) AS s "
         "PATTERN (^? A B) DEFINE A AS x = 2, B AS 9 / x > 2")
    want = gpu_mr.match_recognize(t, q, engine="reference")
    for size in (2, 3, 5):
        pieces = gpu_mr.match_recognize_batches(t.to_batches(max_chunksize=size), q)
        assert pa.concat_tables(pieces).equals(want)


def test_pandas_batches_and_empty_streams():
    t = pa.table({"ts": list(range(6)), "x": [1, 2, 1, 2, 1, 2]})
    q = "ORDER BY ts MEASURES FIRST(ts) AS s PATTERN (A B) DEFINE A AS x = 1, B AS x = 2"
    frames = [t.slice(0, 3).to_pandas(), t.slice(3).to_pandas()]
    got = pa.concat_tables(gpu_mr.match_recognize_batches(frames, q))
    assert got.equals(gpu_mr.match_recognize(t, q))
    assert list(gpu_mr.match_recognize_batches([], q)) == []


@pytest.mark.parametrize("size", [2, 3, 5])
def test_skip_errors_name_the_same_match_and_rows_when_streamed(size):
    # Matches 1 and 2 have a C row to skip to; match 3 (rows 9 and 10 of the
    # partition) has none: the error must count rows from the partition's
    # start, not from the batch holding them, and number the match 3.
    t = pa.table({"ts": list(range(11)), "x": [1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 0]})
    q = ("ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP TO FIRST C "
         "PATTERN (A B C?) DEFINE A AS x = 1, B AS x = 2, C AS x = 3")
    with pytest.raises(GpuMrError) as want:
        gpu_mr.match_recognize(t, q, engine="reference")
    assert "match 3 (rows 9 to 10" in str(want.value)
    with pytest.raises(GpuMrError) as got:
        list(gpu_mr.match_recognize_batches(t.to_batches(max_chunksize=size), q))
    assert str(got.value) == str(want.value)
    assert got.value.partition == want.value.partition == 0


def test_skip_errors_name_the_partition_counted_over_the_stream():
    t = pa.table({"p": [1, 1, 1, 2, 2, 2, 3, 3, 3], "ts": list(range(9)),
                  "x": [1, 2, 3, 1, 2, 3, 0, 1, 2]})
    for b in ("x = 2", "x = 2 AND A.x = 1"):      # DFA path; whole partitions
        q = ("PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP TO FIRST C "
             f"PATTERN (A B C?) DEFINE A AS x = 1, B AS {b}, C AS x = 3")
        with pytest.raises(GpuMrError) as want:
            gpu_mr.match_recognize(t, q, engine="reference")
        assert want.value.partition == 2
        for size in (1, 2, 4):
            with pytest.raises(GpuMrError) as got:
                list(gpu_mr.match_recognize_batches(t.to_batches(max_chunksize=size), q))
            assert (str(got.value), got.value.partition) == (str(want.value), 2)


def test_whole_partitions_gathered_over_many_batches():
    # The reference engine streams whole partitions: batches that only
    # continue the open partition are gathered, checked at the seam, and the
    # partition runs once it ends; out-of-order rows are still caught.
    rng = np.random.default_rng(4)
    t = pa.table({"p": np.repeat([1, 2, 3], [50, 7, 40]), "ts": np.arange(97),
                  "x": rng.integers(0, 5, 97)})
    q = ("PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n, MATCH_NUMBER() AS mno "
         "PATTERN (A B+) DEFINE B AS x > A.x")
    want = gpu_mr.match_recognize(t, q, engine="reference")
    for size in (1, 3, 10):
        for engine in ("reference", "cpu"):     # gathered; batch by batch
            got = pa.concat_tables(gpu_mr.match_recognize_batches(
                t.to_batches(max_chunksize=size), q, engine=engine))
            assert got.equals(want)
    shuffled = t.take(np.r_[0:20, 21, 20, 22:97])
    with pytest.raises(DataError, match="sorted by"):
        list(gpu_mr.match_recognize_batches(shuffled.to_batches(max_chunksize=3), q))


@pytest.mark.parametrize("engine", ["cpu", "gpu", "reference"])
def test_a_stream_whose_last_search_ends_at_its_last_row(engine):
    # The last row cannot start a match, so nothing is carried to the end
    # of the stream (an empty carry once crashed the DFA set-up); empty
    # batches anywhere are skipped.
    t = pa.table({"ts": [1, 2, 3, 4, 5], "x": [1, 2, 1, 2, 2]})
    q = "ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B) DEFINE A AS x = 1, B AS x = 2"
    want = gpu_mr.match_recognize(t, q, engine="reference")
    for cut in range(6):
        batches = [t.slice(0, cut), t.slice(cut, 0), t.slice(cut)]
        pieces = list(gpu_mr.match_recognize_batches(batches, q, engine=engine))
        assert pa.concat_tables(pieces).equals(want), cut


@pytest.mark.parametrize("engine", ["cpu", "gpu"])
def test_a_batch_ending_with_its_last_search_then_a_new_partition(engine):
    # No search is undecided at the first batch's end; the next batch starts
    # a new partition, whose matches count from 1 (the carry keeps the last
    # row, so the seam between the partitions is seen).
    t = pa.table({"p": [0, 0, 1], "ts": [0, 1, 0], "a": [0, 0, 0]})
    q = ("PARTITION BY p ORDER BY ts MEASURES MATCH_NUMBER() AS mno "
         "PATTERN (()*?)")
    want = gpu_mr.match_recognize(t, q, engine="reference")
    got = pa.concat_tables(gpu_mr.match_recognize_batches([t.slice(0, 2), t.slice(2)], q,
                                                          engine=engine))
    assert got.equals(want)
    assert got["mno"].to_pylist() == [1, 2, 1]


def test_stream_batches_take_the_unanchored_scan(monkeypatch):
    """A stream's batches of an AFTER MATCH SKIP PAST LAST ROW query run the
    unanchored scan (whole partitions, the last one open: a search alive at
    a batch's end is scanned again from where it began), and the pieces
    equal the whole."""
    from gpu_mr.kernels import unanchored as U
    calls = []
    scan = U._scan

    def counted(*args, **kwargs):
        calls.append(args[4] if len(args) > 4 else kwargs.get("stream", ()))
        return scan(*args, **kwargs)
    monkeypatch.setattr(U, "_scan", counted)
    rng = np.random.default_rng(11)
    n = 30_000
    t = pa.table({"sym": np.repeat(["A", "B", "C"], n // 3), "ts": np.arange(n),
                  "price": np.round(100 + np.cumsum(rng.normal(size=n)), 0)})
    clause = """PARTITION BY sym ORDER BY ts
        MEASURES FIRST(A.ts) AS s, LAST(C.ts) AS e, MATCH_NUMBER() AS mno, MIN(B.price) AS low
        PATTERN (A B+ C+) DEFINE B AS price < PREV(price), C AS price > PREV(price)"""
    want = gpu_mr.match_recognize(t, clause, engine="cpu")
    pieces = list(gpu_mr.match_recognize_batches(t.to_batches(max_chunksize=997), clause,
                                                 engine="cpu"))
    assert pa.concat_tables(pieces).equals(want)
    assert sum(1 for stream in calls if stream) > 20          # every batch but the last


def test_batches_of_other_string_layouts_are_read_as_the_first_batchs():
    # a pandas batch (large_string) after an Arrow one (string), and a
    # string_view batch (Polars, DuckDB): the same rows as one table, where
    # string_view reached pyarrow's take kernel and raised from deep inside
    clause = ("PARTITION BY k ORDER BY ts MEASURES FIRST(A.ts) AS s, COUNT(*) AS n "
              "PATTERN (A B+) DEFINE B AS price < PREV(price)")
    t = pa.table({"k": ["a"] * 4 + ["b"] * 4, "ts": [1, 2, 3, 4, 1, 2, 3, 4],
                  "price": [4.0, 3, 2, 5, 6, 5, 7, 6]})
    want = gpu_mr.match_recognize(t, clause, engine="reference")
    viewed = t.cast(pa.schema([("k", pa.string_view()), ("ts", pa.int64()),
                               ("price", pa.float64())]))
    for batches in ([t.slice(0, 3), t.slice(3).to_pandas()],
                    [t.slice(0, 3).to_pandas(), t.slice(3)],
                    [viewed.slice(0, 3), t.slice(3)],
                    viewed.to_batches(max_chunksize=3)):
        for engine in ("reference", "cpu"):
            got = pa.concat_tables(gpu_mr.match_recognize_batches(batches, clause, engine=engine))
            assert got.cast(want.schema).equals(want), (batches, engine)
    # other differences stay errors
    narrow = t.slice(0, 4).cast(pa.schema([("k", pa.string()), ("ts", pa.int32()),
                                           ("price", pa.float64())]))
    with pytest.raises(DataError, match="schema of the first") as ei:
        list(gpu_mr.match_recognize_batches([narrow, t.slice(4)], clause, engine="cpu"))
    assert "batch 2 (counting those with rows) has 'ts' as int64, the first batch as int32" \
        in str(ei.value) and ei.value.column_name == "ts"
    # a pandas chunk with a NaN holds an integer column as floats; the
    # message names the column, the batch and what else differs
    first = t.slice(0, 2).to_pandas().assign(v=[1, 2])
    second = t.slice(2, 2).to_pandas().assign(v=[1, 2])
    nan = t.slice(4, 3).to_pandas().assign(v=[1.0, None, 3.0])
    moved = t.slice(4, 3).to_pandas().assign(v=[1, 2, 3])[["ts", "k", "price", "v"]]
    for later, says, column in [
            (nan, "batch 3 (counting those with rows) has 'v' as double, the first batch "
                  "as int64", "v"),
            (moved.drop(columns="v"), "batch 3 (counting those with rows) lacks 'v'", "v"),
            (moved, "has the columns in another order (ts, k, price, v; the first batch: "
                    "k, ts, price, v)", None)]:
        with pytest.raises(DataError) as ei:
            list(gpu_mr.match_recognize_batches([first, first.iloc[:0], second, later],
                                                clause, engine="cpu"))
        assert says in str(ei.value) and ei.value.column_name == column


@pytest.mark.parametrize("pattern, define", [
    ("(A B+ $)", "B AS x > A.x"),                # $ at the partition's end, not a batch's
    ("(A B+? $)", "B AS x > A.x"),               # ... where the exit comes first
    ("(^ A B+)", "B AS x > A.x"),                # ^ at its first row, not a carried one's
    ("((^ | A) B+)", "A AS x > 3, B AS x <= 7 AND COUNT(*) < 6"),
    ("(A B++ C)", "B AS x >= A.x, C AS x < A.x"),  # a possessive B's guard reads on
    ("(A B++)", "B AS x >= A.x"),                # ... to the partition's end
    ("(A B+ C)", "B AS x >= A.x, C AS NEXT(x) > A.x"),  # NEXT reads past a batch
])
def test_anchors_guards_and_next_of_state_dependent_streams(pattern, define):
    x = [3, 4, 5, 4, 6, 2, 7, 8, 9, 1, 5, 6, 7, 7, 8, 3, 9, 9, 4, 5]
    t = pa.table({"p": [0] * 20 + [1] * 20, "ts": list(range(40)), "x": x + x[::-1]})
    clause = (f"PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n, MATCH_NUMBER() AS mno, "
              f"FIRST(CLASSIFIER()) AS head AFTER MATCH SKIP TO NEXT ROW PATTERN {pattern} "
              f"DEFINE {define}")
    want = gpu_mr.match_recognize(t, clause, engine="reference")
    assert want.num_rows > 0
    for size in (1, 2, 3, 5, 7, 16):
        got = pa.concat_tables(gpu_mr.match_recognize_batches(
            t.to_batches(max_chunksize=size), clause, engine="cpu"))
        assert got.equals(want), (size, got.to_pylist(), want.to_pylist())


def test_an_empty_stream_still_checks_its_clause():
    # nothing to match, but a clause that can never run is an error at once
    from gpu_mr.errors import AnalysisError, SqlSyntaxError
    empty = pa.table({"ts": pa.array([], pa.int64()), "s": pa.array([], pa.string())})
    ok = "ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A) DEFINE A AS s = 'x'"
    assert list(gpu_mr.match_recognize_batches(empty, ok)) == []
    clash = ("ORDER BY ts MEASURES COUNT(*) AS s ALL ROWS PER MATCH PATTERN (A) "
             "DEFINE A AS s = 'x'")
    with pytest.raises(AnalysisError, match="name of an input column"):
        list(gpu_mr.match_recognize_batches(empty, clash))
    with pytest.raises(SqlSyntaxError):
        list(gpu_mr.match_recognize_batches([], "ORDER BY ts PATTERN (A"))


@pytest.mark.parametrize("size", [5, 17, 64, 1000])
def test_state_dependent_batches_holding_many_partitions(size):
    # a batch's partitions between its first and its last run whole, as in
    # match_recognize; the first (carried) and the last (open) on their own
    rng = np.random.default_rng(11)
    sizes = [3, 40, 1, 25, 7, 60, 2, 33]
    t = pa.table({"p": np.repeat(np.arange(len(sizes)), sizes),
                  "ts": np.concatenate([np.arange(k) for k in sizes]),
                  "x": rng.integers(0, 9, sum(sizes))})
    clause = ("PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n, MATCH_NUMBER() AS mno, "
              "FIRST(A.ts) AS s PATTERN (A B+ C) DEFINE B AS x <= A.x, C AS x > MAX(B.x)")
    want = gpu_mr.match_recognize(t, clause, engine="reference")
    assert want.num_rows > 10 and len(set(want.column("p").to_pylist())) >= 5
    got = pa.concat_tables(gpu_mr.match_recognize_batches(t.to_batches(max_chunksize=size),
                                                          clause, engine="cpu"))
    assert got.equals(want)
