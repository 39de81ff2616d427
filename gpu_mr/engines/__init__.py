"""Engines: each turns a checked query and sorted input into matches.

``choose(query, name)`` resolves ``engine=`` the way the public API promises:
``"auto"`` takes the first engine, fastest first, whose ``supports`` returns
None; naming an engine that cannot run the query raises UnsupportedError with
its reason.
"""

from __future__ import annotations

from typing import Optional

from ..analysis import CheckedQuery
from ..errors import GpuMrError, UnsupportedError
from .base import Engine, Match, MatchArrays
from .cpu import CpuEngine
from .gpu import GpuEngine
from .reference import ReferenceEngine

ENGINE_NAMES = ("auto", "gpu", "cpu", "reference")

# Fastest first. The GPU engine shares the CPU engine's plan caches for the
# queries it hands to the register machine.
_CPU = CpuEngine()
_AVAILABLE: dict = {"gpu": GpuEngine(_CPU), "cpu": _CPU, "reference": ReferenceEngine()}


def choose(query: Optional[CheckedQuery], name: str) -> Engine:
    if not isinstance(name, str) or name not in ENGINE_NAMES:
        raise GpuMrError(f"unknown engine {name!r}; use one of {', '.join(ENGINE_NAMES)}",
                         code="bad_engine")
    if name == "auto":
        for candidate in ("gpu", "cpu", "reference"):
            engine = _AVAILABLE[candidate]
            if auto_skips(engine):
                continue
            if query is None or engine.supports(query) is None:
                return engine
        raise AssertionError("the reference engine supports every query")
    engine = _AVAILABLE[name]
    reason = engine.supports(query) if query is not None else None
    if reason is not None:
        raise UnsupportedError(f"engine={name!r} cannot run this query: {reason}",
                               engine=name, construct=reason)
    return engine


def auto_skips(engine) -> Optional[str]:
    """Why ``auto`` passes over an engine that could run the query: the GPU
    engine under numba's CUDA simulator is for tests, never for speed."""
    if getattr(engine, "simulated", False):
        return "the CUDA simulator (NUMBA_ENABLE_CUDASIM=1) is for tests; name engine='gpu'"
    return None


__all__ = ["CpuEngine", "GpuEngine", "Engine", "Match", "MatchArrays", "ReferenceEngine", "choose",
           "ENGINE_NAMES"]
