"""The register engine (gpu_mr/engines/registers.py) against the reference engine.

Unit tests for what it declines and for its building blocks, and a
hypothesis differential test: random patterns, random state-dependent
DEFINEs (the templates of tests/test_differential.py and more: aggregates,
SUBSET references, FIRST/LAST, CLASSIFIER history, expressions that raise),
random data, every AFTER MATCH SKIP mode; the matches (start, end, labels,
exclusion marks, numbers) and the errors must be identical. A share of the
generated queries must be supported, so the test cannot pass vacuously.
CI runs a sample; GPU_MR_FULL_TESTS=1 runs many more.
"""

from __future__ import annotations

import itertools
import os
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_mr.analysis import analyze
from gpu_mr.engines import registers as R
from gpu_mr.engines.reference import ReferenceEngine
from gpu_mr.errors import GpuMrError
from gpu_mr.frames import sort_for_matching
from gpu_mr.kernels import registers as K
from gpu_mr.syntax import parse_clause

from test_differential import ROW_LOCAL, STATEFUL, patterns

FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"
EXAMPLES = 3000 if FULL else 150

VARS = ("A", "B", "C")
MORE_STATEFUL = [
    "AVG({v}.a) >= {k}", "MIN({w}.c) < c", "MAX(a) > {k}", "COUNT({w}.b) >= {k}",
    "SUM(a) > {k}", "FIRST({w}.a, 1) <= a", "LAST(CLASSIFIER()) = '{w}'",
    "PREV(CLASSIFIER(), 2) <> '{w}'", "CLASSIFIER({w}) = '{w}'", "U.a < a", "COUNT(U.*) <= {k}",
    "LAST(U.b) IS NOT NULL", "{w}.a / (b - 1) >= 0", "SUM({w}.a * 2) / {k} >= 1",
    "AVG(b + 0.5) < {k}", "COUNT_IF({w}.a > 1) < 2", "a * 1.0 > AVG({w}.c)",
    "PREV({w}.a) = a", "NEXT({w}.c, 2) > {k}", "PREV(LAST({w}.a), 1) < a",
    "{w}.a BETWEEN {k} AND 3", "{w}.b IN (1, {k}) OR FIRST(c) = {k}",
    "CASE WHEN {w}.a > 1 THEN a ELSE -a END > MIN(b)", "COALESCE({w}.b, a) = {k}",
    "ABS({w}.a - a) <= 1 AND NOT (COUNT(*) > 4)", "COALESCE(BOOL_OR({w}.a = {k}), FALSE) = FALSE",
    "MATCH_NUMBER() + COUNT(*) < 5", "FIRST(CLASSIFIER({w})) = '{w}'",
]
# Row-local parts reading strings or timestamps beside the match so far: the
# parts are columns masks.py fills (three-valued, raising where the
# interpreter does: 10 / LENGTH('') raises, only where it is reached).
MASKED = [
    "{v}.s = 'x' AND COUNT(*) > {k}", "s LIKE 'x%' OR {w}.a > a",
    "PREV(s) = s AND SUM(a) > {k}", "UPPER(s) <> 'Y' AND LAST({w}.a) >= a",
    "COUNT(*) < {k} AND 10 / LENGTH(s) > 3", "NOT (s IN ('x', 'y')) OR MAX({w}.c) > {k}",
    "COALESCE(s, 'z') = 'z' AND MATCH_NUMBER() <= {k}", "LENGTH(s) > MIN({w}.a)",
    "ts > PREV(ts) AND COUNT({w}.*) >= {k}", "ts - PREV(ts) <= INTERVAL '1' SECOND OR {w}.c > c",
    "CASE WHEN s = 'x' THEN a ELSE {k} END >= AVG({w}.b)", "s IS NULL OR FIRST({w}.a) = a",
    # in aggregates' arguments, at each aggregated row
    "SUM(CASE WHEN {w}.s = 'x' THEN {w}.a ELSE 0 END) > {k}", "COUNT_IF(s LIKE 'x%') < {k}",
    "AVG(LENGTH({w}.s)) >= 1", "COUNT_IF(CLASSIFIER() = '{w}' AND s = 'x') < {k}",
    "SUM(10 / LENGTH({w}.s)) > {k}",
    "ts > PREV(ts) AND dur IS NOT NULL AND COUNT(*) > {k}",
    # ... and of another variable's row: read at its last row (no row: NULLs)
    "UPPER({w}.s) <> 'Y' OR {w}.a > a", "LENGTH({w}.s) > {k}", "COALESCE({w}.s, 'q') = 'q'",
    "{w}.s LIKE 'x%' AND COUNT(*) > 1", "10 / LENGTH({w}.s) > 3 OR a > {k}",
]
# Strings of other rows, generated as codes that order as the strings do.
STRINGS = [
    "{w}.s = s", "LAST({w}.s) <> s", "{w}.s < 'xy'", "FIRST(s) >= {w}.s",
    "{w}.s IN ('x', 'Y', 'zz')", "PREV({w}.s) = s OR {w}.s IS NULL", "NULLIF({w}.s, 'x') IS NULL",
    "{w}.s BETWEEN 'Y' AND 'y'", "COUNT({w}.s) > {k} AND {w}.s <> s", "'é' > LAST({w}.s, 1)",
]
# Decimals of other rows, generated as unscaled int64s (doubles where the
# interpreter makes one: compared with a double, or divided).
DECIMALS = [
    "{w}.m < m", "m - {w}.m > 0.5", "{w}.m * m >= {k}", "LAST({w}.m) + a > m",
    "-{w}.m <= m - 1", "m / {w}.m < 1.5", "{w}.m > {w}.a * 1.0", "GREATEST({w}.m, PREV(m)) = m",
]
# Dates of other rows: their midnights in nanoseconds; plus an interval,
# floored to the day as the interpreter does.
DATES = [
    "{w}.day - day <= INTERVAL '1' DAY", "day > LAST({w}.day) + INTERVAL '12' HOUR",
    "{w}.day + {k} >= day", "day - {w}.ts < INTERVAL '2' DAY", "FIRST(day) = DATE '1970-01-02'",
    "{w}.day - INTERVAL '1' SECOND < day - 1",
]
# Aggregates of those: MIN/MAX of decimals, timestamps, dates, strings;
# SUM of decimals and intervals.
AGGREGATED = [
    "MIN({w}.m) < m", "SUM({w}.m) > {k}", "MAX({w}.day) >= day",
    "ts - MIN({w}.ts) <= INTERVAL '2' SECOND", "MAX({w}.s) <= s", "ANY_VALUE({w}.s) = 'x'",
    "SUM({w}.dur) > INTERVAL '0.003' SECOND", "MIN(s) < 'y' OR MAX(m) IS NULL",
]
# Timestamps and intervals of other rows, generated as int64 nanoseconds.
TEMPORAL = [
    "ts - FIRST(ts) < INTERVAL '3' SECOND", "LAST({w}.ts) + INTERVAL '1' SECOND <= ts",
    "{w}.ts - ts >= -(INTERVAL '2' SECOND)", "(ts - {w}.ts) * {k} < INTERVAL '4' SECOND",
    "PREV({w}.ts) < TIMESTAMP '1970-01-01 00:00:03'", "{w}.dur + dur > INTERVAL '0.002' SECOND",
    "GREATEST({w}.ts, ts - INTERVAL '1' SECOND) = ts", "COALESCE(LAST({w}.dur), dur) <= dur",
]
DECLINED = ["COUNT(DISTINCT {w}.a) < 3", "ARRAY_AGG({w}.a) IS NULL", "STDDEV({w}.a) > 1",
            "COALESCE({w}.s, 'x') = s"]


@st.composite
def queries(draw):
    pattern = draw(patterns())
    text = pattern.to_sql()
    used = [v for v in VARS if v in text.replace("PERMUTE", "")]
    subset = draw(st.lists(st.sampled_from(used), min_size=1, max_size=2, unique=True)) \
        if used else []
    templates = (ROW_LOCAL + STATEFUL + MORE_STATEFUL * 2 + MASKED + TEMPORAL + STRINGS
                 + DECIMALS + DATES + AGGREGATED + DECLINED)
    defines = []
    for v in used:
        if draw(st.integers(0, 3)) > 0:
            t = draw(st.sampled_from(templates))
            if "U." in t and not subset:
                t = ROW_LOCAL[0]
            w = draw(st.sampled_from(used))
            k = draw(st.integers(0, 3))
            defines.append(f"{v} AS {t.format(v=v, w=w, k=k)}")
    skip = draw(st.sampled_from(["PAST LAST ROW", "TO NEXT ROW"] +
                                [f"TO {fl} {v}" for fl in ("FIRST", "LAST")
                                 for v in used + (["U"] if subset else [])]))
    extra = draw(st.sampled_from([""] * 12 + [" ALL MATCHES", " WITHIN INTERVAL '2' SECOND"]))
    within = extra if "WITHIN" in extra else ""
    mode = extra if "WITHIN" not in extra else ""
    subsets = f" SUBSET U = ({', '.join(subset)})" if subset else ""
    return (f"PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP {skip}{mode} "
            f"PATTERN ({text}){within}{subsets}"
            + (f" DEFINE {', '.join(defines)}" if defines else ""))


@st.composite
def tables(draw):
    n = draw(st.integers(0, 10))
    small = st.one_of(st.none(), st.integers(0, 3)) if draw(st.booleans()) else st.integers(0, 3)
    return pa.table({
        "p": pa.array([draw(st.integers(0, 1)) for _ in range(n)], pa.int64()),
        "ts": pa.array(list(itertools.accumulate(draw(st.integers(0, 2)) for _ in range(n))),
                       pa.int64()).cast(pa.timestamp("s")),
        "a": pa.array([draw(st.integers(0, 3)) for _ in range(n)], pa.int64()),
        "b": pa.array([draw(small) for _ in range(n)], pa.int64()),
        "c": pa.array([draw(st.integers(0, 3)) for _ in range(n)], pa.int64()),
        "s": pa.array([draw(st.sampled_from([None, "x", "xy", "y", "", "Y", "é"]))
                       for _ in range(n)], pa.string()),
        "dur": pa.array([draw(st.one_of(st.none(), st.integers(0, 3))) for _ in range(n)],
                        pa.int64()).cast(pa.duration("ms")),
        "m": decimals(draw, n),
        "day": days(draw, n),
    })


def decimals(draw, n: int) -> pa.Array:
    """A DECIMAL(6, 2) column for the templates above (some NULL)."""
    pick = st.sampled_from([None, "-1.50", "0.00", "0.25", "1.00", "2.75", "1000.05"])
    return pa.array([None if v is None else Decimal(v) for v in (draw(pick) for _ in range(n))],
                    pa.decimal128(6, 2))


def days(draw, n: int) -> pa.Array:
    """A DATE column for the templates above (some NULL), days from 1970-01-01."""
    pick = st.one_of(st.none(), st.integers(0, 4))
    return pa.array([draw(pick) for _ in range(n)], pa.int32()).cast(pa.date32())


def _outcome(run):
    try:
        return [(m.partition, m.number, m.start, m.end, m.labels, m.excluded) for m in run()]
    except GpuMrError as exc:
        return ("error", type(exc).__name__, str(exc))


def _compare(clause: str, table: pa.Table, jit: bool = False) -> bool:
    """Compare with the reference engine; False when the query is declined."""
    query = analyze(parse_clause(clause), table.schema)
    reason = R.supports(query)
    if reason is not None:
        assert isinstance(reason, str) and reason
        return False
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    want = _outcome(lambda: ReferenceEngine().find_matches(query, data))
    got = _outcome(lambda: R.find_matches(query, data, jit=jit).to_matches())
    assert got == want, f"\n{clause}\n{table.to_pydict()}\nregisters: {got}\nreference: {want}"
    return True


SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_SUPPORTED = []


@SETTINGS
@given(queries(), tables())
def test_register_engine_matches_reference(clause, table):
    _SUPPORTED.append(_compare(clause, table))


@st.composite
def other_types_queries(draw):
    """Queries whose first variable's DEFINE has a masked part, or reads a
    string, a timestamp or an interval of another row."""
    pattern = draw(patterns())
    text = pattern.to_sql()
    used = [v for v in VARS if v in text.replace("PERMUTE", "")] or ["A"]
    if used == ["A"] and "A" not in text:
        text = f"({text}) A"
    defines = []
    for i, v in enumerate(used):
        other = MASKED + TEMPORAL + STRINGS + DECIMALS + DATES + AGGREGATED
        t = draw(st.sampled_from(other if i == 0 else other + ROW_LOCAL + STATEFUL))
        w, k = draw(st.sampled_from(used)), draw(st.integers(0, 3))
        defines.append(f"{v} AS {t.format(v=v, w=w, k=k)}")
    skip = draw(st.sampled_from(["PAST LAST ROW", "TO NEXT ROW"] +
                                [f"TO {fl} {v}" for fl in ("FIRST", "LAST") for v in used]))
    return (f"PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP {skip} "
            f"PATTERN ({text}) DEFINE {', '.join(defines)}")


@settings(max_examples=EXAMPLES * 2, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(other_types_queries(), tables())
def test_strings_timestamps_and_masked_parts_match_the_reference_engine(clause, table):
    assert _compare(clause, table), clause


def _beyond_int64_cases() -> list:
    """(table, clause) pairs whose values or results leave int64 in the
    register machine's form: a timestamp sum past 2262, a column in seconds
    no int64 holds in nanoseconds, dates past 2262, a decimal product past
    int64, a decimal no int64 holds."""
    late = np.array(["2262-04-10T00:00:00", "2262-04-11T00:00:00"], dtype="datetime64[s]")
    far = np.array(["3000-01-01T00:00:00", "3000-01-02T00:00:00"], dtype="datetime64[s]")
    stamps = ("ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B) "
              "DEFINE B AS A.ts + INTERVAL '10' DAY > ts")
    days = ("ORDER BY day MEASURES COUNT(*) AS n PATTERN (A B) "
            "DEFINE B AS B.day - A.day <= INTERVAL '1' DAY")
    products = ("ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B+) "
                "DEFINE B AS B.m * A.m > A.m OR B.m < A.m")
    big = Decimal(2**62)
    return [(pa.table({"ts": pa.array(late)}), stamps), (pa.table({"ts": pa.array(far)}), stamps),
            (pa.table({"day": pa.array(far.astype("datetime64[D]"))}), days)] + [
        (pa.table({"ts": pa.array(range(3), pa.int64()),
                   "m": pa.array(values, pa.decimal128(38, 0))}), products)
        for values in ([big, big, Decimal(3)], [big * 4, Decimal(1), Decimal(2)])]


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("case", range(5))
def test_values_beyond_int64_go_to_the_reference_engine(case, jit):
    # exact either way: the kernel stops where a value leaves int64, or the
    # columns are not loaded, and the reference engine runs the partition
    if jit:
        pytest.importorskip("numba")
    table, clause = _beyond_int64_cases()[case]
    q = analyze(parse_clause(clause), table.schema)
    assert R.supports(q) is None and not R._plan(q).masked
    data = sort_for_matching(table, q.partition_columns, q.order_keys)
    want = ReferenceEngine().find_matches(q, data)
    got = R.find_matches(q, data, jit=jit)            # a list where the reference ran
    got = got.to_matches() if hasattr(got, "to_matches") else got
    assert got == want and len(want) == 1
    import gpu_mr
    assert gpu_mr.match_recognize(table, clause, engine="cpu").num_rows == 1


def _same_on_registers_as_reference(table: pa.Table, define: str, jit: bool,
                                    masked_parts: bool = False,
                                    pattern: str = "(A B+)") -> None:
    """The register machine runs ``A B+`` with ``define`` (SKIP TO NEXT ROW,
    partitions by ``p`` where the table has it), with no masked part unless
    ``masked_parts``, and finds the reference engine's matches (some)."""
    if jit:
        pytest.importorskip("numba")
    by = "PARTITION BY p " if "p" in table.column_names else ""
    clause = (f"{by}ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP TO NEXT ROW "
              f"PATTERN {pattern} DEFINE {define}")
    q = analyze(parse_clause(clause), table.schema)
    assert R.supports(q) is None and (masked_parts or not R._plan(q).masked), clause
    data = sort_for_matching(table, q.partition_columns, q.order_keys)
    want = _outcome(lambda: ReferenceEngine().find_matches(q, data))
    assert want and want[0] != "error"
    assert _outcome(lambda: R.find_matches(q, data, jit=jit).to_matches()) == want, clause


_DECIMAL_TABLE = pa.table({
    "p": pa.array([0] * 6 + [1] * 4, pa.int64()),
    "ts": pa.array(range(10), pa.int64()),
    "a": pa.array([1, 2, 3, 1, 0, 2, 3, 1, 2, 2], pa.int64()),
    "x": pa.array([1.0, 2.5, 0.25, 3.0, 1.5, 2.0, 0.5, 1.75, 2.0, 1.0]),
    "m": pa.array([Decimal(v) if v else None for v in
                   ["1.50", "2.25", "0.75", None, "3.00", "1.00", "2.00", "1.75", "0.50", "2.50"]],
                  pa.decimal128(6, 2)),
})


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("define", [
    "B AS LAST(A.m) + B.a > B.m",               # a BIGINT at the decimal's scale
    "B AS A.m < B.a",
    "B AS A.m * B.m >= 2",                      # a product's scale, 4
    "B AS B.m - A.m > 0.5",                     # compared with a double: as doubles
    "B AS B.m / A.m < 1.5",                     # a quotient is a double
    "B AS A.m > B.x OR -A.m < -B.m + 1",
])
def test_decimals_of_other_rows_compute_as_decimals(define, jit):
    _same_on_registers_as_reference(_DECIMAL_TABLE, define, jit)


_DATE_TABLE = pa.table({
    "ts": pa.array(range(8), pa.int64()),
    "day": pa.array([0, 1, 1, 3, None, 4, 6, 7], pa.int32()).cast(pa.date32()),
})


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("define", [
    "B AS B.day - INTERVAL '1' SECOND = A.day",     # floored to the day before
    "B AS A.day + INTERVAL '36' HOUR = B.day",      # floored to the next day
    "B AS A.day + 2 > B.day AND B.day <> A.day",
    "B AS B.day - A.day = INTERVAL '2' DAY OR LAST(A.day) > DATE '1970-01-05'",
])
def test_dates_of_other_rows_compute_as_dates(define, jit):
    _same_on_registers_as_reference(_DATE_TABLE, define, jit)


_ZONED_TABLE = pa.table({
    "ts": pa.array([0, 1, 3, 4, 8, 9, 10, 20], pa.int64()).cast(
        pa.timestamp("s", tz="America/New_York")),
    "day": pa.array([0, 0, 0, 0, 0, 0, 0, 1], pa.int32()).cast(pa.date32()),
})


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("define", [
    "B AS B.ts - A.ts <= INTERVAL '3' SECOND",      # zoned timestamps are instants
    "B AS LAST(A.ts) + INTERVAL '2' SECOND > B.ts AND A.ts < TIMESTAMP '1970-01-01 00:00:05'",
    "B AS B.day > A.ts OR MIN(A.ts) < B.ts - INTERVAL '5' SECOND",
])
def test_zoned_timestamps_of_other_rows_compute_as_instants(define, jit):
    _same_on_registers_as_reference(_ZONED_TABLE, define, jit)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("define", [
    "B AS UPPER(A.u) = 'M' OR B.u = A.u",        # A may have no row: NULL, then UPPER NULL
    "B AS COALESCE(LOWER(A.u), 'none') = 'none'",   # no row: COALESCE gives 'none'
    "B AS A.u LIKE '%x' OR A.u IS NULL",
    "B AS LENGTH(PREV(A.u)) = 1 AND B.u > A.u",  # PREV of A's last row
])
def test_parts_at_another_variables_row(define, jit):
    _same_on_registers_as_reference(_STRING_TABLE, define, jit, masked_parts=True,
                                    pattern="(A? B+)")


_STRING_TABLE = pa.table({
    "p": pa.array([0] * 8 + [1] * 4, pa.int64()),
    "ts": pa.array(range(12), pa.int64()),
    # first seen in an order other than the sorted one, with code points past ASCII
    "u": pa.array(["m", "c", "x", "c", None, "é", "b", "m", "x", "m", "zz", "n"]),
})


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("define", [
    "B AS B.u > A.u",                           # ordering of two rows' strings
    "B AS B.u <= LAST(A.u) AND B.u <> A.u",
    "B AS A.u < 'd' AND B.u >= 'n'",            # literals absent from the data
    "B AS A.u = 'm' OR B.u = 'é'",              # ... and present
    "B AS A.u = 'l' OR B.u < A.u",              # equal to no value, just below 'm'
    "B AS B.u BETWEEN A.u AND 'y' AND A.u IN ('c', 'zz', 'q')",
])
def test_strings_of_other_rows_compare_as_strings(define, jit):
    _same_on_registers_as_reference(_STRING_TABLE, define, jit, masked_parts=True)


_MASKED_TABLE = pa.table({
    "p": pa.array([0, 0, 0, 0, 0, 1, 1, 1, 1], pa.int64()),
    "ts": pa.array(range(9), pa.int64()).cast(pa.timestamp("s")),
    "a": pa.array([1, 2, 3, 4, 5, 1, 2, 3, 4], pa.int64()),
    "s": pa.array(["x", None, "", "y", "x", "y", None, "x", "x"], pa.string()),
})


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("define, outcome", [
    # NOT of a NULL comparison is NULL, so the row fails unless COUNT decides
    ("A AS NOT (s = 'x') OR COUNT(*) > 3", "matches"),
    ("A AS s IS NULL OR NOT (s = 'y')", "matches"),
    # 10 / LENGTH('') raises where it is reached, and only there
    ("A AS COUNT(*) >= 1 AND 10 / LENGTH(s) > 3", "error"),
    ("A AS s IS NULL OR (s <> '' AND 10 / LENGTH(s) > 3)", "matches"),
    ("A AS 10 / LENGTH(s) > 3 OR TRUE", "error"),
    # PREV does not cross partitions: NULL at each partition's first row
    ("A AS PREV(s) IS NULL AND COUNT(*) = 1", "matches"),
    ("A AS CAST(ts AS DATE) = CAST(PREV(ts) AS DATE) OR COUNT(*) = 1", "matches"),
    # an aggregate's argument: its error raises when the aggregate is read
    ("A AS COUNT(*) < 3 OR SUM(10 / LENGTH(A.s)) > 0", "error"),
    # CLASSIFIER() in an argument is each aggregated row's own label
    ("A AS TRUE, B AS COUNT_IF(CLASSIFIER() = 'A' AND s = 'x') = 1", "matches"),
    ("A AS SUM(CASE WHEN s = 'x' THEN 1 ELSE 0 END) <= 2", "matches"),
])
def test_masked_parts_keep_nulls_errors_and_partition_edges(define, outcome, jit):
    if jit:
        pytest.importorskip("numba")
    clause = f"PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B?) DEFINE {define}"
    if "B AS" not in define:
        clause = clause.replace("(A B?)", "(A+ B?)")
    q = analyze(parse_clause(clause), _MASKED_TABLE.schema)
    assert R.supports(q) is None and R._plan(q).masked, clause
    data = sort_for_matching(_MASKED_TABLE, q.partition_columns, q.order_keys)
    want = _outcome(lambda: ReferenceEngine().find_matches(q, data))
    got = _outcome(lambda: R.find_matches(q, data, jit=jit).to_matches())
    assert got == want, (clause, got, want)
    assert (want[0] == "error") == (outcome == "error") and want, want


def test_a_good_share_of_generated_queries_is_supported():
    if len(_SUPPORTED) < 50:
        pytest.skip("runs after the differential test")
    share = sum(_SUPPORTED) / len(_SUPPORTED)
    assert share > 0.5, share


# ------------------------------------------------------------------ unit tests

def _query(clause: str, schema=None):
    schema = schema or pa.schema([("p", pa.int64()), ("ts", pa.int64()), ("a", pa.int64()),
                                  ("b", pa.int64()), ("c", pa.int64()), ("x", pa.float64()),
                                  ("s", pa.string())])
    return analyze(parse_clause(clause), schema)


@pytest.mark.parametrize("define, reason", [
    ("B AS COUNT(DISTINCT B.a) < 3", "DISTINCT"),
    ("B AS ARRAY_AGG(B.a) IS NULL", "ARRAY_AGG"),
    ("B AS A.s = CLASSIFIER()", "CLASSIFIER"),
    ("B AS ROUND(B.x) > A.x", "ROUND"),
    ("B AS FIRST(CLASSIFIER(), 1) = 'A'", "CLASSIFIER"),
])
def test_declined_constructs_name_the_reason(define, reason):
    q = _query(f"ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B+) DEFINE {define}")
    got = R.supports(q)
    assert got is not None and reason in got, got


@pytest.mark.parametrize("extra", ["ALL MATCHES", "MAXIMAL MATCH", "INCREMENTAL MATCH"])
def test_matching_modes_are_declined(extra):
    q = _query(f"ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP PAST LAST ROW {extra} "
               f"PATTERN (A B+) DEFINE B AS B.a > A.a")
    assert "MATCH" in R.supports(q)


def test_skip_to_current_row_is_declined_and_time_limits_run():
    schema = pa.schema([("ts", pa.timestamp("s")), ("a", pa.int64())])
    q = _query("ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B+) WITHIN INTERVAL '5' SECOND "
               "DEFINE B AS B.a > A.a", schema)
    assert R.supports(q) is None       # tests/test_time_limits.py checks its matches
    q = _query("ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP TO CURRENT ROW "
               "PATTERN (A B+) DEFINE B AS B.a > A.a", schema)
    assert "CURRENT ROW" in R.supports(q)


def test_int64_helpers_follow_python_integers():
    rng = np.random.default_rng(5)
    big = 2**63
    values = [0, 1, -1, 2, -2, 3, 2**31, -2**32, big - 1, -big] + \
        [int(x) for x in rng.integers(-big, big - 1, 200, dtype=np.int64)]
    for a in values:
        for b in values[:40]:
            for fn, exact in ((K.add_i64, a + b), (K.sub_i64, a - b), (K.mul_i64, a * b)):
                r, ok = fn(a, b)
                assert ok == (-big <= exact < big) and (not ok or r == exact), (fn, a, b)
            if b:
                q = abs(a) // abs(b)
                q = q if (a >= 0) == (b >= 0) else -q
                for rem, exact in ((False, q), (True, a - b * q)):
                    r, ok = K.div_i64(a, b, rem)
                    assert ok == (-big <= exact < big) and (not ok or r == exact), (a, b, rem)


def test_int_double_comparison_is_exact_or_falls_back():
    assert K.cmp_if(0, 3, 3.0) == (True, True)
    assert K.cmp_if(1, 3, float("nan")) == (True, True)
    assert K.cmp_if(2, 3, float("nan")) == (False, True)
    assert K.cmp_if(4, 2**53 + 1, float(2**53))[1] is False


_TICKS_QUERIES = [
    "PATTERN (A B C* D E* F+) DEFINE B AS price < PREV(price), C AS price < PREV(price), "
    "D AS price > PREV(price), E AS price > PREV(price), F AS F.price > A.price",
    "PATTERN (A B+ C) DEFINE B AS B.price < AVG(B.price) * 1.01, C AS C.price > A.price",
    "AFTER MATCH SKIP TO LAST B PATTERN (A B+ C+) DEFINE B AS price < LAST(A.price) AND "
    "COUNT(B.*) < 20, C AS price > MIN(B.price) + 0.5 * (FIRST(B.price) - MIN(B.price))",
    "AFTER MATCH SKIP TO NEXT ROW PATTERN (A (B | C){2,4} D) DEFINE B AS PREV(CLASSIFIER()) "
    "<> 'B' AND price < A.price, C AS price > A.price, D AS SUM(volume) > 300",
]


# numba compiles each query's kernel once (seconds; cached on disk after)
_JIT_CASES = [(b, True) for b in (_TICKS_QUERIES if FULL else _TICKS_QUERIES[:1])]


@pytest.mark.parametrize("body, jit", [(b, False) for b in _TICKS_QUERIES] + _JIT_CASES)
def test_tick_queries_equal_reference(body, jit):
    if jit:
        pytest.importorskip("numba")
    from gpu_mr.demo import generate_ticks
    table = generate_ticks(rows=600, symbols=3, seed=7)
    clause = "PARTITION BY symbol ORDER BY ts MEASURES COUNT(*) AS n " + body
    q = analyze(parse_clause(clause), table.schema)
    assert R.supports(q) is None
    data = sort_for_matching(table, q.partition_columns, q.order_keys)
    want = ReferenceEngine().find_matches(q, data)
    got = R.find_matches(q, data, jit=jit)
    assert got.to_matches() == want
    assert len(want) > 0


def test_errors_and_skip_errors_are_the_reference_engines():
    table = pa.table({"ts": pa.array(range(6), pa.int64()), "a": pa.array([1, 2, 3, 1, 2, 3]),
                      "b": pa.array([1, 1, 0, 1, 1, 1])})
    for clause in [
        "ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B+) DEFINE B AS A.a / b > 0",
        "ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B+) DEFINE B AS SUM(B.a / B.b) > 0",
        "ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP TO FIRST A PATTERN (A B+) "
        "DEFINE B AS B.a > A.a",
        "ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP TO LAST C PATTERN (A B+ C?) "
        "DEFINE B AS B.a > A.a",
    ]:
        q = analyze(parse_clause(clause), table.schema)
        assert R.supports(q) is None, clause
        data = sort_for_matching(table, q.partition_columns, q.order_keys)
        want = _outcome(lambda: ReferenceEngine().find_matches(q, data))
        got = _outcome(lambda: R.find_matches(q, data).to_matches())
        assert want[0] == "error" and got == want, (clause, got, want)


def test_buffers_grow_for_long_matches_and_many_threads(monkeypatch):
    monkeypatch.setattr(R, "INITIAL_SIZES", (1, 1, 1, 1, 1, 1))
    n = 200
    table = pa.table({"ts": pa.array(range(n), pa.int64()),
                      "a": pa.array(np.arange(n) % 7, pa.int64())})
    clause = ("ORDER BY ts MEASURES COUNT(*) AS n PATTERN ((A | B)* C) "
              "DEFINE A AS COUNT(A.*) < 6, B AS a <> 3, C AS LAST(A.a) = a")
    q = analyze(parse_clause(clause), table.schema)
    assert R.supports(q) is None
    data = sort_for_matching(table, q.partition_columns, q.order_keys)
    want = ReferenceEngine().find_matches(q, data)
    got = R.find_matches(q, data, jit=False)
    assert got.to_matches() == want and len(want) > 0


@pytest.mark.parametrize("jit", [False, True])
def test_growth_resumes_mid_partition_and_a_fallback_drops_that_partitions_output(
        monkeypatch, jit):
    # every buffer starts at one entry, so the output grows many times inside
    # partition "x" (the kernel resumes there, keeping what it found), and then
    # an int beyond 2**53 is compared with a double at its end: the reference
    # engine reruns "x" alone, and its output replaces what the kernel kept
    if jit:
        pytest.importorskip("numba")
    monkeypatch.setattr(R, "INITIAL_SIZES", (1, 1, 1, 1, 1, 1))
    big = 2**62
    xs = [1] * 60 + [big, big, big]
    ys = [1] * 45
    table = pa.table({
        "p": pa.array(["x"] * len(xs) + ["y"] * len(ys) + ["z"] * len(ys)),
        "ts": pa.array(range(len(xs) + 2 * len(ys)), pa.int64()),
        "a": pa.array(xs + ys + ys, pa.int64())})
    clause = ("PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n "
              "PATTERN (A B B) DEFINE B AS B.a > A.a - 0.5")
    q = analyze(parse_clause(clause), table.schema)
    assert R.supports(q) is None
    data = sort_for_matching(table, q.partition_columns, q.order_keys)
    want = ReferenceEngine().find_matches(q, data)
    got = R.find_matches(q, data, jit=jit)
    assert got.to_matches() == want and len(want) == 20 + 15 + 15
    # and without the fallback, every partition's matches come from the kernel
    table = table.set_column(2, "a", pa.array(xs[:60] + [1, 1, 1] + ys + ys, pa.int64()))
    data = sort_for_matching(table, q.partition_columns, q.order_keys)
    want = ReferenceEngine().find_matches(q, data)
    assert R.find_matches(q, data, jit=jit).to_matches() == want and len(want) == 51


# ------------------------------------------------- the compiled kernel, random data

_JIT_QUERIES = [_TICKS_QUERIES[0]] + ([
    "AFTER MATCH SKIP TO LAST U PATTERN (A B* C+ | A D) SUBSET U = (A, C) DEFINE "
    "B AS volume > AVG(U.volume) OR PREV(CLASSIFIER(), 2) = 'A', "
    "C AS SUM(C.volume) / (volume - 5) < 100 AND CLASSIFIER(U) <> 'B', "
    "D AS COUNT(*) > 1 AND MIN(price) < A.price",
    "AFTER MATCH SKIP TO NEXT ROW PATTERN (A {- B+ -} C?) DEFINE "
    "B AS price * 2 >= MAX(B.price) AND COALESCE(LAST(B.volume, 1), -1) <> volume, "
    "C AS FIRST(B.price) - price > 0.5 OR COUNT_IF(B.volume > 3) = 2",
] if FULL else [])


@st.composite
def tick_tables(draw):
    n = draw(st.integers(0, 14))
    price = st.one_of(st.floats(-2, 5, allow_nan=False, width=16), st.just(float("nan")),
                      st.none())
    return pa.table({
        "symbol": pa.array([draw(st.sampled_from(["x", "y"])) for _ in range(n)], pa.string()),
        "ts": pa.array(range(n), pa.int64()),
        "price": pa.array([draw(price) for _ in range(n)], pa.float64()),
        "volume": pa.array([draw(st.one_of(st.none(), st.integers(0, 9))) for _ in range(n)],
                           pa.int64()),
    })


@settings(max_examples=600 if FULL else 40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.sampled_from(_JIT_QUERIES), tick_tables())
def test_compiled_kernel_matches_reference_on_random_ticks(body, table):
    pytest.importorskip("numba")
    clause = "PARTITION BY symbol ORDER BY ts MEASURES COUNT(*) AS n " + body
    assert _compare(clause, table, jit=True)


def test_compiled_double_modulo():
    """A double % in a DEFINE compiles (numba has no math.fmod; the kernel
    once failed to type) and follows C's fmod: NaN for an infinite dividend
    or a zero divisor."""
    pytest.importorskip("numba")
    table = pa.table({"symbol": ["x"] * 8, "ts": list(range(8)),
                      "price": [3.0, 5.0, 1.0, float("inf"), 4.0, 3.0, -7.5, 0.0],
                      "volume": [1, 2, 3, 4, 5, 6, 7, 8]})
    clause = ("PARTITION BY symbol ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B) "
              "DEFINE B AS B.price % 2.0 > A.price % 3.0 OR B.price % A.price < -1")
    assert _compare(clause, table, jit=True)


# ------------------------------------------- constants are data, not code

_SWEEPS = [   # (DEFINE with {k}, values of k): one query shape, several constants
    ("B AS B.price < AVG(B.price) * {k}, C AS C.price > A.price", ["1.01", "1.02", "0.5"]),
    ("B AS COUNT(B.*) < {k} AND price < A.price, C AS price > A.price", ["2", "5", "-1"]),
    ("B AS (volume > {k}) = TRUE, C AS price > A.price", ["3", "300"]),
    ("B AS COALESCE(BOOL_OR(B.volume > 5), {k}) AND price < PREV(price), "
     "C AS price > A.price", ["TRUE", "FALSE"]),
    ("B AS PREV(CLASSIFIER()) <> '{k}' AND price < A.price, C AS price > A.price",
     ["B", "A", "Z"]),
    ("B AS volume IN (1, {k}, 7) OR price BETWEEN {k} - 1 AND 100.5, C AS price > A.price",
     ["2", "8"]),
]


def _tick_query(define: str, table: pa.Table):
    clause = ("PARTITION BY symbol ORDER BY ts MEASURES COUNT(*) AS n "
              f"PATTERN (A B+ C) DEFINE {define}")
    q = analyze(parse_clause(clause), table.schema)
    assert R.supports(q) is None, clause
    return q


@pytest.mark.parametrize("define, values", _SWEEPS)
def test_queries_differing_only_in_constants_share_one_kernel(define, values):
    from gpu_mr.demo import generate_ticks
    table = generate_ticks(rows=600, symbols=3, seed=7)
    plans = []
    for k in values:
        q = _tick_query(define.format(k=k), table)
        plans.append(R._plan(q))
        data = sort_for_matching(table, q.partition_columns, q.order_keys)
        want = ReferenceEngine().find_matches(q, data)
        assert R.find_matches(q, data, jit=False).to_matches() == want
    assert len({p.source for p in plans}) == 1
    assert len({id(p.kernel(False)) for p in plans}) == 1
    assert len({(tuple(p.const_i), tuple(p.const_f)) for p in plans}) == len(values)


def test_integer_constants_stay_exact_and_keep_the_interpreters_errors():
    big = 2**53
    table = pa.table({"ts": pa.array(range(8), pa.int64()),
                      "a": pa.array([big, big + 1, big + 1, big, big + 1, 2**62, 2**62, 1],
                                    pa.int64()),
                      "x": pa.array([0.1, 0.1, 0.30000000000000004, 0.3, 0.1, 1.0, 2.0, 0.5])})
    defines = [
        f"B AS B.a = {big + 1}",                    # not rounded to 2**53
        f"B AS B.a - {big} = 1 AND A.a <> {big + 1}",
        "B AS B.a * 2 > 9223372036854775806",     # overflow: the reference's error
        f"B AS B.a + {2**62} > 0",
        "B AS B.a / 3 = 3002399751580330",          # truncating integer division
        "B AS B.x + 0.2 = 0.30000000000000004",     # the very double
        "B AS B.x < 0.3 AND B.a > 1.5",
        f"B AS B.a > {float(big)}",                 # int against double: exact or falls back
        "B AS (B.a = 1) = FALSE",
    ]
    for d in defines:
        assert _compare(f"ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B+) DEFINE {d}", table)


def test_a_parameter_sweep_compiles_once(monkeypatch):
    pytest.importorskip("numba")
    from gpu_mr.demo import generate_ticks
    compiled = []
    original = R._jit_kernel
    monkeypatch.setattr(R, "_KERNEL_CACHE", {})
    monkeypatch.setattr(R, "_jit_kernel", lambda src: compiled.append(src) or original(src))
    table = generate_ticks(rows=600, symbols=3, seed=7)
    for k, n in (("1.01", 20), ("1.02", 3), ("0.99", 20)):
        q = _tick_query(f"B AS B.price < AVG(B.price) * {k} AND COUNT(B.*) < {n}, "
                        "C AS C.price > A.price", table)
        data = sort_for_matching(table, q.partition_columns, q.order_keys)
        want = ReferenceEngine().find_matches(q, data)
        assert R.find_matches(q, data, jit=True).to_matches() == want
    assert len(compiled) == 1


def test_kernel_file_writing_reports_an_unwritable_folder(tmp_path):
    # _jit_kernel writes the compiled kernel's module to a shared folder and,
    # when that raises OSError (another user's folder), to a private one.
    from pathlib import Path

    from gpu_mr.engines import registers as R
    blocked = tmp_path / "a_file"
    blocked.write_text("a file where the folder should be")
    with pytest.raises(OSError):
        R._write_kernel_file(blocked / "sub", "k", "y = 1\n")
    written = R._write_kernel_file(Path(tmp_path / "ok"), "k", "y = 1\n")
    assert written.read_text() == "y = 1\n"


def test_small_inputs_run_compiled_once_the_shape_has_run_enough_rows(monkeypatch):
    """registers._use_jit: a query shape's small inputs run the plain kernel
    until it has run JIT_MIN_ROWS rows in the process (or its compiled
    kernel is loaded), then the compiled one; large inputs always do."""
    monkeypatch.setattr(R, "JIT_MIN_ROWS", 100)
    monkeypatch.setattr(R, "_PLAIN_ROWS", {})
    monkeypatch.setattr(R, "_KERNEL_CACHE", {})
    assert R._use_jit("shape A", 150)
    assert not R._use_jit("shape A", 60)
    assert not R._use_jit("shape A", 60)            # 120 rows: compiled from now on
    assert R._use_jit("shape A", 1)
    assert not R._use_jit("shape B", 1)             # counted per shape
    R._KERNEL_CACHE[("shape B", True)] = object()   # compiled already: no reason to wait
    assert R._use_jit("shape B", 1)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_partition_ranges_on_threads_equal_the_reference(monkeypatch, threads):
    """The compiled kernel over ranges of partitions on the thread pool: the
    matches come back in partition order, numbered per partition, and a
    partition the kernel hands to the reference engine (an int beyond 2**53
    compared with a double, in a partition past the first range) keeps its
    place."""
    pytest.importorskip("numba")
    from gpu_mr.kernels import threads as T
    monkeypatch.setattr(R, "PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr(R, "INITIAL_SIZES", (1, 1, 1, 1, 1, 1))   # growth inside each range
    monkeypatch.setattr(T, "MIN_WORK", 1)
    monkeypatch.setattr(T, "thread_count", lambda: threads)
    big = 2**62
    parts = {"w": [1] * 30, "x": [1] * 45, "y": [1] * 40 + [big, big, big], "z": [2] * 20}
    p = [k for k, v in parts.items() for _ in v]
    a = [x for v in parts.values() for x in v]
    table = pa.table({"p": pa.array(p), "ts": pa.array(range(len(a)), pa.int64()),
                      "a": pa.array(a, pa.int64())})
    clause = ("PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n, MATCH_NUMBER() AS m "
              "PATTERN (A B B) DEFINE B AS B.a > A.a - 0.5")
    q = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, q.partition_columns, q.order_keys)
    want = ReferenceEngine().find_matches(q, data)
    got = R.find_matches(q, data, jit=True)
    assert got.to_matches() == want and len(want) == 10 + 15 + 14 + 6


@pytest.mark.parametrize("threads", [2, 3])
def test_errors_over_partition_ranges_are_the_reference_engines(monkeypatch, threads):
    """With partitions in ranges on the thread pool, the error raised is the
    one the reference engine raises: that of the first partition that fails,
    though a later range may fail first. Partition p's first match starts
    at its row 2 p + 1, so each partition's SKIP error names other rows."""
    pytest.importorskip("numba")
    from gpu_mr.kernels import threads as T
    monkeypatch.setattr(R, "PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr(T, "MIN_WORK", 1)
    monkeypatch.setattr(T, "thread_count", lambda: threads)
    a = np.concatenate([np.concatenate([np.full(2 * p + 1, 9), np.arange(40 - 2 * p - 1)])
                        for p in range(4)])
    table = pa.table({"p": pa.array(np.repeat(np.arange(4), 40)),
                      "ts": pa.array(range(160), pa.int64()), "a": pa.array(a, pa.int64())})
    clause = ("PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP TO FIRST A "
              "PATTERN (A B+) DEFINE B AS B.a > A.a")
    q = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, q.partition_columns, q.order_keys)
    want = _outcome(lambda: ReferenceEngine().find_matches(q, data))
    got = _outcome(lambda: R.find_matches(q, data, jit=True).to_matches())
    assert want[0] == "error" and got == want, (got, want)


# ------------------------------------------- possessive guards in the compiled kernel

@pytest.mark.parametrize("pattern,guards", [("(A B+ C)", False), ("(A B++ C)", True),
                                            ("(A B*+ C?)", True)])
def test_the_guard_branch_is_compiled_only_where_the_pattern_has_a_guard(pattern, guards):
    """The generated module says whether its pattern holds an ASSERT_NOT guard
    (kernels/registers.py GUARDS): without one, numba prunes the branch and
    the predicates are not inlined into it (seconds of compile time)."""
    q = _query(f"ORDER BY ts MEASURES COUNT(*) AS n PATTERN {pattern} "
               "DEFINE B AS B.a > A.a, C AS a < PREV(a)")
    plan = R._Plan(q)
    assert ("GUARDS = False" not in plan.source) is guards
    assert guards == any(op == K.ASSERT_NOT for op in plan.op.tolist())


def test_compiled_possessive_guard_matches_reference():
    """A possessive run in a state-dependent pattern, compiled: the guard's
    branch (which reads the predicates at the row after the run) is kept."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(7)
    n = 400
    table = pa.table({"symbol": pa.array(rng.choice(["x", "y"], n)),
                      "ts": pa.array(np.arange(n)),
                      "price": pa.array(np.round(rng.random(n) * 4, 1)),
                      "volume": pa.array(rng.integers(0, 9, n))})
    for pattern in ("(A B++ C)", "(A B*+ C?)"):
        clause = ("PARTITION BY symbol ORDER BY ts MEASURES COUNT(*) AS n "
                  f"AFTER MATCH SKIP TO NEXT ROW PATTERN {pattern} "
                  "DEFINE B AS B.price >= A.price, C AS price < PREV(price)")
        assert _compare(clause, table, jit=True)


def test_plain_kernel_gives_inf_and_nan_without_numpy_warnings():
    # small inputs run the kernel as plain Python over numpy scalars, which
    # warned "invalid value encountered in scalar add" for inf + -inf
    import warnings
    import gpu_mr
    t = pa.table({"id": [0, 1, 2, 3, 4], "f": [0.0, float("inf"), float("-inf"), 1.0, 2.0]})
    q = ("ORDER BY id MEASURES SUM(B.f) AS s ONE ROW PER MATCH PATTERN (A B+) "
         "DEFINE B AS SUM(B.f) <> SUM(B.f) OR SUM(B.f) > -1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = gpu_mr.match_recognize(t, q, engine="cpu")
    want = gpu_mr.match_recognize(t, q, engine="reference")
    assert repr(got.to_pylist()) == repr(want.to_pylist()) == "[{'s': nan}]"
