"""The command line (``python -m gpu_mr``) end to end, and the demo generator.

The CLI runs in a subprocess, exactly as a user runs it, on small files made
here: a V shape in partition ``a`` and none in ``b``.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from gpu_mr import demo
from gpu_mr.cli import is_statement

REPO = Path(__file__).resolve().parents[1]

# Partition a: 5 4 3 4 5 6 5 -> one V: A=row 0, B=rows 1-2, C=rows 3-5.
# Partition b: 1 2 3 -> nothing falls, no match.
ROWS = [
    ("a", "2024-01-02 09:30:01", 5.0),
    ("a", "2024-01-02 09:30:02", 4.0),
    ("a", "2024-01-02 09:30:03", 3.0),
    ("a", "2024-01-02 09:30:04", 4.0),
    ("a", "2024-01-02 09:30:05", 5.0),
    ("a", "2024-01-02 09:30:06", 6.0),
    ("a", "2024-01-02 09:30:07", 5.0),
    ("b", "2024-01-02 09:30:01", 1.0),
    ("b", "2024-01-02 09:30:02", 2.0),
    ("b", "2024-01-02 09:30:03", 3.0),
]

CLAUSE = """\
PARTITION BY symbol
ORDER BY ts
MEASURES FIRST(A.ts) AS start_ts, LAST(C.ts) AS end_ts, MATCH_NUMBER() AS mno
ONE ROW PER MATCH
AFTER MATCH SKIP PAST LAST ROW
PATTERN (A B+ C+)
DEFINE B AS price < PREV(price), C AS price > PREV(price)
"""

STATEMENT = f"""\
-- V shapes, whole statement: DuckDB runs the SELECT around the clause
/* a block comment
   before the statement */
select m.symbol, m.mno, m.end_ts
FROM ticks
MATCH_RECOGNIZE (
{CLAUSE}
) AS m
ORDER BY m.symbol
"""

START = np.datetime64("2024-01-02T09:30:01", "us")
END = np.datetime64("2024-01-02T09:30:06", "us")


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "gpu_mr", *args],
        cwd=cwd or REPO, env=env, capture_output=True, text=True, timeout=300)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr
    return proc


def user_error(proc: subprocess.CompletedProcess) -> str:
    """Assert a clean user error (exit 2, one 'error:' line, no traceback)."""
    assert proc.returncode == 2, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert errors, proc.stderr
    return errors[-1]


@pytest.fixture
def ticks_table() -> pa.Table:
    return pa.table({
        "symbol": pa.array([r[0] for r in ROWS], pa.string()),
        "ts": pa.array([np.datetime64(r[1].replace(" ", "T"), "us") for r in ROWS],
                       pa.timestamp("us")),
        "price": pa.array([r[2] for r in ROWS], pa.float64()),
    })


@pytest.fixture
def files(tmp_path: Path, ticks_table: pa.Table) -> dict[str, Path]:
    parquet = tmp_path / "ticks.parquet"
    pq.write_table(ticks_table, parquet)
    csv = tmp_path / "ticks.csv"
    csv.write_text("symbol,ts,price\n" + "".join(f"{s},{t},{p}\n" for s, t, p in ROWS))
    clause = tmp_path / "v.sql"
    clause.write_text(CLAUSE)
    statement = tmp_path / "v_select.sql"
    statement.write_text(STATEMENT)
    return {"parquet": parquet, "csv": csv, "clause": clause, "statement": statement}


def as_micros(values) -> list:
    return [np.datetime64(v, "us") for v in values]


# ------------------------------------------------------------------ run


@pytest.mark.parametrize("source", ["parquet", "csv"])
def test_run_clause_to_parquet(files, tmp_path, source):
    out = tmp_path / "out.parquet"
    ok(run_cli("run", str(files["clause"]), "--table", f"ticks={files[source]}",
               "-o", str(out)))
    result = pq.read_table(out)
    assert result.column_names == ["symbol", "start_ts", "end_ts", "mno"]
    # Written for Spark: microsecond timestamps whatever the input unit.
    assert result.schema.field("start_ts").type == pa.timestamp("us")
    assert result.schema.field("end_ts").type == pa.timestamp("us")
    rows = result.to_pydict()
    assert rows["symbol"] == ["a"]
    assert as_micros(rows["start_ts"]) == [START]
    assert as_micros(rows["end_ts"]) == [END]
    assert rows["mno"] == [1]


def test_run_clause_to_csv(files, tmp_path):
    out = tmp_path / "out.csv"
    ok(run_cli("run", str(files["clause"]), "--table", f"t={files['parquet']}",
               "-o", str(out)))
    result = pacsv.read_csv(out)
    assert result.column_names == ["symbol", "start_ts", "end_ts", "mno"]
    assert result.column("symbol").to_pylist() == ["a"]
    assert result.column("mno").to_pylist() == [1]
    assert as_micros(result.column("end_ts").cast(pa.timestamp("us")).to_pylist()) == [END]


def test_run_clause_prints_table(files):
    proc = ok(run_cli("run", str(files["clause"]), "--table", f"ticks={files['parquet']}"))
    assert "start_ts" in proc.stdout and "mno" in proc.stdout
    assert "(1 row)" in proc.stdout
    # Progress goes to stderr, never into the printed result.
    assert "gpu-mr:" in proc.stderr
    assert "gpu-mr:" not in proc.stdout


def test_run_quiet_prints_no_progress(files):
    proc = ok(run_cli("-q", "run", str(files["clause"]), "--table", f"ticks={files['parquet']}"))
    assert proc.stderr == ""


@pytest.mark.parametrize("source", ["parquet", "csv"])
def test_run_statement(files, tmp_path, source):
    out = tmp_path / "out.parquet"
    ok(run_cli("run", str(files["statement"]), "--table", f"ticks={files[source]}",
               "--engine", "reference", "-o", str(out)))
    result = pq.read_table(out)
    assert result.column_names == ["symbol", "mno", "end_ts"]
    rows = result.to_pydict()
    assert rows["symbol"] == ["a"]
    assert rows["mno"] == [1]
    assert as_micros(rows["end_ts"]) == [END]


def test_run_statement_with_two_tables(files, tmp_path):
    names = tmp_path / "names.csv"
    names.write_text("sym,name\na,Alpha\nb,Beta\n")
    query = tmp_path / "join.sql"
    query.write_text(
        "SELECT n.name, m.mno FROM ticks MATCH_RECOGNIZE (\n"
        f"{CLAUSE}) AS m JOIN names n ON n.sym = m.symbol ORDER BY n.name\n")
    out = tmp_path / "out.csv"
    ok(run_cli("run", str(query), "--table", f"ticks={files['parquet']}",
               "--table", f"names={names}", "-o", str(out)))
    result = pacsv.read_csv(out)
    assert result.to_pydict() == {"name": ["Alpha"], "mno": [1]}


# ------------------------------------------------------------------ explain


@pytest.mark.parametrize("kind", ["clause", "statement"])
def test_explain(files, kind):
    proc = ok(run_cli("explain", str(files[kind])))
    assert proc.stdout.strip()


def test_explain_checks_columns_against_table(files, tmp_path):
    query = tmp_path / "typo.sql"
    query.write_text(CLAUSE.replace("price < PREV(price)", "prize < PREV(prize)"))
    ok(run_cli("explain", str(query)))  # no schema: any column name is accepted
    message = user_error(run_cli("explain", str(query), "--table", f"ticks={files['parquet']}"))
    assert "prize" in message


# ------------------------------------------------------------------ demo


def test_demo_small():
    proc = ok(run_cli("demo", "--rows", "2000", "--symbols", "2", "--seed", "3"))
    assert "V-shape" in proc.stdout and "W-shape" in proc.stdout
    assert proc.stdout.count("matches in") == 2


def test_bench_small():
    proc = ok(run_cli("bench", "--rows", "3000", "--symbols", "3", "--reference-rows", "800",
                      "--repeat", "1"))
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("V-shape", "W-shape"))]
    assert len(lines) == 2 and all(line.rstrip().endswith("yes") for line in lines)
    user_error(run_cli("bench", "--rows", "0"))


# ------------------------------------------------------------------ errors


def test_bad_query_is_a_clean_error(files, tmp_path):
    bad = tmp_path / "bad.sql"
    bad.write_text("PARTITION BY symbol\nORDER BY ts\nPATTERN (A B+\nDEFINE B AS price < PREV(price)\n")
    message = user_error(run_cli("run", str(bad), "--table", f"ticks={files['parquet']}"))
    assert "line" in message


def test_unknown_variable_is_a_clean_error(files, tmp_path):
    bad = tmp_path / "bad.sql"
    bad.write_text("ORDER BY ts PATTERN (A) DEFINE B AS price > 0\n")
    user_error(run_cli("run", str(bad), "--table", f"ticks={files['parquet']}"))


def test_bad_query_explain_is_a_clean_error(tmp_path):
    bad = tmp_path / "bad.sql"
    bad.write_text("PATTERN (A B+\n")
    user_error(run_cli("explain", str(bad)))


def test_missing_table_file(files, tmp_path):
    missing = tmp_path / "nope.parquet"
    message = user_error(run_cli("run", str(files["clause"]), "--table", f"ticks={missing}"))
    assert "nope.parquet" in message and "no such file" in message


def test_missing_query_file(files, tmp_path):
    message = user_error(run_cli("run", str(tmp_path / "nope.sql"),
                                 "--table", f"ticks={files['parquet']}"))
    assert "nope.sql" in message


def test_unknown_table_extension(files, tmp_path):
    odd = tmp_path / "ticks.json"
    odd.write_text("{}")
    message = user_error(run_cli("run", str(files["clause"]), "--table", f"ticks={odd}"))
    assert ".json" in message


def test_unknown_output_extension(files, tmp_path):
    message = user_error(run_cli("run", str(files["clause"]), "--table", f"ticks={files['parquet']}",
                                 "-o", str(tmp_path / "out.xlsx")))
    assert ".xlsx" in message


def test_bare_clause_needs_exactly_one_table(files):
    user_error(run_cli("run", str(files["clause"])))
    user_error(run_cli("run", str(files["clause"]), "--table", f"a={files['parquet']}",
                       "--table", f"b={files['csv']}"))


def test_malformed_table_option(files):
    message = user_error(run_cli("run", str(files["clause"]), "--table", str(files["parquet"])))
    assert "NAME=FILE" in message


# ------------------------------------------------------------------ helpers


@pytest.mark.parametrize("text, expected", [
    ("SELECT * FROM t", True),
    ("  with x AS (SELECT 1) SELECT * FROM x", True),
    ("-- note\n/* block\n comment */ select 1", True),
    ("(SELECT 1)", True),
    ("PARTITION BY s ORDER BY ts PATTERN (A) DEFINE A AS true", False),
    ("-- SELECT in a comment\nORDER BY ts PATTERN (A) DEFINE A AS true", False),
    ("selection_flag", False),
    ("", False),
])
def test_is_statement(text, expected):
    assert is_statement(text) is expected


def test_kernels_installed_as_subpackage():
    try:
        importlib.metadata.distribution("gpu_mr")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("gpu_mr is not installed (pip install -e .)")
    # A fresh interpreter outside the repo, so only the installed mapping counts.
    proc = subprocess.run(
        [sys.executable, "-c", "import gpu_mr.kernels as k; print(k.__name__)"],
        cwd=os.path.dirname(sys.executable), capture_output=True, text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "gpu_mr.kernels"


# ------------------------------------------------------------------ generate_ticks


def test_generate_ticks_schema():
    t = demo.generate_ticks(rows=1000, symbols=4, seed=0)
    assert t.schema == pa.schema([
        ("symbol", pa.string()),
        ("ts", pa.timestamp("us")),
        ("price", pa.float64()),
        ("volume", pa.int64()),
    ])
    assert t.num_rows == 1000
    assert all(t.column(c).null_count == 0 for c in t.column_names)


def test_generate_ticks_deterministic():
    a = demo.generate_ticks(rows=5000, symbols=3, seed=7)
    b = demo.generate_ticks(rows=5000, symbols=3, seed=7)
    c = demo.generate_ticks(rows=5000, symbols=3, seed=8)
    assert a.equals(b)
    assert not a.equals(c)


@pytest.mark.parametrize("rows, symbols", [(10_000, 8), (1001, 3), (3, 5), (0, 2), (50, 12)])
def test_generate_ticks_shape(rows, symbols):
    df = demo.generate_ticks(rows=rows, symbols=symbols, seed=1).to_pandas()
    assert len(df) == rows
    counts = df.groupby("symbol").size()
    assert counts.sum() == rows
    assert len(counts) == min(rows, symbols)
    if rows:
        assert counts.max() - counts.min() <= 1
    # Delivered in time order; within a symbol, ts strictly increases.
    assert df["ts"].is_monotonic_increasing
    for _, group in df.groupby("symbol"):
        assert group["ts"].diff().dropna().gt(pd.Timedelta(0)).all()
    # Prices are positive whole cents; volumes positive.
    assert (df["price"] > 0).all()
    assert np.allclose(df["price"] * 100, np.round(df["price"] * 100))
    assert (df["volume"] > 0).all()


def test_generate_ticks_is_realistic():
    df = demo.generate_ticks(rows=20_000, symbols=4, seed=0).to_pandas()
    for _, g in df.groupby("symbol"):
        gaps = g["ts"].diff().dropna().dt.total_seconds()
        assert 0.8 < gaps.mean() < 1.2
        rets = np.diff(np.log(g["price"].to_numpy()))
        # Per-tick moves are small (no jumps of 5%) but prices do move.
        assert np.abs(rets).max() < 0.05
        assert (rets != 0).mean() > 0.1


def regex_matches(ticks: pa.Table, regex: str) -> list[tuple]:
    """An independent oracle for the demo's shapes: every DEFINE there is
    price < or > PREV(price), so each row takes one letter (D down, U up,
    F flat, N first of its partition) and Python's backtracking regex, also
    leftmost-first with greedy quantifiers, finds the same matches; finditer
    resumes past the last row, as AFTER MATCH SKIP PAST LAST ROW does."""
    df = ticks.to_pandas()
    found = []
    for symbol, g in df.groupby("symbol", sort=True):
        g = g.sort_values("ts", kind="stable")
        step = np.sign(np.diff(g["price"].to_numpy()))
        letters = "N" + "".join({-1.0: "D", 1.0: "U", 0.0: "F"}[x] for x in step)
        ts = g["ts"].to_numpy()
        for n, m in enumerate(re.finditer(regex, letters), start=1):
            found.append((symbol, ts[m.start()], ts[m.end() - 1], n))
    return found


@pytest.mark.parametrize("name, regex", [
    ("V_SHAPE", r".D{3,}U{3,}"),
    ("W_SHAPE", r".D{2,}U{2,}D{2,}U{2,}"),
])
def test_demo_queries_against_regex_oracle(name, regex):
    import gpu_mr
    ticks = demo.generate_ticks(rows=20_000, symbols=8, seed=0)
    expected = regex_matches(ticks, regex)
    # The demo's default data gives a moderate number of matches.
    assert 10 <= len(expected) <= 500
    result = gpu_mr.match_recognize(ticks, getattr(demo, name), engine="reference")
    assert isinstance(result, pa.Table)
    df = result.to_pandas()
    got = [(r.symbol, np.datetime64(r.start_ts, "ns"), np.datetime64(r.end_ts, "ns"), r.mno)
           for r in df.itertuples()]
    expected = [(s, np.datetime64(a, "ns"), np.datetime64(b, "ns"), n) for s, a, b, n in expected]
    assert sorted(got) == sorted(expected)


# ------------------------------------------------------------------ run --spark

def _spark_ready() -> bool:
    import importlib.util
    import shutil
    return importlib.util.find_spec("pyspark") is not None and (
        shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME")))


spark_only = pytest.mark.skipif(not _spark_ready(), reason="needs pyspark and Java")


@spark_only
def test_run_spark_clause_to_parquet(files, tmp_path):
    out = tmp_path / "out.parquet"
    proc = ok(run_cli("run", str(files["clause"]), "--table", f"ticks={files['csv']}",
                      "-o", str(out), "--spark", "--master", "local[1]"))
    assert "starting Spark (local[1])" in proc.stderr
    got = pq.read_table(out)          # a directory of part files
    assert got.column_names == ["symbol", "start_ts", "end_ts", "mno"]
    assert got.to_pylist() == [{"symbol": "a", "start_ts": got.column("start_ts")[0].as_py(),
                                "end_ts": got.column("end_ts")[0].as_py(), "mno": 1}]
    assert as_micros(got.column("start_ts").to_numpy()) == [START]
    assert as_micros(got.column("end_ts").to_numpy()) == [END]
    again = user_error(run_cli("run", str(files["clause"]), "--table", f"ticks={files['csv']}",
                               "-o", str(out), "--spark", "--master", "local[1]"))
    assert "exists" in again


@spark_only
def test_run_spark_statement_nanosecond_parquet(files, tmp_path, ticks_table):
    nanos = tmp_path / "ticks_ns.parquet"
    pq.write_table(ticks_table.set_column(1, "ts", ticks_table.column("ts").cast(
        pa.timestamp("ns"))), nanos, version="2.6")
    assert pq.read_schema(nanos).field("ts").type == pa.timestamp("ns")
    proc = ok(run_cli("run", str(files["statement"]), "--table", f"ticks={nanos}",
                      "--spark", "--master", "local[1]"))
    assert "converting to microseconds" in proc.stderr
    assert re.search(r"^symbol\s+mno\s+end_ts$", proc.stdout, re.M), proc.stdout
    assert re.search(r"^\s*a\s+1\s+2024-01-02 09:30:06$", proc.stdout, re.M), proc.stdout
    assert "(1 row)" in proc.stdout
    bad = tmp_path / "bad.sql"
    bad.write_text("SELECT * FROM ticks MATCH_RECOGNIZE (ORDER BY ts\n"
                   "  PATTERN (A B+) DEFINE B AS price >> 0) AS m")
    err = user_error(run_cli("run", str(bad), "--table", f"ticks={nanos}", "--spark",
                             "--master", "local[1]"))      # found before Spark starts
    assert "line 2" in err


def test_master_needs_spark(files):
    err = user_error(run_cli("run", str(files["clause"]), "--table",
                             f"ticks={files['parquet']}", "--master", "local[1]"))
    assert "--master needs --spark" in err
