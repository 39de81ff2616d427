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
