"""Numba kernels shared by the CPU and GPU engines (installed as ``gpu_mr.kernels``).

Each kernel body is a plain Python function compiled by ``numba.njit`` for the
CPU engine and by ``numba.cuda.jit(device=True)`` for the GPU engine. The
kernels arrive with the fast-engine issue; until then this package is empty.
"""
