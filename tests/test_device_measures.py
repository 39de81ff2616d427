"""MEASURES of ONE ROW PER MATCH on the device (gpu_mr/device_measures.py,
kernels/gpu_measures.py) against the host's ``measures.assemble``.

Differential: random row-local patterns (exclusions, empty matches, every
AFTER MATCH SKIP), random measures from the device subset over columns of
every type it reads (NULLs, NaN, -0.0, ties, order-sensitive float sums),
matches found and recovered by the GPU engine's own kernels: every measure
column must equal the host's in values and Arrow type, or the device must
decline with a reason where the data makes it inexact. Without a GPU the
kernels run in numba's CUDA simulator (tests/conftest.py), which is slow:
the default run is small, GPU_MR_FULL_TESTS=1 runs many more examples.
"""

from __future__ import annotations

import math
import os
import re
import zlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpu_mr import backend as B
from gpu_mr.analysis import analyze
from gpu_mr.device_input import from_arrow
from gpu_mr.device_measures import (DeviceColumn, device_measure_columns,
                                    device_measures_need_paths, device_measures_reason,
                                    measures_on_device)
from gpu_mr.engines import gpu as G
from gpu_mr.errors import GpuMrError
from gpu_mr.frames import sort_for_matching
from gpu_mr.measures import assemble
from gpu_mr.syntax import parse_clause

from test_cpu_engine import row_local_clauses

if isinstance(B.detect(), str):
    pytest.skip(f"no GPU and no simulator: {B.detect()}", allow_module_level=True)

FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"

NUMBERS = ["a", "b", "f", "g", "i32", "u8"]                # SUM / AVG
ORDERED = NUMBERS + ["flag", "d", "t", "dur"]               # MIN / MAX, values
ANY = ORDERED + ["s"]                                       # COUNT



def load_columns(backend, table: pa.Table, names) -> dict:
    """The measures' columns as the GPU engine hands them (device_input.py)."""
    source = from_arrow(backend, table)
    return {n: DeviceColumn(*source.column(n), table.schema.field(n).type) for n in names}

def typed_table(n: int, parts: int, seed: int) -> pa.Table:
    """``n`` rows in ``parts`` partitions (``ts`` with ties): the columns the
    random DEFINEs read (``a``, ``b`` with NULLs, ``c``, as
    tests/test_cpu_engine.py's tables) and a column of every type the device
    reads, plus a string column (only COUNT reads it on the device)."""
    rng = np.random.default_rng(seed)

    def nulls(p=0.25):
        return rng.random(n) < p
    floats = rng.choice([-1.5, 0.0, -0.0, 2.25, 1e16, 1.0, -1e16, 0.1], n)
    if rng.random() < 0.5:              # NaN: SUM/AVG/MIN/MAX over it are declined
        floats[rng.random(n) < 0.3] = np.nan
    # in half the tables, BIGINT sums of two or three rows leave the range (declined)
    big = (rng.choice([-3, -2, 2, 3], n) * 2**61 if rng.random() < 0.5
           else rng.integers(-3, 4, n))
    small = rng.integers(0, 4, n)
    return pa.table({
        "p": pa.array(rng.integers(0, parts, n), pa.int64()),
        "ts": pa.array(rng.integers(0, 6, n), pa.int64()),
        "a": pa.array(rng.integers(0, 4, n), pa.int64()),
        "b": pa.array(small, pa.int64(), mask=nulls() if rng.random() < 0.5 else None),
        "c": pa.array(rng.integers(0, 4, n), pa.int64()),
        "g": pa.array(big, pa.int64()),
        "f": pa.array(floats, pa.float64(), mask=nulls()),
        "i32": pa.array(rng.integers(-3, 4, n), pa.int32(), mask=nulls(0.1)),
        "u8": pa.array(rng.integers(0, 4, n), pa.uint8()),
        "flag": pa.array(rng.random(n) < 0.5, pa.bool_(), mask=nulls()),
        "d": pa.array(rng.integers(0, 5, n).astype(np.int32), pa.int32(),
                      mask=nulls()).cast(pa.date32()),
        "t": pa.array(rng.integers(0, 4, n) * 1000, pa.int64(),
                      mask=nulls()).cast(pa.timestamp("ms", "UTC")),
        "dur": pa.array(rng.integers(-2, 3, n), pa.int64()).cast(pa.duration("ns")),
        "s": pa.array([str(x) for x in rng.integers(0, 3, n)], pa.string(), mask=nulls()),
    })


@st.composite
def measure_lists(draw, names: list):
    """One to five measures of the device subset over the variables
    ``names`` (and unqualified), the first an aggregate."""
    var = st.sampled_from(names or [None])
    qual = st.sampled_from([""] + [f"{v}." for v in names])
    k = st.integers(0, 2)
    sem = st.sampled_from(["", "RUNNING ", "FINAL "])
    first_last = st.sampled_from(["FIRST", "LAST"])

    def classifier():
        v = draw(var)
        return f"CLASSIFIER({v or ''})"

    def count_var():
        v = draw(var)
        return f"{draw(sem)}COUNT({v + '.*' if v else '*'})"

    def row_expression_aggregate():
        # SUM(A.f * A.a + 2): the argument at every row on the device
        q = draw(qual)
        x, y = (draw(st.sampled_from(NUMBERS)) for _ in range(2))
        op = draw(st.sampled_from(["+", "-", "*", "/"]))
        tail = draw(st.sampled_from(["", " + 2", " * 0.5", " - 1"]))
        agg = draw(st.sampled_from(['SUM', 'AVG', 'COUNT', 'MIN', 'MAX']))
        return f"{draw(sem)}{agg}({q}{x} {op} {q}{y}{tail})"
    forms = [
        lambda: "MATCH_NUMBER()",
        classifier,
        lambda: f"{draw(qual)}{draw(st.sampled_from(ORDERED))}",
        lambda: (f"{draw(sem)}{draw(first_last)}({draw(qual)}"
                 f"{draw(st.sampled_from(ORDERED))}, {draw(k)})"),
        lambda: f"{draw(sem)}{draw(first_last)}({classifier()}, {draw(k)})",
        lambda: "COUNT(*)",
        count_var,
        lambda: f"COUNT({draw(qual)}{draw(st.sampled_from(ANY))})",
        lambda: (f"{draw(sem)}{draw(st.sampled_from(['SUM', 'AVG']))}({draw(qual)}"
                 f"{draw(st.sampled_from(NUMBERS))})"),
        lambda: (f"{draw(sem)}{draw(st.sampled_from(['MIN', 'MAX']))}({draw(qual)}"
                 f"{draw(st.sampled_from(ORDERED))})"),
        row_expression_aggregate,
    ]
    # an aggregate first: they hold most of the rules (NULLs, sums, ties)
    picks = ([draw(st.integers(len(forms) - 5, len(forms) - 1))]
             + draw(st.lists(st.integers(0, len(forms) - 1), max_size=4)))
    return ", ".join(f"{forms[i]()} AS m{j}" for j, i in enumerate(picks))


@st.composite
def one_row_clauses(draw):
    clause = draw(row_local_clauses())
    subset = re.search(r"SUBSET U = \(([^)]*)\)", clause)
    names = subset.group(1).split(", ") + ["U"] if subset else []
    clause = clause.replace("MEASURES COUNT(*) AS n", f"MEASURES {draw(measure_lists(names))}")
    if draw(st.booleans()):
        clause = clause.replace("AFTER MATCH", "ONE ROW PER MATCH AFTER MATCH")
    return clause


def device_matches(query, data, chunk_rows: int):
    """The GPU engine's matches of ``query`` on the device (path recovered),
    or None where the engine leaves them to the reference matcher."""
    gpu = G.GpuEngine()
    prepared = gpu.prepare(query, data)
    if isinstance(prepared, str):
        return None
    classes, tables_ = prepared
    backend = B.detect()
    found, _ = G.scan(backend, query, classes, data.partition_offsets, tables_, chunk_rows)
    return G.recover(backend, classes, data.partition_offsets, found, tables_)


def same_values(got: pa.Array, want: pa.Array) -> bool:
    """Equal type and values, NaN equal to NaN and -0.0 unequal to 0.0."""
    if got.type != want.type or len(got) != len(want):
        return False
    for x, y in zip(got.to_pylist(), want.to_pylist()):
        if isinstance(x, float) and isinstance(y, float):
            if not ((math.isnan(x) and math.isnan(y))
                    or (x == y and math.copysign(1, x) == math.copysign(1, y))):
                return False
        elif x != y or type(x) is not type(y):
            return False
    return True


COMPARED, RAISED, REFERENCE = "compared", "raised", "reference"


def check(clause: str, table: pa.Table, chunk_rows: int = 3) -> str:
    """Run ``clause`` with device measures and compare with assemble:
    ``COMPARED`` (all equal), ``RAISED`` (the scan raises, as AFTER MATCH
    SKIP TO a variable may: no measures), ``REFERENCE`` (the engine leaves
    the matching to the reference matcher: no device matches), or the
    device's reason where it declined at run time."""
    query = analyze(parse_clause(clause), table.schema)
    assert device_measures_reason(query) is None, clause
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    try:
        found = device_matches(query, data, chunk_rows)
    except GpuMrError:
        return RAISED
    if found is None:
        return REFERENCE
    backend = B.detect()
    matches = found.to_host(backend)
    columns = load_columns(backend, data.table, device_measure_columns(query))
    got = measures_on_device(backend, query, columns, found)
    try:
        want = assemble(query, data, matches)
    except GpuMrError as exc:           # the host raises: the device must have declined
        assert isinstance(got, str), (clause, str(exc))
        return got
    if isinstance(got, str):
        return got
    assert sorted(got) == sorted(m.name for m in query.measures)
    for name, arr in got.items():
        expected = want.column(name).combine_chunks()
        assert same_values(arr, expected), (
            f"\n{clause}\n{name}: device {arr.to_pylist()} ({arr.type})\n"
            f"host {expected.to_pylist()} ({expected.type})\n{table.to_pydict()}")
    return COMPARED


@settings(max_examples=2000 if FULL else 150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(one_row_clauses(), st.integers(1, 40), st.integers(1, 3), st.integers(0, 2**31),
       st.sampled_from([2, 5, 64]))
def test_device_measures_equal_assemble(clause, n, parts, seed, chunk_rows):
    # the seed mixed with the clause: hypothesis draws small seeds often
    table = typed_table(n, parts, zlib.crc32(clause.encode()) ^ seed)
    try:
        analyze(parse_clause(clause), table.schema)
    except GpuMrError:
        assume(False)                   # a measure the analysis rejects (e.g. its type)
    reason = check(clause, table, chunk_rows)
    if reason not in (COMPARED, RAISED, REFERENCE):
        # declined at run time only for NaN (in the float column), an
        # overflowing sum or a refused cast
        # or an aggregate's argument that raises at some row
        assert ("NaN" in reason or "BIGINT" in reason or "cast" in reason
                or "raises" in reason), reason


# ---- fixed cases: every SKIP mode, empty matches, exclusions, NULLs

T = pa.table({
    "p": [0, 0, 0, 0, 0, 0, 1, 1, 1, 1],
    "ts": list(range(10)),
    "x": pa.array([1, 2, None, 3, 1, 2, 5, None, 1, 1], pa.int64()),
    "y": pa.array([1.0, 1e16, 1.0, -1e16, None, 0.5, -0.0, 0.0, 2.0, 3.5], pa.float64()),
    "k": pa.array([3, 1, 1, None, 2, 1, 4, 4, None, 0], pa.int16()),
})
EVERYTHING = ("MATCH_NUMBER() AS mn, CLASSIFIER() AS c, CLASSIFIER(B) AS cb, x AS x, "
              "A.x AS ax, FIRST(B.y) AS fb, LAST(B.y, 1) AS lb1, FINAL LAST(y, 2) AS ly2, "
              "RUNNING FIRST(CLASSIFIER(), 1) AS fc, COUNT(*) AS n, COUNT(B.*) AS nb, "
              "COUNT(B.x) AS nbx, COUNT(x) AS nx, SUM(B.x) AS sbx, SUM(y) AS sy, "
              "AVG(B.x) AS abx, AVG(y) AS ay, MIN(B.k) AS mink, MAX(k) AS maxk, "
              "MIN(y) AS miny, MAX(U.y) AS maxy")


SKIPS = ([(skip, pattern) for skip in ("PAST LAST ROW", "TO NEXT ROW")
          for pattern in ("A B*", "A* B*", "A {- B* -} C?", "(A | B)* C")]
         + [(skip, pattern) for skip in ("TO FIRST B", "TO LAST B", "TO U")
            for pattern in ("A B+ C?", "A {- B+ -} C?", "(A | C) B+ C*")])


@pytest.mark.parametrize("skip,pattern", SKIPS)
def test_every_measure_form_every_skip(skip, pattern):
    defines = {"A": "x < 3 OR x IS NULL", "B": "k >= 1", "C": "y > 1"}
    clause = (f"PARTITION BY p ORDER BY ts MEASURES {EVERYTHING} ONE ROW PER MATCH "
              f"AFTER MATCH SKIP {skip} PATTERN ({pattern}) SUBSET U = (A, B) DEFINE "
              + ", ".join(f"{v} AS {d}" for v, d in defines.items() if v in pattern))
    assert check(clause, T, 2) == COMPARED


def test_empty_matches_have_null_values_and_zero_counts():
    # A* over rows where A never holds: one empty match per row
    clause = (f"ORDER BY ts MEASURES {EVERYTHING} PATTERN (A* B?) SUBSET U = (A, B) "
              "DEFINE A AS x > 100, B AS x > 100")
    query = analyze(parse_clause(clause), T.schema)
    data = sort_for_matching(T, query.partition_columns, query.order_keys)
    found = device_matches(query, data, 4)
    backend = B.detect()
    got = measures_on_device(backend, query, load_columns(backend, data.table,
                                                          device_measure_columns(query)), found)
    assert got["n"].to_pylist() == [0] * 10 and got["mn"].to_pylist() == list(range(1, 11))
    assert got["c"].null_count == 10 and got["sy"].null_count == 10
    assert check(clause, T) == COMPARED


def test_no_match():
    clause = f"ORDER BY ts MEASURES {EVERYTHING} PATTERN (A B) SUBSET U = (A, B) " \
             "DEFINE A AS x > 100"
    assert check(clause, T) == COMPARED


def test_excluded_rows_still_count():
    clause = ("ORDER BY ts MEASURES COUNT(*) AS n, COUNT(B.*) AS nb, SUM(B.x) AS s, "
              "LAST(B.x) AS lb PATTERN (A {- B+ -} C) DEFINE A AS x = 1, B AS x = 2 OR x IS NULL"
              ", C AS x = 3")
    assert check(clause, T) == COMPARED
    query = analyze(parse_clause(clause), T.schema)
    data = sort_for_matching(T, query.partition_columns, query.order_keys)
    backend = B.detect()
    got = measures_on_device(backend, query, load_columns(backend, data.table, ["x"]),
                             device_matches(query, data, 64))
    assert got["n"].to_pylist() == [4] and got["nb"].to_pylist() == [2]
    assert got["s"].to_pylist() == [2] and got["lb"].to_pylist() == [None]


def test_double_sums_are_sequential():
    # 1e16 + 1.0 - 1e16 is 0.0 left to right and 1.0 compensated: whichever
    # the interpreter's Python does, the device does
    clause = "ORDER BY ts MEASURES SUM(y) AS s, AVG(y) AS a PATTERN (A{4}) DEFINE A AS TRUE"
    assert check(clause, T) == COMPARED


def test_other_column_types():
    # float32, date64, duration in seconds (cast to the SQL INTERVAL's ns),
    # uint64 and uint16, int8 with NULLs, timestamps in seconds
    rng = np.random.default_rng(5)
    n = 30
    t = pa.table({
        "ts": np.arange(n), "x": rng.integers(0, 4, n),
        "f32": pa.array(rng.choice([0.1, -0.0, 0.0, 1e30, -2.5], n).astype(np.float32),
                        pa.float32(), mask=rng.random(n) < 0.2),
        "d64": pa.array(rng.integers(0, 9, n) * 86_400_000, pa.int64()).cast(pa.date64()),
        "ds": pa.array(rng.integers(-5, 5, n), pa.int64()).cast(pa.duration("s")),
        "u64": pa.array(rng.integers(0, 2**40, n).astype(np.uint64), pa.uint64()),
        "i8": pa.array(rng.integers(-128, 127, n), pa.int8(), mask=rng.random(n) < 0.2),
        "tsec": pa.array(rng.integers(0, 10**9, n), pa.int64()).cast(pa.timestamp("s")),
        "u16": pa.array(rng.integers(0, 60000, n), pa.uint16()),
    })
    measures = ["FIRST(f32)", "LAST(B.f32, 1)", "SUM(f32)", "AVG(B.f32)", "MIN(f32)",
                "MAX(B.f32)", "FIRST(d64)", "MIN(d64)", "MAX(B.d64)", "LAST(ds)", "MIN(ds)",
                "MAX(u64)", "FIRST(u64)", "SUM(i8)", "AVG(i8)", "MIN(i8)", "LAST(B.i8)",
                "MAX(tsec)", "LAST(tsec)", "SUM(u16)", "AVG(B.u16)", "COUNT(B.i8)",
                "COUNT(f32)"]
    for skip in ("PAST LAST ROW", "TO NEXT ROW"):
        clause = ("ORDER BY ts MEASURES " + ", ".join(f"{m} AS m{i}"
                                                       for i, m in enumerate(measures))
                  + f" AFTER MATCH SKIP {skip} PATTERN (A B*) DEFINE A AS x = 0, B AS x > 0")
        assert check(clause, t, 4) == COMPARED


# ---- declines

def reason_of(measures: str, rows: str = "") -> str:
    clause = (f"PARTITION BY p ORDER BY ts MEASURES {measures} {rows} PATTERN (A B*) "
              "DEFINE B AS x > 1")
    schema = T.append_column("s", pa.array(["a"] * 10)).schema
    return device_measures_reason(analyze(parse_clause(clause), schema))


@pytest.mark.parametrize("measure", [
    "MATCH_NUMBER()", "CLASSIFIER()", "CLASSIFIER(A)", "x", "B.y", "FIRST(x)", "LAST(B.k, 2)",
    "FINAL LAST(CLASSIFIER())", "RUNNING FIRST(A.x)", "COUNT(*)", "COUNT(B.*)", "COUNT(B.s)",
    "SUM(B.x)", "SUM(y)", "AVG(k)", "MIN(B.y)", "MAX(x)", "FINAL COUNT(A.x)",
    # expressions over those: leaves on the device, the rest per match on the host
    "x + 1", "CASE WHEN x > 1 THEN 1 ELSE 0 END", "SUM(x) + 1", "LAST(B.y) - FIRST(x)",
    # aggregates over a row expression: the argument at every row on the device
    "SUM(x * 2) + 1", "SUM(B.x * B.y) / SUM(B.x)", "AVG(y - k)", "COUNT(B.y / 2)",
    "MIN(x * 2)", "MAX(B.y - B.k)",
])
def test_reason_accepts(measure):
    assert reason_of(f"{measure} AS m") is None


@pytest.mark.parametrize("measure,why", [
    ("PREV(x) + 1", "PREV"), ("PREV(x)", "PREV"), ("NEXT(B.x)", "NEXT"),
    ("CASE WHEN PREV(x) > 1 THEN 1 ELSE 0 END", "CASE"), ("s", "type"), ("MIN(s)", "order"),
    ("COUNT(DISTINCT x)", "DISTINCT"), ("PREV(LAST(B.x), 1)", "PREV"),
    ("LAST(B.s)", "type"), ("MAX_BY(x, y)", "MAX_BY"), ("MIN(x > 1)", "integer and"),
    ("COUNT(x > 1)", "integer and floating"), ("SUM(y * MATCH_NUMBER())", "MATCH_NUMBER"),
])
def test_reason_declines(measure, why):
    reason = reason_of(f"COUNT(*) AS n, {measure} AS bad")
    assert reason is not None and reason.startswith("measure bad:") and why in reason, reason


def test_reason_declines_all_rows_per_match():
    assert "ALL ROWS" in reason_of("COUNT(*) AS n", "ALL ROWS PER MATCH")


def test_columns_read():
    clause = ("ORDER BY ts MEASURES SUM(B.y) AS s, FIRST(x) AS f, COUNT(*) AS n, "
              "MAX(B.y) AS m PATTERN (A B*) DEFINE B AS k > 1")
    assert device_measure_columns(analyze(parse_clause(clause), T.schema)) == ["x", "y"]


def test_paths_needed_only_where_labels_are_read():
    def needs(measures: str) -> bool:
        return device_measures_need_paths(analyze(parse_clause(
            f"ORDER BY ts MEASURES {measures} PATTERN (A B+ C?) "
            "DEFINE B AS x > 1, C AS x > 2"), T.schema))
    assert not needs("MATCH_NUMBER() AS n, COUNT(*) AS c, FIRST(A.ts) AS f, LAST(ts) AS l, "
                     "FIRST(y, 2) AS f2, x AS x")
    for m in ("LAST(B.ts)", "CLASSIFIER()", "FIRST(A.ts, 1)", "COUNT(B.*)", "SUM(x)",
              "MIN(y)", "COUNT(x)", "PREV(x)"):
        assert needs(f"{m} AS m"), m
    # without recovery, the measures that need no path are the host's
    clause = ("PARTITION BY p ORDER BY ts MEASURES MATCH_NUMBER() AS n, COUNT(*) AS c, "
              "FIRST(A.y) AS f, LAST(x) AS l, LAST(y, 1) AS l1 AFTER MATCH SKIP TO NEXT ROW "
              "PATTERN (A B* C?) DEFINE B AS k >= 1, C AS y > 1")
    query = analyze(parse_clause(clause), T.schema)
    data = sort_for_matching(T, query.partition_columns, query.order_keys)
    gpu = G.GpuEngine()
    classes, tables_ = gpu.prepare(query, data)
    backend = B.detect()
    found, _ = G.scan(backend, query, classes, data.partition_offsets, tables_, 3)
    columns = load_columns(backend, data.table, device_measure_columns(query))
    got = measures_on_device(backend, query, columns, found)
    needing = analyze(parse_clause(clause.replace("AS l1", "AS l1, COUNT(B.*) AS nb")),
                      T.schema)
    assert "not recovered" in measures_on_device(backend, needing, columns, found)
    G.recover(backend, classes, data.partition_offsets, found, tables_)
    want = assemble(query, data, found.to_host(backend))
    assert len(want) > 3
    for name, arr in got.items():
        assert same_values(arr, want.column(name).combine_chunks()), name


def run_device(clause: str, table: pa.Table):
    query = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    backend = B.detect()
    columns = load_columns(backend, data.table, device_measure_columns(query))
    return query, data, measures_on_device(backend, query, columns,
                                           device_matches(query, data, 64))


def test_declines_at_run_time_where_inexact():
    big = pa.table({"ts": [0, 1, 2], "v": pa.array([2**62, 2**62, 1], pa.int64()),
                    "w": [1.0, float("nan"), 2.0], "u": pa.array([1, 2**63, 3], pa.uint64())})
    # a BIGINT sum past its range: the host raises
    query, data, got = run_device("ORDER BY ts MEASURES SUM(v) AS s PATTERN (A+) "
                                  "DEFINE A AS TRUE", big)
    assert isinstance(got, str) and "BIGINT" in got
    with pytest.raises(GpuMrError):
        assemble(query, data, G.GpuEngine().find_matches(query, data))
    # AVG of the same is exact on the host (the interpreter's Python ints): declined
    assert isinstance(run_device("ORDER BY ts MEASURES AVG(v) AS a PATTERN (A+) "
                                 "DEFINE A AS TRUE", big)[2], str)
    for m in ("SUM(w)", "AVG(w)", "MIN(w)", "MAX(w)"):
        got = run_device(f"ORDER BY ts MEASURES {m} AS x PATTERN (A+) DEFINE A AS TRUE", big)[2]
        assert isinstance(got, str) and "NaN" in got, m
    # a uint64 past BIGINT: the cast the host's gather makes is refused
    got = run_device("ORDER BY ts MEASURES MAX(u) AS x PATTERN (A+) DEFINE A AS TRUE", big)[2]
    assert isinstance(got, str) and "cast" in got
    # NaN read as a value is exact: no decline
    assert check("ORDER BY ts MEASURES LAST(w, 1) AS x, MIN(v) AS y PATTERN (A+) "
                 "DEFINE A AS TRUE", big) == COMPARED
    # SUM of uint64 (past BIGINT, the interpreter's Python ints): never on the device
    assert "integer" in device_measures_reason(analyze(parse_clause(
        "ORDER BY ts MEASURES SUM(u) AS x PATTERN (A+) DEFINE A AS TRUE"), big.schema))


def test_columns_as_plain_tuples_with_bool_values():
    # as the engine hands them: (values, valid, type) tuples, booleans as bool
    clause = ("PARTITION BY p ORDER BY ts MEASURES MIN(flag) AS lo, MAX(B.flag) AS hi, "
              "LAST(flag) AS l, COUNT(flag) AS n, SUM(i32) AS s PATTERN (A B*) "
              "DEFINE A AS a > 0, B AS c < 3")
    table = typed_table(40, 2, 7)
    query = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    backend = B.detect()
    found = device_matches(query, data, 5)
    columns = {name: (col.values, col.valid, col.type)
               for name, col in load_columns(backend, data.table,
                                             device_measure_columns(query)).items()}
    got = measures_on_device(backend, query, columns, found)
    want = assemble(query, data, found.to_host(backend))
    assert len(want) > 3
    for name, arr in got.items():
        assert same_values(arr, want.column(name).combine_chunks()), name


def test_input_columns_types_and_nulls():
    # as device_input.py hands them to the measures
    backend = B.detect()
    t = typed_table(3, 1, 1).append_column("x", pa.array([1, None, 3], pa.int8()))
    cols = load_columns(backend, t, ["x", "flag", "d", "t", "s"])
    assert cols["x"].values.dtype == np.int8 and cols["x"].valid is not None
    assert backend.to_host(cols["flag"].values).dtype == np.bool_
    assert cols["d"].values.dtype == np.int32 and cols["t"].values.dtype == np.int64
    assert cols["s"].values is None and cols["s"].type == pa.string()
    chunked = pa.Table.from_batches(t.to_batches(max_chunksize=1))
    again = load_columns(backend, chunked, ["x"])["x"]
    assert backend.to_host(again.values).tolist()[::2] == [1, 3]
    assert load_columns(backend, pa.table({"x": [1, 2]}), ["x"])["x"].valid is None
