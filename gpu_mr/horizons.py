"""Per-row horizons of a time limit (WITHIN / INTERVAL) for the DFA scan.

What: a search starting at row s may consume row q only while
``clock[q] < clock[s] + limit`` (engines/reference.py: ``time_limit_deadline``,
``in_time``), the clock being the first ORDER BY key. The clock ascends
within a partition, its NULLs at one end, so those rows are exactly
``[s, horizon[s])``: ``horizon[s]`` is the first row at or after s whose
clock is NULL or past the limit, or the partition's end (s itself when
s's clock is NULL: then no row joins). ``row_horizons`` gives that array;
kernels/scan.py's anchored scan stops each search there.
How: exact integer arithmetic on the clock's storage (TIMESTAMP: its unit;
DATE: days), no float: the last clock value still in time is
``start + (limit - 1) // unit`` for a day-time limit, and for a month limit
the reference's ``_add_months`` (calendar months, the day clamped to the
month's end, the time of day kept), vectorised with numpy's datetime64;
values past int64 saturate, which is exact (no stored value lies beyond).
Then one two-pointer sweep per partition (a small numba kernel): the last
value in time never decreases along a partition, so neither does the horizon.
Why here: the horizon is data, computed once per batch on the host; the
scan kernels only read it.
Cost: a few numpy passes and one sweep over the rows, O(rows).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .syntax import types as T

DAY_NS = 86400 * 10**9
INT64_MAX = np.iinfo(np.int64).max
# A month limit past this spans more than any int64 clock can (TIMESTAMP in
# seconds covers about 2.9e11 years): every later row is in time.
_MAX_MONTHS = 12 * 10**12


def clock_storage(column) -> tuple:
    """(int64 values, bool validity, nanoseconds per unit) of a clock
    column: TIMESTAMP in its own unit, DATE in days, an all-NULL column as
    zeros that are never valid."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    n = len(column)
    t = column.type
    if pa.types.is_null(t):
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), 1
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    # the storage integers, as Arrow casts allow (date32 -> int32 only)
    storage = pa.int32() if pa.types.is_date32(t) else pa.int64()
    raw = column.cast(storage).fill_null(0).to_numpy(zero_copy_only=False)
    raw = raw.astype(np.int64, copy=False)
    if pa.types.is_timestamp(t):
        return raw, valid, T.NS_PER[t.unit]
    if pa.types.is_date64(t):            # milliseconds; the reference reads the date
        return np.floor_divide(raw, 86400 * 1000), valid, DAY_NS
    return raw, valid, DAY_NS            # date32: days


def add_months_days(days: np.ndarray, months: int) -> np.ndarray:
    """Days since the epoch plus ``months`` calendar months, the day of the
    month clamped to the target month's last day (interpreter.py's
    ``_add_months_date``), for an int64 array."""
    d = days.astype("datetime64[D]")
    month = d.astype("datetime64[M]")
    day_of_month = days - month.astype("datetime64[D]").astype(np.int64)    # from 0
    target = month + np.timedelta64(months, "M")
    first = target.astype("datetime64[D]").astype(np.int64)
    length = (target + np.timedelta64(1, "M")).astype("datetime64[D]").astype(np.int64) - first
    return first + np.minimum(day_of_month, length - 1)


def last_in_time(values: np.ndarray, unit_ns: int, interval) -> np.ndarray:
    """Per start value (int64 storage, ``unit_ns`` nanoseconds each), the
    largest clock value a row may hold to join its match, saturated at
    int64's maximum. ``interval``: the limit's literal (ns, or months for
    ``interval_ym``)."""
    if interval.literal_type == "interval_ym":
        months = int(interval.value)
        if months > _MAX_MONTHS:
            return np.full(values.shape, INT64_MAX, dtype=np.int64)
        per_day = DAY_NS // unit_ns          # the units are divisors of a day
        days, rem = np.divmod(values, per_day)
        new_days = add_months_days(days, months)
        # deadline = new_days * per_day + rem, in time below it; past int64
        # no stored value reaches it
        over = new_days > (INT64_MAX - rem) // per_day
        deadline = np.where(over, 0, new_days) * per_day + rem
        return np.where(over, INT64_MAX, deadline - 1)
    # clock[q] * u < clock[s] * u + limit  <=>  clock[q] - clock[s] <= (limit - 1) // u
    k = (int(interval.value) - 1) // unit_ns
    if k >= INT64_MAX:
        return np.full(values.shape, INT64_MAX, dtype=np.int64)
    return np.minimum(values, INT64_MAX - k) + k


def sweep_horizons(values, valid, last, offsets, out):
    """``out[s]``: the first row q >= s of s's partition whose clock is
    NULL or above ``last[s]`` (the partition's end if none); s itself when
    s's clock is NULL. One pointer per partition: ``last`` never decreases
    along the valid rows of a partition, whose values ascend."""
    for p in range(offsets.shape[0] - 1):
        hi = offsets[p + 1]
        q = offsets[p]
        for s in range(offsets[p], hi):
            if not valid[s]:
                out[s] = s
                continue
            if q < s:
                q = s
            while q < hi and valid[q] and values[q] <= last[s]:
                q += 1
            out[s] = q


_sweep = None


def horizons_of(values: np.ndarray, valid: np.ndarray, last: np.ndarray,
                offsets: np.ndarray, compiled: bool = True) -> np.ndarray:
    """:func:`sweep_horizons` as an int64 array (compiled by numba unless
    ``compiled`` is false)."""
    global _sweep
    out = np.empty(values.shape[0], dtype=np.int64)
    fn = sweep_horizons
    if compiled:
        if _sweep is None:
            import numba
            _sweep = numba.njit(nogil=True, cache=True)(sweep_horizons)
        fn = _sweep
    fn(values, valid.view(np.uint8), last, np.asarray(offsets, dtype=np.int64), out)
    return out


def row_horizons(query, data, compiled: bool = True) -> np.ndarray:
    """The horizon of every row of ``data`` (a ``frames.SortedInput``) under
    ``query``'s time limit, as absolute row numbers (int64).

    Examples
    --------
    >>> import pyarrow as pa
    >>> from gpu_mr.analysis import analyze
    >>> from gpu_mr.frames import sort_for_matching
    >>> from gpu_mr.syntax import parse_clause
    >>> t = pa.table({"ts": pa.array([0, 1, 2, 5, None], pa.timestamp("s"))})
    >>> q = analyze(parse_clause("ORDER BY ts MEASURES COUNT(*) AS n "
    ...                          "PATTERN (A+) WITHIN INTERVAL '2' SECOND"), t.schema)
    >>> row_horizons(q, sort_for_matching(t, q.partition_columns, q.order_keys)).tolist()
    [2, 3, 3, 4, 4]
    """
    values, valid, unit_ns = clock_storage(data.table.column(query.time_column))
    last = last_in_time(values, unit_ns, query.time_limit.interval)
    return horizons_of(values, valid, last, data.partition_offsets, compiled)


def device_row_horizons(backend, query, values, valid, t: pa.DataType, offsets):
    """:func:`row_horizons` for a clock already on the device and sorted
    there: ``values`` as ``device_input.DeviceInput.column`` holds them
    (TIMESTAMP in its unit, DATE32 days, DATE64 milliseconds; NULL rows 0),
    ``valid`` (device bool, or None: no NULL), its Arrow type ``t``, the
    partition ``offsets`` (host). None for a month limit (calendar arithmetic
    stays on the host: the caller takes the host path)."""
    interval = query.time_limit.interval
    if interval.literal_type == "interval_ym":
        return None
    from .kernels.gpu_horizons import run_horizons
    xp = backend.xp
    values = values.astype(np.int64)
    if pa.types.is_timestamp(t):
        unit_ns = T.NS_PER[t.unit]
    else:
        unit_ns = DAY_NS
        if pa.types.is_date64(t):             # milliseconds; the reference reads the date
            values = xp.floor_divide(values, 86400 * 1000)
    if valid is None:
        valid = xp.ones(values.shape[0], dtype=bool)
    k = (int(interval.value) - 1) // unit_ns
    last = (xp.full(values.shape[0], INT64_MAX, dtype=np.int64) if k >= INT64_MAX
            else xp.minimum(values, INT64_MAX - k) + k)
    return run_horizons(backend, values, valid, last, offsets)
