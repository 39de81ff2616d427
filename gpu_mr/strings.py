"""String columns built from a short table of strings and an index per row.

What: :func:`repeat_strings` is ``small.take(index)`` for a short string or
binary array without NULLs (partition keys, variable names, the constants a
CASE chooses among) and a long index, NULL where a validity mask says so.
Why: Arrow's take copies each value through a generic path (about 4 ms a
million outputs here); kernels/gather.py copies the bytes by runs
(``repeat_strings``) or one output at a time from a zero-padded table
(``take_strings``), on all cores.
Cost: one pass over the outputs (two for one output at a time: the bytes
of each piece, then the copy).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa

from .frames import _string_piece
from .kernels import buffers as B
from .kernels import gather as G
from .kernels.threads import run_pieces, split_even

# Below this many outputs the plain bodies (about a microsecond a value) cost
# at most a few ms and never wait for numba to load the kernels.
MIN_ROWS = 2_000


def repeat_strings(small: pa.Array, index: np.ndarray, valid: Optional[np.ndarray] = None,
                   runs: bool = True, compiled: Optional[bool] = None) -> pa.Array:
    """``small.take(index)`` for a short string or binary array without
    NULLs (partition keys, variable names) and a long ``index`` (anything
    where ``valid`` is False: NULL): bytes copied by a kernel instead of
    Arrow's take. ``runs``: the index holds long runs of one value (copied
    by doubling); else each output is copied on its own, in pieces on all
    cores."""
    t = small.type
    if valid is not None:
        index = np.where(valid, index, 0)
    piece = _string_piece(small)
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    kernels = G.kernels(G.use_compiled(len(index), MIN_ROWS) if compiled is None else compiled)
    per_output = not runs and kernels is not G.DRIVERS
    lengths = np.diff(piece.offsets).astype(np.int64)
    if per_output:          # the bytes of each piece of outputs: where its copy starts
        pieces = split_even(len(index)) or [(0, 0)]
        sizes = run_pieces(lambda a, b: kernels[2](lengths, index, a, b), pieces)
        total = int(sum(sizes))
    else:
        index = index.astype(np.int64, copy=False)
        total = int(np.bincount(index, minlength=len(lengths)) @ lengths) if len(index) else 0
    if not large and total >= 2**31:
        return small.take(pa.array(index.astype(np.int64), pa.int64(),
                                   mask=None if valid is None else ~valid))
    out_offsets = B.empty(len(index) + 1, np.int64 if large else np.int32)
    out_data = B.empty(total, np.uint8)
    if per_output:
        bounds = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        width = int(lengths.max()) if len(lengths) else 0
        padded = np.zeros((len(lengths), width), np.uint8)
        for i in range(len(lengths)):
            padded[i, :lengths[i]] = piece.data[piece.offsets[i]:piece.offsets[i + 1]]
        padded = padded.ravel()
        run_pieces(lambda a, b: kernels[3](
            padded, width, lengths, index, a, b, bounds[pieces.index((a, b))],
            bounds[pieces.index((a, b)) + 1], out_offsets, out_data), pieces)
    else:
        kernels[1](piece.offsets, piece.data, index, out_offsets, out_data)
    nulls = 0 if valid is None else len(index) - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(t, len(index), [bitmap, pa.py_buffer(out_offsets),
                                                 pa.py_buffer(out_data)], null_count=nulls)
