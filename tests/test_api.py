"""The public API contract (DESIGN.md §2): kinds in and out, engines, errors."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpu_mr
from gpu_mr.errors import (AnalysisError, DataError, GpuMrError, SqlSyntaxError,
                           UnsupportedError)

CLAUSE = """
    PARTITION BY symbol ORDER BY ts
    MEASURES FIRST(A.ts) AS start_ts, LAST(B.price) AS low, COUNT(*) AS n
    PATTERN (A B+ C)
    DEFINE B AS price < PREV(price), C AS price > PREV(price)
"""


def ticks() -> pd.DataFrame:
    return pd.DataFrame({
        "symbol": ["X"] * 5 + ["Y"] * 4,
        "ts": [1, 2, 3, 4, 5, 1, 2, 3, 4],
        "price": [5.0, 4.0, 3.0, 6.0, 1.0, 9.0, 8.0, None, 10.0],
    })


def test_pandas_in_pandas_out():
    out = gpu_mr.match_recognize(ticks(), CLAUSE)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == ["symbol", "start_ts", "low", "n"]
    assert out.to_dict("records") == [{"symbol": "X", "start_ts": 1, "low": 3.0, "n": 4}]


def test_arrow_in_arrow_out_and_input_order_does_not_matter():
    table = pa.Table.from_pandas(ticks(), preserve_index=False)
    shuffled = table.take(pa.array([8, 3, 0, 5, 1, 7, 2, 6, 4]))
    a = gpu_mr.match_recognize(table, CLAUSE)
    b = gpu_mr.match_recognize(shuffled, CLAUSE, engine="reference")
    assert isinstance(a, pa.Table)
    assert a.to_pylist() == b.to_pylist()


def test_sql_runs_the_outer_statement_in_duckdb():
    out = gpu_mr.sql("SELECT m.symbol, m.n * 10 AS n10 FROM t MATCH_RECOGNIZE (" + CLAUSE
                     + ") AS m WHERE m.n > 1 ORDER BY m.symbol", t=ticks())
    assert out.to_dict("records") == [{"symbol": "X", "n10": 40}]


def test_compile_explain_mentions_engine_and_masks():
    text = gpu_mr.compile(CLAUSE).explain()
    assert "row-local" in text and "engine (auto): cpu" in text and "path: DEFINE masks" in text
    assert "unanchored" in text                      # SKIP PAST LAST ROW: one step per row
    typed = gpu_mr.compile(CLAUSE, pa.Schema.from_pandas(ticks(), preserve_index=False)).explain()
    assert "in one compiled pass over the rows" in typed
    # the frame itself gives the same schema (its floats are not scanned for NaN)
    assert gpu_mr.compile(CLAUSE, ticks()).query.input_schema == pa.Schema.from_pandas(
        ticks(), preserve_index=False).remove_metadata()
    assert "a search from each candidate start row" in gpu_mr.compile(
        CLAUSE.replace("PATTERN", "AFTER MATCH SKIP TO NEXT ROW PATTERN")).explain()
    stateful = CLAUSE.replace("DEFINE ", "DEFINE A AS COUNT(A.*) < 3, ")
    assert "depends on the match so far" in gpu_mr.compile(stateful).explain()


def test_unknown_engine_and_gpu_without_a_device(monkeypatch):
    with pytest.raises(GpuMrError, match="unknown engine"):
        gpu_mr.match_recognize(ticks(), CLAUSE, engine="fast")
    from gpu_mr import backend
    monkeypatch.setattr(backend, "_detected", "no CUDA device: cupy is not installed")
    with pytest.raises(UnsupportedError, match="cupy is not installed") as info:
        gpu_mr.match_recognize(ticks(), CLAUSE, engine="gpu")
    assert info.value.engine == "gpu"
    assert "gpu: not used: no CUDA device" in gpu_mr.compile(CLAUSE).explain()
    assert len(gpu_mr.match_recognize(ticks(), CLAUSE)) >= 0      # auto still answers


def test_bad_arguments_are_gpu_mr_errors():
    with pytest.raises(GpuMrError):
        gpu_mr.match_recognize([1, 2, 3], CLAUSE)
    with pytest.raises(GpuMrError):
        gpu_mr.match_recognize(ticks(), 42)
    with pytest.raises(AnalysisError, match="unknown column"):
        gpu_mr.match_recognize(ticks(), "ORDER BY nope PATTERN (A)")


def test_errors_carry_line_and_column():
    with pytest.raises(SqlSyntaxError) as info:
        gpu_mr.match_recognize(ticks(), "ORDER BY ts\nPATTERN (A B\nDEFINE A AS price > 1")
    assert (info.value.line, info.value.column) == (3, 1)
    with pytest.raises(AnalysisError) as info:
        gpu_mr.match_recognize(ticks(), "ORDER BY ts\nPATTERN (A)\nDEFINE A AS Q.price > 1")
    assert (info.value.line, info.value.column) == (3, 13)


def test_nullable_integers_survive_the_pandas_round_trip():
    df = pd.DataFrame({"id": [1, 2, 3], "v": [1, 0, 1]})
    out = gpu_mr.match_recognize(df, "ORDER BY id MEASURES LAST(B.id) AS b ALL ROWS PER MATCH "
                                     "PATTERN (A B?) DEFINE A AS v = 1, B AS v = 0")
    assert str(out["b"].dtype) == "Int64"
    assert out["b"].isna().tolist() == [True, False, True]


def test_integer_overflow_is_a_data_error():
    t = pa.table({"id": [1, 2], "v": [2**62, 2**62]})
    with pytest.raises(DataError, match="overflow"):
        gpu_mr.match_recognize(t, "ORDER BY id MEASURES SUM(v) AS s PATTERN (A+)")


FRAGMENTS = ["PARTITION BY", "ORDER BY", "ts", "price", "MEASURES", "AS", "x", ",", "(", ")",
             "PATTERN", "A", "B", "+", "*", "?", "{", "}", "{-", "-}", "|", "^", "$", "DEFINE",
             "PREV(", "LAST(", "FIRST(", "COUNT(", "*)", "A.price", "<", "=", "1", "'s'", "NULL",
             "AND", "OR", "NOT", "SUBSET", "U", "= (A, B)", "AFTER MATCH SKIP", "TO", "NEXT ROW",
             "ALL ROWS PER MATCH", "ONE ROW PER MATCH", "CASE WHEN", "THEN", "END", "CAST(",
             "DECIMAL(3,1)", "INTERVAL '1' DAY", "RUNNING", "FINAL", "CLASSIFIER()", "\n", "--c\n",
             "/*", "\"q\"", "1.5", "-", "/", "MATCH_NUMBER()", "PERMUTE(", "()"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=25))
def test_no_internal_exception_escapes_on_garbage(fragments):
    """Whatever the text, the library answers with a result or a GpuMrError."""
    text = " ".join(fragments)
    try:
        gpu_mr.match_recognize(ticks().head(4), text)
    except GpuMrError:
        pass


def test_a_clause_run_again_reuses_its_checked_query():
    from gpu_mr import api
    table = pa.Table.from_pandas(ticks(), preserve_index=False)
    first = api.checked_clause(CLAUSE, table.schema)
    assert api.checked_clause(CLAUSE, table.schema) is first
    # another schema (types, names or metadata) or another text: checked afresh
    wider = table.append_column("extra", pa.array(range(9)))
    assert api.checked_clause(CLAUSE, wider.schema) is not first
    tagged = table.schema.with_metadata({"source": "x"})
    assert api.checked_clause(CLAUSE, tagged) is not first
    assert api.checked_clause(CLAUSE + " ", table.schema) is not first
    # each call's result is the same as a fresh analysis gives
    assert gpu_mr.match_recognize(table, CLAUSE).equals(gpu_mr.match_recognize(table, CLAUSE))
    # at most _CHECKED_MAX clauses are kept, the least recently used go
    for k in range(api._CHECKED_MAX):
        api.checked_clause(CLAUSE + "\n" * (k + 2), table.schema)
    assert len(api._checked) == api._CHECKED_MAX
    assert api.checked_clause(CLAUSE, table.schema) is not first


def test_a_failing_clause_fails_every_time():
    bad = CLAUSE.replace("PREV(price)", "PREV(nothing)", 1)
    for _ in range(2):
        with pytest.raises(AnalysisError, match="nothing") as ei:
            gpu_mr.match_recognize(ticks(), bad)
        assert ei.value.line == 5


PANDAS_CLAUSES = [
    # ONE ROW reading x and t only: y, z and w are left out, never scanned
    """PARTITION BY k ORDER BY i MEASURES COUNT(*) AS n, LAST(B.x) AS lx, MIN(B.t) AS mt
       ONE ROW PER MATCH PATTERN (A B+) DEFINE B AS x < PREV(x) OR x IS NULL""",
    # ALL ROWS returns every column: every one scanned
    """PARTITION BY k ORDER BY i MEASURES COUNT(*) AS n
       ALL ROWS PER MATCH WITH UNMATCHED ROWS PATTERN (A B+) DEFINE B AS x < PREV(x)""",
    # a float partition key and a time order key with NaT
    """PARTITION BY y ORDER BY t MEASURES SUM(w) AS sw, FIRST(x) AS fx
       ONE ROW PER MATCH PATTERN (A B*) DEFINE B AS w > PREV(w)""",
]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("clause", PANDAS_CLAUSES)
def test_pandas_frames_give_what_their_arrow_conversion_gives(seed, clause, monkeypatch):
    # a pandas frame's float and time columns are scanned for NaN and NaT only
    # where the query reads them (frames.finish_pending); NaN is NULL either way
    import numpy as np
    from gpu_mr import frames
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))

    def holes(values, what):
        return np.where(rng.random(n) < 0.15, what, values)
    df = pd.DataFrame({
        "k": rng.choice(["a", "b"], n), "i": np.arange(n),
        "x": holes(np.round(rng.normal(size=n), 1), np.nan),
        "y": holes(rng.integers(0, 3, n).astype(float), np.nan),
        "z": holes(rng.normal(size=n), np.nan).astype(np.float32),
        "w": holes(rng.integers(0, 5, n).astype(float), np.nan),
        "t": pd.Series(holes(rng.integers(0, 10**6, n).astype("datetime64[us]"),
                             np.datetime64("NaT"))),
    })
    scanned = []
    real = frames.least
    monkeypatch.setattr(frames, "least", lambda v: scanned.append(len(v)) or real(v))
    want = gpu_mr.match_recognize(pa.Table.from_pandas(df, preserve_index=False),
                                  clause, engine="reference")
    scanned.clear()
    got = gpu_mr.match_recognize(df, clause, engine="cpu")
    pd.testing.assert_frame_equal(got, gpu_mr.frames.from_arrow(want, "pandas"))
    if "ALL ROWS" in clause:
        assert len(scanned) == 5                     # x, y, z, w, t
    elif "PARTITION BY k" in clause:
        assert len(scanned) == 2                     # x and t


def test_decimals_past_38_digits_are_named_not_raised_from_inside():
    # decimal256(40, 2) reached pa.decimal128(40, 2) for the measure's type:
    # "ValueError: precision should be between 1 and 38"
    from decimal import Decimal
    values = [Decimal("1.50"), Decimal("0.50"), Decimal("2.50")]
    wide = pa.table({"ts": [1, 2, 3], "x": pa.array(values, pa.decimal256(40, 2))})
    clause = ("ORDER BY ts MEASURES LAST(B.x) AS lx ONE ROW PER MATCH PATTERN (A B) "
              "DEFINE B AS x < PREV(x)")
    for engine in ("reference", "cpu"):
        with pytest.raises(AnalysisError, match=r"column x has type decimal256\(40, 2\)"):
            gpu_mr.match_recognize(wide, clause, engine=engine)
    narrow = wide.set_column(1, "x", pa.array(values, pa.decimal256(20, 2)))
    assert gpu_mr.match_recognize(narrow, clause, engine="cpu").to_pylist() == [
        {"lx": Decimal("0.50")}]
