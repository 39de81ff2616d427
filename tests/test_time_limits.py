"""Time limits (WITHIN / INTERVAL) on the fast engines.

Differential: random row-local clauses with random limits over random
tables with a TIMESTAMP clock (ties, NULL clocks at either end, several
partitions, every AFTER MATCH SKIP): the CPU engine's DFA scan must return
exactly the reference engine's matches, in one piece, in speculative
chunks, and in a stream of batches; so must the GPU engine (the CUDA
simulator without a GPU), and the register machine for DEFINEs that read
the match so far. Unit tests of the per-row horizons (gpu_mr/horizons.py):
strictness at exactly the limit, NULL clocks, calendar months, saturation,
and a brute-force comparison with the reference's own deadline rule.
"""

from __future__ import annotations

import datetime as dt
import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("numba", reason="the cpu extra (numba) is not installed")

import gpu_mr  # noqa: E402
from gpu_mr import backend as B  # noqa: E402
from gpu_mr.analysis import analyze  # noqa: E402
from gpu_mr.engines import registers as R  # noqa: E402
from gpu_mr.engines.cpu import CpuEngine  # noqa: E402
from gpu_mr.engines.gpu import GpuEngine  # noqa: E402
from gpu_mr.engines.reference import ReferenceEngine, time_limit_deadline  # noqa: E402
from gpu_mr.errors import GpuMrError  # noqa: E402
from gpu_mr.frames import sort_for_matching  # noqa: E402
from gpu_mr.horizons import row_horizons  # noqa: E402
from gpu_mr.interpreter import compare  # noqa: E402
from gpu_mr.kernels import scan as S  # noqa: E402
from gpu_mr.syntax import parse_clause  # noqa: E402
from gpu_mr.syntax import types as T  # noqa: E402

from test_cpu_engine import assert_engine_gives_the_references, outcome  # noqa: E402
from test_differential import ROW_LOCAL, VARS, patterns  # noqa: E402
from test_registers import days as register_days  # noqa: E402
from test_registers import decimals as register_decimals  # noqa: E402
from test_registers import queries as register_queries  # noqa: E402

FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"


def _settings(quick: int, full: int):
    return settings(max_examples=full if FULL else quick, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


LIMITS = ["WITHIN INTERVAL '{k}' SECOND", "WITHIN {ms} MILLISECONDS", "INTERVAL {k} SECONDS",
          "WITHIN INTERVAL '1' MINUTE", "WITHIN INTERVAL '1' MONTH"]


@st.composite
def timed_clauses(draw):
    """A row-local clause as test_cpu_engine's ``row_local_clauses``, with a
    time limit and NULL clocks sorted first or last."""
    text = draw(patterns()).to_sql()
    if draw(st.integers(0, 3)) == 0:          # an excluded part, somewhere
        hidden = draw(patterns()).to_sql()
        text = f"{text} {{- {hidden} -}}" if draw(st.booleans()) else f"{{- {hidden} -}} {text}"
    used = [v for v in VARS if v in text.replace("PERMUTE", "")]
    defines = [f"{v} AS {draw(st.sampled_from(ROW_LOCAL)).format(v=v, k=draw(st.integers(0, 3)))}"
               for v in used if draw(st.integers(0, 4))]
    skip = draw(st.sampled_from(["PAST LAST ROW", "TO NEXT ROW"]
                                + [f"TO {fl} {v}" for fl in ("FIRST", "LAST") for v in used]
                                + (["TO U"] if used else [])))
    subset = f" SUBSET U = ({', '.join(used)})" if used else ""
    limit = draw(st.sampled_from(LIMITS)).format(k=draw(st.integers(1, 4)),
                                                 ms=draw(st.integers(1, 4000)))
    nulls = draw(st.sampled_from(["", " NULLS FIRST", " NULLS LAST"]))
    return (f"PARTITION BY p ORDER BY ts{nulls} MEASURES COUNT(*) AS n "
            f"AFTER MATCH SKIP {skip} PATTERN ({text}) {limit}{subset}"
            + (f" DEFINE {', '.join(defines)}" if defines else ""))


@st.composite
def clocked_tables(draw, max_rows: int = 40):
    """Random rows with a TIMESTAMP clock: seconds apart or less (ties),
    some NULL, in up to three partitions (and a string and an interval
    column for test_registers.py's templates)."""
    n = draw(st.integers(0, max_rows))
    small = st.one_of(st.none(), st.integers(0, 3)) if draw(st.booleans()) else st.integers(0, 3)
    parts = draw(st.integers(1, 3))
    unit = draw(st.sampled_from(["s", "ms"]))
    step = 1 if unit == "s" else draw(st.sampled_from([250, 1000]))
    nulls = draw(st.booleans())
    ts = [None if nulls and draw(st.integers(0, 5)) == 0 else draw(st.integers(0, 8)) * step
          for _ in range(n)]
    return pa.table({
        "p": pa.array([draw(st.integers(0, parts - 1)) for _ in range(n)], pa.int64()),
        "ts": pa.array(ts, pa.timestamp(unit)),
        "a": pa.array([draw(st.integers(0, 3)) for _ in range(n)], pa.int64()),
        "b": pa.array([draw(small) for _ in range(n)], pa.int64()),
        "c": pa.array([draw(st.integers(0, 3)) for _ in range(n)], pa.int64()),
        # what test_registers.py's string and interval templates read
        "s": pa.array([draw(st.sampled_from([None, "x", "y", ""])) for _ in range(n)],
                      pa.string()),
        "dur": pa.array([draw(st.one_of(st.none(), st.integers(0, 3))) for _ in range(n)],
                        pa.int64()).cast(pa.duration("ms")),
        "m": register_decimals(draw, n),
        "day": register_days(draw, n),
    })


def _check(clause: str, table: pa.Table) -> CpuEngine:
    query = analyze(parse_clause(clause), table.schema)
    cpu = CpuEngine()
    assert cpu.supports(query) is None, clause
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    want = outcome(ReferenceEngine(), query, data)
    got = outcome(cpu, query, data)
    assert got == want, f"\n{clause}\n{table.to_pydict()}"
    return cpu, got


@_settings(200, 2000)
@given(timed_clauses(), clocked_tables())
def test_cpu_engine_equals_reference(clause, table):
    cpu, got = _check(clause, table)
    if table.num_rows and isinstance(got, list):    # not a SKIP error
        assert cpu.last_run.path == "dfa"
        assert cpu.last_run.scan.startswith("anchored")


@_settings(30, 300)
@given(timed_clauses(), clocked_tables(120), st.integers(2, 9))
def test_speculative_chunks_equal_reference(clause, table, chunk_rows):
    saved = S.CHUNKED_MIN_ROWS, S.CHUNK_MIN_ROWS, S.CHUNK_THREADS
    S.CHUNKED_MIN_ROWS, S.CHUNK_MIN_ROWS, S.CHUNK_THREADS = 1, chunk_rows, 64
    try:
        _check(clause, table)
    finally:
        S.CHUNKED_MIN_ROWS, S.CHUNK_MIN_ROWS, S.CHUNK_THREADS = saved


_NO_DEVICE = B.detect() if isinstance(B.detect(), str) else None


@pytest.mark.skipif(_NO_DEVICE is not None, reason=f"no GPU and no simulator: {_NO_DEVICE}")
@_settings(25, 300)
@given(timed_clauses(), clocked_tables(), st.sampled_from([1, 2, 3, 64]))
def test_gpu_engine_equals_reference(clause, table, chunk_rows):
    """The device's chunked scan (the CUDA simulator without a GPU), with
    chunks so small that boundaries fall inside matches."""
    query = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    gpu = GpuEngine()
    gpu.chunk_rows = chunk_rows
    assert gpu.supports(query) is None, clause
    want = outcome(ReferenceEngine(), query, data)
    assert outcome(gpu, query, data) == want, f"\n{clause}\n{chunk_rows}\n{table.to_pydict()}"


def _sorted_clocked(table: pa.Table, clause: str) -> pa.Table:
    query = analyze(parse_clause(clause), table.schema)
    return sort_for_matching(table, query.partition_columns, query.order_keys).table


@_settings(60, 600)
@given(timed_clauses(), clocked_tables(), st.lists(st.integers(0, 40), max_size=5))
def test_stream_pieces_equal_the_whole(clause, table, cuts):
    clause = clause.replace("COUNT(*) AS n", "COUNT(*) AS n, MATCH_NUMBER() AS mno, "
                            "CLASSIFIER() AS cls, FIRST(ts) AS s")
    table = _sorted_clocked(table, clause)
    try:
        want = gpu_mr.match_recognize(table, clause, engine="reference")
    except GpuMrError as exc:
        with pytest.raises(type(exc)):
            list(gpu_mr.match_recognize_batches(_split(table, cuts), clause, engine="cpu"))
        return
    pieces = list(gpu_mr.match_recognize_batches(_split(table, cuts), clause, engine="cpu"))
    if not pieces:
        assert want.num_rows == 0
        return
    got = pa.concat_tables(pieces)
    assert got.equals(want), f"\n{clause}\n{cuts}\n{got.to_pylist()}\n{want.to_pylist()}"


def _split(table: pa.Table, cuts: list) -> list:
    bounds = sorted({0, table.num_rows} | {min(c, table.num_rows) for c in cuts})
    return [table.slice(a, b - a) for a, b in zip(bounds, bounds[1:])]


# ------------------------------------------------------------ horizons

def _horizons(values, arrow_type, limit: str, parts=None, nulls: str = "") -> list:
    cols = {"ts": pa.array(values, arrow_type)}
    if parts is not None:
        cols["p"] = pa.array(parts, pa.int64())
    table = pa.table(cols)
    clause = (("PARTITION BY p " if parts is not None else "")
              + f"ORDER BY ts{nulls} MEASURES COUNT(*) AS n PATTERN (A+) {limit}")
    query = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    assert data.was_sorted
    return row_horizons(query, data).tolist()


def test_the_limit_is_strict():
    # a row exactly 2 s after the start does not join; 1.999999 s does
    us = pa.timestamp("us")
    assert _horizons([0, 1_999_999, 2_000_000, 3_000_000], us, "WITHIN INTERVAL '2' SECOND") \
        == [2, 4, 4, 4]
    assert _horizons([0, 0, 1, 2], pa.timestamp("s"), "WITHIN INTERVAL '1' SECOND") \
        == [2, 2, 3, 4]
    # 1.5 s on a clock in seconds: a row 1 s later joins, 2 s later does not
    assert _horizons([0, 1, 2], pa.timestamp("s"), "WITHIN 1500 MILLISECONDS") == [2, 3, 3]


def test_null_clocks_join_nothing():
    s = pa.timestamp("s")
    # NULLs last: they end every search; a search starting at one takes no row
    assert _horizons([0, 1, None, None], s, "WITHIN INTERVAL '9' SECOND") == [2, 2, 2, 3]
    # NULLs first
    assert _horizons([None, None, 0, 5], s, "WITHIN INTERVAL '9' SECOND", nulls=" NULLS FIRST") \
        == [0, 1, 4, 4]
    # an all-NULL clock
    assert _horizons([None, None], s, "WITHIN INTERVAL '9' SECOND") == [0, 1]


def test_partitions_end_the_horizon():
    assert _horizons([0, 1, 0, 1], pa.timestamp("s"), "WITHIN INTERVAL '9' SECOND",
                     parts=[0, 0, 1, 1]) == [2, 2, 4, 4]


def test_month_limits_follow_the_calendar():
    d = [dt.date(2024, 1, 31), dt.date(2024, 2, 28), dt.date(2024, 2, 29), dt.date(2024, 3, 1),
         dt.date(2024, 3, 31)]
    # Jan 31 + 1 month = Feb 29; Feb 28 + 1 month = Mar 28; Feb 29 -> Mar 29; Mar 1 -> Apr 1
    assert _horizons(d, pa.date32(), "WITHIN INTERVAL '1' MONTH") == [2, 4, 4, 5, 5]
    # a timestamp keeps its time of day: Jan 31 12:00 + 1 month = Feb 29 12:00
    ts = [dt.datetime(2024, 1, 31, 12), dt.datetime(2024, 2, 29, 11, 59, 59),
          dt.datetime(2024, 2, 29, 12)]
    assert _horizons(ts, pa.timestamp("ms"), "WITHIN INTERVAL '1' MONTH") == [2, 3, 3]
    # a year is twelve months: Feb 29 2024 + 1 year = Feb 28 2025
    y = [dt.date(2024, 2, 29), dt.date(2025, 2, 27), dt.date(2025, 2, 28)]
    assert _horizons(y, pa.date32(), "WITHIN INTERVAL '1' YEAR") == [2, 3, 3]


def test_day_limits_on_a_date_clock():
    d = [dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2024, 1, 3)]
    assert _horizons(d, pa.date32(), "WITHIN INTERVAL '1' DAY") == [1, 2, 3]
    # 25 hours: a date one day later is 24 h later, in time; two days is not
    assert _horizons(d, pa.date32(), "WITHIN INTERVAL '25' HOUR") == [2, 3, 3]


def test_huge_limits_saturate():
    top = np.iinfo(np.int64).max
    ns = pa.timestamp("ns")
    assert _horizons([0, top - 1, top], ns, "WITHIN INTERVAL '200000' DAY") == [3, 3, 3]
    assert _horizons([0, 10**18, 9 * 10**18], ns, "WITHIN INTERVAL '900' YEAR") == [3, 3, 3]


@_settings(100, 1000)
@given(st.lists(st.one_of(st.none(), st.integers(-4 * 10**6, 4 * 10**6)), max_size=30),
       st.sampled_from(["s", "ms", "us", "date"]),
       st.sampled_from(["WITHIN INTERVAL '1' MONTH", "WITHIN INTERVAL '2' MONTH",
                        "WITHIN INTERVAL '1' YEAR", "WITHIN INTERVAL '3' DAY",
                        "WITHIN INTERVAL '90' MINUTE", "WITHIN 1500 MILLISECONDS",
                        "WITHIN INTERVAL '7' SECOND"]),
       st.booleans())
def test_horizons_follow_the_reference_deadline(raw, unit, limit, nulls_first):
    """Brute force: the first row not in time by the reference's own rule."""
    if unit == "date":
        arrow_type, values = pa.date32(), [None if v is None else v // 100 for v in raw]
    else:
        scale = {"s": 10, "ms": 10**5, "us": 10**8}[unit]
        arrow_type, values = pa.timestamp(unit), [None if v is None else v * scale for v in raw]
    table = pa.table({"ts": pa.array(values, arrow_type)})
    nulls = " NULLS FIRST" if nulls_first else " NULLS LAST"
    query = analyze(parse_clause(f"ORDER BY ts{nulls} MEASURES COUNT(*) AS n PATTERN (A) "
                                 f"{limit}"), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    clock = T.arrow_values(data.table.column("ts"), query.column_types["ts"])
    want = []
    for s in range(len(clock)):
        deadline = time_limit_deadline(clock[s], query.time_limit.interval)
        q = s
        while (clock[s] is not None and q < len(clock) and clock[q] is not None
               and compare("<", clock[q], deadline) is True):
            q += 1
        want.append(q)
    assert row_horizons(query, data).tolist() == want
    assert row_horizons(query, data, compiled=False).tolist() == want


def test_without_a_limit_the_scan_is_unchanged():
    # the same clause without WITHIN still takes the unanchored scan
    t = pa.table({"ts": pa.array(range(6), pa.timestamp("s")), "a": [1, 2, 3, 1, 2, 3]})
    clause = "ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B+) DEFINE B AS a > PREV(a)"
    query = analyze(parse_clause(clause), t.schema)
    cpu = CpuEngine()
    cpu.find_matches(query, sort_for_matching(t, (), query.order_keys))
    assert cpu.last_run.scan == "unanchored"
    timed = analyze(parse_clause(clause.replace("DEFINE", "WITHIN INTERVAL '2' SECOND DEFINE")),
                    t.schema)
    found = cpu.find_matches(timed, sort_for_matching(t, (), timed.order_keys)).to_matches()
    assert [(m.start, m.end) for m in found] == [(0, 1), (3, 4)]
    assert "time limit" in cpu.last_run.scan


# ------------------------------------------------------------ the register machine

@st.composite
def timed_stateful_clauses(draw):
    """test_registers.py's random queries (DEFINEs that read the match so
    far), each with a time limit."""
    clause = draw(register_queries())
    if "WITHIN" in clause or "ALL MATCHES" in clause:
        return clause
    limit = draw(st.sampled_from(LIMITS)).format(k=draw(st.integers(1, 4)),
                                                 ms=draw(st.integers(1, 4000)))
    cut = min([clause.find(w) for w in (" SUBSET ", " DEFINE ") if w in clause],
              default=len(clause))
    return f"{clause[:cut]} {limit}{clause[cut:]}"


@_settings(200, 2000)
@given(timed_stateful_clauses(), clocked_tables(14))
def test_register_machine_equals_reference(clause, table):
    query = analyze(parse_clause(clause), table.schema)
    if R.supports(query) is not None:
        return
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    want = outcome(ReferenceEngine(), query, data)
    assert outcome(_Registers(), query, data) == want, f"\n{clause}\n{table.to_pydict()}"


class _Registers:
    """The register machine as plain Python (the compiled kernel is the
    same source; test_registers.py compares the two)."""

    @staticmethod
    def find_matches(query, data):
        return R.find_matches(query, data, jit=False)


def test_state_dependent_defines_with_a_limit_run_on_the_register_machine():
    t = pa.table({"ts": pa.array(range(4), pa.timestamp("s")), "a": [1, 2, 3, 4]})
    clause = ("ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B+) "
              "WITHIN INTERVAL '2' SECOND DEFINE B AS a > LAST(A.a)")
    query = analyze(parse_clause(clause), t.schema)
    cpu = CpuEngine()
    assert cpu.supports(query) is None
    found = cpu.find_matches(query, sort_for_matching(t, (), query.order_keys)).to_matches()
    assert [(m.start, m.end) for m in found] == [(0, 1), (2, 3)]
    assert cpu.last_run.path == "registers"
    assert gpu_mr.match_recognize(t, clause, engine="cpu")["n"].to_pylist() == [2, 2]


@pytest.mark.parametrize("define", ["a > 0", "COUNT(A.*) >= 1"])
def test_a_possessive_quantifier_ends_at_the_horizon(define):
    # A++ gives no row back: its exit needs A unable to take the next row,
    # which a row out of time is, though A's DEFINE holds there.
    t = pa.table({"ts": pa.array(range(5), pa.timestamp("s")), "a": [1] * 5})
    clause = (f"ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A++) WITHIN INTERVAL '2' SECOND "
              f"DEFINE A AS {define}")
    query = analyze(parse_clause(clause), t.schema)
    data = sort_for_matching(t, (), query.order_keys)
    want = outcome(ReferenceEngine(), query, data)
    assert [(s, e) for _, _, s, e, _, _ in want] == [(0, 1), (2, 3), (4, 4)]
    assert outcome(CpuEngine(), query, data) == want
    assert outcome(_Registers(), query, data) == want


@pytest.mark.parametrize("n_vars", [2, 9, 17])
def test_the_empty_class_is_in_the_tables_though_no_row_has_it(n_vars):
    # Every variable holds at every row (no DEFINE, or TRUE), so no row's
    # class is empty; the horizon still steps with it, and only the empty
    # class lets V1++ end there (whether a match ends depends on the class
    # only through a possessive guard). 9 and 17 variables take the dense
    # renumbering (a lookup table, then np.unique).
    names = [f"V{i}" for i in range(n_vars)]
    rest = f" ({' | '.join(names[2:])})?" if n_vars > 2 else ""
    t = pa.table({"ts": pa.array([0, 0, 1, 2, 2, 3, 5], pa.timestamp("s")), "a": [1] * 7})
    clause = (f"ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP TO NEXT ROW "
              f"PATTERN (V0 V1++{rest}) WITHIN INTERVAL '2' SECOND DEFINE V1 AS TRUE")
    query = analyze(parse_clause(clause), t.schema)
    data = sort_for_matching(t, (), query.order_keys)
    want = outcome(ReferenceEngine(), query, data)
    assert [(s, e) for _, _, s, e, _, _ in want][:3] == [(0, 2), (1, 2), (2, 4)]
    cpu = CpuEngine()
    assert outcome(cpu, query, data) == want
    assert cpu.last_run.path == "dfa"
    if _NO_DEVICE is None:
        gpu = GpuEngine()
        gpu.chunk_rows = 2
        assert outcome(gpu, query, data) == want


@pytest.mark.skipif(_NO_DEVICE is not None, reason=f"no GPU and no simulator: {_NO_DEVICE}")
@_settings(40, 400)
@given(timed_clauses(), clocked_tables(), st.booleans())
def test_whole_device_pipeline_equals_reference(clause, table, shuffled):
    """Time limits through the GPU engine's on-device pipeline: the rows
    sorted there and the horizons computed there (kernels/gpu_horizons.py),
    unsorted input included."""
    clause = clause.replace("COUNT(*) AS n", "COUNT(*) AS n, MATCH_NUMBER() AS m, "
                            "LAST(ts) AS e, FIRST(a) AS fa")
    if shuffled and table.num_rows > 1:
        table = table.take(np.random.default_rng(table.num_rows).permutation(table.num_rows))
    assert_engine_gives_the_references(table, clause, "gpu")


@_settings(60, 600)
@given(timed_clauses(), clocked_tables())
def test_device_horizon_body_equals_the_host_sweep(clause, table):
    """kernels/gpu_horizons.py's per-row binary searches, run as plain
    Python, against horizons.py's sweep."""
    from gpu_mr.horizons import clock_storage, last_in_time
    from gpu_mr.kernels.gpu_horizons import horizon_at
    query = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    values, valid, unit_ns = clock_storage(data.table.column("ts"))
    last = last_in_time(values, unit_ns, query.time_limit.interval)
    offsets = data.partition_offsets.astype(np.int64)
    got = [horizon_at(s, values, valid, last, offsets) for s in range(table.num_rows)]
    assert got == row_horizons(query, data, compiled=False).tolist()
