"""MEASURES and output assembly, written once for every engine.

What: (checked query, sorted input, matches) -> the output Arrow table.
ONE ROW PER MATCH: one row per match (empty matches included), partition
columns then measures, with RUNNING = FINAL evaluated at the last row.
ALL ROWS PER MATCH: one row per matched row that is not inside ``{- -}``,
measures RUNNING by default (evaluated as of that row) and FINAL on request;
an empty match gives one row (the row where it was found) unless OMIT EMPTY
MATCHES; WITH UNMATCHED ROWS adds every row that is in no non-empty match and
starts no empty match, with NULL measures. Rows come out by partition, then
match number, then row; an unmatched row comes where its row falls.
Input columns are gathered with one Arrow ``take``; measures are evaluated
row by row by the interpreter (the fast engines bring vectorised measures).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .analysis import CheckedQuery
from .errors import DataError
from .frames import SortedInput
from .interpreter import INT64_MAX, INT64_MIN, Interpreter, MatchView
from .syntax import ast as A
from .syntax import types as T


def assemble(query: CheckedQuery, data: SortedInput, matches: list,
             interp: Interpreter | None = None) -> pa.Table:
    """Build the output table of ``query`` from ``matches`` (a list of
    :class:`~gpu_mr.engines.base.Match` or a ``MatchArrays``)."""
    if not isinstance(matches, list):
        matches = matches.to_matches()
    if interp is None:
        needed = {n.resolved for m in query.measures for n in m.expr.walk()
                  if isinstance(n, A.ColumnRef)}
        columns = {name: T.arrow_values(data.table.column(name), query.column_types[name])
                   for name in needed}
        interp = Interpreter(query, columns)
    offsets = data.partition_offsets
    source_rows: list[int] = []                       # sorted row feeding each output row
    values: list[list] = [[] for _ in query.measures]

    def emit(row: int, view: MatchView | None) -> None:
        source_rows.append(row)
        for i, m in enumerate(query.measures):
            values[i].append(None if view is None else interp.eval(m.expr, view))

    def part_bounds(p: int) -> tuple[int, int]:
        return int(offsets[p]), int(offsets[p + 1])

    if query.rows_per_match == "ONE":
        for m in matches:
            lo, hi = part_bounds(m.partition)
            view = MatchView(lo, hi, m.start, list(m.labels), None if m.is_empty else m.end,
                             m.end, m.end, m.number)
            emit(m.start, view)
    else:
        show_empty = query.empty_matches != "OMIT"
        unmatched = query.empty_matches == "UNMATCHED"
        by_partition: dict = {}
        for m in matches:
            by_partition.setdefault(m.partition, []).append(m)
        for p in range(len(offsets) - 1):
            lo, hi = part_bounds(p)
            part_matches = by_partition.get(p, [])
            covered = np.zeros(hi - lo, dtype=bool) if unmatched else None
            if unmatched:
                for m in part_matches:
                    covered[m.start - lo:m.end - lo + 1] = True
                    if m.is_empty:
                        covered[m.start - lo] = True
            next_row = lo        # unmatched rows before this have been emitted
            for m in part_matches:
                if unmatched:
                    while next_row < m.start:
                        if not covered[next_row - lo]:
                            emit(next_row, None)
                        next_row += 1
                if m.is_empty:
                    if show_empty:
                        emit(m.start, MatchView(lo, hi, m.start, [], None, m.end, m.end,
                                                m.number))
                else:
                    labels = list(m.labels)
                    for i, row in enumerate(range(m.start, m.end + 1)):
                        if m.excluded[i]:
                            continue
                        emit(row, MatchView(lo, hi, m.start, labels, row, row, m.end, m.number))
                next_row = max(next_row, m.start + 1 if m.is_empty else m.start)
            if unmatched:
                while next_row < hi:
                    if not covered[next_row - lo]:
                        emit(next_row, None)
                    next_row += 1
    return _build_table(query, data, source_rows, values)


def _build_table(query: CheckedQuery, data: SortedInput, source_rows: list,
                 values: list) -> pa.Table:
    """Input columns by one gather from the sorted table, measures from values
    (analysis guarantees measure names never clash with input columns)."""
    take = pa.array(source_rows, pa.int64())
    measures = {m.name: (m, values[i]) for i, m in enumerate(query.measures)}
    arrays = []
    for field in query.output_schema:
        if field.name in measures:
            arrays.append(measure_array(*measures[field.name]))
        else:
            arrays.append(data.table.column(field.name).take(take))
    return pa.Table.from_arrays(arrays, schema=query.output_schema)


def measure_array(m, vals: list) -> pa.Array:
    """A measure's values as an Arrow array of its type (range-checked)."""
    t = m.type
    if t.kind == "BIGINT":
        for v in vals:
            if v is not None and not INT64_MIN <= v <= INT64_MAX:
                raise DataError(f"measure {m.name} overflows BIGINT ({v})", column=m.name,
                                code="overflow")
        vals = [None if v is None else int(v) for v in vals]
    elif t.kind == "DOUBLE":
        vals = [None if v is None else float(v) for v in vals]
    elif t.kind == "DECIMAL":
        from decimal import Decimal
        quantum = Decimal(1).scaleb(-t.scale)
        vals = [None if v is None else Decimal(v).quantize(quantum) for v in vals]
    try:
        return T.to_arrow_array(vals, t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise DataError(f"measure {m.name}: its values do not fit {t.sql_name()} ({exc})",
                        column=m.name, code="bad_measure_value") from None
