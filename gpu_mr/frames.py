"""Frames: tables in and out, and the sort that puts rows in matching order.

What: converts the caller's table (pyarrow Table or RecordBatch, pandas
DataFrame; cuDF is recognised by module name and, until the device path
lands, goes through host memory) to a pyarrow Table and a result
back to the caller's kind, and sorts rows by PARTITION BY then ORDER BY keys,
returning the partition offsets every engine scans by.
Why here: one module knows about data-frame libraries, NULL placement, NaN
ordering and type quirks, so engines only ever see an Arrow table in matching
order plus ``partition_offsets``.
Cost: the sortedness check reads each key column once and stops at the first
key that proves disorder. Numeric, boolean, temporal, string, binary and
dictionary keys of large tables go through one compiled pass per key
(kernels/frames_kernels.py; numba, the ``cpu`` extra) over the chunks' own
buffers (no combined copy), refining a byte per adjacent row pair ("still
tied") and flagging disorder at once; other keys (decimals, string views),
small tables and installs without numba use vectorised Arrow comparisons of
adjacent rows. On sorted input the partition offsets come out of the same
passes (the pairs still tied after the partition keys), no sort and no copy
happen, and ``source_rows`` (an arange) is only built when read. A string
partition key with a numeric order key (no NULLs) takes one fused pass:
about 2.5 numpy passes ``p[1:] < p[:-1]`` on 1e7 rows.
Otherwise one stable multi-key Arrow sort (O(n log n)), one ``take`` of every
column and one more pass over the sorted partition keys. No Python loop runs
per row anywhere.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import DataError
from .kernels.threads import least, run_pieces, split_even

__all__ = ["SortedInput", "to_arrow", "from_arrow", "sort_for_matching"]


# --------------------------------------------------------------------------
# In and out
# --------------------------------------------------------------------------

def _module_of(obj: object) -> str:
    return type(obj).__module__.split(".")[0]


def _is_pandas(obj: object) -> bool:
    if _module_of(obj) != "pandas":
        return False
    import pandas as pd
    return isinstance(obj, pd.DataFrame)


def _is_cudf(obj: object) -> bool:
    # Checked by module name so that cudf is never imported on machines
    # without a GPU.
    return _module_of(obj) == "cudf" and type(obj).__name__ == "DataFrame"


_ACCEPTED = "pyarrow.Table, pyarrow.RecordBatch, pandas.DataFrame or cudf.DataFrame"


def to_arrow(table: object, pending: Optional[set] = None) -> tuple[pa.Table, str]:
    """Convert an input table to a pyarrow Table and name its kind.

    Parameters
    ----------
    table : pyarrow.Table, pyarrow.RecordBatch, pandas.DataFrame or cudf.DataFrame
        The input. A pandas index is dropped (``preserve_index=False``); the
        pandas schema metadata is dropped as well, so results never depend on
        it. Chunked Arrow columns are kept as they are.

    pending : set, optional
        For a pandas DataFrame: its numpy float and time columns are not yet
        scanned for NaN and NaT (NULL), their names added to ``pending``;
        :func:`finish_pending` scans those a query reads and drops the
        others. Why: the scan is a pass over the column (1.3-2 ms for
        1e7 doubles), and a frame of prices, volumes and bars holds many
        such columns that a ONE ROW PER MATCH query never reads.

    Returns
    -------
    (pyarrow.Table, str)
        The table and its kind: ``"arrow"``, ``"pandas"`` or ``"cudf"``; pass
        the kind to :func:`from_arrow` to return a result of the same kind.

    Raises
    ------
    DataError
        For any other type, for duplicate column names, for non-string pandas
        column names, and for pandas columns Arrow cannot convert.

    Examples
    --------
    >>> import pandas as pd
    >>> t, kind = to_arrow(pd.DataFrame({"x": [1, 2]}))
    >>> kind, t.column_names, t.num_rows
    ('pandas', ['x'], 2)
    """
    if isinstance(table, pa.Table):
        out, kind = table, "arrow"
    elif isinstance(table, pa.RecordBatch):
        out, kind = pa.Table.from_batches([table]), "arrow"
    elif _is_pandas(table):
        out, kind = _pandas_to_arrow(table, pending), "pandas"
    elif _is_cudf(table):
        # Host round trip until the device pipeline takes cuDF directly.
        out, kind = table.to_arrow(), "cudf"
    else:
        raise DataError(
            f"unsupported input table type {type(table).__module__}."
            f"{type(table).__qualname__}; expected {_ACCEPTED}",
            code="unsupported_table_type")
    _check_unique_names(out.column_names)
    if out.schema.metadata:
        out = out.replace_schema_metadata(None)
    return plain_views(out), kind


def _plain_type(t: pa.DataType) -> pa.DataType:
    """``t`` with Arrow's view layouts replaced by the offset layouts
    (string_view -> string, binary_view -> binary, list_view -> list), at
    any depth; ``t`` itself when it holds none."""
    if _is(t, "is_string_view"):
        return pa.string()
    if _is(t, "is_binary_view"):
        return pa.binary()
    if _is(t, "is_list_view") or _is(t, "is_large_list_view") or pa.types.is_list(t) \
            or pa.types.is_large_list(t):
        inner = _plain_type(t.value_type)
        large = _is(t, "is_large_list_view") or pa.types.is_large_list(t)
        if inner == t.value_type and not (_is(t, "is_list_view") or _is(t, "is_large_list_view")):
            return t
        return pa.large_list(inner) if large else pa.list_(inner)
    return t


def _is(t: pa.DataType, test: str) -> bool:
    fn = getattr(pa.types, test, None)          # view types came in pyarrow 16
    return bool(fn is not None and fn(t))


def plain_views(table: pa.Table) -> pa.Table:
    """``table`` with columns of Arrow's view layouts (``string_view``,
    ``binary_view``, ``list_view``: what Polars and DuckDB hand out) cast
    to the offset layouts (``string``, or ``large_string`` past 2 GiB of
    text in a chunk; ``binary``; ``list``), the table itself when it has
    none. Why: pyarrow's compute kernels (take, sort, comparisons) do not
    all accept views, and every stage of gpu_mr reads the offset layout;
    results hold the offset types.

    >>> t = pa.table({"s": pa.array(["a", "b"], pa.string_view())})
    >>> plain_views(t).schema.field("s").type
    DataType(string)
    """
    plain = [_plain_type(f.type) for f in table.schema]
    if all(p == f.type for p, f in zip(plain, table.schema)):
        return table
    columns = []
    for col, field, want in zip(table.columns, table.schema, plain):
        if want != field.type:
            chunks = [_plain_array(c, want) for c in col.chunks]
            if len({c.type for c in chunks}) > 1:   # some needed 64-bit offsets: all take them
                chunks = [c.cast(_large(want)) for c in chunks]
            col = pa.chunked_array(chunks, chunks[0].type if chunks else want)
        columns.append(col)
    return pa.Table.from_arrays(columns, names=table.column_names)


def _plain_array(arr: pa.Array, want: pa.DataType) -> pa.Array:
    """One chunk in the plain layout ``want`` (64-bit offsets when 32 do
    not hold it). A list view is rebuilt from its values in order and its
    lengths: pyarrow's cast of one holding NULLs gives an invalid array."""
    if _is(arr.type, "is_list_view") or _is(arr.type, "is_large_list_view"):
        lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
        offsets = np.zeros(len(arr) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = pc.list_flatten(arr)
        values = plain_views(pa.table({"v": values})).column("v").combine_chunks()
        large = pa.types.is_large_list(want) or offsets[-1] > np.iinfo(np.int32).max
        build = pa.LargeListArray if large else pa.ListArray
        return build.from_arrays(pa.array(offsets, pa.int64() if large else pa.int32()),
                                 values, mask=arr.is_null())
    try:
        return arr.cast(want)
    except (pa.ArrowInvalid, pa.ArrowCapacityError):
        # more than 2 GiB of text or bytes in a chunk: 64-bit offsets
        return arr.cast(_large(want))


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` as :func:`plain_views` makes its table's."""
    return pa.schema([f.with_type(_plain_type(f.type)) for f in schema])


def _large(t: pa.DataType) -> pa.DataType:
    if t == pa.string():
        return pa.large_string()
    if t == pa.binary():
        return pa.large_binary()
    if pa.types.is_list(t):
        return pa.large_list(_large(t.value_type))
    return t


def _check_unique_names(names: Sequence[str]) -> None:
    seen: set[str] = set()
    dups = []
    for name in names:
        if name in seen and name not in dups:
            dups.append(name)
        seen.add(name)
    if dups:
        raise DataError(
            f"duplicate column names in input table: {', '.join(map(repr, dups))}; "
            "rename them so that every column name is unique",
            column=dups[0], code="duplicate_column")


def _pandas_to_arrow(df, pending: Optional[set] = None) -> pa.Table:
    names = list(df.columns)
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise DataError(
            "pandas column names must be strings; got "
            + ", ".join(f"{n!r} ({type(n).__name__})" for n in bad[:5])
            + ("" if len(bad) <= 5 else f" and {len(bad) - 5} more")
            + "; rename them, e.g. df.columns = df.columns.map(str)",
            code="bad_column_name")
    _check_unique_names(names)
    try:
        # column by column: what ``from_pandas`` does per column, without its
        # frame-wide work (a sub-frame of the other columns, their index and
        # metadata, a thread pool), 0.7 ms a call
        if not names:           # no columns, but rows: COUNT(*) and the matches count them
            return pa.table({"rows": pa.nulls(len(df))}).drop_columns(["rows"])
        columns = []
        for i in range(len(names)):
            series = df.iloc[:, i]
            arr = _numpy_column(series, scan=pending is None)
            if arr is not None and pending is not None:
                pending.add(names[i])
            columns.append(arr if arr is not None else pa.array(series, from_pandas=True))
        return pa.table(columns, names=names)
    except (pa.ArrowException, ValueError, TypeError) as exc:
        # Find the column at fault (one conversion per column, not per row).
        for i, name in enumerate(names):
            try:
                pa.array(df.iloc[:, i], from_pandas=True)
            except (pa.ArrowException, ValueError, TypeError) as col_exc:
                raise DataError(
                    f"cannot convert pandas column {name!r} (dtype {df.dtypes.iloc[i]}) to "
                    f"Arrow: {col_exc}",
                    column=name, code="unconvertible_column") from None
        raise DataError(f"cannot convert pandas DataFrame to Arrow: {exc}",
                        code="unconvertible_table") from None


_NAT = np.iinfo(np.int64).min          # numpy's NaT, as int64


def _numpy_column(series, scan: bool = True) -> Optional[pa.Array]:
    """A pandas column of numpy floats (32 or 64 bits), datetime64 or
    timedelta64 (s, ms, us, ns) as an Arrow array over the column's own
    values buffer, NaN and NaT as NULL (what ``pa.Table.from_pandas``
    gives; without ``scan`` not yet looked for, see :func:`_scanned`); None
    for every other column. Why: ``from_pandas`` copies such a column and
    scans it for NaN on one thread, 15 ms for 1e7 floats, most of a pandas
    input's conversion."""
    dtype = series.dtype
    if not isinstance(dtype, np.dtype) or not (
            (dtype.kind == "f" and dtype.itemsize in (4, 8))
            or (dtype.kind in "mM" and np.datetime_data(dtype)[0] in ("s", "ms", "us", "ns"))):
        return None
    values = series.to_numpy(copy=False)
    if values.ndim != 1 or values.dtype != dtype:
        return None
    values = np.ascontiguousarray(values)
    arr = pa.Array.from_buffers(pa.from_numpy_dtype(dtype), values.shape[0],
                                [None, pa.py_buffer(values)], null_count=0)
    return _scanned(arr) if scan else arr


def _scanned(arr: pa.Array) -> pa.Array:
    """``arr`` from :func:`_numpy_column` (no NULLs yet) with its NaN or NaT
    as NULL: one ``min`` pass on all cores (NaN, and NaT as int64's minimum,
    propagate to it), a validity bitmap built only when one is found."""
    n = len(arr)
    if not n:
        return arr
    if pa.types.is_floating(arr.type):
        values = np.frombuffer(arr.buffers()[1], np.dtype(arr.type.to_pandas_dtype()), n)
        missing = np.isnan(values) if np.isnan(least(values)) else None
    else:
        ints = np.frombuffer(arr.buffers()[1], np.int64, n)
        missing = ints == _NAT if least(ints) == _NAT else None
    if missing is None:
        return arr
    return pa.Array.from_buffers(arr.type, n, [pa.py_buffer(np.packbits(~missing,
                                                                        bitorder="little")),
                                               arr.buffers()[1]],
                                 null_count=int(np.count_nonzero(missing)))


def finish_pending(table: pa.Table, pending: set, needed) -> pa.Table:
    """``table`` from :func:`to_arrow` with ``pending``: the pending columns
    in ``needed`` scanned for NaN and NaT (NULL) over the buffers already
    made, the other pending columns left out (nothing reads them); every
    other column kept as it is.

    >>> import pandas as pd
    >>> pending = set()
    >>> t, _ = to_arrow(pd.DataFrame({"k": ["a"], "x": [float("nan")], "y": [1.0]}), pending)
    >>> sorted(pending), t.column("x").null_count
    (['x', 'y'], 0)
    >>> done = finish_pending(t, pending, {"k", "x"})
    >>> done.column_names, done.column("x").null_count
    (['k', 'x'], 1)
    """
    names = [n for n in table.column_names if n not in pending or n in needed]
    return pa.table([_scanned(table.column(n).chunk(0)) if n in pending else table.column(n)
                     for n in names], names=names)


# Arrow integer types -> pandas nullable dtype names.
_NULLABLE_INT = {
    pa.int8(): "Int8", pa.int16(): "Int16", pa.int32(): "Int32", pa.int64(): "Int64",
    pa.uint8(): "UInt8", pa.uint16(): "UInt16", pa.uint32(): "UInt32",
    pa.uint64(): "UInt64",
}


def _pandas_column(col: pa.ChunkedArray):
    """Convert one column where pandas' default conversion would change
    values; return None to keep the default."""
    import pandas as pd
    t = col.type
    if col.null_count and t in _NULLABLE_INT:
        return pd.api.types.pandas_dtype(_NULLABLE_INT[t]).__from_arrow__(col)
    if col.null_count and pa.types.is_boolean(t):
        return pd.BooleanDtype().__from_arrow__(col)
    if (pa.types.is_list(t) or pa.types.is_large_list(t)
            or pa.types.is_fixed_size_list(t)
            or (hasattr(pa.types, "is_list_view") and pa.types.is_list_view(t))
            or (hasattr(pa.types, "is_large_list_view")
                and pa.types.is_large_list_view(t))):
        values = np.empty(len(col), dtype=object)
        values[:] = col.to_pylist() if len(col) else []
        return values
    return None


def _arrow_to_pandas(result: pa.Table):
    import pandas as pd
    names = result.column_names
    if len(set(names)) < len(names):
        # to_pandas gives every column of a repeated name the string dtype
        # when one of them is a string (1 became "1"): convert under unique
        # names, then put the real ones back
        df = _arrow_to_pandas(result.rename_columns([str(i) for i in range(len(names))]))
        df.columns = names
        return df
    df = result.to_pandas(ignore_metadata=True)
    for i in range(result.num_columns):
        replaced = _pandas_column(result.column(i))
        if replaced is not None:
            df.isetitem(i, pd.Series(replaced, index=df.index, copy=False))
    return df


def from_arrow(result: pa.Table, kind: str):
    """Convert a result table back to the kind of the input.

    Parameters
    ----------
    result : pyarrow.Table
    kind : str
        ``"arrow"``, ``"pandas"`` or ``"cudf"`` (as returned by :func:`to_arrow`).

    Returns
    -------
    pyarrow.Table, pandas.DataFrame or cudf.DataFrame
        For pandas, values never change: integer and boolean columns holding
        NULLs become the nullable dtypes (``Int64``, ``UInt8``, ...,
        ``boolean``) rather than float or object; the same columns without
        NULLs keep the numpy dtypes (``int64``, ``bool``). Floats use NaN for
        NULL (pandas' own convention). Timestamps keep their unit and time
        zone, strings get pandas' default string dtype, list columns (from
        ARRAY_AGG) hold Python lists, decimals ``decimal.Decimal`` and dates
        ``datetime.date``.

    Examples
    --------
    >>> df = from_arrow(pa.table({"n": pa.array([1, None])}), "pandas")
    >>> str(df["n"].dtype)
    'Int64'
    """
    if kind == "arrow":
        return result
    if kind == "pandas":
        return _arrow_to_pandas(result)
    if kind == "cudf":
        import cudf  # only reached when the input was a cudf.DataFrame
        return cudf.DataFrame.from_arrow(result)
    raise ValueError(f"unknown table kind {kind!r}")  # internal misuse


# --------------------------------------------------------------------------
# Sorting into matching order
# --------------------------------------------------------------------------

class SortedInput:
    """Rows in matching order and where each partition starts.

    Attributes
    ----------
    table : pyarrow.Table
        All columns, rows sorted by partition keys then order keys.
    partition_offsets : numpy.ndarray
        int64, length ``n_partitions + 1``; partition ``p`` holds rows
        ``offsets[p]:offsets[p + 1]``. Starts with 0 and ends with
        ``num_rows``; an empty table gives ``[0]``.
    source_rows : numpy.ndarray
        int64, position in ``table`` -> row index in the input. Passing
        ``None`` to the constructor means ``arange(table.num_rows)``, built on
        first read (sorted input need not pay for it).
    was_sorted : bool
        True when the input was already in order and no sort happened
        (``table`` is then the input, as it was, and ``source_rows`` an
        arange).

    Instances are immutable.
    """

    __slots__ = ("table", "partition_offsets", "_source_rows", "was_sorted")

    def __init__(self, table: pa.Table, partition_offsets: np.ndarray,
                 source_rows: Optional[np.ndarray], was_sorted: bool):
        object.__setattr__(self, "table", table)
        object.__setattr__(self, "partition_offsets", partition_offsets)
        object.__setattr__(self, "_source_rows", source_rows)
        object.__setattr__(self, "was_sorted", was_sorted)

    @property
    def source_rows(self) -> np.ndarray:
        rows = self._source_rows
        if rows is None:
            rows = np.arange(self.table.num_rows, dtype=np.int64)
            object.__setattr__(self, "_source_rows", rows)
        return rows

    def __setattr__(self, name, value):
        raise AttributeError(f"SortedInput is immutable; cannot set {name!r}")

    def __delattr__(self, name):
        raise AttributeError(f"SortedInput is immutable; cannot delete {name!r}")

    def __reduce__(self):          # copy and pickle despite the slots
        return (SortedInput, (self.table, self.partition_offsets, self._source_rows,
                              self.was_sorted))

    def __repr__(self) -> str:
        return (f"SortedInput(num_rows={self.table.num_rows}, "
                f"num_partitions={self.num_partitions}, was_sorted={self.was_sorted})")

    @property
    def num_partitions(self) -> int:
        return len(self.partition_offsets) - 1


def _key_column(table: pa.Table, name: str) -> pa.ChunkedArray:
    """One key column as the table holds it, its type checked."""
    if name not in table.column_names:
        raise DataError(
            f"column {name!r} not found in input table; available columns: "
            + ", ".join(map(repr, table.column_names)),
            column=name, code="unknown_column")
    col = table.column(name)
    t = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
    if not (pa.types.is_integer(t) or pa.types.is_floating(t)
            or pa.types.is_boolean(t) or pa.types.is_string(t)
            or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_temporal(t)
            or pa.types.is_decimal(t) or pa.types.is_null(t)
            or (hasattr(pa.types, "is_string_view") and pa.types.is_string_view(t))):
        raise DataError(
            f"cannot partition or order by column {name!r} of type {t}; keys must "
            "be numbers, booleans, strings, dates, times, timestamps or decimals",
            column=name, code="unsortable_key")
    return col


def _comparable(col, name: str) -> pa.Array:
    """A key column as a single Arrow array Arrow can compare and sort:
    dictionaries decoded, float16 widened, chunks combined."""
    t = col.type
    if pa.types.is_dictionary(t):
        col = col.cast(t.value_type)
        t = t.value_type
    if pa.types.is_float16(t):
        try:
            col = col.cast(pa.float32())
        except pa.ArrowException as exc:
            raise DataError(f"cannot sort by float16 column {name!r}: {exc}",
                            column=name, code="unsortable_key") from None
    if isinstance(col, pa.ChunkedArray):
        # combine_chunks copies even a single chunk
        if col.num_chunks == 1:
            return col.chunk(0)
        return col.combine_chunks() if col.num_chunks else pa.array([], col.type)
    return col


def _key_array(table: pa.Table, name: str) -> pa.Array:
    """One key column as a single, comparable Arrow array."""
    return _comparable(_key_column(table, name), name)


def _has_nan(arr: pa.Array) -> bool:
    return (pa.types.is_floating(arr.type)
            and bool(pc.any(pc.is_nan(arr)).as_py() or False))


def _spec_for_key(arr: pa.Array, ascending: bool, nulls_first: bool
                  ) -> list[tuple[pa.Array, bool]]:
    """Expand one key into (array, ascending) columns with no NULL or NaN
    ambiguity: an is-null helper puts NULLs where asked, an is-NaN helper puts
    NaN above every number; the value column then only decides between
    ordinary values (NULL and NaN rows are already separated)."""
    n = len(arr)
    if n == 0 or arr.null_count == n:
        return []                           # constant key: no effect on order
    spec: list[tuple[pa.Array, bool]] = []
    if arr.null_count:
        spec.append((pc.is_valid(arr) if nulls_first else pc.is_null(arr), True))
    if _has_nan(arr):
        spec.append((pc.fill_null(pc.is_nan(arr), False), ascending))
    spec.append((arr, ascending))
    return spec


def _adjacent_order(arr: pa.Array, ascending: bool) -> tuple[np.ndarray, np.ndarray]:
    """(before, after): row i strictly before / after row i+1 under this key.
    NULL and NaN compare as undecided (helpers decide those rows)."""
    x, y = arr.slice(0, len(arr) - 1), arr.slice(1)
    lt = pc.fill_null(pc.less(x, y), False).to_numpy(zero_copy_only=False)
    gt = pc.fill_null(pc.greater(x, y), False).to_numpy(zero_copy_only=False)
    return (lt, gt) if ascending else (gt, lt)


# ---- compiled passes over the key columns' buffers -------------------------

# Below this many rows the Arrow comparisons are as quick as a kernel call,
# and small queries never wait for a compile.
FAST_MIN_ROWS = 4096
# A key in more chunks than this, averaging fewer rows than CHUNK_MIN_ROWS,
# is combined first: per chunk the passes cost a few kernel calls.
MANY_CHUNKS = 16
CHUNK_MIN_ROWS = 1 << 16


def _kernels():
    """The compiled passes (kernels/frames_kernels.py), None without numba."""
    from .kernels.frames_kernels import compiled
    return compiled()


_INT_DTYPES = {(8, True): np.int8, (16, True): np.int16, (32, True): np.int32,
               (64, True): np.int64, (8, False): np.uint8, (16, False): np.uint16,
               (32, False): np.uint32, (64, False): np.uint64}


def _unpack_bits(buf: pa.Buffer, offset: int, n: int) -> np.ndarray:
    """Bits ``offset:offset + n`` of an Arrow bitmap as 0/1 bytes."""
    start = offset // 8
    bits = np.frombuffer(buf, dtype=np.uint8, count=(offset + n + 7) // 8 - start,
                         offset=start)
    skip = offset - 8 * start
    return np.unpackbits(bits, bitorder="little")[skip:skip + n]


def _numpy_values(arr: pa.Array) -> Optional[np.ndarray]:
    """The key's values as a numpy view (booleans unpacked to uint8), with
    arbitrary values under NULLs; None for keys the kernel does not take
    (strings, decimals, intervals)."""
    t = arr.type
    n = len(arr)
    if pa.types.is_boolean(t):
        return _unpack_bits(arr.buffers()[1], arr.offset, n)
    if pa.types.is_floating(t) and t.bit_width in (32, 64):
        dtype = np.float32 if t.bit_width == 32 else np.float64
    elif pa.types.is_integer(t):
        dtype = _INT_DTYPES[(t.bit_width, pa.types.is_signed_integer(t))]
    elif (pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t)
          or pa.types.is_duration(t)) and t.bit_width in (32, 64):
        dtype = np.int32 if t.bit_width == 32 else np.int64
    else:
        return None
    return np.frombuffer(arr.buffers()[1], dtype=dtype,
                         count=arr.offset + n)[arr.offset:]


def _valid_bytes(arr: pa.Array) -> Optional[np.ndarray]:
    if not arr.null_count:
        return None
    return _unpack_bits(arr.buffers()[0], arr.offset, len(arr))


_STRING_OFFSETS = {pa.string(): np.int32, pa.binary(): np.int32,
                   pa.large_string(): np.int64, pa.large_binary(): np.int64}


class _Piece:
    """One chunk of a key in the kernels' form: ``values`` (numbers) or
    ``offsets`` and ``data`` (strings and binaries, offsets sliced to the
    chunk's rows and indexing ``data``), and ``valid`` (0/1 bytes, None
    without NULLs)."""

    __slots__ = ("values", "offsets", "data", "valid")

    def __init__(self, values=None, offsets=None, data=None, valid=None):
        self.values, self.offsets, self.data, self.valid = values, offsets, data, valid

    def __len__(self) -> int:
        return (len(self.values) if self.values is not None else len(self.offsets) - 1)

    def cut(self, lo: int, hi: int) -> "_Piece":
        """Rows ``lo .. hi-1`` as a piece of their own (views)."""
        valid = None if self.valid is None else self.valid[lo:hi]
        if self.values is not None:
            return _Piece(self.values[lo:hi], valid=valid)
        return _Piece(offsets=self.offsets[lo:hi + 1], data=self.data, valid=valid)

    def seam(self, nxt: "_Piece") -> "_Piece":
        """The two rows across the border between this piece and ``nxt``."""
        valid = None
        if self.valid is not None or nxt.valid is not None:
            valid = np.array([1 if self.valid is None else self.valid[-1],
                              1 if nxt.valid is None else nxt.valid[0]], dtype=np.uint8)
        if self.values is not None:
            return _Piece(np.array([self.values[-1], nxt.values[0]], self.values.dtype),
                          valid=valid)
        a = self.data[self.offsets[-2]:self.offsets[-1]]
        b = nxt.data[nxt.offsets[0]:nxt.offsets[1]]
        return _Piece(offsets=np.array([0, len(a), len(a) + len(b)], np.int64),
                      data=np.concatenate((a, b)), valid=valid)


def _string_piece(arr: pa.Array) -> _Piece:
    n = len(arr)
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=_STRING_OFFSETS[arr.type],
                            count=arr.offset + n + 1)[arr.offset:]
    data = (np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None
            else np.zeros(0, np.uint8))
    return _Piece(offsets=offsets, data=data, valid=_valid_bytes(arr))


def _dictionary_pieces(chunks: list) -> Optional[list]:
    """Dictionary chunks as numbers: each index replaced by the dense rank of
    its value among the values of every chunk's dictionary (so equal values
    get equal numbers whatever their chunk). None where a dictionary holds
    NULLs or floats (NaN and -0.0 would need the rules of the value pass)."""
    value_type = chunks[0].type.value_type
    if not (pa.types.is_integer(value_type) or value_type in _STRING_OFFSETS):
        return None
    dictionaries = [c.dictionary for c in chunks]
    if any(d.null_count for d in dictionaries):
        return None
    ranks = pc.rank(pa.concat_arrays(dictionaries), sort_keys="ascending",
                    tiebreaker="dense").to_numpy()
    pieces, base = [], 0
    for c, d in zip(chunks, dictionaries):
        idx = _numpy_values(c.indices)
        valid = _valid_bytes(c.indices)
        if valid is not None:            # an index under a NULL may be anything
            idx = np.where(valid != 0, idx, 0)
        pieces.append(_Piece(ranks[base + idx.astype(np.int64)], valid=valid))
        base += len(d)
    return pieces


def _pieces(col) -> Optional[list]:
    """The key's non-empty chunks in the kernels' form, or None when a chunk
    has no such form (the Arrow pass takes the key)."""
    chunks = [c for c in (col.chunks if isinstance(col, pa.ChunkedArray) else [col])
              if len(c)]
    if len(chunks) > MANY_CHUNKS and len(col) < CHUNK_MIN_ROWS * len(chunks):
        chunks = [_comparable(col, "")]
    if chunks and pa.types.is_dictionary(chunks[0].type):
        return _dictionary_pieces(chunks)
    pieces = []
    for c in chunks:
        if c.type in _STRING_OFFSETS:
            pieces.append(_string_piece(c))
            continue
        values = _numpy_values(c)
        if values is None:
            return None
        pieces.append(_Piece(values, valid=_valid_bytes(c)))
    return pieces


_NO_VALID = np.ones(1, np.uint8)


def _refine_piece(kernels, piece: _Piece, ascending: bool, nulls_first: bool,
                  undecided: np.ndarray, first: bool) -> bool:
    """One kernel pass over the pairs of ``piece`` (``undecided`` holds one
    byte per pair)."""
    if piece.values is None:
        has_valid = piece.valid is not None
        return kernels[2](piece.offsets, piece.data, piece.valid if has_valid else _NO_VALID,
                          has_valid, undecided, first, not ascending, nulls_first)
    if piece.valid is None:
        return kernels[0](piece.values, undecided, first, not ascending)
    return kernels[1](piece.values, piece.valid, undecided, first, not ascending, nulls_first)


def _refine_fast(kernels, col, ascending: bool, nulls_first: bool,
                 undecided: Optional[np.ndarray], n: int
                 ) -> Optional[tuple[bool, Optional[np.ndarray]]]:
    """The kernels' pass for one key, chunk by chunk (the pair across each
    chunk border on its own): (in order, pairs still tied), or None when the
    key has no kernel form."""
    pieces = _pieces(col)
    if pieces is None:
        return None
    first = undecided is None
    if first:
        undecided = np.empty(n - 1, dtype=np.bool_)
    pos, prev = 0, None
    for piece in pieces:
        k = len(piece)
        if prev is not None and not _refine_piece(kernels, prev.seam(piece), ascending,
                                                  nulls_first, undecided[pos - 1:pos], first):
            return False, None
        if not _refine_piece(kernels, piece, ascending, nulls_first,
                             undecided[pos:pos + k - 1], first):
            return False, None
        pos, prev = pos + k, piece
    return True, undecided


def _refine_arrow(arr: pa.Array, ascending: bool, nulls_first: bool,
                  undecided: Optional[np.ndarray]
                  ) -> tuple[bool, Optional[np.ndarray]]:
    """The same pass with Arrow comparisons over the key's spec columns."""
    for col, asc in _spec_for_key(arr, ascending, nulls_first):
        before, after = _adjacent_order(col, asc)
        if undecided is None:
            if after.any():
                return False, None
            undecided = ~(before | after)
        else:
            if np.any(after & undecided):
                return False, None
            undecided &= ~(before | after)
    return True, undecided


def _offsets_from_ties(kernels, undecided: np.ndarray, n: int) -> np.ndarray:
    if kernels is None:
        return np.concatenate(([0], np.flatnonzero(~undecided) + 1, [n])
                              ).astype(np.int64)
    ties = undecided.view(np.uint8)
    m = len(ties)
    return kernels[3](ties, ties[:m - m % 8].view(np.uint64),
                      m - np.count_nonzero(ties), n)


def _pieces_aligned(a, b) -> tuple:
    """:func:`_pieces` of two keys cut at the same rows: where their Arrow
    chunks differ (a pandas string column converts to chunks of its own,
    the other columns to one), both are cut at every chunk border of
    either, as zero-copy slices."""
    def borders(col):
        return np.cumsum([len(c) for c in col.chunks]).tolist()
    if (isinstance(a, pa.ChunkedArray) and isinstance(b, pa.ChunkedArray)
            and borders(a) != borders(b) and len(a) == len(b)):
        cuts = sorted(set(borders(a)) | set(borders(b)) | {0})
        spans = [(lo, hi) for lo, hi in zip(cuts, cuts[1:]) if hi > lo]
        # many pieces are fine while they are long (pandas' strings read
        # from CSV come in chunks of about 120k rows: 84 for 1e7 rows)
        if len(spans) <= MANY_CHUNKS or len(a) >= CHUNK_MIN_ROWS * len(spans):
            return _cut_pieces(a, spans), _cut_pieces(b, spans)
    return _pieces(a), _pieces(b)


def _cut_pieces(col: pa.ChunkedArray, spans: list) -> Optional[list]:
    """:func:`_pieces` of ``col`` cut at the rows ``spans`` ((lo, hi) pairs
    covering it in order, each within one of its chunks). A column in one
    chunk is cut as views of its one piece (as Arrow slices read back one by
    one, 77 pieces of a pandas frame's order key took 0.6 ms)."""
    lengths = [len(c) for c in col.chunks if len(c)]
    if len(lengths) == 1:
        whole = _pieces(col)
        if whole is None or len(whole) != 1:
            return whole
        return [whole[0].cut(lo, hi) for lo, hi in spans]
    if len(lengths) == len(spans) and all(hi - lo == k for (lo, hi), k in zip(spans, lengths)):
        return _pieces(col)                  # cut at its own borders: its chunks
    return _pieces(pa.chunked_array([c for lo, hi in spans
                                     for c in col.slice(lo, hi - lo).chunks if len(c)],
                                    col.type))


def _fused_pass(kernels, keys: list, n_partition: int, n: int, defer: bool = False
                ) -> Optional[tuple]:
    """The one-pass check of a string partition key and a numeric order key
    without NULLs, chunks aligned (kernels/frames_kernels.py,
    ``string_then_number``): ``(in order, partition offsets, None)``; None
    when the keys are not of that shape (the per-key passes take them).
    ``defer``: the order key is left out of the pass (the pairs across chunk
    borders excepted), its check returned as an :class:`OrderCheck` in
    place of the None."""
    if n_partition != 1 or len(keys) != 2 or keys[0][0].null_count or keys[1][0].null_count:
        return None
    strings, numbers = _pieces_aligned(keys[0][0], keys[1][0])
    if (strings is None or numbers is None or len(strings) != len(numbers)
            or any(s.values is not None or x.values is None or len(s) != len(x)
                   for s, x in zip(strings, numbers))):
        return None
    descending = not keys[1][1]
    first_row = np.concatenate(([0], np.cumsum([len(p) for p in strings]))).tolist()
    chunk_cuts: list = [[] for _ in strings]
    borders_tied = _borders_tied(kernels, strings, numbers, descending)
    if borders_tied is None:
        return False, None, None
    for c in np.flatnonzero(~borders_tied).tolist():
        chunk_cuts[c + 1].append(np.array([first_row[c + 1]], np.int64))
    # the pairs inside the chunks, in pieces of about equal numbers of pairs
    # across chunk borders: one hand-off to the cores for all the chunks
    pairs_before = np.concatenate(([0], np.cumsum([max(len(p) - 1, 0) for p in strings])))

    def piece(g0, g1):
        """Cuts among pairs g0 .. g1-1 (counted over every chunk) as (chunk,
        cuts) in order, None if a pair is out of order."""
        found = []
        c = int(np.searchsorted(pairs_before, g0, side="right")) - 1
        while g0 < g1:
            base = int(pairs_before[c])
            a, b = g0 - base, min(g1, int(pairs_before[c + 1])) - base
            if b > a:
                s, x = strings[c], numbers[c]
                out = np.empty(b - a, np.int64)
                if defer:
                    count = kernels[5](s.offsets[a:b + 2], s.data, x.values[a:b + 1], out)
                else:
                    count = kernels[4](s.offsets[a:b + 2], s.data, x.values[a:b + 1],
                                       descending, out)
                if count < 0:
                    return None
                found.append((c, out[:count] + (a + first_row[c])))
            g0 = base + b
            c += 1
        return found
    got = run_pieces(piece, split_even(int(pairs_before[-1])))
    if any(f is None for f in got):
        return False, None, None
    for found in got:
        for c, cuts in found:
            chunk_cuts[c].append(cuts)
    offsets = np.concatenate([np.zeros(1, np.int64)]
                             + [cut for cuts in chunk_cuts for cut in cuts]
                             + [np.array([n], np.int64)])
    check = OrderCheck(kernels, numbers, first_row, offsets, descending) if defer else None
    return True, offsets, check


def _borders_tied(kernels, strings: list, numbers: list, descending: bool
                  ) -> Optional[np.ndarray]:
    """The pairs across the chunk borders of a string key and a numeric key
    (pieces of equal lengths, no NULLs), checked in two kernel calls: for
    each border whether its two rows tie on the string (the order key then
    checked there), None when a pair is out of order. The rows checked are
    each chunk's first and last, in row order, so that the pairs between
    them are the borders and, in between, a chunk's first row against its
    own last: in order wherever the rows are (a chunk out of order there is
    out of order inside, where its own pass would find it). Why: a pandas
    frame's strings come in chunks of about 130k rows (77 for 1e7), and a
    seam of its own per border (two small copies, up to two kernel calls)
    took 0.3 ms."""
    ends = []
    for c in range(len(strings) - 1):
        last, first = strings[c], strings[c + 1]
        ends += [last.data[last.offsets[-2]:last.offsets[-1]],
                 first.data[first.offsets[0]:first.offsets[1]]]
    if not ends:
        return np.zeros(0, np.bool_)
    offsets = np.concatenate(([0], np.cumsum([len(e) for e in ends]))).astype(np.int64)
    texts = _Piece(offsets=offsets, data=np.concatenate(ends))
    values = np.empty(len(ends), numbers[0].values.dtype)
    values[0::2] = [x.values[-1] for x in numbers[:-1]]
    values[1::2] = [x.values[0] for x in numbers[1:]]
    tied = np.empty(len(ends) - 1, np.bool_)
    if not _refine_piece(kernels, texts, True, False, tied, True):
        return None
    on_string = tied[0::2].copy()         # the next pass narrows ``tied`` to both keys
    if not _refine_piece(kernels, _Piece(values), not descending, False, tied, False):
        return None
    return on_string


class OrderCheck:
    """The order key's check within partitions that
    :func:`sort_for_matching_deferred` leaves for later: ``run(i)`` checks
    the ``i``-th of ``len()`` pieces of about ``ORDER_JOB_ROWS`` rows,
    whether the order key ascends (descends) there except across a
    partition's start; :meth:`in_order` runs the ones not yet run and
    answers for all. Pieces may run in any order, on any thread."""

    def __init__(self, kernels, numbers: list, first_row: list, offsets: np.ndarray,
                 descending: bool):
        self._kernel = kernels[6]
        self._descending = descending
        self._values = [x.values for x in numbers]
        # each chunk's partition starts, from its own first row
        self._cuts = []
        self.jobs = []
        lows = np.asarray(first_row[:len(self._values)], np.int64)
        highs = lows + np.array([len(v) for v in self._values], np.int64)
        begin = np.searchsorted(offsets, lows, side="right").tolist()
        end = np.searchsorted(offsets, highs, side="left").tolist()
        for c, values in enumerate(self._values):
            self._cuts.append(offsets[begin[c]:end[c]] - first_row[c])
            pairs = len(values) - 1
            self.jobs += [(c, a, min(a + ORDER_JOB_ROWS, pairs))
                          for a in range(0, pairs, ORDER_JOB_ROWS)]
        self._done = [None] * len(self.jobs)

    def __len__(self) -> int:
        return len(self.jobs)

    def run(self, i: int) -> bool:
        c, lo, hi = self.jobs[i]
        self._done[i] = got = bool(self._kernel(self._values[c], self._cuts[c], lo, hi,
                                                self._descending))
        return got

    def in_order(self) -> bool:
        return all(self.run(i) if done is None else done for i, done in enumerate(self._done))


# Rows from which sort_for_matching_deferred leaves the order key's check for
# later: below, the check takes less than starting it on another thread.
DEFER_MIN_ROWS = 1_000_000
# Rows of the order key per piece of a deferred check: short, so that a
# thread that takes one in a gap between parallel stages keeps the next
# stage waiting at most about 0.1 ms (8 bytes a row at this VM's 35 GB/s).
ORDER_JOB_ROWS = 1 << 19


def _scan_keys(keys: list, n_partition: int, n: int,
               fast: Optional[bool]) -> tuple[bool, Optional[np.ndarray]]:
    """Lexicographic check of adjacent rows under ``keys`` ((column, ascending,
    nulls_first, name), the first ``n_partition`` of them partition keys; a
    column as the table holds it, chunked, maybe dictionary-encoded); ties
    are in order (the sort is stable, so equal rows keep input order anyway).

    Returns (in order, partition offsets): the offsets are where any partition
    key changes between adjacent rows (NULL equals NULL and NaN equals NaN, as
    in GROUP BY), or None when the rows are out of order."""
    if n < 2:
        return True, np.array([0, n] if n else [0], dtype=np.int64)
    if fast is None:
        fast = n >= FAST_MIN_ROWS
    kernels = _kernels() if fast else None
    if kernels is not None:
        fused = _fused_pass(kernels, keys, n_partition, n)
        if fused is not None:
            return fused[:2]
    undecided: Optional[np.ndarray] = None      # None: every pair tied so far
    offsets = np.array([0, n], dtype=np.int64)
    for i, (col, asc, nf, name) in enumerate(keys):
        if col.null_count == n:
            continue                            # constant key
        step = (_refine_fast(kernels, col, asc, nf, undecided, n)
                if kernels is not None else None)
        if step is None:
            step = _refine_arrow(_comparable(col, name), asc, nf, undecided)
        ok, undecided = step
        if not ok:
            return False, None
        if i < n_partition and undecided is not None:
            # partitions so far; finished after the last partition key
            # (later keys refine ``undecided`` in place: take them now)
            if all(k[0].null_count == n for k in keys[i + 1:n_partition]):
                offsets = _offsets_from_ties(kernels, undecided, n)
    return True, offsets


def sort_for_matching(table: pa.Table,
                      partition_columns: Sequence[str],
                      order_keys: Sequence[tuple[str, bool, bool]]) -> SortedInput:
    """Put rows in matching order and find the partitions.

    Rows are sorted by the partition columns (ascending, NULLs last; rows whose
    partition key is NULL form a partition of their own, NULL equalling NULL
    as in GROUP BY) and then by the order keys. The sort is **stable**: rows
    that tie on every key keep their input order (Arrow documents
    ``sort_indices`` as stable; the tests check it), which is the documented
    tiebreak for ORDER BY ties.

    Ordering rules per key: ``ascending`` picks ASC/DESC; ``nulls_first``
    places NULLs before or after every other value, independently for each
    key. Floating-point NaN is treated as greater than every number (as in
    Trino and PostgreSQL): after all numbers in ASC, before them in DESC,
    and always on the non-NULL side of the NULL placement (so ``ASC NULLS
    LAST`` gives numbers, NaN, NULL). ``-0.0`` equals ``0.0``. Strings compare
    by UTF-8 bytes (code point order); dictionary-encoded keys by their
    values.

    Parameters
    ----------
    table : pyarrow.Table
    partition_columns : sequence of str
    order_keys : sequence of (column, ascending, nulls_first)

    Returns
    -------
    SortedInput
        When the input is already in order (checked with one pass over each
        key, comparing adjacent rows), ``was_sorted`` is True, the table is
        returned as it is (its chunks as they were) and
        ``source_rows`` is ``arange(num_rows)``.

    Raises
    ------
    DataError
        For an unknown column (the analyzer normally catches these first) or
        a column type that cannot be ordered (lists, structs, ...).

    Examples
    --------
    >>> t = pa.table({"k": ["b", "a", "b"], "ts": [2, 1, 1]})
    >>> s = sort_for_matching(t, ["k"], [("ts", True, False)])
    >>> s.table.column("ts").to_pylist(), s.partition_offsets.tolist()
    ([1, 1, 2], [0, 1, 3])
    >>> s.source_rows.tolist(), s.was_sorted
    ([1, 2, 0], False)
    """
    return _sort_for_matching(table, partition_columns, order_keys, None)


def sort_for_matching_deferred(table: pa.Table, partition_columns: Sequence[str],
                               order_keys: Sequence[tuple[str, bool, bool]]) -> tuple:
    """:func:`sort_for_matching` with the order key's check within
    partitions left for later where it can be: ``(SortedInput,
    OrderCheck or None)``. With an :class:`OrderCheck` the input is taken as
    in order (``was_sorted``, the partition offsets found from the
    partition key, itself checked) until the check answers: when it finds
    two rows out of order, whatever was computed from the input is wrong,
    and the caller sorts (:func:`sort_for_matching`) and computes again.
    None: checked and sorted as :func:`sort_for_matching` does. Deferred
    for one string partition key and one numeric order key without NULLs
    (the usual ``PARTITION BY symbol ORDER BY ts``) from ``DEFER_MIN_ROWS``
    rows, with numba.
    Why: the order key's check is a pass bound by memory bandwidth that no
    later stage needs; run in the gaps where one thread works alone
    (kernels/threads.py ``start_background``), it costs almost nothing,
    where in the one pass with the partition key it cost 1.7 of 3.5 ms
    (1e7 rows, 100 partitions, two threads).

    >>> t = pa.table({"k": ["a", "a", "b"], "ts": [2, 1, 1]})
    >>> data, check = sort_for_matching_deferred(t, ["k"], [("ts", True, False)])
    >>> check is None           # below DEFER_MIN_ROWS: checked (and sorted) now
    True
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    n = table.num_rows
    kernels = _kernels() if n >= DEFER_MIN_ROWS else None
    if kernels is not None and len(partition_columns) == 1 and len(order_keys) == 1:
        name, asc, nf = order_keys[0]
        keys = [(_key_column(table, partition_columns[0]), True, False, partition_columns[0]),
                (_key_column(table, name), bool(asc), bool(nf), name)]
        try:
            fused = _fused_pass(kernels, keys, 1, n, defer=True)
        except pa.ArrowNotImplementedError:
            fused = None            # sort_for_matching below raises its DataError
        if fused is not None and fused[0]:
            return SortedInput(table, fused[1], None, True), fused[2]
    return sort_for_matching(table, partition_columns, order_keys), None


def _sort_for_matching(table, partition_columns, order_keys,
                       fast: Optional[bool]) -> SortedInput:
    """:func:`sort_for_matching`; ``fast`` forces the compiled passes on
    (where numba is installed) or off, None picks by table size."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    n = table.num_rows
    part_cols = [(_key_column(table, name), True, False, name) for name in partition_columns]
    order_cols = [(_key_column(table, name), bool(asc), bool(nf), name)
                  for name, asc, nf in order_keys]
    keys = part_cols + order_cols

    try:
        in_order, offsets = _scan_keys(keys, len(part_cols), n, fast)
    except pa.ArrowNotImplementedError as exc:
        raise DataError(f"cannot compare key values: {exc}",
                        code="unsortable_key") from None
    if in_order:
        return SortedInput(table, offsets, None, True)

    spec: list[tuple[pa.Array, bool]] = []
    for col, asc, nf, name in keys:
        spec += _spec_for_key(_comparable(col, name), asc, nf)
    key_table = pa.table({f"k{i}": arr for i, (arr, _) in enumerate(spec)})
    sort_keys = [(f"k{i}", "ascending" if asc else "descending")
                 for i, (_, asc) in enumerate(spec)]
    try:
        indices = pc.sort_indices(key_table, sort_keys=sort_keys)
    except pa.ArrowNotImplementedError as exc:
        raise DataError(f"cannot sort by the given keys: {exc}",
                        code="unsortable_key") from None
    source_rows = indices.to_numpy().astype(np.int64, copy=False)
    sorted_table = table.take(indices)
    sorted_parts = [(sorted_table.column(name), True, False, name)
                    for _, _, _, name in part_cols]
    _, offsets = _scan_keys(sorted_parts, len(sorted_parts), n, fast)
    return SortedInput(sorted_table, offsets, source_rows, False)
