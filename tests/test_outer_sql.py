"""Tests for gpu_mr.outer_sql: splitting a full SELECT around its
MATCH_RECOGNIZE factors and running the rest in DuckDB.

The clause itself is evaluated by a fake runner (records what it was given
and returns a chosen table), so the splitting is tested without the core;
one test at the end runs the real gpu_mr.api once it exists."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

import gpu_mr
import pytest

from gpu_mr.errors import AnalysisError, DataError, GpuMrError, SqlSyntaxError
from gpu_mr.outer_sql import (MatchRecognizeSite, SqlStatement, extract_clause,
                              find_match_recognize, run_sql)

T = pa.table({"id": [1, 2, 3, 4], "v": [1, -1, 2, 3], "sym": ["a", "a", "b", "b"]})


class Fake:
    """A clause runner that records each call and returns ``result(source)``."""

    def __init__(self, result=None):
        self.calls: list[dict] = []
        self.result = result

    def __call__(self, table, text, *, engine, start, end):
        assert isinstance(table, pa.Table)
        self.calls.append({"table": table, "body": text[start:end], "text": text,
                           "engine": engine, "start": start, "end": end})
        if self.result is None:
            return table
        return self.result(table) if callable(self.result) else self.result

    @property
    def bodies(self):
        return [c["body"] for c in self.calls]


def run(query, fake=None, engine="auto", **tables):
    fake = fake or Fake()
    out = run_sql(query, tables or {"t": T}, engine, run_clause=fake)
    return out, fake


# ------------------------------------------------------------------ splitting

def test_basic_named_source_with_alias():
    q = "SELECT m.id FROM t MATCH_RECOGNIZE (PATTERN (A) DEFINE A AS v > 0) AS m ORDER BY m.id"
    out, fake = run(q)
    assert out.to_pylist() == [{"id": i} for i in (1, 2, 3, 4)]
    assert fake.bodies == ["PATTERN (A) DEFINE A AS v > 0"]
    call = fake.calls[0]
    assert call["text"] == q                       # positions refer to the caller's text
    assert call["table"].equals(T)
    assert call["engine"] == "auto"


def test_engine_is_passed_through():
    _, fake = run("SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) m", engine="reference")
    assert fake.calls[0]["engine"] == "reference"


def test_lowercase_keywords_and_alias_without_as():
    out, fake = run("select m.v from t match_recognize (pattern (a) define a as v > 0) m "
                    "where m.v > 0 order by 1")
    assert out.column("v").to_pylist() == [1, 2, 3]
    assert fake.bodies == ["pattern (a) define a as v > 0"]


def test_missing_alias_unqualified_columns_work():
    out, _ = run("SELECT id FROM t MATCH_RECOGNIZE (PATTERN (A)) WHERE v < 0")
    assert out.to_pylist() == [{"id": 2}]
    out, _ = run("SELECT count(*) AS n FROM t MATCH_RECOGNIZE (PATTERN (A))")
    assert out.to_pylist() == [{"n": 4}]


def test_fixed_result_table_replaces_factor():
    result = pa.table({"start_id": [1, 3], "n": pa.array([1, 2], pa.int64())})
    out, _ = run("SELECT m.n * 10 AS n10 FROM t MATCH_RECOGNIZE (PATTERN (A+)) AS m "
                 "ORDER BY m.start_id", Fake(result))
    assert out.to_pylist() == [{"n10": 10}, {"n10": 20}]


def test_comments_and_strings_with_match_recognize_and_parentheses():
    q = """-- FROM x MATCH_RECOGNIZE ( not this one
    SELECT 'MATCH_RECOGNIZE (' AS s, m.id  /* MATCH_RECOGNIZE ( ((( */
    FROM t MATCH_RECOGNIZE (
        PATTERN (A) -- a comment with ) and MATCH_RECOGNIZE (
        DEFINE A AS sym <> ')' AND sym <> 'MATCH_RECOGNIZE ('  /* ) */
    ) AS m
    WHERE m.sym <> ')(' ORDER BY m.id"""
    out, fake = run(q)
    assert out.column("s").to_pylist() == ["MATCH_RECOGNIZE ("] * 4
    body = fake.bodies[0]
    assert body.strip().startswith("PATTERN (A)")
    assert body.strip().endswith("/* ) */")
    assert "DEFINE A AS sym <> ')' AND sym <> 'MATCH_RECOGNIZE ('" in body


def test_quoted_identifiers():
    tables = {"Ticks": T, "t": T}
    q = 'SELECT "m"."MATCH_RECOGNIZE" FROM (SELECT id AS "MATCH_RECOGNIZE" FROM "Ticks") ' \
        'MATCH_RECOGNIZE (PATTERN (A)) AS "m" ORDER BY 1'
    out, fake = run(q, **tables)
    assert out.column_names == ["MATCH_RECOGNIZE"]
    assert out.column(0).to_pylist() == [1, 2, 3, 4]
    # a quoted source name matches exactly
    _, fake = run('SELECT * FROM "Ticks" MATCH_RECOGNIZE (PATTERN (A)) m', **tables)
    assert fake.calls[0]["table"].equals(T)
    with pytest.raises(AnalysisError) as ei:
        run('SELECT * FROM "ticks" MATCH_RECOGNIZE (PATTERN (A)) m', **tables)
    assert ei.value.code == "unknown_table" and (ei.value.line, ei.value.column) == (1, 15)


def test_unquoted_names_match_case_insensitively():
    other = pa.table({"x": [9]})
    _, fake = run("SELECT * FROM TICKS MATCH_RECOGNIZE (PATTERN (A)) m", Ticks=other, t=T)
    assert fake.calls[0]["table"].equals(other)


def test_subquery_source_with_and_without_alias():
    for alias in ("", " s", " AS s"):
        q = (f"SELECT m.id FROM (SELECT * FROM t WHERE v > 0 ORDER BY id){alias} "
             "MATCH_RECOGNIZE (PATTERN (A)) AS m ORDER BY m.id")
        out, fake = run(q)
        assert out.column("id").to_pylist() == [1, 3, 4]
        assert fake.calls[0]["table"].column("id").to_pylist() == [1, 3, 4]


def test_named_source_with_its_own_alias():
    _, fake = run("SELECT * FROM t AS src MATCH_RECOGNIZE (PATTERN (A)) m")
    assert fake.calls[0]["table"].equals(T)
    _, fake = run("SELECT * FROM t src MATCH_RECOGNIZE (PATTERN (A)) m")
    assert fake.calls[0]["table"].equals(T)


def test_nested_match_recognize_in_source_runs_innermost_first():
    q = ("SELECT o.id FROM (SELECT * FROM t MATCH_RECOGNIZE (PATTERN (INNER_)) i "
         "WHERE i.v > 0) MATCH_RECOGNIZE (PATTERN (OUTER_)) AS o ORDER BY o.id")
    seen = []

    def result(table):
        seen.append(table.column("id").to_pylist())
        return table
    out, fake = run(q, Fake(result))
    assert fake.bodies == ["PATTERN (INNER_)", "PATTERN (OUTER_)"]
    assert seen == [[1, 2, 3, 4], [1, 3, 4]]
    assert out.column("id").to_pylist() == [1, 3, 4]


def test_join_of_two_match_recognize():
    u = pa.table({"id": [3, 4, 5], "w": [30, 40, 50]})
    q = """SELECT a.id, b.w
           FROM t MATCH_RECOGNIZE (PATTERN (A)) AS a
           JOIN u MATCH_RECOGNIZE (PATTERN (B)) AS b ON a.id = b.id
           ORDER BY a.id"""
    out, fake = run(q, t=T, u=u)
    assert out.to_pylist() == [{"id": 3, "w": 30}, {"id": 4, "w": 40}]
    assert fake.bodies == ["PATTERN (A)", "PATTERN (B)"]
    # comma join, second factor without alias
    q = ("SELECT count(*) AS n FROM t MATCH_RECOGNIZE (PATTERN (A)) a, "
         "u MATCH_RECOGNIZE (PATTERN (B)) WHERE a.id = w / 10")
    out, _ = run(q, t=T, u=u)
    assert out.to_pylist() == [{"n": 2}]


def test_same_table_twice_gets_distinct_results():
    sizes = iter([pa.table({"k": [1]}), pa.table({"k": [1, 2]})])
    out, _ = run("SELECT (SELECT count(*) FROM t MATCH_RECOGNIZE (PATTERN (A)) x) AS a, "
                 "(SELECT count(*) FROM t MATCH_RECOGNIZE (PATTERN (B)) y) AS b",
                 Fake(lambda _t: next(sizes)))
    assert out.to_pylist() == [{"a": 1, "b": 2}]


def test_with_query_as_source():
    q = """WITH pos AS (SELECT * FROM t WHERE v > 0),
                 t AS (SELECT id * 100 AS id FROM pos)
           SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) m ORDER BY id"""
    out, fake = run(q)
    # the WITH query t shadows the table t
    assert fake.calls[0]["table"].column("id").to_pylist() == [100, 300, 400]
    assert out.column("id").to_pylist() == [100, 300, 400]


def test_match_recognize_inside_with_query():
    q = """WITH r AS (SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) m WHERE v > 0),
                s AS (SELECT * FROM r MATCH_RECOGNIZE (PATTERN (B)) n)
           SELECT count(*) AS c FROM s"""
    out, fake = run(q)
    assert fake.bodies == ["PATTERN (A)", "PATTERN (B)"]
    assert fake.calls[1]["table"].column("id").to_pylist() == [1, 3, 4]
    assert out.to_pylist() == [{"c": 3}]


def test_with_query_referencing_outer_scope_from_subquery_source():
    q = """WITH pos AS (SELECT * FROM t WHERE v > 0)
           SELECT * FROM (SELECT * FROM pos WHERE id > 1) MATCH_RECOGNIZE (PATTERN (A)) m"""
    out, fake = run(q)
    assert fake.calls[0]["table"].column("id").to_pylist() == [3, 4]


def test_table_function_source():
    out, fake = run("SELECT count(*) AS n FROM range(5) r MATCH_RECOGNIZE (PATTERN (A)) m")
    assert fake.calls[0]["table"].num_rows == 5
    assert out.to_pylist() == [{"n": 5}]


def test_trailing_semicolon_and_newlines():
    out, _ = run("SELECT id\nFROM t\nMATCH_RECOGNIZE (\nPATTERN (A)\n)\nAS m\nORDER BY id;\n")
    assert out.num_rows == 4


def test_duckdb_only_characters_outside_the_clause():
    out, _ = run("SELECT id::VARCHAR AS s, abs(v) & 1 AS odd FROM t MATCH_RECOGNIZE "
                 "(PATTERN (A)) m ORDER BY id")
    assert out.column("s").to_pylist() == ["1", "2", "3", "4"]
    assert out.column("odd").to_pylist() == [1, 1, 0, 1]


def test_internal_names_do_not_collide_with_tables():
    other = pa.table({"z": [7]})
    out, _ = run("SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) m, __gpu_mr_mr_0 LIMIT 1",
                 t=T, __gpu_mr_mr_0=other)
    assert "z" in out.column_names and "id" in out.column_names


# ---------------------------------------------------------------- in and out

def test_arrow_in_arrow_out():
    out, _ = run("SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) m")
    assert isinstance(out, pa.Table)


def test_record_batch_input():
    out, _ = run("SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) m",
                 t=pa.record_batch({"x": [1, 2]}))
    assert isinstance(out, pa.Table) and out.num_rows == 2


def test_pandas_in_pandas_out_with_nullable_types():
    df = pd.DataFrame({"id": [1, 2, 3], "v": pd.array([1, None, 3], "Int64"),
                       "b": pd.array([True, None, False], "boolean")})
    result = pa.table({"id": [1, 2, 3], "n": pa.array([1, None, 3], pa.int64()),
                       "l": pa.array([[1, 2], None, [3]]),
                       "ts": pa.array([0, None, 10**6], pa.timestamp("us", tz="UTC"))})
    fake = Fake(result)
    out = run_sql("SELECT t.v, t.b, m.n, m.l, m.ts FROM t JOIN t MATCH_RECOGNIZE "
                  "(PATTERN (A)) AS m ON t.id = m.id ORDER BY t.id", {"t": df},
                  run_clause=fake)
    assert isinstance(out, pd.DataFrame)
    assert isinstance(fake.calls[0]["table"], pa.Table)
    assert str(out["v"].dtype) == "Int64" and str(out["n"].dtype) == "Int64"
    assert str(out["b"].dtype) == "boolean"
    assert out["l"].tolist() == [[1, 2], None, [3]]
    assert out["ts"].dtype.kind == "M" and pd.isna(out["ts"][1])
    assert out["ts"][2] == pd.Timestamp("1970-01-01 00:00:01", tz="UTC")


def test_mixed_kinds_give_pandas():
    df = pd.DataFrame({"x": [1]})
    out = run_sql("SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) m", {"t": T, "d": df},
                  run_clause=Fake())
    assert isinstance(out, pd.DataFrame)


# ------------------------------------------------------------------- errors

def raises(cls, query, code=None, where=None, **tables):
    with pytest.raises(cls) as ei:
        run(query, **tables)
    err = ei.value
    if code is not None:
        assert err.code == code, err
    if where is not None:
        assert (err.line, err.column) == where, err
    return err


def test_no_match_recognize():
    err = raises(SqlSyntaxError, "SELECT * FROM t", "no_match_recognize")
    assert "MATCH_RECOGNIZE" in str(err)
    err = raises(SqlSyntaxError, "SELECT 'x MATCH_RECOGNIZE (y)' FROM t -- MATCH_RECOGNIZE (",
                 "no_match_recognize")
    err = raises(SqlSyntaxError, "SELECT * FROM t\nMATCH_RECOGNIZE PATTERN (A)",
                 "no_match_recognize")
    assert "line 2, column 1" in str(err)


def test_unknown_table_has_position():
    err = raises(AnalysisError, "SELECT *\n  FROM nope MATCH_RECOGNIZE (PATTERN (A)) m",
                 "unknown_table", (2, 8))
    assert "nope" in str(err) and "t" in str(err)


def test_qualified_source_name_is_rejected():
    raises(AnalysisError, "SELECT * FROM main.t MATCH_RECOGNIZE (PATTERN (A)) m",
           "unknown_table", (1, 20))


def test_missing_source():
    raises(SqlSyntaxError, "SELECT * FROM MATCH_RECOGNIZE (PATTERN (A)) m",
           "expected_source", (1, 15))
    raises(SqlSyntaxError, "MATCH_RECOGNIZE (PATTERN (A))", "expected_source", (1, 1))
    raises(SqlSyntaxError, "SELECT * FROM () MATCH_RECOGNIZE (PATTERN (A)) m",
           "expected_source", (1, 15))


def test_column_alias_list_renames_the_output():
    t = pa.table({"id": [1, 2], "p": ["x", "x"], "v": [1, 2]})
    out = gpu_mr.sql("SELECT M.renamed FROM t MATCH_RECOGNIZE (PARTITION BY p ORDER BY id "
                     "MEASURES COUNT(*) AS n PATTERN (A+) DEFINE A AS v > 0) AS M (part, renamed)",
                     t=t)
    assert out.to_pylist() == [{"renamed": 2}]


def test_malformed_column_alias_list_is_rejected():
    raises(SqlSyntaxError, "SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) AS m (a + 1)",
           "column_alias_list", (1, 52))


def test_as_without_alias():
    raises(SqlSyntaxError, "SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) AS WHERE id = 1",
           "expected_alias", (1, 50))
    raises(SqlSyntaxError, "SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) AS",
           "expected_alias")


def test_unbalanced_parentheses():
    raises(SqlSyntaxError, "SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A) m",
           "unbalanced_parentheses", (1, 33))
    raises(SqlSyntaxError, "SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A))) m",
           "unbalanced_parentheses", (1, 46))


def test_unterminated_string_is_syntax_error():
    raises(SqlSyntaxError, "SELECT 'abc FROM t MATCH_RECOGNIZE (PATTERN (A)) m",
           "unterminated_string", (1, 8))


def test_duckdb_parser_error_is_syntax_error():
    err = raises(SqlSyntaxError, "SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) m WHERE id = = 1",
                 "outer_syntax")
    assert "syntax error" in str(err) and err.line is None
    assert "LINE 1" not in str(err)          # DuckDB's text is about the rewritten SQL
    err = raises(SqlSyntaxError, "SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) m\nWHEER id = 1",
                 "outer_syntax", (2, 1))
    err = raises(SqlSyntaxError, "SELEC * FROM t MATCH_RECOGNIZE (PATTERN (A)) m",
                 "not_a_query", (1, 1))


def test_duckdb_binder_error_is_analysis_error():
    err = raises(AnalysisError, "SELECT m.zz FROM t MATCH_RECOGNIZE (PATTERN (A)) m",
                 "outer_sql", (1, 10))
    assert "zz" in str(err) and "__gpu_mr" not in str(err)
    # the name occurs twice: no position rather than a wrong one
    err = raises(AnalysisError,
                 "SELECT zz FROM t MATCH_RECOGNIZE (PATTERN (A)) m WHERE zz > 1", "outer_sql")
    assert err.line is None and err.column is None


def test_unknown_table_elsewhere_in_statement():
    err = raises(AnalysisError,
                 "SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) m JOIN other o ON m.id = o.id",
                 "outer_sql", (1, 54))
    assert "other" in str(err) and "pg_" not in str(err)


def test_error_in_source_subquery_names_the_clause():
    err = raises(AnalysisError,
                 "SELECT * FROM (SELECT * FROM missing) MATCH_RECOGNIZE (PATTERN (A)) m",
                 "outer_sql", (1, 30))
    assert "source of the MATCH_RECOGNIZE at line 1, column 39" in str(err)


def test_duckdb_conversion_error_is_data_error():
    err = raises(DataError, "SELECT CAST(sym AS INT) FROM t MATCH_RECOGNIZE (PATTERN (A)) m",
                 "outer_data")
    assert "Conversion" in str(err)


def test_only_one_query():
    raises(SqlSyntaxError, "SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) m; "
           "CREATE TABLE x (a INT)", "multiple_statements", (1, 48))
    raises(SqlSyntaxError, "CREATE TABLE x AS SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) m",
           "not_a_query", (1, 1))
    out, _ = run("FROM t MATCH_RECOGNIZE (PATTERN (A)) m SELECT id ;;")
    assert out.num_rows == 4
    out, _ = run("(SELECT id FROM t MATCH_RECOGNIZE (PATTERN (A)) m) UNION ALL (SELECT 9)")
    assert out.num_rows == 5


def test_bad_tables():
    with pytest.raises(DataError, match="differ only in case"):
        run("SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) m", t=T, T=T)
    with pytest.raises(DataError, match="list"):
        run("SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) m", t=[1, 2])


def test_query_must_be_text():
    with pytest.raises(SqlSyntaxError):
        run_sql(None, {"t": T}, run_clause=Fake())


def test_clause_errors_propagate_and_connection_is_closed():
    def boom(*a, **k):
        raise AnalysisError("bad clause", code="x", line=1, column=33)
    with pytest.raises(AnalysisError, match="bad clause"):
        run_sql("SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) m", {"t": T}, run_clause=boom)


@pytest.mark.parametrize("query", [
    "SELECT * FROM t MATCH_RECOGNIZE (",
    "SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) m WHERE",
    "SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) m ORDER BY",
    "SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) AS \"",
    "SELECT ` FROM t MATCH_RECOGNIZE (PATTERN (A)) m",
    "SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)) m GROUP BY m.nope",
    ")) MATCH_RECOGNIZE ((",
    "MATCH_RECOGNIZE",
    "",
])
def test_malformed_statements_raise_only_gpu_mr_errors(query):
    with pytest.raises(GpuMrError):
        run(query)


# ------------------------------------------------------- helpers for the CLI

def test_extract_clause():
    q = "SELECT * FROM t MATCH_RECOGNIZE ( PATTERN (A) DEFINE A AS x = ')' ) AS m"
    s, e = extract_clause(q)
    assert q[s:e] == " PATTERN (A) DEFINE A AS x = ')' "
    assert extract_clause("PARTITION BY s ORDER BY ts PATTERN (A+) DEFINE A AS p > 0") is None
    assert extract_clause("SELECT 'MATCH_RECOGNIZE (x)' -- MATCH_RECOGNIZE (") is None
    two = "SELECT * FROM a MATCH_RECOGNIZE (P1) x, b MATCH_RECOGNIZE (P2) y"
    s, e = extract_clause(two)
    assert two[s:e] == "P1"
    with pytest.raises(SqlSyntaxError):
        extract_clause("SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)")


def test_find_match_recognize_sites():
    q = ("SELECT * FROM (SELECT * FROM t MATCH_RECOGNIZE (P1) i) s MATCH_RECOGNIZE (P2) AS o "
         "JOIN read_parquet('x.parquet') MATCH_RECOGNIZE (P3)")
    sites = find_match_recognize(q)
    assert [q[s.body_start:s.body_end] for s in sites] == ["P1", "P2", "P3"]
    assert [s.source_kind for s in sites] == ["table", "subquery", "function"]
    assert [q[s.source_start:s.source_end] for s in sites] == [
        "t", "SELECT * FROM t MATCH_RECOGNIZE (P1) i", "read_parquet('x.parquet')"]
    assert [s.alias.text if s.alias else None for s in sites] == ["i", "o", None]
    assert q[sites[1].start:sites[1].end].startswith("(SELECT")
    assert q[sites[1].start:sites[1].end].endswith("AS o")
    assert all(isinstance(s, MatchRecognizeSite) for s in sites)
    st = SqlStatement(q)
    assert st.outermost(0, len(q)) == [sites[1], sites[2]]


# ----------------------------------------------------------- the real clause

def test_real_api_count_per_run():
    pytest.importorskip("gpu_mr.api", reason="gpu_mr.api (the core) not written yet")
    import gpu_mr.api
    if not hasattr(gpu_mr.api, "run_clause_on_arrow"):
        pytest.skip("gpu_mr.api.run_clause_on_arrow not written yet")
    t = pa.table({"id": np.arange(1, 10), "v": [1, 2, -1, 3, -2, -3, 4, 5, 6]})
    out = run_sql("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY id MEASURES COUNT(*) AS n "
                  "PATTERN (A+) DEFINE A AS v > 0) AS m", {"t": t}, "auto")
    assert out.column_names == ["n"]
    assert sorted(out.column("n").to_pylist()) == [1, 2, 3]
    df = run_sql("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY id MEASURES COUNT(*) AS n "
                 "PATTERN (A+) DEFINE A AS v > 0) AS m ORDER BY n",
                 {"t": t.to_pandas()}, "reference")
    assert df["n"].tolist() == [1, 2, 3]


def test_pandas_result_with_repeated_names_keeps_each_columns_type():
    # a string and a count both named x: the count stayed a number (it came
    # back as the string "3" from Arrow's conversion to pandas 3)
    df = pd.DataFrame({"sym": ["a"] * 4, "ts": [1, 2, 3, 4], "price": [3.0, 2.0, 1.0, 2.0]})
    got = gpu_mr.sql("SELECT sym AS x, n AS x FROM t MATCH_RECOGNIZE (PARTITION BY sym "
                     "ORDER BY ts MEASURES COUNT(*) AS n ONE ROW PER MATCH PATTERN (A B+) "
                     "DEFINE B AS price < PREV(price))", t=df, engine="cpu")
    assert list(got.columns) == ["x", "x"]
    assert got.iloc[0, 0] == "a" and got.iloc[0, 1] == 3
    assert got.dtypes.iloc[1] == np.int64
