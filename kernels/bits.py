"""A float64 from its 64 bits, for the compiled CPU kernels.

What: ``as_float(bits)`` is the float64 whose IEEE bits are the int64
``bits`` (LLVM's ``bitcast``: no instruction at all in a register);
``as_key(bits, keys)`` the same for a float64 key array, the bits
themselves for an int64 one. In plain Python they go through numpy's view
of the scalar.
Why: a kernel that must ignore some of the values it reads without a
branch masks them, and only an integer mask is left alone by LLVM: a
choice between a loaded value and 0 (``x if keep else 0.0``, or ``x &
-(k < n)`` where LLVM can see the comparison) is turned back into a branch
around the load, which the CPU mispredicts where the data decides
(kernels/segmented.py ``segment_sum_float_blocks``). So the kernel reads
the values' bits, masks them with a word LLVM cannot see (loaded from a
table), and makes the float here.
"""

from __future__ import annotations

import numpy as np


def as_float(bits) -> float:
    """The float64 with the IEEE bits of int64 ``bits``.

    >>> as_float(0), as_float(0x3FF0000000000000)
    (0.0, 1.0)
    """
    return float(np.int64(bits).view(np.float64))


def as_key(bits, keys):
    """The value of ``keys``' type (float64 or int64) with the 64 bits
    ``bits``: :func:`as_float` for floats, ``bits`` itself for integers.

    >>> as_key(0x3FF0000000000000, np.zeros(1)), as_key(7, np.zeros(1, np.int64))
    (1.0, 7)
    """
    if keys.dtype.kind == "f":
        return as_float(bits)
    return int(bits)


try:
    from numba.core import types
    from numba.extending import intrinsic, overload

    @intrinsic
    def _bitcast_float(typingctx, bits):
        """``bitcast i64 -> double``."""
        if not isinstance(bits, types.Integer) or bits.bitwidth != 64:
            return None
        sig = types.float64(bits)

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], context.get_value_type(types.float64))
        return sig, codegen

    @overload(as_float, target="cpu")
    def _as_float_typed(bits):
        return lambda bits: _bitcast_float(bits)

    @overload(as_key, target="cpu")
    def _as_key_typed(bits, keys):
        if isinstance(keys.dtype, types.Float):
            return lambda bits, keys: _bitcast_float(bits)
        return lambda bits, keys: bits
except ImportError:                  # the plain body still runs without numba
    pass
