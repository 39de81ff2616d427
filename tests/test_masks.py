"""The mask compiler (gpu_mr/predicates/masks.py) against the interpreter.

Every row-local DEFINE the compiler accepts must give, at every row, exactly
what the interpreter gives there (True; NULL or False; or the same DataError),
as the reference engine evaluates it (``ReferenceEngine.holds``: a MatchView
of one row labelled with the variable being defined). Unit tests per
construct, NULLs, partition boundaries, deferred errors, what ``supports``
refuses, data the int64 forms cannot hold, the class-id layout, and a
hypothesis differential test over random typed expressions and random tables
(GPU_MR_FULL_TESTS=1 runs many more examples).
"""

from __future__ import annotations

import datetime as dt
import math
import os
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpu_mr.analysis import analyze
from gpu_mr.errors import DataError, GpuMrError, UnsupportedError
from gpu_mr.frames import sort_for_matching
from gpu_mr.interpreter import Interpreter, MatchView
from gpu_mr.predicates import (MAX_VARIABLES, MaskUnsupported, compile_mask, compile_masks,
                               evaluate_masks, pack_classes, supports, supports_query)
from gpu_mr.syntax import parse_clause
from gpu_mr.syntax import types as T

FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"
I64_MAX, I64_MIN = 2**63 - 1, -2**63


# ---------------------------------------------------------------- harness

def prepare(define: str, table: pa.Table, var: str = "A"):
    clause = (f"PARTITION BY p ORDER BY id MEASURES COUNT(*) AS n PATTERN (A B*) "
              f"DEFINE {var} AS {define}")
    q = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, q.partition_columns, q.order_keys)
    return q, data


def interpreter_rows(q, data, var: str, now: dict) -> list:
    """Per row: True/False as the reference engine's holds(), ("error", code,
    message) for a DataError, ("crash", name) for any other exception."""
    columns = {n: T.arrow_values(data.table.column(n), t) for n, t in q.column_types.items()}
    interp = Interpreter(q, columns)
    interp.now = now
    expr = q.defines[var]
    vid = q.primary_vars.index(var)
    out = []
    offsets = data.partition_offsets
    for p in range(len(offsets) - 1):
        lo, hi = int(offsets[p]), int(offsets[p + 1])
        for row in range(lo, hi):
            view = MatchView(lo, hi, row, [vid], row, row, row, 1)
            try:
                out.append(interp.eval(expr, view) is True)
            except DataError as exc:
                out.append(("error", exc.code, str(exc)))
            except GpuMrError as exc:       # pragma: no cover - would be a new kind of failure
                out.append(("gpu_mr", type(exc).__name__, str(exc)))
            except Exception as exc:        # the interpreter itself breaks down (see report)
                out.append(("crash", type(exc).__name__))
    return out


NOW = {"CURRENT_TIMESTAMP": 1_700_000_000_123_456_000, "LOCALTIMESTAMP": 1_700_000_000_000_000_000,
       "CURRENT_DATE": dt.date(2023, 11, 14)}


def differential(define: str, table: pa.Table, var: str = "A") -> dict:
    """Compare mask and interpreter row by row; returns counts for the caller."""
    q, data = prepare(define, table, var)
    expr = q.defines[var]
    reason = supports(expr, var, q)
    if reason is not None:
        assert isinstance(reason, str) and reason
        with pytest.raises(UnsupportedError):
            compile_mask(expr, var, q)
        return {"rejected": reason}
    result = compile_mask(expr, var, q).evaluate_detailed(data, now=NOW)
    return check_rows(result, interpreter_rows(q, data, var, NOW), data, define)


def check_rows(result, want: list, data, define: str) -> dict:
    """Assert a MaskResult gives the interpreter's ``want`` at every row."""
    n = data.table.num_rows
    assert result.holds.shape == (n,) and result.holds.dtype == bool
    unsupported = result.unsupported
    counts = {"rows": n, "crash": 0, "unsupported": 0, "error": 0}
    for row, w in enumerate(want):
        where = f"\nDEFINE {define}\nrow {row}: {data.table.slice(row, 1).to_pylist()}"
        if unsupported[row]:
            assert isinstance(result.error(row), MaskUnsupported), where
            counts["unsupported"] += 1
            continue
        if isinstance(w, tuple) and w[0] == "crash":
            counts["crash"] += 1
            continue
        if isinstance(w, tuple):
            err = result.error(row)
            assert result.failed[row] and isinstance(err, DataError), f"{where}\nwant {w}, got no error"
            assert (err.code, str(err)) == w[1:], where
            assert not result.holds[row]
            counts["error"] += 1
            continue
        assert not result.failed[row], f"{where}\nunexpected {result.error(row)!r}"
        assert bool(result.holds[row]) == w, f"{where}\ninterpreter {w}, mask {result.holds[row]}"
    return counts


def mask_of(define: str, table: pa.Table) -> list:
    q, data = prepare(define, table)
    return compile_mask(q.defines["A"], "A", q).evaluate(data, now=NOW).tolist()


# ---------------------------------------------------------------- a fixed table

TABLE = pa.table({
    "p": pa.array([0, 0, 0, 0, 1, 1, 1, 2], pa.int64()),
    "id": pa.array(range(8), pa.int64()),
    "i": pa.array([3, None, -2, 0, 7, I64_MAX, I64_MIN, 5], pa.int64()),
    "j": pa.array([1, 0, None, 2, -3, 1, -1, 0], pa.int64()),
    "f": pa.array([1.5, 2.5, None, -0.5, float("nan"), float("inf"), -0.0, 0.49999999999999994],
                  pa.float64()),
    "d": pa.array([Decimal("1.10"), Decimal("-2.50"), None, Decimal("0.05"), Decimal("9.99"),
                   Decimal("1.10"), Decimal("-0.01"), Decimal("2.50")], pa.decimal128(10, 2)),
    "s": pa.array(["ab", "", None, "Straße", "a%b", "ΟΔΟΣ", "x\ny", " é "], pa.string()),
    "b": pa.array([True, False, None, True, False, None, True, False], pa.bool_()),
    "dt": pa.array([dt.date(2024, 1, 31), dt.date(2024, 2, 29), None, dt.date(1969, 12, 31),
                    dt.date(2000, 3, 1), dt.date(1970, 1, 1), dt.date(2023, 12, 31),
                    dt.date(2024, 3, 31)], pa.date32()),
    "ts": pa.array([dt.datetime(2024, 1, 31, 9, 30), None, dt.datetime(1969, 12, 31, 23, 59, 59, 1),
                    dt.datetime(2024, 2, 29, 12), dt.datetime(2000, 3, 1), dt.datetime(1970, 1, 1),
                    dt.datetime(2023, 12, 31, 23, 59, 59, 999999), dt.datetime(2024, 1, 1)],
                   pa.timestamp("us")),
    "iv": pa.array([86_400_000_000, 0, None, -90_000_000, 1, 3_600_000_000, 7, -1],
                   pa.duration("us")),
})


# ---------------------------------------------------------------- constructs

CONSTRUCTS = [
    # columns, literals, qualified by the variable being defined
    "i > 0", "A.i > 0", "TRUE", "FALSE", "NULL", "b", "NOT b", "A.b IS NULL", "i IS NOT NULL",
    # arithmetic and integer semantics
    "i + j > 0", "i - j < 3", "i * j = 0", "i / j = 1", "i % j = 0", "-i > 0", "+i > 0",
    "i / 2 = -1", "-7 / j = 3", "i % 4 = -2", "(i + 1) > 0", "i * 2 > 0", "-i < 0",
    # doubles: IEEE, NaN, signed zero, exact int/float comparison
    "f > 1", "f / 0 > 0", "1 / f < 0", "f % 2 > 0", "f = f", "f <> f", "i < f",
    "i = 9223372036854775807.0", "f * i > 0", "f + d > 1", "d / j > 0",
    # decimals stay exact
    "d > 1.1", "d = 1.1", "d * 3 > 3.3", "d + i > 2", "d - 0.05 = 0", "d % 1 > 0.05",
    "MOD(d, j) = 0.1", "d * d > 1", "-d > 0", "d BETWEEN -1 AND 2",
    # comparisons and three-valued logic
    "i > 0 AND j > 0", "i > 0 OR j > 0", "NOT (i > 0 AND b)", "b OR NULL", "b AND NULL",
    "i BETWEEN 0 AND 5", "i NOT BETWEEN 0 AND 5", "i IN (3, 7, NULL)", "i NOT IN (3, 7)",
    "i NOT IN (3, NULL)", "s IN ('ab', 'x')", "f IN (1.5, 2)",
    # CASE, COALESCE, NULLIF, GREATEST, LEAST
    "CASE WHEN j = 0 THEN 0 ELSE i / j END > 0", "CASE j WHEN 0 THEN 1 WHEN 1 THEN 2 END = 2",
    "CASE WHEN b THEN d ELSE i END > 1", "CASE WHEN b THEN f END > 0",
    # string constants chosen per row (one take), mixed with a column, NULL
    "CASE WHEN i > 2 THEN 'hi' WHEN j > 0 THEN 'mid' ELSE 'lo' END = 'mid'",
    "CASE WHEN i > 2 THEN 'hi' WHEN b THEN NULL END IS NULL",
    "CASE j WHEN 0 THEN 'zero' WHEN 1 THEN s END = 'ab'",
    "CASE WHEN b THEN 'ß' ELSE 'x' END || s = 'ßab'",
    "COALESCE(i, j, 0) > 0", "COALESCE(d, f) > 1", "NULLIF(i, 3) IS NULL", "NULLIF(s, '') = 'ab'",
    "GREATEST(i, j) > 2", "LEAST(f, 1) < 1", "GREATEST(d, j, 0.5) > 1", "LEAST(s, 'b') = 'ab'",
    "GREATEST(f, 0) = f", "LEAST(ts, dt) < TIMESTAMP '2024-01-01 00:00:00'",
    # math functions
    "ABS(i) > 2", "ABS(f) > 1", "ABS(d) > 1", "SIGN(i) = -1", "SIGN(f) = 0", "SIGN(d) = 1",
    "ROUND(f) = 2", "ROUND(f) = 0", "ROUND(d) = 1", "ROUND(d, 1) = 1.1", "ROUND(i, -1) = 0",
    "ROUND(d, -1) = 10", "FLOOR(f) = 1", "CEIL(f) = 0", "FLOOR(d) = 1", "CEILING(d) = -2",
    "SQRT(f) > 1", "LN(f) > 0", "LOG10(i) > 0", "EXP(f) > 3", "POWER(f, 2) > 2",
    "POWER(j, -1) > 0", "MOD(i, j) = 0", "MOD(f, 2) > 0", "SQRT(d) > 1",
    # CAST
    "CAST(f AS BIGINT) = 2", "CAST(d AS BIGINT) = 1", "CAST(i AS DOUBLE) > 1",
    "CAST(d AS DOUBLE) = 1.1", "CAST(i AS DECIMAL(4, 1)) > 1", "CAST(d AS DECIMAL(3, 1)) = 1.1",
    "CAST(b AS BIGINT) = 1", "CAST(i AS BOOLEAN)", "CAST(f AS BOOLEAN)", "CAST(d AS BOOLEAN)",
    "CAST(i AS VARCHAR) = '3'", "CAST(b AS VARCHAR) = 'true'", "CAST(dt AS VARCHAR) LIKE '2024%'",
    "CAST(ts AS VARCHAR) LIKE '%.%'", "CAST(ts AS DATE) = dt", "CAST(dt AS TIMESTAMP) < ts",
    "CAST(iv AS VARCHAR) = '0'", "CAST(NULL AS BIGINT) IS NULL",
    # strings
    "LOWER(s) = 'straße'", "UPPER(s) = 'STRASSE'", "LOWER(s) = 'οδος'", "LENGTH(s) = 6",
    "SUBSTR(s, 2) = 'b'", "SUBSTR(s, 2, 3) = 'tra'", "SUBSTR(s, -2) = 'ße'",
    "SUBSTR(s, -3, 2) = 'aß'", "SUBSTR(s, 0, 2) = ''", "SUBSTR(s, j, j) = 'a'",
    "SUBSTR(s, -i) = ''", "CONCAT(s, i, b) = 'ab3true'", "s || 'x' = 'abx'", "s || dt LIKE '%-%'",
    "TRIM(s) = 'é'", "LTRIM(s) = 'é '", "RTRIM(s) = ' é'", "REPLACE(s, 'a', 'xy') = 'xyb'",
    "s LIKE 'a%'", "s LIKE '_b'", "s LIKE 'x_y'", "s LIKE 'a!%b' ESCAPE '!'", "s NOT LIKE '%ß%'",
    "s LIKE '%'", "s < 'b'", "s > 'Z'", "CLASSIFIER() = 'A'", "CLASSIFIER(A) = 'A'",
    # dates, timestamps, intervals
    "dt > DATE '2024-01-01'", "dt < ts", "dt = ts", "dt + 1 > DATE '2024-03-01'",
    "dt - INTERVAL '1' MONTH = DATE '2024-01-29'", "dt + INTERVAL '1' MONTH > dt",
    "dt + INTERVAL '25' HOUR > dt + 1", "dt - INTERVAL '1' SECOND < dt",
    "ts + INTERVAL '1' YEAR > TIMESTAMP '2025-01-01 00:00:00'", "ts - iv < ts",
    "ts - PREV(ts) > INTERVAL '1' DAY", "dt - PREV(dt) < INTERVAL '2' DAY", "iv * j > iv",
    "iv / j > INTERVAL '1' SECOND", "iv * f > iv", "iv / f < iv", "-iv > iv", "iv + iv > iv",
    "INTERVAL '1' MONTH * j > INTERVAL '0' MONTH", "ts - dt > INTERVAL '0' SECOND",
    "ts + INTERVAL '1' MONTH = TIMESTAMP '2024-02-29 09:30:00'",
    "CURRENT_DATE > dt", "CURRENT_TIMESTAMP > ts", "LOCALTIMESTAMP > ts",
    # navigation
    "i > PREV(i)", "i < NEXT(i)", "PREV(i, 2) IS NULL", "NEXT(i, 0) = i", "PREV(s) = 'ab'",
    "PREV(A.i + A.j, 1) > 0", "NEXT(d, 3) > 0", "PREV(CASE WHEN j = 0 THEN 1 ELSE 10 / j END) > 0",
    "PREV(i, 100) IS NULL", "NEXT(b)",
]


@pytest.mark.parametrize("define", CONSTRUCTS)
def test_construct_agrees_with_interpreter(define):
    counts = differential(define, TABLE)
    assert "rejected" not in counts, counts


def test_three_valued_logic():
    t = pa.table({"p": [0, 0, 0], "id": [0, 1, 2], "x": pa.array([1, None, 5], pa.int64())})
    assert mask_of("x > 2", t) == [False, False, True]
    assert mask_of("NOT (x > 2)", t) == [True, False, False]       # NOT NULL is NULL
    assert mask_of("x > 2 OR TRUE", t) == [True, True, True]
    assert mask_of("x > 2 OR x < 2", t) == [True, False, True]
    assert mask_of("x IS NULL", t) == [False, True, False]
    assert mask_of("x IN (1, NULL)", t) == [True, False, False]
    assert mask_of("NOT (x NOT IN (1, NULL))", t) == [True, False, False]
    assert mask_of("NULL", t) == [False, False, False]


def test_navigation_stops_at_partition_boundaries():
    t = pa.table({"p": [0, 0, 0, 1, 1, 2], "id": range(6), "x": [1, 2, 3, 4, 5, 6]})
    assert mask_of("PREV(x) IS NULL", t) == [True, False, False, True, False, True]
    assert mask_of("NEXT(x) IS NULL", t) == [False, False, True, False, True, True]
    assert mask_of("PREV(x, 2) = 1", t) == [False, False, True, False, False, False]
    assert mask_of("NEXT(x, 2) IS NULL", t) == [False, True, True, True, True, True]
    assert mask_of("PREV(x, 0) = x", t) == [True] * 6
    assert mask_of("x = PREV(x) + 1", t) == [False, True, True, False, True, False]


def test_navigation_offsets_follow_the_sorted_order():
    # input out of order: PREV reads the previous row of the sorted table
    t = pa.table({"p": [1, 0, 1, 0], "id": [4, 2, 3, 1], "x": [40, 20, 30, 10]})
    q, data = prepare("x - PREV(x) = 10", t)
    assert data.table.column("x").to_pylist() == [10, 20, 30, 40]
    mask = compile_mask(q.defines["A"], "A", q).evaluate(data)
    assert mask.tolist() == [False, True, False, True]


def test_errors_are_raised_only_where_the_value_is_used():
    t = pa.table({"p": [0, 0, 1], "id": [0, 1, 2], "x": [4, 0, 2]})
    assert mask_of("CASE WHEN x = 0 THEN FALSE ELSE 8 / x = 2 END", t) == [True, False, False]
    assert mask_of("x <> 0 AND 8 / x = 4", t) == [False, False, True]
    assert mask_of("x = 0 OR 8 / x = 4", t) == [False, True, True]
    assert mask_of("x NOT IN (0, 8 / x)", t) == [True, False, True]    # IN stops at a match
    # PREV at the partition's first row does not evaluate its argument
    assert mask_of("PREV(8 / (x - 4)) IS NULL", pa.table({"p": [0, 1], "id": [0, 1], "x": [4, 4]})) \
        == [True, True]
    for define in ("8 / x = 2", "(8 / x = 2) AND x = 0", "COALESCE(1, 8 / x) = 1",
                   "NEXT(8 / x) > 0", "x IN (4, 8 / x) OR TRUE"):
        with pytest.raises(DataError) as info:
            mask_of(define, t)
        assert info.value.code == "division_by_zero"
        differential(define, t)


def test_error_messages_are_the_interpreters():
    t = pa.table({"p": [0], "id": [0], "x": pa.array([I64_MAX], pa.int64()),
                  "f": [float("nan")], "d": pa.array([Decimal("123.45")], pa.decimal128(5, 2))})
    cases = {"x + 1 > 0": "overflow", "-(x + 0) - 2 > 0": "overflow", "MOD(x, 0) = 0":
             "division_by_zero", "CAST(f AS BIGINT) = 0": "bad_cast",
             "CAST(d AS DECIMAL(4, 2)) > 0": "overflow", "ROUND(x, -1) > 0": "overflow",
             "ABS(-x - 1) > 0": "overflow", "CAST(x AS DECIMAL(38, 20)) > 0": "bad_cast"}
    for define, code in cases.items():
        q, data = prepare(define, t)
        with pytest.raises(DataError) as info:
            compile_mask(q.defines["A"], "A", q).evaluate(data)
        assert info.value.code == code, define
        assert differential(define, t)["error"] == 1, define


@pytest.mark.parametrize("define, fragment", [
    ("i > B.i", "not row-local"),
    ("i > FIRST(i)", "not row-local"),
    ("COUNT(*) > 1", "not row-local"),
    ("PREV(CLASSIFIER()) = 'A'", "not row-local"),
    ("MATCH_NUMBER() > 1", "MATCH_NUMBER"),
    ("CAST(f AS VARCHAR) = '1.5'", "DOUBLE as text"),
    ("s || d = 'x'", "DECIMAL as text"),
    ("CAST(s AS BIGINT) = 1", "CAST of VARCHAR"),
    ("CAST(f AS DECIMAL(5, 2)) = 1", "CAST of DOUBLE"),
    ("ROUND(f, 2) = 1", "nonzero number of digits"),
    ("ROUND(d, j) = 1", "non-constant number of digits"),
    ("s LIKE s", "non-constant pattern"),
    ("REPLACE(s, '', 'x') = 'x'", "empty string"),
    ("REPLACE(s, s, 'x') = 'x'", "non-constant"),
    ("i < 99999999999999999999", "64-bit range"),
    ("ts < TIMESTAMP '2300-01-01 00:00:00'", "64-bit range"),
    ("iv * d > iv", "INTERVAL * DECIMAL"),
])
def test_supports_gives_reasons(define, fragment):
    q, _ = prepare(define, TABLE)
    reason = supports(q.defines["A"], "A", q)
    assert reason is not None and fragment in reason, reason
    with pytest.raises(UnsupportedError):
        compile_mask(q.defines["A"], "A", q)
    assert supports_query(q) is not None


def test_data_the_int64_forms_cannot_hold_asks_for_the_interpreter():
    t = pa.table({"p": [0, 0], "id": [0, 1],
                  "u": pa.array([1, 2**63 + 5], pa.uint64()),
                  "ts": pa.array([0, 10**10], pa.timestamp("s")),     # the year 2286
                  "d": pa.array([Decimal(1), Decimal(10**30)], pa.decimal128(38, 0))})
    for define in ("u > 0", "ts > TIMESTAMP '2000-01-01 00:00:00'", "d > 0"):
        q, data = prepare(define, t)
        program = compile_mask(q.defines["A"], "A", q)
        result = program.evaluate_detailed(data)
        assert result.unsupported.tolist() == [False, True]
        assert result.holds[0] == (define != "ts > TIMESTAMP '2000-01-01 00:00:00'")
        with pytest.raises(MaskUnsupported):
            program.evaluate(data)
        differential(define, t)
    # ... but only where the value is used
    assert mask_of("CASE WHEN id = 0 THEN u > 0 ELSE FALSE END", t) == [True, False]
    assert mask_of("PREV(u) = 1", t) == [False, True]


def test_decimals_are_exact():
    t = pa.table({"p": [0] * 4, "id": range(4),
                  "d": pa.array([Decimal("0.10"), Decimal("0.20"), Decimal("0.30"),
                                 Decimal("99999999999999.99")], pa.decimal128(16, 2))})
    # 0.10 + 0.20 = 0.30 exactly (in float64 it is not), compared as the interpreter does
    assert mask_of("id < 3 AND d + PREV(d) = 0.3", t) == [False, True, False, False]
    assert mask_of("d + PREV(d) = PREV(d, 2) * 3", t) == [False, False, False, False]
    assert mask_of("d + PREV(d) = NEXT(d)", t) == [False, True, False, False]
    assert mask_of("d > 99999999999999 AND d < 100000000000000", t) == [False, False, False, True]
    # a DOUBLE comparison converts the decimal to float: exact only below 2**53 units
    q, data = prepare("d > 99999999999999.98", t)
    result = compile_mask(q.defines["A"], "A", q).evaluate_detailed(data)
    assert result.unsupported.tolist() == [False, False, False, True]
    differential("d * d > 0", t)
    differential("d > 0.2", t)


def test_decimal_modulo_by_an_integer_too_large_to_scale_is_no_division_by_zero():
    # d % i scales i to d's scale; 2**63-1 overflows there, which once read
    # as a zero divisor (a DataError) where the interpreter gives 0.
    t = pa.table({"p": [0, 0], "id": [0, 1],
                  "d": pa.array([Decimal("0.00"), Decimal("1.50")], pa.decimal128(10, 2)),
                  "i": pa.array([2 ** 63 - 1, 0], pa.int64())})
    differential("d % i = 0", t)


def test_transcendental_functions_are_bit_identical_to_math():
    rng = np.random.default_rng(7)
    xs = np.concatenate([rng.uniform(-5, 710, 400), [0.0, -1.0, 1e-310, float("inf")]])
    t = pa.table({"p": np.zeros(len(xs), dtype=np.int64), "id": np.arange(len(xs)), "x": xs})
    q, data = prepare("EXP(x) > 0", t)
    for fn, ref in (("EXP", math.exp), ("LN", math.log), ("LOG10", math.log10)):
        def py(v, ref=ref):
            try:
                return ref(v)
            except ValueError:
                return -math.inf if ref is math.log and v == 0 else math.nan
            except OverflowError:
                return math.inf
        for k in (0, 3):
            target = float(py(float(xs[k])))
            if not math.isfinite(target):
                continue
            got = mask_of(f"{fn}(x) = {target!r}", t)
            want = [py(float(v)) == target for v in xs]
            assert got == want, fn
    differential("POWER(x, 1.5) > 10", t)


def test_unicode_strings():
    t = pa.table({"p": [0] * 4, "id": range(4), "s": ["ΟΔΟΣ", "İx", "aé\nb", "ﬁ"]})
    assert mask_of("LOWER(s) = 'οδος'", t) == [True, False, False, False]   # final sigma
    assert mask_of("UPPER(s) = 'FI'", t) == [False, False, False, True]     # ligature expands
    assert mask_of("LENGTH(LOWER(s)) = 3", t) == [False, True, False, False]
    assert mask_of("SUBSTR(s, 2, 2) = 'é\n'", t) == [False, False, True, False]
    assert mask_of("s LIKE 'a_\n_'", t) == [False, False, True, False]
    for define in ("LOWER(s) = s", "UPPER(s) || s = 'x'", "SUBSTR(s, -2) = 'x'"):
        differential(define, t)


def test_column_encodings():
    strings = pa.array(["b", None, "a", "b"])
    t = pa.table({"p": [0] * 4, "id": range(4),
                  "s": strings.dictionary_encode(),
                  "ls": strings.cast(pa.large_string()),
                  "sv": strings.cast(pa.string_view()),
                  "i8": pa.array([1, None, -1, 2], pa.int8()),
                  "f4": pa.array([0.5, None, -1.25, 2.0], pa.float32()),
                  "d64": pa.array([0, None, 86_400_000, 2 * 86_400_000], pa.date64()),
                  "tsn": pa.array([1, None, 3, 4], pa.timestamp("ns", tz="UTC"))})
    chunked = pa.Table.from_batches(t.to_batches(max_chunksize=1))
    for define in ("s = 'b'", "ls = 'b'", "sv < 'b'", "i8 > 0", "f4 < 1", "PREV(s) = 'b'",
                   "d64 = DATE '1970-01-02'", "tsn > TIMESTAMP '1970-01-01 00:00:00'"):
        assert mask_of(define, t) == mask_of(define, chunked), define
        differential(define, t)
        differential(define, chunked)


def test_class_ids_pack_one_bit_per_primary_variable():
    t = pa.table({"p": [0, 0, 0, 1], "id": range(4), "x": [1, 5, 2, 7]})
    q = analyze(parse_clause("PARTITION BY p ORDER BY id MEASURES COUNT(*) AS n "
                             "PATTERN (A B C D) DEFINE C AS x > PREV(x), A AS x > 1, "
                             "D AS CLASSIFIER() = 'D' AND CLASSIFIER(D) <> 'A'"), t.schema)
    data = sort_for_matching(t, q.partition_columns, q.order_keys)
    masks, classes = compile_masks(q).evaluate(data)
    assert list(masks) == ["A", "B", "C", "D"]
    assert masks["B"].all() and masks["D"].all()        # no DEFINE / CLASSIFIER() is the variable
    assert classes.dtype == np.uint32
    assert classes.tolist() == [0b1010, 0b1111, 0b1011, 0b1011]
    masks2, classes2 = evaluate_masks(q, data)
    assert classes2.tolist() == classes.tolist()
    assert pack_classes([np.array([True, False])] * 32).tolist() == [2**32 - 1, 0]


def test_mask_set_defers_errors_to_the_rows_a_search_reaches():
    t = pa.table({"p": [0, 0, 0], "id": range(3), "x": [2, 0, 4]})
    q = analyze(parse_clause("PARTITION BY p ORDER BY id MEASURES COUNT(*) AS n "
                             "PATTERN (A B) DEFINE A AS x > 1, B AS 8 / x > 1"), t.schema)
    data = sort_for_matching(t, q.partition_columns, q.order_keys)
    masks = compile_masks(q)
    detailed = masks.evaluate_detailed(data)
    assert detailed["A"].holds.tolist() == [True, False, True] and not detailed["A"].failed.any()
    b = detailed["B"]
    assert b.holds.tolist() == [True, False, True] and b.failed.tolist() == [False, True, False]
    assert b.error(0) is None and b.error(1).code == "division_by_zero"
    with pytest.raises(DataError):
        masks.evaluate(data)


def test_compile_masks_refuses_state_and_too_many_variables():
    t = pa.table({"id": [0], "x": [1]})
    q = analyze(parse_clause("ORDER BY id MEASURES COUNT(*) AS n PATTERN (A B) "
                             "DEFINE B AS x > A.x"), t.schema)
    assert "not row-local" in supports_query(q)
    with pytest.raises(UnsupportedError):
        compile_masks(q)
    names = [f"V{k}" for k in range(MAX_VARIABLES + 1)]
    q = analyze(parse_clause(f"ORDER BY id MEASURES COUNT(*) AS n PATTERN ({' '.join(names)})"),
                t.schema)
    assert "33 pattern variables" in supports_query(q)


def test_empty_table_and_dead_error_rows():
    t = TABLE.slice(0, 0)
    assert mask_of("8 / j > 0 AND s LIKE 'a%'", t) == []
    q, data = prepare("LOWER(s) = 'ab'", TABLE)
    program = compile_mask(q.defines["A"], "A", q)
    assert str(program).startswith("mask A := (LOWER(s) = 'ab')")
    assert program.columns == ("s",)


# ---------------------------------------------------------------- differential

@st.composite
def tables(draw):
    n = draw(st.integers(0, 10))

    def col(values, typ):
        return pa.array([draw(st.sampled_from(values)) for _ in range(n)], typ)
    parts = sorted(draw(st.integers(0, 2)) for _ in range(n))
    return pa.table({
        "p": pa.array(parts, pa.int64()),
        "id": pa.array(range(n), pa.int64()),
        "i": col([None, 0, 1, -1, 2, 7, -5, I64_MAX, I64_MIN, 2**62, 10**18, 3], pa.int64()),
        "j": col([None, 0, 1, 2, -3, 3, -1], pa.int64()),
        "f": col([None, 0.0, -0.0, 1.5, -2.5, 0.5, 2.5, math.nan, math.inf, -math.inf, 1e300,
                  3.0, 1e-7, 2.0**53, -0.5], pa.float64()),
        "d": col([None, Decimal("0.00"), Decimal("1.10"), Decimal("-2.50"), Decimal("0.05"),
                  Decimal("12345678.99"), Decimal("-0.01"), Decimal("2.50")],
                 pa.decimal128(10, 2)),
        "s": col([None, "", "ab", "AB", " a b ", "É", "ß", "straße", "a%b", "a_b", "Ωσ",
                  "x\ny", "12", "ΟΔΟΣ"], pa.string()),
        "b": col([None, True, False], pa.bool_()),
        "e": col([None, Decimal("0.0001"), Decimal("-12345678901234.5678"), Decimal("1.0000"),
                  Decimal("99999999999999.9999"), Decimal("-0.5000")], pa.decimal128(18, 4)),
        "u": col([None, 0, 3, 2**64 - 1] if draw(st.integers(0, 4)) == 0 else [None, 0, 3],
                 pa.uint64()),
        "dt": col([None, dt.date(2024, 1, 31), dt.date(2024, 2, 29), dt.date(1970, 1, 1),
                   dt.date(1969, 12, 31), dt.date(2000, 3, 1), dt.date(1900, 1, 1)]
                  + ([dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(2300, 1, 1)]
                     if draw(st.integers(0, 4)) == 0 else []), pa.date32()),
        "ts2": col([None, dt.datetime(2024, 1, 1), dt.datetime(1950, 6, 1, 12)]
                   + ([dt.datetime(2500, 1, 1)] if draw(st.integers(0, 4)) == 0 else []),
                   pa.timestamp("s")),
        "ts": col([None, dt.datetime(2024, 1, 31, 9, 30), dt.datetime(1969, 12, 31, 23, 59, 59,
                                                                         999999),
                   dt.datetime(2024, 2, 29, 12), dt.datetime(1970, 1, 1, 0, 0, 0, 1)],
                  pa.timestamp("us")),
        "iv": col([None, 0, 86_400_000_000, -90_000_000, 1, 2**62], pa.duration("us")),
    })


LEAVES = {
    "int": ["i", "j", "A.j", "0", "1", "-3", "2", "9223372036854775807", "NULL", "PREV(i)",
            "NEXT(j, 2)", "LENGTH(s)", "PREV(10 / j)", "NEXT(i * j, 1)", "u"],
    "num": ["f", "d", "e", "2.5", "0.1", "1e300", "-0.0", "PREV(f)", "NEXT(d, 0)",
            "PREV(d * j, 2)", "(e - d)"],
    "str": ["s", "'ab'", "'É'", "''", "A.s", "CLASSIFIER()", "NULL", "PREV(s)", "NEXT(s || 'x')"],
    "bool": ["b", "TRUE", "FALSE", "NULL", "PREV(b)", "NEXT(i > j)"],
    "date": ["dt", "DATE '2024-02-29'", "PREV(dt)", "CURRENT_DATE"],
    "ts": ["ts", "TIMESTAMP '2024-01-31 09:30:00'", "NEXT(ts)", "CURRENT_TIMESTAMP", "ts2"],
    "iv": ["iv", "INTERVAL '1' DAY", "INTERVAL '-90' SECOND", "(ts - PREV(ts))",
           "(dt - PREV(dt, 2))"],
}


def expressions(kind: str, depth: int):
    leaf = st.sampled_from(LEAVES[kind] + (LEAVES["int"] if kind == "num" else []))
    if depth <= 0:
        return leaf
    sub = {k: expressions(k, depth - 1) for k in LEAVES}
    num = st.one_of(sub["int"], sub["num"])
    comparable = st.sampled_from([("num", "num"), ("int", "num"), ("str", "str"),
                                  ("date", "ts"), ("ts", "ts"), ("iv", "iv"), ("bool", "bool"),
                                  ("date", "date")])

    def pair(kinds):
        return st.tuples(sub[kinds[0]] if kinds[0] != "num" else num,
                         sub[kinds[1]] if kinds[1] != "num" else num)
    fmt = lambda f: (lambda t: f.format(*t))                              # noqa: E731
    forms = {
        "int": [
            st.tuples(sub["int"], st.sampled_from("+-*/%"), sub["int"]).map(fmt("({} {} {})")),
            st.tuples(st.sampled_from(["ABS", "SIGN", "-", "FLOOR", "CEIL", "ROUND"]),
                      sub["int"]).map(fmt("{}({})")),
            st.tuples(sub["int"], st.integers(-20, 2)).map(fmt("ROUND({}, {})")),
            st.tuples(st.sampled_from(["MOD", "GREATEST", "LEAST", "COALESCE", "NULLIF"]),
                      sub["int"], sub["int"]).map(fmt("{}({}, {})")),
            sub["str"].map("LENGTH({})".format),
            st.tuples(num, st.sampled_from(["BIGINT"])).map(fmt("CAST({} AS {})")),
            sub["bool"].map("CAST({} AS BIGINT)".format),
            st.tuples(sub["bool"], sub["int"], sub["int"]).map(
                fmt("CASE WHEN {} THEN {} ELSE {} END")),
        ],
        "num": [
            st.tuples(num, st.sampled_from("+-*/%"), num).map(fmt("({} {} {})")),
            st.tuples(st.sampled_from(["ABS", "SIGN", "FLOOR", "CEIL", "SQRT", "LN", "EXP",
                                       "ROUND", "LOG10", "-"]), num).map(fmt("{}({})")),
            st.tuples(sub["num"], st.integers(-3, 3)).map(fmt("ROUND({}, {})")),
            st.tuples(st.sampled_from(["POWER", "MOD", "GREATEST", "LEAST", "COALESCE",
                                       "NULLIF"]), num, num).map(fmt("{}({}, {})")),
            st.tuples(sub["bool"], num, num).map(fmt("CASE WHEN {} THEN {} ELSE {} END")),
            st.tuples(num, num, num, num).map(fmt("CASE {} WHEN {} THEN {} ELSE {} END")),
            st.tuples(st.one_of(num, sub["bool"]),
                      st.sampled_from(["DOUBLE", "DECIMAL(6, 2)", "DECIMAL(12, 1)",
                                       "DECIMAL(38, 20)", "DECIMAL(3, 0)"])).map(
                fmt("CAST({} AS {})")),
        ],
        "str": [
            st.tuples(st.sampled_from(list(LEAVES)).flatmap(lambda k: sub[k]),
                      st.sampled_from(list(LEAVES)).flatmap(lambda k: sub[k])).map(
                fmt("({} || {})")),
            st.tuples(st.sampled_from(["UPPER", "LOWER", "TRIM", "LTRIM", "RTRIM"]),
                      sub["str"]).map(fmt("{}({})")),
            st.tuples(sub["str"], sub["int"]).map(fmt("SUBSTR({}, {})")),
            st.tuples(sub["str"], sub["int"], sub["int"]).map(fmt("SUBSTR({}, {}, {})")),
            st.tuples(sub["str"], st.sampled_from(["'a'", "'ß'", "'%'"]),
                      st.sampled_from(["'xy'", "''"])).map(fmt("REPLACE({}, {}, {})")),
            st.sampled_from(list(LEAVES)).flatmap(lambda k: sub[k]).map(
                "CAST({} AS VARCHAR)".format),
            st.tuples(sub["str"], sub["str"], sub["int"]).map(fmt("CONCAT({}, {}, {})")),
            st.tuples(sub["bool"], sub["str"], sub["str"]).map(
                fmt("CASE WHEN {} THEN {} ELSE {} END")),
            st.tuples(sub["str"], sub["str"]).map(fmt("GREATEST({}, {})")),
        ],
        "bool": [
            *[st.tuples(comparable.flatmap(pair),
                        st.sampled_from(["=", "<>", "<", "<=", ">", ">="])).map(
                lambda t: f"({t[0][0]} {t[1]} {t[0][1]})")] * 4,
            *[st.tuples(sub["bool"], st.sampled_from(["AND", "OR"]), sub["bool"]).map(
                fmt("({} {} {})"))] * 2,
            sub["bool"].map("(NOT {})".format),
            st.sampled_from(list(LEAVES)).flatmap(lambda k: sub[k]).map("({} IS NULL)".format),
            st.tuples(num, num, num).map(fmt("({} BETWEEN {} AND {})")),
            st.tuples(num, num, num).map(fmt("({} NOT IN ({}, {}))")),
            st.tuples(sub["str"], sub["str"], sub["str"]).map(fmt("({} IN ({}, {}))")),
            st.tuples(sub["str"], st.sampled_from(["'a%'", "'%b'", "'_'", "'%!%%'", "'%\n%'",
                                                   "'É%'", "''"])).map(
                fmt("({} LIKE {} ESCAPE '!')")),
            st.tuples(sub["date"], sub["ts"]).map(fmt("({} BETWEEN {} AND CURRENT_TIMESTAMP)")),
            num.map("CAST({} AS BOOLEAN)".format),
        ],
        "date": [
            st.tuples(sub["date"], st.sampled_from(["+", "-"]),
                      st.sampled_from(["INTERVAL '1' DAY", "INTERVAL '1' MONTH", "j",
                                       "INTERVAL '25' HOUR", "INTERVAL '13' MONTH", "iv",
                                       "i"])).map(fmt("({} {} {})")),
            sub["ts"].map("CAST({} AS DATE)".format),
            st.tuples(sub["bool"], sub["date"], sub["date"]).map(
                fmt("CASE WHEN {} THEN {} ELSE {} END")),
            st.tuples(sub["date"], sub["date"]).map(fmt("COALESCE({}, {})")),
        ],
        "ts": [
            st.tuples(sub["ts"], st.sampled_from(["+", "-"]), sub["iv"]).map(fmt("({} {} {})")),
            sub["ts"].map("({} - INTERVAL '1' YEAR)".format),
            sub["ts"].map("({} + INTERVAL '1' MONTH)".format),
            sub["date"].map("CAST({} AS TIMESTAMP)".format),
            st.tuples(sub["ts"], sub["date"]).map(fmt("GREATEST({}, {})")),
            st.tuples(sub["bool"], sub["ts"], sub["date"]).map(
                fmt("CASE WHEN {} THEN {} ELSE {} END")),
        ],
        "iv": [
            st.tuples(sub["iv"], st.sampled_from(["+", "-"]), sub["iv"]).map(fmt("({} {} {})")),
            st.tuples(sub["iv"], st.sampled_from(["*", "/"]), num).map(fmt("({} {} {})")),
            st.tuples(sub["ts"], sub["date"]).map(fmt("({} - {})")),
            sub["iv"].map("(-{})".format),
        ],
    }
    return st.one_of(leaf, *forms[kind])


@settings(max_examples=6000 if FULL else 400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(expressions("bool", 3), tables())
def test_masks_agree_with_the_interpreter_on_random_expressions(define, table):
    try:
        prepare(define, table)
    except GpuMrError:
        assume(False)           # ill-typed draw (e.g. a NULL-only PREV argument)
    differential(define, table)


# ---------------------------------------------------------------- shared columns and PREV/NEXT

def detailed_rows(result, n: int) -> list:
    """Per row of a MaskResult: True/False, or the error it raises there."""
    out = []
    for row in range(n):
        err = result.error(row)
        out.append((type(err).__name__, getattr(err, "code", None), str(err))
                   if result.failed[row] else bool(result.holds[row]))
    return out


def assert_set_matches_separate(defines: dict, table: pa.Table) -> None:
    """A MaskSet shares loaded columns and PREV/NEXT of columns between its
    masks (one context); each mask must still be what the interpreter gives
    and what the mask gives evaluated alone."""
    names = "A B C D"
    clause = (f"PARTITION BY p ORDER BY id MEASURES COUNT(*) AS n PATTERN ({names}) DEFINE "
              + ", ".join(f"{v} AS {e}" for v, e in defines.items()))
    q = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, q.partition_columns, q.order_keys)
    n = data.table.num_rows
    together = compile_masks(q).evaluate_detailed(data, now=NOW)
    for v in defines:
        check_rows(together[v], interpreter_rows(q, data, v, NOW), data, defines[v])
        alone = compile_mask(q.defines[v], v, q).evaluate_detailed(data, now=NOW)
        got = together[v]
        assert got.holds.tolist() == alone.holds.tolist(), (v, defines[v])
        assert got.failed.tolist() == alone.failed.tolist(), (v, defines[v])
        assert got.unsupported.tolist() == alone.unsupported.tolist(), (v, defines[v])
        assert detailed_rows(got, n) == detailed_rows(alone, n), (v, defines[v])


def test_masks_of_one_set_share_prev_and_next_of_columns():
    rng = np.random.default_rng(7)
    n = 300
    x = rng.integers(-3, 4, n).astype(float)
    t = pa.table({"p": np.sort(rng.integers(0, 9, n)), "id": np.arange(n),
                  "x": pa.array(x, mask=rng.random(n) < 0.1),          # NULLs
                  "y": x,                                               # none
                  "j": pa.array(rng.integers(-1, 2, n)),
                  "b": pa.array(rng.random(n) < 0.5)})
    assert_set_matches_separate({
        "A": "x > PREV(x) AND y <= PREV(y)",
        "B": "PREV(x) < x OR NEXT(y, 2) = y OR PREV(b) <> b",
        "C": "PREV(x) IS NULL AND NEXT(x, 2) > PREV(y) AND 6 / PREV(j) > NEXT(j, 2)",
        "D": "(PREV(y, 2) > 0 AND NEXT(y, 300) IS NULL) OR PREV(y, 400) = 1 OR PREV(y) - y > 1",
    }, t)
    # the same results on a table whose arrays start mid-byte (sliced Arrow buffers)
    for start in (1, 3, 13):
        assert_set_matches_separate({"A": "x > PREV(x)", "B": "PREV(x) >= x AND b",
                                     "C": "NEXT(b) AND y = PREV(y, 2)"}, t.slice(start))
        differential("x > PREV(x) AND NOT b AND PREV(b)", t.slice(start, 40))


def test_comparison_with_prev_reads_the_column_in_place():
    # lazy PREV/NEXT operands against every shift, including shifts past the table
    rng = np.random.default_rng(3)
    from gpu_mr.predicates.masks import _compare_direct, _op, _shift, _Vec
    for n in (1, 2, 5, 17):
        base = rng.integers(-2, 3, n)
        other = rng.integers(-2, 3, n)
        ones = np.ones(n, dtype=bool)
        for ka in range(n + 1):
            for kb in (0, 1, n):
                for pa_, pb in ((True, True), (True, False), (False, True), (False, False)):
                    a = _Vec("BIGINT", None, ones, moved=(base, ka, pa_)) if ka else \
                        _Vec("BIGINT", base, ones)
                    b = _Vec("BIGINT", None, ones, moved=(other, kb, pb)) if kb else \
                        _Vec("BIGINT", other, ones)
                    xa = _shift(base, ka, pa_) if ka else base
                    xb = _shift(other, kb, pb) if kb else other
                    for op in ("=", "<>", "<", "<=", ">", ">="):
                        got = _compare_direct(op, a, b, n)
                        assert got.tolist() == _op(op, xa, xb).tolist(), (n, ka, kb, pa_, pb, op)


@settings(max_examples=1500 if FULL else 100, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(st.lists(expressions("bool", 2), min_size=2, max_size=4), tables())
def test_mask_set_agrees_with_masks_evaluated_alone(defines, table):
    import re
    defines = {v: re.sub(r"\bA\.", f"{v}.", d) for v, d in zip("ABCD", defines)}
    clause = ("PARTITION BY p ORDER BY id MEASURES COUNT(*) AS n PATTERN (A B C D) DEFINE "
              + ", ".join(f"{v} AS {e}" for v, e in defines.items()))
    try:
        q = analyze(parse_clause(clause), table.schema)
    except GpuMrError:
        assume(False)           # ill-typed draw (e.g. a NULL-only PREV argument)
    chosen = {v: e for v, e in defines.items() if supports(q.defines[v], v, q) is None}
    assume(len(chosen) >= 2)
    assert_set_matches_separate(chosen, table)
