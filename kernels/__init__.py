"""Numba kernels shared by the CPU and GPU engines (installed as ``gpu_mr.kernels``).

Each kernel body is a plain Python function compiled by ``numba.njit`` for the
CPU engine and (later) by ``numba.cuda.jit(device=True)`` for the GPU engine.

- ``scan``: the segmented leftmost-first DFA scan over per-row class ids.
- ``segmented``: per-match running COUNT/SUM/MIN/MAX and FIRST/LAST landings for MEASURES.
"""
