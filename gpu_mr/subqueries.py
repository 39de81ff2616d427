"""Uncorrelated subqueries inside the clause, evaluated once as constants.

What: ``(SELECT ...)``, ``EXISTS (SELECT ...)`` and ``x IN (SELECT ...)`` in
MEASURES or DEFINE may not refer to the input rows or to pattern variables
(Trino's rule), so their value is the same for every row: analysis runs each
one once, in an in-process DuckDB, and puts literals in its place.
Why DuckDB: it is already the engine for the SQL around the clause.
"""

from __future__ import annotations

import pyarrow as pa

from .errors import AnalysisError
from .syntax import ast as A
from .syntax import types as T

_LITERAL_KIND = {"BIGINT": "bigint", "DOUBLE": "double", "VARCHAR": "varchar",
                 "BOOLEAN": "boolean", "DATE": "date", "TIMESTAMP": "timestamp",
                 "DECIMAL": "decimal", "INTERVAL": "interval", "UNKNOWN": "null"}


def _run(sub: A.Subquery) -> pa.Table:
    import duckdb
    try:
        con = duckdb.connect()
        try:
            return con.sql(sub.sql).to_arrow_table()
        finally:
            con.close()
    except duckdb.Error as exc:
        message = str(exc).splitlines()[0]
        raise AnalysisError(f"the subquery ({sub.sql}) failed: {message}; subqueries inside "
                            f"MATCH_RECOGNIZE must be constant (they cannot refer to the input "
                            f"table or to pattern variables)", code="bad_subquery",
                            line=sub.pos.line or None, column=sub.pos.column or None) from None


def constant_values(sub: A.Subquery) -> list:
    """The subquery's value(s) as typed literals: one for SCALAR and EXISTS,
    one per row for IN."""
    table = _run(sub)
    if sub.kind == "EXISTS":
        return [A.Literal(pos=sub.pos, value=table.num_rows > 0, literal_type="boolean",
                          type=T.BOOLEAN)]
    if table.num_columns != 1:
        raise AnalysisError(f"the subquery ({sub.sql}) returns {table.num_columns} columns; it "
                            f"must return one", code="bad_subquery",
                            line=sub.pos.line or None, column=sub.pos.column or None)
    column = table.column(0)
    sql_type = T.from_arrow_type(column.type)
    if sql_type is None:
        raise AnalysisError(f"the subquery ({sub.sql}) returns {column.type}, which gpu_mr "
                            f"cannot use", code="bad_subquery",
                            line=sub.pos.line or None, column=sub.pos.column or None)
    values = T.arrow_values(column, sql_type)
    if sub.kind == "SCALAR":
        if len(values) > 1:
            raise AnalysisError(f"the scalar subquery ({sub.sql}) returns {len(values)} rows; "
                                f"it must return at most one", code="bad_subquery",
                                line=sub.pos.line or None, column=sub.pos.column or None)
        values = values or [None]
    return [A.Literal(pos=sub.pos, value=v, literal_type=_LITERAL_KIND.get(sql_type.kind, "null")
                      if v is not None else "null", type=sql_type) for v in values]
