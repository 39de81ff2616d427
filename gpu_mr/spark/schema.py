"""Types and orderings between Spark, Arrow and gpu_mr, decided before data moves.

What: the Arrow schema a ``mapInArrow`` task receives for a DataFrame
(``input_arrow_schema``); the result's schema, from the analysed clause run
over an empty table of that schema (``output_arrow_schema``); its Spark
StructType (``to_spark_schema``) and the Arrow schema Spark expects back
(``returned_arrow_schema``); and the sort expressions that put rows in the
exact order gpu_mr's stream checks (``sort_columns``).
Why: ``mapInArrow`` needs the output schema up front, and Spark checks
every batch against it; deriving it from the same code that produces the
rows (an empty run) keeps the two from drifting apart.
Order: gpu_mr orders partition keys ascending with NULLs last (a NULL key
is a partition of its own) and each ORDER BY key as written, NULLS LAST
unless NULLS FIRST is written. Spark's defaults differ (ASC puts NULLs
first), so every key's NULL placement is spelled out. Both put NaN above
every number, treat -0.0 as 0.0 and compare strings by UTF-8 bytes.
Cost: schema work only: no job runs.
"""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa

from ..errors import DataError, GpuMrError

#: Name of the input-order column added before the shuffle (see execution.py).
SEQUENCE_COLUMN = "__gpu_mr_seq"


def session_timezone(spark) -> str:
    """The session time zone: Spark sends TimestampType values in it."""
    return spark.conf.get("spark.sql.session.timeZone")


def prefers_large_types(spark) -> bool:
    """Whether Spark exchanges strings and binaries as Arrow large types."""
    value = spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")
    return str(value).lower() == "true"


def input_arrow_schema(spark_schema, timezone: str, large: bool = False) -> pa.Schema:
    """The Arrow schema of the batches ``mapInArrow`` hands a task.

    Parameters
    ----------
    spark_schema : pyspark.sql.types.StructType
    timezone : str
        The session time zone (TimestampType columns arrive tz-aware in it).
    large : bool
        ``spark.sql.execution.arrow.useLargeVarTypes``.

    Raises
    ------
    DataError
        For a column type Spark cannot send as Arrow, naming the column.

    Examples
    --------
    >>> from pyspark.sql.types import StructType, StructField, TimestampType  # doctest: +SKIP
    >>> input_arrow_schema(StructType([StructField("ts", TimestampType())]), "UTC")  # doctest: +SKIP
    ts: timestamp[us, tz=UTC]
    """
    from pyspark.sql.pandas.types import to_arrow_type
    fields = []
    for f in spark_schema.fields:
        try:
            t = to_arrow_type(f.dataType, timezone=timezone, prefers_large_types=large)
        except Exception as exc:     # PySparkTypeError and relatives
            raise DataError(f"column {f.name!r} has type {f.dataType.simpleString()}, which "
                            f"Spark cannot pass to Python as Arrow ({exc})",
                            column=f.name, code="unsupported_type") from None
        fields.append(pa.field(f.name, t, nullable=f.nullable))
    return pa.schema(fields)


def output_arrow_schema(text: str, schema: pa.Schema, start: int = 0, end=None) -> pa.Schema:
    """The result schema of the clause ``text[start:end]`` over ``schema``.

    The clause runs over an empty table of that schema (every query static
    check included; errors carry line and column in ``text``). Every field
    is made nullable: a result column can be NULL even where its input was
    not (a measure over no row, an unmatched row's measures).

    Examples
    --------
    >>> s = pa.schema([("ts", pa.int64()), ("p", pa.float64())])
    >>> output_arrow_schema("ORDER BY ts MEASURES LAST(A.p) AS lp, COUNT(*) AS n "
    ...                     "PATTERN (A+) DEFINE A AS p > 0", s)
    lp: double
    n: int64
    """
    from ..api import run_clause_on_arrow
    empty = schema.empty_table()
    out = run_clause_on_arrow(empty, text, engine="reference", start=start, end=end)
    return pa.schema([f.with_nullable(True) for f in out.schema])


def to_spark_schema(schema: pa.Schema):
    """The Spark StructType of an Arrow result schema.

    Timestamps with a time zone become TimestampType, without one
    TimestampNTZType (values kept as written); decimals keep precision and
    scale; lists become arrays.

    Raises
    ------
    DataError
        For a result column with no Spark type, naming it.

    Examples
    --------
    >>> to_spark_schema(pa.schema([("n", pa.int64())])).simpleString()  # doctest: +SKIP
    'struct<n:bigint>'
    """
    from pyspark.sql.types import StructField, StructType
    from pyspark.sql.pandas.types import from_arrow_type
    fields = []
    for f in schema:
        if pa.types.is_decimal(f.type) and f.type.precision > 38:
            raise DataError(f"result column {f.name!r} is {f.type}: Spark decimals hold at "
                            "most 38 digits", column=f.name, code="unsupported_type")
        try:
            t = from_arrow_type(f.type, prefer_timestamp_ntz=True)
        except Exception as exc:
            raise DataError(f"result column {f.name!r} has type {f.type}, which has no Spark "
                            f"type ({exc})", column=f.name, code="unsupported_type") from None
        fields.append(StructField(f.name, t, nullable=True))
    return StructType(fields)


def returned_arrow_schema(spark_schema, timezone: str, large: bool = False) -> pa.Schema:
    """The Arrow schema Spark expects from ``mapInArrow`` for ``spark_schema``."""
    return input_arrow_schema(spark_schema, timezone, large)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Cast a result piece to the schema promised to Spark.

    Raises
    ------
    DataError
        When a column cannot be cast (a value out of range), naming it.

    Examples
    --------
    >>> conform(pa.table({"n": pa.array([1], pa.int32())}), pa.schema([("n", pa.int64())])).schema
    n: int64
    """
    if table.schema.equals(schema):
        return table
    table = table.rename_columns(schema.names)
    columns = []
    for f, column in zip(schema, table.columns):
        if column.type != f.type:
            try:
                column = column.cast(f.type)
            except pa.ArrowException as exc:
                raise DataError(f"result column {f.name!r}: cannot convert {column.type} to "
                                f"{f.type} for Spark ({exc})", column=f.name,
                                code="result_type") from None
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def quoted(name: str) -> str:
    """A column name as Spark's ``col`` reads it literally (dots, spaces).

    >>> quoted("a.b")
    '`a.b`'
    """
    return "`" + name.replace("`", "``") + "`"


def sort_columns(partition_columns: Sequence[str], order_keys: Sequence[tuple],
                 tiebreak: str | None = None) -> list:
    """Spark sort expressions giving gpu_mr's matching order.

    Parameters
    ----------
    partition_columns : sequence of str
        Sorted ascending, NULLs last.
    order_keys : sequence of (column, ascending, nulls_first)
        As the analysed query holds them.
    tiebreak : str, optional
        A last ascending key (the input-order column) that makes the order
        total.

    Examples
    --------
    >>> [str(c) for c in sort_columns(["sym"], [("ts", False, True)])]  # doctest: +SKIP
    ["Column<'sym ASC NULLS LAST'>", "Column<'ts DESC NULLS FIRST'>"]
    """
    from pyspark.sql import functions as F
    cols = [F.col(quoted(c)).asc_nulls_last() for c in partition_columns]
    for name, ascending, nulls_first in order_keys:
        c = F.col(quoted(name))
        if ascending:
            cols.append(c.asc_nulls_first() if nulls_first else c.asc_nulls_last())
        else:
            cols.append(c.desc_nulls_first() if nulls_first else c.desc_nulls_last())
    if tiebreak is not None:
        cols.append(F.col(quoted(tiebreak)).asc())
    return cols


def check_dataframe(df) -> None:
    """Fail early, listing what was expected, when ``df`` is not a Spark DataFrame."""
    from pyspark.sql import DataFrame
    if not isinstance(df, DataFrame):
        raise GpuMrError(f"gpu_mr.spark.match_recognize takes a pyspark.sql.DataFrame, not "
                         f"{type(df).__module__}.{type(df).__name__}; for pandas or pyarrow "
                         "use gpu_mr.match_recognize", code="bad_argument")
