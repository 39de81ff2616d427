"""The device sort (gpu_mr/device_frames.py) against the host sort.

Under numba's CUDA simulator numpy stands in for cupy, so this runs the
device code path on every machine; on a GPU machine it runs on the device.
The host sort (frames.sort_for_matching) is the oracle: the same
permutation (the sort is stable) and the same partition offsets, for every
key type the device orders, NULLs, NaN, -0.0, ASC/DESC, NULLS FIRST/LAST.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_mr import backend as B
from gpu_mr.device_frames import order_on_device
from gpu_mr.device_input import from_arrow
from gpu_mr.frames import sort_for_matching

if isinstance(B.detect(), str):
    pytest.skip(f"no GPU and no simulator: {B.detect()}", allow_module_level=True)

FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"
BACKEND = B.detect()

_VALUES = {
    "int": (st.integers(-3, 3), pa.int64()),
    "small_int": (st.integers(0, 2), pa.int8()),
    "uint": (st.integers(0, 2**64 - 1).map(lambda v: v % 4 * (2**62)), pa.uint64()),
    "float": (st.sampled_from([-1.5, -0.0, 0.0, 2.0, math.nan, math.inf, -math.inf]),
              pa.float64()),
    "float32": (st.sampled_from([-1.0, 0.0, 1.0, math.nan]), pa.float32()),
    "bool": (st.booleans(), pa.bool_()),
    "string": (st.sampled_from(["", "a", "b", "ab", "é", "Z"]), pa.string()),
    "timestamp": (st.integers(-2, 2), pa.timestamp("us")),
    "date": (st.integers(0, 3), pa.date32()),
}


def _column(draw, kind: str, n: int, nulls: bool) -> pa.Array:
    values, arrow = _VALUES[kind]
    drawn = st.one_of(st.none(), values) if nulls else values
    arr = pa.array([draw(drawn) for _ in range(n)], arrow)
    if kind == "string" and draw(st.booleans()):
        arr = arr.dictionary_encode()
    return arr


@st.composite
def keyed_tables(draw):
    n = draw(st.integers(0, 30))
    n_part = draw(st.integers(0, 2))
    n_order = draw(st.integers(0, 2))
    kinds = list(_VALUES)
    columns, parts, order = {}, [], []
    for i in range(n_part + n_order):
        name = f"k{i}"
        columns[name] = _column(draw, draw(st.sampled_from(kinds)), n, draw(st.booleans()))
        if i < n_part:
            parts.append(name)
        else:
            order.append((name, draw(st.booleans()), draw(st.booleans())))
    table = pa.table(columns) if columns else pa.table({"x": pa.array(range(n))})
    if draw(st.booleans()) and n > 2:           # several chunks
        cut = draw(st.integers(1, n - 1))
        table = pa.concat_tables([table.slice(0, cut), table.slice(cut)])
    return table, parts, order


def check_equal_to_host(table, parts, order):
    want = sort_for_matching(table, parts, order)
    source = from_arrow(BACKEND, table)
    assert source.reason([], parts + [o[0] for o in order]) is None
    got = order_on_device(BACKEND, source, parts, order)
    rows = (np.arange(table.num_rows) if got.rows is None
            else BACKEND.to_host(got.rows))
    assert rows.tolist() == want.source_rows.tolist()
    assert got.offsets.tolist() == want.partition_offsets.tolist()
    if want.was_sorted:
        assert got.was_sorted


@settings(max_examples=1500 if FULL else 150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(keyed_tables())
def test_device_order_equals_host_sort(case):
    check_equal_to_host(*case)


def test_sorted_input_is_not_sorted_again():
    t = pa.table({"sym": ["a", "a", "b", "b", None], "ts": [1, 2, 1, 1, 0]})
    got = order_on_device(BACKEND, t, ["sym"], [("ts", True, False)])
    assert got.was_sorted and got.offsets.tolist() == [0, 2, 4, 5]


@pytest.mark.parametrize("ascending", [True, False])
@pytest.mark.parametrize("nulls_first", [True, False])
def test_nan_null_and_signed_zero(ascending, nulls_first):
    t = pa.table({"p": pa.array([0.0, -0.0, None, math.nan, 0.0, math.nan, None]),
                  "x": pa.array([3.0, None, math.nan, -0.0, 1.0, -math.inf, 2.0])})
    check_equal_to_host(t, ["p"], [("x", ascending, nulls_first)])


def test_extreme_integers_turn_over_exactly():
    lo, hi = -2**63, 2**63 - 1
    t = pa.table({"x": pa.array([hi, lo, 0, -1, hi, lo], pa.int64())})
    check_equal_to_host(t, [], [("x", False, False)])
    check_equal_to_host(t, [], [("x", True, False)])


def test_unordered_types_are_named():
    t = pa.table({"d": pa.array([1, 2], pa.decimal128(5, 2)), "ts": [1, 2]})
    source = from_arrow(BACKEND, t)
    assert "d" in source.reason([], ["d", "ts"]) and source.reason([], ["ts"]) is None
    assert "d" in source.reason(["ts", "d"]) and source.reason(["ts"]) is None


@pytest.mark.parametrize("seed", range(12))
def test_one_pass_order_check_equals_the_array_expressions(seed):
    """kernels/gpu_order.py (the device's fused check) against the array
    expressions the simulator runs: the same order verdict and the same
    partition offsets, for one to four key arrays of mixed types, with the
    partition starts noted by the pass or (too many to note) flagged per
    pair."""
    from gpu_mr import device_frames as F
    from gpu_mr.kernels.gpu_order import adjacent_order
    backend = B.detect()
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 60))
    n_arrays = int(rng.integers(1, 5))
    kinds = [np.uint8, np.int64, np.float64, np.int32]
    arrays = []
    for k in range(n_arrays):
        a = rng.integers(0, 3 if k < n_arrays - 1 else 5, n).astype(kinds[(seed + k) % 4])
        if a.dtype == np.int64:         # nanosecond clocks: 1 ns apart must not tie
            a += 1_700_000_000_000_000_000
        arrays.append(a)
    if seed % 3:                        # mostly sorted input: the interesting case
        order = np.lexsort(arrays[::-1])
        arrays = [a[order] for a in arrays]
        if seed % 3 == 2:               # one pair out of order
            i = int(rng.integers(0, n - 1))
            for a in arrays:
                a[[i, i + 1]] = a[[i + 1, i]]
    n_part = int(rng.integers(0, n_arrays + 1))
    device = [backend.to_device(a) for a in arrays]
    want = F._offsets(backend, device[:n_part], n).tolist()
    for max_noted in (1 << 22, 2, 0):
        in_order, starts = adjacent_order(backend, device, n_part, max_noted)
        assert in_order == F._in_order(np, arrays)
        assert F._offsets_of_starts(starts, n).tolist() == want, max_noted
    pads = arrays + [arrays[0]] * (4 - n_arrays)
    for i in range(n - 1):          # the body compiled as numba compiles it for the device
        k, wrong = _compiled_pair_order()(i, n_arrays, *pads)
        row = [a[i] for a in arrays]
        after = [a[i + 1] for a in arrays]
        assert wrong == (row > after)
        assert k == next((j for j in range(n_arrays) if row[j] != after[j]), n_arrays)


def _compiled_pair_order():
    """gpu_order.pair_order compiled by numba.njit: typed as the device
    compiles it (a plain Python call would hide numba's type unification)."""
    import numba
    from gpu_mr.kernels.gpu_order import pair_order
    if not _PAIR_ORDER:
        _PAIR_ORDER.append(numba.njit(lambda i, n, a0, a1, a2, a3: pair_order(i, n, a0, a1, a2,
                                                                              a3)))
    return _PAIR_ORDER[0]


_PAIR_ORDER: list = []
