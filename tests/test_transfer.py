"""The pinned staging loop (gpu_mr/transfer.py), driven without a device.

The stand-in device queues every send and carries it out only when the
event behind it is waited for (or at the end), as a real copy engine may:
a staging buffer refilled before its send completed would then deliver the
new bytes, and the result would differ from the input.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_mr import transfer as T


class DeferredOps:
    """Sends complete only when waited for, in order."""

    def __init__(self):
        self.queue = []             # (dst, src) not yet copied
        self.sends = 0

    def pinned(self, nbytes):
        return np.zeros(nbytes, np.uint8)

    def empty(self, nbytes):
        return np.full(nbytes, 0xAB, np.uint8)

    def send(self, dst, src):
        self.queue.append((dst, src))
        self.sends += 1
        return len(self.queue) - 1 + self._done

    _done = 0

    def wait(self, event):
        while self._done <= event:
            dst, src = self.queue.pop(0)
            dst[:] = src                # the bytes in the buffer *now*
            self._done += 1

    def receive(self, dst, src):
        return self.send(dst, src)

    def after_current_stream(self):
        pass

    def finish(self):
        self.wait(self._done + len(self.queue) - 1)


class EagerOps(DeferredOps):
    """Copies complete at once, as a fast copy engine's may: a staging
    buffer reused for the next chunk before its bytes were emptied into the
    result would then lose them."""

    def send(self, dst, src):
        event = super().send(dst, src)
        self.wait(event)
        return event


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(T, "CHUNK_BYTES", 1000)
    monkeypatch.setattr(T, "_rings", {})


@pytest.mark.parametrize("n,dtype", [(0, np.int64), (1, np.int8), (125, np.int64),
                                     (1001, np.uint8), (10_007, np.float64),
                                     (3000, np.bool_), (777, np.int32)])
def test_staged_copy_delivers_every_byte(small_chunks, n, dtype):
    rng = np.random.default_rng(n)
    array = (rng.integers(0, 2, n).astype(bool) if dtype is np.bool_
             else rng.integers(-1000, 1000, n).astype(dtype))
    ops = DeferredOps()
    got = T.to_device_staged(None, array, ops)
    assert got.dtype == array.dtype and got.shape == array.shape
    assert np.array_equal(got, array)
    assert ops.sends == -(-array.nbytes // T.CHUNK_BYTES) and not ops.queue


def test_fill_in_pieces_copies_everything():
    src = np.arange(20 << 20, dtype=np.uint8)
    dst = np.zeros_like(src)
    T._fill(dst, src)
    assert np.array_equal(dst, src)


def test_small_arrays_take_one_plain_copy():
    from gpu_mr import backend as B
    found = B.detect()
    if isinstance(found, str):
        pytest.skip(found)
    a = np.arange(10)
    assert np.array_equal(found.to_host(T.to_device_staged(found, a)), a)


@pytest.mark.parametrize("ops_type", [DeferredOps, EagerOps])
@pytest.mark.parametrize("n,dtype", [(0, np.int64), (1, np.int8), (125, np.int64),
                                     (1001, np.uint8), (10_007, np.float64),
                                     (3000, np.bool_), (777, np.int32)])
def test_staged_copy_back_delivers_every_byte(small_chunks, ops_type, n, dtype):
    rng = np.random.default_rng(n + 1)
    array = (rng.integers(0, 2, n).astype(bool) if dtype is np.bool_
             else rng.integers(-1000, 1000, n).astype(dtype))
    ops = ops_type()
    got = T.to_host_staged(None, array, ops)
    assert isinstance(got, np.ndarray) and got.dtype == array.dtype and got.shape == array.shape
    assert np.array_equal(got, array)
    assert ops.sends == -(-array.nbytes // T.CHUNK_BYTES) and not ops.queue


def test_staged_copy_back_waits_before_reading(small_chunks):
    """A chunk is read out of its buffer only after its receive completed:
    with receives that complete only when waited for, reading early would
    give the buffer's zeros."""
    array = np.arange(1, 5001, dtype=np.int64)
    ops = DeferredOps()
    assert np.array_equal(T.to_host_staged(None, array, ops), array)


def test_mid_sized_arrays_are_cut_into_four_chunks(monkeypatch):
    # the fill of one chunk overlaps the copy of another only with several
    monkeypatch.setattr(T, "CHUNK_BYTES", 1000)
    monkeypatch.setattr(T, "MIN_CHUNK_BYTES", 10)
    monkeypatch.setattr(T, "_rings", {})
    assert [T.chunk_bytes(n) for n in (5, 40, 41, 400, 3999, 4000, 10**6)] == \
        [10, 10, 11, 100, 1000, 1000, 1000]
    array = np.arange(50, dtype=np.int64)          # 400 bytes: four chunks of 100
    for direction in (T.to_device_staged, T.to_host_staged):
        ops = EagerOps()
        assert np.array_equal(direction(None, array, ops), array)
        assert ops.sends == 4
