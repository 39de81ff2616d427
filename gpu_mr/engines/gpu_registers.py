"""The register engine on a CUDA device (or numba's CUDA simulator).

What: :func:`find_matches_on_device` runs a query whose DEFINEs read the
match so far (``CheckedQuery.history_dependent``) with the register engine
(engines/registers.py: plan, generated APPLY / PRED, column loading) and
kernels/gpu_registers.py's device driver: the same kernel bodies
(kernels/registers.py) cloned with the query's generated code, each
compiled with ``numba.cuda.jit(device=True)``, one device thread per
partition. Its result is exactly ``registers.find_matches``'s: the same
``MatchArrays``, and partitions whose thread stopped with ERROR, FALLBACK
or SKIP_ERROR rerun, in partition order, by the reference engine (the
exact result, or the first partition's error).
:func:`device_registers_reason` says whether a query runs there (None) or
why not: no device, or a construct the registers do not hold (the CPU
engine then takes the query, as it does today).

Why: DESIGN.md §5, "registers of fixed size can later run on the GPU
too": every register row has a size fixed by the query, so each thread's
buffers are plain slices of device arrays, grown by the host between
launches exactly as the CPU driver grows its own.
Cost: columns, constants and the program move to the device once; per
launch a few small arrays (counters, statuses: O(partitions)) come back;
the kernel's cost is the register machine's, one partition per thread;
numba.cuda compiles each query shape once per process (constants are data).
"""

from __future__ import annotations

import types
from typing import Optional

import numpy as np

from .. import backend as B
from ..analysis import CheckedQuery
from ..frames import SortedInput
from ..kernels import registers as K     # numba-free; kernels.gpu_registers is imported on use
from . import registers as R
from .base import MatchArrays

# Buffer entries per partition row to start with (threads, register rows,
# seen entries, log nodes, matches, labels), each capped at the host's
# first sizes (registers.INITIAL_SIZES) and at least 1: short partitions
# take little memory, however many there are. A partition of n rows has at
# most n matches, and at most n labels when matches do not overlap; the
# others follow the live threads per row. Full buffers grow fourfold, as
# on the host.
SIZE_PER_ROW = (4, 8, 16, 4, 1, 1)


def device_registers_reason(query: CheckedQuery) -> Optional[str]:
    """None when :func:`find_matches_on_device` runs ``query`` on this
    process's device, else why not (for explain()).

    Examples
    --------
    >>> import pyarrow as pa
    >>> from gpu_mr.analysis import analyze
    >>> from gpu_mr.syntax import parse_clause
    >>> schema = pa.schema([("t", pa.int64()), ("x", pa.float64())])
    >>> q = analyze(parse_clause("ORDER BY t MEASURES COUNT(*) AS n PATTERN (A B+) "
    ...     "DEFINE B AS COUNT(DISTINCT B.x) < 3"), schema)
    >>> device_registers_reason(q)
    'the register machine declines it: DISTINCT aggregates need every value seen, not registers'
    """
    reason = R.supports(query)
    if reason is not None:
        return f"the register machine declines it: {reason}"
    found = B.detect()
    if isinstance(found, str):
        return found
    return None


def find_matches_on_device(backend: B.Backend, query: CheckedQuery, data: SortedInput
                           ) -> MatchArrays:
    """Every match of ``query`` in ``data``, equal to
    ``engines.registers.find_matches`` (and so to the reference engine);
    raises what the reference engine raises. The matching runs on
    ``backend``'s device, one thread per partition.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from gpu_mr import backend as B
    >>> from gpu_mr.analysis import analyze
    >>> from gpu_mr.frames import sort_for_matching
    >>> from gpu_mr.syntax import parse_clause
    >>> t = pa.table({"p": [1, 1, 1, 2, 2, 2], "t": [1, 2, 3, 1, 2, 3],
    ...               "x": [5, 3, 4, 2, 1, 9]})
    >>> q = analyze(parse_clause("PARTITION BY p ORDER BY t MEASURES COUNT(*) AS n "
    ...     "PATTERN (A B+ C) DEFINE B AS x < A.x, C AS x > A.x"), t.schema)
    >>> data = sort_for_matching(t, q.partition_columns, q.order_keys)
    >>> found = find_matches_on_device(B.detect(), q, data)     # doctest: +SKIP
    >>> [(int(p), int(s), int(e)) for p, s, e in zip(found.partition, found.start, found.end)]
    ... # doctest: +SKIP
    [(1, 3, 5)]
    """
    plan = R._plan(query)
    n_parts = data.num_partitions
    if data.table.num_rows == 0:
        return MatchArrays.empty()
    icols, fcols, valid, fallback, codes = R._load_columns(plan, data, True)
    if fallback:
        return MatchArrays.from_matches(R._reference(query, data, range(n_parts)))
    d = backend.to_device
    ci, cf = plan.constants(True, codes)
    horizon, timed = np.zeros(1, dtype=np.int64), np.bool_(False)
    if query.time_limit is not None:    # per-row horizons from the host, read on the device
        from ..horizons import row_horizons
        horizon, timed = row_horizons(query, data), np.bool_(True)
    columns = (d(icols), d(fcols), d(valid), d(ci), d(cf), d(horizon), timed)
    program = (int(plan.start_state), d(plan.op), d(plan.out), d(plan.out2), d(plan.var),
               d(plan.excl), int(plan.skip_kind), d(plan.skip_set),
               d(np.array(plan.layout.init_i or [0], dtype=np.int64)),
               d(np.array(plan.layout.init_f or [0.0], dtype=np.float64)))
    from ..kernels import gpu_registers as GK
    kernel = device_kernel(backend, plan.source)
    arrays, label_offsets, failed = GK.run_on_device(
        backend, kernel, data.partition_offsets, program, columns, first_sizes, len(plan.op),
        max(1, len(plan.layout.init_i)), max(1, len(plan.layout.init_f)))
    h = backend.to_host
    part, number, start, end, labels, excluded = (h(a) for a in arrays)
    found = MatchArrays(part, number, start, end, h(label_offsets), labels, excluded)
    if not failed:
        return found
    # the reference engine decides those partitions, in partition order
    pieces, at = [], 0
    for p in failed:
        cut = int(np.searchsorted(found.partition, p))
        pieces.append(_matches_between(found, at, cut))
        pieces.append(MatchArrays.from_matches(R._reference(query, data, [p])))
        at = cut
    pieces.append(_matches_between(found, at, len(found)))
    return R._concat(pieces)


def first_sizes(lengths: np.ndarray) -> np.ndarray:
    """The first sizes of a thread's six buffers (kernels.registers.B_*)
    for partitions of ``lengths`` rows: (partitions x 6) int64."""
    lengths = np.asarray(lengths, dtype=np.int64)[:, None]
    per_row = np.array(SIZE_PER_ROW, dtype=np.int64)[None, :]
    cap = np.array(R.INITIAL_SIZES, dtype=np.int64)[None, :]
    return np.maximum(np.minimum(lengths * per_row, cap), 1)


def _matches_between(found: MatchArrays, a: int, b: int) -> MatchArrays:
    """Matches ``a`` to ``b - 1`` of ``found``, label offsets from 0."""
    la, lb = int(found.label_offsets[a]), int(found.label_offsets[b])
    return MatchArrays(found.partition[a:b], found.number[a:b], found.start[a:b],
                       found.end[a:b], found.label_offsets[a:b + 1] - la,
                       found.labels[la:lb], found.excluded[la:lb])


# ================================================================ compiling

_DEVICE_KERNELS: dict = {}


def device_kernel(backend: B.Backend, source: str):
    """The query's ``partition_kernel`` (kernels/gpu_registers.py) for the
    generated ``source``: the kernel bodies of kernels/registers.py and the
    generated APPLY / PRED in one module (engines/registers.py
    ``_kernel_text``), every function compiled with ``cuda.jit(device=True)``
    and the kernel with ``cuda.jit``. On a device, the helpers numba.cuda
    spells differently are bound to its math functions
    (``K.DEVICE_PRIMITIVES``); the simulator runs the bodies as they are.
    Cached per (source, simulated)."""
    key = (source, backend.simulated)
    hit = _DEVICE_KERNELS.get(key)
    if hit is not None:
        return hit
    from ..kernels import gpu_registers as GK
    cuda = backend.cuda
    header = [f"# numba.cuda, {'simulated' if backend.simulated else 'device'}",
              "from numba import cuda"]
    primitives = None if backend.simulated else K.DEVICE_PRIMITIVES
    text = R._kernel_text(source, header, primitives, extra=(GK.partition_kernel,))
    module, fresh = R._kernel_module("gpu_mr_registers_cuda", text)
    if fresh:
        for name, f in list(vars(module).items()):
            if isinstance(f, types.FunctionType) and name != "partition_kernel":
                setattr(module, name, cuda.jit(device=True)(f))
        module.partition_kernel = cuda.jit(module.partition_kernel)
    if len(_DEVICE_KERNELS) > 64:
        _DEVICE_KERNELS.clear()
    _DEVICE_KERNELS[key] = module.partition_kernel
    return module.partition_kernel
