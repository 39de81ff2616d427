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
from .reference import ReferenceEngine

ENGINE_NAMES = ("auto", "gpu", "cpu", "reference")

# Fastest first. The GPU engine arrives with its own issue; until then naming
# it is a clear UnsupportedError, never a silent fallback.
_AVAILABLE: dict = {"cpu": CpuEngine(), "reference": ReferenceEngine()}
_PLANNED = {"gpu": "the GPU engine is not part of this build yet"}


def choose(query: Optional[CheckedQuery], name: str) -> Engine:
    if not isinstance(name, str) or name not in ENGINE_NAMES:
        raise GpuMrError(f"unknown engine {name!r}; use one of {', '.join(ENGINE_NAMES)}",
                         code="bad_engine")
    if name == "auto":
        for candidate in ("gpu", "cpu", "reference"):
            engine = _AVAILABLE.get(candidate)
            if engine is not None and (query is None or engine.supports(query) is None):
                return engine
        raise AssertionError("the reference engine supports every query")
    engine = _AVAILABLE.get(name)
    if engine is None:
        raise UnsupportedError(f"engine={name!r} cannot run this query: {_PLANNED[name]}; "
                               f"use engine='auto' or 'reference'", engine=name,
                               construct="engine")
    reason = engine.supports(query) if query is not None else None
    if reason is not None:
        raise UnsupportedError(f"engine={name!r} cannot run this query: {reason}",
                               engine=name, construct=reason)
    return engine


__all__ = ["CpuEngine", "Engine", "Match", "MatchArrays", "ReferenceEngine", "choose",
           "ENGINE_NAMES"]
