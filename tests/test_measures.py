"""Vectorised MEASURES and output assembly (gpu_mr/measures.py) against the
interpreter path (``assemble(..., vectorised=False)``), which is the
semantics: hand-checked values per measure form, the output row order, the
segmented kernels against Python, and a property-based differential test
over random patterns, DEFINEs, measures, row modes, exclusions, subsets,
overlapping matches and column types. GPU_MR_FULL_TESTS=1 runs many more
examples.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
import os
import re
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpu_mr import measures
from gpu_mr.analysis import analyze
from gpu_mr.engines.base import MatchArrays
from gpu_mr.engines.reference import ReferenceEngine
from gpu_mr.errors import DataError, GpuMrError, MatchRuntimeError
from gpu_mr.frames import sort_for_matching
from gpu_mr.kernels import segmented, threads
from gpu_mr.syntax import ast as A
from gpu_mr.syntax import parse_clause

FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"
EXAMPLES = 2000 if FULL else 150


# ------------------------------------------------------------ helpers

def _bits(v):
    """Values compared exactly: floats by their bits (NaN, -0.0)."""
    if isinstance(v, float):
        return ("f", struct.pack("<d", v))
    if isinstance(v, dict):
        return {k: _bits(x) for k, x in v.items()}
    return v


def assert_same(got: pa.Table, want: pa.Table) -> None:
    assert got.schema == want.schema, f"{got.schema}\n!=\n{want.schema}"
    for name in want.column_names:
        g, w = got.column(name), want.column(name)
        assert g.type == w.type, name
        assert [_bits(v) for v in g.to_pylist()] == [_bits(v) for v in w.to_pylist()], \
            f"column {name}:\n got  {g.to_pylist()}\n want {w.to_pylist()}"


def run(clause: str, table: pa.Table, vectorised: bool = True, arrays: bool = False):
    query = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    matches = ReferenceEngine().find_matches(query, data)
    if arrays:
        matches = MatchArrays.from_matches(matches)
    return measures.assemble(query, data, matches, vectorised=vectorised)


def both(clause: str, table: pa.Table) -> pa.Table:
    """The vectorised table, checked equal to the interpreter's."""
    want = run(clause, table, vectorised=False)
    got = run(clause, table, arrays=True)
    assert_same(got, want)
    return got


TICKS = pa.table({
    "p": pa.array([1, 1, 1, 1, 1, 1, 2, 2, 2], pa.int64()),
    "ts": pa.array(range(9), pa.int64()),
    "price": pa.array([10, 8, 6, 7, 9, 5, 3, 4, 2], pa.int32()),
    "x": pa.array([0.1, 0.2, None, 0.3, -0.0, 1e16, 1.0, None, 2.5], pa.float64()),
    "s": pa.array(["b", "a", None, "c", "é", "a", "z", "y", None]),
})

FALLS_RISES = ("PARTITION BY p ORDER BY ts MEASURES {m} {rows} AFTER MATCH SKIP {skip} "
               "PATTERN (A B* C*) DEFINE B AS price < PREV(price), C AS price > PREV(price)")


def measure_values(measure: str, rows: str = "ONE ROW PER MATCH", skip: str = "PAST LAST ROW",
                   table: pa.Table = TICKS) -> list:
    out = both(FALLS_RISES.format(m=f"{measure} AS m", rows=rows, skip=skip), table)
    return out.column("m").to_pylist()


# ------------------------------------------------------------ unit: measure forms

def test_match_number_and_classifier():
    assert measure_values("MATCH_NUMBER()") == [1, 2, 1, 2]
    assert measure_values("CLASSIFIER()", "ALL ROWS PER MATCH") == \
        ["A", "B", "B", "C", "C", "A", "A", "C", "A"]
    assert measure_values("CLASSIFIER(B)", "ALL ROWS PER MATCH") == \
        [None, "B", "B", "B", "B", None, None, None, None]


def test_column_references():
    assert measure_values("price") == [9, 5, 4, 2]            # the last row, as BIGINT
    assert measure_values("B.price") == [6, None, None, None]
    assert measure_values("B.price", "ALL ROWS PER MATCH") == \
        [None, 8, 6, 6, 6, None, None, None, None]
    out = both(FALLS_RISES.format(m="s AS m", rows="ONE ROW PER MATCH", skip="PAST LAST ROW"),
               TICKS)
    assert out.schema.field("m").type == pa.string()


def test_first_last_running_and_final():
    assert measure_values("FIRST(price)", "ALL ROWS PER MATCH") == [10, 10, 10, 10, 10, 5, 3, 3, 2]
    assert measure_values("LAST(B.price, 1)", "ALL ROWS PER MATCH") == \
        [None, None, 8, 8, 8, None, None, None, None]
    assert measure_values("FINAL LAST(price, 1)", "ALL ROWS PER MATCH") == \
        [7, 7, 7, 7, 7, None, 3, 3, None]
    assert measure_values("FINAL FIRST(C.price)", "ALL ROWS PER MATCH") == \
        [7, 7, 7, 7, 7, None, 4, 4, None]


def test_prev_next():
    assert measure_values("PREV(price)", "ALL ROWS PER MATCH") == \
        [None, 10, 8, 6, 7, 9, None, 3, 4]     # PREV leaves the match
    assert measure_values("NEXT(A.price, 2)") == [6, None, 2, None]
    assert measure_values("PREV(FINAL LAST(B.price), 2)") == [10, None, None, None]
    assert measure_values("NEXT(CLASSIFIER())", "ALL ROWS PER MATCH") == \
        ["B", "B", "C", "C", None, None, "C", None, None]


def test_aggregates():
    assert measure_values("COUNT(*)") == [5, 1, 2, 1]
    assert measure_values("COUNT(B.*)", "ALL ROWS PER MATCH") == [0, 1, 2, 2, 2, 0, 0, 0, 0]
    assert measure_values("COUNT(x)") == [4, 1, 1, 1]
    assert measure_values("SUM(price)", "ALL ROWS PER MATCH") == [10, 18, 24, 31, 40, 5, 3, 7, 2]
    assert measure_values("FINAL AVG(C.price)") == [8.0, None, 4.0, None]
    assert measure_values("MIN(s)") == ["a", "a", "y", None]
    assert measure_values("FINAL MAX(s)", "ALL ROWS PER MATCH") == \
        ["é", "é", "é", "é", "é", "a", "z", "z", None]
    assert measure_values("SUM(x)", "ALL ROWS PER MATCH")[:5] == [0.1, 0.1 + 0.2, 0.1 + 0.2,
                                                                   0.1 + 0.2 + 0.3,
                                                                   0.1 + 0.2 + 0.3 + -0.0]


def test_min_keeps_the_first_of_equal_extremes():
    t = pa.table({"ts": [1, 2, 3], "x": [0.0, -0.0, 1.0]})
    clause = "ORDER BY ts MEASURES MIN(x) AS lo, MAX(-x) AS hi PATTERN (A+) DEFINE A AS TRUE"
    got = both(clause, t)
    assert math.copysign(1, got.column("lo")[0].as_py()) == 1.0


def test_temporal_min_max_and_types():
    t = pa.table({"ts": [1, 2, 3, 4],
                  "d": pa.array([dt.date(2024, 1, 3), dt.date(2024, 1, 1), None,
                                 dt.date(2023, 5, 1)]),
                  "t": pa.array([5, 1, None, 7], pa.timestamp("ms", tz="UTC")),
                  "i": pa.array([1, None, 3, 4], pa.int8()),
                  "u": pa.array([1, 2, 3, 2**63 + 5], pa.uint64())})
    both("ORDER BY ts MEASURES MIN(d) AS a, MAX(t) AS b, FINAL MIN(t) AS c, SUM(i) AS e, "
         "LAST(u) AS f, AVG(i) AS g, PREV(d) AS h ALL ROWS PER MATCH PATTERN (A+) "
         "DEFINE A AS TRUE", t.slice(0, 3))


def test_bigint_overflow_raises_like_the_interpreter():
    t = pa.table({"ts": [1, 2, 3, 4], "v": pa.array([2**62, -5, 2**62, 10], pa.int64())})
    clause = "ORDER BY ts MEASURES SUM(v) AS s PATTERN (A+) DEFINE A AS TRUE"
    with pytest.raises(DataError) as want:
        run(clause, t, vectorised=False)
    with pytest.raises(DataError) as got:
        run(clause, t)
    assert str(got.value) == str(want.value)
    both("ORDER BY ts MEASURES AVG(v) AS s PATTERN (A+) DEFINE A AS TRUE", t)


def test_fallback_forms():
    measure_values("LAST(C.price) - FIRST(A.price)")
    measure_values("SUM(DISTINCT price)", "ALL ROWS PER MATCH")
    measure_values("STDDEV(x)", "ALL ROWS PER MATCH WITH UNMATCHED ROWS")
    measure_values("FIRST(price * 2)")


def test_output_rows_with_unmatched_rows_overlaps_and_exclusions():
    t = pa.table({"ts": list(range(7)), "v": [0, 1, 1, 0, 1, 1, 0]})
    clause = ("ORDER BY ts MEASURES MATCH_NUMBER() AS n, CLASSIFIER() AS c ALL ROWS PER MATCH "
              "WITH UNMATCHED ROWS AFTER MATCH SKIP TO NEXT ROW PATTERN (A B | C?) "
              "DEFINE A AS v = 1, B AS v = 1, C AS v = 9")

    def rows(text):
        got = both(text, t)
        return list(zip(*[got.column(c).to_pylist() for c in ("ts", "n", "c")]))
    # empty matches emit their row; row 2 ends match 2 and starts empty match 3
    assert rows(clause) == [(0, 1, None), (1, 2, "A"), (2, 2, "B"), (2, 3, None), (3, 4, None),
                            (4, 5, "A"), (5, 5, "B"), (5, 6, None), (6, 7, None)]
    # overlapping matches (row 2 is in match 1, match 2 starts there), unmatched rows between
    assert rows(clause.replace("C?", "C")) == [
        (0, None, None), (1, 1, "A"), (2, 1, "B"), (3, None, None), (4, 2, "A"), (5, 2, "B"),
        (6, None, None)]
    # excluded rows are left out
    assert rows(clause.replace("A B", "A {- B -}").replace("WITH UNMATCHED ROWS", "")) == [
        (0, 1, None), (1, 2, "A"), (2, 3, None), (3, 4, None), (4, 5, "A"), (5, 6, None),
        (6, 7, None)]
    assert rows(clause.replace("WITH UNMATCHED ROWS", "OMIT EMPTY MATCHES")) == [
        (1, 2, "A"), (2, 2, "B"), (4, 5, "A"), (5, 5, "B")]


def test_partition_order_is_restored_for_all_rows():
    """Matches handed over out of partition order come out by partition."""
    t = pa.table({"p": [1, 1, 2, 2], "ts": [1, 2, 3, 4], "v": [1, 1, 1, 1]})
    clause = ("PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n ALL ROWS PER MATCH "
              "PATTERN (A) DEFINE A AS v = 1")
    query = analyze(parse_clause(clause), t.schema)
    data = sort_for_matching(t, query.partition_columns, query.order_keys)
    found = ReferenceEngine().find_matches(query, data)
    shuffled = found[2:] + found[:2]
    want = measures.assemble(query, data, found, vectorised=False)
    assert_same(measures.assemble(query, data, MatchArrays.from_matches(shuffled)), want)


def test_no_matches_gives_null_measures():
    got = both("ORDER BY ts MEASURES SUM(price) AS total, CLASSIFIER() AS c ALL ROWS PER MATCH "
               "WITH UNMATCHED ROWS PATTERN (A) DEFINE A AS price > 100", TICKS)
    assert got.column("total").null_count == len(TICKS)


# ------------------------------------------------------------ kernels

@st.composite
def segments(draw):
    """Segments over a few rows: (member per variable, labels, starts,
    offsets, valid per row or None)."""
    lengths = draw(st.lists(st.integers(0, 6), max_size=6))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n_rows = max(lengths, default=0) + 3
    starts = np.array([draw(st.integers(0, n_rows - ln)) for ln in lengths], np.int64)
    labels = np.array(draw(st.lists(st.integers(0, 2), min_size=int(offsets[-1]),
                                    max_size=int(offsets[-1]))), np.int16)
    member = np.array(draw(st.lists(st.booleans(), min_size=3, max_size=3)))
    valid = draw(st.none() | st.lists(st.booleans(), min_size=n_rows, max_size=n_rows))
    return member, labels, starts, offsets, None if valid is None else np.array(valid), n_rows


FLOATS = st.sampled_from([0.1, 0.2, 0.3, -0.0, 0.0, 1e16, -1e16, 1.0, 3.5, 1e-300, -2.5,
                          math.inf, 1e308])


@settings(max_examples=EXAMPLES // 2, deadline=None)
@given(segments(), st.data())
def test_segmented_kernels_against_python(seg_args, data):
    member, labels, starts, offsets, valid, n_rows = seg_args
    xs = np.array(data.draw(st.lists(FLOATS, min_size=n_rows, max_size=n_rows)), np.float64)
    ks = np.array(data.draw(st.lists(st.integers(-3, 3), min_size=n_rows, max_size=n_rows)),
                  np.int64)
    for compiled in (False, True):
        for per_element in (False, True):
            seg = segmented.Segments(member, labels, starts, offsets, valid, per_element,
                                     compiled)
            count = segmented.segmented_count(seg)
            fcount, icount = (np.full(seg.size, -1, np.int64) for _ in range(2))
            fsum, _ = segmented.segmented_sum(xs, seg, counts=fcount)
            isum, bad = segmented.segmented_sum(ks, seg, counts=icount)
            assert fcount.tolist() == count.tolist() == icount.tolist()
            lo = segmented.segmented_arg_extreme(xs, seg, False)
            hi = segmented.segmented_arg_extreme(ks, seg, True)
            assert not bad
            for i in range(offsets.shape[0] - 1):
                seen = []
                for e in range(offsets[i], offsets[i + 1]):
                    row = starts[i] + e - offsets[i]
                    if member[labels[e]] and (valid is None or valid[row]):
                        seen.append(row)
                    at = e if per_element else i
                    if not per_element and e != offsets[i + 1] - 1:
                        continue
                    want = sum(float(xs[r]) for r in seen) if seen else 0.0
                    assert struct.pack("<d", fsum[at]) == struct.pack("<d", want)
                    assert isum[at] == sum(int(ks[r]) for r in seen)
                    assert count[at] == len(seen)
                    vals = [float(xs[r]) for r in seen]
                    assert lo[at] == (seen[vals.index(min(vals))] if seen else -1)
                    ints = [int(ks[r]) for r in seen]
                    assert hi[at] == (seen[ints.index(max(ints))] if seen else -1)
                if not per_element and offsets[i] == offsets[i + 1]:
                    assert count[i] == 0 and hi[i] == -1
            for k in range(3):
                for from_end in (False, True):
                    lo_q, hi_q = offsets[:-1], offsets[1:] - 1
                    got = segmented.find_members(member, labels, lo_q, hi_q, k, from_end,
                                                 compiled)
                    rows = segmented.find_members(member, labels, lo_q, hi_q, k, from_end,
                                                  compiled, row_of_lo=starts)
                    for q in range(lo_q.shape[0]):
                        els = [e for e in range(lo_q[q], hi_q[q] + 1) if member[labels[e]]]
                        if from_end:
                            els.reverse()
                        assert got[q] == (els[k] if k < len(els) else -1)
                        assert rows[q] == (els[k] - lo_q[q] + starts[q] if k < len(els) else -1)


@st.composite
def every_row_segments(draw):
    """Segments whose every row counts, none NULL (the ``_blocks`` kernels'
    case): lengths on both sides of ``BLOCK_ROWS``, rows anywhere, also
    within a block of the end (read row by row there); ``(starts,
    offsets, rows)``."""
    block = segmented.BLOCK_ROWS
    lengths = draw(st.lists(st.integers(0, block + 4), min_size=1, max_size=8))
    n_rows = max(lengths) + draw(st.integers(0, 2 * block))
    starts = np.array([draw(st.integers(0, n_rows - ln)) for ln in lengths], np.int64)
    return starts, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), n_rows


@settings(max_examples=EXAMPLES, deadline=None)
@given(every_row_segments(), st.data())
def test_block_sums_against_python(seg_args, data):
    """The ``_blocks`` sums, compiled and plain, give exactly Python's sums
    (and the row-by-row kernels' totals, compensated or not), counts, NaN
    flags and overflow flags; rows past a segment hold values that would
    change any sum (NaN, infinities, -0.0, huge integers)."""
    starts, offsets, n_rows = seg_args
    xs = np.array(data.draw(st.lists(FLOATS | st.just(math.nan), min_size=n_rows,
                                     max_size=n_rows)), np.float64)
    big = st.sampled_from([2**62, -2**62, 2**63 - 1, -2**63])
    ks = np.array(data.draw(st.lists(st.integers(-3, 3) | big, min_size=n_rows,
                                     max_size=n_rows)), np.int64)
    m = offsets.shape[0] - 1
    masks = segmented.block_masks()
    every = segmented.EVERY_ROW
    for compiled in (False, True):
        k = segmented.kernels(0, compiled)
        for compensated in (False, True):
            got, want = np.full(m, 7.0), np.full(m, 7.0)
            gc, wc = np.full(m, -1, np.int64), np.full(m, -1, np.int64)
            nan = k[6](xs.view(np.int64), starts, offsets, compensated, masks, got, gc)
            nan_rows = k[2](xs, segmented._NO_VALID, False, np.ones(1, bool), every, starts,
                            offsets, False, compensated, want, wc)
            assert got.view(np.int64).tolist() == want.view(np.int64).tolist()
            assert gc.tolist() == wc.tolist() == np.diff(offsets).tolist()
            assert bool(nan) == bool(nan_rows)
            if compensated != segmented.COMPENSATED_SUM:
                continue
            for i, (s, n) in enumerate(zip(starts, np.diff(offsets))):
                if not any(math.isnan(v) for v in xs[s:s + n]):   # this Python's sum
                    python = sum(float(v) for v in xs[s:s + n])
                    assert struct.pack("<d", got[i]) == struct.pack("<d", python)
        got, counts = np.full(m, 7, np.int64), np.zeros(0, np.int64)
        over = k[5](ks, starts, offsets, masks, got, counts)
        exact = [sum(int(v) for v in ks[s:s + n]) for s, n in zip(starts, np.diff(offsets))]
        running = [np.cumsum([int(v) for v in ks[s:s + n]], dtype=object)
                   for s, n in zip(starts, np.diff(offsets))]
        left = any(int(r) > 2**63 - 1 or int(r) < -2**63 for rs in running for r in rs)
        assert bool(over) == left
        if not left:
            assert got.tolist() == exact


def test_block_sum_of_negative_zeros_is_positive_zero():
    """Python's ``sum`` of -0.0s is +0.0 (it starts at the integer 0), in a
    full block too, where no masked row's +0.0 would hide a wrong start."""
    xs = np.full(20, -0.0)
    for compiled in (False, True):
        seg = segmented.Segments(np.ones(1, bool), segmented.EVERY_ROW, np.array([0, 8, 9]),
                                 np.array([0, 8, 9, 12]), compiled=compiled)
        sums = segmented.segmented_sum(xs, seg)[0]
        assert [struct.pack("<d", v) for v in sums] == [struct.pack("<d", 0.0)] * 3


@settings(max_examples=EXAMPLES, deadline=None)
@given(every_row_segments(), st.data())
def test_block_extremes_against_python(seg_args, data):
    """The ``_blocks`` MIN/MAX rows, compiled and plain, are Python's
    (``min``/``max``, the first of equal keys), with keys equal to the value
    the rows past a segment read as (infinities, the integer extremes),
    and the NaN flag; ``row_base`` is added."""
    starts, offsets, n_rows = seg_args
    floats = np.array(data.draw(st.lists(FLOATS | st.sampled_from([-math.inf, math.nan]),
                                         min_size=n_rows, max_size=n_rows)), np.float64)
    ints = np.array(data.draw(st.lists(st.integers(-2, 2) | st.sampled_from([2**63 - 1, -2**63]),
                                       min_size=n_rows, max_size=n_rows)), np.int64)
    m = offsets.shape[0] - 1
    lengths = np.diff(offsets)
    for compiled in (False, True):
        k = segmented.kernels(0, compiled)
        for keys in (floats, ints):
            for want_max in (False, True):
                got = np.full(m, 7, np.int64)
                nan = k[7](keys, keys.view(np.int64), starts, offsets, want_max, np.int64(100),
                           np.int64(segmented.far_bits(keys.dtype, want_max)),
                           segmented.block_masks(), got)
                seen_nan = False
                for i, (s, n) in enumerate(zip(starts, lengths)):
                    vals = keys[s:s + n].tolist()
                    if any(v != v for v in vals):
                        seen_nan = True
                        continue
                    pick = max if want_max else min
                    assert got[i] == (s + vals.index(pick(vals)) + 100 if n else -1)
                assert bool(nan) == seen_nan


def test_block_sums_are_chosen_where_lengths_vary(monkeypatch):
    """segmented_sum and segmented_arg_extreme take the ``_blocks`` kernels
    for every-row totals of varying lengths, the row-by-row ones for one
    length or labels."""
    calls = []
    real = segmented.Segments.run

    def run(self, which, *args, **kwargs):
        calls.append(which)
        return real(self, which, *args, **kwargs)
    monkeypatch.setattr(segmented.Segments, "run", run)
    xs = np.arange(20, dtype=np.float64)
    varied = segmented.Segments(np.ones(1, bool), segmented.EVERY_ROW, np.array([0, 5, 9]),
                                np.array([0, 3, 4, 9]))
    alike = segmented.Segments(np.ones(1, bool), segmented.EVERY_ROW, np.array([0, 5, 9]),
                               np.array([0, 1, 2, 3]))
    labelled = segmented.Segments(np.ones(1, bool), np.zeros(9, np.int16),
                                  np.array([0, 5, 9]), np.array([0, 3, 4, 9]))
    for seg, want in ((varied, [6, 5, 7]), (alike, [2, 1, 3]), (labelled, [2, 1, 3])):
        calls.clear()
        sums = [segmented.segmented_sum(xs, seg)[0], segmented.segmented_sum(xs.astype(np.int64),
                                                                           seg)[0]]
        top = segmented.segmented_arg_extreme(-xs, seg, True)
        assert calls == want
        lengths = np.diff(seg.offsets)
        assert sums[0].tolist() == [sum(xs[s:s + n]) for s, n in zip(seg.starts, lengths)]
        assert sums[1].tolist() == [int(sum(xs[s:s + n])) for s, n in zip(seg.starts, lengths)]
        assert top.tolist() == [s if n else -1 for s, n in zip(seg.starts, lengths)]


def _one_segment(n: int, compiled: bool):
    return segmented.Segments(np.array([True]), np.zeros(n, np.int16), np.array([0]),
                              np.array([0, n]), None, True, compiled)


def test_int_sum_overflow_is_reported():
    v = np.array([2**62, 2**62, -1], dtype=np.int64)
    for compiled in (False, True):
        assert segmented.segmented_sum(v, _one_segment(3, compiled))[1]


def test_compensated_sum_mode():
    """The Python >= 3.12 rule (Neumaier), whatever this Python is."""
    xs = np.array([1e100, 1.0, -1e100, -0.0], dtype=np.float64)
    for compiled in (False, True):
        seg = _one_segment(4, compiled)
        fn = seg.k[2]
        for compensated, want in ((True, [1e100, 1e100, 1.0, 1.0]),
                                  (False, [1e100, 1e100, 0.0, 0.0])):
            out = np.empty(4)
            fn(xs, *seg.args(), compensated, out, np.zeros(0, np.int64))
            assert out.tolist() == want


def _split_everything(monkeypatch):
    """Every compiled measure kernel call cut into pieces on threads, however
    small the work (kernels/threads.py); and every uninitialised buffer
    filled with garbage, so that a slot no piece writes cannot pass for
    the value an earlier run left in the memory pool."""
    from gpu_mr.kernels import buffers
    monkeypatch.setattr(threads, "MIN_WORK", 1)
    monkeypatch.setattr(threads, "thread_count", lambda: 3)
    real = buffers.empty

    def garbage(shape, dtype):
        out = real(shape, dtype)
        out.reshape(-1).view(np.uint8)[:] = 0xA5
        return out
    monkeypatch.setattr(buffers, "empty", garbage)


def _compiled_measures(monkeypatch, split: bool) -> None:
    """The measures' compiled kernels however small the input, and with
    ``split`` every call in pieces on threads (:func:`_split_everything`)."""
    monkeypatch.setattr(segmented, "JIT_MIN_ELEMENTS", 0)
    monkeypatch.setattr(measures, "G_MIN_ROWS", 0)
    if split:
        _split_everything(monkeypatch)


@pytest.mark.parametrize("split", [False, True])
def test_compiled_kernels_in_assembly(monkeypatch, split):
    """With the numba kernels (used for large inputs), whole or in pieces on
    threads: the same table as the interpreter."""
    _compiled_measures(monkeypatch, split)
    n = 600
    rng = np.random.default_rng(1)
    price = np.round(rng.random(n) * 100, 2)
    price[100:160] = np.concatenate((200 - np.arange(30), 170 + np.arange(30)))  # a long V
    t = pa.table({"p": np.repeat([0, 1], n // 2), "ts": np.arange(n), "price": price,
                  "vol": pa.array(np.where(rng.random(n) < 0.1, None, rng.integers(0, 50, n)))})
    for rows in ("ONE ROW PER MATCH", "ALL ROWS PER MATCH"):
        both("PARTITION BY p ORDER BY ts MEASURES FIRST(B.price) AS fb, LAST(B.vol, 1) AS lb, "
             "SUM(price) AS sp, FINAL AVG(B.vol) AS ab, MAX(C.price) AS mx, COUNT(B.*) AS cb, "
             "COUNT(vol) AS cv, MIN(vol) AS mv, COUNT(*) AS n, CLASSIFIER() AS cls, "
             "MATCH_NUMBER() AS mno, FIRST(A.price) AS fa, FINAL LAST(C.ts) AS lc "
             f"{rows} PATTERN (A B+ C+) "
             "DEFINE B AS price < PREV(price), C AS price > PREV(price)", t)


@pytest.mark.parametrize("split", [False, True])
def test_block_totals_in_assembly(monkeypatch, split):
    """Totals over every row of a match and over one variable's run, where
    the ``_blocks`` kernels take them (compiled, lengths varying), on
    values a masked row would spoil: infinities, -0.0, integers at the
    BIGINT limits (a sum past them raises as the interpreter's does), ties
    for MIN/MAX; in chunks of 7 rows (blocks cut by a chunk's end, matches
    across chunks), the interpreter's table."""
    _compiled_measures(monkeypatch, split)
    n = 400
    rng = np.random.default_rng(5)
    price = np.cumsum(rng.choice([-1.0, 1.0, 0.0], n, p=[0.45, 0.45, 0.1])) + 100
    x = rng.choice([0.5, -0.0, 0.0, math.inf, -math.inf, 1e308, -2.5, 3.0], n)
    big = rng.choice([2**62, -2**62, 2**63 - 1, -2**63, 7, -7, 0], n)
    t = pa.table({"p": np.repeat([0, 1], n // 2), "ts": np.arange(n), "price": price,
                  "x": x, "k": big, "v": rng.integers(-5, 5, n)})
    t = pa.Table.from_batches(t.to_batches(max_chunksize=7))
    clause = ("PARTITION BY p ORDER BY ts MEASURES SUM(x) AS sx, AVG(x) AS ax, MIN(x) AS lx, "
              "MAX(x) AS hx, SUM(v) AS sv, MIN(v) AS lv, MAX(B.price) AS hb, "
              "MIN(C.v) AS lc, AVG(C.x) AS ac, COUNT(*) AS n ONE ROW PER MATCH "
              "PATTERN (A B+ C+) DEFINE B AS price < PREV(price), C AS price > PREV(price)")
    both(clause, t)
    with pytest.raises(DataError) as want:
        run(clause.replace("SUM(v)", "SUM(k)"), t, vectorised=False)
    with pytest.raises(DataError) as got:
        run(clause.replace("SUM(v)", "SUM(k)"), t, arrays=True)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("max_crossing,split", [(0, False), (64, False), (64, True)])
def test_chunked_columns_in_assembly(monkeypatch, max_crossing, split):
    """Columns in chunks (one sliced, one dictionary-encoded) with matches
    across the borders, compiled kernels: the interpreter's table, whether
    the crossing matches run one by one or the chunks are combined, and with
    the kernel calls cut into pieces on threads."""
    _compiled_measures(monkeypatch, split)
    monkeypatch.setattr(measures, "_MAX_CROSSING", max_crossing)
    n = 700
    rng = np.random.default_rng(2)
    t = pa.table({"p": pa.array(np.repeat(["x", "y"], n // 2)).dictionary_encode(),
                  "ts": pa.array(np.arange(n) * 1000, pa.timestamp("ms")),
                  "price": np.round(rng.random(n) * 100, 2),
                  "vol": pa.array(np.where(rng.random(n) < 0.1, None, rng.integers(0, 50, n)),
                                  pa.int32())})
    t = pa.concat_tables([t.slice(0, 101), t.slice(101, 1), t.slice(102, 300),
                          t.slice(402)])
    for rows in ("ONE ROW PER MATCH", "ALL ROWS PER MATCH"):
        both("PARTITION BY p ORDER BY ts MEASURES FIRST(B.price) AS fb, LAST(B.vol, 1) AS lb, "
             "SUM(price) AS sp, FINAL AVG(B.vol) AS ab, MAX(C.price) AS mx, COUNT(B.*) AS cb, "
             "COUNT(vol) AS cv, MIN(vol) AS mv, FIRST(ts) AS t0, MIN(C.ts) AS tc, "
             "COUNT(*) AS n, CLASSIFIER() AS cls, MATCH_NUMBER() AS mno, "
             f"PREV(A.ts) AS pt {rows} PATTERN (A B+ C+) "
             "DEFINE B AS price < PREV(price), C AS price > PREV(price)", t)


# ------------------------------------------------------------ differential

VARS = ("A", "B", "C")
ROW_LOCAL = ["a > {k}", "a <= {k}", "a < PREV(a)", "x > 0.2", "s >= 'c'", "TRUE",
             "a IS NULL", "NEXT(a) > a"]
STATEFUL = ["COUNT({v}.*) < {k}", "a > LAST({w}.a)", "SUM({v}.a) <= {k}"]
COLS = ["a", "x", "s", "d", "t", "i", "big"]
NUMS = ["a", "x", "i", "big"]
MEASURES = [
    "MATCH_NUMBER()", "CLASSIFIER()", "CLASSIFIER({v})", "{v}.{c}", "{c}",
    "{sem}FIRST({v}.{c}, {k})", "{sem}LAST({c}, {k})", "{sem}LAST({v}.{c})",
    "PREV({v}.{c}, {k})", "NEXT({c})", "PREV({sem}LAST({v}.{c}, {k}), {k2})",
    "NEXT({sem}FIRST({c}), {k2})", "PREV(CLASSIFIER())", "NEXT(CLASSIFIER({v}), {k})",
    "{sem}LAST(CLASSIFIER({v}))", "{sem}COUNT(*)", "{sem}COUNT({v}.*)", "{sem}COUNT({v}.{c})",
    "{sem}SUM({v}.{n})", "{sem}AVG({n})", "{sem}MIN({v}.{c})", "{sem}MAX({c})",
    "{sem}SUM({n})", "{sem}MIN({n})",
    # expressions over the above (measure_exprs.py), errors and NULLs included
    "LAST({v}.a) - FIRST(a)", "{sem}LAST({v}.{n}) * 2 + {k}", "FIRST({n}) / (a - a)",
    "{sem}SUM({n}) / {sem}COUNT(*)", "big * 2", "CASE WHEN {sem}COUNT(*) > {k} THEN 'long' "
    "WHEN CLASSIFIER() = '{v}' THEN CLASSIFIER() END", "COALESCE(LAST({v}.{n}), -1)",
    "{sem}MIN({c}) = {sem}MAX({c})", "{c} IS NULL OR {sem}COUNT({v}.{c}) BETWEEN 1 AND {k}",
    "CAST({sem}LAST({c}) AS VARCHAR) || '/' || CAST(MATCH_NUMBER() AS VARCHAR)",
    "ABS(FIRST(x) - LAST(x))", "ROUND({sem}AVG({n}), 1)", "d + INTERVAL '1' DAY",
    "LAST(t) - FIRST(t)", "(LAST(t) - FIRST(t)) * 2", "LAST(d) - FIRST(d)",
    "d + INTERVAL '2' MONTH", "CAST(FIRST({n}) AS DOUBLE) / 3", "NOT ({sem}MAX(a) IN (1, {k}))",
    "MATCH_NUMBER() % 2 = 0 AND {c} IS NOT NULL", "-{sem}SUM({v}.i)",
    # aggregates over an expression of the row (measure_exprs.row_values)
    "{sem}MAX({v}.a + 1)", "{sem}SUM({v}.{n} * i)", "{sem}AVG(x - a)",
    "{sem}MIN(CASE WHEN a > {k} THEN s END)", "{sem}COUNT({v}.a / a)", "{sem}SUM(big + big)",
    "{sem}SUM({v}.x * {v}.a) / {sem}SUM({v}.a)",
    # fall back to the interpreter
    "{sem}COUNT(DISTINCT {v}.{c})", "{sem}SUM(CASE WHEN CLASSIFIER() = 'A' THEN a END)",
    "{sem}SUM(a) OVER (ORDER BY ts)", "CURRENT_DATE - d",
]


def patterns():
    leaf = st.sampled_from(VARS).map(lambda v: A.PVar(name=v)) | st.just(A.PEmpty())

    def extend(children):
        quant = st.tuples(children, st.sampled_from([(0, None), (1, None), (0, 1), (1, 3)]),
                          st.booleans()).map(
            lambda t: A.PQuant(body=t[0], min=t[1][0], max=t[1][1], greedy=t[2]))
        concat = st.lists(children, min_size=2, max_size=3).map(
            lambda xs: A.PConcat(items=tuple(xs)))
        alt = st.lists(children, min_size=2, max_size=3).map(lambda xs: A.PAlt(items=tuple(xs)))
        exclude = children.map(lambda c: A.PExclude(body=c))
        return quant | concat | alt | exclude
    return st.recursive(leaf, extend, max_leaves=5)


@st.composite
def queries(draw):
    pattern = draw(patterns())
    text = pattern.to_sql()
    used = [v for v in VARS if v in text]
    assume(used)
    defines = []
    for v in used:
        if draw(st.integers(0, 4)):
            t = draw(st.sampled_from(ROW_LOCAL + STATEFUL))
            cond = t.format(v=v, w=draw(st.sampled_from(used)), k=draw(st.integers(0, 3)))
            defines.append(f"{v} AS {cond}")
    names = list(used)
    subset = ""
    if len(used) >= 2 and draw(st.booleans()):
        subset = f" SUBSET U = ({', '.join(used[:2])})"
        names.append("U")
    measures_ = []
    for i in range(draw(st.integers(1, 4))):
        m = draw(st.sampled_from(MEASURES)).format(
            v=draw(st.sampled_from(names)), c=draw(st.sampled_from(COLS)),
            n=draw(st.sampled_from(NUMS)), k=draw(st.integers(0, 2)),
            k2=draw(st.integers(0, 2)), sem=draw(st.sampled_from(["", "RUNNING ", "FINAL "])))
        measures_.append(f"{m} AS m{i}")
    rows = draw(st.sampled_from(["ONE ROW PER MATCH", "ALL ROWS PER MATCH",
                                 "ALL ROWS PER MATCH SHOW EMPTY MATCHES",
                                 "ALL ROWS PER MATCH OMIT EMPTY MATCHES",
                                 "ALL ROWS PER MATCH WITH UNMATCHED ROWS"]))
    skip = draw(st.sampled_from(["PAST LAST ROW", "TO NEXT ROW", "TO NEXT ROW"] +
                                [f"TO LAST {v}" for v in used]))
    return (f"PARTITION BY p ORDER BY ts MEASURES {', '.join(measures_)} {rows} "
            f"AFTER MATCH SKIP {skip} PATTERN ({text}){subset}"
            + (f" DEFINE {', '.join(defines)}" if defines else ""))


@st.composite
def tables(draw):
    n = draw(st.integers(0, 10))

    def col(values, nulls=True):
        return [draw(st.none() | values) if nulls else draw(values) for _ in range(n)]
    table = pa.table({
        "p": pa.array(col(st.integers(0, 1), nulls=False), pa.int64()),
        "ts": pa.array(range(n), pa.int64()),
        "a": pa.array(col(st.integers(0, 3)), pa.int64()),
        "x": pa.array(col(FLOATS.filter(lambda f: f != math.inf)), pa.float64()),
        "s": pa.array(col(st.sampled_from(["a", "b", "c", "é", ""]))),
        "d": pa.array(col(st.dates(dt.date(2000, 1, 1), dt.date(2000, 1, 9)))),
        "t": pa.array(col(st.integers(0, 5)), pa.timestamp("us")),
        "i": pa.array(col(st.integers(-128, 127)), pa.int8()),
        "big": pa.array(col(st.sampled_from([2**62, -2**62, 3, 2**63 - 1])), pa.int64()),
    })
    # chunked tables: gathers and segmented aggregates run chunk by chunk,
    # matches spanning chunk borders on their own
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=3)))
    if cuts:
        table = pa.concat_tables([table.slice(a, b - a)
                                  for a, b in zip([0] + cuts, cuts + [n])])
    return table


def assert_assembly_is_the_interpreters(query, data, found, clause: str) -> None:
    """The vectorised assembly of ``found`` gives the interpreter's table,
    or raises its error."""
    want, want_err = _outcome(lambda: measures.assemble(query, data, found, vectorised=False))
    got, got_err = _outcome(lambda: measures.assemble(query, data,
                                                      MatchArrays.from_matches(found)))
    assert got_err == want_err, clause
    if want is not None:
        assert_same(got, want)


def _outcome(fn):
    try:
        return fn(), None
    except DataError as exc:
        return None, (type(exc), str(exc))


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(queries(), tables())
def test_vectorised_assembly_matches_the_interpreter(clause, table):
    try:
        query = analyze(parse_clause(clause), table.schema)
    except GpuMrError:
        assume(False)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    try:
        found = ReferenceEngine().find_matches(query, data)
    except MatchRuntimeError:
        assume(False)
    assert_assembly_is_the_interpreters(query, data, found, clause)


@pytest.mark.parametrize("pattern,first,last", [
    ("A B+ C+", {"A"}, {"C"}),
    ("A? B C*", {"A", "B"}, {"B", "C"}),
    ("(A | B) C? {- D -}", {"A", "B"}, {"D"}),
    ("^ A* $", {"A"}, {"A"}),
    ("PERMUTE(A, B) C*", {"A", "B"}, {"A", "B", "C"}),
])
def test_edge_variables_and_first_last_at_the_edges(pattern, first, last):
    """The variables that can take a match's first and last rows; FIRST(v.x)
    / LAST(v.x) read the match's edge rows only where every match's edge
    row is v's, and agree with the interpreter either way."""
    from gpu_mr.pattern.nfa import compile_nfa, edge_variables
    names = ("A", "B", "C", "D")
    query = analyze(parse_clause(f"MEASURES COUNT(*) AS n PATTERN ({pattern}) "
                                 "DEFINE A AS TRUE"), pa.schema([("x", pa.int64())]))
    got = edge_variables(compile_nfa(query.pattern, query.primary_vars))
    as_names = [{query.primary_vars[i] for i in ids} for ids in got]
    assert as_names == [first, last]
    rng = np.random.default_rng(3)
    t = pa.table({"ts": np.arange(60), "x": rng.integers(0, 4, 60)})
    used = sorted(set(query.primary_vars) & set(names))
    defines = ", ".join(f"{v} AS x % 4 <> {i}" for i, v in enumerate(used))
    measures_ = ", ".join(f"FIRST({v}.ts) AS f{v}, LAST({v}.ts) AS l{v}" for v in used)
    both(f"ORDER BY ts MEASURES {measures_} ONE ROW PER MATCH PATTERN ({pattern}) "
         f"DEFINE {defines}", t)


def test_nan_only_where_counted_falls_back(monkeypatch):
    """A NaN among the values an aggregate counts sends it to the interpreter
    (the kernels report it); a NaN elsewhere in the column does not matter."""
    for jit in (0, 10**9):
        monkeypatch.setattr(segmented, "JIT_MIN_ELEMENTS", jit)
        monkeypatch.setattr(segmented, "warm", False)   # 10**9: the plain bodies
        monkeypatch.setattr(segmented, "plain_elements", 0)
        t = pa.table({"ts": range(8),
                      "x": [5.0, NAN_, 4.0, 3.0, 6.0, 2.0, NAN_, 7.0]})
        both("ORDER BY ts MEASURES MIN(B.x) AS lo, MAX(C.x) AS hi, SUM(B.x) AS s, "
             "AVG(C.x) AS a, MIN(x) AS lo_all, SUM(x) AS s_all ONE ROW PER MATCH "
             "PATTERN (A B C) DEFINE B AS x < 5 OR x IS NULL, C AS x > 5 OR x IS NULL", t)
        both("ORDER BY ts MEASURES MIN(B.x) AS lo, RUNNING SUM(B.x) AS s ALL ROWS PER MATCH "
             "PATTERN (A B+ C) DEFINE B AS x < 5, C AS x > 5", t)


NAN_ = float("nan")


@pytest.mark.parametrize("key", [
    pa.array(["b", "b", None, None, "", "", "ä", "ä"] * 3),
    pa.array(["b", "b", None, None, "", "", "ä", "ä"] * 3, pa.large_string()),
    pa.array(["b", "b", "a", "a", "c", "c", "d", "d"] * 3).dictionary_encode(),
    pa.array([3, 3, None, None, -1, -1, 7, 7] * 3, pa.int16()),
    pa.array([0.0, -0.0, None, None, 1.5, 1.5, -0.0, 0.0] * 3),
    pa.array([dt.date(2020, 1, d) for d in (1, 1, 2, 2, 3, 3, 4, 4)] * 3),
])
@pytest.mark.parametrize("rows", ["ONE ROW PER MATCH", "ALL ROWS PER MATCH WITH UNMATCHED ROWS"])
def test_output_columns_are_the_rows_values(key, rows, monkeypatch):
    """Partition columns (read once per partition in ONE ROW) and other input
    columns (gathered by kernels) in chunks: each output row shows its source
    row's values, as an Arrow take would."""
    monkeypatch.setattr(measures, "G_MIN_ROWS", 0)
    n = len(key)
    t = pa.table({"k": key, "ts": np.arange(n), "v": pa.array(np.arange(n) % 5, pa.int32()),
                  "w": pa.array([None if i % 4 == 0 else i * 0.5 for i in range(n)])})
    t = pa.concat_tables([t.slice(0, 5), t.slice(5, 9), t.slice(14)])
    query = analyze(parse_clause(
        "PARTITION BY k ORDER BY ts MEASURES COUNT(*) AS c "
        f"{rows} PATTERN (A B*) DEFINE B AS v > PREV(v)"), t.schema)
    data = sort_for_matching(t, query.partition_columns, query.order_keys)
    ma = MatchArrays.from_matches(ReferenceEngine().find_matches(query, data))
    out = measures.assemble(query, data, ma)
    source = measures.output_rows(query, data, ma).source
    for name in out.column_names:
        if name in t.column_names:
            want = data.table.column(name).take(pa.array(source, pa.int64()))
            assert out.column(name).to_pylist() == want.to_pylist(), name
            assert out.column(name).type == t.schema.field(name).type


def test_decimal_sums_are_vectorised(monkeypatch):
    table = pa.table({"ts": [0, 1, 2, 3], "m": pa.array(
        [Decimal("1.25"), None, Decimal("-3.50"), Decimal("10.00")], pa.decimal128(9, 2))})
    clause = ("ORDER BY ts MEASURES SUM(m) AS s, SUM(B.m) AS sb ALL ROWS PER MATCH "
              "PATTERN (A B*) DEFINE B AS TRUE")
    want = run(clause, table, vectorised=False)

    def no_interpreter(*args, **kwargs):
        raise AssertionError("the interpreter ran")
    monkeypatch.setattr(measures, "_interpret", no_interpreter)
    assert_same(run(clause, table, arrays=True), want)


def test_expression_measures_are_vectorised(monkeypatch):
    # An expression over vectorised leaves must not send every output row
    # through the interpreter (it cost about 100x the query's other measures).
    clauses = [FALLS_RISES.format(m="LAST(C.price) - FIRST(A.price) AS m",
                                  rows="ONE ROW PER MATCH", skip="PAST LAST ROW"),
               FALLS_RISES.format(m="SUM(B.price * B.ts) / SUM(B.price) AS vwap, "
                                    "MAX(price - ts) AS jump, AVG(x * 2) AS ax, "
                                    "MIN(CASE WHEN price > 5 THEN s END) AS ms",
                                  rows="ALL ROWS PER MATCH", skip="TO NEXT ROW"),
               "PARTITION BY p ORDER BY ts MEASURES CASE WHEN COUNT(*) > 3 THEN CLASSIFIER() "
               "|| '!' END AS c, ABS(AVG(x) * 2) AS r, LAST(ts) - FIRST(ts) AS span "
               "ALL ROWS PER MATCH WITH UNMATCHED ROWS PATTERN (A B+) "
               "DEFINE B AS price < PREV(price)"]
    wants = [run(c, TICKS, vectorised=False) for c in clauses]

    def no_interpreter(*args, **kwargs):
        raise AssertionError("the interpreter ran")
    monkeypatch.setattr(measures, "_interpret", no_interpreter)
    for clause, want in zip(clauses, wants):
        got = run(clause, TICKS, arrays=True)
        assert_same(got, want)
        assert got.num_rows > 1


def test_expression_measure_errors_are_the_interpreters():
    clause = ("ORDER BY ts MEASURES FIRST(price) / (COUNT(*) - COUNT(*)) AS q "
              "PATTERN (A B+) DEFINE B AS price < PREV(price)")
    with pytest.raises(DataError) as want:
        run(clause, TICKS, vectorised=False)
    with pytest.raises(DataError) as got:
        run(clause, TICKS)
    assert str(got.value) == str(want.value)


def test_nan_from_zero_divided_by_zero_is_the_interpreters():
    # was: the vectorised 0.0 / 0 gave the FPU's NaN (sign bit set), the
    # interpreter math.nan; found by the differential test above
    table = pa.table({"ts": [0, 1], "x": [0.0, float("nan")], "a": [0, 0]})
    both("ORDER BY ts MEASURES SUM(x * a) / SUM(a) AS q, MAX(x) / 0 AS r, "
         "MAX(x) % 0 AS s ALL ROWS PER MATCH PATTERN (A+) DEFINE A AS TRUE", table)


@pytest.mark.parametrize("measure,vectorised", [
    ("LAST(C.price) - FIRST(A.price)", True), ("SUM(B.price * B.ts) / SUM(B.ts)", True),
    ("CASE WHEN COUNT(*) > 2 THEN CLASSIFIER() END", True), ("MATCH_NUMBER()", True),
    ("COUNT(DISTINCT price)", False), ("ROUND(AVG(x), 2)", False), ("CURRENT_DATE", False),
])
def test_vectorised_reason_names_what_explain_shows(measure, vectorised):
    query = analyze(parse_clause(FALLS_RISES.format(m=f"{measure} AS m", rows="",
                                                    skip="PAST LAST ROW")), TICKS.schema)
    reason = measures.vectorised_reason(query, query.measures[0].expr)
    assert (reason is None) == vectorised, reason
    if vectorised:      # and the vectorised form does run: no interpreter call
        data = sort_for_matching(TICKS, query.partition_columns, query.order_keys)
        ma = MatchArrays.from_matches(ReferenceEngine().find_matches(query, data))
        vec = measures._Vectors(query, data, ma, measures.output_rows(query, data, ma), {})
        assert vec.measure(query.measures[0]) is not None


DECIMAL_MEASURES = [
    "LAST(m) - FIRST(m)", "FIRST({v}.m) * {k}", "-LAST({v}.m)", "LAST(m) + 1.5",
    "CASE WHEN LAST(m) > 0 THEN LAST(m) ELSE FIRST(m) END", "ABS(LAST(m) - PREV(LAST(m)))",
    "COALESCE(LAST({v}.m), 0)", "LAST(m) * LAST(m)", "CAST(LAST(m) AS DECIMAL(12, 4))",
    "LAST(m) / 4", "FIRST(m) + LAST(w)", "MAX(m) - MIN(m)", "SUM(m)", "SUM({v}.w)",
    "SUM(m) - SUM({v}.m)", "SUM(m * 2)",
]


@st.composite
def decimal_tables(draw):
    n = draw(st.integers(0, 12))
    cents = st.one_of(st.none(), st.integers(-10**6, 10**6), st.sampled_from([10**15, -10**15]))
    return pa.table({
        "p": pa.array([draw(st.integers(0, 1)) for _ in range(n)], pa.int64()),
        "ts": pa.array(range(n), pa.int64()),
        "m": pa.array([None if c is None else Decimal(c).scaleb(-2) for c in
                       (draw(cents) for _ in range(n))], pa.decimal128(18, 2)),
        "w": pa.array([None if c is None else Decimal(c).scaleb(-4) for c in
                       (draw(cents) for _ in range(n))], pa.decimal128(20, 4)),
    })


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.sampled_from(DECIMAL_MEASURES), min_size=1, max_size=3),
       st.sampled_from(["A", "B"]), st.integers(0, 3),
       st.sampled_from(["ONE ROW PER MATCH", "ALL ROWS PER MATCH"]), decimal_tables())
def test_decimal_measure_expressions_match_the_interpreter(forms, var, k, rows, table):
    ms = ", ".join(f.format(v=var, k=k) + f" AS x{i}" for i, f in enumerate(forms))
    clause = (f"PARTITION BY p ORDER BY ts MEASURES {ms} {rows} "
              "PATTERN (A B*) DEFINE B AS m IS NULL OR m < 100")
    query = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    found = ReferenceEngine().find_matches(query, data)
    assert_assembly_is_the_interpreters(query, data, found, clause)


@pytest.mark.parametrize("compiled", [False, True])
def test_case_choosing_string_constants_per_match_equals_the_reference(compiled, monkeypatch):
    """A CASE among string constants (and NULL, and a computed string) is
    built from an index into the constants (masks.py ``_choose_strings``,
    strings.py ``repeat_strings``: its kernel compiled or its plain body)."""
    import gpu_mr
    from gpu_mr import strings
    from gpu_mr.kernels import gather
    monkeypatch.setattr(strings, "MIN_ROWS", 0 if compiled else 10**9)
    monkeypatch.setattr(gather, "warm", compiled)     # not loaded yet: the plain bodies
    monkeypatch.setattr(gather, "plain_values", 0)
    rng = np.random.default_rng(5)
    n = 4000
    table = pa.table({"ts": np.arange(n),
                      "price": np.round(100 + np.cumsum(rng.normal(size=n))),
                      "v": pa.array(rng.integers(0, 5, n), mask=rng.random(n) < 0.1)})
    clause = """ORDER BY ts
        MEASURES CASE WHEN COUNT(*) > 4 THEN 'long' WHEN COUNT(*) = 4 THEN NULL
                      ELSE 'short' END AS kind,
                 CASE WHEN MAX(v) > 3 THEN 'big' END AS big,
                 CASE MIN(v) WHEN 0 THEN 'zero' WHEN 1 THEN CAST(COUNT(*) AS VARCHAR)
                      ELSE 'ß' END AS low
        ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
        PATTERN (S D+ U+) DEFINE D AS price < PREV(price), U AS price > PREV(price)"""
    got = gpu_mr.match_recognize(table, clause, engine="cpu")
    assert set(got.column("kind").to_pylist()) == {"long", "short", None}
    assert got.equals(gpu_mr.match_recognize(table, clause, engine="reference"))


def test_rows_valid_is_remembered_per_array():
    """measures._rows_valid: the validity of gathered values where rows are
    -1, worked out once per array of rows (by identity) across columns."""
    known: dict = {}
    rows = np.array([3, -1, 4])
    assert measures._rows_valid(rows, known).tolist() == [1, 0, 1]
    assert known[id(rows)][1] is True
    fine = np.array([0, 1, 2])
    assert measures._rows_valid(fine, known) is None
    # an answer is trusted only for the very array it was worked out for
    known[id(fine)] = (rows, True)
    assert measures._rows_valid(fine, known) is None
    assert measures._rows_valid(rows, None).tolist() == [1, 0, 1]


@pytest.mark.parametrize("engine", ["reference", "cpu"])
@pytest.mark.parametrize("rows", ["ONE ROW PER MATCH", "ALL ROWS PER MATCH"])
def test_a_dictionary_of_numbers_partition_key_keeps_its_type(engine, rows):
    # a pandas categorical of integers: the key, read once per partition,
    # came back as int64 and Arrow cannot cast int64 to a dictionary
    import gpu_mr
    keys = pa.array([1, 1, 1, 2, 2, 2, None]).dictionary_encode().cast(
        pa.dictionary(pa.int8(), pa.int64()))
    t = pa.table({"k": keys, "ts": [1, 2, 3, 1, 2, 3, 1],
                  "price": [3.0, 2.0, 4.0, 5.0, 4.0, 6.0, 1.0]})
    got = gpu_mr.match_recognize(
        t, f"PARTITION BY k ORDER BY ts MEASURES FIRST(A.ts) AS s {rows} "
           "PATTERN (A B+ C) DEFINE B AS price < PREV(price), C AS price > PREV(price)",
        engine=engine)
    assert got.schema.field("k").type == keys.type
    assert got.column("k").to_pylist() == ([1, 2] if rows.startswith("ONE") else [1] * 3 + [2] * 3)


@pytest.mark.parametrize("engine", ["reference", "cpu"])
@pytest.mark.parametrize("measure, column, says", [
    ("LAST(A.ts) + INTERVAL '300' YEAR", pa.array([1, 2], pa.timestamp("ns")),
     "do not fit TIMESTAMP (64 bits in the column's unit; in nanoseconds, the years 1677"),
    ("LAST(A.ts)", pa.array([1, 10**12], pa.duration("s")),
     "do not fit INTERVAL DAY TO SECOND (64-bit nanoseconds: within about 292 years"),
])
def test_measure_past_64_bits_says_what_fits(engine, measure, column, says):
    # the message was Python's own: "int too large to convert to C long"
    import gpu_mr
    t = pa.table({"id": [1, 2], "ts": column})
    with pytest.raises(DataError, match=re.escape(says)) as ei:
        gpu_mr.match_recognize(t, f"ORDER BY id MEASURES {measure} AS v ONE ROW PER MATCH "
                                  "PATTERN (A+) DEFINE A AS true", engine=engine)
    assert ei.value.column_name == "v"
