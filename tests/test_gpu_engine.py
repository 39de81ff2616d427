"""The GPU engine (engines/gpu.py, kernels/gpu_scan.py) against the reference.

Without a GPU these run the engine's own code path under numba's CUDA
simulator (tests/conftest.py turns it on), with tiny speculative chunks so
that chunk boundaries fall inside matches and the boundary repair runs; on
a GPU machine the same tests run on the device. The conformance suite runs
on ``engine="gpu"`` through tests/test_conformance.py.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpu_mr
from gpu_mr import backend as B
from gpu_mr.analysis import analyze
from gpu_mr.engines import choose
from gpu_mr.engines.gpu import GpuEngine
from gpu_mr.engines.reference import ReferenceEngine
from gpu_mr.errors import GpuMrError
from gpu_mr.frames import sort_for_matching
from gpu_mr.syntax import parse_clause

from test_cpu_engine import outcome, row_local_clauses, tables
from test_streaming import MEASURES, assert_streamed_gives_the_reference, sorted_tables

if isinstance(B.detect(), str):
    pytest.skip(f"no GPU and no simulator: {B.detect()}", allow_module_level=True)

FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"


def run_both(clause: str, table: pa.Table, chunk_rows: int) -> tuple:
    query = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    gpu = GpuEngine()
    gpu.chunk_rows = chunk_rows
    assert gpu.supports(query) is None, clause
    return outcome(gpu, query, data), outcome(ReferenceEngine(), query, data), gpu


@settings(max_examples=1000 if FULL else 80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(row_local_clauses(), tables(), st.sampled_from([1, 2, 3, 5, 64]))
def test_gpu_engine_equals_reference(clause, table, chunk_rows):
    got, want, gpu = run_both(clause, table, chunk_rows)
    assert got == want, f"\n{clause}\nchunk_rows={chunk_rows}\n{table.to_pydict()}"
    assert gpu.last_run.path in ("device", "reference") or not table.num_rows


def v_shape(n: int, parts: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"sym": rng.integers(0, parts, n), "ts": np.arange(n),
                     "price": np.round(rng.normal(0, 1, n).cumsum(), 1)})


V = ("PARTITION BY sym ORDER BY ts MEASURES FIRST(A.ts) AS s, LAST(ts) AS e, COUNT(*) AS n, "
     "LAST(CLASSIFIER()) AS c AFTER MATCH SKIP {skip} PATTERN (A B+ C+) "
     "DEFINE B AS price < PREV(price), C AS price > PREV(price)")


@pytest.mark.parametrize("skip", ["PAST LAST ROW", "TO NEXT ROW", "TO LAST C", "TO FIRST C"])
@pytest.mark.parametrize("chunk_rows", [2, 7, 1024])
def test_long_partitions_in_chunks_equal_reference(skip, chunk_rows):
    # Two long partitions: most chunk boundaries fall inside a V, so the
    # true scan enters most chunks off their first row and repair replays.
    t = v_shape(600, 2, 3)
    gpu_mr.engines._AVAILABLE["gpu"].chunk_rows = chunk_rows
    try:
        got = gpu_mr.match_recognize(t, V.format(skip=skip), engine="gpu")
    finally:
        gpu_mr.engines._AVAILABLE["gpu"].chunk_rows = None
    assert got.equals(gpu_mr.match_recognize(t, V.format(skip=skip), engine="reference"))
    assert got.num_rows > 20


def test_repair_replays_when_a_chunk_boundary_falls_inside_a_match():
    # A B+ over rows A B B B B | B B A B B (chunks of 5): the speculative scan
    # of chunk 2 starts at row 5 (a B row: no match there, then A B B from
    # row 7); the true scan enters chunk 2 at row 5 too, since the first
    # match ends at row 6 -> resumes at 7, inside nothing: the match at 7 is
    # kept. With chunks of 3, boundaries at 3 and 6 fall inside the first
    # match (rows 0-6): chunk 2 (rows 3-5) is dropped whole, chunk 3 replays.
    x = [1, 2, 2, 2, 2, 2, 2, 1, 2, 2]
    t = pa.table({"ts": np.arange(len(x)), "x": x})
    q = ("ORDER BY ts MEASURES FIRST(A.ts) AS s, LAST(B.ts) AS e PATTERN (A B+) "
         "DEFINE A AS x = 1, B AS x = 2")
    for chunk_rows in (1, 2, 3, 4, 5, 6):
        got, want, gpu = run_both(q, t, chunk_rows)
        assert got == want, chunk_rows
        assert gpu.last_run.path == "device"


def test_skip_errors_are_the_references():
    t = pa.table({"ts": [1, 2, 3, 4], "x": [1, 2, 1, 2]})
    q = ("ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP TO FIRST A "
         "PATTERN (A B) DEFINE A AS x = 1, B AS x = 2")
    messages = []
    for engine in ("reference", "gpu"):
        with pytest.raises(GpuMrError) as info:
            gpu_mr.match_recognize(t, q, engine=engine)
        messages.append((type(info.value), str(info.value)))
    assert messages[0] == messages[1]


def test_state_dependent_queries_run_on_the_device_register_machine(monkeypatch):
    # three partitions: a real device would leave them to the CPU engine's
    # machine (REGISTERS_MIN_PARTITIONS), as the simulator does not
    from gpu_mr.engines import gpu as G
    monkeypatch.setattr(G, "REGISTERS_MIN_PARTITIONS", 0)
    t = v_shape(200, 3, 5)
    q = ("PARTITION BY sym ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B+) "
         "DEFINE B AS price < AVG(B.price) + 1 AND COUNT(B.*) < 4")
    got = gpu_mr.match_recognize(t, q, engine="gpu")
    assert got.equals(gpu_mr.match_recognize(t, q, engine="reference"))
    assert gpu_mr.engines._AVAILABLE["gpu"].last_run.path == "device registers"


def test_many_variables_and_empty_input():
    names = "ABCDEFGHIJ"
    q = ("ORDER BY ts MEASURES COUNT(*) AS n PATTERN (" + " ".join(f"{v}?" for v in names)
         + " Z) DEFINE " + ", ".join(f"{v} AS x % 11 = {i}" for i, v in enumerate(names))
         + ", Z AS x % 11 = 10")
    t = pa.table({"ts": np.arange(300), "x": np.random.default_rng(2).integers(0, 11, 300)})
    got = gpu_mr.match_recognize(t, q, engine="gpu")
    assert got.equals(gpu_mr.match_recognize(t, q, engine="reference"))
    assert gpu_mr.match_recognize(t.slice(0, 0), q, engine="gpu").num_rows == 0


def test_auto_never_picks_the_simulator():
    t = v_shape(50, 2, 1)
    query = analyze(parse_clause(V.format(skip="PAST LAST ROW")), t.schema)
    found = B.detect()
    if found.simulated:
        assert choose(query, "auto").name == "cpu"
        assert "simulator" in gpu_mr.compile(V.format(skip="PAST LAST ROW"), t).explain()
    else:
        assert choose(query, "auto").name == "gpu"


def test_kernel_bodies_compile_with_numba_and_agree(monkeypatch):
    # The simulator runs the kernel bodies as Python; numba's typing of them
    # is checked here by compiling each body into a CPU loop over the thread
    # indices and running the engine through those loops (host arrays only:
    # on a device the kernels themselves compile, in every other test).
    if not B.detect().simulated:
        pytest.skip("checks the simulator's kernel bodies; a device compiles the kernels")
    import numba
    from gpu_mr.kernels import gpu_scan
    loops = {}

    def make(body):
        @numba.njit
        def loop(jobs, *args):
            for k in range(jobs):
                body(k, *args)
        return loop

    def launch(backend, name, jobs, *args):
        if name not in loops:
            loops[name] = make(gpu_scan.BODIES[name])
        if jobs > 0:
            loops[name](jobs, *args)

    monkeypatch.setattr(gpu_scan, "launch", launch)
    t = v_shape(500, 2, 9)
    for skip in ("PAST LAST ROW", "TO NEXT ROW", "TO LAST C"):
        for chunk_rows in (3, 50):
            got, want, _ = run_both(V.format(skip=skip), t, chunk_rows)
            assert got == want, (skip, chunk_rows)
    assert set(loops) == {"scan", "repair", "chain", "gather_match", "recover"}


def test_data_beyond_device_memory_runs_in_partition_groups():
    # A row budget smaller than the input: groups of whole partitions run
    # one after another and their matches are renumbered to the whole input.
    t = v_shape(900, 13, 4)
    q = V.format(skip="PAST LAST ROW")
    query = analyze(parse_clause(q), t.schema)
    data = sort_for_matching(t, query.partition_columns, query.order_keys)
    gpu = GpuEngine()
    gpu.max_rows = 150
    got = outcome(gpu, query, data)
    assert got == outcome(ReferenceEngine(), query, data)
    assert "groups of partitions" in gpu.last_run.reason


def test_out_of_memory_halves_the_group_then_uses_the_cpu(monkeypatch):
    t = v_shape(400, 4, 6)
    q = V.format(skip="PAST LAST ROW")
    query = analyze(parse_clause(q), t.schema)
    data = sort_for_matching(t, query.partition_columns, query.order_keys)
    gpu = GpuEngine()
    real = gpu.prepare

    class OutOfMemoryError(Exception):
        pass

    largest = int(np.diff(data.partition_offsets).max())

    def prepare(query, part):
        # Two partitions never fit, nor does the largest alone.
        if part.num_partitions > 1 or part.table.num_rows == largest:
            raise OutOfMemoryError(f"out of memory allocating {part.table.num_rows * 48} bytes")
        return real(query, part)

    monkeypatch.setattr(gpu, "prepare", prepare)
    assert outcome(gpu, query, data) == outcome(ReferenceEngine(), query, data)
    assert "CPU engine ran it" in gpu.last_run.reason


def test_partition_groups():
    from gpu_mr.engines.gpu import partition_groups
    offsets = np.array([0, 5, 6, 20, 21, 22])
    assert partition_groups(offsets, 100) == [(0, 5)]
    assert partition_groups(offsets, 6) == [(0, 2), (2, 3), (3, 5)]
    assert partition_groups(offsets, 1) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]


@settings(max_examples=600 if FULL else 60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(row_local_clauses(), sorted_tables(), st.lists(st.integers(0, 40), max_size=6),
       st.sampled_from([1, 2, 3, 7]))
def test_batches_on_the_gpu_equal_the_whole(clause, table, cuts, chunk_rows):
    # The open search of the last partition carried from batch to batch,
    # with speculative chunks inside each batch (undecided searches at the
    # batch's end stop the true scan: later chunks' matches are dropped).
    clause = clause.replace("MEASURES COUNT(*) AS n", MEASURES)
    gpu = gpu_mr.engines._AVAILABLE["gpu"]
    gpu.chunk_rows = chunk_rows
    try:
        assert_streamed_gives_the_reference(table, clause, cuts, engine="gpu")
    finally:
        gpu.chunk_rows = None


def test_a_long_partition_in_many_batches_on_the_gpu():
    t = v_shape(3000, 1, 8)
    q = V.format(skip="PAST LAST ROW")
    gpu = gpu_mr.engines._AVAILABLE["gpu"]
    gpu.chunk_rows = 16
    try:
        pieces = list(gpu_mr.match_recognize_batches(t.to_batches(max_chunksize=251), q,
                                                     engine="gpu"))
    finally:
        gpu.chunk_rows = None
    assert len(pieces) > 5
    assert pa.concat_tables(pieces).equals(gpu_mr.match_recognize(t, q, engine="cpu"))


def test_few_partitions_leave_the_register_machine_to_the_cpu(monkeypatch):
    # On a device one thread per partition is slower than the CPU engine's
    # cores below REGISTERS_MIN_PARTITIONS (the simulator runs it anyway).
    import dataclasses
    monkeypatch.setattr(B, "_detected", dataclasses.replace(B.detect(), simulated=False))
    t = v_shape(200, 3, 5)
    q = ("PARTITION BY sym ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B+) "
         "DEFINE B AS price < AVG(B.price) + 1")
    got = gpu_mr.match_recognize(t, q, engine="gpu")
    assert got.equals(gpu_mr.match_recognize(t, q, engine="reference"))
    run = gpu_mr.engines._AVAILABLE["gpu"].last_run
    assert run.path == "cpu registers" and "3 partitions are too few" in run.reason


@pytest.mark.parametrize("rows_clause", ["ONE ROW PER MATCH", "ALL ROWS PER MATCH"])
def test_a_partition_wider_than_a_device_run_streams_through_it(rows_clause):
    # One partition of 600 rows, device runs of 64 rows: the rows go through
    # the device in slices, each slice's open search carried into the next.
    t = v_shape(600, 1, 11)
    q = V.format(skip="PAST LAST ROW").replace("AFTER MATCH", rows_clause + " AFTER MATCH")
    gpu = gpu_mr.engines._AVAILABLE["gpu"]
    gpu.max_rows = 64
    try:
        got = gpu_mr.match_recognize(t, q, engine="gpu")
        run = gpu.last_run
    finally:
        gpu.max_rows = None
    assert got.equals(gpu_mr.match_recognize(t, q, engine="reference"))
    assert "streamed through the device in slices of 64 rows" in run.reason, run
    assert got.num_rows > 20


@pytest.mark.parametrize("pattern", ["A+ B", "A+? B", "(A | B)+ C", "A B* C*", "(A B)+ C"])
@pytest.mark.parametrize("chunk_rows", [1, 2, 5])
def test_matches_longer_than_chunks_equal_reference(pattern, chunk_rows):
    # Matches many chunks long: a replay from the true entry crosses whole
    # chunks, so the chunks after it were repaired from the wrong row and
    # the per-partition walk (kernels/chunks.py: repair_chain) redoes them
    # one after another; a rare B or C also leaves long failed searches.
    rng = np.random.default_rng(len(pattern) * 10 + chunk_rows)
    n = 360
    t = pa.table({"sym": np.repeat([0, 1, 2], n // 3), "ts": np.arange(n),
                  "v": rng.choice([0, 1, 1, 1, 1, 1, 1, 1, 2, 3], n)})
    defines = {"A": "A AS v = 1", "B": "B AS v >= 2", "C": "C AS v = 3"}
    clause = ("PARTITION BY sym ORDER BY ts MEASURES FIRST(ts) AS s, LAST(ts) AS e, "
              f"COUNT(*) AS n AFTER MATCH SKIP PAST LAST ROW PATTERN ({pattern}) DEFINE "
              + ", ".join(d for name, d in defines.items() if name in pattern))
    got, want, gpu = run_both(clause, t, chunk_rows)
    assert got == want, (pattern, chunk_rows)
    assert gpu.last_run.path == "device"


@pytest.mark.parametrize("n_values,n", [(1, 0), (1, 5), (4, 1), (16, 300), (256, 1000),
                                        (128, 77), (256, 3)])
def test_present_values_equal_bincount(n_values, n):
    from gpu_mr.kernels.gpu_present import present_values, or_into_words
    backend = B.detect()
    rng = np.random.default_rng(n_values + n)
    values = rng.choice(rng.integers(0, n_values, 5), n).astype(np.uint8)
    want = np.bincount(values, minlength=n_values) > 0
    got = present_values(backend, backend.to_device(values), n_values)
    assert got.tolist() == want.tolist()
    words = or_into_words(values, 0, n, 1)      # the plain body, as the CPU runs it
    assert [int(w) for w in words] == [
        sum(1 << (v % 64) for v in set(values.tolist()) if v // 64 == k) for k in range(4)]


def test_kernel_times_name_each_kernel_launched():
    # benchmarks read where the device time goes from Backend.kernel_times
    t = v_shape(300, 2, 1)
    q = V.format(skip="PAST LAST ROW")
    with B.kernel_times() as times:
        gpu_mr.match_recognize(t, q, engine="gpu")
    assert {"scan_chunks", "gather_matches"} <= set(times), times
    assert all(seconds >= 0 and launches >= 1 for seconds, launches in times.values())
    assert B._kernel_times is None
