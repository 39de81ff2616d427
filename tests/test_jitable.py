"""kernels/jitable.py: ``uncounted`` helpers compile without reference counts.

A helper marked ``@uncounted`` is called from compiled code with arrays and
views of them, writes through them and returns what the plain function
returns; one that allocates is refused when compiled (numba's answer to
``_nrt=False``: the option is in force, and this is the decorator's
documented cost); without a compiled caller it is the plain function.
"""

from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba", reason="the cpu extra (numba) is not installed")

from gpu_mr.kernels.jitable import uncounted  # noqa: E402


def _sum_into(values, lo, hi, out, at):
    window = values[lo:hi]
    total = 0.0
    for x in window:
        total += x
    out[at] = total
    return total


_sum_into_uncounted = uncounted(_sum_into)


@numba.njit
def _caller(values, out):
    acc = 0.0
    for k in range(out.shape[0]):
        acc += _sum_into_uncounted(values, 3 * k, 3 * k + 3, out, k)
    return acc


def test_uncounted_helper_gives_the_plain_answer():
    values = np.arange(12, dtype=np.float64)
    out = np.zeros(4)
    assert _caller(values, out) == values.sum()
    assert out.tolist() == [3.0, 12.0, 21.0, 30.0]
    plain = np.zeros(1)
    assert _sum_into_uncounted(values, 0, 12, plain, 0) == 66.0      # plain Python
    assert plain[0] == 66.0


def _allocates(n):
    return np.zeros(n)


_allocates_uncounted = uncounted(_allocates)


@numba.njit
def _calls_allocating(n):
    return _allocates_uncounted(n)


def test_an_allocating_helper_is_refused():
    with pytest.raises(Exception):
        _calls_allocating(3)
