"""Memory hints for the compiled CPU kernels: a software prefetch, and
stores that bypass the caches.

What: ``prefetch(array, index)`` asks the CPU to bring ``array[index]``'s
cache line in (LLVM's ``llvm.prefetch``: a read, kept in every level); it
never faults, so an index past the array is harmless. In plain Python (the
bodies run without numba, or under the CUDA simulator) and in CUDA device
code it does nothing.
Why: a kernel whose loop stops at data the CPU cannot predict (the walk
leaves each match at a row it learns only on reading it) cannot run its
loads ahead past that branch, so where matches are far apart each one waits
for its rows from memory; asking for them a few matches ahead overlaps
those waits (kernels/unanchored.py ``walk_measures``). And a loop that
reads two arrays in short bursts by turns can leave the hardware's own
prefetcher behind (kernels/frames_kernels.py: a block's offsets, then its
bytes).
``stream_store(array, index, value)`` writes ``array[index]`` with a
non-temporal store and ``store_fence()`` orders such stores before any
after it; plain stores in plain Python.
Why: an output written once, in order, and read only much later (the walk's
per-match values) need not be read into the caches first, as a plain store
does with each line it writes: half the memory traffic of those arrays.
"""

from __future__ import annotations

import platform


def prefetch(array, index) -> None:
    """Bring ``array[index]``'s cache line in (compiled); nothing here."""
    return None


def prefetch_range(array, lo, hi) -> None:
    """:func:`prefetch` every cache line of ``array[lo:hi]``."""
    for k in range(lo, hi, max(1, LINE_BYTES // array.itemsize)):
        prefetch(array, k)


def stream_store(array, index, value) -> None:
    """``array[index] = value``, compiled as a non-temporal store: the line
    is written to memory without being read into the caches first. For
    outputs written once, in order, and read much later; a kernel that
    uses it ends with :func:`store_fence`."""
    array[index] = value


def store_fence() -> None:
    """Make the :func:`stream_store` stores before it visible to every
    thread before any store after it (compiled: ``sfence`` on x86, which
    orders non-temporal stores only at such a fence; a sequentially
    consistent fence elsewhere)."""
    return None


# The cache line of the x86 and ARM server cores these kernels run on.
LINE_BYTES = 64


_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")

try:
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic, overload, register_jitable

    @intrinsic
    def _llvm_prefetch(typingctx, array, index):
        """``llvm.prefetch(&array[index], read, locality 3, data)``."""
        if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
            return None
        sig = types.void(array, index)

        def codegen(context, builder, signature, args):
            array_type = signature.args[0]
            view = context.make_array(array_type)(context, builder, args[0])
            # no bounds check: a prefetch past the end is dropped, never faults
            pointer = cgutils.get_item_pointer(context, builder, array_type, view, [args[1]],
                                               wraparound=False, boundscheck=False)
            i32 = ir.IntType(32)
            fn_type = ir.FunctionType(ir.VoidType(), [pointer.type, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, fn_type, "llvm.prefetch.p0")
            builder.call(fn, [pointer, ir.Constant(i32, 0), ir.Constant(i32, 3),
                              ir.Constant(i32, 1)])
            return context.get_dummy_value()
        return sig, codegen

    @intrinsic
    def _llvm_stream_store(typingctx, array, index, value):
        if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
            return None
        sig = types.void(array, index, value)

        def codegen(context, builder, signature, args):
            array_type = signature.args[0]
            view = context.make_array(array_type)(context, builder, args[0])
            pointer = cgutils.get_item_pointer(context, builder, array_type, view, [args[1]],
                                               wraparound=False, boundscheck=False)
            item = context.cast(builder, args[2], signature.args[2], array_type.dtype)
            store = builder.store(item, pointer)
            store.set_metadata("nontemporal", builder.module.add_metadata(
                [ir.Constant(ir.IntType(32), 1)]))
            return context.get_dummy_value()
        return sig, codegen

    @overload(stream_store, target="cpu")
    def _stream_store_typed(array, index, value):
        return lambda array, index, value: _llvm_stream_store(array, index, value)

    @intrinsic
    def _llvm_fence(typingctx):
        sig = types.void()

        def codegen(context, builder, signature, args):
            if _X86:
                # sfence: LLVM lowers a seq_cst fence to a locked add there,
                # which the manuals do not promise orders these stores
                fn = cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse.sfence")
                builder.call(fn, [])
            else:
                builder.fence("seq_cst")
            return context.get_dummy_value()
        return sig, codegen

    @overload(store_fence, target="cpu")
    def _store_fence_typed():
        return lambda: _llvm_fence()

    @overload(prefetch, target="cpu")
    def _prefetch_typed(array, index):
        return lambda array, index: _llvm_prefetch(array, index)

    # every other target: nothing (numba takes the cpu one above where it
    # applies, the most specific); kernels/gpu_measures.py also binds the
    # name to a device no-op in its copies of the bodies, so that its
    # kernels do not depend on how a CUDA target picks overloads
    @overload(prefetch, target="generic")
    def _prefetch_elsewhere(array, index):
        return lambda array, index: None

    prefetch_range = register_jitable(prefetch_range)
except ImportError:                  # the plain body still runs without numba
    pass
