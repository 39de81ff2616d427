"""Input columns on the device (gpu_mr/device_input.py) and the GPU
engine's whole pipeline on them: from a host Arrow table, and from a cuDF
frame without bringing it to the host.

Without a GPU this runs under numba's CUDA simulator with a stand-in for
cuDF (tests/fake_cudf.py, the documented calls over Arrow); with RAPIDS
installed the cuDF tests use the real library.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpu_mr
from gpu_mr import backend as B
from gpu_mr.device_input import from_arrow, from_cudf
from gpu_mr.errors import GpuMrError

from test_cpu_engine import assert_engine_gives_the_references, row_local_clauses, tables

if isinstance(B.detect(), str):
    pytest.skip(f"no GPU and no simulator: {B.detect()}", allow_module_level=True)

BACKEND = B.detect()
FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"
REAL_CUDF = importlib.util.find_spec("cudf") is not None and not BACKEND.simulated


@pytest.fixture
def cudf(monkeypatch):
    if REAL_CUDF:
        import cudf
        return cudf
    import fake_cudf
    monkeypatch.setitem(sys.modules, "cudf", fake_cudf)
    fake_cudf.DataFrame.whole_frame_to_arrow = fake_cudf.DataFrame.from_arrow_calls = 0
    return fake_cudf


def mixed_table() -> pa.Table:
    return pa.table({
        "i": pa.array([3, None, -1, 7], pa.int64()),
        "f": pa.array([1.5, math.nan, None, -0.0]),
        "b": pa.array([True, None, False, True]),
        "d": pa.array([0, 1, None, 3], pa.date32()),
        "t": pa.array([5, None, 7, 8], pa.timestamp("ms")),
        "s": pa.array(["b", None, "a", "b"]),
    })


def host(a):
    return BACKEND.to_host(a)


@pytest.mark.parametrize("name,expect,valid", [
    ("i", [3, 0, -1, 7], [1, 0, 1, 1]),
    ("b", [True, False, False, True], [1, 0, 1, 1]),
    ("d", [0, 1, 0, 3], [1, 1, 0, 1]),
    ("t", [5, 0, 7, 8], [1, 0, 1, 1]),
])
def test_arrow_columns_on_the_device(name, expect, valid):
    values, got_valid = from_arrow(BACKEND, mixed_table()).column(name)
    assert host(values).tolist() == expect
    assert host(got_valid).astype(int).tolist() == valid


def test_floats_keep_nan_and_null_is_zero():
    values, valid = from_arrow(BACKEND, mixed_table()).column("f")
    v = host(values)
    assert v[0] == 1.5 and math.isnan(v[1]) and v[2] == 0 and math.copysign(1, v[3]) < 0
    assert host(valid).tolist() == [True, True, False, True]


def test_string_keys_are_ranks_in_byte_order():
    values, valid = from_arrow(BACKEND, mixed_table()).key("s")
    assert host(values).tolist() == [1, 0, 0, 1] and host(valid).tolist() == [1, 0, 1, 1]
    assert "s" in from_arrow(BACKEND, mixed_table()).reason(["i", "s"])


def test_a_column_moves_once():
    source = from_arrow(BACKEND, mixed_table())
    assert source.column("i")[0] is source.column("i")[0]


def test_cudf_columns_match_arrow(cudf):
    table = mixed_table().drop_columns(["s"])
    arrow_source = from_arrow(BACKEND, table)
    cudf_source = from_cudf(BACKEND, cudf.DataFrame.from_arrow(table))
    assert cudf_source.schema == table.schema
    for name in table.column_names:
        (v1, m1), (v2, m2) = arrow_source.column(name), cudf_source.column(name)
        assert np.array_equal(host(v1), host(v2), equal_nan=v1.dtype.kind == "f"), name
        assert (m1 is None) == (m2 is None) and (m1 is None or np.array_equal(host(m1),
                                                                           host(m2)))
    assert cudf_source.take("i", np.array([3, 0])).to_pylist() == [7, 3]


V_SHAPE = """PARTITION BY sym ORDER BY ts
    MEASURES FIRST(A.ts) AS start_ts, LAST(B.price) AS bottom, COUNT(*) AS n,
             MATCH_NUMBER() AS m
    PATTERN (A B+ C+) DEFINE B AS price < PREV(price), C AS price > PREV(price)"""


def ticks(n: int, parts: int, seed: int, shuffled: bool) -> pa.Table:
    rng = np.random.default_rng(seed)
    t = pa.table({"sym": rng.integers(0, parts, n), "ts": rng.integers(0, n // 2 + 1, n),
                  "price": np.round(rng.normal(0, 1, n).cumsum(), 1)})
    if not shuffled:
        t = t.sort_by([("sym", "ascending"), ("ts", "ascending")])
    return t


@pytest.mark.parametrize("shuffled", [False, True])
def test_cudf_input_runs_on_the_device_and_returns_cudf(cudf, shuffled):
    table = ticks(300, 4, 5, shuffled)
    got = gpu_mr.match_recognize(cudf.DataFrame.from_arrow(table), V_SHAPE, engine="gpu")
    assert type(got).__name__ == "DataFrame" and type(got).__module__.startswith("cudf")
    if not REAL_CUDF:
        assert cudf.DataFrame.whole_frame_to_arrow == 0     # never brought to the host
    want = gpu_mr.match_recognize(table, V_SHAPE, engine="reference")
    assert got.to_arrow().equals(want) and want.num_rows > 10
    run = gpu_mr.engines._AVAILABLE["gpu"].last_run
    assert run.reason.startswith("every stage on the device"), run


def typed_ticks(n: int, parts: int, seed: int) -> pa.Table:
    """Ticks with a timestamp clock, a BIGINT with NULLs, a boolean and a
    date: every type the output built on the device takes, and one it
    does not (date)."""
    rng = np.random.default_rng(seed)
    t = ticks(n, parts, seed, True)
    v = rng.integers(-50, 50, n)
    return t.set_column(1, "ts", pa.array(t.column("ts").to_numpy() * 1000,
                                          pa.timestamp("us"))).append_column(
        "v", pa.array(v, pa.int64(), mask=rng.random(n) < 0.3)).append_column(
        "flag", pa.array(v % 3 == 0)).append_column(
        "day", pa.array(rng.integers(0, 20000, n), pa.int32()).cast(pa.date32()))


DEVICE_OUTPUT = """PARTITION BY sym ORDER BY ts
    MEASURES FIRST(A.ts) AS start_ts, LAST(B.v) AS lv, SUM(v) AS sv, AVG(B.v) AS av,
             MIN(flag) AS mf, MAX(C.price) AS top, COUNT(B.v) AS nv, COUNT(*) AS n,
             MATCH_NUMBER() AS m
    PATTERN (A B+ C+) DEFINE B AS price < PREV(price), C AS price > PREV(price)"""


@pytest.mark.parametrize("seed", range(3))
def test_cudf_output_is_built_on_the_device(cudf, seed):
    # NULLs (LAST, SUM, AVG of a column with NULLs, empty SUMs), timestamps
    # from their storage, booleans: the frame comes from the device columns
    table = typed_ticks(400, 3 + seed, 20 + seed)
    frame = cudf.DataFrame.from_arrow(table)
    if not REAL_CUDF:
        cudf.DataFrame.from_arrow_calls = 0
    got = gpu_mr.match_recognize(frame, DEVICE_OUTPUT, engine="gpu")
    if not REAL_CUDF:       # neither the input nor the output crossed to the host
        assert cudf.DataFrame.from_arrow_calls == 0 and cudf.DataFrame.whole_frame_to_arrow == 0
    run = gpu_mr.engines._AVAILABLE["gpu"].last_run
    assert run.reason.endswith("the output stays there"), run
    want = gpu_mr.match_recognize(table, DEVICE_OUTPUT, engine="reference")
    assert got.to_arrow().equals(want) and want.num_rows > 10
    assert want.column("lv").null_count and want.column("av").null_count


@pytest.mark.parametrize("measure", [
    "CLASSIFIER() AS cl", "FIRST(A.day) AS d",
    "CASE WHEN COUNT(*) > 4 THEN 'long' ELSE 'short' END AS k",
    "SUM(B.v) / (COUNT(*) - 4) AS q"])
def test_cudf_output_built_on_the_host_where_the_device_does_not(cudf, measure):
    # strings are built on the host, and an expression that raises at some
    # match (a division by zero where COUNT(*) is 4) is the host's to decide
    # (here the interpreter's error); a date stays on the device but becomes
    # a cuDF column through Arrow
    table = typed_ticks(300, 3, 9)
    clause = DEVICE_OUTPUT.replace("MATCH_NUMBER() AS m", f"MATCH_NUMBER() AS m, {measure}")
    frame = cudf.DataFrame.from_arrow(table)
    if not REAL_CUDF:
        cudf.DataFrame.from_arrow_calls = 0
    if "/" in measure:
        with pytest.raises(GpuMrError, match="division by zero") as raised:
            gpu_mr.match_recognize(table, clause, engine="reference")
        with pytest.raises(type(raised.value), match="division by zero"):
            gpu_mr.match_recognize(frame, clause, engine="gpu")
        return
    got = gpu_mr.match_recognize(frame, clause, engine="gpu")
    if not REAL_CUDF:       # the output came through host Arrow, the input did not
        assert cudf.DataFrame.from_arrow_calls == 1 and cudf.DataFrame.whole_frame_to_arrow == 0
    run = gpu_mr.engines._AVAILABLE["gpu"].last_run
    assert run.reason.startswith("every stage on the device")
    assert run.reason.endswith("the output stays there") == ("day" in measure), run
    assert got.to_arrow().equals(gpu_mr.match_recognize(table, clause, engine="reference"))


EXPRESSIONS = ("LAST(C.price) - FIRST(A.price) AS gain, SUM(B.v) / COUNT(*) AS q, "
               "COUNT(*) * 2 + MATCH_NUMBER() AS k, -AVG(B.v) AS nav, "
               "CASE WHEN SUM(B.v) > 0 THEN MAX(C.price) ELSE 0.5 END AS pick")


@pytest.mark.parametrize("seed", range(3))
def test_cudf_output_of_expressions_over_measures_is_built_on_the_device(cudf, seed):
    # BIGINT and DOUBLE expressions over measures, NULL leaves among them
    table = typed_ticks(400, 3, 60 + seed)
    clause = DEVICE_OUTPUT.replace("MATCH_NUMBER() AS m", EXPRESSIONS)
    frame = cudf.DataFrame.from_arrow(table)
    if not REAL_CUDF:
        cudf.DataFrame.from_arrow_calls = 0
    got = gpu_mr.match_recognize(frame, clause, engine="gpu")
    if not REAL_CUDF:
        assert cudf.DataFrame.from_arrow_calls == 0 and cudf.DataFrame.whole_frame_to_arrow == 0
    assert gpu_mr.engines._AVAILABLE["gpu"].last_run.reason.endswith("the output stays there")
    want = gpu_mr.match_recognize(table, clause, engine="reference")
    assert got.to_arrow().equals(want) and want.column("nav").null_count


@pytest.mark.parametrize("seed", range(4))
def test_output_on_the_device_equals_the_host_output(seed):
    # GpuEngine.run_input(on_device=True) against the output it brings to
    # the host: shuffled input, float keys (-0.0 kept), empty matches
    from gpu_mr.analysis import analyze
    from gpu_mr.device_output import DeviceOutput
    from gpu_mr.engines.gpu import GpuEngine
    from gpu_mr.syntax import parse_clause
    table = typed_ticks(300, 4, 40 + seed)
    keys = table.column("sym").to_numpy().astype(float)
    table = table.set_column(0, "sym", pa.array(np.where(keys == 0, -0.0, keys)))
    clause = DEVICE_OUTPUT if seed % 2 else DEVICE_OUTPUT.replace("(A B+ C+)", "(A B* C*)")
    query = analyze(parse_clause(clause), table.schema)
    engine = GpuEngine()
    got = engine.run_input(query, from_arrow(BACKEND, table), on_device=True)
    assert isinstance(got, DeviceOutput) and got.cudf_reason() is None
    want = engine.run_input(query, from_arrow(BACKEND, table))
    assert got.to_arrow(BACKEND).equals(want) and want.num_rows > 10
    assert want.equals(gpu_mr.match_recognize(table, clause, engine="reference"))


def test_cudf_string_keys_take_the_host_path(cudf):
    table = ticks(200, 3, 6, True)
    names = pa.array([f"s{v}" for v in table.column("sym").to_pylist()])
    table = table.set_column(0, "sym", names)
    got = gpu_mr.match_recognize(cudf.DataFrame.from_arrow(table), V_SHAPE, engine="gpu")
    assert got.to_arrow().equals(gpu_mr.match_recognize(table, V_SHAPE, engine="reference"))


@pytest.mark.parametrize("shuffled", [False, True])
def test_arrow_input_runs_every_stage_on_the_device(shuffled):
    table = ticks(400, 5, 7, shuffled)
    got = gpu_mr.match_recognize(table, V_SHAPE, engine="gpu")
    assert got.equals(gpu_mr.match_recognize(table, V_SHAPE, engine="reference"))
    run = gpu_mr.engines._AVAILABLE["gpu"].last_run
    assert run.reason == "every stage on the device" + (" (input sorted there)" * shuffled)


MEASURES = ("COUNT(*) AS n, MATCH_NUMBER() AS m, FIRST(a) AS fa, LAST(b) AS lb, "
            "SUM(c) AS sc, MIN(b) AS mb, MAX(a) AS xa, AVG(b) AS ab, CLASSIFIER() AS cl, "
            "COUNT(b) AS nb, FIRST(ts, 1) AS t1, LAST(b) - FIRST(a) * 2 AS d, "
            "CASE WHEN COUNT(*) > 2 THEN CLASSIFIER() END AS k")


@settings(max_examples=600 if FULL else 60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(row_local_clauses(), tables(), st.booleans())
def test_whole_pipeline_equals_reference(clause, table, descending):
    # random unsorted keys with ties: the device sort, masks, scan and measures
    clause = clause.replace("COUNT(*) AS n", MEASURES)
    if descending:
        clause = clause.replace("ORDER BY ts", "ORDER BY ts DESC")
    assert_engine_gives_the_references(table, clause, "gpu")


def test_count_of_a_string_column_reads_its_validity_on_the_device():
    table = ticks(300, 3, 8, True)
    names = pa.array([None if i % 7 == 0 else f"n{i % 5}" for i in range(table.num_rows)])
    table = table.append_column("name", names)
    clause = V_SHAPE.replace("COUNT(*) AS n", "COUNT(B.name) AS n")
    got = gpu_mr.match_recognize(table, clause, engine="gpu")
    assert got.equals(gpu_mr.match_recognize(table, clause, engine="reference"))
    run = gpu_mr.engines._AVAILABLE["gpu"].last_run
    assert run.reason.startswith("every stage on the device"), run


def test_explain_says_whether_a_cudf_result_stays_on_the_device():
    from gpu_mr.analysis import analyze
    from gpu_mr.explain import _gpu_path
    from gpu_mr.syntax import parse_clause
    table = typed_ticks(50, 2, 3)
    kept = " ".join(_gpu_path(analyze(parse_clause(DEVICE_OUTPUT), table.schema)))
    assert "a cuDF result built on the device" in kept
    clause = DEVICE_OUTPUT.replace("COUNT(*) AS n", "CLASSIFIER() AS n")
    back = " ".join(_gpu_path(analyze(parse_clause(clause), table.schema)))
    assert "also for a cuDF frame: measure n is built on the host" in back


@pytest.mark.parametrize("key", [
    pa.array([3, None, -1, 7] * 30, pa.int8()), pa.array([1.5, -0.0, None, 0.0] * 30),
    pa.array([True, None, False, True] * 30), pa.array([0, 1, None, 3] * 30, pa.date32()),
    pa.array([5, None, 7, 8] * 30, pa.timestamp("ms")),
    pa.array([1, 2, None, 2] * 30, pa.duration("s")), pa.array([1.0, 2.0, 2.0, 0.5] * 30,
                                                                pa.float16()),
    pa.array([0, 86400000, None, 0] * 30, pa.date64()),
    pa.array([5, 6, None, 8] * 30, pa.timestamp("us", tz="UTC")),
    pa.array([2**64 - 1, 0, None, 7] * 30, pa.uint64())])
def test_partition_keys_of_every_type_come_back_from_the_device(key):
    # the output's partition keys gathered from the columns the sort put on
    # the device (float16, held widened, takes the host's take)
    rng = np.random.default_rng(len(key))
    n = len(key)
    table = pa.table({"k": key, "ts": rng.permutation(n),
                      "price": np.round(rng.normal(0, 1, n).cumsum(), 1)})
    clause = V_SHAPE.replace("PARTITION BY sym", "PARTITION BY k")
    got = gpu_mr.match_recognize(table, clause, engine="gpu")
    assert gpu_mr.engines._AVAILABLE["gpu"].last_run.reason.startswith("every stage")
    want = gpu_mr.match_recognize(table, clause, engine="reference")
    assert got.equals(want) and want.num_rows > 3
