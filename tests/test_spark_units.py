"""gpu_mr.spark pieces that need no Spark session: engine choice per task,
batch gathering, result casting, error translation."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest

from gpu_mr.analysis import analyze
from gpu_mr.errors import DataError, MatchRuntimeError
from gpu_mr.spark import execution as X
from gpu_mr.spark import schema as S
from gpu_mr.syntax import parse_clause

ROW_LOCAL = "ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B+) DEFINE B AS p < PREV(p)"
SCHEMA = pa.schema([("ts", pa.int64()), ("p", pa.float64())])


class _Gpu:
    addresses = ["0"]


def test_auto_without_a_gpu_resource_never_takes_the_gpu():
    q = analyze(parse_clause(ROW_LOCAL), SCHEMA)
    assert X.executor_engine(q, "auto", resources={}) == "cpu"
    assert X.executor_engine(q, "reference", resources={"gpu": _Gpu()}) == "reference"


def test_auto_with_a_gpu_it_cannot_use_falls_back_with_a_warning(caplog):
    q = analyze(parse_clause(ROW_LOCAL), SCHEMA)
    with caplog.at_level(logging.WARNING, logger="gpu_mr.spark"):
        chosen = X.executor_engine(q, "auto", resources={"gpu": _Gpu()})
    assert chosen in ("gpu", "cpu")
    if chosen == "cpu":
        assert "runs on the CPU" in caplog.text


def test_batches_are_gathered_and_lose_the_order_column():
    t = pa.table({"ts": list(range(10)), S.SEQUENCE_COLUMN: list(range(10))})
    steps = list(X._coalesce(iter(t.to_batches(max_chunksize=3)), 5))
    assert [s.num_rows for s in steps] == [6, 4]
    assert all(s.column_names == ["ts"] for s in steps)


def test_task_streams_one_partition_over_many_batches():
    t = pa.table({"ts": list(range(12)), "p": [5., 4., 3., 6., 5., 4., 3., 2., 7., 1., 0., 9.],
                  S.SEQUENCE_COLUMN: list(range(12))})
    task = X.build_task(ROW_LOCAL, "auto", pa.schema([("n", pa.int64())]), 2)
    got = [r["n"] for b in task(iter(t.to_batches(max_chunksize=1))) for r in b.to_pylist()]
    import gpu_mr
    assert got == gpu_mr.match_recognize(t.drop_columns([S.SEQUENCE_COLUMN]),
                                         ROW_LOCAL).column("n").to_pylist()


def test_result_cast_failure_names_the_column():
    with pytest.raises(DataError, match="'n'"):
        S.conform(pa.table({"n": [2 ** 40]}), pa.schema([("n", pa.int32())]))


def test_translate_error_picks_the_last_gpu_mr_error():
    text = ("Traceback ...\ngpu_mr.errors.DataError: first\n\nmore\n"
            "gpu_mr.errors.MatchRuntimeError: AFTER MATCH SKIP TO FIRST B: loop\n\tat java...")
    err = X.translate_error(RuntimeError(text))
    assert isinstance(err, MatchRuntimeError) and str(err) == "AFTER MATCH SKIP TO FIRST B: loop"


def test_a_task_runs_its_kernels_on_its_own_cpus():
    """An executor runs one task per core at once: each task's kernels use
    the CPUs Spark gave it (numba's count, which the measure kernels' pool
    follows too), not every core."""
    numba = pytest.importorskip("numba")
    from gpu_mr.kernels import threads
    before = numba.get_num_threads()
    try:
        X._limit_threads(1)
        assert numba.get_num_threads() == 1 and threads.thread_count() == 1
        X._limit_threads(None)                       # outside a task: left alone
        assert numba.get_num_threads() == 1
        X._limit_threads(10**6)                      # never past numba's maximum
        assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS
    finally:
        numba.set_num_threads(before)
    assert X._task_cpus() is None                    # not in a task
