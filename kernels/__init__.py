"""Numba kernels shared by the CPU and GPU engines (installed as ``gpu_mr.kernels``).

Each kernel body is a plain Python function compiled by ``numba.njit`` for the
CPU engine and (later) by ``numba.cuda.jit(device=True)`` for the GPU engine.

- ``scan``: the segmented leftmost-first DFA scan over per-row class ids (with
  the dead-state memo and the open end of a streamed partition), and path
  recovery from the DFA's thread lineage.
- ``segmented``: per-match running COUNT/SUM/MIN/MAX and FIRST/LAST landings for MEASURES.
- ``registers``: the register machine (a Pike VM whose threads carry registers)
  for DEFINEs that read the match so far.
"""

import numpy as _np


def restore_numpy_names_numba_cuda_reads() -> None:
    """numba-cuda (0.30 and older) registers an overload of ``np.row_stack``
    when it first compiles a kernel; numpy 2.5 removed that alias of
    ``np.vstack``, so every kernel compile raised AttributeError (seen on an
    H100 image with numba-cuda 0.30.4 and numpy 2.5.2). Put the alias back
    where it is missing: it is the function numpy itself named so before.
    Run when this package is imported, before any of its kernels compiles."""
    if not hasattr(_np, "row_stack"):
        _np.row_stack = _np.vstack


restore_numpy_names_numba_cuda_reads()


def compiled_once(build):
    """``build`` (a function returning ``{name: kernel}``) called on first
    use and its result kept: the device kernels' modules wrap their
    builders in it, so that importing one compiles nothing and numba.cuda
    compiles each kernel on its first launch."""
    built: dict = {}

    def kernels() -> dict:
        if not built:
            built.update(build())
        return built
    kernels.__doc__ = build.__doc__
    kernels.__name__ = build.__name__
    return kernels

