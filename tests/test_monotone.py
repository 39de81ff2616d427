"""MIN/MAX over a variable decided by its DEFINE (gpu_mr/monotone.py).

Unit cases: which patterns keep a variable's rows in one run, which DEFINEs
make its keys fall or rise, and which column types take ties. Differential:
the CPU engine, whose walk then reads the extreme at the run's first or
last row without comparing keys, must give the reference engine's table
on random data with ties, NaN, NULL, -0.0 and 0.0, for ONE ROW and ALL
ROWS, RUNNING and FINAL.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpu_mr
from gpu_mr import measures, monotone
from gpu_mr.analysis import analyze
from gpu_mr.frames import sort_for_matching
from gpu_mr.syntax import parse_clause

FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"

SCHEMA = pa.schema([("sym", pa.string()), ("ts", pa.int64()), ("price", pa.float64()),
                    ("qty", pa.int64()), ("name", pa.string()), ("at", pa.timestamp("us"))])


def query_of(pattern: str, define: str):
    text = (f"PARTITION BY sym ORDER BY ts MEASURES COUNT(*) AS n PATTERN ({pattern}) "
            f"DEFINE {define}")
    return analyze(parse_clause(text), SCHEMA)


@pytest.mark.parametrize("pattern, define, column, want_max, want", [
    # the V-shape's legs: falling keys have their MIN last, MAX first
    ("S X+ Y+", "X AS price < PREV(price)", "price", False, "LAST"),
    ("S X+ Y+", "X AS price < PREV(price)", "price", True, "FIRST"),
    ("S X+ Y+", "X AS price > PREV(price)", "price", False, "FIRST"),
    ("S X+ Y+", "X AS price > PREV(price)", "price", True, "LAST"),
    # written the other way round, qualified, offset 1 written, inside an AND
    ("S X+ Y+", "X AS PREV(price) > price", "price", False, "LAST"),
    ("S X+ Y+", "X AS X.price < PREV(X.price, 1)", "price", False, "LAST"),
    ("S X+ Y+", "X AS qty > 2 AND price < PREV(price)", "price", False, "LAST"),
    ("S X+ Y+", "X AS (price < PREV(price) AND qty > 2) AND ts > 0", "price", False, "LAST"),
    # ties: the same value for integers and times, not for floats (-0.0, 0.0)
    ("S X+ Y+", "X AS qty <= PREV(qty)", "qty", False, "LAST"),
    ("S X+ Y+", "X AS at >= PREV(at)", "at", True, "LAST"),
    ("S X+ Y+", "X AS price <= PREV(price)", "price", False, None),
    # one run of rows however X is quantified, and in any branch or order
    ("S X{2,4} Y", "X AS price < PREV(price)", "price", False, "LAST"),
    ("S X*? Y", "X AS price < PREV(price)", "price", False, "LAST"),
    ("S (X+ | Y)", "X AS price < PREV(price)", "price", False, "LAST"),
    ("(S X+ Y)?", "X AS price < PREV(price)", "price", False, "LAST"),
    ("PERMUTE(S, X+)", "X AS price < PREV(price)", "price", False, "LAST"),
    ("^ S {- X+ -} Y $", "X AS price < PREV(price)", "price", False, "LAST"),
    # rows of X apart: another row between two runs of X
    ("(S X+)+", "X AS price < PREV(price)", "price", False, None),
    ("(X Y){2}", "X AS price < PREV(price)", "price", False, None),
    ("S X+ Y X+", "X AS price < PREV(price)", "price", False, None),
    # DEFINEs that do not order X's keys
    ("S X+ Y+", "X AS price < PREV(price) OR qty > 2", "price", False, None),
    ("S X+ Y+", "X AS price < PREV(price, 2)", "price", False, None),
    ("S X+ Y+", "X AS price < PREV(Y.price)", "price", False, None),
    ("S X+ Y+", "X AS price < PREV(qty)", "price", False, None),
    ("S X+ Y+", "X AS qty < PREV(qty)", "price", False, None),
    ("S X+ Y+", "X AS price < NEXT(price)", "price", False, None),
    ("S X+ Y+", "X AS price < FIRST(price)", "price", False, None),
    ("S X+ Y+", "X AS NOT (price >= PREV(price))", "price", False, None),
    ("S X+ Y+", "Y AS price < PREV(price)", "price", False, None),
    ("S X+ Y+", "X AS name < PREV(name)", "name", False, None),
])
def test_which_extremes_a_define_decides(pattern, define, column, want_max, want):
    assert monotone.extreme_at(query_of(pattern, define), "X", column, want_max) == want


def test_the_walk_takes_the_decided_row_for_the_v_shape():
    from gpu_mr.kernels.unanchored import EXT_AT_FIRST, EXT_AT_LAST, EXT_COMPARED
    table = pa.table({"sym": ["a"] * 6, "ts": list(range(6)),
                      "price": [5.0, 4.0, 3.0, 4.0, 6.0, 5.0]})
    clause = """PARTITION BY sym ORDER BY ts
        MEASURES MIN(DOWN.price) AS bottom, MAX(UP.price) AS top, MAX(DOWN.ts) AS late
        PATTERN (STRT DOWN+ UP+)
        DEFINE DOWN AS price < PREV(price), UP AS price > PREV(price)"""
    query = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    ats = [x[-1] for x in measures.walk_request(query, data)[3].values()]
    assert ats == [EXT_AT_LAST, EXT_AT_LAST]        # the third, over ts, is not in the walk
    assert EXT_COMPARED not in ats and EXT_AT_FIRST not in ats
    got = gpu_mr.match_recognize(table, clause, engine="cpu")
    assert got.to_pylist() == [{"sym": "a", "bottom": 3.0, "top": 6.0, "late": 2}]


FLOATS = [0.0, -0.0, 1.0, 2.0, 2.0, -1.0, float("nan"), float("inf"), float("-inf")]
FALLS = ["{c} < PREV({c})", "PREV({c}) > {c}", "{c} <= PREV({c})", "{v}.{c} < PREV({v}.{c})",
         "{c} < PREV({c}) AND qty >= 1", "{c} < PREV({c}, 2)"]
RISES = ["{c} > PREV({c})", "{c} >= PREV({c})", "PREV({c}) < {c} AND ts > 0"]
PATTERNS = ["S X+ Y+", "S X* Y+ Z?", "S X+? Y", "(S | Z) X{1,3} Y*", "PERMUTE(S, X+) Y?",
            "X+ Y+ X+", "(X Y)+", "S {- X+ -} Y+"]


@st.composite
def cases(draw):
    n = draw(st.integers(0, 30))
    price = draw(st.lists(st.sampled_from(FLOATS), min_size=n, max_size=n))
    qty = draw(st.lists(st.integers(0, 3) | st.none() if draw(st.booleans())
                        else st.integers(0, 3), min_size=n, max_size=n))
    table = pa.table({"sym": pa.array([draw(st.sampled_from("ab")) for _ in range(n)],
                                      pa.string()),
                      "ts": pa.array(range(n), pa.int64()),
                      "price": pa.array(price, pa.float64()),
                      "qty": pa.array(qty, pa.int64())})
    c = draw(st.sampled_from(["price", "qty"]))
    d = draw(st.sampled_from(["price", "qty"]))
    x = draw(st.sampled_from(FALLS + RISES)).format(c=c, v="X")
    y = draw(st.sampled_from(FALLS + RISES)).format(c=d, v="Y")
    rows = draw(st.sampled_from(["ONE ROW PER MATCH", "ALL ROWS PER MATCH"]))
    skip = draw(st.sampled_from(["PAST LAST ROW", "PAST LAST ROW", "TO NEXT ROW"]))
    pattern = draw(st.sampled_from(PATTERNS))
    z = ", Z AS qty IS NULL" if "Z" in pattern else ""
    clause = f"""PARTITION BY sym ORDER BY ts
        MEASURES MIN(X.{c}) AS lo, MAX(X.{c}) AS hi, FINAL MIN(Y.{d}) AS ylo,
                 MAX(Y.{d}) AS yhi, MIN(X.{d}) AS other, COUNT(*) AS n
        {rows} AFTER MATCH SKIP {skip}
        PATTERN ({pattern})
        DEFINE X AS {x}, Y AS {y}{z}"""
    return clause, table


@settings(max_examples=1000 if FULL else 150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
def test_decided_extremes_equal_the_reference(case):
    clause, table = case
    want = gpu_mr.match_recognize(table, clause, engine="reference")
    got = gpu_mr.match_recognize(table, clause, engine="cpu")
    # repr: -0.0 and 0.0 are equal to Arrow, not to a user; NaN is not equal to NaN
    assert got.schema == want.schema, clause
    assert repr(got.to_pylist()) == repr(want.to_pylist()), clause


@pytest.mark.parametrize("pattern, define, prices", [
    # equal floats of opposite signs: MIN keeps the first, not the last
    ("S X+ Y", "X AS price <= PREV(price)", [1.0, 0.0, -0.0, 2.0]),
    ("S X+ Y", "X AS price >= PREV(price)", [-1.0, -0.0, 0.0, 2.0]),
    # two runs of X: the last row of the last run is not the MIN
    ("S X+ Y X+", "X AS price < PREV(price)", [9.0, 5.0, 4.0, 8.0, 7.0, 6.0, 10.0]),
    ("(S X+)+", "X AS price < PREV(price)", [9.0, 5.0, 4.0, 8.0, 7.0, 6.0, 10.0]),
    # a step of two rows orders nothing within a run
    ("S X+", "X AS price < PREV(price, 2)", [5.0, 9.0, 4.0, 8.0, 3.0, 7.0]),
    # a NaN is no row of X; one before X is PREV of its first row
    ("S X+ Y", "X AS price < PREV(price)", [float("nan"), 3.0, 2.0, 1.0, 5.0]),
])
def test_the_traps_give_the_reference(pattern, define, prices):
    n = len(prices)
    table = pa.table({"sym": ["a"] * n, "ts": list(range(n)), "price": prices})
    clause = f"""PARTITION BY sym ORDER BY ts
        MEASURES MIN(X.price) AS lo, MAX(X.price) AS hi, COUNT(*) AS n
        PATTERN ({pattern})
        DEFINE {define}{", Y AS price > PREV(price)" if "Y" in pattern else ""}"""
    want = gpu_mr.match_recognize(table, clause, engine="reference")
    got = gpu_mr.match_recognize(table, clause, engine="cpu")
    assert want.num_rows > 0
    assert repr(got.to_pylist()) == repr(want.to_pylist())


def test_long_runs_on_ticks_equal_the_reference():
    # many matches, runs past the walk's block of rows, both extremes per leg
    rng = np.random.default_rng(3)
    n = 20_000
    table = pa.table({"sym": rng.integers(0, 4, n).astype(str),
                      "ts": np.arange(n), "price": np.round(np.cumsum(rng.normal(size=n)), 1),
                      "qty": rng.integers(0, 5, n)})
    clause = """PARTITION BY sym ORDER BY ts
        MEASURES MIN(DOWN.price) AS bottom, MAX(DOWN.price) AS top,
                 MIN(UP.qty) AS uq, LAST(UP.ts) AS e, COUNT(*) AS n
        PATTERN (STRT DOWN+ UP+)
        DEFINE DOWN AS price < PREV(price), UP AS qty >= PREV(qty) AND price > PREV(price)"""
    want = gpu_mr.match_recognize(table, clause, engine="reference")
    assert gpu_mr.match_recognize(table, clause, engine="cpu").equals(want)


def test_explain_names_the_decided_extremes():
    clause = """PARTITION BY sym ORDER BY ts
        MEASURES MAX(DOWN.price) AS high, MAX(UP.qty) AS top
        PATTERN (STRT DOWN+ UP+)
        DEFINE DOWN AS price < PREV(price), UP AS qty >= PREV(qty)"""
    # no schema: the ties of UP's step may be floats' -0.0 and 0.0
    text = gpu_mr.compile(clause).explain()
    assert "MAX(DOWN.price) at DOWN's first row (its DEFINE" in text
    assert "MAX(UP.qty) at" not in text
    text = gpu_mr.compile(clause, schema=SCHEMA).explain()     # qty: BIGINT
    assert "MAX(DOWN.price) at DOWN's first row, MAX(UP.qty) at UP's last row" in text


def test_extremes_past_the_walks_slots_are_its_first_or_last_rows():
    # W-shape: MIN(B), MAX(C) take the walk's two extremes; MIN(D) and
    # MAX(E) are then the walk's LAST(D) and LAST(E) rows (no labels, no
    # pass over the rows), and MIN(E) its FIRST(E)
    rng = np.random.default_rng(7)
    n = 5_000
    table = pa.table({"sym": rng.integers(0, 3, n).astype(str), "ts": np.arange(n),
                      "price": np.round(np.cumsum(rng.normal(size=n)), 1)})
    clause = """PARTITION BY sym ORDER BY ts
        MEASURES MIN(B.price) AS b, MAX(C.price) AS c, MIN(D.price) AS d,
                 MAX(E.price) AS e_hi, MIN(E.price) AS e_lo, COUNT(*) AS n
        PATTERN (S B+ C+ D+ E+)
        DEFINE B AS price < PREV(price), C AS price > PREV(price),
               D AS price < PREV(price), E AS price > PREV(price)"""
    query = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    request = measures.walk_request(query, data)
    assert request is not None                      # every measure without labels
    ids = {v: (i,) for i, v in enumerate(query.primary_vars)}
    assert {(ids["D"], "LAST"), (ids["E"], "FIRST")} <= set(request[4])
    assert (ids["D"], "FIRST") not in request[4]    # D's range is never needed
    assert "MIN(D.price) at D's last row" in gpu_mr.compile(clause, table.schema).explain()
    want = gpu_mr.match_recognize(table, clause, engine="reference")
    assert want.num_rows > 50
    assert gpu_mr.match_recognize(table, clause, engine="cpu").equals(want)
