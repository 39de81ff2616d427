"""gpu_mr.spark on a local Spark session: conformance, equality, streaming, errors.

One local session for the whole test session (``local[2,2]``: two cores,
a failed task retried once; two shuffle partitions; no UI). Results are
compared with the in-process ``gpu_mr.match_recognize`` on the same rows,
*row for row*: both sides are sorted by every output column (Spark defines no
row order), then compared value by value, types cast to the in-process ones.
A sample of the conformance cases, chosen to cover every case file, runs
through ``gpu_mr.spark.sql``; GPU_MR_FULL_TESTS=1 runs all of them and the
5e7-row single partition. Skipped cleanly without PySpark or Java.
"""

from __future__ import annotations

import os
import shutil

import pyarrow as pa
import pytest

pyspark = pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java runtime for a local Spark session", allow_module_level=True)

import gpu_mr  # noqa: E402
import gpu_mr.spark as gspark  # noqa: E402
from gpu_mr.demo import V_SHAPE, W_SHAPE, generate_ticks  # noqa: E402
from gpu_mr.errors import (AnalysisError, GpuMrError, MatchRuntimeError,  # noqa: E402
                           SqlSyntaxError, UnsupportedError)

from conformance_cases import build_table, compare_result, load_cases  # noqa: E402

FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"


@pytest.fixture(scope="session")
def spark():
    session = gspark.local_session("local[2,2]", app_name="gpu_mr-tests", conf={
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.adaptive.enabled": "false",
    })
    yield session
    session.stop()


def frame(spark, table: pa.Table):
    return spark.createDataFrame(table)


def same_rows(got: pa.Table, want: pa.Table) -> None:
    """Row-for-row equality, both sides sorted by every column."""
    assert got.column_names == want.column_names
    got = got.cast(pa.schema([f.with_type(_plain(want.schema.field(i).type))
                              for i, f in enumerate(got.schema)]))
    want = want.cast(pa.schema([f.with_type(_plain(f.type)) for f in want.schema]))
    sortable = [c for c, f in zip(want.column_names, want.schema)
                if not pa.types.is_list(f.type)]
    keys = [(c, "ascending") for c in sortable]
    g, w = got.sort_by(keys).to_pylist(), want.sort_by(keys).to_pylist()
    assert len(g) == len(w), f"{len(g)} rows != {len(w)}"
    for i, (a, b) in enumerate(zip(g, w)):
        assert a == b, f"row {i}: {a} != {b}"


def _plain(t: pa.DataType) -> pa.DataType:
    return pa.timestamp("us") if pa.types.is_timestamp(t) else t


# ------------------------------------------------------------ equality


TICK_QUERIES = {
    "v_shape": V_SHAPE,
    "w_shape": W_SHAPE,
    "all_rows": """PARTITION BY symbol ORDER BY ts
        MEASURES CLASSIFIER() AS cls, MATCH_NUMBER() AS mno, RUNNING COUNT(*) AS n,
                 FIRST(A.price) AS p0
        ALL ROWS PER MATCH AFTER MATCH SKIP TO NEXT ROW
        PATTERN (A U{2,} D) DEFINE U AS price > PREV(price), D AS price < PREV(price)""",
    "state_dependent": """PARTITION BY symbol ORDER BY ts
        MEASURES FIRST(A.ts) AS s, LAST(B.ts) AS e, COUNT(B.*) AS n
        PATTERN (A B+) DEFINE B AS price > A.price AND COUNT(B.*) < 5""",
}


@pytest.mark.parametrize("name", sorted(TICK_QUERIES))
def test_equal_to_in_process_on_ticks(spark, name):
    ticks = generate_ticks(rows=6000, symbols=5, seed=3)      # feed order: symbols interleaved
    clause = TICK_QUERIES[name]
    got = gspark.match_recognize(frame(spark, ticks), clause).toArrow()
    same_rows(got, gpu_mr.match_recognize(ticks, clause))


def test_schema_is_known_before_data_moves(spark):
    t = pa.table({"sym": ["a"], "ts": pa.array([1], pa.timestamp("us")),
                  "d": pa.array([1], pa.decimal128(10, 2)), "p": [1.0]})
    out = gspark.match_recognize(frame(spark, t), """PARTITION BY sym ORDER BY ts
        MEASURES FIRST(A.ts) AS t0, SUM(d) AS total, CLASSIFIER() AS c, MATCH_NUMBER() AS m
        PATTERN (A+) DEFINE A AS p > 0""")
    types = {f.name: f.dataType.simpleString() for f in out.schema.fields}
    assert types == {"sym": "string", "t0": "timestamp", "total": "decimal(38,2)",
                     "c": "string", "m": "bigint"}


def test_partition_spanning_many_arrow_batches(spark):
    ticks = generate_ticks(rows=4000, symbols=1, seed=5)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "64")
    try:
        for clause in (V_SHAPE, TICK_QUERIES["all_rows"], TICK_QUERIES["state_dependent"]):
            got = gspark.match_recognize(frame(spark, ticks), clause, batch_rows=50).toArrow()
            same_rows(got, gpu_mr.match_recognize(ticks, clause))
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def test_no_partition_by_is_one_partition(spark):
    ticks = generate_ticks(rows=3000, symbols=3, seed=1)
    clause = V_SHAPE.replace("PARTITION BY symbol", "")
    got = gspark.match_recognize(frame(spark, ticks).repartition(3), clause,
                                 batch_rows=100).toArrow()
    same_rows(got, gpu_mr.match_recognize(ticks, clause))


def test_empty_input(spark):
    ticks = generate_ticks(rows=100, symbols=2, seed=1).slice(0, 0)
    out = gspark.match_recognize(frame(spark, ticks), V_SHAPE)
    got = out.toArrow()
    assert got.num_rows == 0
    assert got.column_names == gpu_mr.match_recognize(ticks, V_SHAPE).column_names


def test_null_partition_and_order_keys(spark):
    t = pa.table({
        "k": ["a", None, "a", None, "b", None, "a", "b", None, "a"],
        "ts": [3, 1, None, 2, 1, None, 1, 2, 3, 2],
        "v": [1.0, 2.0, 3.0, 1.0, 5.0, 0.5, 2.0, 6.0, 4.0, 9.0],
    })
    for nulls in ("", "NULLS FIRST", "DESC", "DESC NULLS FIRST"):
        clause = f"""PARTITION BY k ORDER BY ts {nulls}
            MEASURES CLASSIFIER() AS c, MATCH_NUMBER() AS m, FIRST(A.v) AS v0
            ALL ROWS PER MATCH WITH UNMATCHED ROWS
            PATTERN (A B*) DEFINE B AS v > PREV(v)"""
        got = gspark.match_recognize(frame(spark, t), clause).toArrow()
        same_rows(got, gpu_mr.match_recognize(t, clause))


def test_ties_keep_input_order_and_survive_task_retries(spark):
    # Many rows tie on the ORDER BY key: the result depends on the tiebreak,
    # which must be the input order (as in gpu_mr.match_recognize), also when
    # a task fails and is retried after the shuffle.
    n = 3000
    t = pa.table({"k": [i % 3 for i in range(n)], "ts": [i // 50 for i in range(n)],
                  "v": [float((i * 7919) % 13) for i in range(n)]})
    clause = """PARTITION BY k ORDER BY ts
        MEASURES FIRST(A.v) AS v0, LAST(B.v) AS v1, COUNT(*) AS n, MATCH_NUMBER() AS m
        PATTERN (A B+) DEFINE B AS v > PREV(v)"""
    want = gpu_mr.match_recognize(t, clause)

    def fail_first_attempt(batches):
        from pyspark import TaskContext
        ctx = TaskContext.get()
        for i, batch in enumerate(batches):
            if ctx.attemptNumber() == 0 and i == 0 and ctx.partitionId() == 0:
                raise RuntimeError("injected failure")
            yield batch

    def retried(out):
        with gspark.session.quiet_pandas_warning():
            return out.mapInArrow(fail_first_attempt, out.schema).toArrow()

    df = frame(spark, t)
    same_rows(retried(gspark.match_recognize(df, clause)), want)
    for parts in (1, 5):                           # other shuffle layouts
        spark.conf.set("spark.sql.shuffle.partitions", str(parts))
        try:
            same_rows(gspark.match_recognize(df, clause).toArrow(), want)
        finally:
            spark.conf.set("spark.sql.shuffle.partitions", "2")
    # An input shuffled by Spark itself has its own (deterministic) order:
    # the same result with and without a retry.
    shuffled = gspark.match_recognize(df.repartition(4), clause)
    same_rows(retried(shuffled), shuffled.toArrow())


# ------------------------------------------------------------ gpu_mr.spark.sql


@pytest.fixture
def ticks_view(spark):
    ticks = generate_ticks(rows=3000, symbols=4, seed=2)
    frame(spark, ticks).createOrReplaceTempView("ticks")
    yield ticks
    spark.catalog.dropTempView("ticks")


def test_sql_statement_around_the_clause(spark, ticks_view):
    query = """
        SELECT m.symbol, count(*) AS v_shapes, min(m.bottom) AS lowest
        FROM ticks MATCH_RECOGNIZE (
            PARTITION BY symbol ORDER BY ts
            MEASURES LAST(B.price) AS bottom
            PATTERN (A B+ C+)
            DEFINE B AS price < PREV(price), C AS price > PREV(price)
        ) AS m
        GROUP BY m.symbol
        ORDER BY m.symbol"""
    got = gspark.sql(spark, query).toArrow()
    want = gpu_mr.sql(query, ticks=ticks_view)
    want = want if isinstance(want, pa.Table) else pa.Table.from_pandas(want)
    assert got.to_pylist() == want.to_pylist()


def test_sql_subquery_and_with_sources(spark, ticks_view):
    clause = """MATCH_RECOGNIZE (PARTITION BY symbol ORDER BY ts MEASURES COUNT(*) AS n
                PATTERN (A B+) DEFINE B AS price > PREV(price)) AS m"""
    sub = gspark.sql(spark, f"SELECT sum(n) AS s FROM (SELECT * FROM ticks WHERE volume > 0) "
                            f"{clause}").toArrow()
    cte = gspark.sql(spark, f"WITH x AS (SELECT * FROM ticks WHERE volume > 0) "
                            f"SELECT sum(n) AS s FROM x {clause}").toArrow()
    want = gpu_mr.match_recognize(ticks_view.filter(pa.compute.field("volume") > 0),
                                  "PARTITION BY symbol ORDER BY ts MEASURES COUNT(*) AS n "
                                  "PATTERN (A B+) DEFINE B AS price > PREV(price)")
    total = pa.compute.sum(want.column("n")).as_py()
    assert sub.to_pylist() == cte.to_pylist() == [{"s": total}]
    plain = gspark.sql(spark, f"SELECT sum(n) AS s FROM ticks {clause}").toArrow()
    quoted = gspark.sql(spark, f'SELECT sum(n) AS s FROM "ticks" {clause}').toArrow()
    assert plain.to_pylist() == quoted.to_pylist()


def test_sql_errors_name_line_and_column(spark, ticks_view):
    # The clause's own errors: the same line and column as gpu_mr.sql gives.
    for text in ("SELECT *\nFROM ticks MATCH_RECOGNIZE (\n  ORDER BY ts\n"
                 "  PATTERN (A B+) DEFINE B AS price >> 0) m",
                 "SELECT * FROM ticks MATCH_RECOGNIZE (ORDER BY ts\n"
                 "MEASURES LAST(A.nope) AS x PATTERN (A) DEFINE A AS TRUE) m"):
        with pytest.raises(GpuMrError) as here:
            gpu_mr.sql(text, ticks=ticks_view)
        with pytest.raises(GpuMrError) as there:
            gspark.sql(spark, text)
        assert type(there.value) is type(here.value)
        assert (there.value.line, there.value.column) == (here.value.line, here.value.column)
        assert there.value.line is not None
    with pytest.raises(AnalysisError) as info:
        gspark.sql(spark, "SELECT *\n  FROM nowhere MATCH_RECOGNIZE (ORDER BY ts "
                          "MEASURES COUNT(*) AS n PATTERN (A) DEFINE A AS TRUE) m")
    assert (info.value.line, info.value.column) == (2, 8)
    assert "nowhere" in str(info.value)
    with pytest.raises(AnalysisError) as info:      # Spark's own analysis error
        gspark.sql(spark, "SELECT m.nope\nFROM ticks MATCH_RECOGNIZE (ORDER BY ts "
                          "MEASURES COUNT(*) AS n PATTERN (A) DEFINE A AS TRUE) m")
    assert (info.value.line, info.value.column) == (1, 10)          # the unknown name
    assert "__gpu_mr" not in str(info.value)
    with pytest.raises(SqlSyntaxError) as info:     # Spark's own parse error
        gspark.sql(spark, "SELECT m.n FROM ticks MATCH_RECOGNIZE (ORDER BY ts MEASURES "
                          "COUNT(*) AS n PATTERN (A) DEFINE A AS TRUE) m\nGROUP m.n")
    assert "__gpu_mr" not in str(info.value)


def test_bad_arguments_are_gpu_mr_errors(spark):
    with pytest.raises(GpuMrError, match="pyspark.sql.DataFrame"):
        gspark.match_recognize(pa.table({"x": [1]}), "PATTERN (A) DEFINE A AS TRUE")
    df = frame(spark, pa.table({"ts": [1, 2], "p": [1.0, 2.0]}))
    with pytest.raises(GpuMrError, match="unknown engine"):
        gspark.match_recognize(df, "ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A) "
                                   "DEFINE A AS TRUE", engine="fast")
    with pytest.raises(GpuMrError, match="unknown engine"):
        gspark.match_recognize(df, "ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A) "
                                   "DEFINE A AS TRUE", engine=None)


def test_task_errors_translate_back(spark):
    df = frame(spark, pa.table({"ts": [1, 2, 3], "p": [1.0, 2.0, 3.0]}))
    out = gspark.match_recognize(df, """ORDER BY ts MEASURES COUNT(*) AS n
        AFTER MATCH SKIP TO FIRST B PATTERN (B* A) DEFINE A AS TRUE, B AS p < 0""")
    with pytest.raises(Exception) as info:
        out.collect()
    err = gspark.translate_error(info.value)
    assert isinstance(err, MatchRuntimeError), str(info.value)[-500:]
    assert "SKIP TO FIRST B" in str(err)


# ------------------------------------------------------------ conformance


def _spark_cases():
    cases = [c for c in load_cases() if "esl" not in c.spec]
    if FULL:
        return cases
    picked, seen = [], {}
    for c in cases:
        kind = ("error" if "error" in c.spec else "ok", "sql" in c.spec)
        n = seen.get((c.file, kind), 0)
        if n < (1 if kind[0] == "error" else 3):
            picked.append(c)
            seen[(c.file, kind)] = n + 1
    return picked


def _statement(case) -> tuple[str, dict, int]:
    """(Spark SQL text, tables by name, lines added before the clause)."""
    spec = case.spec
    if "sql" in spec:
        used = spec.get("tables_used") or {}
        if not used and "table" in spec:
            used = {"t": spec["table"]}
        tables = {name: build_table(case.tables[tn]) for name, tn in used.items()}
        if "input" in spec:
            tables.setdefault("t", build_table(spec["input"]))
        return spec["sql"], tables, 0
    table = build_table(spec["input"]) if "input" in spec else build_table(
        case.tables[spec["table"]])
    if not _balanced(spec["query"]):
        # No statement can hold it: the clause goes through the DataFrame API.
        return None, {"t": table}, 0
    return f"SELECT * FROM t MATCH_RECOGNIZE (\n{spec['query']}\n) AS m", {"t": table}, 1


def _balanced(clause: str) -> bool:
    from gpu_mr.outer_sql import _parenthesis_pairs, _tokens
    try:
        _parenthesis_pairs(_tokens(clause))
    except SqlSyntaxError:
        return False
    return True


def _run(spark, case, text):
    if text is None:
        return gspark.match_recognize(spark.table("t"), case.spec["query"])
    return gspark.sql(spark, text)


@pytest.mark.parametrize("case", _spark_cases(), ids=lambda c: c.id)
def test_conformance_through_spark_sql(spark, case):
    spec = case.spec
    xfail = (spec.get("xfail") or {})
    if xfail.get("spark") or xfail.get("cpu"):
        pytest.xfail(xfail.get("spark") or xfail.get("cpu"))
    text, tables, shift = _statement(case)
    for name, table in tables.items():
        spark.createDataFrame(table, schema=_spark_schema(table)).createOrReplaceTempView(name)
    try:
        if "error" in spec:
            want = spec["error"]
            with pytest.raises(Exception) as info:
                _run(spark, case, text).collect()
            err = gspark.translate_error(info.value)
            assert err is not None, f"not a gpu_mr error: {str(info.value)[:500]}"
            if isinstance(err, UnsupportedError) and err.engine == "spark":
                pytest.xfail(str(err))
            if err.code in ("outer_sql", "outer_syntax") and want["kind"] != err.kind:
                pytest.xfail(f"Spark SQL rejects the outer statement: {err}")
            assert err.kind == want["kind"], f"{err.kind} error ({err}), expected {want['kind']}"
            if "contains" in want:
                assert str(want["contains"]).lower() in str(err).lower(), str(err)
            if "line" in want and err.code != "task_error":
                assert getattr(err, "line", None) == want["line"] + shift, str(err)
            if "column" in want and err.code != "task_error":
                assert getattr(err, "column", None) == want["column"], str(err)
            return
        try:
            result = _run(spark, case, text).toArrow()
        except GpuMrError as err:
            if isinstance(err, UnsupportedError) and err.engine == "spark":
                pytest.xfail(str(err))
            if err.code in ("outer_sql", "outer_syntax"):
                pytest.xfail(f"not Spark SQL (the case is written for DuckDB): {err}")
            raise
        except Exception as exc:
            err = gspark.translate_error(exc)
            if err is not None:
                raise err from None
            raise
        expected = dict(spec["expected"])
        if "sql" not in spec:
            expected["ordered"] = False        # Spark defines no row order without ORDER BY
        problem = compare_result(result, expected)
        if problem is not None and "sql" in spec:
            pytest.xfail(f"Spark SQL evaluates the outer statement differently: {problem}")
        assert problem is None, problem
    finally:
        for name in tables:
            spark.catalog.dropTempView(name)


def _spark_schema(table: pa.Table):
    """Naive timestamps stay TimestampNTZ (values as written)."""
    from pyspark.sql.pandas.types import from_arrow_schema
    return from_arrow_schema(table.schema, prefer_timestamp_ntz=True)


# ------------------------------------------------------------ long runs


@pytest.mark.skipif(not FULL, reason="GPU_MR_FULL_TESTS=1: 5e7 rows, minutes")
def test_single_partition_of_5e7_rows_completes(tmp_path):
    # A separate local Spark with 2 GiB of driver (= executor) memory.
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    bench = os.path.join(os.path.dirname(here), "benchmarks", "spark_bench.py")
    proc = subprocess.run([sys.executable, bench, "--rows", "0", "--single", "5e7",
                           "--executor-memory", "2g", "--no-json", "--master", "local[2]"],
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "single partition of 50,000,000 rows" in proc.stdout


def test_demo_entry_point_the_images_run(spark, capsys):
    from gpu_mr.spark import demo
    assert demo.main(["--rows", "3000", "--symbols", "3"], spark=spark) == 0
    out = capsys.readouterr().out
    assert "identical to gpu_mr.match_recognize in process: True" in out
    spark.catalog.dropTempView("ticks")
