"""Input columns on the device, for the GPU engine's on-device pipeline.

What: a ``DeviceInput`` hands the pipeline's stages (the sort in
device_frames.py, the device masks, the device measures) the columns they
read as device arrays, each fetched once however many stages read it:
``column(name)`` gives ``(values, valid)``, values in the column's storage
width (booleans as bool, dates, times, timestamps and durations as their
integer storage) with NULL rows holding 0, and ``valid`` a bool array only
when the column has NULLs (other types: values None, the validity alone);
``key(name)`` the same for a sort key, strings as int32 ranks of their
distinct values; ``take(name, rows)`` an Arrow array of a column at some
input rows (the output's partition columns, O(matches)). Three sources:

- ``from_arrow``: a pyarrow Table on the host; a column moves to the device
  on first use (through pinned staging buffers, transfer.py), and only the
  columns the query reads move.
- ``from_cudf``: a cuDF DataFrame already on the device; numeric columns
  are shared, not copied (``Series.to_cupy(copy=False)``; a column with
  NULLs is filled once). String columns stay in cuDF: as keys they are
  declined (``reason``), and the pipeline then runs on the host path.
- ``from_device_columns``: arrays already on the device (benchmarks).

Why: DESIGN.md §6, data stays on the device from input to output. One
interface for every source keeps the stages free of where the data came from.
Cost: Arrow, per column read: one host pass (NULLs filled, temporals cast)
and one transfer; strings as keys: one dictionary encode and a sort of the
distinct values on the host. cuDF: nothing for columns without NULLs, one
device pass for a column with NULLs.
"""

from __future__ import annotations

import abc
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .backend import span
from .transfer import to_device_staged


def fixed_width(t: pa.DataType) -> bool:
    """Types whose values the device holds as numbers."""
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_time(t)
            or pa.types.is_duration(t))


def ranked(t: pa.DataType) -> bool:
    """Types a key becomes ranks of (from an Arrow source)."""
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t))


def storage_type(t: pa.DataType) -> Optional[pa.DataType]:
    """The integer type a temporal column is stored as (None: not temporal)."""
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return pa.int32()
    if (pa.types.is_date64(t) or pa.types.is_timestamp(t) or pa.types.is_time64(t)
            or pa.types.is_duration(t)):
        return pa.int64()
    return None


class DeviceInput(abc.ABC):
    """The columns of one input on the device (see the module docstring).
    A source says how a column is fetched (``_fetch``) and read back at some
    rows (``take``); a source that orders string keys sets ``ranks_keys``
    and says how (``_fetch_ranks``)."""

    ranks_keys = False          # a string key can be ordered (as ranks)

    def __init__(self, backend, schema: pa.Schema, num_rows: int):
        self.backend = backend
        self.schema = schema
        self.num_rows = num_rows
        self._columns: dict = {}
        self._keys: dict = {}

    def column(self, name: str) -> tuple:
        got = self._columns.get(name)
        if got is None:
            with span(self.backend, "input: columns to the device"):
                got = self._columns[name] = self._fetch(name)
        return got

    def key(self, name: str) -> tuple:
        t = _value_type(self.schema.field(name).type)
        if fixed_width(t):
            return self.column(name)
        if not self.ranks_keys:         # ``reason`` names it first; callers check it
            raise ValueError(f"key column {name} of type {t} cannot be ordered on the device "
                             f"from this source")
        got = self._keys.get(name)
        if got is None:
            got = self._keys[name] = self._fetch_ranks(name)
        return got

    def reason(self, names: Sequence[str], keys: Sequence[str] = ()) -> Optional[str]:
        """None when the columns ``names`` (and the sort keys ``keys``) can go
        on the device, else why not, naming the column."""
        return columns_reason(self.schema, names, keys, self.ranks_keys)

    @abc.abstractmethod
    def _fetch(self, name: str) -> tuple:
        """``column(name)``'s arrays, fetched once."""

    def _fetch_ranks(self, name: str) -> tuple:
        """``key(name)`` of a string column (sources with ``ranks_keys``)."""
        raise ValueError(f"{type(self).__name__} does not rank string keys")

    @abc.abstractmethod
    def take(self, name: str, rows) -> pa.Array:
        """Column ``name`` at input ``rows`` (int64, on the host or the
        device: a source on the device gathers there, so rows found there
        need not cross the bus twice), as Arrow."""

    def _take_on_device(self, name: str, rows) -> pa.Array:
        """``take`` from the column's device arrays: the values at ``rows``
        gathered there and brought back (a column whose Arrow type its
        device storage is, or stores as integers: see :func:`host_values`)."""
        values, valid = self.column(name)
        at = self.backend.to_device(rows)
        mask = None if valid is None else ~np.asarray(self.backend.to_host(valid[at]), bool)
        return pa.array(np.asarray(self.backend.to_host(values[at])),
                        self.schema.field(name).type, mask=mask)


def columns_reason(schema: pa.Schema, names: Sequence[str], keys: Sequence[str] = (),
                   ranks_keys: bool = True) -> Optional[str]:
    """None when the columns ``names`` (and the sort keys ``keys``; strings
    among them when ``ranks_keys``) can go on the device, else why not."""
    for name in names:
        t = _value_type(schema.field(name).type)
        if not fixed_width(t):
            return f"column {name} has type {t}, which the device pipeline does not hold"
    for name in keys:
        t = _value_type(schema.field(name).type)
        if not (fixed_width(t) or (ranked(t) and ranks_keys)):
            return f"key column {name} has type {t}, which the device sort does not order"
    return None


def _value_type(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


# ------------------------------------------------------------ Arrow on the host

class _ArrowInput(DeviceInput):
    ranks_keys = True

    def __init__(self, backend, table: pa.Table):
        super().__init__(backend, table.schema, table.num_rows)
        self.table = table

    def _fetch(self, name: str) -> tuple:
        col = self.table.column(name)
        if not fixed_width(_value_type(col.type)):     # its validity only (COUNT reads it)
            valid = pc.is_valid(col).to_numpy(zero_copy_only=False) if col.null_count else None
            return None, None if valid is None else to_device_staged(self.backend, valid)
        with span(self.backend, "input: host values"):
            values = host_values(col)
        return self._to_device(*values)

    def _fetch_ranks(self, name: str) -> tuple:
        return self._to_device(*host_values(string_ranks(self.table.column(name))))

    def _to_device(self, values: np.ndarray, valid: Optional[np.ndarray]) -> tuple:
        # through pinned staging buffers, overlapped (transfer.py)
        b = self.backend
        return (to_device_staged(b, values),
                None if valid is None else to_device_staged(b, valid))

    def take(self, name: str, rows) -> pa.Array:
        t = self.schema.field(name).type
        if name in self._columns and fixed_width(t) and not pa.types.is_float16(t):
            # on the device already (a partition key the sort read): gathered
            # there, as the rows are, instead of the rows coming to the host
            # for a take over the whole column
            return self._take_on_device(name, rows)
        return self.table.column(name).take(pa.array(self.backend.to_host(rows), pa.int64()))


def from_arrow(backend, table: pa.Table) -> DeviceInput:
    """A pyarrow Table's columns, each moved to the device when first read."""
    return _ArrowInput(backend, table)


def host_values(col: pa.ChunkedArray) -> tuple:
    """``(values, valid or None)`` as host numpy arrays for a fixed-width
    column: NULL rows 0 (False), temporals as their integer storage, float16
    widened to float32, dictionaries decoded."""
    t = col.type
    if pa.types.is_dictionary(t):
        col = col.cast(t.value_type)
        t = t.value_type
    valid = None
    if col.null_count:
        valid = pc.is_valid(col).to_numpy(zero_copy_only=False)
        col = pc.fill_null(col, False if pa.types.is_boolean(t) else 0)
    storage = storage_type(t)
    if storage is not None:
        col = col.cast(storage)
    if pa.types.is_float16(t):
        col = col.cast(pa.float32())
    if not col.num_chunks:
        dtype = (storage or (pa.float32() if pa.types.is_float16(t) else t)).to_pandas_dtype()
        return np.zeros(0, dtype=dtype), valid
    return np.ascontiguousarray(col.to_numpy()), valid


def string_ranks(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """A string (or dictionary) column as int32 ranks of its distinct values
    in Arrow's order (byte order, as the host sort compares), NULLs kept."""
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    encoded = pc.dictionary_encode(col)
    if encoded.num_chunks > 1:
        encoded = encoded.unify_dictionaries()
    if not encoded.num_chunks:
        return pa.chunked_array([], pa.int32())
    dictionary = encoded.chunk(0).dictionary
    rank_of_code = np.empty(len(dictionary), dtype=np.int32)
    rank_of_code[pc.sort_indices(dictionary).to_numpy()] = np.arange(len(dictionary),
                                                                     dtype=np.int32)
    chunks = []
    for chunk in encoded.chunks:
        codes = pc.fill_null(chunk.indices, 0).to_numpy(zero_copy_only=False)
        ranks = rank_of_code[codes] if len(dictionary) else np.zeros(len(codes), np.int32)
        mask = chunk.indices.is_null().to_numpy(zero_copy_only=False) if chunk.null_count else None
        chunks.append(pa.array(ranks, mask=mask))
    return pa.chunked_array(chunks, pa.int32())


# ------------------------------------------------------------ cuDF on the device

class _CudfInput(DeviceInput):
    def __init__(self, backend, df, schema: pa.Schema):
        super().__init__(backend, schema, len(df))
        self.df = df

    def _fetch(self, name: str) -> tuple:
        series = self.df[name]
        t = _value_type(self.schema.field(name).type)
        to_device = self.backend.to_device           # no copy of a device array
        if not fixed_width(t):                       # its validity only (COUNT reads it)
            return None, to_device(series.notna().to_cupy()) if series.null_count else None
        if storage_type(t) is not None:
            # cupy has no datetime64: the same 8 (or 4) bytes as integers
            series = series.astype(storage_type(t).to_pandas_dtype())
        if not series.null_count:
            return to_device(series.to_cupy(copy=False)), None
        fill = False if pa.types.is_boolean(t) else 0
        return to_device(series.to_cupy(na_value=fill)), to_device(series.notna().to_cupy())

    def take(self, name: str, rows) -> pa.Array:
        return self.df[name].take(self.backend.to_device(rows)).to_arrow()


def from_cudf(backend, df) -> DeviceInput:
    """A cuDF DataFrame's columns, shared where they have no NULL. Its
    schema is that of an empty slice converted to Arrow (no data moves)."""
    schema = df.head(0).to_arrow().schema
    if schema.metadata:
        schema = schema.remove_metadata()
    return _CudfInput(backend, df, schema)


# ------------------------------------------------------------ arrays already on the device

class _ArraysInput(DeviceInput):
    def __init__(self, backend, schema: pa.Schema, columns: dict):
        lengths = {int(v.shape[0]) for v, _ in columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"device columns of different lengths: {sorted(lengths)}")
        super().__init__(backend, schema, lengths.pop() if lengths else 0)
        self._columns.update(columns)

    def _fetch(self, name: str) -> tuple:
        raise KeyError(f"no device column {name!r}")

    def take(self, name: str, rows) -> pa.Array:
        return self._take_on_device(name, rows)


def from_device_columns(backend, schema: pa.Schema, columns: dict) -> DeviceInput:
    """Columns already on the device, ``{name: (values, valid or None)}``
    as ``DeviceInput.column`` gives them (NULL rows 0), typed by ``schema``
    (the benchmarks' generated data enters here)."""
    return _ArraysInput(backend, schema, columns)
