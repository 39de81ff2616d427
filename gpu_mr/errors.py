"""One error hierarchy for everything gpu_mr rejects.

Every rejection of a query or of input data raises a subclass of
:class:`GpuMrError`. SQL errors carry a 1-based ``line`` and ``column`` of the
offending token; data errors carry the ``column_name``; unsupported constructs
carry the ``engine`` and the ``construct``. ``code`` is a short stable
identifier (``"unknown_variable"``, ``"expected_token"``, ...) that tests and
callers may match on; the message is for people.
"""

from __future__ import annotations


class GpuMrError(Exception):
    """Base of every error gpu_mr raises on purpose."""

    kind = "error"

    def __init__(self, message: str, *, code: str = "error"):
        super().__init__(message)
        self.message = message
        self.code = code

    def __str__(self) -> str:
        return self.message


class SqlError(GpuMrError):
    """An error located in SQL text (line and column are 1-based)."""

    def __init__(self, message: str, *, code: str, line: int | None = None,
                 column: int | None = None):
        located = f"{message} (line {line}, column {column})" if line else message
        super().__init__(located, code=code)
        self.reason = message
        self.line = line
        self.column = column


class SqlSyntaxError(SqlError):
    """The text is not valid MATCH_RECOGNIZE / SELECT syntax."""

    kind = "syntax"


class AnalysisError(SqlError):
    """The text parses but breaks a static rule (names, types, nesting, ...)."""

    kind = "analysis"


class UnsupportedError(GpuMrError):
    """An engine was asked to run a construct it cannot run."""

    kind = "unsupported"

    def __init__(self, message: str, *, engine: str, construct: str,
                 code: str = "unsupported"):
        super().__init__(message, code=code)
        self.engine = engine
        self.construct = construct


class DataError(GpuMrError):
    """The input data is unusable, or evaluation failed on a value."""

    kind = "data"

    def __init__(self, message: str, *, column: str | None = None,
                 code: str = "data"):
        super().__init__(message, code=code)
        self.column_name = column


class MatchRuntimeError(GpuMrError):
    """Matching itself failed at run time (e.g. AFTER MATCH SKIP to the first
    row of the current match, which would loop forever)."""

    kind = "runtime"

    def __init__(self, message: str, *, code: str = "runtime",
                 partition: object = None, row: int | None = None):
        super().__init__(message, code=code)
        self.partition = partition
        self.row = row


class SearchLimitError(MatchRuntimeError):
    """The reference engine's bounded search gave up (see docs/semantics.md)."""

    def __init__(self, message: str, **kw):
        super().__init__(message, code="search_limit", **kw)
