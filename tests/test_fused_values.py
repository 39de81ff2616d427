"""The compiled row values of aggregate arguments (predicates/fused_values.py)
against masks.py's evaluator.

``fused_values.row_values`` must give, value for value and NULL for NULL
(bit for bit for doubles: NaN, -0.0, infinities), what measure_exprs'
masks.py path gives, and decline (None) exactly where that path finds a row
that raises. Table-driven cases over a table with NULLs, extreme integers
and special doubles in several Arrow chunks, plain Python and compiled;
the declines; the end-to-end use in ``SUM(price * volume)`` against the
reference engine; and a hypothesis differential test over random numeric
expressions (GPU_MR_FULL_TESTS=1 runs many more examples).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpu_mr
from gpu_mr import measure_exprs
from gpu_mr.analysis import analyze
from gpu_mr.frames import sort_for_matching
from gpu_mr.predicates import fused_values
from gpu_mr.syntax import parse_clause

FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"
I64_MAX, I64_MIN = 2**63 - 1, -2**63

INTS = [None, 0, 1, -1, 2, 7, -5, I64_MAX, I64_MIN, 2**62, 10**18, 3, 2**53 + 1]
SMALL = [None, 0, 1, 2, -3, 3, -1]
FLOATS = [None, 0.0, -0.0, 1.5, -2.5, 0.5, math.nan, math.inf, -math.inf, 1e300, 3.0,
          1e-7, 2.0**53, -0.5]


def make_table(n: int, seed: int, chunks: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)

    def col(values, typ):
        picked = [values[k] for k in rng.integers(0, len(values), n)]
        arr = pa.array(picked, typ)
        cuts = sorted(set(rng.integers(0, n + 1, chunks - 1).tolist())) if chunks > 1 else []
        bounds = [0] + cuts + [n]
        return pa.chunked_array([arr.slice(a, b - a) for a, b in zip(bounds, bounds[1:])], typ)
    return pa.table({"id": pa.chunked_array([pa.array(np.arange(n))]),
                     "i": col(INTS, pa.int64()), "j": col(SMALL, pa.int64()),
                     "f": col(FLOATS, pa.float64()), "b": col([None, True, False], pa.bool_()),
                     "k": col([1, 2, 3], pa.int32()),
                     "s": col(["a", None], pa.string()),
                     "ts": pa.chunked_array([pa.array(np.arange(n) * 1000,
                                                      pa.timestamp("us"))])})


def argument(expr: str, table: pa.Table):
    q = analyze(parse_clause(f"ORDER BY id MEASURES SUM({expr}) AS x PATTERN (A+) "
                             "DEFINE A AS TRUE"), table.schema)
    return q, q.measures[0].expr.args[0]


def masks_values(q, arg, table):
    """measure_exprs.row_values with the compiled pass switched off."""
    data = sort_for_matching(table, q.partition_columns, q.order_keys)
    saved = fused_values.row_values
    fused_values.row_values = lambda *a, **k: None
    try:
        return measure_exprs.row_values(q, data, arg, None)
    finally:
        fused_values.row_values = saved


def same(got: pa.Array, want: pa.Array) -> bool:
    """Equal values and NULLs; doubles bit for bit."""
    if got.type != want.type or len(got) != len(want):
        return False
    if not np.array_equal(got.is_null().to_numpy(zero_copy_only=False),
                          want.is_null().to_numpy(zero_copy_only=False)):
        return False
    a = got.fill_null(0).to_numpy(zero_copy_only=False)
    b = want.fill_null(0).to_numpy(zero_copy_only=False)
    if a.dtype.kind == "f":
        return np.array_equal(a.view(np.int64), b.view(np.int64)) or bool(
            np.all((a.view(np.int64) == b.view(np.int64)) | (np.isnan(a) & np.isnan(b))))
    return np.array_equal(a, b)


def agree(expr: str, table: pa.Table, jit: bool) -> pa.Array:
    q, arg = argument(expr, table)
    want = masks_values(q, arg, table)
    got = fused_values.row_values(arg, table, jit=jit)
    if want is None:            # some row raises (or masks.py declines): so must this
        assert got is None, expr
    else:
        assert got is not None, f"declined {expr}: {fused_values._shape(arg)}"
        assert same(got, want), expr
    return got


CASES = [
    "f * i", "i * j", "i + j", "i - j", "j * 2.5", "f / j", "i / j", "i % j", "f % j",
    "-i", "-f", "ABS(i)", "ABS(f)", "f + i * 0.5", "CAST(i AS DOUBLE) * f",
    "CASE WHEN j = 0 THEN 0 ELSE i / j END", "CASE WHEN b THEN f ELSE j END",
    "CASE WHEN f > 1 THEN i END", "COALESCE(i, j, 0)", "COALESCE(f, j)", "NULLIF(j, 2)",
    "GREATEST(i, j)", "LEAST(f, 1)", "k * j", "CASE j WHEN 1 THEN f WHEN 2 THEN i END",
    "CAST(f AS BIGINT)", "j * j * j", "CASE WHEN b IS NULL THEN 1.5 ELSE f END",
]


@pytest.mark.parametrize("expr", CASES)
@pytest.mark.parametrize("chunks", [1, 3])
def test_row_values_agree_with_masks(expr, chunks):
    agree(expr, make_table(300, 1, chunks), jit=False)


@pytest.mark.parametrize("expr, raises", [
    ("f * i", False), ("CASE WHEN j = 0 THEN f ELSE k / j END", False), ("k * j + 1", False),
    ("i * j", True), ("CASE WHEN j = 0 THEN 0 ELSE i / j END", True)])   # overflow at a row
def test_compiled_kernel_agrees_on_a_larger_input(expr, raises):
    got = agree(expr, make_table(50_000, 2, chunks=4), jit=True)
    assert (got is None) == raises


def test_a_row_that_raises_declines():
    t = pa.table({"id": [0, 1], "i": [I64_MAX, 1], "j": [2, 0]})
    q, arg = argument("i * j", t)
    assert fused_values.row_values(arg, t, jit=False) is None
    q, arg = argument("j / (j - j)", t)
    assert fused_values.row_values(arg, t, jit=False) is None


@pytest.mark.parametrize("expr", ["LENGTH(s)", "d * 2", "CAST(d AS DOUBLE)"])
def test_declines_what_it_does_not_compile(expr):
    from decimal import Decimal
    t = make_table(50, 3)
    t = t.append_column("d", pa.array([Decimal("1.25")] * 50, pa.decimal128(6, 2)))
    q, arg = argument(expr, t)
    assert fused_values.row_values(arg, t, jit=False) is None
    assert masks_values(q, arg, t) is not None      # masks.py evaluates it instead


def test_below_min_rows_leaves_it_to_masks():
    t = make_table(100, 4)
    assert fused_values.row_values(argument("f * i", t)[1], t) is None


def test_sum_of_a_row_expression_end_to_end_equals_reference():
    n = fused_values.MIN_ROWS + 5000
    rng = np.random.default_rng(6)
    table = pa.table({
        "sym": pa.array(rng.integers(0, 4, n)), "ts": np.arange(n),
        "price": np.round(100 + np.cumsum(rng.normal(size=n)), 1),
        "volume": pa.array(rng.integers(1, 100, n), mask=rng.random(n) < 0.05)})
    clause = """PARTITION BY sym ORDER BY ts
        MEASURES SUM(price * volume) / SUM(volume) AS vwap, AVG(price - 100) AS d,
                 SUM(D.price * 2) AS down2
        ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
        PATTERN (S D+ U+) DEFINE D AS price < PREV(price), U AS price > PREV(price)"""
    got = gpu_mr.match_recognize(table, clause, engine="cpu")
    assert got.num_rows > 1000
    assert got.equals(gpu_mr.match_recognize(table, clause, engine="reference"))


# ---------------------------------------------------------------- differential

LEAVES = {"int": ["i", "j", "k", "0", "1", "-3", "9223372036854775807", "NULL"],
          "num": ["f", "2.5", "0.1", "1e300", "-0.0"]}


def expressions(kind: str, depth: int):
    leaf = st.sampled_from(LEAVES[kind] + (LEAVES["int"] if kind == "num" else []))
    if depth <= 0:
        return leaf
    sub = {k: expressions(k, depth - 1) for k in LEAVES}
    num = st.one_of(sub["int"], sub["num"]) if kind == "num" else sub["int"]

    def fmt(pattern):
        return lambda t: pattern.format(*t)
    comparison = st.tuples(num, st.sampled_from(["=", "<>", "<", ">="]), num).map(
        fmt("{} {} {}"))
    return st.one_of(
        leaf,
        st.tuples(num, st.sampled_from(["+", "-", "*", "/", "%"]), num).map(fmt("({} {} {})")),
        num.map("-({})".format), num.map("ABS({})".format),
        st.tuples(comparison, num, num).map(fmt("CASE WHEN {} THEN {} ELSE {} END")),
        st.tuples(num, num).map(fmt("COALESCE({}, {})")),
        st.tuples(num, num).map(fmt("NULLIF({}, {})")),
        st.tuples(num, num).map(fmt("GREATEST({}, {})")),
    )


@settings(max_examples=400 if FULL else 60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(expr=st.sampled_from(["int", "num"]).flatmap(lambda k: expressions(k, 2)),
       seed=st.integers(0, 3), chunks=st.integers(1, 3))
def test_random_expressions_agree_with_masks(expr, seed, chunks):
    table = make_table(40, seed, chunks)
    try:
        argument(expr, table)
    except gpu_mr.errors.GpuMrError:
        return                      # not a valid aggregate argument (a bare NULL, ...)
    agree(expr, table, jit=False)
