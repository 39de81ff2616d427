"""``uncounted``: ``register_jitable`` for helpers that allocate nothing.

What: ``@uncounted`` compiles a kernel helper as numba's ``register_jitable``
does, with numba's reference counting turned off in its body
(``_nrt=False``); without numba it leaves the plain function as it is.
Why: numba counts references to the arrays a compiled function is called
with: a call it does not inline adds to and takes from each array's count,
two atomic operations an array (and two more for each view it slices),
plus the call itself. Helpers called per partition or per block
of rows paid that on every call, and LLVM then would not inline them: the
unanchored scan's stops at each partition's end (five arrays, four calls
at each stop of the four lanes; 1e7 rows in 100,000 partitions, the scan
on one thread: 33.6 -> 17.4 ms) and the sortedness check's helpers at
each block of rows holding a partition's end (and the views they slice;
the same rows, the check on two threads: 16.0 -> 10.3 ms). A helper
that allocates nothing has nothing to count. Not every helper gains: the
scan's four-lane loop, inlined once uncounted, lost its register
allocation (8.4 -> 9.1 ms on 100 partitions), and the anchored scan's
per-partition helpers measured no change; each is chosen by measurement.
Cost: such a helper must not allocate (numba then refuses to compile it).
"""

from __future__ import annotations

try:
    from numba.extending import register_jitable as _register_jitable
except ImportError:                  # the plain bodies still run without numba
    _register_jitable = None


def uncounted(fn):
    """``fn`` as a numba helper without reference counting (see above)."""
    if _register_jitable is None:
        return fn
    # a new decorator each time: numba's keeps its options in a dict it
    # empties on first use
    return _register_jitable(_nrt=False)(fn)
