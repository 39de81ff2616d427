"""Random well-typed and ill-typed expressions over every column type.

Whatever DEFINE or MEASURES holds, the library answers with a result or a
GpuMrError: never a TypeError, KeyError or the like from inside. Expressions
are generated from a small typed grammar so most of them get past the parser
and exercise the analyzer and the interpreter.
"""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpu_mr
from gpu_mr.errors import GpuMrError

FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"

TABLE = pa.table({
    "id": pa.array([1, 2, 3, 4, 5, 6], pa.int64()),
    "i": pa.array([3, None, -2, 0, 7, 7], pa.int64()),
    "f": pa.array([1.5, 2.0, None, -0.5, float("nan"), 3.25], pa.float64()),
    "d": pa.array([Decimal("1.10"), Decimal("-2.00"), None, Decimal("0.05"), Decimal("9.99"),
                   Decimal("1.10")], pa.decimal128(10, 2)),
    "s": pa.array(["ab", "", None, "Zed", "a%b", "ab"], pa.string()),
    "b": pa.array([True, False, None, True, True, False], pa.bool_()),
    "dt": pa.array([dt.date(2024, 1, 1), dt.date(2024, 2, 29), None, dt.date(1999, 12, 31),
                    dt.date(2024, 1, 2), dt.date(2024, 1, 1)], pa.date32()),
    "ts": pa.array([dt.datetime(2024, 1, 1, 9, 30), None, dt.datetime(2024, 1, 1, 9, 31),
                    dt.datetime(2024, 1, 1, 9, 29, 59, 500000), dt.datetime(2024, 1, 2),
                    dt.datetime(2024, 1, 2)], pa.timestamp("us")),
})

VARS = ("A", "B")


def expr(kind: str, depth: int):
    """Strategy for SQL text of roughly the given kind (sometimes mistyped)."""
    leaves = {
        "num": ["i", "f", "d", "1", "0", "-3", "2.5", "A.i", "B.f", "NULL"],
        "str": ["s", "'x'", "'it''s'", "A.s", "CLASSIFIER()", "NULL"],
        "bool": ["b", "TRUE", "FALSE", "B.b", "NULL"],
        "date": ["dt", "DATE '2024-01-01'", "A.dt"],
        "ts": ["ts", "TIMESTAMP '2024-01-01 09:30:00'", "B.ts"],
    }
    leaf = st.sampled_from(leaves[kind])
    if depth <= 0:
        return leaf
    sub = {k: expr(k, depth - 1) for k in leaves}
    any_kind = st.sampled_from(list(leaves)).flatmap(lambda k: sub[k])
    forms = {
        "num": [
            st.tuples(sub["num"], st.sampled_from("+-*/%"), sub["num"]).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"),
            st.tuples(st.sampled_from(["ABS", "SIGN", "FLOOR", "CEIL", "SQRT", "LN", "EXP",
                                       "ROUND"]), sub["num"]).map(lambda t: f"{t[0]}({t[1]})"),
            st.tuples(st.sampled_from(["POWER", "MOD", "GREATEST", "LEAST", "COALESCE",
                                       "NULLIF", "ROUND"]), sub["num"], sub["num"]).map(
                lambda t: f"{t[0]}({t[1]}, {t[2]})"),
            sub["str"].map(lambda x: f"LENGTH({x})"),
            st.tuples(st.sampled_from(["PREV", "NEXT", "FIRST", "LAST"]),
                      st.sampled_from(["i", "f", "d", "A.i", "B.d"]), st.integers(0, 3)).map(
                lambda t: f"{t[0]}({t[1]}, {t[2]})"),
            st.tuples(st.sampled_from(["SUM", "AVG", "MIN", "MAX", "COUNT", "STDDEV",
                                       "VAR_POP"]), st.sampled_from(["i", "f", "d", "A.i",
                                                                     "B.f"])).map(
                lambda t: f"{t[0]}({t[1]})"),
            st.sampled_from(["COUNT(*)", "COUNT(A.*)", "MATCH_NUMBER()", "MAX_BY(i, f)",
                             "MIN_BY(A.d, A.i)", "COUNT_IF(b)"]),
            st.tuples(sub["bool"], sub["num"], sub["num"]).map(
                lambda t: f"CASE WHEN {t[0]} THEN {t[1]} ELSE {t[2]} END"),
            st.tuples(any_kind, st.sampled_from(["BIGINT", "DOUBLE", "DECIMAL(6, 2)"])).map(
                lambda t: f"CAST({t[0]} AS {t[1]})"),
        ],
        "str": [
            st.tuples(any_kind, any_kind).map(lambda t: f"({t[0]} || {t[1]})"),
            st.tuples(st.sampled_from(["UPPER", "LOWER", "TRIM", "LTRIM"]), sub["str"]).map(
                lambda t: f"{t[0]}({t[1]})"),
            st.tuples(sub["str"], sub["num"], sub["num"]).map(
                lambda t: f"SUBSTR({t[0]}, {t[1]}, {t[2]})"),
            any_kind.map(lambda x: f"CAST({x} AS VARCHAR)"),
            st.sampled_from(["PREV(CLASSIFIER())", "CLASSIFIER(A)", "FIRST(s, 1)",
                             "MAX(A.s)", "ANY_VALUE(s)"]),
        ],
        "bool": [
            st.tuples(any_kind, st.sampled_from(["=", "<>", "<", ">=", "!="]), any_kind).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"),
            st.tuples(sub["bool"], st.sampled_from(["AND", "OR"]), sub["bool"]).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"),
            sub["bool"].map(lambda x: f"(NOT {x})"),
            any_kind.map(lambda x: f"({x} IS NOT NULL)"),
            st.tuples(sub["num"], sub["num"], sub["num"]).map(
                lambda t: f"({t[0]} BETWEEN {t[1]} AND {t[2]})"),
            st.tuples(any_kind, any_kind, any_kind).map(
                lambda t: f"({t[0]} NOT IN ({t[1]}, {t[2]}))"),
            sub["str"].map(lambda x: f"({x} LIKE 'a%')"),
            st.sampled_from(["BOOL_AND(b)", "BOOL_OR(A.b)", "EVERY(b)"]),
            any_kind.map(lambda x: f"CAST({x} AS BOOLEAN)"),
        ],
        "date": [
            sub["date"].map(lambda x: f"({x} + INTERVAL '1' DAY)"),
            sub["date"].map(lambda x: f"({x} - INTERVAL '1' MONTH)"),
            sub["ts"].map(lambda x: f"CAST({x} AS DATE)"),
            st.sampled_from(["MIN(dt)", "LAST(dt, 1)", "PREV(dt)"]),
        ],
        "ts": [
            sub["ts"].map(lambda x: f"({x} + INTERVAL '90' SECOND)"),
            sub["ts"].map(lambda x: f"({x} - INTERVAL '1' YEAR)"),
            sub["date"].map(lambda x: f"CAST({x} AS TIMESTAMP)"),
            st.tuples(sub["ts"], sub["ts"]).map(
                lambda t: f"CASE WHEN ({t[0]} - {t[1]}) > INTERVAL '1' MINUTE THEN {t[0]} "
                          f"ELSE {t[1]} END"),
            st.sampled_from(["MAX(ts)", "FIRST(ts)", "NEXT(B.ts, 2)"]),
        ],
    }
    return st.one_of(leaf, *forms[kind])


@st.composite
def clauses(draw):
    define_a = draw(expr("bool", 2))
    define_b = draw(expr("bool", 2))
    measures = [f"{draw(expr(k, 2))} AS m{n}" for n, k in
                enumerate(draw(st.lists(st.sampled_from(["num", "str", "bool", "date", "ts"]),
                                        min_size=1, max_size=3)))]
    rows = draw(st.sampled_from(["ONE ROW PER MATCH", "ALL ROWS PER MATCH",
                                 "ALL ROWS PER MATCH WITH UNMATCHED ROWS"]))
    pattern = draw(st.sampled_from(["A B*", "(A | B)+", "A* B?", "PERMUTE(A, B)", "A+? B"]))
    mode = draw(st.sampled_from(["", "", "ALL MATCHES", "MAXIMAL MATCH", "INCREMENTAL MATCH"]))
    within = draw(st.sampled_from(["", "", "WITHIN INTERVAL '1' DAY", "INTERVAL 30 SECONDS"]))
    return (f"ORDER BY ts, id MEASURES {', '.join(measures)} {rows} {mode} PATTERN ({pattern}) "
            f"{within} DEFINE A AS {define_a}, B AS {define_b}")


@settings(max_examples=1500 if FULL else 300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(clauses())
def test_random_expressions_raise_only_gpu_mr_errors(clause):
    try:
        gpu_mr.match_recognize(TABLE, clause, engine="reference")
    except GpuMrError:
        pass
