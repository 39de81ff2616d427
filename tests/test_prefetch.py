"""kernels/prefetch.py: a hint that changes no result and never faults, and
stores that bypass the caches but write what plain ones do."""

import platform

import numpy as np
import pytest

from gpu_mr.kernels.prefetch import prefetch, prefetch_range, store_fence, stream_store

numba = pytest.importorskip("numba")


@numba.njit
def _sum_with_hints(values, hints):
    """The sum of ``values``, hinting at ``values[hints[i]]`` before each row."""
    total = values.dtype.type(0)
    for i in range(values.shape[0]):
        prefetch(values, hints[i % hints.shape[0]])
        total += values[i]
    return total


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.int64, np.float64, np.uint64])
def test_compiled_prefetch_changes_nothing_and_never_faults(dtype):
    values = np.arange(1, 1001).astype(dtype)
    # in range, at the end, far past it, and an unsigned index wrapped
    # below zero (what the walk computes for a match before its piece)
    hints = np.array([0, 999, 1000, 1 << 40, np.iinfo(np.uint64).max], dtype=np.uint64)
    assert _sum_with_hints(values, hints) == values.sum()
    assert _sum_with_hints(values, hints.astype(np.int64)[:4]) == values.sum()


def test_plain_prefetch_does_nothing():
    values = np.arange(3)
    assert prefetch(values, 10) is None
    assert _sum_with_hints.py_func(values, np.array([5], np.int64)) == 3


@numba.njit
def _sum_with_range_hints(values, lo, hi):
    prefetch_range(values, lo, hi)
    return values.sum()


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.int64])
def test_prefetch_range_changes_nothing_past_the_end_either(dtype):
    values = np.arange(100).astype(dtype)
    for lo, hi in [(0, 100), (90, 400), (1000, 1200), (5, 5)]:
        assert _sum_with_range_hints(values, lo, hi) == values.sum()
        assert _sum_with_range_hints.py_func(values, lo, hi) == values.sum()


def test_the_generic_prefetch_compiles_where_the_cpu_one_does_not_apply():
    """CUDA device functions compile the same segmented bodies; there the
    generic no-op serves (numba picks the cpu overload on the CPU, checked
    in the machine code)."""
    asm = _sum_with_hints.inspect_asm(_sum_with_hints.signatures[0])
    assert "prefetch" in asm
    from gpu_mr.kernels import prefetch as P
    assert P._prefetch_elsewhere(None, None)(np.zeros(1), 0) is None


def test_device_copies_of_the_segmented_bodies_prefetch_nothing():
    """kernels/gpu_measures.py compiles the segmented bodies for the device
    with ``prefetch`` bound to a device no-op (a CPU cache hint there)."""
    pytest.importorskip("numba.cuda")
    from gpu_mr.kernels import gpu_measures as gm
    for device_fn in (gm._count, gm._sum_int, gm._sum_float, gm._extreme):
        body = getattr(device_fn, "py_func", None) or device_fn.fn
        assert body.__globals__["prefetch"] is gm._no_prefetch


@numba.njit
def _streamed(values, out, shift):
    """``out[i] = values[i] + shift`` by non-temporal stores, fenced."""
    for i in range(values.shape[0]):
        stream_store(out, np.uint64(i), values[i] + shift)
    store_fence()


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint64, np.float64])
def test_streamed_stores_write_what_plain_ones_do(dtype):
    values = np.arange(1, 5000).astype(dtype)
    for fn in (_streamed, _streamed.py_func):
        out = np.zeros_like(values)
        fn(values, out, dtype(3))
        assert (out == values + dtype(3)).all()
    if platform.machine().lower() in ("x86_64", "amd64"):
        # the option is in force: non-temporal stores and their fence
        asm = _streamed.inspect_asm(_streamed.signatures[-1])
        assert "movnt" in asm
        assert "sfence" in asm
