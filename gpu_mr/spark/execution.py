"""MATCH_RECOGNIZE over a Spark DataFrame: one shuffle, one sort, one Arrow stream per task.

What: ``match_recognize(df, clause)`` returns a lazy DataFrame:
``df.withColumn(seq, monotonically_increasing_id())`` (input order, the
tie-break), ``repartition(PARTITION BY keys)`` (or one partition when there
are none), ``sortWithinPartitions(keys, ORDER BY keys, seq)``, then
``mapInArrow`` with a generator that feeds the task's record batches to
``gpu_mr.match_recognize_batches``. A PARTITION BY group never spans two
Spark partitions; within a task one group may span any number of batches,
and the stream carries the unfinished group, its scan state and its open
match from batch to batch.
Why this shape: it is Spark's own machinery (DESIGN.md §7). The shuffle and
the sort are Spark's (on a RAPIDS cluster, the GPU's); only the matching is
Python. The result schema is derived on the driver before any data moves
(schema.py), and every static error is raised there, with line and column.
Determinism: rows tying on every ORDER BY key keep their input order, as in
``gpu_mr.match_recognize`` (a stable sort): the input-order column makes the
sort total, so a retried task sees its rows in the same order and produces
the same output, whatever order the shuffle blocks arrive in.
Memory: per task, one coalesced batch (``batch_rows``) plus what the stream
carries (for DFA-path queries the open match and a few rows; otherwise one
whole PARTITION BY group). Spark's sort spills to disk, so a partition larger
than the executor's memory completes.
Cost: one shuffle and one sort of the input (the floor of any Spark-based
matcher), Arrow batches to and from the Python worker (no pandas), and the
engine's own scan. Engine choice happens in each task: with a GPU assigned
to the task (``TaskContext.resources()["gpu"]``) and ``engine="auto"``, the
GPU engine where it can run the query, else the CPU engine.
"""

from __future__ import annotations

import logging
import re
from typing import Iterator, Optional

import pyarrow as pa

from .. import engines
from ..analysis import analyze
from ..errors import (AnalysisError, DataError, GpuMrError, MatchRuntimeError,
                      SqlSyntaxError, UnsupportedError)
from ..syntax import parse_clause
from . import schema as S
from .session import quiet_pandas_warning, require_pyspark

log = logging.getLogger("gpu_mr.spark")

#: Rows gathered from Spark's Arrow batches before each engine step, at least
#: (``spark.sql.execution.arrow.maxRecordsPerBatch`` when larger). Spark sends
#: 10,000-row batches by default; fewer, larger steps cut the per-step cost of
#: the stream (order check at the seam, engine set-up, assembly) and keep
#: memory bounded by this many rows.
DEFAULT_BATCH_ROWS = 1 << 17


def match_recognize(df, clause: str, engine: str = "auto", *, batch_rows: Optional[int] = None,
                    _span: Optional[tuple] = None):
    """Run a MATCH_RECOGNIZE clause over a Spark DataFrame.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        The input rows, in any order and partitioning.
    clause : str
        The clause body (what goes between ``MATCH_RECOGNIZE (`` and ``)``).
    engine : {"auto", "gpu", "cpu", "reference"}
        ``"auto"`` runs on the GPU in tasks that have one assigned
        (``TaskContext.resources()``) and the query allows, else on the CPU.
    batch_rows : int, optional
        Rows gathered per engine step (default: the larger of
        ``spark.sql.execution.arrow.maxRecordsPerBatch`` and 131,072).

    Returns
    -------
    pyspark.sql.DataFrame
        Lazy: nothing runs until an action. Its schema is the clause's
        result schema (timestamps stay TimestampType or TimestampNTZType as
        in the input; decimals keep precision and scale). Row order is not
        defined, as for any Spark result: sort it if order matters.

    Raises
    ------
    SqlSyntaxError, AnalysisError, UnsupportedError
        On the driver, before any job runs (line and column in ``clause``).
    GpuMrError
        When ``df`` is not a Spark DataFrame.

    Notes
    -----
    With no PARTITION BY the whole input is one partition: it is moved to a
    single task and matched there in one stream, so it uses one core. Data
    errors found while matching (a DEFINE that fails on a value, a SKIP to
    the first row of the match) surface when an action runs, as Spark
    exceptions; :func:`translate_error` turns them back into gpu_mr errors.

    Examples
    --------
    >>> import gpu_mr.spark  # doctest: +SKIP
    >>> out = gpu_mr.spark.match_recognize(ticks_df, '''
    ...     PARTITION BY symbol ORDER BY ts
    ...     MEASURES FIRST(A.ts) AS start_ts, LAST(C.ts) AS end_ts
    ...     PATTERN (A B+ C+)
    ...     DEFINE B AS price < PREV(price), C AS price > PREV(price)''')  # doctest: +SKIP
    >>> out.orderBy("symbol", "start_ts").show()  # doctest: +SKIP
    """
    require_pyspark()
    S.check_dataframe(df)
    if not isinstance(clause, str):
        raise GpuMrError(f"the clause must be a string of SQL, not {type(clause).__name__}",
                         code="bad_argument")
    if batch_rows is not None and (not isinstance(batch_rows, int) or batch_rows < 1):
        raise GpuMrError(f"batch_rows must be a positive integer, not {batch_rows!r}",
                         code="bad_argument")
    start, end = _span if _span is not None else (0, len(clause))
    spark = df.sparkSession
    timezone = S.session_timezone(spark)
    large = S.prefers_large_types(spark)
    if S.SEQUENCE_COLUMN in df.columns:
        raise DataError(f"the input has a column named {S.SEQUENCE_COLUMN!r}, which gpu_mr "
                        "uses internally; rename it", column=S.SEQUENCE_COLUMN,
                        code="reserved_column")
    arrow_in = S.input_arrow_schema(df.schema, timezone, large)

    # Every static check on the driver, positions in the caller's text.
    query = analyze(parse_clause(clause, start, end), arrow_in)
    if engine != "gpu":
        # Unknown name, or an engine that cannot run the query: raise now.
        # "gpu" is checked in the tasks: the driver often has no GPU.
        engines.choose(query, engine)
    out_arrow = S.output_arrow_schema(clause, arrow_in, start, end)
    out_spark = S.to_spark_schema(out_arrow)
    returned = S.returned_arrow_schema(out_spark, timezone, large)

    if batch_rows is None:
        per_batch = int(spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch", "10000"))
        batch_rows = max(per_batch, DEFAULT_BATCH_ROWS)

    from pyspark.sql import functions as F
    staged = df.withColumn(S.SEQUENCE_COLUMN, F.monotonically_increasing_id())
    keys = list(query.partition_columns)
    if keys:
        staged = staged.repartition(*[F.col(S.quoted(k)) for k in keys])
    else:
        staged = staged.repartition(1)
    staged = staged.sortWithinPartitions(
        *S.sort_columns(keys, query.order_keys, tiebreak=S.SEQUENCE_COLUMN))
    names = out_arrow.names
    unique = len(set(n.casefold() for n in names)) == len(names)
    if not unique:
        # An ORDER BY key listed twice is output twice (ALL ROWS PER MATCH):
        # mapInArrow matches result columns by name, so they travel under
        # positional names and get theirs back after.
        out_spark = S.to_spark_schema(pa.schema(
            [f.with_name(f"__gpu_mr_c{i}") for i, f in enumerate(out_arrow)]))
        returned = S.returned_arrow_schema(out_spark, timezone, large)
    task = build_task(clause[start:end], engine, returned, batch_rows)
    with quiet_pandas_warning():
        result = staged.mapInArrow(task, out_spark)
    return result if unique else result.toDF(*names)


def build_task(clause: str, engine: str, returned: pa.Schema, batch_rows: int):
    """The function each ``mapInArrow`` task runs (a closure over plain data).

    ``task(batches)`` takes the task's record batches (sorted, with the
    input-order column last) and yields result batches in ``returned``.

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"ts": [1, 2, 3], "p": [3.0, 2.0, 4.0], "__gpu_mr_seq": [0, 1, 2]})
    >>> out = pa.schema([("n", pa.int64())])
    >>> task = build_task("ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B+) "
    ...                   "DEFINE B AS p < PREV(p)", "cpu", out, 2)
    >>> [b.to_pylist() for b in task(iter(t.to_batches(max_chunksize=1)))]
    [[{'n': 2}]]
    """
    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        _limit_threads(_task_cpus())
        tables = _coalesce(batches, batch_rows)
        first = next(tables, None)
        if first is None:
            return
        query = analyze(parse_clause(clause), first.schema)
        chosen = engines.choose(query, executor_engine(query, engine))
        from ..streaming import run_stream
        for piece in run_stream(query, chosen, _chain(first, tables)):
            yield from S.conform(piece, returned).to_batches()
    return task


def _chain(first, rest):
    yield first
    yield from rest


def executor_engine(query, engine: str, resources: Optional[dict] = None) -> str:
    """The engine a task runs: ``engine`` unless it is ``"auto"``.

    ``"auto"`` takes the GPU engine when the task has a GPU assigned and the
    engine supports the query, otherwise the CPU engine where it can run
    the query, otherwise the reference engine. A GPU that cannot be used is
    logged as a warning, never an error.

    Parameters
    ----------
    resources : dict, optional
        ``TaskContext.resources()``; read from the running task when omitted.

    Examples
    --------
    >>> q = analyze(parse_clause("MEASURES COUNT(*) AS n PATTERN (A) DEFINE A AS TRUE"), None)
    >>> executor_engine(q, "auto", resources={})
    'cpu'
    """
    if engine != "auto":
        return engine
    if resources is None:
        resources = _task_resources()
    gpu = resources.get("gpu")
    if gpu is not None:
        try:
            engines.choose(query, "gpu")
            _use_device(getattr(gpu, "addresses", None) or [])
            return "gpu"
        except GpuMrError as exc:
            log.warning("gpu_mr: this task has a GPU but runs on the CPU: %s", exc)
    cpu = engines._AVAILABLE.get("cpu")
    if cpu is not None and cpu.supports(query) is None:
        return "cpu"
    return "reference"


def _task_resources() -> dict:
    try:
        from pyspark import TaskContext
    except ImportError:
        return {}
    ctx = TaskContext.get()
    return dict(ctx.resources()) if ctx is not None else {}


def _task_cpus() -> Optional[int]:
    """The CPUs Spark gave the running task (``spark.task.cpus``), or None
    outside a task."""
    try:
        from pyspark import TaskContext
    except ImportError:
        return None
    ctx = TaskContext.get()
    if ctx is None:
        return None
    try:
        return int(ctx.cpus())
    except Exception:               # a Spark without TaskContext.cpus(): leave it
        return None


def _limit_threads(cpus: Optional[int]) -> None:
    """Run the engine's parallel kernels (numba's threads, and the measure
    kernels' pool, which follows numba's count) on the task's own CPUs: an
    executor runs as many tasks at once as it has cores, and each taking
    every core would oversubscribe them."""
    if not cpus:
        return
    try:
        import numba
    except ImportError:
        return
    numba.set_num_threads(max(1, min(int(cpus), numba.config.NUMBA_NUM_THREADS)))


def _use_device(addresses) -> None:
    """Make the task's GPU (its first address) the current CUDA device."""
    if not addresses:
        return
    try:
        import cupy
    except ImportError:
        return
    cupy.cuda.Device(int(addresses[0])).use()


def _coalesce(batches, rows: int) -> Iterator[pa.Table]:
    """Gather record batches into tables of at least ``rows`` rows (the last
    may be smaller), dropping the input-order column."""
    held: list = []
    count = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        i = batch.schema.get_field_index(S.SEQUENCE_COLUMN)
        if i >= 0:
            batch = batch.drop_columns([S.SEQUENCE_COLUMN])
        held.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield pa.Table.from_batches(held)
            held, count = [], 0
    if held:
        yield pa.Table.from_batches(held)


# --------------------------------------------------------------------------
# Errors raised inside tasks
# --------------------------------------------------------------------------

_ERROR_CLASSES = {cls.__name__: cls for cls in (
    GpuMrError, SqlSyntaxError, AnalysisError, UnsupportedError, DataError, MatchRuntimeError)}
_TASK_ERROR = re.compile(r"gpu_mr\.errors\.(\w+): (.*?)\s*(?:\n\s*\n|\n\tat |\nJVM stacktrace|$)",
                         re.DOTALL)


def translate_error(exc: BaseException) -> Optional[GpuMrError]:
    """The gpu_mr error a Spark exception carries from a task, if any.

    Errors raised while matching (in a Python worker) reach the driver as
    Spark exceptions holding the worker's traceback; this finds the gpu_mr
    error at its end and rebuilds it (same class and message).

    Examples
    --------
    >>> e = translate_error(RuntimeError("...\\ngpu_mr.errors.DataError: bad value in 'p'\\n"))
    >>> type(e).__name__, str(e)
    ('DataError', "bad value in 'p'")
    >>> translate_error(RuntimeError("something else")) is None
    True
    """
    if isinstance(exc, GpuMrError):
        return exc
    found = _TASK_ERROR.findall(str(exc))
    if not found:
        return None
    name, message = found[-1]
    cls = _ERROR_CLASSES.get(name, GpuMrError)
    if cls in (SqlSyntaxError, AnalysisError):
        return cls(message, code="task_error")
    if cls is UnsupportedError:
        return cls(message, engine="unknown", construct="unknown", code="task_error")
    if cls is MatchRuntimeError:
        return cls(message, code="task_error")
    if cls is DataError:
        return cls(message, code="task_error")
    return GpuMrError(message, code="task_error")
