"""ONE ROW measures computed in the unanchored scan's backward walk.

``kernels.unanchored.run_unanchored_measured`` must find the matches of
``run_unanchored`` and, per match, the values a naive reading of its labels
gives: a column at the match's first and last rows, and the row and value
of MIN/MAX over the rows of some variables (the first of equal keys, as
Python's ``min``), with NaN reported; its labels, computed on demand, must
be ``run_unanchored``'s. Checked on random class sequences, keys and chunk
layouts (plain bodies and compiled), past ``WALK_CHUNK`` matches with
groups across chunk borders, and end to end against the reference engine
(measures.py reads the walk's values; a NaN sends MIN/MAX to the usual
path).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("numba", reason="the cpu extra (numba) is not installed")

import gpu_mr  # noqa: E402
from gpu_mr import measures  # noqa: E402
from gpu_mr.analysis import analyze  # noqa: E402
from gpu_mr.engines.base import DeferredMatchArrays  # noqa: E402
from gpu_mr.engines.cpu import CpuEngine  # noqa: E402
from gpu_mr.frames import sort_for_matching  # noqa: E402
from gpu_mr.kernels import unanchored as U  # noqa: E402
from gpu_mr.pattern.dfa import UnanchoredDfa  # noqa: E402
from gpu_mr.syntax import parse_clause  # noqa: E402

from test_unanchored import PATTERNS, program_of  # noqa: E402

FLOATS = [0.0, -0.0, 1.5, -2.0, 7.0, float("inf"), float("-inf"), 1.5]
INTS = [0, 3, -4, 3, np.iinfo(np.int64).max, np.iinfo(np.int64).min, 9]


def naive(starts, ends, label_offsets, labels, column, member, want_max):
    """Per match, (row, value word) of MIN/MAX over counted rows, as
    Python's min/max: the first of equal keys; (-1, None) for none."""
    out = []
    for i in range(len(starts)):
        best = -1
        for e in range(label_offsets[i], label_offsets[i + 1]):
            r = starts[i] + e - label_offsets[i]
            if member[labels[e]]:
                if best < 0 or (column[r] > column[best] if want_max
                                else column[r] < column[best]):
                    best = r
        out.append(best)
    return out


def member_rows(starts, label_offsets, labels, member, first):
    """Per match, its first (``first``) or last row whose variable counts,
    -1 for none."""
    rows = []
    for i in range(len(starts)):
        hits = [starts[i] + e - label_offsets[i]
                for e in range(label_offsets[i], label_offsets[i + 1]) if member[labels[e]]]
        rows.append((hits[0] if first else hits[-1]) if hits else -1)
    return rows


def check(pattern, bits, cuts, chunk_cuts, floats, ints, extremes, compiled, plain_want=False,
          landings=()):
    program = program_of(pattern)
    present = sorted(set(bits)) or [0]
    dense = np.array([present.index(b) for b in bits], dtype=np.uint8)
    n = len(bits)
    offsets = np.array(sorted({0, n} | {min(c, n) for c in cuts}), dtype=np.int64)
    tables = UnanchoredDfa(program).dense_tables(present)
    want = U.run_unanchored(dense, offsets, tables, compiled=compiled and not plain_want)
    starts, ends, parts, errors, label_offsets, labels, excluded = want
    bounds = sorted({0, n} | {min(c, n) for c in chunk_cuts})
    bounds = [b for i, b in enumerate(bounds) if i == 0 or b > bounds[i - 1]]
    columns = [np.asarray(floats, np.float64).view(np.uint64),
               np.asarray(ints, np.int64).view(np.uint64)]
    chunks = [tuple(c[a:b].copy() for c in columns) for a, b in zip(bounds, bounds[1:])]
    for chunk in chunks:
        for a in chunk:
            a.setflags(write=False)
    n_vars = 3                                      # A, B, C
    extremes = [x if len(x) > 3 else x + (U.EXT_COMPARED,) for x in extremes]
    ext = [(c, c == 0, want_max, [bool(m >> v & 1) for v in range(n_vars)], at)
           for c, want_max, m, at in extremes]
    lands = [([bool(m >> v & 1) for v in range(n_vars)], first) for m, first in landings]
    walk = U.WalkColumns(bounds, chunks, [(0, False), (1, True), (1, False)], ext, n_vars,
                         lands)
    got = U.run_unanchored_measured(dense, offsets, tables, walk, compiled=compiled)
    g_starts, g_lasts, g_parts, g_errors, offsets_of, paths, walked = got
    g_offsets = offsets_of()
    for a, b in zip((g_starts, g_lasts, g_parts, g_errors, g_offsets),
                    (starts, ends - 1, parts, errors, label_offsets)):
        assert a.tolist() == b.tolist()
    assert [a.tolist() for a in paths()] == [labels.tolist(), excluded.tolist()]
    seen: dict = {}
    numbers = [seen.setdefault(p, []).append(1) or len(seen[p]) for p in parts.tolist()]
    assert walked["numbers"].tolist() == numbers
    assert walked["per_partition"].tolist() == np.bincount(
        parts, minlength=len(offsets) - 1).tolist()
    nonempty = ends > starts
    assert walked["any_empty"] == (not nonempty.all())
    for j, (c, at_end) in enumerate([(0, False), (1, True), (1, False)]):
        rows = ends - 1 if at_end else starts
        assert (walked["edges"][j][nonempty] == columns[c][rows[nonempty]]).all()
    for x, (c, want_max, m, at) in enumerate(extremes):
        keys = np.asarray(floats if c == 0 else ints, np.float64 if c == 0 else np.int64)
        member = ext[x][3]
        counted = [r for i in range(len(starts)) for r in range(starts[i], ends[i])
                   if member[labels[label_offsets[i] + r - starts[i]]]]
        if at != U.EXT_COMPARED:
            # the last (first) counted row, its keys not compared: no NaN seen
            rows = member_rows(starts, label_offsets, labels, member, at == U.EXT_AT_FIRST)
        elif c == 0 and np.isnan(keys[counted]).any():
            assert walked["ext_nan"][x]
            continue
        else:
            rows = naive(starts, ends, label_offsets, labels, keys, member, want_max)
        assert not walked["ext_nan"][x]
        assert walked["ext_rows"][x].tolist() == rows
        assert walked["ext_gap"][x] == (-1 in rows)       # a match with no row for it
        rows = np.array(rows, dtype=np.int64)
        assert (walked["ext_values"][x][rows >= 0] == columns[c][rows[rows >= 0]]).all()
    for j, (member, first) in enumerate(lands):       # FIRST/LAST member row, -1 none
        rows = member_rows(starts, label_offsets, labels, member, first)
        assert walked["landings"][j].tolist() == rows
    assert got[1].shape == ends.shape


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATTERNS), st.data(), st.booleans())
def test_walk_gives_what_the_labels_give(pattern, data, compiled):
    n = data.draw(st.integers(0, 40))
    bits = data.draw(st.lists(st.integers(0, 7), min_size=n, max_size=n))
    cuts = data.draw(st.lists(st.integers(0, 40), max_size=4))
    chunk_cuts = data.draw(st.lists(st.integers(0, 40), max_size=3))
    floats = data.draw(st.lists(st.sampled_from(FLOATS + [float("nan")] * data.draw(
        st.integers(0, 1))), min_size=n, max_size=n))
    ints = data.draw(st.lists(st.sampled_from(INTS), min_size=n, max_size=n))
    extremes = data.draw(st.lists(st.tuples(st.integers(0, 1), st.booleans(),
                                            st.integers(0, 7),
                                            st.sampled_from([U.EXT_COMPARED, U.EXT_COMPARED,
                                                             U.EXT_AT_LAST, U.EXT_AT_FIRST])),
                                  max_size=U.WALK_EXTREMES))
    landings = data.draw(st.lists(st.tuples(st.integers(0, 7), st.booleans()),
                                  max_size=U.WALK_LANDINGS))
    # now and then the partitions in speculative chunks of a few rows
    from gpu_mr.kernels import scan as S
    saved = S.CHUNKED_MIN_ROWS, S.CHUNK_MIN_ROWS, S.CHUNK_THREADS
    if data.draw(st.booleans()):
        S.CHUNKED_MIN_ROWS, S.CHUNK_MIN_ROWS, S.CHUNK_THREADS = 1, data.draw(
            st.integers(1, 6)), 64
    try:
        check(pattern, bits, cuts, chunk_cuts, floats, ints, extremes, compiled,
              landings=landings)
    finally:
        S.CHUNKED_MIN_ROWS, S.CHUNK_MIN_ROWS, S.CHUNK_THREADS = saved


@pytest.mark.parametrize("min_work", [None, 1000])
def test_groups_across_chunk_borders_and_in_parallel(min_work, monkeypatch):
    # Past WALK_CHUNK matches (several groups), borders inside groups and
    # inside matches, groups on several threads, against the plain bodies;
    # with min_work, in PIECES_PER_THREAD pieces a thread of three, taken as
    # threads come free (threads.run_all).
    if min_work is not None:
        from gpu_mr.kernels import threads
        monkeypatch.setattr(threads, "MIN_WORK", min_work)
        monkeypatch.setattr(U, "thread_count", lambda: 3)
    rng = np.random.default_rng(5)
    n = 250_000                                     # about 20,000 matches
    bits = rng.choice([1, 2, 4, 6], n).tolist()
    floats = rng.choice(FLOATS, n).tolist()
    ints = rng.choice(INTS, n).tolist()
    check("A B+ C+", bits, [n // 3, n // 2], [245_000, 245_001], floats, ints,
          [(0, False, 0b010), (1, True, 0b110)], True, plain_want=True,
          landings=[(0b010, False), (0b101, True)])


def _table(n, seed, nan=False):
    rng = np.random.default_rng(seed)
    price = np.round(100 + np.cumsum(rng.normal(size=n)), 0)
    if nan:
        price[rng.integers(0, n, 3)] = np.nan
    return pa.table({
        "sym": pa.array(rng.integers(0, 3, n)),
        "ts": pa.array(np.arange(n) * 1000, pa.timestamp("us")),
        "price": price,
        "vol": rng.integers(-3, 4, n)})


def _with_qty(table, seed, null_share=0.3):
    """``table`` with ``qty``: small integers, some NULL."""
    rng = np.random.default_rng(seed)
    n = table.num_rows
    return table.append_column(
        "qty", pa.array(rng.integers(0, 9, n), mask=rng.random(n) < null_share))


def assert_labels_unwritten_and_reference(table, clause):
    """Every measure comes from the walk or the match's rows (the labels
    are never written), and the result is the reference engine's; returns
    walk_request's answer."""
    query = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    request = measures.walk_request(query, data)
    assert request is not None
    found = CpuEngine().find_matches(query, data)
    got = measures.assemble(query, data, found)
    assert found._paths is not None                 # the labels were never needed
    assert got.equals(gpu_mr.match_recognize(table, clause, engine="reference"))
    return request


MEASURED = """PARTITION BY sym ORDER BY ts
    MEASURES FIRST(A.ts) AS s, LAST(C.ts) AS e, FIRST(price) AS p0, LAST(price) AS p1,
             {extremes}, COUNT(*) AS n, MATCH_NUMBER() AS mno,
             LAST(C.price) - FIRST(A.price) AS gain
    ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
    PATTERN (A B+ C+) SUBSET U = (A, C)
    DEFINE B AS price < PREV(price), C AS price >= PREV(price)"""


@pytest.mark.parametrize("extremes", ["MIN(B.price) AS lo, MAX(U.vol) AS hi",
                                      "MAX(price) AS hi, MIN(C.ts) AS first_up",
                                      "MIN(B.vol) AS lo"])
@pytest.mark.parametrize("nan", [False, True])
def test_engine_with_walked_measures_equals_reference(extremes, nan):
    table = _table(3000, 1, nan)
    clause = MEASURED.format(extremes=extremes)
    query = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    assert measures.walk_request(query, data) is not None
    found = CpuEngine().find_matches(query, data)
    assert isinstance(found, DeferredMatchArrays) and found._paths is not None
    got = measures.assemble(query, data, found)
    assert found._paths is not None                 # the labels were never needed
    assert got.equals(gpu_mr.match_recognize(table, clause, engine="reference"))


@pytest.mark.parametrize("aggregates", [
    "SUM(price * vol) AS pv, SUM(vol) AS sv, AVG(price) AS mean, COUNT(qty) AS nq",
    "SUM(qty) AS sq, AVG(qty * 2.5) AS aq, SUM(ABS(price - 100.0)) AS sp, COUNT(price) AS np",
    # two MIN/MAX in the walk, the rest over every row by the segmented kernels
    "MIN(B.price) AS lo, MAX(U.vol) AS hi, MIN(price + vol) AS m, MAX(ts) AS t, "
    "MIN(qty) AS mq"])
def test_aggregates_over_every_row_need_no_labels(aggregates):
    table = _table(3000, 3)
    rng = np.random.default_rng(4)
    qty = rng.integers(0, 50, table.num_rows).astype(float)
    table = table.append_column("qty", pa.array(qty, mask=rng.random(table.num_rows) < 0.2))
    assert_labels_unwritten_and_reference(table, MEASURED.format(extremes=aggregates))


@pytest.mark.parametrize("landings", [
    "LAST(B.price) AS lb", "FIRST(C.ts) AS fc, LAST(B.vol) AS lv",
    "LAST(U.price) AS lu, FIRST(B.price) AS fb, LAST(B.price) - FIRST(B.price) AS drop",
    "FIRST(B.qty) AS fq, LAST(B.s) AS ls",         # a column with NULLs, a string column
    "B.price AS bottom, B.ts - FIRST(A.ts) AS fall",   # a bare column: its variable's last
    "FIRST(B.price) AS a, LAST(B.ts) AS b, FIRST(C.vol) AS c, LAST(A.ts) AS d"])  # four
def test_first_and_last_of_a_variable_come_from_the_walk(landings):
    table = _with_qty(_table(3000, 7), 8)
    table = table.append_column("s", pa.array([f"r{k}" for k in range(table.num_rows)]))
    request = assert_labels_unwritten_and_reference(table, MEASURED.format(extremes=landings))
    assert request[4]                               # the walk finds the rows


@pytest.mark.parametrize("aggregates, pattern", [
    # each variable's rows one range of the match: no labels for its aggregates
    ("COUNT(B.*) AS nb, SUM(B.vol) AS sb, AVG(C.price) AS ac, MIN(A.vol) AS ma", None),
    ("MIN(B.price) AS a, MAX(B.price) AS b, MIN(C.price) AS c, MAX(C.ts) AS d", None),
    ("SUM(B.price * 2) AS sx, COUNT(C.qty) AS nx, MAX(B.qty) AS m", "^ A? B* C+"),
    ("AVG(B.price) AS a, SUM(A.vol) AS sx, COUNT(C.*) AS nx", "A{1,2}? B+ C{2,}"),
    ("AVG(B.price) AS a, MIN(C.price) AS c", "A {- B+ -} C+ $"),
    ("SUM(B.vol) AS sx, MAX(C.price) AS m, FIRST(B.ts) AS f", "A B* C*")])   # empty ranges
def test_aggregates_over_a_run_of_the_pattern_need_no_labels(aggregates, pattern):
    clause = MEASURED.format(extremes=aggregates)
    if pattern:
        clause = clause.replace("PATTERN (A B+ C+)", f"PATTERN ({pattern})")
    assert_labels_unwritten_and_reference(_with_qty(_table(3000, 10), 11), clause)


@pytest.mark.parametrize("aggregates, pattern", [
    # a variable of at most one row: its value gathered at that row (SUM of
    # one DOUBLE is 0 + x: -0.0 becomes 0.0; NULL values and no row: NULL)
    ("SUM(A.x) AS sx, AVG(A.x) AS ax, SUM(A.qty) AS sq, AVG(A.qty) AS aq, MIN(A.x) AS mx, "
     "MAX(A.qty) AS mq, SUM(A.vol) AS sv", None),
    ("SUM(B.x) AS sx, AVG(B.qty) AS aq, SUM(B.qty) AS sq, MAX(B.x) AS mb", "A B C+"),
    ("SUM(B.x) AS sx, AVG(B.x) AS ax, SUM(B.qty) AS sq, MIN(B.qty) AS m", "A B? C+")])
def test_aggregates_over_one_row_of_a_variable(aggregates, pattern):
    table = _with_qty(_table(3000, 12), 13)
    rng = np.random.default_rng(14)
    x = rng.choice([0.0, -0.0, 1.5, -2.25], table.num_rows)
    table = table.append_column("x", pa.array(x, mask=rng.random(table.num_rows) < 0.2))
    clause = MEASURED.format(extremes=aggregates)
    if pattern:
        clause = clause.replace("PATTERN (A B+ C+)", f"PATTERN ({pattern})")
    assert_labels_unwritten_and_reference(table, clause)
    assert_as_the_interpreter(table, clause)


def test_one_row_aggregates_read_the_walks_edge_values():
    # FIRST(A.x) is one of the walk's edges: SUM/AVG of A.x take its values
    table = _table(3000, 15)
    x = np.random.default_rng(16).choice([0.0, -0.0, 1.5, -2.25], table.num_rows)
    table = table.append_column("x", pa.array(x))
    clause = """PARTITION BY sym ORDER BY ts
        MEASURES FIRST(A.x) AS fx, SUM(A.x) AS sx, AVG(A.x) AS ax, COUNT(*) AS n
        ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A B+ C+) DEFINE B AS price < PREV(price), C AS price >= PREV(price)"""
    request = assert_labels_unwritten_and_reference(table, clause)
    assert ("x", False) in request[2]               # an edge of the walk
    assert_as_the_interpreter(table, clause)


def assert_as_the_interpreter(table, clause):
    """The float measures' signs are the interpreter's, which is the
    semantics (every engine's output goes through the vectorised measures;
    Arrow's equality takes -0.0 for 0.0)."""
    query = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    found = CpuEngine().find_matches(query, data)
    got = measures.assemble(query, data, found)
    want = measures.assemble(query, data, found, vectorised=False)
    assert got.equals(want)
    for name in got.column_names:
        if pa.types.is_floating(got.schema.field(name).type):
            a, b = (t.column(name).to_numpy(zero_copy_only=False) for t in (got, want))
            assert (np.signbit(a) == np.signbit(b)).all(), name


@pytest.mark.parametrize("measure, pattern", [
    ("CLASSIFIER() AS c", None), ("LAST(B.price, 1) AS lb", None), ("AVG(U.price) AS au", None),
    # not a sequence of runs: a variable's rows are not one range of the match
    ("COUNT(B.*) AS nb", "A (B | C)+"), ("SUM(B.vol) AS sb", "A B+ C+ B*"),
    ("MIN(B.price) AS a, MAX(B.price) AS b, MIN(C.price) AS c", "A (B+ C+)"),
    ("AVG(C.price) AS ac", "A (B C)+")])
def test_measures_that_read_labels_keep_the_labelled_walk(measure, pattern):
    table = _table(500, 2)
    clause = MEASURED.replace("{extremes}", measure)
    if pattern:
        clause = clause.replace("PATTERN (A B+ C+)", f"PATTERN ({pattern})")
    query = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    assert measures.walk_request(query, data) is None
    assert gpu_mr.match_recognize(table, clause, engine="cpu").equals(
        gpu_mr.match_recognize(table, clause, engine="reference"))


@pytest.mark.parametrize("measure, reads", [
    ("MIN(B.price) AS lo, SUM(price * vol) AS pv, LAST(B.ts) AS lb", None),
    ("CLASSIFIER() AS c", "c = CLASSIFIER()"),
    ("AVG(U.price) AS au", "au = AVG(U.price)")])
def test_explain_says_whether_the_labels_are_written(measure, reads):
    table = _table(50, 9)
    clause = MEASURED.format(extremes=measure)
    query = analyze(parse_clause(clause), table.schema)
    why = measures.walk_labels_reason(query)
    text = gpu_mr.compile(clause, table.schema).explain()
    if reads is None:
        assert why is None and "no per-row labels are written" in text
    else:
        assert reads in why and f"per-row labels are written for the measure {why}" in text
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    assert (measures.walk_request(query, data) is None) == (reads is not None)


def test_walk_request_leaves_no_cycle_holding_the_input():
    """measures.walk_request's plan (recursive closures) must not keep the
    input alive in a reference cycle: a stream asks it once per batch, and
    its batches piled up in memory until the garbage collector ran."""
    import gc
    from gpu_mr.frames import SortedInput
    table = _table(500, 4)
    query = analyze(parse_clause(MEASURED.format(extremes="MIN(B.price) AS lo")), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        assert measures.walk_request(query, data) is not None
        del data
        gc.collect()
        held = [o for o in gc.garbage if isinstance(o, SortedInput)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert not held                         # freed at once, not by the collector


def test_blocks_over_rows_a_stream_did_not_scan(monkeypatch):
    """A stream's batch can hold rows before the one its scan starts at,
    whose row keys are never written, and the walk's blocks read the 8 rows
    before a match's end whatever they are: with every new array filled
    with garbage (row keys past the largest, negative words), the pieces
    still equal the whole table's answer (nothing reads memory it did not
    write, past what the masks drop)."""
    from gpu_mr.kernels import buffers
    empty = buffers.empty

    def garbage(shape, dtype):
        out = empty(shape, dtype)
        out.view(np.uint8).fill(0xA7)
        return out
    monkeypatch.setattr(buffers, "empty", garbage)
    rng = np.random.default_rng(21)
    n = 20_000
    table = pa.table({"sym": np.repeat(["A", "B"], n // 2), "ts": np.arange(n),
                      "price": np.round(100 + np.cumsum(rng.normal(size=n)), 0),
                      "vol": rng.integers(0, 9, n)})
    clause = """PARTITION BY sym ORDER BY ts
        MEASURES FIRST(A.ts) AS s, LAST(C.ts) AS e, MIN(B.price) AS lo, MAX(C.vol) AS hi,
                 FIRST(C.price) AS c0, LAST(B.ts) AS b1, COUNT(*) AS n, MATCH_NUMBER() AS mno
        ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A B+ C+) DEFINE B AS price < PREV(price), C AS price > PREV(price)"""
    want = gpu_mr.match_recognize(table, clause, engine="reference")
    pieces = list(gpu_mr.match_recognize_batches(table.to_batches(max_chunksize=613), clause,
                                                 engine="cpu"))
    assert pa.concat_tables(pieces).equals(want)
