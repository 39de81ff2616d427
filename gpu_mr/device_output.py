"""A query's output that stays on the device, and the cuDF frame made from it.

What: ``DeviceOutput`` is a ONE ROW PER MATCH result whose every column is
on the device (``DeviceColumn``: values in their storage dtype, validity or
None, Arrow type), as ``GpuEngine.run_input(..., on_device=True)`` gives
it. ``to_cudf`` builds a cuDF DataFrame from the device arrays without
passing through the host; ``to_arrow`` brings the columns to the host (the
fallback for types the cuDF build does not take, and the tests).

Why: DESIGN.md §6, data stays on the device from input to output. Before,
a cuDF input's result came to the host as Arrow and went back to the device
through ``cudf.DataFrame.from_arrow``: at 1e9 rows of V-shape ticks the
copy to the host alone was 6.1 GB and 385 ms of a 529 ms run on an H200
(2026-11-28, docs/benchmarks.md).

Cost: none beyond the cuDF columns' own construction (a device copy at
most); a column with NULLs takes one masked ``where`` on the device.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa

from .device_measures import DeviceColumn, _arrow_array


def _cudf_dtype(t: pa.DataType) -> Optional[str]:
    """The cuDF dtype of a column of Arrow type ``t`` built from its device
    storage, None where the build does not take it (the Arrow route does)."""
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return None if pa.types.is_float16(t) else str(np.dtype(t.to_pandas_dtype()))
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_timestamp(t) and t.tz is None:
        return f"datetime64[{t.unit}]"
    if pa.types.is_duration(t):
        return f"timedelta64[{t.unit}]"
    return None


class DeviceOutput:
    """``num_rows`` output rows of ``schema``, each column a ``DeviceColumn``
    in ``columns`` (by name)."""

    def __init__(self, schema: pa.Schema, columns: dict, num_rows: int):
        missing = [f.name for f in schema if f.name not in columns]
        if missing:
            raise ValueError(f"no device column for output column {missing[0]}")
        self.schema = schema
        self.columns = columns
        self.num_rows = num_rows

    def cudf_reason(self) -> Optional[str]:
        """None when :meth:`to_cudf` builds every column from the device
        arrays, else the first column it does not (by name and type)."""
        for f in self.schema:
            if _cudf_dtype(f.type) is None:
                return f"output column {f.name} has type {f.type}"
        return None

    def to_arrow(self, backend) -> pa.Table:
        """The output as a host pyarrow Table."""
        arrays = []
        for f in self.schema:
            col = self.columns[f.name]
            ok = None if col.valid is None else np.asarray(backend.to_host(col.valid), bool)
            arrays.append(_arrow_array(np.asarray(backend.to_host(col.values)), ok, f.type))
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def to_cudf(self):
        """The output as a cuDF DataFrame built on the device (requires
        :meth:`cudf_reason` to be None)."""
        import cudf
        reason = self.cudf_reason()
        if reason is not None:
            raise ValueError(f"cannot build a cuDF frame on the device: {reason}")
        data = {}
        for f in self.schema:
            data[f.name] = _cudf_series(cudf, self.columns[f.name], _cudf_dtype(f.type))
        return cudf.DataFrame(data)


def _cudf_series(cudf, col: DeviceColumn, dtype: str):
    """One column: the storage values as a Series of ``dtype`` (temporal
    types from their integer storage), NULL where ``col.valid`` is False."""
    values = col.values
    if dtype == "bool" and values.dtype != np.bool_:
        values = values != 0                    # booleans held as 0/1 bytes
    series = cudf.Series(values)
    if str(series.dtype) != dtype:
        series = series.astype(dtype)
    if col.valid is not None:
        series = series.where(cudf.Series(col.valid))
    return series
