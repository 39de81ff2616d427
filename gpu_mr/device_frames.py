"""Matching order on the device: the GPU engine's sort and partition offsets.

What: the device twin of frames.sort_for_matching, for the GPU engine's
on-device pipeline. The key columns move to the device once; each key
becomes one to three arrays that compare plainly ascending and decide the
key exactly as the host sort does: a NULL helper (NULLs first or last, as
asked), a NaN helper (NaN above every number: last in ASC, first in DESC),
then the values with NULL and NaN rows set to 0, ``-0.0`` made ``0.0`` and
DESC keys turned over (``~x`` for integers, which cannot overflow; ``-x``
for floats). Strings and dictionaries go as the ranks of their distinct
values (ranked on the host by Arrow, in byte order, as the host sort
compares them). One lexicographic comparison of adjacent rows on the device
says whether the input is already in order; if not, stable argsorts from the
least significant array to the most (LSD order, so ties keep input order:
the documented ORDER BY tiebreak) give the permutation. Partitions start
where a partition key's arrays change between adjacent rows (NULL equals
NULL, NaN equals NaN, ``-0.0`` equals ``0.0``, as in GROUP BY).

Why: pre-sorted input (the usual case for tick data) must cost one pass, not
a sort; and a sort on the host would send every column across twice. Keys
decided by plain ascending arrays keep the device code to the array API
cupy shares with numpy (backend.py), so the simulator runs this same code.

Cost: moving the key columns (strings: one dictionary encode on the host
and int32 ranks moved); the check, O(rows) per key array; when unsorted,
one stable argsort (a radix or merge sort on the device) and one gather per
key array; the offsets, O(partitions) back to the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa

from .device_input import from_arrow


@dataclass(frozen=True)
class DeviceOrder:
    """Where rows go: ``rows`` (device int64: sorted position -> input row;
    None when the input was already in order) and ``offsets`` (host int64,
    partition ``p`` holds sorted rows ``offsets[p]:offsets[p + 1]``)."""
    rows: object
    offsets: np.ndarray

    @property
    def was_sorted(self) -> bool:
        return self.rows is None

    def gather(self, array):
        """``array`` (a device array indexed by input row) in sorted order."""
        return array if self.rows is None else array[self.rows]


def order_on_device(backend, source, partition_columns: Sequence[str],
                    order_keys: Sequence[tuple]) -> DeviceOrder:
    """The matching order of ``source`` (a ``device_input.DeviceInput``, or a
    pyarrow Table; its ``reason`` for the keys must be None): rows
    sorted by the partition columns (ascending, NULLs last) then by the order
    keys ``(column, ascending, nulls_first)``, stable.

    >>> from gpu_mr import backend as B    # the tests run it under the CUDA simulator
    >>> be = B.detect()
    >>> t = pa.table({"k": ["b", "a", "b"], "ts": [2, 1, 1]})
    >>> got = order_on_device(be, t, ["k"], [("ts", True, False)])
    >>> be.to_host(got.rows).tolist(), got.offsets.tolist()
    ([1, 2, 0], [0, 1, 3])
    """
    if isinstance(source, pa.Table):
        source = from_arrow(backend, source)
    keys = [(name, True, False) for name in partition_columns] + list(order_keys)
    return order_rows(backend, [source.key(name) + (bool(asc), bool(nf))
                                for name, asc, nf in keys],
                      len(partition_columns), source.num_rows)


def order_rows(backend, keys: list, n_partition_keys: int, n: int) -> DeviceOrder:
    """The order of ``n`` rows under ``keys``, ``(values, valid or None,
    ascending, nulls_first)``: device arrays as ``DeviceInput.key`` gives
    them (NULL rows 0), the first ``n_partition_keys`` the partition keys."""
    xp = backend.xp
    arrays, n_partition_arrays = [], 0
    for i, (values, valid, ascending, nulls_first) in enumerate(keys):
        arrays += _key_arrays(xp, values, valid, ascending, nulls_first)
        if i < n_partition_keys:
            n_partition_arrays = len(arrays)
    if n < 2 or not arrays:
        return DeviceOrder(None, np.array([0, n] if n else [0], dtype=np.int64))
    from .kernels.gpu_order import MAX_ARRAYS, adjacent_order
    if not backend.simulated and len(arrays) <= MAX_ARRAYS:
        # one fused pass on a device; the array expressions below read each
        # key four to five times (kernels/gpu_order.py)
        in_order, starts = adjacent_order(backend, arrays, n_partition_arrays)
        if in_order:
            return DeviceOrder(None, _offsets_of_starts(starts, n))
    elif _in_order(xp, arrays):
        return DeviceOrder(None, _offsets(backend, arrays[:n_partition_arrays], n))
    rows = xp.arange(n, dtype=np.int64)
    for a in reversed(arrays):          # least significant first: stable passes keep ties
        rows = rows[_stable_argsort(xp, a[rows])]
    partition_arrays = [a[rows] for a in arrays[:n_partition_arrays]]
    return DeviceOrder(rows, _offsets(backend, partition_arrays, n))


# ------------------------------------------------------------ key arrays

def _key_arrays(xp, values, valid, ascending: bool, nulls_first: bool) -> list:
    """The device arrays deciding one key, most significant first."""
    out = []
    if valid is not None:
        # the NULL rows' side: before the others (valid sorts them first) or after
        out.append(valid.astype(np.uint8) if nulls_first else (~valid).astype(np.uint8))
    if values.dtype.kind == "f":
        nan = xp.isnan(values)
        if bool(nan.any()):
            out.append(nan.astype(np.uint8) if ascending else (~nan).astype(np.uint8))
            values = xp.where(nan, 0, values)
        values = values + 0.0           # -0.0 + 0.0 is 0.0: the two zeros tie
        out.append(values if ascending else -values)
    else:
        out.append(values if ascending else ~values)
    return out


# ------------------------------------------------------------ order and partitions

def _in_order(xp, arrays: list) -> bool:
    """Whether adjacent rows are in lexicographic order under ``arrays``."""
    undecided = None                    # pairs tied on every array so far
    for a in arrays:
        before, after = a[:-1], a[1:]
        wrong = before > after
        if undecided is not None:
            wrong &= undecided
        if bool(wrong.any()):
            return False
        tied = before == after
        undecided = tied if undecided is None else undecided & tied
        if not bool(undecided.any()):
            return True
    return True


def _offsets(backend, partition_arrays: list, n: int) -> np.ndarray:
    """Partition offsets of sorted rows: where any partition array changes."""
    changed = None
    for a in partition_arrays:
        differs = a[:-1] != a[1:]
        changed = differs if changed is None else changed | differs
    return _offsets_of_changes(backend, changed, n)


def _offsets_of_starts(starts: Optional[np.ndarray], n: int) -> np.ndarray:
    """Partition offsets from the rows where partitions after the first
    start (host int64, ascending; None: one partition)."""
    if starts is None:
        return np.array([0, n], dtype=np.int64)
    return np.concatenate([np.zeros(1, np.int64), starts, np.array([n], np.int64)])


def _offsets_of_changes(backend, changed, n: int) -> np.ndarray:
    """Partition offsets from ``changed`` (device bool per adjacent pair:
    whether a partition starts at the second row; None: one partition)."""
    if changed is None:
        return np.array([0, n], dtype=np.int64)
    starts = backend.to_host(backend.xp.flatnonzero(changed)).astype(np.int64) + 1
    return np.concatenate([np.zeros(1, np.int64), starts, np.array([n], np.int64)])


def _stable_argsort(xp, a):
    # cupy's argsort is always stable and takes no ``kind``; numpy's default is not
    return np.argsort(a, kind="stable") if xp is np else xp.argsort(a)
