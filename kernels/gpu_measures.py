"""Per-match aggregates and FIRST/LAST landings on a CUDA device (MEASURES
of ONE ROW PER MATCH), one thread per match.

What: the matches' rows lie end to end as "elements" (the CSR labels of
``engines.gpu.DeviceMatches``: match ``i`` owns elements
``offsets[i]:offsets[i + 1]``, element ``e`` is row ``starts[i] + e -
offsets[i]``). Thread ``i`` runs kernels/segmented.py's body on its match
alone, as a one-segment slice (``starts[i:i + 1]``, ``offsets[i:i + 2]``,
``out[i:i + 1]``):

- ``count``: the counted elements (``segment_count``);
- ``sum_int`` / ``sum_float``: the BIGINT or DOUBLE sum and the count, and
  a flag per match when a sum leaves the BIGINT range or a counted value is
  NaN (``segment_sum_int``, ``segment_sum_float``);
- ``extreme``: the row of the MIN/MAX key, the first of equal ones, and a
  NaN flag (``segment_arg_extreme``);
- ``land``: the row FIRST/LAST(.., k) of a variable lands on
  (``find_member``).

The bodies are compiled with ``numba.cuda.jit(device=True)``: the CPU
engine's code, not a second copy of it, so the device's values are the
host's bit for bit (a DOUBLE sum is sequential per match, in the order and
arithmetic of the interpreter: see segmented.py's ``COMPENSATED_SUM``).
Why one thread per match: the bodies are sequential per segment by design
(exactness); matches are many and short, so threads are plenty, and a
match's elements are contiguous, so a warp reads neighbouring memory.
Cost: O(match length) per thread, O(total match length) in all; one launch
per measure; outputs are per match (8 B each, plus a 1 B flag).
"""

from __future__ import annotations

import types

import numpy as np
from numba import cuda

from . import compiled_once
from .segmented import (COMPENSATED_SUM, find_member, segment_arg_extreme, segment_count,
                        segment_sum_float, segment_sum_int)


@cuda.jit(device=True)
def _no_prefetch(array, index):
    """The bodies' ``prefetch`` on the device: nothing (a CPU cache hint,
    kernels/prefetch.py; one thread here walks one match)."""


def _device(body):
    """``body`` as a device function, its ``prefetch`` bound to
    :func:`_no_prefetch` rather than left to numba's choice of overload."""
    names = dict(body.__globals__, prefetch=_no_prefetch)
    return cuda.jit(device=True)(types.FunctionType(body.__code__, names, body.__name__,
                                                    body.__defaults__))


# The bodies as device functions: module globals read by the kernels, as
# ``cuda`` is (the simulator swaps its own thread-aware ``cuda`` module into
# a kernel's globals, which a closure variable would hide). Compiled on the
# first launch of a kernel that calls them.
_count = _device(segment_count)
_sum_int = _device(segment_sum_int)
_sum_float = _device(segment_sum_float)
_extreme = _device(segment_arg_extreme)
_find = cuda.jit(device=True)(find_member)


@compiled_once
def kernels():
    """The kernels by name (numba.cuda compiles each on its first launch)."""
    @cuda.jit
    def count_matches(valid, has_valid, member, labels, starts, offsets, out):
        i = cuda.grid(1)
        if i < starts.shape[0]:
            _count(valid, has_valid, member, labels, starts[i:i + 1], offsets[i:i + 2], False,
                   out[i:i + 1])

    @cuda.jit
    def sum_int_matches(values, valid, has_valid, member, labels, starts, offsets, out,
                        counts, flags):
        i = cuda.grid(1)
        if i < starts.shape[0]:
            flags[i] = _sum_int(values, valid, has_valid, member, labels, starts[i:i + 1],
                                offsets[i:i + 2], False, out[i:i + 1], counts[i:i + 1])

    @cuda.jit
    def sum_float_matches(values, valid, has_valid, member, labels, starts, offsets,
                          compensated, out, counts, flags):
        i = cuda.grid(1)
        if i < starts.shape[0]:
            flags[i] = _sum_float(values, valid, has_valid, member, labels, starts[i:i + 1],
                                  offsets[i:i + 2], False, compensated, out[i:i + 1],
                                  counts[i:i + 1])

    @cuda.jit
    def extreme_matches(keys, valid, has_valid, member, labels, starts, offsets, want_max,
                        out, flags):
        i = cuda.grid(1)
        if i < starts.shape[0]:
            flags[i] = _extreme(keys, valid, has_valid, member, labels, starts[i:i + 1],
                                offsets[i:i + 2], False, want_max, 0, out[i:i + 1])

    @cuda.jit
    def land_matches(member, labels, lo, hi, k, from_end, starts, out):
        i = cuda.grid(1)
        if i < starts.shape[0]:
            _find(member, labels, lo[i:i + 1], hi[i:i + 1], k, from_end, starts[i:i + 1],
                  out[i:i + 1])

    return {"count": count_matches, "sum_int": sum_int_matches,
            "sum_float": sum_float_matches, "extreme": extreme_matches, "land": land_matches}


def launch(backend, name: str, jobs: int, *args) -> None:
    """Run kernel ``name`` over ``jobs`` thread indices (one per match)."""
    backend.launch(kernels()[name], jobs, *args)


# ---- host drivers: device arrays in, per-match device arrays out

def _valid_args(backend, valid) -> tuple:
    """``(valid, has_valid)`` as the bodies take them (a one-slot stand-in
    when the column has no NULL)."""
    if valid is None:
        return backend.to_device(np.ones(1, dtype=bool)), False
    return valid, True


def _any(backend, flags) -> bool:
    """Whether any match raised its flag: one scalar to the host."""
    return flags.shape[0] > 0 and backend.scalar(flags.max()) != 0


def count_per_match(backend, member, labels, starts, offsets, valid=None):
    """Per match, its elements whose label is a ``member`` (bool per
    variable id) and, with ``valid`` (bool per row), whose row is valid:
    COUNT(X.*) and COUNT(X.col). ``starts``: first row per match;
    ``offsets``: the CSR label offsets (one more than matches)."""
    m = starts.shape[0]
    out = backend.xp.zeros(m, dtype=np.int64)
    launch(backend, "count", m, *_valid_args(backend, valid), member, labels, starts, offsets,
           out)
    return out


def sum_per_match(backend, values, member, labels, starts, offsets, valid=None) -> tuple:
    """``(sums, counts, inexact)`` per match over the counted elements (as
    :func:`count_per_match`) of ``values`` (per row): int64 sums of an
    integer column, float64 sums of a floating one, summed as the
    interpreter does. ``inexact``: some int64 sum left the BIGINT range or
    some counted value was NaN (the sums are then not the interpreter's)."""
    xp = backend.xp
    m = starts.shape[0]
    floats = np.dtype(values.dtype).kind == "f"
    sums = xp.zeros(m, dtype=np.float64 if floats else np.int64)
    counts = xp.zeros(m, dtype=np.int64)
    flags = xp.zeros(m, dtype=np.uint8)
    valid, has_valid = _valid_args(backend, valid)
    if floats:
        launch(backend, "sum_float", m, values, valid, has_valid, member, labels, starts,
               offsets, COMPENSATED_SUM, sums, counts, flags)
    else:
        launch(backend, "sum_int", m, values, valid, has_valid, member, labels, starts,
               offsets, sums, counts, flags)
    return sums, counts, _any(backend, flags)


def extreme_per_match(backend, keys, member, labels, starts, offsets, want_max: bool,
                      valid=None) -> tuple:
    """``(rows, nan)``: per match the row of the MIN (MAX if ``want_max``)
    key over the counted elements, the first of equal keys, -1 where none;
    ``nan``: some counted key was NaN (Python's min/max then depends on
    the order)."""
    m = starts.shape[0]
    rows = backend.xp.full(m, -1, dtype=np.int64)
    flags = backend.xp.zeros(m, dtype=np.uint8)
    launch(backend, "extreme", m, keys, *_valid_args(backend, valid), member, labels, starts,
           offsets, bool(want_max), rows, flags)
    return rows, _any(backend, flags)


def land_per_match(backend, member, labels, starts, offsets, k: int, from_end: bool):
    """Per match, the row of its k-th (0-based) element whose label is a
    ``member``, counted from its last element if ``from_end`` (FIRST/LAST(X.col,
    k) over the whole match), -1 if there are not that many."""
    m = starts.shape[0]
    out = backend.xp.full(m, -1, dtype=np.int64)
    lo = offsets[:-1]
    hi = offsets[1:] - 1                # find_member's bounds are inclusive
    launch(backend, "land", m, member, labels, lo, hi, int(k), bool(from_end), starts, out)
    return out
