"""A stand-in for the few cuDF calls gpu_mr makes, for machines without cuDF.

It follows cuDF's documented API (``DataFrame(dict of Series)``,
``DataFrame.from_arrow``, ``to_arrow``, ``head``, ``__getitem__``;
``Series(array)``, ``dtype``, ``null_count``, ``astype``,
``to_cupy(copy=, na_value=)``, ``notna``, ``take``, ``where(cond)``,
``to_arrow``) over a pyarrow Table, handing out arrays of the detected backend's array module
where cuDF hands out cupy ones: cupy on a GPU machine without RAPIDS,
numpy under the CUDA simulator (which has numpy stand in for cupy). It counts whole-frame
``to_arrow`` calls so a test can check that the device pipeline never
brought the frame to the host. On a RAPIDS machine the same tests run
against real cuDF (tests/test_device_input.py).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class DataFrame:
    whole_frame_to_arrow = 0         # calls that moved every row to the host
    from_arrow_calls = 0             # frames built from host Arrow data

    def __init__(self, data):
        # a dict of Series (cuDF's constructor), or the Table itself
        self._table = data if isinstance(data, pa.Table) else pa.table(
            {name: series._array for name, series in data.items()})

    @classmethod
    def from_arrow(cls, table: pa.Table) -> "DataFrame":
        DataFrame.from_arrow_calls += 1
        return cls(table)

    def to_arrow(self) -> pa.Table:
        if self._table.num_rows:
            DataFrame.whole_frame_to_arrow += 1
        return self._table

    def head(self, n: int = 5) -> "DataFrame":
        return DataFrame(self._table.slice(0, n))

    def __len__(self) -> int:
        return self._table.num_rows

    @property
    def columns(self) -> list:
        return self._table.column_names

    def __getitem__(self, name: str) -> "Series":
        return Series(self._table.column(name).combine_chunks())


class Series:
    def __init__(self, array):
        # cuDF takes device arrays (cupy, or numpy standing in for it)
        self._array = array if isinstance(array, pa.Array) else pa.array(_host(array))

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self._array.type.to_pandas_dtype())

    @property
    def null_count(self) -> int:
        return self._array.null_count

    def astype(self, dtype) -> "Series":
        return Series(self._array.cast(pa.from_numpy_dtype(np.dtype(dtype))))

    def to_cupy(self, dtype=None, copy: bool = False, na_value=None):
        arr = self._array
        if arr.null_count:
            if na_value is None:
                raise ValueError("cuDF cannot hand out a column with nulls without na_value")
            arr = pc.fill_null(arr, na_value)
        out = arr.to_numpy(zero_copy_only=False)
        return _device(out.astype(dtype) if dtype is not None else out)

    def notna(self) -> "Series":
        return Series(pc.is_valid(self._array))

    def take(self, indices) -> "Series":
        return Series(self._array.take(pa.array(_host(indices), pa.int64())))

    def where(self, cond: "Series") -> "Series":
        """Values where ``cond`` is true, NULL elsewhere (``other`` left as NA)."""
        return Series(pc.if_else(cond._array, self._array, pa.nulls(1, self._array.type)[0]))

    def to_arrow(self) -> pa.Array:
        return self._array


def _device(array: np.ndarray):
    from gpu_mr import backend as B
    found = B.detect()
    return array if isinstance(found, str) or found.simulated else found.xp.asarray(array)


def _host(array) -> np.ndarray:
    from gpu_mr import backend as B
    found = B.detect()
    return np.asarray(array) if isinstance(found, str) else found.to_host(array)


# gpu_mr recognises a cuDF frame by its class's module (it never imports
# cudf to check): the stand-in says it is one.
DataFrame.__module__ = Series.__module__ = "cudf"
