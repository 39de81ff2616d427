"""kernels/buffers.py: large arrays from Arrow's memory pool."""

import numpy as np
import pyarrow as pa
import pytest

from gpu_mr.kernels import buffers as B


@pytest.mark.parametrize("shape, dtype", [(10, np.int64), ((3, 200_000), np.uint64),
                                          (1_000_000, np.int16), (0, np.float64),
                                          ((0, 5), np.int32)])
def test_empty_and_zeros_give_writable_contiguous_arrays(shape, dtype):
    for make in (B.empty, B.zeros):
        a = make(shape, dtype)
        assert a.shape == (shape if isinstance(shape, tuple) else (shape,))
        assert a.dtype == np.dtype(dtype) and a.flags.c_contiguous and a.flags.writeable
        a[...] = 7
        assert (a == 7).all()
    assert not B.zeros(shape, dtype).any()


def test_large_arrays_come_from_the_pool_small_ones_from_numpy():
    pool = pa.default_memory_pool()
    before = pool.bytes_allocated()
    big = B.empty(B.POOL_MIN_BYTES // 8 + 1, np.int64)
    assert pool.bytes_allocated() >= before + big.nbytes
    small = B.empty(16, np.int64)
    assert not isinstance(small.base, pa.Buffer)
    del big                                 # the array held the pool's buffer
    assert pool.bytes_allocated() == before
