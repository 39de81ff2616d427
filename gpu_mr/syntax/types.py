"""SQL types of gpu_mr expressions, their Arrow counterparts and value forms.

Values inside the reference engine are plain Python objects:
BIGINT int, DOUBLE float, DECIMAL decimal.Decimal, VARCHAR str,
BOOLEAN bool, DATE datetime.date, TIMESTAMP int nanoseconds since the epoch
(exact for every Arrow unit, no 2262 overflow since Python ints are
unbounded), INTERVAL (day to second) int nanoseconds, INTERVAL (year to
month) int months, ARRAY list. NULL is None.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Optional

import pyarrow as pa

NS_PER = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
EPOCH_DATE = _dt.date(1970, 1, 1)
EPOCH = _dt.datetime(1970, 1, 1)


@dataclass(frozen=True)
class SqlType:
    kind: str                       # BIGINT DOUBLE DECIMAL VARCHAR BOOLEAN DATE TIMESTAMP
                                    # INTERVAL INTERVAL_YM ARRAY UNKNOWN
    precision: int = 0              # DECIMAL
    scale: int = 0                  # DECIMAL
    unit: str = "us"                # TIMESTAMP
    tz: Optional[str] = None        # TIMESTAMP
    element: Optional["SqlType"] = None   # ARRAY

    def sql_name(self) -> str:
        if self.kind == "DECIMAL":
            return f"DECIMAL({self.precision}, {self.scale})"
        if self.kind == "ARRAY":
            return f"ARRAY({self.element.sql_name()})"
        if self.kind == "INTERVAL":
            return "INTERVAL DAY TO SECOND"
        if self.kind == "INTERVAL_YM":
            return "INTERVAL YEAR TO MONTH"
        if self.kind == "UNKNOWN":
            return "NULL"
        return self.kind

    __str__ = sql_name

    @property
    def is_numeric(self) -> bool:
        return self.kind in ("BIGINT", "DOUBLE", "DECIMAL", "UNKNOWN")

    @property
    def is_temporal(self) -> bool:
        return self.kind in ("DATE", "TIMESTAMP")

    def arrow(self) -> pa.DataType:
        return to_arrow_type(self)


BIGINT = SqlType("BIGINT")
DOUBLE = SqlType("DOUBLE")
VARCHAR = SqlType("VARCHAR")
BOOLEAN = SqlType("BOOLEAN")
DATE = SqlType("DATE")
TIMESTAMP = SqlType("TIMESTAMP")
INTERVAL = SqlType("INTERVAL")
INTERVAL_YM = SqlType("INTERVAL_YM")
UNKNOWN = SqlType("UNKNOWN")       # the type of a bare NULL


def decimal_type(precision: int, scale: int) -> SqlType:
    return SqlType("DECIMAL", precision=precision, scale=scale)


def array_of(element: SqlType) -> SqlType:
    return SqlType("ARRAY", element=element)


def from_arrow_type(t: pa.DataType) -> Optional[SqlType]:
    """The SQL type of an input column, or None if gpu_mr cannot use it."""
    if pa.types.is_dictionary(t):
        return from_arrow_type(t.value_type)
    if pa.types.is_integer(t):
        return BIGINT
    if pa.types.is_floating(t):
        return DOUBLE
    if pa.types.is_boolean(t):
        return BOOLEAN
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return VARCHAR
    if pa.types.is_decimal(t):
        # DECIMAL holds 38 digits (decimal128); a wider decimal256 is not usable
        return decimal_type(t.precision, t.scale) if t.precision <= 38 else None
    if pa.types.is_date(t):
        return DATE
    if pa.types.is_timestamp(t):
        return SqlType("TIMESTAMP", unit=t.unit, tz=t.tz)
    if pa.types.is_duration(t):
        return INTERVAL
    if pa.types.is_null(t):
        return UNKNOWN
    return None


def to_arrow_type(t: SqlType) -> pa.DataType:
    k = t.kind
    if k == "BIGINT":
        return pa.int64()
    if k == "DOUBLE":
        return pa.float64()
    if k == "DECIMAL":
        return pa.decimal128(t.precision, t.scale)
    if k == "VARCHAR":
        return pa.string()
    if k == "BOOLEAN":
        return pa.bool_()
    if k == "DATE":
        return pa.date32()
    if k == "TIMESTAMP":
        return pa.timestamp(t.unit, t.tz)
    if k == "INTERVAL":
        return pa.duration("ns")
    if k == "INTERVAL_YM":
        return pa.int64()                 # months; Arrow has no plain month interval type that pandas reads
    if k == "ARRAY":
        return pa.list_(to_arrow_type(t.element))
    return pa.null()


# ------------------------------------------------------------ value helpers

def arrow_values(column: pa.ChunkedArray | pa.Array, t: SqlType) -> list:
    """An Arrow column as a list of reference-engine values."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if t.kind == "TIMESTAMP":
        factor = NS_PER[column.type.unit]
        raw = column.cast(pa.int64()).to_pylist()
        return [None if v is None else v * factor for v in raw]
    if t.kind == "INTERVAL":
        factor = NS_PER[column.type.unit]
        raw = column.cast(pa.int64()).to_pylist()
        return [None if v is None else v * factor for v in raw]
    if t.kind == "DOUBLE":
        return [None if v is None else float(v) for v in column.to_pylist()]
    if t.kind == "UNKNOWN":
        return [None] * len(column)
    return column.to_pylist()


def to_arrow_array(values: list, t: SqlType) -> pa.Array:
    """Reference-engine values back to an Arrow array of ``t``."""
    at = to_arrow_type(t)
    if t.kind == "TIMESTAMP":
        factor = NS_PER[t.unit]
        return pa.array([None if v is None else v // factor for v in values],
                        pa.int64()).cast(at)
    if t.kind == "INTERVAL":
        return pa.array(values, pa.int64()).cast(at)
    return pa.array(values, at)


def timestamp_from_text(text: str) -> Optional[int]:
    """'2024-01-02 09:30:00[.ffffff]' -> ns since epoch, or None if malformed."""
    text = text.strip()
    for fmt in ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S.%f",
                "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"):
        try:
            dt = _dt.datetime.strptime(text, fmt)
        except ValueError:
            continue
        delta = dt - EPOCH
        return (delta.days * 86400 + delta.seconds) * 10**9 + delta.microseconds * 1000
    return None


def timestamp_to_text(ns: int) -> str:
    seconds, rem = divmod(ns, 10**9)
    dt = EPOCH + _dt.timedelta(seconds=seconds, microseconds=rem // 1000)
    text = dt.strftime("%Y-%m-%d %H:%M:%S")
    if rem:
        text += f".{rem:09d}".rstrip("0")
    return text


def date_from_text(text: str) -> Optional[_dt.date]:
    try:
        return _dt.date.fromisoformat(text.strip())
    except ValueError:
        return None


INTERVAL_UNITS_NS = {"DAY": 86400 * 10**9, "HOUR": 3600 * 10**9, "MINUTE": 60 * 10**9,
                     "SECOND": 10**9}


def literal_sql(value, literal_type: str) -> str:
    if value is None:
        return "NULL"
    if literal_type == "varchar":
        return "'" + value.replace("'", "''") + "'"
    if literal_type == "boolean":
        return "TRUE" if value else "FALSE"
    if literal_type == "date":
        return f"DATE '{value.isoformat()}'"
    if literal_type == "timestamp":
        return f"TIMESTAMP '{timestamp_to_text(value)}'"
    if literal_type == "interval":
        return f"INTERVAL '{Decimal(value) / 10**9}' SECOND"
    if literal_type == "interval_ym":
        return f"INTERVAL '{value}' MONTH"
    if literal_type == "double":
        return repr(value)
    return str(value)
