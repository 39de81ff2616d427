"""The public entry points: match_recognize, sql and compile (DESIGN.md §2).

Each call runs the pipeline one way: parse -> analyze -> choose an engine ->
sort and partition -> find matches -> assemble measures -> the caller's frame
kind. Every rejection is a gpu_mr.errors.GpuMrError.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Optional

import pyarrow as pa

from . import engines, frames
from .analysis import CheckedQuery, analyze
from .errors import GpuMrError
from .measures import assemble
from .syntax import parse_clause


def match_recognize(table, clause: str, engine: str = "auto"):
    """Run a MATCH_RECOGNIZE clause over a table.

    Parameters
    ----------
    table : pandas.DataFrame or pyarrow.Table
        The input rows; the result has the same kind.
    clause : str
        The clause body: what goes between ``MATCH_RECOGNIZE (`` and ``)``.
    engine : {"auto", "reference", "cpu", "gpu"}
        ``"auto"`` picks the fastest engine that supports the query.

    Examples
    --------
    >>> import pyarrow as pa, gpu_mr
    >>> t = pa.table({"ts": [1, 2, 3, 4], "price": [5.0, 4.0, 3.0, 6.0]})
    >>> gpu_mr.match_recognize(t, '''
    ...     ORDER BY ts
    ...     MEASURES FIRST(A.ts) AS start_ts, LAST(B.price) AS low, COUNT(*) AS n
    ...     PATTERN (A B+ C)
    ...     DEFINE B AS price < PREV(price), C AS price > PREV(price)
    ... ''').to_pylist()
    [{'start_ts': 1, 'low': 3.0, 'n': 4}]
    """
    _check_text(clause, "clause")
    if frames._is_cudf(table):
        result = _run_cudf_on_device(table, clause, engine)
        if result is not None:
            return result
    pending: set = set()
    arrow, kind = frames.to_arrow(table, pending)
    if pending:     # pandas floats and times: scanned for NaN/NaT where the query reads them
        arrow = frames.finish_pending(arrow, pending,
                                      checked_clause(clause, arrow.schema).columns_read())
    return frames.from_arrow(run_clause_on_arrow(arrow, clause, engine=engine), kind)


def _run_cudf_on_device(df, clause: str, engine: str):
    """The result as a cuDF DataFrame when the GPU engine runs the whole
    query on the frame's device memory; None when the host path must run
    (it converts the frame to Arrow, and gives the same result)."""
    from . import backend
    found = backend.detect()
    if isinstance(found, str) or engine not in ("auto", "gpu"):
        return None
    from .device_input import from_cudf
    source = from_cudf(found, df)
    frames._check_unique_names(source.schema.names)
    query = checked_clause(clause, source.schema)
    chosen = engines.choose(query, engine)
    if not hasattr(chosen, "run_input"):
        return None
    result = chosen.run_input(query, source, on_device=True)
    if result is None:
        return None
    if isinstance(result, pa.Table):
        return frames.from_arrow(result, "cudf")
    if result.cudf_reason() is None:        # every column built on the device
        return result.to_cudf()
    return frames.from_arrow(result.to_arrow(found), "cudf")


def sql(query: str, engine: str = "auto", **tables):
    """Run a whole SELECT statement whose FROM holds a MATCH_RECOGNIZE.

    The clause runs in gpu_mr; the rest of the statement runs in DuckDB.
    Tables are passed by name as keyword arguments (pandas or pyarrow).

    >>> import pyarrow as pa, gpu_mr
    >>> t = pa.table({"id": [1, 2, 3], "v": [1, 0, 1]})
    >>> gpu_mr.sql("SELECT m.n FROM t MATCH_RECOGNIZE (ORDER BY id MEASURES COUNT(*) AS n "
    ...            "PATTERN (A+) DEFINE A AS v > 0) AS m ORDER BY m.n", t=t).to_pylist()
    [{'n': 1}, {'n': 1}]
    """
    _check_text(query, "query")
    from .outer_sql import run_sql
    return run_sql(query, tables, engine)


def run_clause_on_arrow(table: pa.Table, text: str, *, engine: str = "auto", start: int = 0,
                        end: Optional[int] = None) -> pa.Table:
    """Run the clause body ``text[start:end]`` over an Arrow table.

    Error positions refer to the whole ``text`` (used by gpu_mr.sql).
    """
    query = checked_clause(text, table.schema, start, end)
    chosen = engines.choose(query, engine)
    on_device = getattr(chosen, "run_table", None)     # the GPU engine: sort to measures
    if on_device is not None:
        result = on_device(query, table)
        if result is not None:
            return result
    pending = None
    if getattr(chosen, "checks_order_later", False):
        data, pending = frames.sort_for_matching_deferred(table, query.partition_columns,
                                                          query.order_keys)
    else:
        data = frames.sort_for_matching(table, query.partition_columns, query.order_keys)
    if pending is not None:
        return _run_checking_order(query, chosen, table, data, pending)
    slice_rows = getattr(chosen, "stream_rows", lambda q, d: None)(query, data)
    if slice_rows:      # a partition wider than one device run: through it in slices
        from .streaming import run_stream
        n = data.table.num_rows
        pieces = list(run_stream(query, chosen, (data.table.slice(lo, slice_rows)
                                                 for lo in range(0, n, slice_rows))))
        chosen.note_streamed(slice_rows)
        return pa.concat_tables(pieces) if pieces else query.output_schema.empty_table()
    matches = chosen.find_matches(query, data)
    return assemble(query, data, matches)


def _run_checking_order(query, chosen, table: pa.Table, data, pending) -> pa.Table:
    """The query over ``data``, taken as in order, while the pool's threads
    check the order key in their idle gaps (frames.sort_for_matching_deferred,
    kernels/threads.py ``start_background``); the input sorted and the
    query run again if two rows were out of order. An error raised on the
    unchecked input is raised only once the input is known to be in order
    (out of order, the sorted input decides)."""
    from .kernels.threads import start_background
    checking = start_background(pending.run, len(pending))
    try:
        result = assemble(query, data, chosen.find_matches(query, data))
    except Exception:
        if all(checking.finish()):
            raise
    except BaseException:           # an interrupt: no work left behind on the pool
        checking.finish()
        raise
    else:
        if all(checking.finish()):
            return result
    data = frames.sort_for_matching(table, query.partition_columns, query.order_keys)
    return assemble(query, data, chosen.find_matches(query, data))


# Checked clauses by (text, span, schema): a clause run again over inputs of
# the same schema (a loop over files or days, a notebook cell run twice)
# skips parsing and analysis, and the engines' plans, kept per query object
# (engines/cpu.py), are made once. A CheckedQuery is not changed after
# analysis, so one object serves every call.
_CHECKED_MAX = 64
_checked: OrderedDict = OrderedDict()
_checked_lock = threading.Lock()


def checked_clause(text: str, schema: pa.Schema, start: int = 0,
                   end: Optional[int] = None) -> CheckedQuery:
    """``analyze(parse_clause(text, start, end), schema)``, remembered for
    the last ``_CHECKED_MAX`` (text, span, schema) triples. Errors are
    raised afresh each call (nothing is remembered of a clause that fails)."""
    key = (text, start, end, schema.serialize().to_pybytes())   # metadata included
    with _checked_lock:
        hit = _checked.get(key)
        if hit is not None:
            _checked.move_to_end(key)
            return hit
    query = analyze(parse_clause(text, start, end), schema)
    with _checked_lock:
        _checked[key] = query
        if len(_checked) > _CHECKED_MAX:
            _checked.popitem(last=False)
    return query


class CompiledQuery:
    """A parsed and checked clause, ready to explain (and to run)."""

    def __init__(self, text: str, query: CheckedQuery, schema_known: bool):
        self.text = text
        self.query = query
        self.schema_known = schema_known

    def explain(self) -> str:
        from .explain import explain
        return explain(self.query, schema_known=self.schema_known)

    def run(self, table, engine: str = "auto"):
        """Run this clause over ``table`` (pandas or pyarrow)."""
        return match_recognize(table, self.text, engine=engine)

    def __repr__(self) -> str:
        return f"<gpu_mr.CompiledQuery {self.query.clause.pattern.to_sql()!r}>"


def compile(clause: str, schema: Optional[pa.Schema] = None) -> CompiledQuery:
    """Parse and check a clause (or a whole SELECT holding one) without data.

    With no ``schema`` every column name is accepted and typed on use;
    give the input's ``pyarrow.Schema`` (or a table) for full checking.

    >>> import gpu_mr
    >>> plan = gpu_mr.compile("ORDER BY ts MEASURES LAST(B.p) AS low "
    ...                       "PATTERN (A B+) DEFINE B AS p < PREV(p)")
    >>> print(plan.explain().splitlines()[0])
    pattern: A B+
    """
    _check_text(clause, "clause")
    text, start, end = clause, 0, None
    from .outer_sql import extract_clause
    span = extract_clause(clause)
    if span is not None:
        start, end = span
    if schema is not None and not isinstance(schema, pa.Schema):
        # a frame's schema only: its floats need no scan for NaN (pending, dropped)
        schema = frames.to_arrow(schema, set())[0].schema
    elif schema is not None:
        schema = frames.plain_schema(schema)      # views read as the offset layouts
    parsed = parse_clause(text, start, end)
    query = analyze(parsed, schema)
    return CompiledQuery(text[start:end], query, schema_known=schema is not None)


def _check_text(value, what: str) -> None:
    if not isinstance(value, str):
        raise GpuMrError(f"the {what} must be a string of SQL, not {type(value).__name__}",
                         code="bad_argument")
