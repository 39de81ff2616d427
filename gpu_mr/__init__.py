"""gpu_mr: SQL row pattern recognition (MATCH_RECOGNIZE) for big historical data.

Public API (DESIGN.md §2): :func:`match_recognize`, :func:`sql`, :func:`compile`,
:func:`esl` (ESL-TS sequence queries), :func:`match_recognize_batches` (sorted
record batches in, output pieces out, partitions spanning batches) and the error hierarchy in :mod:`gpu_mr.errors`.
"""

from . import errors
from .api import CompiledQuery, compile, match_recognize, sql
from .esl import esl
from .errors import GpuMrError
from .streaming import match_recognize_batches

__version__ = "0.1.0"

__all__ = ["match_recognize", "match_recognize_batches", "sql", "compile", "esl", "CompiledQuery", "errors", "GpuMrError",
           "__version__"]
