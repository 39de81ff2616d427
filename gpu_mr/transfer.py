"""Copies between host and device through pinned staging buffers, overlapped.

What: a large host array goes to the device in chunks through a ring of
pinned (page-locked) staging buffers: host threads copy chunk k+1 into a
free buffer (in pieces on all cores: numpy copies release the GIL) while
the device's copy engine sends chunk k from another, on its own stream. A
buffer is refilled only after the event recorded behind its last send has
completed. Back from the device it runs the other way: the copy engine
brings chunk k+1 into a free buffer while host threads empty chunk k into
the result, and a buffer is emptied only after the event recorded behind
its receive has completed. An array is cut into chunks of at most a ring
buffer, and into at least four where they stay above 1 MiB, so that
mid-sized arrays overlap too; arrays under 8 MiB take one plain copy.

Why: a copy from pageable memory is staged by the driver through a small
pinned buffer of its own, one chunk at a time with no overlap, and reaches
a fraction of the bus's bandwidth; from pinned memory the copy engine runs
at the bus's speed. On an H100 machine (2026-11-28, benchmarks/results)
copies from the device into pageable memory moved about 3 GB/s (gpu_bench's
to_host stage) where a copy from pinned memory moved 55 GB/s: per-match
results of 1e9 rows took seconds to come back, and 80 MB columns (which
took the plain copy then) reached 10% of the pinned rate. Pinning the
caller's array instead (cudaHostRegister) costs about as much as the copy
itself, every time. The buffers are allocated once per process and reused.

Cost: one pass over the array by the host threads (into pinned memory) and
one DMA over the bus, overlapped: the slower of the two sets the time. Host
memory: ``RING`` buffers of ``CHUNK_BYTES`` each, pinned for the life of
the process.

The loop is written against a small set of operations (``_Ops``) so that
the tests drive it without a device, with sends that complete only when
waited for: a buffer refilled too early then gives wrong bytes.
"""

from __future__ import annotations

import threading

import numpy as np

from .kernels.threads import run_pieces, thread_count

# Bytes per chunk: each send's fixed cost (about 10 us) is under 1% of its
# time at 50 GB/s, and the ring stays small.
CHUNK_BYTES = 64 << 20
# Arrays from this size on go through the ring: on an H100 machine a copy
# from or to pageable memory ran at 3-5 GB/s, one from pinned memory at 55.
# Below it the plain copy's milliseconds are not worth pinning the ring's
# buffers (192 MiB, once per process) for.
STAGED_MIN_BYTES = 8 << 20
# The smallest chunk: each copy's fixed cost stays a small share of it.
MIN_CHUNK_BYTES = 1 << 20
# Buffers in the ring: one filling, one sending, one spare so that a fill
# never waits on the send just queued.
RING = 3


class _Ops:
    """What the staging loop needs from a device (cupy's, by default)."""

    def __init__(self, xp):
        import cupyx
        self.xp = xp
        self.stream = xp.cuda.Stream(non_blocking=True)
        self._pinned = cupyx.empty_pinned

    def pinned(self, nbytes: int) -> np.ndarray:
        return self._pinned(nbytes, dtype=np.uint8)

    def empty(self, nbytes: int):
        return self.xp.empty(nbytes, dtype=np.uint8)

    def send(self, dst, src: np.ndarray):
        """Queue the copy of pinned ``src`` into device ``dst``; returns an
        event that completes after it."""
        dst.set(src, stream=self.stream)
        return self.stream.record()

    @staticmethod
    def wait(event) -> None:
        event.synchronize()

    def after_current_stream(self) -> None:
        """Order this stream's next copies after the work already queued on
        the current stream (the kernels that wrote what is to be received):
        a non-blocking stream does not wait for the default stream by itself."""
        self.stream.wait_event(self.xp.cuda.get_current_stream().record())

    def receive(self, dst: np.ndarray, src):
        """Queue the copy of contiguous device bytes ``src`` into pinned
        ``dst``; returns an event that completes after it."""
        runtime = self.xp.cuda.runtime
        runtime.memcpyAsync(dst.ctypes.data, src.data.ptr, src.nbytes,
                            runtime.memcpyDeviceToHost, self.stream.ptr)
        return self.stream.record()

    def finish(self) -> None:
        self.stream.synchronize()


_rings: dict = {}      # id of the ops' device -> the pinned buffers, allocated once
# One staging at a time per process: the ring's buffers are shared.
_ring_lock = threading.Lock()


def _ring(ops) -> list:
    """The pinned staging buffers for ``ops``' kind of device (allocated on
    first use; the caller holds ``_ring_lock``)."""
    key = id(type(ops))
    ring = _rings.get(key)
    if ring is None:
        ring = _rings[key] = [ops.pinned(CHUNK_BYTES) for _ in range(RING)]
    return ring


def to_device_staged(backend, array: np.ndarray, ops=None):
    """``array`` as a device array of the same dtype and shape, sent through
    pinned staging buffers (see the module docstring). Under the simulator,
    or for arrays under ``STAGED_MIN_BYTES``, one plain
    ``backend.to_device``."""
    array = np.ascontiguousarray(array)
    if ops is None:
        if backend.simulated or array.nbytes < STAGED_MIN_BYTES:
            return backend.to_device(array)
        ops = _Ops(backend.xp)
    src = array.reshape(-1).view(np.uint8)
    out = ops.empty(src.size)
    chunk = chunk_bytes(src.size)
    with _ring_lock:
        ring = _ring(ops)
        pending = [None] * len(ring)           # the event behind each buffer's last send
        for k, lo in enumerate(range(0, src.size, chunk)):
            hi = min(lo + chunk, src.size)
            i = k % len(ring)
            if pending[i] is not None:
                ops.wait(pending[i])           # its previous chunk has left
            _fill(ring[i][:hi - lo], src[lo:hi])
            pending[i] = ops.send(out[lo:hi], ring[i][:hi - lo])
        ops.finish()
    return out.view(array.dtype).reshape(array.shape)


def to_host_staged(backend, array, ops=None) -> np.ndarray:
    """Device ``array`` as a host numpy array of the same dtype and shape,
    received through the pinned staging buffers (see the module docstring).
    Under the simulator, or for arrays under ``STAGED_MIN_BYTES``, one
    plain copy."""
    if ops is None:
        if backend.simulated or isinstance(array, np.ndarray):
            return np.asarray(array)
        if array.nbytes < STAGED_MIN_BYTES:
            return backend.xp.asnumpy(array)
        array = backend.xp.ascontiguousarray(array)
        ops = _Ops(backend.xp)
    src = array.reshape(-1).view(np.uint8)
    out = np.empty(src.size, dtype=np.uint8)
    chunk = chunk_bytes(src.size)
    bounds = [(lo, min(lo + chunk, src.size)) for lo in range(0, src.size, chunk)]
    with _ring_lock:
        ring = _ring(ops)
        ops.after_current_stream()
        pending = []                          # (event, buffer, lo, hi) in flight, in order
        for k, (lo, hi) in enumerate(bounds):
            if len(pending) == len(ring):     # every buffer holds a chunk: empty the oldest
                _drain(ops, pending.pop(0), out)
            buf = ring[k % len(ring)]
            pending.append((ops.receive(buf[:hi - lo], src[lo:hi]), buf, lo, hi))
        for item in pending:
            _drain(ops, item, out)
        ops.finish()
    return out.view(array.dtype).reshape(array.shape)


def chunk_bytes(nbytes: int) -> int:
    """The chunk size for an array of ``nbytes``: at most ``CHUNK_BYTES``
    (a ring buffer), and at least four chunks where ``MIN_CHUNK_BYTES``
    allows, so that a mid-sized array's fills and copies overlap too."""
    return min(CHUNK_BYTES, max(MIN_CHUNK_BYTES, -(-nbytes // 4)))


def _drain(ops, item, out: np.ndarray) -> None:
    event, buf, lo, hi = item
    ops.wait(event)                           # its chunk has arrived
    _fill(out[lo:hi], buf[:hi - lo])


def _fill(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[:] = src`` in pieces on all cores (memory-bound: one core
    copies at a fraction of what the bus takes)."""
    n = src.size
    pieces = max(1, min(thread_count(), n // (4 << 20)))
    if pieces == 1:
        dst[:] = src
        return
    bounds = [(n * p // pieces, n * (p + 1) // pieces) for p in range(pieces)]

    def copy(a: int, b: int) -> None:
        dst[a:b] = src[a:b]
    run_pieces(copy, bounds)
