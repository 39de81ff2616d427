"""The ``gpu-mr`` command line: run, explain and demo.

``gpu-mr run QUERY.sql --table t=ticks.parquet [-o out.parquet]`` runs either a
full ``SELECT`` (through ``gpu_mr.sql``) or a bare MATCH_RECOGNIZE clause body
(through ``gpu_mr.match_recognize`` on the one table given); with ``--spark``
the same runs through ``gpu_mr.spark`` on a local (or ``--master``) Spark
session, the rest of a SELECT in Spark SQL. ``gpu-mr explain``
prints the compiled plan; ``gpu-mr demo`` runs two shape queries over
synthetic ticks. Progress goes to stderr, results to stdout. A rejected query
or unusable input prints ``error: ...`` and exits with status 2; anything else
escaping is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Sequence

import pyarrow as pa

from gpu_mr.errors import GpuMrError

ENGINES = ("auto", "reference", "cpu", "gpu")
TABLE_FORMATS = (".parquet", ".csv")

# Exit status of a user error (bad query, bad file); argparse uses 2 as well.
EXIT_USER_ERROR = 2


class UsageError(Exception):
    """A problem with the command line or its files, reported without traceback."""


class Progress:
    """One stderr line per stage, with its duration; silent with ``--quiet``."""

    def __init__(self, quiet: bool):
        self.quiet = quiet

    def stage(self, text: str) -> "_Stage":
        return _Stage(self, text)

    def note(self, text: str) -> None:
        if not self.quiet:
            print(f"gpu-mr: {text}", file=sys.stderr, flush=True)


class _Stage:
    def __init__(self, progress: Progress, text: str):
        self.progress = progress
        self.text = text
        self.seconds = 0.0

    def __enter__(self) -> "_Stage":
        self.progress.note(f"{self.text} ...")
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.seconds = time.perf_counter() - self._t0
        if exc_type is None:
            self.progress.note(f"{self.text}: done in {self.seconds:.2f} s")


# ---------------------------------------------------------------- files


def check_readable(path: str) -> str:
    """Fail early on a table file that cannot be read; return its extension."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in TABLE_FORMATS:
        raise UsageError(
            f"cannot read {path!r}: unknown extension {ext or '(none)'!r}; "
            f"use one of {', '.join(TABLE_FORMATS)}")
    if not os.path.exists(path):
        raise UsageError(f"cannot read {path!r}: no such file")
    if os.path.isdir(path):
        raise UsageError(f"cannot read {path!r}: it is a directory")
    return ext


def check_writable(path: str) -> str:
    """Fail early on an output name with an unknown extension; return it."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in TABLE_FORMATS:
        raise UsageError(
            f"cannot write {path!r}: unknown extension {ext or '(none)'!r}; "
            f"use one of {', '.join(TABLE_FORMATS)}")
    return ext


def read_table(path: str) -> pa.Table:
    """Read a .parquet or .csv file (chosen by extension) into an Arrow table."""
    ext = check_readable(path)
    try:
        if ext == ".parquet":
            import pyarrow.parquet as pq
            return pq.read_table(path)
        import pyarrow.csv as pacsv
        return pacsv.read_csv(path)
    except (pa.ArrowException, OSError) as exc:
        raise UsageError(f"cannot read {path!r}: {exc}") from None


def read_schema(path: str) -> pa.Schema:
    """The schema of a table file (Parquet: from its footer, no data read)."""
    ext = check_readable(path)
    if ext == ".parquet":
        import pyarrow.parquet as pq
        try:
            return pq.read_schema(path)
        except (pa.ArrowException, OSError) as exc:
            raise UsageError(f"cannot read {path!r}: {exc}") from None
    return read_table(path).schema


def write_table(table: pa.Table, path: str) -> None:
    """Write an Arrow table to .parquet or .csv (chosen by extension).

    Parquet timestamps are written in microseconds, the unit Spark reads; a
    nanosecond value that would lose precision is an error, not a truncation.
    """
    ext = check_writable(path)
    try:
        if ext == ".parquet":
            import pyarrow.parquet as pq
            pq.write_table(table, path, coerce_timestamps="us",
                           allow_truncated_timestamps=False)
        else:
            import pyarrow.csv as pacsv
            pacsv.write_csv(table, path)
    except (pa.ArrowException, OSError) as exc:
        raise UsageError(f"cannot write {path!r}: {exc}") from None


def read_query(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise UsageError(f"cannot read query {path!r}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read query {path!r}: {exc}") from None


def parse_table_args(specs: Sequence[str]) -> list[tuple[str, str]]:
    """``["t=ticks.parquet", ...]`` -> ``[("t", "ticks.parquet"), ...]``."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for spec in specs:
        name, sep, path = spec.partition("=")
        name = name.strip()
        if not sep or not name or not path:
            raise UsageError(f"--table expects NAME=FILE, got {spec!r}")
        if not name.isidentifier():
            raise UsageError(f"--table name {name!r} is not a valid SQL/Python identifier")
        if name in ("query", "engine"):
            raise UsageError(f"--table name {name!r} is reserved; choose another name")
        if name.lower() in seen:
            raise UsageError(f"--table {name!r} given twice")
        seen.add(name.lower())
        out.append((name, path))
    return out


# ---------------------------------------------------------------- queries

_LEADING_NOISE = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.DOTALL)
_STATEMENT_START = re.compile(r"(?:SELECT|WITH)\b", re.IGNORECASE)


def is_statement(text: str) -> bool:
    """True when the text, after comments and whitespace, starts a SELECT/WITH
    statement (possibly parenthesised); otherwise it is a bare clause body."""
    pos = _LEADING_NOISE.match(text).end()
    while pos < len(text) and text[pos] == "(":
        pos = _LEADING_NOISE.match(text, pos + 1).end()
    return _STATEMENT_START.match(text, pos) is not None


def to_arrow(result) -> pa.Table:
    """The library returns the kind of frame it was given; the CLI wants Arrow."""
    if isinstance(result, pa.Table):
        return result
    if isinstance(result, pa.RecordBatch):
        return pa.Table.from_batches([result])
    import pandas as pd
    if isinstance(result, pd.DataFrame):
        return pa.Table.from_pandas(result, preserve_index=False)
    raise TypeError(f"unexpected result type {type(result).__name__}")


def show_table(table: pa.Table, max_rows: int, title: str | None = None,
               total: int | None = None) -> None:
    """Print the first rows of a table and its row count (``total`` when
    the table holds only the first rows) to stdout."""
    import pandas as pd
    n = table.num_rows if total is None else total
    if title:
        print(f"== {title}")
    head = table.slice(0, max(max_rows, 0)).to_pandas()
    with pd.option_context("display.width", 200, "display.max_columns", 50,
                           "display.max_colwidth", 40):
        if table.num_columns == 0:
            print("(no columns)")
        elif n == 0:
            print("  ".join(table.column_names))
        else:
            print(head.to_string(index=False))
    more = f", first {min(n, max_rows)} shown" if n > max_rows else ""
    print(f"({n} row{'s' if n != 1 else ''}{more})")


# ---------------------------------------------------------------- commands


def cmd_run(args: argparse.Namespace, progress: Progress) -> int:
    import gpu_mr

    text = read_query(args.query)
    specs = parse_table_args(args.table or [])
    # Fail on bad file names before any slow work.
    for _, path in specs:
        check_readable(path)
    if args.output:
        check_writable(args.output)
    statement = is_statement(text)
    if not statement and len(specs) != 1:
        raise UsageError(
            "a bare MATCH_RECOGNIZE clause runs on exactly one table: give one "
            f"--table NAME=FILE (got {len(specs)}), or write a full SELECT")
    if args.spark:
        return run_on_spark(args, progress, text, specs, statement)
    if args.master:
        raise UsageError("--master needs --spark")

    tables: dict[str, pa.Table] = {}
    for name, path in specs:
        with progress.stage(f"reading {name} from {path}"):
            tables[name] = read_table(path)
        progress.note(f"{name}: {tables[name].num_rows} rows, "
                      f"{tables[name].num_columns} columns")

    with progress.stage(f"matching (engine={args.engine})"):
        if statement:
            result = gpu_mr.sql(text, engine=args.engine, **tables)
        else:
            (table,) = tables.values()
            result = gpu_mr.match_recognize(table, text, engine=args.engine)
    result = to_arrow(result)
    progress.note(f"result: {result.num_rows} row{'s' if result.num_rows != 1 else ''}")

    if args.output:
        with progress.stage(f"writing {args.output}"):
            write_table(result, args.output)
    else:
        show_table(result, args.max_rows)
    return 0


# ---------------------------------------------------------------- spark


def run_on_spark(args: argparse.Namespace, progress: Progress, text: str,
                 specs: list[tuple[str, str]], statement: bool) -> int:
    """``gpu-mr run --spark``: the same query on Spark (local unless --master).

    Tables are read by Spark (Parquet; CSV with a header and inferred types)
    and registered as temporary views under their --table names. With -o,
    Spark writes OUT as a directory of part files (Parquet timestamps in
    microseconds); without it, the result is sorted (a bare clause's by its
    columns; a statement keeps its own ORDER BY) and its first rows printed.
    """
    from gpu_mr import spark as gspark

    master = args.master or "local[*]"
    gspark.session.require_pyspark()
    # Fail on a malformed clause before the JVM starts (seconds); names are
    # checked against the tables' schemas once Spark has read them.
    import gpu_mr
    gpu_mr.compile(text)
    if args.output and os.path.exists(args.output):
        raise UsageError(f"cannot write {args.output!r}: it exists (Spark writes a directory "
                         "there); remove it or choose another name")
    conf = {"spark.ui.showConsoleProgress": "false" if args.quiet else "true"}
    with progress.stage(f"starting Spark ({master})"):
        session = gspark.local_session(master, app_name="gpu-mr", conf=conf)
    frames = {}
    for name, path in specs:
        with progress.stage(f"reading {name} from {path} (Spark)"):
            frames[name] = spark_read(session, path, progress)
        progress.note(f"{name}: {len(frames[name].columns)} columns")
    try:
        if statement:
            for name, df in frames.items():
                df.createOrReplaceTempView(name)
            result = gspark.sql(session, text, engine=args.engine)
        else:
            (df,) = frames.values()
            result = gspark.match_recognize(df, text, engine=args.engine)
        if args.output:
            with progress.stage(f"matching (engine={args.engine}, Spark) and writing "
                                f"{args.output}"):
                writer = result.write.mode("errorifexists")
                if args.output.lower().endswith(".csv"):
                    writer.option("header", "true").csv(args.output)
                else:
                    writer.parquet(args.output)
            return 0
        with progress.stage(f"matching (engine={args.engine}, Spark)"):
            if not statement:
                result = result.orderBy(*[c for c, t in result.dtypes
                                          if not t.startswith(("array", "map", "struct"))])
            result = result.persist()
            total = result.count()
            head = result.limit(max(args.max_rows, 0)).toArrow()
        result.unpersist()
    except GpuMrError:
        raise
    except Exception as exc:
        err = gspark.translate_error(exc)
        if err is not None:
            raise err from None
        if type(exc).__module__.startswith(("pyspark", "py4j")):
            raise UsageError(f"Spark: {_first_line(exc)}") from None
        raise
    progress.note(f"result: {total} row{'s' if total != 1 else ''}")
    show_table(head, args.max_rows, total=total)
    return 0


def spark_read(session, path: str, progress: Progress):
    """A Spark DataFrame over a .parquet or .csv file.

    Spark rejects Parquet files holding nanosecond timestamps: those are read
    with pyarrow, converted to microseconds (an error if that loses digits)
    and handed to Spark from memory.
    """
    ext = check_readable(path)
    if ext == ".csv":
        return session.read.option("header", "true").option("inferSchema", "true").csv(path)
    nanos = [f.name for f in read_schema(path)
             if pa.types.is_timestamp(f.type) and f.type.unit == "ns"]
    if not nanos:
        return session.read.parquet(path)
    progress.note(f"{path}: nanosecond timestamps in {', '.join(nanos)}, which Spark cannot "
                  "read: converting to microseconds in memory")
    table = read_table(path)
    for name in nanos:
        i = table.schema.get_field_index(name)
        field = table.schema.field(i)
        try:
            column = table.column(i).cast(pa.timestamp("us", tz=field.type.tz))
        except pa.ArrowInvalid:
            raise UsageError(
                f"cannot read {path!r} with Spark: column {name!r} holds nanosecond "
                "timestamps that microseconds cannot hold exactly; run without --spark, "
                "or rewrite the file with microsecond timestamps") from None
        table = table.set_column(i, field.with_type(column.type), column)
    from pyspark.sql.pandas.types import from_arrow_schema
    from gpu_mr.spark.session import quiet_pandas_warning
    with quiet_pandas_warning():       # naive timestamps stay naive (TimestampNTZ)
        return session.createDataFrame(table, schema=from_arrow_schema(
            table.schema, prefer_timestamp_ntz=True))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def cmd_explain(args: argparse.Namespace, progress: Progress) -> int:
    import gpu_mr

    text = read_query(args.query)
    specs = parse_table_args(args.table or [])
    if len(specs) > 1:
        raise UsageError("explain checks column names against at most one --table")
    schema = None
    for _, path in specs:
        schema = read_schema(path)
    plan = gpu_mr.compile(text, schema=schema) if schema is not None else gpu_mr.compile(text)
    print(plan.explain())
    return 0


def cmd_demo(args: argparse.Namespace, progress: Progress) -> int:
    import gpu_mr
    from gpu_mr import demo

    if args.rows < 0 or args.symbols < 1:
        raise UsageError("--rows must be >= 0 and --symbols >= 1")
    with progress.stage(f"generating {args.rows} ticks over {args.symbols} symbols "
                        f"(seed {args.seed})") as st:
        ticks = demo.generate_ticks(rows=args.rows, symbols=args.symbols, seed=args.seed)
    print(f"Synthetic ticks: {ticks.num_rows} rows, {args.symbols} symbols, "
          f"generated in {st.seconds:.2f} s")
    show_table(ticks, 5, title="input (first rows)")
    print()

    for title, query in (("V-shape", demo.V_SHAPE), ("W-shape", demo.W_SHAPE)):
        print(f"== {title} query")
        print(_indent(query.strip()))
        with progress.stage(f"{title}: matching (engine={args.engine})") as st:
            result = to_arrow(gpu_mr.match_recognize(ticks, query, engine=args.engine))
        rate = ticks.num_rows / st.seconds if st.seconds > 0 else float("inf")
        show_table(result, args.max_rows, title=f"{title} matches")
        print(f"{title}: {result.num_rows} matches in {st.seconds:.2f} s "
              f"({rate:,.0f} rows/s, engine={args.engine})")
        print()
    return 0


def cmd_bench(args: argparse.Namespace, progress: Progress) -> int:
    from gpu_mr.bench import run_bench

    if args.rows < 1 or args.symbols < 1 or args.reference_rows < 1 or args.repeat < 1:
        raise UsageError("--rows, --symbols, --reference-rows and --repeat must be >= 1")
    with progress.stage(f"benchmarking {args.rows} ticks over {args.symbols} symbols"):
        records = run_bench(args.rows, args.symbols, args.reference_rows, args.repeat)
    return 0 if all(r["identical"] for r in records) else 1


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


# ---------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-mr",
        description="SQL:2016 row pattern recognition (MATCH_RECOGNIZE) "
                    "over Parquet and CSV files.")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress lines on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    run = sub.add_parser(
        "run", help="run a query over tables from files",
        description="Run QUERY.sql: a full SELECT whose FROM holds a "
                    "MATCH_RECOGNIZE (the rest runs in DuckDB, or Spark SQL with "
                    "--spark), or a bare MATCH_RECOGNIZE clause body over the one "
                    "--table given.")
    run.add_argument("query", metavar="QUERY.sql", help="query file ('-' for stdin)")
    run.add_argument("--table", "-t", action="append", metavar="NAME=FILE",
                     help="a table from a .parquet or .csv file (repeatable)")
    run.add_argument("-o", "--output", metavar="OUT",
                     help="write the result to OUT (.parquet or .csv) instead of printing it")
    run.add_argument("--engine", choices=ENGINES, default="auto")
    run.add_argument("--max-rows", type=int, default=20, metavar="N",
                     help="rows to print without -o (default 20)")
    run.add_argument("--spark", action="store_true",
                     help="run on Spark (gpu_mr.spark; needs pyspark and Java): the "
                          "clause in mapInArrow tasks, the rest of a SELECT in Spark SQL; "
                          "-o then writes a directory of part files")
    run.add_argument("--master", metavar="URL", default=None,
                     help="Spark master with --spark (default local[*])")
    run.set_defaults(func=cmd_run)

    explain = sub.add_parser(
        "explain", help="print the compiled plan of a query",
        description="Print the plan of QUERY.sql (a full SELECT or a bare clause): "
                    "automaton sizes, which DEFINEs are row masks, chosen engine.")
    explain.add_argument("query", metavar="QUERY.sql", help="query file ('-' for stdin)")
    explain.add_argument("--table", "-t", action="append", metavar="NAME=FILE",
                         help="check column names and types against this table's schema")
    explain.set_defaults(func=cmd_explain)

    demo = sub.add_parser(
        "demo", help="run V- and W-shape queries over synthetic ticks",
        description="Generate deterministic synthetic tick data and run a "
                    "V-shape and a W-shape query over it, printing matches and timings.")
    demo.add_argument("--rows", type=int, default=20_000, help="rows to generate (default 20000)")
    demo.add_argument("--symbols", type=int, default=8, help="symbols (default 8)")
    demo.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    demo.add_argument("--engine", choices=ENGINES, default="auto")
    demo.add_argument("--max-rows", type=int, default=10, metavar="N",
                      help="matches to print per query (default 10)")
    demo.set_defaults(func=cmd_demo)

    bench = sub.add_parser(
        "bench", help="measure the engines on synthetic ticks (ratios from one run)",
        description="Run the V- and W-shape queries over sorted synthetic ticks with each "
                    "fast engine and print rows/s, the speed-up over the reference engine "
                    "and the time relative to one numpy pass over the price column. "
                    "Exit status 1 if an engine's result differs from the reference's. "
                    "The full suite is benchmarks/run.py in a source checkout.")
    bench.add_argument("--rows", type=int, default=1_000_000, help="rows (default 1000000)")
    bench.add_argument("--symbols", type=int, default=100, help="symbols (default 100)")
    bench.add_argument("--reference-rows", type=int, default=20_000,
                       help="rows given to the slow reference engine (default 20000)")
    bench.add_argument("--repeat", type=int, default=3, help="timed runs, best kept (default 3)")
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    progress = Progress(args.quiet)
    try:
        return args.func(args, progress)
    except (GpuMrError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `gpu-mr run ... | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0


if __name__ == "__main__":
    sys.exit(main())
