"""Tests for gpu_mr.frames: conversions in and out, matching-order sort,
partition offsets. The sort is checked against a naive Python sort (stable by
construction) on hand-picked and random inputs."""

from __future__ import annotations

import copy
import datetime as dt
import functools
import math
import pickle
from decimal import Decimal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings, strategies as st

from gpu_mr.errors import DataError
import gpu_mr
from gpu_mr import frames
from gpu_mr.frames import SortedInput, from_arrow, sort_for_matching, to_arrow

NAN = float("nan")


# ---------------------------------------------------------------- naive oracle

def _cmp_values(a, b, ascending, nulls_first):
    """SQL comparison of two Python values: NULL placed per nulls_first,
    NaN above every number."""
    if a is None or b is None:
        if a is None and b is None:
            return 0
        a_first = (a is None) == nulls_first      # NULL placement ignores ASC/DESC
        return -1 if a_first else 1
    a_nan = isinstance(a, float) and math.isnan(a)
    b_nan = isinstance(b, float) and math.isnan(b)
    if a_nan or b_nan:
        c = 0 if a_nan and b_nan else (1 if a_nan else -1)
    else:
        c = (a > b) - (a < b)
    return c if ascending else -c


def naive_order(rows: list[dict], partition, order) -> list[int]:
    keys = [(p, True, False) for p in partition] + list(order)

    def cmp(i, j):
        for name, asc, nf in keys:
            c = _cmp_values(rows[i][name], rows[j][name], asc, nf)
            if c:
                return c
        return 0
    return sorted(range(len(rows)), key=functools.cmp_to_key(cmp))


def naive_offsets(rows, order, partition) -> list[int]:
    def key(i):
        return tuple("NaN" if isinstance(v, float) and math.isnan(v) else v
                     for v in (rows[i][p] for p in partition))
    if not order:
        return [0]
    out = [0]
    for pos in range(1, len(order)):
        if key(order[pos]) != key(order[pos - 1]):
            out.append(pos)
    return out + [len(order)]


def assert_same(a: SortedInput, b: SortedInput) -> None:
    assert a.was_sorted == b.was_sorted
    assert a.partition_offsets.dtype == b.partition_offsets.dtype == np.int64
    assert a.partition_offsets.tolist() == b.partition_offsets.tolist()
    assert a.source_rows.dtype == b.source_rows.dtype == np.int64
    assert a.source_rows.tolist() == b.source_rows.tolist()
    assert a.table.schema == b.table.schema
    assert _nan_equal(a.table.to_pylist(), b.table.to_pylist())
    # was_sorted: the input's rows as they were (key columns maybe combined
    # into one chunk), compared just above


def check(table: pa.Table, partition, order) -> SortedInput:
    s = sort_for_matching(table, partition, order)
    # the compiled passes (where numba is installed) and the Arrow ones agree
    for fast in (True, False):
        assert_same(frames._sort_for_matching(table, partition, order, fast), s)
    rows = table.to_pylist()
    expected = naive_order(rows, partition, order)
    assert s.source_rows.dtype == np.int64
    assert s.partition_offsets.dtype == np.int64
    assert s.source_rows.tolist() == expected
    assert s.partition_offsets.tolist() == naive_offsets(rows, expected, partition)
    assert s.table.to_pylist() == [rows[i] for i in expected] or _nan_equal(
        s.table.to_pylist(), [rows[i] for i in expected])
    assert s.was_sorted == (expected == list(range(len(rows))))
    return s


def _nan_equal(a, b):
    def norm(v):
        return "NaN" if isinstance(v, float) and math.isnan(v) else v
    return [{k: norm(v) for k, v in r.items()} for r in a] == \
        [{k: norm(v) for k, v in r.items()} for r in b]


# --------------------------------------------------------------------- sorting

def test_stable_ties_keep_input_order():
    n = 5000
    rng = np.random.default_rng(1)
    t = pa.table({"k": rng.integers(0, 3, n), "ts": rng.integers(0, 5, n),
                  "row": np.arange(n)})
    s = check(t, ["k"], [("ts", True, False)])
    # inside each (k, ts) group, row ids ascend
    k = s.table.column("k").to_numpy()
    ts = s.table.column("ts").to_numpy()
    row = s.table.column("row").to_numpy()
    same = (k[1:] == k[:-1]) & (ts[1:] == ts[:-1])
    assert np.all(row[1:][same] > row[:-1][same])


def test_stable_on_desc_and_strings():
    t = pa.table({"s": ["b", "a", "b", "a", "c", "b"], "row": range(6)})
    s = check(t, [], [("s", False, False)])
    assert s.table.column("row").to_pylist() == [4, 0, 2, 5, 1, 3]


@pytest.mark.parametrize("ascending", [True, False])
@pytest.mark.parametrize("nulls_first", [True, False])
def test_null_and_nan_placement(ascending, nulls_first):
    vals = [1.0, NAN, None, -1.0, NAN, 0.0, None, -0.0, 2.5]
    t = pa.table({"x": pa.array(vals, pa.float64()), "row": range(len(vals))})
    s = check(t, [], [("x", ascending, nulls_first)])
    got = s.table.column("x").to_pylist()
    kinds = ["null" if v is None else "nan" if math.isnan(v) else "num" for v in got]
    nums = [v for v in got if v is not None and not math.isnan(v)]
    assert nums == sorted(nums, reverse=not ascending)
    order = ["num", "nan"] if ascending else ["nan", "num"]
    order = (["null"] + order) if nulls_first else (order + ["null"])
    collapsed = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
    assert collapsed == order


def test_default_asc_nulls_last_gives_numbers_nan_null():
    t = pa.table({"x": pa.array([None, NAN, 3.0, 1.0], pa.float32())})
    s = sort_for_matching(t, [], [("x", True, False)])
    got = s.table.column("x").to_pylist()
    assert got[:2] == [1.0, 3.0] and math.isnan(got[2]) and got[3] is None


def test_per_key_null_placement_differs():
    t = pa.table({"a": [1, None, 1, None, 2],
                  "b": [None, 1, 2, None, None], "row": range(5)})
    check(t, [], [("a", True, True), ("b", False, False)])
    check(t, [], [("a", False, False), ("b", True, True)])
    s = sort_for_matching(t, [], [("a", True, True), ("b", True, False)])
    assert s.table.column("row").to_pylist() == [1, 3, 2, 0, 4]


def test_multi_key_with_desc():
    t = pa.table({"p": ["x", "y", "x", "y", "x"], "a": [1, 1, 2, 2, 1],
                  "b": [3.0, 1.0, 2.0, 5.0, 4.0]})
    s = check(t, ["p"], [("a", False, False), ("b", True, False)])
    assert s.table.column("b").to_pylist() == [2.0, 3.0, 4.0, 5.0, 1.0]
    assert s.partition_offsets.tolist() == [0, 3, 5]


def test_partition_offsets_with_null_keys():
    t = pa.table({"p": pa.array([None, "b", None, "a", "b", None]),
                  "q": pa.array([1, 1, None, 1, 1, None]),
                  "ts": range(6)})
    s = check(t, ["p"], [("ts", True, False)])
    # partitions a, b, NULL (NULLs last, and together)
    assert s.partition_offsets.tolist() == [0, 1, 3, 6]
    s = check(t, ["p", "q"], [("ts", True, False)])
    assert s.partition_offsets.tolist() == [0, 1, 3, 4, 6]


def test_partition_offsets_nan_key_is_one_partition():
    t = pa.table({"p": pa.array([NAN, 1.0, None, NAN, 1.0]), "ts": range(5)})
    s = check(t, ["p"], [("ts", True, False)])
    assert s.partition_offsets.tolist() == [0, 2, 4, 5]


def test_no_keys_and_empty_table():
    t = pa.table({"x": [3, 1, 2]})
    s = sort_for_matching(t, [], [])
    assert s.was_sorted and s.partition_offsets.tolist() == [0, 3]
    assert s.source_rows.tolist() == [0, 1, 2]
    e = pa.table({"x": pa.array([], pa.int64())})
    s = sort_for_matching(e, ["x"], [("x", True, False)])
    assert s.partition_offsets.tolist() == [0]
    assert s.source_rows.tolist() == [] and s.table.num_rows == 0
    assert s.num_partitions == 0


def test_single_row_and_all_null_key():
    t = pa.table({"x": pa.array([None, None, None], pa.int64()), "y": [3, 1, 2]})
    s = check(t, ["x"], [("y", True, False)])
    assert s.partition_offsets.tolist() == [0, 3]
    s = sort_for_matching(t.slice(0, 1), ["x"], [("y", True, False)])
    assert s.was_sorted and s.partition_offsets.tolist() == [0, 1]


def test_already_sorted_is_detected_and_not_copied():
    n = 10_000
    t = pa.table({"p": np.repeat(np.arange(10), n // 10),
                  "ts": np.tile(np.arange(n // 10), 10), "v": np.arange(n)})
    s = sort_for_matching(t, ["p"], [("ts", True, False)])
    assert s.was_sorted
    assert s.table is t
    assert s.source_rows.tolist() == list(range(n))
    assert s.partition_offsets.tolist() == list(range(0, n + 1, n // 10))
    # one pair out of order at the end
    ts = np.tile(np.arange(n // 10), 10)
    ts[-2], ts[-1] = ts[-1], ts[-2]
    s = sort_for_matching(t.set_column(1, "ts", pa.array(ts)), ["p"],
                          [("ts", True, False)])
    assert not s.was_sorted
    assert s.source_rows[-2:].tolist() == [n - 1, n - 2]


def test_sorted_with_ties_nulls_and_desc_is_detected():
    t = pa.table({"a": pa.array([None, 3, 3, 1, 1, NAN], pa.float64())})
    assert not sort_for_matching(t, [], [("a", False, True)]).was_sorted
    t = pa.table({"a": pa.array([None, NAN, 3, 3, 1, 1], pa.float64())})
    assert sort_for_matching(t, [], [("a", False, True)]).was_sorted
    assert not sort_for_matching(t, [], [("a", False, False)]).was_sorted


def test_chunked_columns():
    t = pa.Table.from_batches([
        pa.record_batch({"p": ["b", "a"], "ts": [2, 1]}),
        pa.record_batch({"p": ["a", "b"], "ts": [0, 1]}),
    ])
    assert t.column("p").num_chunks == 2
    s = check(t, ["p"], [("ts", True, False)])
    assert s.partition_offsets.tolist() == [0, 2, 4]


def test_record_batch_input():
    b = pa.record_batch({"ts": [2, 1]})
    s = sort_for_matching(b, [], [("ts", True, False)])
    assert s.table.column("ts").to_pylist() == [1, 2]


def test_dictionary_keys_sort_by_value():
    # dictionary order (z, a, m) differs from value order
    d = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 1, None, 0], pa.int32()),
                                       pa.array(["z", "a", "m"]))
    t = pa.table({"sym": d, "ts": [5, 4, 3, 2, 1, 0]})
    s = sort_for_matching(t, ["sym"], [("ts", True, False)])
    assert s.table.column("sym").to_pylist() == ["a", "a", "m", "z", "z", None]
    assert s.partition_offsets.tolist() == [0, 2, 3, 5, 6]
    assert pa.types.is_dictionary(s.table.column("sym").type)   # columns untouched
    s = sort_for_matching(t, [], [("sym", False, True)])
    assert s.table.column("sym").to_pylist() == [None, "z", "z", "m", "a", "a"]


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("tz", [None, "UTC", "America/New_York"])
def test_timestamp_keys(unit, tz):
    base = dt.datetime(2024, 3, 10, 6, 30)
    vals = [base + dt.timedelta(hours=h) for h in (3, 1, 2)] + [None]
    t = pa.table({"ts": pa.array(vals, pa.timestamp(unit, tz=tz))})
    s = sort_for_matching(t, [], [("ts", True, True)])
    assert s.source_rows.tolist() == [3, 1, 2, 0]
    assert s.table.column("ts").type == pa.timestamp(unit, tz=tz)


@pytest.mark.parametrize("typ, values", [
    (pa.int8(), [3, -1, None, 2]), (pa.int16(), [3, -1, None, 2]),
    (pa.int32(), [3, -1, None, 2]), (pa.int64(), [3, -1, None, 2]),
    (pa.uint8(), [3, 1, None, 2]), (pa.uint16(), [3, 1, None, 2]),
    (pa.uint32(), [3, 1, None, 2]), (pa.uint64(), [2**63 + 5, 1, None, 2**63]),
    (pa.float32(), [3.5, -1.0, None, NAN]), (pa.float64(), [3.5, -1.0, None, NAN]),
    (pa.bool_(), [True, False, None, True]),
    (pa.string(), ["b", "a", None, "ä"]), (pa.large_string(), ["b", "a", None, "B"]),
    (pa.date32(), [dt.date(2020, 1, 3), dt.date(1969, 1, 1), None, dt.date(2020, 1, 1)]),
    (pa.date64(), [dt.date(2020, 1, 3), dt.date(1969, 1, 1), None, dt.date(2020, 1, 1)]),
    (pa.decimal128(10, 2), [Decimal("3.10"), Decimal("-1.00"), None, Decimal("3.05")]),
])
def test_key_types(typ, values):
    t = pa.table({"k": pa.array(values, typ), "o": pa.array(values, typ),
                  "row": range(len(values))})
    for asc in (True, False):
        for nf in (True, False):
            check(t, ["k"], [("o", asc, nf)])
            check(t, [], [("k", asc, nf), ("row", False, False)])


def test_float16_keys():
    t = pa.table({"h": pa.array(np.array([2.0, 1.0, 3.0], dtype=np.float16))})
    s = sort_for_matching(t, [], [("h", True, False)])
    assert s.source_rows.tolist() == [1, 0, 2]


def test_unknown_column_is_data_error():
    t = pa.table({"x": [1]})
    with pytest.raises(DataError) as ei:
        sort_for_matching(t, ["nope"], [])
    assert ei.value.column_name == "nope" and "nope" in str(ei.value)
    with pytest.raises(DataError, match="zz"):
        sort_for_matching(t, [], [("zz", True, False)])


def test_unsortable_type_is_data_error():
    t = pa.table({"l": pa.array([[1], [2]])})
    with pytest.raises(DataError) as ei:
        sort_for_matching(t, [], [("l", True, False)])
    assert ei.value.code == "unsortable_key" and ei.value.column_name == "l"


_values = st.one_of(st.none(), st.integers(-3, 3).map(float), st.just(NAN),
                    st.just(-0.0))


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from(["a", "b", None]),
                               _values, st.integers(-2, 2) | st.none()),
                     max_size=30),
       asc1=st.booleans(), nf1=st.booleans(), asc2=st.booleans(), nf2=st.booleans(),
       use_partition=st.booleans())
def test_random_against_naive(rows, asc1, nf1, asc2, nf2, use_partition):
    t = pa.table({"p": pa.array([r[0] for r in rows], pa.string()),
                  "x": pa.array([r[1] for r in rows], pa.float64()),
                  "y": pa.array([r[2] for r in rows], pa.int64()),
                  "row": pa.array(range(len(rows)), pa.int64())})
    partition = ["p"] if use_partition else []
    check(t, partition, [("x", asc1, nf1), ("y", asc2, nf2)])


def test_sorted_input_source_rows_is_lazy_arange():
    t = pa.table({"x": [1, 2, 3]})
    s = sort_for_matching(t, [], [("x", True, False)])
    assert s.was_sorted and s._source_rows is None
    assert s.source_rows.dtype == np.int64 and s.source_rows.tolist() == [0, 1, 2]
    assert s.source_rows is s.source_rows
    given_rows = np.array([2, 0, 1], dtype=np.int64)
    assert SortedInput(t, np.array([0, 3]), given_rows, False).source_rows is given_rows
    with pytest.raises(AttributeError):
        s.was_sorted = False
    c = pickle.loads(pickle.dumps(s))
    assert c.was_sorted and c.source_rows.tolist() == [0, 1, 2]
    assert copy.copy(s).table is t


def test_single_chunk_key_is_not_copied():
    t = pa.table({"ts": np.arange(10)})
    assert frames._key_array(t, "ts") is not None
    assert (frames._key_array(t, "ts").buffers()[1].address
            == t.column("ts").chunk(0).buffers()[1].address)


# Keys the compiled pass takes: (arrow type, value strategy).
_FAST_KEYS = {
    "int64": (pa.int64(), st.integers(-3, 3)),
    "int8": (pa.int8(), st.integers(-3, 3)),
    "uint64": (pa.uint64(), st.sampled_from([0, 1, 2**63, 2**64 - 1])),
    "float64": (pa.float64(), st.sampled_from([-1.5, -0.0, 0.0, 2.0, NAN, math.inf])),
    "float32": (pa.float32(), st.sampled_from([-1.5, -0.0, 0.0, 2.0, NAN])),
    "bool": (pa.bool_(), st.booleans()),
    "ts": (pa.timestamp("ms", tz="UTC"), st.integers(-2, 2)),
    "date32": (pa.date32(), st.integers(-2, 2)),
    "string": (pa.string(), st.sampled_from(["a", "b", "ä", "", "ab"])),
    "large_string": (pa.large_string(), st.sampled_from(["", "a", "ä", "äb"])),
    "binary": (pa.binary(), st.sampled_from([b"", b"\x00", b"\xff", b"\x00\x01"])),
    "dict": (pa.dictionary(pa.int8(), pa.string()), st.sampled_from(["b", "a", "ä"])),
    "dict_int": (pa.dictionary(pa.int32(), pa.int64()), st.integers(-2, 2)),
}


@st.composite
def _fast_tables(draw):
    n_keys = draw(st.integers(1, 3))
    kinds = draw(st.lists(st.sampled_from(sorted(_FAST_KEYS)), min_size=n_keys,
                          max_size=n_keys))
    n = draw(st.integers(0, 40))
    cols = {}
    for i, kind in enumerate(kinds):
        typ, values = _FAST_KEYS[kind]
        if draw(st.booleans()):
            values = st.none() | values
        cols[f"k{i}"] = pa.array(draw(st.lists(values, min_size=n + 3, max_size=n + 3)),
                                 typ)
    cols["row"] = pa.array(range(n + 3), pa.int64())
    t = pa.table(cols)
    # slices (bit offsets in validity bitmaps and bools) and several chunks
    start = draw(st.integers(0, 3))
    t = t.slice(start, n)
    if draw(st.booleans()) and n > 1:
        cut = draw(st.integers(0, n))
        t = pa.concat_tables([t.slice(0, cut), t.slice(cut)])
    n_part = draw(st.integers(0, n_keys))
    partition = [f"k{i}" for i in range(n_part)]
    order = [(f"k{i}", draw(st.booleans()), draw(st.booleans()))
             for i in range(n_part, n_keys)]
    if draw(st.booleans()):
        order.append(("row", draw(st.booleans()), False))
    return t, partition, order


@settings(max_examples=300, deadline=None)
@given(case=_fast_tables(), presort=st.booleans())
def test_fast_path_matches_arrow_path(case, presort):
    """The compiled passes against the Arrow comparisons on random numeric
    keys (NULL, NaN, -0.0, ties, ASC/DESC, NULLS FIRST/LAST), unsorted and
    (mostly) sorted, the latter by sorting once first."""
    t, partition, order = case
    if presort:
        t = frames._sort_for_matching(t, partition, order, False).table
    a = frames._sort_for_matching(t, partition, order, True)
    b = frames._sort_for_matching(t, partition, order, False)
    assert_same(a, b)
    if presort:
        assert a.was_sorted
    if t.num_rows <= 12:
        check(t, partition, order)


def test_fast_path_on_large_sorted_table():
    n = 50_000
    rng = np.random.default_rng(3)
    p = np.sort(rng.integers(0, 7, n))
    x = rng.random(n)
    x[rng.integers(0, n, 50)] = np.nan
    t = pa.table({"p": p, "x": pa.array(x, mask=rng.random(n) < 0.01)})
    t = sort_for_matching(t, ["p"], [("x", False, True)]).table
    for fast in (None, True, False):
        s = frames._sort_for_matching(t, ["p"], [("x", False, True)], fast)
        assert s.was_sorted and s.table is t
        assert s.partition_offsets.tolist() == \
            [0] + (np.flatnonzero(np.diff(p)) + 1).tolist() + [n]
    swapped = t.take(np.r_[0:n - 2, n - 1, n - 2])
    a = frames._sort_for_matching(swapped, ["p"], [("x", False, True)], True)
    assert_same(a, frames._sort_for_matching(swapped, ["p"], [("x", False, True)], False))


@pytest.mark.parametrize("threads", [2, 5])
def test_string_and_number_check_in_pieces_across_chunks(threads, monkeypatch):
    # PARTITION BY a string ORDER BY a number: one compiled pass whose pieces
    # (forced small here) run across chunk borders; partitions that begin at
    # a border, inside a chunk and inside a piece; a pair out of order in a
    # late chunk, at a border and inside a chunk.
    from gpu_mr.kernels import threads as T
    monkeypatch.setattr(T, "MIN_WORK", 1)
    monkeypatch.setattr(T, "thread_count", lambda: threads)
    rng = np.random.default_rng(threads)
    n = 5_000
    bounds = [0, 700, 2000, 2001, 3000, n]                # chunks of 700, 1300, 1, 999, 2000
    cuts = np.unique(np.r_[700, 2000, rng.integers(1, n, 30)])
    key = np.repeat([f"s{i:03d}" for i in range(len(cuts) + 1)], np.diff(np.r_[0, cuts, n]))

    def chunked(order):
        return pa.Table.from_batches([pa.record_batch({"k": key[order[a:b]],
                                                        "ts": order[a:b].astype(np.int64)})
                                      for a, b in zip(bounds, bounds[1:])])
    t = chunked(np.arange(n))
    assert t.column("k").num_chunks == 5
    s = frames._sort_for_matching(t, ["k"], [("ts", True, False)], True)
    assert s.was_sorted and s.partition_offsets.tolist() == [0] + cuts.tolist() + [n]
    for bad in (700, 2999, 4500):     # a chunk's first pair, at a border, inside a chunk
        order = np.arange(n)
        order[[bad, bad + 1]] = order[[bad + 1, bad]]
        swapped = chunked(order)
        got = frames._sort_for_matching(swapped, ["k"], [("ts", True, False)], True)
        assert not got.was_sorted
        assert_same(got, frames._sort_for_matching(swapped, ["k"], [("ts", True, False)],
                                                   False))


# ------------------------------------------------------------------ in and out

def test_to_arrow_kinds():
    t = pa.table({"x": [1]})
    assert to_arrow(t) == (t, "arrow")
    out, kind = to_arrow(pa.record_batch({"x": [1]}))
    assert kind == "arrow" and isinstance(out, pa.Table)
    out, kind = to_arrow(pd.DataFrame({"x": [1]}, index=[7]))
    assert kind == "pandas" and out.column_names == ["x"]
    assert not out.schema.metadata


@pytest.mark.parametrize("bad", [[1, 2], {"x": [1]}, np.arange(3), None, "t"])
def test_to_arrow_rejects_other_types(bad):
    with pytest.raises(DataError) as ei:
        to_arrow(bad)
    assert type(bad).__name__ in str(ei.value)
    assert "pandas.DataFrame" in str(ei.value)


def test_to_arrow_rejects_bad_names():
    with pytest.raises(DataError, match=r"\b0\b.*int"):
        to_arrow(pd.DataFrame([[1, 2]], columns=[0, "a"]))
    with pytest.raises(DataError, match="'a'") as ei:
        to_arrow(pd.DataFrame([[1, 2]], columns=["a", "a"]))
    assert ei.value.code == "duplicate_column"
    dup = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["x", "x"])
    with pytest.raises(DataError, match="'x'"):
        to_arrow(dup)


def test_pandas_frame_without_columns_keeps_its_rows():
    # Arrow's from_pandas made 0 rows of them: a match over 5 rows was lost
    df = pd.DataFrame(index=range(5))
    got, kind = to_arrow(df)
    assert (got.num_rows, got.num_columns, kind) == (5, 0, "pandas")
    out = gpu_mr.match_recognize(df, "MEASURES COUNT(*) AS n ONE ROW PER MATCH "
                                     "PATTERN (A+) DEFINE A AS TRUE", engine="cpu")
    assert out["n"].tolist() == [5]
    assert to_arrow(pd.DataFrame())[0].num_rows == 0


def test_to_arrow_names_unconvertible_column():
    df = pd.DataFrame({"ok": [1, 2], "mixed": [1, "x"]})
    with pytest.raises(DataError) as ei:
        to_arrow(df)
    assert ei.value.column_name == "mixed"
    # Arrow says "Unsupported numpy type 15"; the message names the dtype too
    with pytest.raises(DataError, match=r"'z' \(dtype complex128\)") as ei:
        to_arrow(pd.DataFrame({"ok": [1, 2], "z": np.array([1 + 2j, 3])}))
    assert ei.value.column_name == "z"


def test_pandas_round_trip_keeps_values():
    df = pd.DataFrame({
        "i": pd.array([1, None, 3], "Int64"),
        "i8": pd.array([1, None, 3], "Int8"),
        "u": pd.array([1, None, 3], "UInt32"),
        "plain": [1, 2, 3],
        "b": pd.array([True, None, False], "boolean"),
        "bb": [True, False, True],
        "f": [1.5, None, 2.0],
        "s": ["a", None, "c"],
        "ts": pd.to_datetime(["2020-01-01 09:30", None, "2020-01-02 00:00"]).tz_localize("UTC"),
        "naive": pd.to_datetime(["2020-01-01", "2020-01-02", None]),
    })
    table, kind = to_arrow(df)
    back = from_arrow(table, kind)
    assert str(back["i"].dtype) == "Int64" and back["i"].tolist()[0] == 1
    assert back["i"].isna().tolist() == [False, True, False]
    assert str(back["i8"].dtype) == "Int8"
    assert str(back["u"].dtype) == "UInt32"
    assert back["plain"].dtype == np.int64
    assert str(back["b"].dtype) == "boolean"
    assert back["b"].tolist()[0] is True or back["b"].tolist()[0] == True  # noqa: E712
    assert back["bb"].dtype == np.bool_
    assert back["f"].dtype == np.float64
    assert back["s"].tolist()[0] == "a" and pd.isna(back["s"][1])
    assert back["s"].dtype == pd.DataFrame({"s": ["a"]})["s"].dtype
    assert str(back["ts"].dtype).startswith("datetime64[") and "UTC" in str(back["ts"].dtype)
    assert back["ts"][0] == pd.Timestamp("2020-01-01 09:30", tz="UTC")
    assert pd.isna(back["ts"][1])
    assert back["naive"].dtype.kind == "M"


def _frames_of_every_numpy_kind():
    rng = np.random.default_rng(7)
    n = 1000
    grid = rng.normal(size=(n, 2))
    grid[::7, 1] = np.nan
    with_nan = rng.normal(size=n)
    with_nan[[0, 5, n - 1]] = np.nan
    times = rng.integers(0, 10**12, n)
    yield pd.DataFrame({
        "clean": rng.normal(size=n),
        "nan": with_nan,
        "all_nan": np.full(n, np.nan),
        "neg_zero": np.where(rng.random(n) < 0.5, -0.0, 0.0),
        "inf": np.r_[np.inf, -np.inf, rng.normal(size=n - 2)],
        "f32": np.where(rng.random(n) < 0.1, np.nan, rng.normal(size=n)).astype(np.float32),
        "ints": rng.integers(0, 9, n),
        "strings": rng.choice(["a", "bb", None], n),
        "nullable": pd.array(np.where(rng.random(n) < 0.2, None, 1.5), "Float64"),
        **{f"ts_{u}": pd.Series(times).astype(f"datetime64[{u}]")
           for u in ("s", "ms", "us", "ns")},
        "nat": pd.Series(np.where(rng.random(n) < 0.3, np.datetime64("NaT", "ns"),
                                  times.astype("datetime64[ns]"))),
        "delta": pd.Series(np.where(rng.random(n) < 0.3, np.timedelta64("NaT", "us"),
                                    times.astype("timedelta64[us]"))),
        "tz": pd.Series(times.astype("datetime64[ns]")).dt.tz_localize("UTC"),
    })
    # every other kind a frame holds, converted a column at a time
    yield pd.DataFrame({
        **{f"{k}{w}": rng.integers(0, 100, n).astype(f"{k}{w}")
           for k in ("int", "uint") for w in (8, 16, 32, 64)},
        "bool": rng.random(n) < 0.5,
        "Int8": pd.array(np.where(rng.random(n) < 0.2, None, 3), "Int8"),
        "UInt64": pd.array(np.where(rng.random(n) < 0.2, None, 2**63), "UInt64"),
        "boolean": pd.array(np.where(rng.random(n) < 0.2, None, True), "boolean"),
        "str_arrow": pd.array(rng.choice(["x", "yy", None], n), pd.StringDtype("pyarrow")),
        "str_python": pd.array(rng.choice(["x", "é", None], n), pd.StringDtype("python")),
        "arrow_int": pd.array(np.where(rng.random(n) < 0.2, None, 1), pd.ArrowDtype(pa.int32())),
        "arrow_str": pd.array(rng.choice(["p", None], n), pd.ArrowDtype(pa.string())),
        "category": pd.Categorical(rng.choice(["lo", "hi", None], n)),
        "ordered": pd.Categorical(rng.choice([3, 1, 2], n), ordered=True),
        "decimal": [Decimal("1.25") if i % 3 else None for i in range(n)],
        "date": [dt.date(2020, 1, 1 + i % 28) if i % 5 else None for i in range(n)],
        "lists": [[i, None] if i % 4 else None for i in range(n)],
        "objects_none": np.array([None] * n, dtype=object),
        "objects_nan": np.array([1.5, np.nan] * (n // 2), dtype=object),   # NaN: NULL
        "tz_other": pd.Series(times.astype("datetime64[ms]")).dt.tz_localize("Asia/Tokyo"),
    })
    # columns of a 2-D block: strided views, not contiguous arrays
    yield pd.DataFrame(grid, columns=["x", "y"])
    yield pd.DataFrame(rng.integers(0, 9, size=(n, 3)), columns=["a", "b", "c"])
    yield pd.DataFrame({"s": pd.Series(["a", "b"] * 5, dtype="str").iloc[::2].reset_index(
        drop=True), "i": np.arange(5)})                   # a sliced Arrow-backed column
    yield pd.DataFrame({"i": np.arange(5)}, index=pd.Index([9, 8, 7, 6, 5], name="k"))
    yield pd.DataFrame({"f": np.array([], np.float64), "t": np.array([], "datetime64[ns]")})
    yield pd.DataFrame({"f": [np.nan]})


@pytest.mark.parametrize("at", [0, 5, 9])
def test_pandas_floats_checked_for_nan_in_pieces(at, monkeypatch):
    """The NaN check of a pandas float or datetime column runs in pieces on
    threads: a NaN (NaT) in any piece makes a NULL."""
    from gpu_mr.kernels import threads
    monkeypatch.setattr(threads, "MIN_WORK", 1)
    monkeypatch.setattr(threads, "thread_count", lambda: 3)
    f = np.arange(10, dtype=np.float64)
    f[at] = np.nan
    t = pd.Series(np.arange(10).astype("datetime64[s]"))
    t[at] = pd.NaT
    got, _ = to_arrow(pd.DataFrame({"f": f, "t": t}))
    assert got.column("f").to_pylist()[at] is None
    assert got.column("f").null_count == 1
    assert got.column("t").to_pylist()[at] is None
    assert got.column("t").null_count == 1


@pytest.mark.parametrize("df", list(_frames_of_every_numpy_kind()))
def test_pandas_conversion_equals_arrows(df):
    # Float, datetime64 and timedelta64 columns are converted over their own
    # buffers (NaN and NaT as NULL); the table must be what Arrow gives.
    got, _ = to_arrow(df)
    want = pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(None)
    assert got.schema == want.schema
    for name in want.column_names:
        a, b = got.column(name), want.column(name)
        assert a.null_count == b.null_count, name
        assert a.equals(b), name
        if pa.types.is_floating(a.type):       # -0.0 and 0.0 kept apart, bit for bit
            va = a.combine_chunks().fill_null(0).to_numpy()
            vb = b.combine_chunks().fill_null(0).to_numpy()
            assert (np.signbit(va) == np.signbit(vb)).all(), name


def test_from_arrow_repeated_names_keep_their_types():
    # Arrow's to_pandas gives every column of a repeated name the string
    # dtype when one of them is a string (1 became "1")
    t = pa.Table.from_arrays([pa.array([1, 2]), pa.array([3.5, None]), pa.array(["a", "b"]),
                              pa.array([dt.date(2020, 1, 1), None]), pa.array([7, None])],
                             names=["x", "x", "x", "d", "d"])
    got = from_arrow(t, "pandas")
    assert list(got.columns) == ["x", "x", "x", "d", "d"]
    assert [got.iloc[:, i].tolist()[:1] for i in range(5)] == [
        [1], [3.5], ["a"], [dt.date(2020, 1, 1)], [7]]
    assert list(got.dtypes[:3]) == [np.int64, np.float64, pd.Series(["a"]).dtype]
    assert str(got.dtypes.iloc[4]) == "Int64"


def test_from_arrow_lists_are_python_lists():
    t = pa.table({"l": pa.array([[1, 2], None, [3, None], []]),
                  "ls": pa.array([["a"], ["b", None], None, []], pa.large_list(pa.string()))})
    df = from_arrow(t, "pandas")
    assert df["l"].tolist() == [[1, 2], None, [3, None], []]
    assert all(isinstance(v, list) or v is None for v in df["l"])
    assert df["ls"].tolist() == [["a"], ["b", None], None, []]


def test_from_arrow_nullable_from_plain_arrow():
    t = pa.table({"n": pa.array([1, None], pa.int64()), "m": pa.array([1, 2], pa.int32()),
                  "b": pa.array([None, True]), "d": pa.array([Decimal("1.5"), None]),
                  "dd": pa.array([dt.date(2020, 1, 1), None])})
    df = from_arrow(t, "pandas")
    assert str(df["n"].dtype) == "Int64"
    assert df["m"].dtype == np.int32
    assert str(df["b"].dtype) == "boolean"
    assert df["d"][0] == Decimal("1.5")
    assert df["dd"][0] == dt.date(2020, 1, 1)


def test_from_arrow_duplicate_names_and_empty():
    t = pa.Table.from_arrays([pa.array([1, None]), pa.array([None, 2])], names=["x", "x"])
    df = from_arrow(t, "pandas")
    assert list(df.columns) == ["x", "x"]
    assert [str(d) for d in df.dtypes] == ["Int64", "Int64"]
    e = from_arrow(pa.table({"x": pa.array([], pa.int64()),
                             "l": pa.array([], pa.list_(pa.int64()))}), "pandas")
    assert len(e) == 0 and list(e.columns) == ["x", "l"]


def test_from_arrow_arrow_is_identity():
    t = pa.table({"x": [1]})
    assert from_arrow(t, "arrow") is t


def test_sort_keeps_pandas_derived_types():
    df = pd.DataFrame({"sym": ["b", "a"], "px": pd.array([1, None], "Int64")})
    t, _ = to_arrow(df)
    s = sort_for_matching(t, ["sym"], [])
    assert pc.equal(s.table.column("sym"), pa.chunked_array([["a", "b"]])).to_pylist() \
        == [True, True]
    assert s.table.column("px").to_pylist() == [None, 1]


def test_sorted_chunked_input_comes_back_as_it_was():
    # the check reads each chunk's buffers: nothing is combined or copied
    t = pa.concat_tables([pa.table({"p": ["a", "a"], "ts": [1, 2], "v": [1.0, 2.0]}),
                          pa.table({"p": ["a", "b"], "ts": [3, 1], "v": [3.0, 4.0]})])
    for fast in (None, True, False):
        s = frames._sort_for_matching(t, ["p"], [("ts", True, False)], fast)
        assert s.was_sorted and s.table is t
        assert s.partition_offsets.tolist() == [0, 3, 4]


@pytest.mark.parametrize("n_chunks", [3, 40])
@pytest.mark.parametrize("encoding", ["plain", "dictionary"])
def test_chunked_string_keys_fast_and_arrow_agree(n_chunks, encoding):
    """Chunks read one by one (3) or combined first (40 small ones); each
    dictionary chunk with a dictionary of its own; disorder at a chunk seam."""
    rng = np.random.default_rng(n_chunks)
    n = 12_000
    sym = np.sort(rng.choice(["", "a", "ab", "b", "ä", "ö"], n))
    ts = np.arange(n)
    cuts = np.linspace(0, n, n_chunks + 1).astype(int)
    pieces = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        col = pa.array(sym[a:b])
        if encoding == "dictionary":
            col = col.dictionary_encode()
        pieces.append(pa.table({"s": col, "ts": ts[a:b]}))
    t = pa.concat_tables(pieces)
    assert t.column("s").num_chunks == n_chunks
    expected = [0] + (np.flatnonzero(sym[1:] != sym[:-1]) + 1).tolist() + [n]
    for fast in (True, False):
        s = frames._sort_for_matching(t, ["s"], [("ts", True, False)], fast)
        assert s.was_sorted and s.partition_offsets.tolist() == expected
    # the first row of the second chunk moved below the last of the first
    seam = int(cuts[1])
    bad = t.take(np.r_[0:seam - 1, seam, seam - 1, seam + 1:n])
    bad = pa.concat_tables([bad.slice(0, seam), bad.slice(seam)])
    for keys in ([("ts", True, False)], [("ts", False, False)]):
        a = frames._sort_for_matching(bad, ["s"], keys, True)
        assert_same(a, frames._sort_for_matching(bad, ["s"], keys, False))
    desc = frames._sort_for_matching(t, [], [("s", False, True), ("ts", True, False)], True)
    assert not desc.was_sorted
    assert_same(desc, frames._sort_for_matching(t, [], [("s", False, True), ("ts", True, False)],
                                                False))


@pytest.mark.parametrize("seed", range(16))
def test_fused_string_and_number_pass(seed, monkeypatch):
    """The one-pass check of a string partition key and a numeric order key
    (runs long enough to fill blocks; NaN, -0.0, DESC; chunks aligned or
    not; a pair out of order at a random spot, across a chunk border too;
    from seed 12 each chunk cut into pieces on threads) against the Arrow
    comparisons."""
    if seed >= 12:
        from gpu_mr.kernels import threads
        monkeypatch.setattr(threads, "MIN_WORK", 1)
        monkeypatch.setattr(threads, "thread_count", lambda: 1 + seed % 5)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(600, 3000))
    words = np.array(["", "a", "ab", "abc", "b", "ä", "äb", "😀"])
    sym = np.sort(words[rng.integers(0, len(words), n)])
    if seed % 3 == 0:
        x = rng.integers(-5, 5, n).astype(np.int64)
    else:
        x = rng.choice([-1.5, -0.0, 0.0, 2.0, np.nan, np.inf], n)
    descending = seed % 2 == 1
    t = pa.table({"s": sym, "x": x})
    t = frames._sort_for_matching(t, ["s"], [("x", not descending, False)], False).table
    if seed % 4 == 1:                               # two rows far apart swapped
        i = int(rng.integers(0, n // 2))
        j = i + n // 3
        t = t.take(np.r_[0:i, j, i + 1:j, i, j + 1:n])
    cut = int(rng.integers(1, n - 1))
    if seed % 4 == 2:                               # aligned chunks
        t = pa.concat_tables([t.slice(0, cut), t.slice(cut)])
    elif seed % 4 == 3:             # chunks that do not line up (a pandas string column's)
        cuts = [0, cut, n]
        if seed >= 8:               # more chunks than MANY_CHUNKS, each "long"
            cuts = sorted(set([0, n] + rng.integers(1, n - 1, 24).tolist()))
            monkeypatch.setattr(frames, "CHUNK_MIN_ROWS", 1)
        strings = t.column("s").combine_chunks()
        t = pa.table({"s": pa.chunked_array([strings.slice(a, b - a)
                                             for a, b in zip(cuts, cuts[1:])]),
                      "x": t.column("x").combine_chunks()})
    taken = []
    fused = frames._fused_pass

    def spy(*args):
        result = fused(*args)
        taken.append(result is not None)
        return result
    monkeypatch.setattr(frames, "_fused_pass", spy)
    got = frames._sort_for_matching(t, ["s"], [("x", not descending, False)], True)
    assert_same(got, frames._sort_for_matching(t, ["s"], [("x", not descending, False)],
                                               False))
    assert taken[0]                                 # misaligned chunks cut alike
    assert got.was_sorted == (seed % 4 != 1)


# ------------------------------------------------------------ Arrow view layouts

def _viewed_table():
    return pa.table({
        "sym": pa.chunked_array([pa.array(["b", "a", None], pa.string_view()),
                                 pa.array(["a", "b"], pa.string_view())]),
        "ts": pa.array([3, 1, 2, 2, 1], pa.int64()),
        "raw": pa.array([b"x", None, b"zz", b"", b"y"], pa.binary_view()),
        "ids": pa.array([[1], [2, 3], None, [], [5]], pa.list_view(pa.int64())),
        "tags": pa.array([["a"], None, ["b", "c"], [], ["d"]], pa.list_(pa.string_view())),
    })


def test_view_layouts_are_read_as_offset_layouts_with_the_same_values():
    # Polars and DuckDB hand out string_view and friends; pyarrow's take and
    # sort kernels do not all accept them, so every input is made plain first
    t = _viewed_table()
    plain, kind = to_arrow(t)
    plain.validate(full=True)
    assert kind == "arrow" and plain.to_pydict() == t.to_pydict()
    assert [str(f.type) for f in plain.schema] == [
        "string", "int64", "binary", "list<item: int64>", "list<item: string>"]
    assert frames.plain_schema(t.schema) == plain.schema
    assert to_arrow(pa.table({"ts": [1]}))[0].schema.field("ts").type == pa.int64()


@pytest.mark.parametrize("engine", ["reference", "cpu"])
def test_a_string_view_partition_key_gives_the_plain_strings_results(engine):
    import gpu_mr
    t = _viewed_table().select(["sym", "ts"]).append_column(
        "price", pa.array([5.0, 3.0, 4.0, 2.0, 6.0]))
    clause = ("PARTITION BY sym ORDER BY ts MEASURES FIRST(A.ts) AS s, COUNT(*) AS n "
              "PATTERN (A B) DEFINE B AS price < PREV(price) AND sym <> 'z'")
    got = gpu_mr.match_recognize(t, clause, engine=engine)
    want = gpu_mr.match_recognize(t.set_column(0, "sym", t.column("sym").cast(pa.string())),
                                  clause, engine=engine)
    assert got.equals(want) and got.num_rows == 2     # partitions a and b
    assert "string" in gpu_mr.compile(clause, schema=t.schema).explain()


@pytest.mark.parametrize("many", ["strings", "numbers"])
def test_misaligned_chunks_cut_as_views_equal_arrow_slices(many, monkeypatch):
    """frames._pieces_aligned: the key held in one chunk is cut as views of
    its one piece at the other key's chunk borders; the pieces equal those
    of Arrow slices read back (values, string bytes, NULLs), either way."""
    monkeypatch.setattr(frames, "CHUNK_MIN_ROWS", 1)
    rng = np.random.default_rng(3)
    n = 200
    words = pa.array([None if k % 17 == 0 else f"w{k % 7}" * (k % 3) for k in range(n)])
    numbers = pa.array([None if k % 13 == 0 else int(x) for k, x in
                        enumerate(rng.integers(-5, 5, n))], pa.int64())
    cuts = [0, 7, 8, 60, 133, n]
    split = lambda arr: pa.chunked_array([arr.slice(a, b - a) for a, b in zip(cuts, cuts[1:])])
    a, b = ((split(words), pa.chunked_array([numbers])) if many == "strings"
            else (pa.chunked_array([words]), split(numbers)))
    got = frames._pieces_aligned(a, b)
    want = (frames._pieces(split(words)), frames._pieces(split(numbers)))
    for got_key, want_key in zip(got, want):
        assert len(got_key) == len(want_key) == len(cuts) - 1
        for g, w in zip(got_key, want_key):
            ones = [1] * len(w)                     # None: no NULL
            assert (ones if g.valid is None else g.valid.tolist()) == (
                ones if w.valid is None else w.valid.tolist())
            if w.values is not None:
                assert g.values.tolist() == w.values.tolist()
            else:
                assert [bytes(g.data[g.offsets[i]:g.offsets[i + 1]]) for i in range(len(g))] \
                    == [bytes(w.data[w.offsets[i]:w.offsets[i + 1]]) for i in range(len(w))]
