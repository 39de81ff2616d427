"""kernels/lanes.py: the compiled vector helpers answer as the plain bodies do.

The plain bodies are the specification (a loop over the 8 lanes); the
compiled ones are LLVM vector code. Checked on random blocks: row keys of
both widths, clamped to the largest key; lineage words with every field
set; variable ids past 63 (in no set); keys with NaN, -0.0 and infinities,
integer keys at their limits, both orientations; counted masks of every
shape; and the bit positions of every 8-bit mask.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

numba = pytest.importorskip("numba", reason="the cpu extra (numba) is not installed")

from gpu_mr.kernels import lanes as L  # noqa: E402


@numba.njit
def _steps(row_keys, lineage, q0, t, shift, max_key):
    return L.lane_steps(row_keys, lineage, q0, t, shift, max_key)


@numba.njit
def _members(variables, bits):
    return L.lane_members(variables, bits)


@numba.njit
def _least(keys, i0, counted, orient, none):
    return L.lane_min(keys, i0, counted, orient, none)


@numba.njit
def _lowest(mask):
    return L.lowest_lane(mask)


@numba.njit
def _highest(mask):
    return L.highest_lane(mask)


def _word(parent, variable, mark, begins):
    return parent | variable << 16 | mark << 32 | begins << 33


@settings(max_examples=200, deadline=None)
@given(st.data(), st.sampled_from([np.uint16, np.int32]), st.integers(0, 3))
def test_steps_as_the_plain_body(data, key_type, shift):
    n_keys = data.draw(st.integers(1, 12))
    width = 1 << shift
    words = data.draw(st.lists(st.tuples(st.integers(0, width - 1), st.integers(0, 70),
                                         st.integers(0, 1), st.integers(0, 1)),
                               min_size=n_keys * width, max_size=n_keys * width))
    lineage = np.array([_word(*w) for w in words], dtype=np.int64)
    rows = data.draw(st.integers(L.LANES, 20))
    # keys past the largest (rows a stream never scanned) are clamped
    row_keys = np.array(data.draw(st.lists(st.integers(0, n_keys + 5), min_size=rows,
                                           max_size=rows)), dtype=key_type)
    q0 = data.draw(st.integers(0, rows - L.LANES))
    t = data.draw(st.integers(0, width - 1))
    want = L.lane_steps(row_keys, lineage, q0, t, shift, n_keys - 1)
    got = _steps(row_keys, lineage, np.int64(q0), np.int64(t), np.int64(shift),
                 np.int64(n_keys - 1))
    assert tuple(int(x) for x in got) == want


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 255), st.sampled_from([0, 63, 64, 65, 127, 255])),
                min_size=L.LANES, max_size=L.LANES),
       st.integers(-(1 << 63), (1 << 63) - 1))
def test_members_as_the_plain_body(ids, bits):
    variables = L._signed(sum(v << (8 * j) for j, v in enumerate(ids)))
    want = L.lane_members(variables, bits)
    assert want == sum(1 << j for j, v in enumerate(ids) if v < 64 and bits >> v & 1)
    assert _members(np.int64(variables), np.int64(bits)) == want


FLOATS = [0.0, -0.0, 1.5, -2.0, 7.0, float("inf"), float("-inf"), float("nan")]
INTS = [0, 3, -4, 9, np.iinfo(np.int64).max, np.iinfo(np.int64).min]


@settings(max_examples=300, deadline=None)
@given(st.data(), st.booleans(), st.booleans())
def test_least_as_the_plain_body(data, floats, want_max):
    rows = data.draw(st.integers(L.LANES, 12))
    if floats:
        keys = np.array(data.draw(st.lists(st.sampled_from(FLOATS), min_size=rows,
                                           max_size=rows)), dtype=np.float64)
        orient, none = np.float64(-1.0 if want_max else 1.0), np.float64(np.inf)
    else:
        keys = np.array(data.draw(st.lists(st.sampled_from(INTS), min_size=rows,
                                           max_size=rows)), dtype=np.int64)
        orient, none = np.int64(-1 if want_max else 0), np.int64(np.iinfo(np.int64).max)
    i0 = data.draw(st.integers(0, rows - L.LANES))
    counted = data.draw(st.integers(0, 255))
    least, ties, nan = L.lane_min(keys, i0, counted, orient, none)
    got = _least(keys, np.int64(i0), np.int64(counted), orient, none)
    assert bool(got[2]) == nan
    turned = [float(k) * orient if floats else int(k) ^ int(orient)
              for k in keys[i0:i0 + L.LANES]]
    in_set = [turned[j] for j in range(L.LANES) if counted >> j & 1]
    assert nan == any(k != k for k in in_set)
    if not nan:                       # with a NaN the walk drops the result
        assert least == (min(in_set) if in_set else none)
        assert got[0] == least and int(got[1]) == ties
        assert ties == sum(1 << j for j in range(L.LANES)
                           if counted >> j & 1 and turned[j] == least)


@pytest.mark.parametrize("mask", range(1, 256))
def test_lowest_and_highest_lanes(mask):
    bits = [j for j in range(8) if mask >> j & 1]
    assert L.lowest_lane(mask) == _lowest(np.int64(mask)) == bits[0]
    assert L.highest_lane(mask) == _highest(np.int64(mask)) == bits[-1]
