"""The ``gpu-mr`` command line: run, explain and demo.

``gpu-mr run QUERY.sql --table t=ticks.parquet [-o out.parquet]`` runs either a
full ``SELECT`` (through ``gpu_mr.sql``) or a bare MATCH_RECOGNIZE clause body
(through ``gpu_mr.match_recognize`` on the one table given). ``gpu-mr explain``
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


def show_table(table: pa.Table, max_rows: int, title: str | None = None) -> None:
    """Print the first rows of a table and its row count to stdout."""
    import pandas as pd
    n = table.num_rows
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
                    "MATCH_RECOGNIZE (the rest runs in DuckDB), or a bare "
                    "MATCH_RECOGNIZE clause body over the one --table given.")
    run.add_argument("query", metavar="QUERY.sql", help="query file ('-' for stdin)")
    run.add_argument("--table", "-t", action="append", metavar="NAME=FILE",
                     help="a table from a .parquet or .csv file (repeatable)")
    run.add_argument("-o", "--output", metavar="OUT",
                     help="write the result to OUT (.parquet or .csv) instead of printing it")
    run.add_argument("--engine", choices=ENGINES, default="auto")
    run.add_argument("--max-rows", type=int, default=20, metavar="N",
                     help="rows to print without -o (default 20)")
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
