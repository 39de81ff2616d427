"""Property-based differential tests: random patterns, DEFINEs and data.

The reference engine's search (Pike VM with merging, caching and dead-state
memo, and the drivers of the matching modes and time limits) must find
exactly the matches that plain backtracking finds (tests/naive.py). CI runs a
solid sample; GPU_MR_FULL_TESTS=1 runs many more.
"""

from __future__ import annotations

import itertools
import os

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_mr.analysis import analyze
from gpu_mr.engines.reference import ReferenceEngine
from gpu_mr.errors import MatchRuntimeError
from gpu_mr.frames import sort_for_matching
from gpu_mr.syntax import ast as A
from gpu_mr.syntax import parse_clause

from naive import SkipError, naive_matches

FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"
EXAMPLES = 3000 if FULL else 250

VARS = ("A", "B", "C")

ROW_LOCAL = ["a > {k}", "b = {k}", "a < PREV(a)", "c >= NEXT(c)", "a + b > {k}",
             "TRUE", "a <> b", "PREV(b, 2) IS NULL", "{v}.a >= {k}"]
STATEFUL = ["COUNT({v}.*) < {k}", "a > LAST({w}.a)", "FIRST(a) = a", "SUM({v}.b) <= {k}",
            "PREV(CLASSIFIER()) = '{w}'", "{w}.b IS NULL", "a >= MAX(b)",
            "COUNT(*) <= {k}", "LAST({w}.c, 1) < c", "MATCH_NUMBER() <= {k}"]


def patterns(depth: int = 3):
    leaf = st.one_of(st.sampled_from(VARS).map(lambda v: A.PVar(name=v)),
                     st.just(A.PEmpty()) | st.sampled_from(["^", "$"]).map(
                         lambda k: A.PAnchor(kind=k)))
    leaf = st.sampled_from(VARS).map(lambda v: A.PVar(name=v)) | leaf

    def extend(children):
        quant = st.tuples(children, st.sampled_from([(0, None), (1, None), (0, 1), (2, 2),
                                                     (1, 3), (0, 2), (2, None)]),
                          st.booleans(), st.integers(0, 3)).map(
            lambda t: A.PQuant(body=t[0], min=t[1][0], max=t[1][1], greedy=t[2],
                               # possessive (ESL-TS's star) on single variables, now and then
                               possessive=t[2] and t[3] == 0 and isinstance(t[0], A.PVar)))
        concat = st.lists(children, min_size=2, max_size=3).map(
            lambda xs: A.PConcat(items=tuple(xs)))
        alt = st.lists(children, min_size=2, max_size=3).map(lambda xs: A.PAlt(items=tuple(xs)))
        permute = st.lists(children, min_size=2, max_size=3).map(
            lambda xs: A.PPermute(items=tuple(xs)))
        return quant | concat | alt | permute
    return st.recursive(leaf, extend, max_leaves=6)


@st.composite
def queries(draw, stateful: bool):
    pattern = draw(patterns())
    text = pattern.to_sql()
    used = [v for v in VARS if v in text.replace("PERMUTE", "")]
    defines = []
    for v in used:
        if draw(st.booleans()) or not stateful:
            templates = ROW_LOCAL + (STATEFUL if stateful else [])
            t = draw(st.sampled_from(templates))
            w = draw(st.sampled_from(used))
            k = draw(st.integers(0, 3))
            defines.append(f"{v} AS {t.format(v=v, w=w, k=k)}")
    skip = draw(st.sampled_from(["PAST LAST ROW", "TO NEXT ROW"] +
                                [f"TO {fl} {v}" for fl in ("FIRST", "LAST") for v in used]))
    within = draw(st.sampled_from(["", "", "", " WITHIN INTERVAL '2' SECOND",
                                   " WITHIN INTERVAL '4' SECOND", " INTERVAL 3 SECONDS"]))
    mode = draw(st.sampled_from(["", "", "", " ALL MATCHES", " MAXIMAL MATCH",
                                 " INCREMENTAL MATCH"]))
    if draw(st.integers(0, 9)) == 0 and mode in ("", " ALL MATCHES"):
        skip = "TO CURRENT ROW"
    clause = (f"PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP {skip}{mode} "
              f"PATTERN ({text}){within}" + (f" DEFINE {', '.join(defines)}" if defines else ""))
    return clause


@st.composite
def tables(draw):
    n = draw(st.integers(0, 9))
    small = st.one_of(st.none(), st.integers(0, 3)) if draw(st.booleans()) else st.integers(0, 3)
    return pa.table({
        "p": pa.array([draw(st.integers(0, 1)) for _ in range(n)], pa.int64()),
        "id": pa.array(list(range(n)), pa.int64()),
        # the clock for WITHIN: never decreasing with id, uneven gaps, ties kept in order
        "ts": pa.array(list(itertools.accumulate(draw(st.integers(0, 2)) for _ in range(n))),
                       pa.int64()).cast(pa.timestamp("s")),
        "a": pa.array([draw(st.integers(0, 3)) for _ in range(n)], pa.int64()),
        "b": pa.array([draw(small) for _ in range(n)], pa.int64()),
        "c": pa.array([draw(st.integers(0, 3)) for _ in range(n)], pa.int64()),
    })


def _compare(clause: str, table: pa.Table) -> None:
    query = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    try:
        want = naive_matches(query, data)
    except (SkipError, RecursionError):
        want = "error"
    try:
        got = [(m.partition, m.number, m.start, m.end, m.labels)
               for m in ReferenceEngine().find_matches(query, data)]
    except MatchRuntimeError:
        got = "error"
    assert got == want, f"\n{clause}\n{table.to_pydict()}\nengine: {got}\nnaive:  {want}"


SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(queries(stateful=False), tables())
def test_row_local_defines_match_naive_backtracking(clause, table):
    _compare(clause, table)


@SETTINGS
@given(queries(stateful=True), tables())
def test_stateful_defines_match_naive_backtracking(clause, table):
    _compare(clause, table)
