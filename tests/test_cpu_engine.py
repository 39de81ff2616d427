"""The CPU engine (engines/cpu.py, kernels/scan.py) against the reference engine.

Differential: random patterns (every operator, greedy and reluctant,
anchors, PERMUTE, exclusion), random row-local DEFINEs, random data with
NULLs and ties, every AFTER MATCH SKIP: the CPU engine must return exactly
the reference engine's matches (partition, number, rows, variable of every
row, exclusion marks) or raise the same error. Kernel tests: the compiled
scan and recovery equal their plain Python bodies.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("numba", reason="the cpu extra (numba) is not installed")

import gpu_mr  # noqa: E402
from gpu_mr.analysis import analyze  # noqa: E402
from gpu_mr.engines import choose  # noqa: E402
from gpu_mr.engines.base import MatchArrays  # noqa: E402
from gpu_mr.engines.cpu import CpuEngine  # noqa: E402
from gpu_mr.engines.reference import ReferenceEngine  # noqa: E402
from gpu_mr.errors import GpuMrError, UnsupportedError  # noqa: E402
from gpu_mr.frames import sort_for_matching  # noqa: E402
from gpu_mr.kernels.scan import run_recovery, run_scan  # noqa: E402
from gpu_mr.pattern.dfa import Dfa  # noqa: E402
from gpu_mr.pattern.nfa import compile_nfa  # noqa: E402
from gpu_mr.syntax import parse_clause  # noqa: E402

from test_differential import ROW_LOCAL, VARS, patterns  # noqa: E402

FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"
SETTINGS = settings(max_examples=2500 if FULL else 250, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def row_local_clauses(draw):
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
    return (f"PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP {skip} "
            f"PATTERN ({text}){subset}" + (f" DEFINE {', '.join(defines)}" if defines else ""))


@st.composite
def tables(draw):
    n = draw(st.integers(0, 40))
    small = st.one_of(st.none(), st.integers(0, 3)) if draw(st.booleans()) else st.integers(0, 3)
    parts = draw(st.integers(1, 3))
    return pa.table({
        "p": pa.array([draw(st.integers(0, parts - 1)) for _ in range(n)], pa.int64()),
        "ts": pa.array([draw(st.integers(0, 5)) for _ in range(n)], pa.int64()),  # ties
        "a": pa.array([draw(st.integers(0, 3)) for _ in range(n)], pa.int64()),
        "b": pa.array([draw(small) for _ in range(n)], pa.int64()),
        "c": pa.array([draw(st.integers(0, 3)) for _ in range(n)], pa.int64()),
    })


def assert_engine_gives_the_references(table: pa.Table, clause: str, engine: str) -> None:
    """``gpu_mr.match_recognize(..., engine=engine)`` gives the reference
    engine's table, or raises its kind of error."""
    try:
        want = gpu_mr.match_recognize(table, clause, engine="reference")
    except GpuMrError as exc:
        with pytest.raises(type(exc)):
            gpu_mr.match_recognize(table, clause, engine=engine)
        return
    got = gpu_mr.match_recognize(table, clause, engine=engine)
    assert got.equals(want), f"\n{clause}\n{table.to_pydict()}"


def outcome(engine, query, data):
    try:
        found = engine.find_matches(query, data)
    except GpuMrError as exc:
        return type(exc).__name__, str(exc)
    if isinstance(found, MatchArrays):
        found = found.to_matches()
    return [(m.partition, m.number, m.start, m.end, m.labels, m.excluded) for m in found]


@SETTINGS
@given(row_local_clauses(), tables())
def test_cpu_engine_equals_reference(clause, table):
    query = analyze(parse_clause(clause), table.schema)
    cpu = CpuEngine()
    assert cpu.supports(query) is None, clause
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    want = outcome(ReferenceEngine(), query, data)
    got = outcome(cpu, query, data)
    assert got == want, f"\n{clause}\n{table.to_pydict()}"
    assert cpu.last_run.path == "dfa" or not table.num_rows


@settings(max_examples=60 if FULL else 25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(row_local_clauses(), tables())
def test_compiled_kernels_equal_their_plain_bodies(clause, table):
    query = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    if not table.num_rows:
        return
    from gpu_mr.engines.cpu import _SKIP_MODES, _renumber, class_bits
    from gpu_mr.predicates.masks import compile_masks
    results = compile_masks(query).evaluate_detailed(data)
    if any(r is not None and r.failed.any() for r in results.values()):
        return
    bits = class_bits(query, results, table.num_rows)
    present, dense = _renumber(bits, len(query.primary_vars))
    tables_ = Dfa(compile_nfa(query.pattern, query.primary_vars)).dense_tables(present)
    offsets = data.partition_offsets.astype(np.int64)
    skip_vars = (1 << len(query.primary_vars)) - 1
    results = []
    for compiled in (False, True):
        starts, ends, parts, errors = run_scan(dense, offsets, tables_,
                                               _SKIP_MODES[query.skip.kind], skip_vars,
                                               compiled=compiled)
        recovered = run_recovery(dense, offsets, starts, ends, parts, tables_,
                                 compiled=compiled)
        results.append([a.tolist() for a in (starts, ends, parts, errors, *recovered)])
    assert results[0] == results[1]


def v_shape_table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"sym": rng.integers(0, 5, n), "ts": np.arange(n),
                     "price": np.round(100 + np.cumsum(rng.normal(size=n)), 1)})


V_SHAPE = """PARTITION BY sym ORDER BY ts
    MEASURES FIRST(A.ts) AS s, LAST(B.price) AS low, LAST(C.ts) AS e, MATCH_NUMBER() AS mno,
             CLASSIFIER() AS cls, COUNT(B.*) AS downs
    {rows} AFTER MATCH SKIP {skip}
    PATTERN (A B+ C+) DEFINE B AS price < PREV(price), C AS price > PREV(price)"""


@pytest.mark.parametrize("rows", ["ONE ROW PER MATCH", "ALL ROWS PER MATCH"])
@pytest.mark.parametrize("skip", ["PAST LAST ROW", "TO NEXT ROW", "TO LAST B", "TO FIRST C"])
def test_public_api_results_equal_reference_on_ticks(rows, skip):
    t = v_shape_table(3000)
    q = V_SHAPE.format(rows=rows, skip=skip)
    assert gpu_mr.match_recognize(t, q, engine="cpu").equals(
        gpu_mr.match_recognize(t, q, engine="reference"))


def test_auto_picks_cpu_for_row_local_queries():
    query = analyze(parse_clause(V_SHAPE.format(rows="", skip="PAST LAST ROW")),
                    v_shape_table(1).schema)
    assert choose(query, "auto").name == "cpu"
    assert "engine (auto): cpu" in gpu_mr.compile(V_SHAPE.format(rows="", skip="PAST LAST ROW"),
                                                  v_shape_table(1)).explain()


def test_long_failing_run_is_linear_and_correct():
    # A+ B over a run of A rows with no B: without the dead-state memo every
    # start row rescans to the end (quadratic); with it, one pass.
    n = 200_000
    t = pa.table({"ts": np.arange(n), "x": np.ones(n, dtype=np.int64)})
    q = "ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A+ B) DEFINE A AS x = 1, B AS x = 2"
    assert gpu_mr.match_recognize(t, q, engine="cpu").num_rows == 0
    t2 = pa.table({"ts": np.arange(n + 1), "x": np.r_[np.ones(n, dtype=np.int64), 2]})
    out = gpu_mr.match_recognize(t2, q, engine="cpu").to_pylist()
    assert out == [{"n": n + 1}]


def test_define_that_raises_somewhere_gives_the_reference_outcome():
    # 1 / (x - 3) fails at x = 3; the reference raises only if its search
    # evaluates B there. Here no search reaches row 3 for B, so no error.
    t = pa.table({"ts": [1, 2, 3, 4], "x": [1, 1, 3, 5]})
    q = ("ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B) "
         "DEFINE A AS x = 1, B AS 1 / (x - 3) = 0 OR x = 1")
    cpu = CpuEngine()
    want = gpu_mr.match_recognize(t, q, engine="reference")
    assert gpu_mr.match_recognize(t, q, engine="cpu").equals(want)
    query = analyze(parse_clause(q), t.schema)
    cpu.find_matches(query, sort_for_matching(t, (), query.order_keys))
    assert cpu.last_run.path == "reference"


def test_oversized_dfa_falls_back_to_nfa_simulation(monkeypatch):
    from gpu_mr.engines import cpu as cpu_module
    monkeypatch.setattr(cpu_module, "Dfa", lambda program: Dfa(program, max_states=3))
    t = v_shape_table(500)
    q = V_SHAPE.format(rows="", skip="PAST LAST ROW")
    engine = CpuEngine()
    query = analyze(parse_clause(q), t.schema)
    data = sort_for_matching(t, query.partition_columns, query.order_keys)
    got = MatchArrays.from_matches(ReferenceEngine().find_matches(query, data))
    found = engine.find_matches(query, data)
    assert engine.last_run.path == "reference" and "states" in engine.last_run.reason
    assert found == got or MatchArrays.from_matches(found).to_matches() == got.to_matches()


def test_skip_errors_name_the_match_as_the_reference_does():
    t = pa.table({"ts": [1, 2, 3, 4], "x": [1, 2, 1, 2]})
    q = ("ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP TO FIRST A "
         "PATTERN (A B) DEFINE A AS x = 1, B AS x = 2")
    messages = []
    for engine in ("reference", "cpu"):
        with pytest.raises(GpuMrError) as info:
            gpu_mr.match_recognize(t, q, engine=engine)
        messages.append((type(info.value), str(info.value)))
    assert messages[0] == messages[1] and "loop forever" in messages[0][1]


def test_unsupported_constructs_are_named():
    t = pa.table({"ts": [1, 2], "x": [1, 2]})
    for clause, words in [
        ("ORDER BY ts MEASURES COUNT(*) AS n ALL MATCHES PATTERN (A+) DEFINE A AS x > 0",
         "matching mode"),
        ("ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP TO CURRENT ROW PATTERN (A+) "
         "DEFINE A AS x > 0", "CURRENT ROW"),
    ]:
        with pytest.raises(UnsupportedError) as info:
            gpu_mr.match_recognize(t, clause, engine="cpu")
        assert words in str(info.value)
        assert gpu_mr.match_recognize(t, clause).num_rows >= 1      # auto still answers


OUTPUT_MODES = ["ONE ROW PER MATCH", "ALL ROWS PER MATCH", "ALL ROWS PER MATCH OMIT EMPTY MATCHES",
                "ALL ROWS PER MATCH WITH UNMATCHED ROWS"]
MEASURE_SETS = [
    "COUNT(*) AS n, MATCH_NUMBER() AS mno, CLASSIFIER() AS cls",
    "FIRST(a) AS fa, LAST(U.b) AS lb, FINAL LAST(c) AS fc, FIRST(U.c, 1) AS f1",
    "SUM(U.a) AS sa, FINAL MAX(b) AS mb, AVG(c) AS ac, COUNT(U.b) AS nb",
    "PREV(FIRST(a), 1) AS pf, NEXT(LAST(U.c), 2) AS nl, LAST(a) - FIRST(c) AS d",
]


@settings(max_examples=1000 if FULL else 120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(row_local_clauses(), tables(), st.sampled_from(OUTPUT_MODES),
       st.sampled_from(MEASURE_SETS))
def test_public_outputs_equal_reference(clause, table, rows, measures):
    """End to end: output tables (every measure form, every output mode) of
    engine='cpu' and engine='reference' are equal, or both raise alike."""
    if " U" not in clause.split("PATTERN")[1]:
        measures = measures.replace("U.", "")
    clause = clause.replace("MEASURES COUNT(*) AS n", f"MEASURES {measures} {rows}")
    results = []
    for engine in ("reference", "cpu"):
        try:
            results.append(gpu_mr.match_recognize(table, clause, engine=engine))
        except GpuMrError as exc:
            results.append((type(exc).__name__, str(exc)))
    want, got = results
    if isinstance(want, tuple) or isinstance(got, tuple):
        assert got == want, clause
    else:
        assert got.equals(want), f"\n{clause}\n{got.to_pylist()}\n{want.to_pylist()}"


def test_many_variables_take_the_renumbered_class_path():
    # More than 8 variables: classes no longer fit a uint8 bitmask, so they
    # are renumbered densely before the scan.
    rng = np.random.default_rng(7)
    n = 400
    t = pa.table({"ts": np.arange(n), "x": rng.integers(0, 12, n)})
    names = [f"V{i}" for i in range(11)]
    clause = ("ORDER BY ts MEASURES COUNT(*) AS n, CLASSIFIER() AS cls, MATCH_NUMBER() AS mno "
              f"ALL ROWS PER MATCH PATTERN (({' | '.join(names)})+ V10) "
              f"DEFINE {', '.join(f'{v} AS x >= {i}' for i, v in enumerate(names))}")
    assert gpu_mr.match_recognize(t, clause, engine="cpu").equals(
        gpu_mr.match_recognize(t, clause, engine="reference"))


def test_concurrent_queries_from_threads_do_not_mix():
    # The engine object is shared: each call must use its own query's plan, and
    # only one thread at a time may launch numba's parallel (work-queue) kernels.
    from concurrent.futures import ThreadPoolExecutor
    t = v_shape_table(120_000, seed=5)     # past PARALLEL_MIN_ROWS: parallel kernels
    clauses = [V_SHAPE.format(rows="", skip="PAST LAST ROW"),
               V_SHAPE.format(rows="", skip="TO NEXT ROW").replace("B+", "B{2,}")]
    want = [gpu_mr.match_recognize(t, c, engine="cpu") for c in clauses]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: gpu_mr.match_recognize(t, clauses[i % 2], engine="cpu"),
                            range(16)))
    assert all(g.equals(want[i % 2]) for i, g in enumerate(got))


def test_many_partitions_in_parallel_blocks_equal_reference():
    # Past PARALLEL_MIN_ROWS and BALANCE_MAX_PARTITIONS: the parallel scan in
    # even blocks of partitions.
    rng = np.random.default_rng(11)
    n = 60_000
    t = pa.table({"sym": np.sort(rng.integers(0, 3000, n)), "ts": np.arange(n),
                  "price": np.round(100 + np.cumsum(rng.normal(size=n)), 1)})
    q = V_SHAPE.format(rows="", skip="PAST LAST ROW")
    assert gpu_mr.match_recognize(t, q, engine="cpu").equals(
        gpu_mr.match_recognize(t, q, engine="reference"))


@settings(max_examples=400 if FULL else 60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(row_local_clauses(), tables(), st.integers(1, 6))
def test_long_partitions_in_speculative_chunks_on_all_cores_equal_reference(clause, table,
                                                                          chunk_rows):
    # One or a few long partitions: the CPU scans them in speculative chunks
    # with boundary repair (AFTER MATCH SKIP PAST LAST ROW: the unanchored
    # scan's chunks and replays, kernels/unanchored.py; other skips:
    # kernels/chunks.py, the GPU's bodies); forced here on tiny tables and
    # chunks.
    from gpu_mr.kernels import scan as S
    saved = S.CHUNKED_MIN_ROWS, S.CHUNK_MIN_ROWS, S.CHUNK_THREADS
    S.CHUNKED_MIN_ROWS, S.CHUNK_MIN_ROWS, S.CHUNK_THREADS = 1, chunk_rows, 64
    try:
        query = analyze(parse_clause(clause), table.schema)
        data = sort_for_matching(table, query.partition_columns, query.order_keys)
        got = outcome(CpuEngine(), query, data)
    finally:
        S.CHUNKED_MIN_ROWS, S.CHUNK_MIN_ROWS, S.CHUNK_THREADS = saved
    assert got == outcome(ReferenceEngine(), query, data), f"\n{clause}\n{table.to_pydict()}"


def test_streamed_long_partition_in_speculative_chunks(monkeypatch):
    from gpu_mr.kernels import scan as S
    monkeypatch.setattr(S, "CHUNKED_MIN_ROWS", 100)
    monkeypatch.setattr(S, "CHUNK_MIN_ROWS", 37)
    monkeypatch.setattr(S, "CHUNK_THREADS", 8)
    t = v_shape_table(3000).sort_by([("sym", "ascending"), ("ts", "ascending")])
    for skip in ("PAST LAST ROW", "TO NEXT ROW"):
        q = V_SHAPE.format(rows="", skip=skip)
        want = gpu_mr.match_recognize(t, q, engine="reference")
        assert gpu_mr.match_recognize(t, q, engine="cpu").equals(want)
        pieces = gpu_mr.match_recognize_batches(t.to_batches(max_chunksize=777), q, engine="cpu")
        assert pa.concat_tables(list(pieces)).equals(want)
