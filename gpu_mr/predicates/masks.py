"""Row-local DEFINE conditions compiled to vectorised boolean masks.

What: a DEFINE condition that reads only the current row, PREV/NEXT with
constant offsets and constants (``analysis._history_dependent`` is False for
it) has the same value at a row whatever match is being built. This module
evaluates such a condition once for all rows of a :class:`~gpu_mr.frames.
SortedInput` with whole-column numpy / pyarrow.compute operations and returns
a boolean mask (True where the condition holds; NULL and False give False),
and bit-packs the masks of every variable into the per-row class ids the DFA
scan reads (pattern/dfa.py, kernels/scan.py).
Why: DESIGN.md §5, "evaluate them once for all rows as boolean masks,
vectorised" -- this is where the fast engines' speed comes from, and the
interpreter (interpreter.py) remains THE semantics: every operation here
reproduces it exactly (three-valued logic, truncating integer division,
DataError on integer overflow and division by zero, IEEE doubles, ROUND half
away from zero, the CAST rules, LIKE, string functions, date and interval
arithmetic) and the tests compare the two row by row.

How: each expression node becomes a column ``(values, valid)``: int64 for
BIGINT, DATE (days since the epoch), TIMESTAMP and INTERVAL (nanoseconds),
INTERVAL YEAR TO MONTH (months) and DECIMAL (the unscaled integer at the
column's own scale, so decimals are exact integers, never float64); float64
for DOUBLE; bool for BOOLEAN; a pyarrow large_string array for VARCHAR. Errors
are values too: a column may carry, per row, the id of the first error its
evaluation raises (the interpreter's evaluation order: left before right,
AND/OR short circuits, CASE branches and IN items only where reached), so a
division by zero in a CASE branch that is never taken raises nothing. When
the mask is asked for, the first failing row's error is rebuilt by calling
the interpreter's own operation on that row's values, so messages match.

Exactness: anything that cannot be computed exactly is refused, never
approximated. Statically, :func:`supports` returns the reason (a dry run of
the evaluator over an empty table of the query's schema, so the check and the
evaluator cannot disagree). Data-dependent limits -- a value that does not fit
the int64 form (uint64 above 2**63-1, a timestamp in seconds beyond the years
1677-2262 in nanoseconds, decimals wider than 18 digits or scaled past int64,
timestamp/interval arithmetic leaving int64, a DECIMAL converted to DOUBLE
whose unscaled value exceeds 2**53) -- raise :class:`MaskUnsupported` from
``evaluate`` only when such a row is actually used; the caller then falls
back to the interpreter. Object arrays (per-element Python calls, no Python
loop) are used in two places only: LN/LOG10/EXP/POWER call Python's ``math``
functions through ``np.frompyfunc`` (numpy's SIMD libm differs from the C
library in the last bit on AVX-512 machines), and LOWER/UPPER of strings that
are not pure ASCII (Python's full Unicode case mapping: 'ß' -> 'SS', final
sigma).

Cost: O(rows) per node, a handful of numpy passes each; strings cost what
their pyarrow kernels cost; SUBSTR is a byte-level ragged gather. Memory is a
few arrays of ``rows`` per live node. The common case is kept near one numpy
pass per comparison: a single-chunk column without NULLs is read zero-copy
with one shared read-only all-True validity (no fill_null, no validity
``&``); the masks of a MaskSet share loaded columns and PREV/NEXT of columns;
and a PREV/NEXT of a numpy column is lazy, so comparing it with a column of
the same form reads two offset slices of the base array (``x[k:] <
x[:-k]``) instead of materialising a shifted copy. numpy only for now: the array calls are
the cupy subset, so a device backend can take the same code path later
(DESIGN.md §6).
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import interpreter as I
from ..analysis import CheckedQuery, _history_dependent
from ..errors import DataError, GpuMrError, UnsupportedError
from ..frames import SortedInput
from ..syntax import ast as A
from ..syntax import types as T

__all__ = ["MAX_VARIABLES", "MaskProgram", "MaskResult", "MaskSet", "MaskUnsupported",
           "compile_mask", "compile_masks", "evaluate_masks", "pack_classes", "supports",
           "supports_query"]

ENGINE = "masks"
# Class ids are uint32 bitmasks (bit i = primary variable i), the alphabet of
# the DFA; 32 variables is far beyond any real pattern.
MAX_VARIABLES = 32

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
DAY = 86400 * 10**9
# The days (since 1970-01-01) of the dates Python can represent, 0001-01-01 .. 9999-12-31.
DATE_MIN_DAYS = (_dt.date(1, 1, 1) - T.EPOCH_DATE).days
DATE_MAX_DAYS = (_dt.date(9999, 12, 31) - T.EPOCH_DATE).days
# A decimal's unscaled int64 converts to the correctly rounded double with one
# IEEE division when the integer and the power of ten are both exact doubles.
_EXACT_INT = 2**53
_EXACT_POW10 = 22
# The first double >= 10**28: ROUND/CAST of a double goes through a Decimal
# quantize that fails beyond 28 digits (the interpreter's decimal context).
_QUANTIZE_LIMIT = float(10**28) if int(float(10**28)) >= 10**28 else \
    float(np.nextafter(float(10**28), np.inf))
_POW10_U64 = np.array([10**k for k in range(20)], dtype=np.uint64)

_INT_KINDS = ("BIGINT", "DATE", "TIMESTAMP", "INTERVAL", "INTERVAL_YM", "DECIMAL", "UNKNOWN")
_COMPARISONS = ("=", "<>", "<", "<=", ">", ">=")


class MaskUnsupported(UnsupportedError):
    """A row's data cannot be represented exactly by the mask program (see
    the module docstring); evaluate the condition with the interpreter."""

    def __init__(self, message: str):
        super().__init__(message, engine=ENGINE, construct="data", code="mask_unsupported")


class _Reject(Exception):
    """Internal: a construct the mask compiler does not vectorise (the reason)."""


# =====================================================================
# Public API
# =====================================================================

def supports(expr: A.Expr, defining_var: str, query: CheckedQuery) -> Optional[str]:
    """Why ``expr`` (the DEFINE of ``defining_var``) cannot become a mask, or None.

    Parameters
    ----------
    expr : gpu_mr.syntax.ast.Expr
        A checked (typed) DEFINE condition of ``query``.
    defining_var : str
        The primary pattern variable it defines.
    query : CheckedQuery
        Its query; the input schema decides how columns are read.

    Returns
    -------
    str or None
        None when :func:`compile_mask` accepts it, else the reason.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from gpu_mr.analysis import analyze
    >>> from gpu_mr.syntax import parse_clause
    >>> q = analyze(parse_clause("ORDER BY t MEASURES COUNT(*) AS n PATTERN (A B) "
    ...     "DEFINE A AS x > PREV(x), B AS x > A.x"),
    ...     pa.schema([("t", pa.int64()), ("x", pa.int64())]))
    >>> supports(q.defines["A"], "A", q) is None
    True
    >>> supports(q.defines["B"], "B", q)      # doctest: +ELLIPSIS
    'not row-local: it reads the match so far (other variables, ...)'
    """
    reason = _static_reason(expr, defining_var)
    if reason is not None:
        return reason
    missing = [n.resolved for n in expr.walk()
               if isinstance(n, A.ColumnRef) and n.resolved not in query.input_schema.names]
    if missing:
        return f"the input schema does not name column {missing[0]} (compiled without data)"
    empty = SortedInput(query.input_schema.empty_table(), np.zeros(1, dtype=np.int64),
                        np.zeros(0, dtype=np.int64), True)
    try:
        with np.errstate(all="ignore"):
            _Eval(_Context(empty, _default_now()), query, defining_var).eval(expr)
    except _Reject as r:
        return str(r)
    except (pa.ArrowException, ValueError) as exc:     # e.g. a pattern RE2 refuses
        return f"cannot vectorise {expr.to_sql()}: {exc}"
    return None


def compile_mask(expr: A.Expr, defining_var: str, query: CheckedQuery) -> "MaskProgram":
    """Compile one row-local DEFINE condition into a :class:`MaskProgram`.

    Raises
    ------
    UnsupportedError
        With the reason from :func:`supports` when the condition cannot be
        evaluated exactly as a mask.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from gpu_mr.analysis import analyze
    >>> from gpu_mr.frames import sort_for_matching
    >>> from gpu_mr.syntax import parse_clause
    >>> t = pa.table({"p": [1, 1, 1, 2, 2], "x": [3, 1, 2, 5, None]})
    >>> q = analyze(parse_clause("PARTITION BY p ORDER BY x MEASURES COUNT(*) AS n "
    ...                          "PATTERN (A+) DEFINE A AS x > PREV(x)"), t.schema)
    >>> data = sort_for_matching(t, q.partition_columns, q.order_keys)
    >>> compile_mask(q.defines["A"], "A", q).evaluate(data).tolist()
    [False, True, True, False, False]
    """
    reason = supports(expr, defining_var, query)
    if reason is not None:
        raise UnsupportedError(f"DEFINE {defining_var} cannot be a mask: {reason}",
                               engine=ENGINE, construct=expr.to_sql())
    columns = tuple(sorted({n.resolved for n in expr.walk() if isinstance(n, A.ColumnRef)}))
    return MaskProgram(query, defining_var, expr, columns)


@dataclass(frozen=True)
class MaskResult:
    """A mask with its pending errors.

    ``holds[r]`` is True where the condition is True at row ``r``; ``failed[r]``
    where evaluating it at ``r`` raises (``holds`` is then False). Engines that
    evaluate a DEFINE only at the rows their search reaches call
    :meth:`error` for a reached failed row; :meth:`check` raises for the
    first failed row, as :meth:`MaskProgram.evaluate` does.
    """
    holds: np.ndarray
    failed: np.ndarray
    _err: Optional[np.ndarray] = field(default=None, repr=False)
    _erow: Optional[np.ndarray] = field(default=None, repr=False)
    _sources: list = field(default_factory=list, repr=False)

    @property
    def unsupported(self) -> np.ndarray:
        """Rows whose failure is a :class:`MaskUnsupported` (not a data error)."""
        if self._err is None:
            return np.zeros(len(self.holds), dtype=bool)
        flags = np.array([False] + [u for u, _ in self._sources], dtype=bool)
        return flags[self._err]

    def error(self, row: int) -> Optional[GpuMrError]:
        """The exception evaluating the condition at ``row`` raises, or None."""
        if self._err is None or not self._err[row]:
            return None
        _, make = self._sources[int(self._err[row]) - 1]
        return make(int(self._erow[row]))

    def check(self) -> np.ndarray:
        """``holds``, after raising for failed rows: MaskUnsupported first
        (the interpreter must decide those rows), else the first DataError."""
        if self._err is None:
            return self.holds
        unsupported = np.flatnonzero(self.unsupported)
        rows = unsupported if unsupported.size else np.flatnonzero(self.failed)
        raise self.error(int(rows[0]))


@dataclass(frozen=True)
class MaskProgram:
    """One compiled row-local DEFINE condition. Immutable; evaluate it on any
    :class:`SortedInput` of the query's schema, as often as needed."""
    query: CheckedQuery
    var: str
    expr: A.Expr
    columns: tuple                 # input columns it reads

    def __str__(self) -> str:
        reads = ", ".join(self.columns) or "no column"
        return f"mask {A.quote_ident(self.var)} := {self.expr.to_sql()}  [reads {reads}]"

    def evaluate(self, data: SortedInput, *, now: Optional[dict] = None) -> np.ndarray:
        """Boolean mask, one entry per row of ``data.table``: True where the
        condition holds (NULL and False give False).

        Parameters
        ----------
        now : dict, optional
            The values of CURRENT_TIMESTAMP, LOCALTIMESTAMP and CURRENT_DATE, in
            the interpreter's form (``Interpreter.now``); taken from the clock
            when omitted.

        Raises
        ------
        DataError
            When the condition raises at some row (division by zero, overflow,
            a bad cast), as the interpreter would there.
        MaskUnsupported
            When a row's data cannot be represented exactly (see the module
            docstring); evaluate with the interpreter instead.
        """
        return self.evaluate_detailed(data, now=now).check()

    def evaluate_detailed(self, data: SortedInput, *, now: Optional[dict] = None,
                          _ctx: Optional["_Context"] = None) -> MaskResult:
        """The mask and, per row, whether (and with which error) it fails;
        raises nothing for data. See :class:`MaskResult`."""
        ctx = _ctx if _ctx is not None else _Context(data, now or _default_now())
        try:
            with np.errstate(all="ignore"):
                v = _Eval(ctx, self.query, self.var).eval(self.expr)
        except _Reject as r:          # the data's types differ from the query's schema
            raise UnsupportedError(f"DEFINE {self.var} cannot be a mask: {r}", engine=ENGINE,
                                   construct=self.expr.to_sql()) from None
        holds = v.valid & v.values if v.kind == "BOOLEAN" else np.zeros(ctx.n, dtype=bool)
        if v.err is None:
            return MaskResult(holds, np.zeros(ctx.n, dtype=bool))
        failed = v.err != 0
        return MaskResult(holds & ~failed, failed, v.err, v.erow, ctx.sources)


def supports_query(query: CheckedQuery) -> Optional[str]:
    """Why the DEFINEs of ``query`` cannot all be masks, or None."""
    if len(query.primary_vars) > MAX_VARIABLES:
        return (f"{len(query.primary_vars)} pattern variables; class ids hold at most "
                f"{MAX_VARIABLES}")
    for var, expr in query.defines.items():
        reason = supports(expr, var, query)
        if reason is not None:
            return f"DEFINE {A.quote_ident(var)}: {reason}"
    return None


@dataclass(frozen=True)
class MaskSet:
    """The mask programs of every DEFINE of a query whose DEFINEs are all
    row-local, and the packing of their results into class ids.

    Class id layout: ``uint32`` per row, bit ``i`` set where primary variable
    ``i`` (``query.primary_vars[i]``, order of first appearance in PATTERN, the
    variable id everywhere) may be mapped to the row: its DEFINE holds there,
    or it has no DEFINE (always true). Bits at and above
    ``len(primary_vars)`` are zero.
    """
    query: CheckedQuery
    programs: dict                 # primary variable -> MaskProgram (DEFINEd ones)

    def evaluate_detailed(self, data: SortedInput, *, now: Optional[dict] = None) -> dict:
        """Primary variable -> :class:`MaskResult` (None: no DEFINE). Columns
        are read once for all programs."""
        ctx = _Context(data, now or _default_now())
        return {v: (self.programs[v].evaluate_detailed(data, _ctx=ctx) if v in self.programs
                    else None) for v in self.query.primary_vars}

    def evaluate(self, data: SortedInput, *, now: Optional[dict] = None) -> tuple:
        """``(masks, class_ids)``: primary variable -> bool mask (all True
        without a DEFINE), and the uint32 class id of every row.

        Raises DataError / MaskUnsupported as :meth:`MaskProgram.evaluate`.
        """
        n = data.table.num_rows
        masks = {}
        for v, r in self.evaluate_detailed(data, now=now).items():
            masks[v] = np.ones(n, dtype=bool) if r is None else r.check()
        return masks, pack_classes([masks[v] for v in self.query.primary_vars])


def compile_masks(query: CheckedQuery) -> MaskSet:
    """Compile every DEFINE of ``query`` (all must be row-local).

    Raises
    ------
    UnsupportedError
        With the reason from :func:`supports_query`.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from gpu_mr.analysis import analyze
    >>> from gpu_mr.frames import sort_for_matching
    >>> from gpu_mr.syntax import parse_clause
    >>> t = pa.table({"x": [1, 5, 2, 7]})
    >>> q = analyze(parse_clause("ORDER BY x MEASURES COUNT(*) AS n PATTERN (A B C) "
    ...                          "DEFINE A AS x > 1, C AS x < NEXT(x)"), t.schema)
    >>> masks, classes = compile_masks(q).evaluate(sort_for_matching(t, (), ()))
    >>> classes.tolist()          # bit 0: A, bit 1: B (no DEFINE), bit 2: C
    [6, 3, 7, 3]
    """
    reason = supports_query(query)
    if reason is not None:
        raise UnsupportedError(f"the DEFINEs cannot all be masks: {reason}", engine=ENGINE,
                               construct="DEFINE")
    return MaskSet(query, {v: compile_mask(e, v, query) for v, e in query.defines.items()})


def evaluate_masks(query: CheckedQuery, data: SortedInput, *, now: Optional[dict] = None) -> tuple:
    """``compile_masks(query).evaluate(data)``: ``(masks, class_ids)``."""
    return compile_masks(query).evaluate(data, now=now)


def pack_classes(masks: list) -> np.ndarray:
    """Bit-pack boolean masks (variable ``i`` -> bit ``i``) into uint32 class ids."""
    if len(masks) > MAX_VARIABLES:
        raise ValueError(f"at most {MAX_VARIABLES} masks fit a uint32 class id")
    n = len(masks[0]) if masks else 0
    out = np.zeros(n, dtype=np.uint32)
    for i, m in enumerate(masks):
        out |= np.asarray(m, dtype=np.uint32) << np.uint32(i)
    return out


# =====================================================================
# Static checks
# =====================================================================

def _static_reason(expr: A.Expr, var: str) -> Optional[str]:
    if _history_dependent(expr, var):
        return ("not row-local: it reads the match so far (other variables, FIRST/LAST, "
                "aggregates or CLASSIFIER inside PREV/NEXT)")
    for n in expr.walk():
        if isinstance(n, A.MatchNumber):
            return "MATCH_NUMBER() depends on the match being built, not on the row alone"
        if isinstance(n, A.Subquery):
            return "an unevaluated subquery"
        if isinstance(n, A.Navigation) and n.kind not in ("PREV", "NEXT"):
            return f"{n.kind} is a logical offset inside the match"
    return None


def _default_now() -> dict:
    """CURRENT_TIMESTAMP and friends as the interpreter computes them."""
    now = _dt.datetime.now(_dt.timezone.utc)
    local = _dt.datetime.now()
    return {"CURRENT_TIMESTAMP": I._to_ns(now.replace(tzinfo=None)),
            "LOCALTIMESTAMP": I._to_ns(local), "CURRENT_DATE": local.date()}


# =====================================================================
# Columns with validity and deferred errors
# =====================================================================

class _Vec:
    """A column: ``values`` (see the module docstring for the form of each
    kind), ``valid`` (False = NULL), the decimal ``scale``, and deferred
    errors: ``err[r]`` is 0 or 1 + the index of the error source that
    evaluating the expression at row ``r`` raises first; ``erow[r]`` the row of
    the source's operand columns where it happened (PREV/NEXT move errors).

    A PREV/NEXT of a numpy column is lazy: ``moved`` is ``(base, k, prev)``
    and ``values`` is ``_shift(base, k, prev)``, built on first use, so a
    comparison with the current row can read two slices of ``base`` instead
    (:func:`_compare_direct`). Columns are shared (the context caches them),
    so no array of a _Vec is ever written in place."""
    __slots__ = ("kind", "_values", "valid", "scale", "err", "erow", "moved")

    def __init__(self, kind: str, values, valid: np.ndarray, scale: int = 0,
                 err: Optional[np.ndarray] = None, erow: Optional[np.ndarray] = None,
                 moved: Optional[tuple] = None):
        self.kind = kind
        self._values = values
        self.valid = valid
        self.scale = scale
        self.err = err
        self.erow = erow
        self.moved = moved

    @property
    def values(self):
        if self._values is None and self.moved is not None:
            base, k, prev = self.moved
            self._values = _shift(base, k, prev)
            self.moved = None
        return self._values

    def __repr__(self) -> str:
        lazy = " (moved)" if self._values is None and self.moved is not None else ""
        return f"_Vec({self.kind}, scale={self.scale}{lazy})"


def _merge(*parts) -> tuple:
    """The first error per row, in evaluation order. Each part is
    ``(thing, where)``: ``thing`` a _Vec or an ``(err, erow)`` pair, ``where``
    None or the rows where that step is evaluated at all."""
    err = erow = None
    for thing, where in parts:
        e, r = (thing.err, thing.erow) if isinstance(thing, _Vec) else thing
        if e is None:
            continue
        if where is not None:
            e = np.where(where, e, np.int32(0))
        if err is None:
            err, erow = e, r
            continue
        take = (err == 0) & (e != 0)
        if take.any():
            err = np.where(take, e, err)
            erow = np.where(take, r, erow)
    if err is not None and not err.any():
        return None, None
    return err, erow


_NOERR = (None, None)


class _Context:
    """What every mask evaluation over one table shares: columns as read,
    partition bounds, error sources, the clock."""

    def __init__(self, data: SortedInput, now: dict):
        self.table = data.table
        self.n = data.table.num_rows
        self.offsets = np.asarray(data.partition_offsets, dtype=np.int64)
        self.now = now
        self._rows = None
        self._all_valid = None
        self.columns: dict = {}
        self.moved: dict = {}           # (column, k, prev) -> PREV/NEXT of the column
        self.sources: list = []         # (is_unsupported, row -> exception)
        self._edges: dict = {}

    @property
    def all_valid(self) -> np.ndarray:
        """The validity of a column without NULLs: one shared read-only
        all-True array (``valid is ctx.all_valid`` tells such columns apart)."""
        if self._all_valid is None:
            self._all_valid = np.ones(self.n, dtype=bool)
            self._all_valid.setflags(write=False)
        return self._all_valid

    def fail(self, bad: Optional[np.ndarray], make: Callable, unsupported: bool = False) -> tuple:
        """Error pair for the rows ``bad``; ``make(row)`` builds the exception."""
        if bad is None or not bad.any():
            return _NOERR
        self.sources.append((unsupported, make))
        return np.where(bad, np.int32(len(self.sources)), np.int32(0)), self.rows

    @property
    def rows(self) -> np.ndarray:
        if self._rows is None:
            self._rows = np.arange(self.n, dtype=np.int64)
        return self._rows

    def unsupported(self, bad, message: str) -> tuple:
        return self.fail(bad, lambda row: MaskUnsupported(message), unsupported=True)

    def edge_rows(self, k: int, prev: bool) -> np.ndarray:
        """Rows with no row ``k`` rows before (``prev``) or after them in
        their partition: the first (last) ``min(k, size)`` rows of each."""
        key = (k, prev)
        hit = self._edges.get(key)
        if hit is None:
            sizes = np.diff(self.offsets)
            m = np.minimum(sizes, k)
            base = self.offsets[:-1] if prev else self.offsets[1:] - m
            within = np.arange(int(m.sum()), dtype=np.int64) - np.repeat(np.cumsum(m) - m, m)
            hit = self._edges[key] = np.repeat(base, m) + within
        return hit

    def column(self, name: str, expected: T.SqlType) -> _Vec:
        hit = self.columns.get(name)
        if hit is None:
            hit = self.columns[name] = _load(self, name, self.table.column(name), expected)
        return hit


def _load(ctx: _Context, name: str, col, expected: T.SqlType) -> _Vec:
    """An Arrow column in the mask form (see the module docstring)."""
    n = ctx.n
    chunks = [c.dictionary_decode() if pa.types.is_dictionary(c.type) else c for c in col.chunks]
    t = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        chunks = [c.cast(pa.large_string()) for c in chunks]
        t = pa.large_string()
    if len(chunks) == 1:
        arr = chunks[0]
    else:
        arr = pa.concat_arrays(chunks) if chunks else pa.array([], t)
    sql = T.from_arrow_type(t)
    if sql is None or sql.kind != expected.kind:
        raise _Reject(f"column {name} has type {t}, not the {expected} the query was "
                      f"analysed with")
    valid = _validity(ctx, arr)
    kind = sql.kind
    if kind == "VARCHAR":
        return _Vec(kind, arr, valid)
    if kind == "UNKNOWN":
        return _Vec(kind, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool))
    if kind == "BOOLEAN":
        return _Vec(kind, _bool_values(arr), valid)
    if kind == "DOUBLE":
        values = _fill(arr.cast(pa.float64()), 0).to_numpy(zero_copy_only=False)
        return _Vec(kind, values.astype(np.float64, copy=False), valid)
    if kind == "BIGINT":
        raw = _fill(arr, 0).to_numpy(zero_copy_only=False)
        err = _NOERR
        if raw.dtype == np.uint64:
            err = ctx.unsupported(valid & (raw > np.uint64(INT64_MAX)),
                                  f"column {name} holds a uint64 value above 2**63-1")
        return _Vec(kind, raw.astype(np.int64, copy=False), valid, 0, *err)
    if kind == "DECIMAL":
        values, fits = _decimal_unscaled(arr)
        err = ctx.unsupported(valid & ~fits, f"column {name} holds a decimal whose unscaled "
                                             f"value does not fit 64 bits")
        return _Vec(kind, np.where(fits & valid, values, 0), valid, t.scale, *err)
    if kind == "DATE":
        if pa.types.is_date64(t):
            ms = _fill(arr.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
            days = np.floor_divide(ms, 86400 * 1000)
        else:
            days = _fill(arr.cast(pa.int32()), 0).to_numpy(zero_copy_only=False)
        return _Vec(kind, days.astype(np.int64), valid)
    if kind in ("TIMESTAMP", "INTERVAL"):
        raw = _fill(arr.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
        factor = T.NS_PER[t.unit]
        err = _NOERR
        if factor > 1:
            limit = INT64_MAX // factor
            bad = valid & ((raw > limit) | (raw < -limit))
            err = ctx.unsupported(bad, f"column {name} holds a value beyond the int64 "
                                       f"nanosecond range (years 1677-2262)")
            raw = np.where(bad, 0, raw) * factor
        return _Vec(kind, raw.astype(np.int64), valid, 0, *err)
    raise _Reject(f"column {name} of type {t}")


def _fill(arr: pa.Array, value) -> pa.Array:
    """``fill_null`` that costs nothing on an array without NULLs."""
    return arr if arr.null_count == 0 else pc.fill_null(arr, value)


def _unpack_bits(buf: pa.Buffer, offset: int, n: int) -> np.ndarray:
    """An Arrow bitmap (LSB first) from bit ``offset`` as ``n`` bools."""
    start, skip = offset // 8, offset % 8
    raw = np.frombuffer(buf, dtype=np.uint8)[start:start + (skip + n + 7) // 8]
    return np.unpackbits(raw, bitorder="little")[skip:skip + n].view(bool)


def _validity(ctx: _Context, arr: pa.Array) -> np.ndarray:
    """False where ``arr`` is NULL; ``ctx.all_valid`` (shared) without NULLs."""
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=bool)
    if arr.null_count == 0:
        return ctx.all_valid
    bitmap = arr.buffers()[0]
    if bitmap is None or pa.types.is_null(arr.type):
        return ~pc.is_null(arr).to_numpy(zero_copy_only=False)
    return _unpack_bits(bitmap, arr.offset, n)


def _bool_values(arr: pa.Array) -> np.ndarray:
    """A boolean array's values as bools, False where NULL."""
    n = len(arr)
    if n == 0 or arr.null_count or not pa.types.is_boolean(arr.type):
        return pc.fill_null(arr, False).to_numpy(zero_copy_only=False).astype(bool)
    return _unpack_bits(arr.buffers()[1], arr.offset, n)


def _decimal_unscaled(arr: pa.Array) -> tuple:
    """Unscaled integers of a decimal array as int64, and where they fit."""
    n = len(arr)
    width = arr.type.byte_width
    buf = arr.buffers()[1]
    if n == 0 or buf is None:
        return np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool)
    if width in (4, 8):
        words = np.frombuffer(buf, dtype=np.int32 if width == 4 else np.int64)
        return words[arr.offset:arr.offset + n].astype(np.int64), np.ones(n, dtype=bool)
    per = width // 8
    words = np.frombuffer(buf, dtype=np.int64)[arr.offset * per:(arr.offset + n) * per]
    words = words.reshape(n, per)
    low = words[:, 0]
    sign = low >> 63
    fits = np.all(words[:, 1:] == sign[:, None], axis=1)
    return low.copy(), fits


def _py(v: _Vec, row: int):
    """The interpreter's value of ``v`` at ``row`` (for rebuilding an error)."""
    if v.kind == "UNKNOWN" or not v.valid[row]:
        return None
    x = v.values
    if v.kind == "VARCHAR":
        return x[row].as_py()
    if v.kind == "DOUBLE":
        return float(x[row])
    if v.kind == "BOOLEAN":
        return bool(x[row])
    if v.kind == "DECIMAL":
        return Decimal(int(x[row])).scaleb(-v.scale)
    if v.kind == "DATE":
        return T.EPOCH_DATE + _dt.timedelta(days=int(x[row]))
    return int(x[row])


def _raiser(fn: Callable, what: A.Expr) -> Callable:
    """``row -> exception``: run the interpreter's operation on that row's
    values (``fn(row)``), which raises the interpreter's own error."""
    def make(row: int) -> GpuMrError:
        try:
            fn(row)
        except GpuMrError as exc:
            return exc
        except Exception:           # the interpreter breaking down: still a data error here
            pass
        return DataError(f"evaluation of {what.to_sql()} failed", code="data")
    return make


def _data_error(message: str, code: str) -> Callable:
    """``row -> DataError`` for failures where the interpreter itself breaks
    down with a Python exception (dates beyond year 9999, NaN intervals)."""
    return lambda row: DataError(message, code=code)


def _where_pos(e: A.Expr) -> str:
    return f"in {e.to_sql()} (at line {e.pos.line}, column {e.pos.column})"


# =====================================================================
# The evaluator: one method per AST node, as interpreter.Interpreter
# =====================================================================

class _Eval:
    def __init__(self, ctx: _Context, query: CheckedQuery, var: str):
        self.ctx = ctx
        self.q = query
        self.var = var
        self.n = ctx.n

    def eval(self, e: A.Expr) -> _Vec:
        method = getattr(self, "_" + type(e).__name__, None)
        if method is None:
            raise _Reject(f"{type(e).__name__} expressions")
        return method(e)

    # ------------------------------------------------------------ helpers
    def nulls(self, kind: str) -> _Vec:
        n = self.n
        if kind == "VARCHAR":
            values = pa.nulls(n, pa.large_string())
        elif kind == "DOUBLE":
            values = np.zeros(n, dtype=np.float64)
        elif kind == "BOOLEAN":
            values = np.zeros(n, dtype=bool)
        else:
            values = np.zeros(n, dtype=np.int64)
        return _Vec(kind, values, np.zeros(n, dtype=bool))

    def const(self, kind: str, value) -> _Vec:
        """A constant column of an interpreter value."""
        n = self.n
        scale = 0
        if value is None:
            return self.nulls(kind)
        if kind == "VARCHAR":
            values = pa.repeat(pa.scalar(value, pa.large_string()), n)
        elif kind == "BOOLEAN":
            values = np.full(n, bool(value))
        elif kind == "DOUBLE":
            values = np.full(n, float(value), dtype=np.float64)
        elif kind == "DECIMAL":
            d = Decimal(value)
            scale = max(0, -d.as_tuple().exponent)
            unscaled = int(d.scaleb(scale))
            if Decimal(unscaled).scaleb(-scale) != d or not INT64_MIN <= unscaled <= INT64_MAX:
                raise _Reject(f"the decimal constant {value} does not fit 64 bits")
            values = np.full(n, unscaled, dtype=np.int64)
        elif kind == "DATE":
            if isinstance(value, _dt.datetime):
                value = value.date()
            values = np.full(n, (value - T.EPOCH_DATE).days, dtype=np.int64)
        elif kind in ("BIGINT", "TIMESTAMP", "INTERVAL", "INTERVAL_YM"):
            v = int(value)
            if not INT64_MIN <= v <= INT64_MAX:
                raise _Reject(f"the constant {value} lies outside the 64-bit range of {kind}")
            values = np.full(n, v, dtype=np.int64)
        else:
            raise _Reject(f"constants of type {kind}")
        return _Vec(kind, values, np.ones(n, dtype=bool), scale)

    def out(self, kind, values, valid, *parts, scale: int = 0) -> _Vec:
        return _Vec(kind, values, valid, scale, *_merge(*parts))

    def select(self, kind: str, branches: list) -> _Vec:
        """Rows of ``branches`` [(mask, vec), ...] (disjoint masks) in one
        column of ``kind``; errors of a branch only where it is chosen."""
        scale = max([v.scale for _, v in branches if v.kind == "DECIMAL"], default=0)
        res = self.nulls(kind)
        values, valid = res.values, res.valid
        parts = []
        for mask, v in branches:
            parts.append((v, mask))
            if v.kind == "UNKNOWN":
                continue
            if kind == "VARCHAR":
                values = pc.if_else(pa.array(mask, pa.bool_()), v.values, values)
            else:
                x = v.values
                if kind == "DECIMAL":
                    x, over = _align(v, scale)
                    parts.append((self.ctx.unsupported(mask & v.valid & over, _SCALE_MSG), None))
                values = np.where(mask, x, values)
            valid = np.where(mask, v.valid, valid)
        return self.out(kind, values, valid, *parts, scale=scale)

    # ------------------------------------------------------------ leaves
    def _Literal(self, e: A.Literal) -> _Vec:
        kind = e.type.kind if e.type is not None else "UNKNOWN"
        return self.const(kind, e.value)

    def _ColumnRef(self, e: A.ColumnRef) -> _Vec:
        if e.var not in (None, self.var):
            raise _Reject(f"{e.to_sql()} reads another variable's row")
        return self.ctx.column(e.resolved, e.type)

    def _Classifier(self, e: A.Classifier) -> _Vec:
        if e.var not in (None, self.var):
            raise _Reject(f"{e.to_sql()} reads another variable's row")
        return self.const("VARCHAR", self.var)     # the row being tested is labelled var

    def _MatchNumber(self, e) -> _Vec:
        raise _Reject("MATCH_NUMBER() depends on the match being built, not on the row alone")

    def _Aggregate(self, e) -> _Vec:
        raise _Reject(f"aggregate {e.name} reads the match so far")

    def _Navigation(self, e: A.Navigation) -> _Vec:
        if e.kind not in ("PREV", "NEXT") or isinstance(e.arg, A.Navigation):
            raise _Reject(f"{e.kind} is a logical offset inside the match")
        inner = self.eval(e.arg)
        k = min(int(e.offset.value), self.n)
        if k == 0:
            return inner
        prev = e.kind == "PREV"
        ctx = self.ctx
        # PREV/NEXT of a column is shared by every mask of the context (the
        # column itself is: ctx.column); of other expressions, built each time
        key = (e.arg.resolved, k, prev) if isinstance(e.arg, A.ColumnRef) else None
        hit = ctx.moved.get(key) if key is not None else None
        if hit is not None:
            return hit
        # row r reads row r - k (PREV) or r + k (NEXT) of the sorted table,
        # NULL where that row lies in another partition
        if isinstance(inner.values, np.ndarray):
            values, moved = None, (inner.values, k, prev)     # built lazily, see _Vec
        else:
            values, moved = _shift(inner.values, k, prev), None
        if inner.valid is ctx.all_valid:
            valid = np.ones(self.n, dtype=bool)
            if prev:
                valid[:k] = False
            else:
                valid[self.n - k:] = False
        else:
            valid = _shift(inner.valid, k, prev)
        edge = ctx.edge_rows(k, prev)
        valid[edge] = False
        err = erow = None
        if inner.err is not None:
            err = _shift(inner.err, k, prev)
            err[edge] = 0
            if err.any():
                erow = _shift(inner.erow, k, prev)
            else:
                err = None
        out = _Vec(inner.kind, values, valid, inner.scale, err, erow, moved)
        if key is not None:
            ctx.moved[key] = out
        return out

    # ------------------------------------------------------------ logic
    def _Unary(self, e: A.Unary) -> _Vec:
        v = self.eval(e.operand)
        kind = e.type.kind
        if v.kind == "UNKNOWN":
            return self.out(kind, self.nulls(kind).values, v.valid, (v, None))
        if e.op == "NOT":
            return self.out("BOOLEAN", ~v.values, v.valid, (v, None))
        if e.op == "+":
            return v
        if v.kind == "DOUBLE":
            return self.out(kind, -v.values, v.valid, (v, None))
        if v.kind in ("BIGINT", "INTERVAL", "INTERVAL_YM", "DECIMAL"):
            over = v.valid & (v.values == INT64_MIN)
            if v.kind == "DECIMAL":
                bad = self.ctx.unsupported(over, _SCALE_MSG)
            else:
                bad = self.ctx.fail(over, _raiser(lambda r: I._check_int(-_py(v, r), e), e))
            return self.out(v.kind, -v.values, v.valid, (v, None), (bad, None), scale=v.scale)
        raise _Reject(f"unary {e.op} on {v.kind}")

    def _Binary(self, e: A.Binary) -> _Vec:
        if e.op in ("AND", "OR"):
            left = self.eval(e.left)
            right = self.eval(e.right)
            lt, lf = left.valid & left.values, left.valid & ~left.values
            rt, rf = right.valid & right.values, right.valid & ~right.values
            if left.kind == "UNKNOWN":
                lt = lf = np.zeros(self.n, dtype=bool)
            if right.kind == "UNKNOWN":
                rt = rf = np.zeros(self.n, dtype=bool)
            if e.op == "AND":
                true, false, reached = lt & rt, lf | rf, ~lf
            else:
                true, false, reached = lt | rt, lf & rf, ~lt
            return self.out("BOOLEAN", true, true | false, (left, None), (right, reached))
        left = self.eval(e.left)
        right = self.eval(e.right)
        if e.op in _COMPARISONS:
            values, valid, err = self.compare(e.op, left, right)
            return self.out("BOOLEAN", values, valid, (left, None), (right, None), (err, None))
        if e.op == "||":
            if "UNKNOWN" in (left.kind, right.kind):
                return self.out("VARCHAR", self.nulls("VARCHAR").values,
                                np.zeros(self.n, dtype=bool), (left, None), (right, None))
            a, ea = self.to_text(left)
            b, eb = self.to_text(right)
            ok = left.valid & right.valid
            return self.out("VARCHAR", _concat([a, b]), ok, (left, None), (right, None),
                            (ea, ok), (eb, ok))
        return self.arith(e, left, right)

    def _Between(self, e: A.Between) -> _Vec:
        v, lo, hi = self.eval(e.operand), self.eval(e.low), self.eval(e.high)
        ge, ge_ok, ge_err = self.compare(">=", v, lo)
        le, le_ok, le_err = self.compare("<=", v, hi)
        false = (ge_ok & ~ge) | (le_ok & ~le)
        true = ge_ok & ge & le_ok & le
        valid = true | false
        values = false if e.negated else true
        return self.out("BOOLEAN", values, valid, (v, None), (lo, None), (hi, None),
                        (ge_err, None), (le_err, None))

    def _InList(self, e: A.InList) -> _Vec:
        v = self.eval(e.operand)
        pending = v.valid.copy()                 # operand not NULL, no item equal yet
        matched = np.zeros(self.n, dtype=bool)
        saw_null = np.zeros(self.n, dtype=bool)
        parts = [(v, None)]
        for item in e.items:
            x = self.eval(item)
            eq, eq_ok, err = self.compare("=", v, x)
            parts += [(x, pending), (err, pending)]
            hit = pending & eq_ok & eq
            saw_null |= pending & ~eq_ok
            matched |= hit
            pending = pending & ~hit
        valid = v.valid & (matched | ~saw_null)
        values = ~matched if e.negated else matched
        return self.out("BOOLEAN", values, valid, *parts)

    def _IsNull(self, e: A.IsNull) -> _Vec:
        v = self.eval(e.operand)
        values = v.valid.copy() if e.negated else ~v.valid
        return self.out("BOOLEAN", values, np.ones(self.n, dtype=bool), (v, None))

    def _Case(self, e: A.Case) -> _Vec:
        kind = e.type.kind
        pending = np.ones(self.n, dtype=bool)
        parts, branches = [], []
        subject = None
        if e.operand is not None:
            subject = self.eval(e.operand)
            parts.append((subject, None))
        for cond, result in e.whens:
            c = self.eval(cond)
            parts.append((c, pending))
            if subject is not None:
                eq, eq_ok, err = self.compare("=", subject, c)
                parts.append((err, pending))
                taken = pending & eq_ok & eq
            else:
                taken = pending & c.valid & c.values if c.kind == "BOOLEAN" else \
                    np.zeros(self.n, dtype=bool)
            r = self.coerce(self.eval(result), e.type)
            parts.append((r, taken))
            branches.append((taken, r))
            pending = pending & ~taken
        if e.else_ is not None:
            r = self.coerce(self.eval(e.else_), e.type)
            parts.append((r, pending))
            branches.append((pending, r))
        res = self.select(kind, branches)
        return self.out(kind, res.values, res.valid, *parts, (res, None), scale=res.scale)

    # ------------------------------------------------------------ comparisons
    def compare(self, op: str, a: _Vec, b: _Vec) -> tuple:
        """``interpreter.compare`` on columns: (values, valid, error pair)."""
        n = self.n
        ka, kb = a.kind, b.kind
        if "UNKNOWN" in (ka, kb):
            return np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), _NOERR
        all_valid = self.ctx.all_valid
        ok = b.valid if a.valid is all_valid else a.valid if b.valid is all_valid else \
            a.valid & b.valid
        err = _NOERR
        if ka == kb == "VARCHAR":
            fn = {"=": pc.equal, "<>": pc.not_equal, "<": pc.less, "<=": pc.less_equal,
                  ">": pc.greater, ">=": pc.greater_equal}[op]
            return _np_bool(fn(a.values, b.values)), ok, _NOERR
        if "DOUBLE" in (ka, kb):
            if ka == kb:
                return _compare_direct(op, a, b, n), ok, _NOERR
            other, flip = (b, False) if ka == "DOUBLE" else (a, True)
            x = a if ka == "DOUBLE" else b
            if other.kind == "BIGINT":
                i = other.values
                if ((i <= _EXACT_INT) & (i >= -_EXACT_INT)).all():      # float(i) is exact
                    pair = (x.values, i.astype(np.float64)) if ka == "DOUBLE" else \
                        (i.astype(np.float64), x.values)
                    return _op(op, *pair), ok, _NOERR
                sign = _sign_int_float(i, x.values)
                sign = sign if flip else -sign
                nan = np.isnan(x.values)
                res = np.where(nan, op == "<>", _op_sign(op, sign))
                return res, ok, _NOERR
            if other.kind == "DECIMAL":
                y, err = self.to_double(other)
                pair = (x.values, y) if ka == "DOUBLE" else (y, x.values)
                return _op(op, *pair), ok, _merge((err, ok))
            raise _Reject(f"comparing {ka} with {kb}")
        if ka == kb and ka in ("BIGINT", "BOOLEAN", "DATE", "TIMESTAMP", "INTERVAL",
                               "INTERVAL_YM"):
            return _compare_direct(op, a, b, n), ok, _NOERR
        if {ka, kb} == {"DATE", "TIMESTAMP"}:
            if ka == "DATE":
                sign = _sign_days_ns(a.values, b.values)
            else:
                sign = -_sign_days_ns(b.values, a.values)
            return _op_sign(op, sign), ok, _NOERR
        if {ka, kb} <= {"BIGINT", "DECIMAL"}:
            sa = a.scale if ka == "DECIMAL" else 0
            sb = b.scale if kb == "DECIMAL" else 0
            if sa == sb:
                return _compare_direct(op, a, b, n), ok, _NOERR
            if sa < sb:
                sign = _sign_scaled(a.values, sb - sa, b.values)
            else:
                sign = -_sign_scaled(b.values, sa - sb, a.values)
            return _op_sign(op, sign), ok, _NOERR
        raise _Reject(f"comparing {ka} with {kb}")

    # ------------------------------------------------------------ conversions
    def to_double(self, v: _Vec) -> tuple:
        """``float(value)``: (float64 values, error pair for inexact rows)."""
        if v.kind == "DOUBLE":
            return v.values, _NOERR
        if v.kind in ("BIGINT", "UNKNOWN", "BOOLEAN"):
            return v.values.astype(np.float64), _NOERR
        if v.kind == "DECIMAL":
            if v.scale == 0:
                return v.values.astype(np.float64), _NOERR
            if v.scale > _EXACT_POW10:
                return np.zeros(self.n), self.ctx.unsupported(
                    v.valid, f"a DECIMAL of scale {v.scale} converted to DOUBLE")
            inexact = v.valid & ((v.values > _EXACT_INT) | (v.values < -_EXACT_INT))
            err = self.ctx.unsupported(inexact, "a DECIMAL beyond 2**53 units converted to "
                                                "DOUBLE (the rounding is not vectorised)")
            return v.values.astype(np.float64) / float(10**v.scale), err
        raise _Reject(f"{v.kind} as a number")

    def as_ns(self, v: _Vec) -> tuple:
        """TIMESTAMP/INTERVAL nanoseconds; a DATE at midnight."""
        if v.kind != "DATE":
            return v.values, _NOERR
        limit = INT64_MAX // DAY
        bad = v.valid & ((v.values > limit) | (v.values < -limit))
        return np.where(bad, 0, v.values) * DAY, self.ctx.unsupported(
            bad, "a DATE beyond the int64 nanosecond range (years 1677-2262) used as a timestamp")

    def coerce(self, v: _Vec, t: T.SqlType) -> _Vec:
        """``interpreter.coerce``: a subtype brought to a CASE/COALESCE/GREATEST type."""
        k = t.kind
        if v.kind == k:
            return v
        if v.kind == "UNKNOWN":
            return self.out(k, self.nulls(k).values, v.valid, (v, None))
        if k == "DOUBLE" and v.kind in ("BIGINT", "DECIMAL"):
            x, err = self.to_double(v)
            return self.out(k, x, v.valid, (v, None), (err, v.valid))
        if k == "DECIMAL" and v.kind == "BIGINT":
            return _Vec(k, v.values, v.valid, 0, v.err, v.erow)
        if k == "TIMESTAMP" and v.kind == "DATE":
            x, err = self.as_ns(v)
            return self.out(k, x, v.valid, (v, None), (err, None))
        raise _Reject(f"{v.kind} as {k}")

    def to_text(self, v: _Vec) -> tuple:
        """``interpreter.to_text``: (large_string array, error pair)."""
        k = v.kind
        if k == "VARCHAR":
            return v.values, _NOERR
        if k == "BOOLEAN":
            return pc.if_else(pa.array(v.values, pa.bool_()), _ls("true"), _ls("false")), _NOERR
        if k in ("BIGINT", "INTERVAL", "INTERVAL_YM"):
            return pa.array(v.values, pa.int64()).cast(pa.large_string()), _NOERR
        if k == "DATE":
            days = np.where(v.valid, v.values, 0).astype("datetime64[D]")
            return pa.array(np.datetime_as_string(days, unit="D"), pa.large_string()), _NOERR
        if k == "TIMESTAMP":
            ns = np.where(v.valid, v.values, 0)
            secs = np.floor_divide(ns, 10**9)
            rem = ns - secs * 10**9
            text = np.datetime_as_string(secs.astype("datetime64[s]"), unit="s")
            base = pc.replace_substring(pa.array(text, pa.large_string()), "T", " ",
                                        max_replacements=1)
            frac = pc.utf8_lpad(pa.array(rem, pa.int64()).cast(pa.large_string()), width=9,
                                padding="0")
            frac = _concat([pa.repeat(_ls("."), self.n), pc.utf8_rtrim(frac, characters="0")])
            frac = pc.if_else(pa.array(rem != 0, pa.bool_()), frac, _ls(""))
            return _concat([base, frac]), _NOERR
        if k == "DOUBLE":
            raise _Reject("DOUBLE as text (Python's shortest repr is not vectorised)")
        if k == "DECIMAL":
            raise _Reject("DECIMAL as text (Decimal's notation and signed zeros are not "
                          "vectorised)")
        raise _Reject(f"{k} as text")

    # ------------------------------------------------------------ arithmetic
    def arith(self, e, a: _Vec, b: _Vec) -> _Vec:
        """``interpreter.binary`` for + - * / %; ``e`` carries op, type and the
        operand types (a Binary, or MOD's Binary stand-in)."""
        op, kind = e.op, e.type.kind
        base = [(a, None), (b, None)]
        if "UNKNOWN" in (a.kind, b.kind):
            return self.out(kind, self.nulls(kind).values, np.zeros(self.n, dtype=bool), *base)
        ok = a.valid & b.valid
        ctx = self.ctx
        interp_error = _raiser(lambda r: I.binary(e, _py(a, r), _py(b, r), e.left.type,
                                                  e.right.type), e)
        if kind == "DOUBLE":
            x, ex = self.to_double(a)
            y, ey = self.to_double(b)
            if op == "+":
                r = x + y
            elif op == "-":
                r = x - y
            elif op == "*":
                r = x * y
            elif op == "/":
                r = x / y                 # IEEE: the interpreter's special cases agree
            else:
                r = np.where(y == 0.0, np.nan, np.fmod(x, y))
            return self.out(kind, r, ok, *base, (ex, ok), (ey, ok))
        if kind == "BIGINT" and a.kind == b.kind == "BIGINT":
            x, y = a.values, b.values
            if op in "+-*":
                r, over = _checked(op, x, y)
                return self.out(kind, r, ok, *base, (ctx.fail(ok & over, interp_error), None))
            zero = ok & (y == 0)
            q, rem, over = _divmod_trunc(x, y)
            r = q if op == "/" else rem
            over = ok & over if op == "/" else None
            return self.out(kind, r, ok, *base, (ctx.fail(zero, interp_error), None),
                            (ctx.fail(over, interp_error), None))
        if kind == "DECIMAL" and {a.kind, b.kind} <= {"BIGINT", "DECIMAL"}:
            sa = a.scale if a.kind == "DECIMAL" else 0
            sb = b.scale if b.kind == "DECIMAL" else 0
            if op == "*":
                scale = sa + sb
                r, over = _checked("*", a.values, b.values)
                zero = None
            else:
                scale = max(sa, sb)
                x, ox = _align(a, scale)
                y, oy = _align(b, scale)
                if op in "+-":
                    r, over = _checked(op, x, y)
                    zero = None
                elif op == "%":
                    # Zero before scaling: a divisor that overflows when
                    # scaled is unsupported below, not a division by zero.
                    zero = ok & (b.values == 0)
                    _, r, _ = _divmod_trunc(x, y)
                    over = np.zeros(self.n, dtype=bool)
                else:
                    raise _Reject(f"DECIMAL {op}")
                over = over | ox | oy
            return self.out(kind, r, ok, *base, (ctx.fail(zero, interp_error), None),
                            (ctx.unsupported(ok & over, _SCALE_MSG), None), scale=scale)
        return self.temporal(e, a, b, ok, base, interp_error)

    def temporal(self, e, a: _Vec, b: _Vec, ok, base, interp_error) -> _Vec:
        op, kind = e.op, e.type.kind
        ka, kb = a.kind, b.kind
        ctx = self.ctx
        out_of_range = _data_error(f"date out of range {_where_pos(e)}", "date_out_of_range")
        if kind == "TIMESTAMP":
            if "INTERVAL_YM" in (ka, kb):
                ts, months = (a, b) if kb == "INTERVAL_YM" else (b, a)
                m = _clip_months(months.values)
                m = m if op == "+" else -m
                r, bad, over = _add_months_ns(ts.values, m)
                return self.out(kind, r, ok, *base, (ctx.fail(ok & bad, out_of_range), None),
                                (ctx.unsupported(ok & over, _TIME_MSG), None))
            x, ex = self.as_ns(a)
            y, ey = self.as_ns(b)
            r, over = _checked(op, x, y)
            return self.out(kind, r, ok, *base, (ex, ok), (ey, ok),
                            (ctx.unsupported(ok & over, _TIME_MSG), None))
        if kind == "DATE":
            if ka != "DATE":
                a, b, ka, kb = b, a, kb, ka
            days = a.values
            if kb == "INTERVAL_YM":
                m = _clip_months(b.values)
                r, bad = _add_months_days(days, m if op == "+" else -m)
            elif kb == "INTERVAL":
                y = b.values
                if op == "+":
                    r = days + np.floor_divide(y, DAY)
                else:
                    r = days - (np.floor_divide(y, DAY) + (np.mod(y, DAY) != 0))
                bad = (r < DATE_MIN_DAYS) | (r > DATE_MAX_DAYS)
            elif kb == "BIGINT":
                y = np.clip(b.values, -10**10, 10**10)
                r = days + y if op == "+" else days - y
                bad = (np.abs(y) > 999_999_999) | (r < DATE_MIN_DAYS) | (r > DATE_MAX_DAYS)
            else:
                raise _Reject(f"DATE {op} {kb}")
            return self.out(kind, np.where(bad, 0, r), ok, *base,
                            (ctx.fail(ok & bad, out_of_range), None))
        if kind == "INTERVAL" and ka in ("DATE", "TIMESTAMP"):
            x, ex = self.as_ns(a)
            y, ey = self.as_ns(b)
            r, over = _checked("-", x, y)
            return self.out(kind, r, ok, *base, (ex, ok), (ey, ok),
                            (ctx.unsupported(ok & over, _TIME_MSG), None))
        if kind in ("INTERVAL", "INTERVAL_YM"):
            if op in "+-" and ka == kb == kind:
                r, over = _checked(op, a.values, b.values)
                return self.out(kind, r, ok, *base, (ctx.unsupported(ok & over, _TIME_MSG), None))
            iv, num = (a, b) if ka == kind else (b, a)
            if op == "*" and num.kind == "BIGINT":
                r, over = _checked("*", iv.values, num.values)
                return self.out(kind, r, ok, *base, (ctx.unsupported(ok & over, _TIME_MSG), None))
            if op == "*" and num.kind == "DOUBLE":
                return self._interval_from_float(kind, iv.values.astype(np.float64) * num.values,
                                                 ok, base, e)
            if op == "/" and num is b and num.kind in ("BIGINT", "DOUBLE"):
                zero = ok & (num.values == 0)
                zero_err = (ctx.fail(zero, interp_error), None)
                if num.kind == "DOUBLE":
                    res = self._interval_from_float(kind, iv.values.astype(np.float64) / num.values,
                                                    ok & ~zero, base, e)
                    return self.out(kind, res.values, ok, *base, zero_err, (res, None))
                inexact = ok & ~zero & ((iv.values > _EXACT_INT) | (iv.values < -_EXACT_INT))
                q, _, _ = _divmod_trunc(iv.values, num.values)
                return self.out(kind, q, ok, *base, zero_err, (ctx.unsupported(
                    inexact, "an interval beyond 2**53 divided (Python rounds the quotient "
                             "to a double first)"), None))
            raise _Reject(f"{ka} {op} {kb}")
        raise _Reject(f"{ka} {op} {kb}")

    def _interval_from_float(self, kind, f, ok, base, e) -> _Vec:
        """``int(float)`` of an interval product/quotient."""
        finite = np.isfinite(f)
        t = np.trunc(np.where(finite, f, 0.0))
        over = ok & finite & ((t >= 2.0**63) | (t < -2.0**63))
        r = np.where(over | ~finite, 0.0, t).astype(np.int64)
        crash = _data_error(f"cannot convert a non-finite number to an interval "
                            f"{_where_pos(e)}", "bad_operation")
        return self.out(kind, r, ok, *base, (self.ctx.fail(ok & ~finite, crash), None),
                        (self.ctx.unsupported(over, _TIME_MSG), None))

    # ------------------------------------------------------------ CAST
    def _Cast(self, e: A.Cast) -> _Vec:
        v = self.eval(e.operand)
        dst = e.target
        k = dst.kind
        src = v.kind
        base = (v, None)
        if src == "UNKNOWN":
            return self.out(k, self.nulls(k).values, v.valid, base)
        if k == "VARCHAR":
            text, err = self.to_text(v)
            return self.out(k, text, v.valid, base, (err, v.valid))
        if src == "VARCHAR":
            raise _Reject(f"CAST of VARCHAR to {dst.sql_name()} (Python's int/float/date "
                          f"parsing is not vectorised)")
        cast_error = _raiser(lambda r: I.cast(_py(v, r), e.operand.type, dst, e), e)
        if k == "BIGINT":
            if src in ("BIGINT", "BOOLEAN"):
                return self.out(k, v.values.astype(np.int64), v.valid, base)
            if src == "DECIMAL":
                return self.out(k, _rescale_half_up(v.values, v.scale, 0), v.valid, base)
            if src == "DOUBLE":
                x = v.values
                r = _round_half_away(x)
                bad = v.valid & (~np.isfinite(x) | (np.abs(r) >= _QUANTIZE_LIMIT)
                                 | (r >= 2.0**63) | (r < -2.0**63))
                ints = np.where(bad | ~v.valid, 0.0, r).astype(np.int64)
                return self.out(k, ints, v.valid, base, (self.ctx.fail(bad, cast_error), None))
        if k == "DOUBLE" and src in ("BIGINT", "BOOLEAN", "DOUBLE", "DECIMAL"):
            x, err = self.to_double(v)
            return self.out(k, x, v.valid, base, (err, v.valid))
        if k == "DECIMAL" and src in ("BIGINT", "BOOLEAN", "DECIMAL"):
            s1 = v.scale if src == "DECIMAL" else 0
            x = v.values.astype(np.int64)
            s = dst.scale
            digits = _ndigits(x)
            nonzero = x != 0
            if s >= s1:
                total = digits + (s - s1)
                too_long = v.valid & nonzero & (total > 28)        # the decimal context: InvalidOperation
                too_wide = v.valid & nonzero & ~too_long & (total > dst.precision)
                r, over = _align(_Vec("DECIMAL", x, v.valid, s1), s)
                over = v.valid & ~too_long & ~too_wide & over
            else:
                r = _rescale_half_up(x, s1, s)
                too_long = None
                too_wide = v.valid & (r != 0) & (_ndigits(r) > dst.precision)
                over = None
            return self.out(k, r, v.valid, base, (self.ctx.fail(too_long, cast_error), None),
                            (self.ctx.fail(too_wide, cast_error), None),
                            (self.ctx.unsupported(over, _SCALE_MSG), None), scale=s)
        if k == "BOOLEAN" and src in ("BIGINT", "DOUBLE", "DECIMAL", "BOOLEAN"):
            return self.out(k, v.values != 0, v.valid, base)
        if k == "DATE" and src == "TIMESTAMP":
            return self.out(k, np.floor_divide(v.values, DAY), v.valid, base)
        if k == "TIMESTAMP" and src == "DATE":
            x, err = self.as_ns(v)
            return self.out(k, x, v.valid, base, (err, None))
        if k == src:
            return v
        raise _Reject(f"CAST of {src} to {dst.sql_name()}")

    # ------------------------------------------------------------ functions
    def _Call(self, e: A.Call) -> _Vec:
        name = e.name
        kind = e.type.kind
        if name in ("CURRENT_TIMESTAMP", "LOCALTIMESTAMP", "CURRENT_DATE"):
            return self.const(kind, self.ctx.now[name])
        args = [self.eval(x) for x in e.args]
        base = [(x, None) for x in args]
        n = self.n
        if name == "COALESCE":
            pending = np.ones(n, dtype=bool)
            branches = []
            for x in args:
                take = pending & x.valid
                branches.append((take, self.coerce(x, e.type)))
                pending &= ~take
            res = self.select(kind, branches)
            return self.out(kind, res.values, res.valid, *base, (res, None), scale=res.scale)
        if name == "NULLIF":
            a, b = args
            eq, eq_ok, err = self.compare("=", a, b)
            return self.out(a.kind, a.values, a.valid & ~(eq_ok & eq), *base, (err, None),
                            scale=a.scale)
        ok = np.ones(n, dtype=bool)
        for x in args:
            ok &= x.valid
        if any(x.kind == "UNKNOWN" for x in args):
            return self.out(kind, self.nulls(kind).values, np.zeros(n, dtype=bool), *base)
        if name == "CONCAT":
            texts = [self.to_text(x) for x in args]
            return self.out(kind, _concat([t for t, _ in texts]), ok, *base,
                            *[(err, ok) for _, err in texts])
        x = args[0]
        call_error = _raiser(lambda r: I.call(e, [_py(a, r) for a in args]), e)
        if name in ("GREATEST", "LEAST"):
            vals = [self.coerce(a, e.type) for a in args]
            scale = max([v.scale for v in vals], default=0)
            parts = [(v, ok) for v in vals]
            cur = None
            for v in vals:
                if kind == "DECIMAL":
                    y, over = _align(v, scale)
                    parts.append((self.ctx.unsupported(ok & over, _SCALE_MSG), None))
                    v = _Vec(kind, y, v.valid, scale)
                if cur is None:
                    cur = v
                    continue
                better, _, _ = self.compare(">" if name == "GREATEST" else "<", v, cur)
                if kind == "VARCHAR":
                    cur = _Vec(kind, pc.if_else(pa.array(better, pa.bool_()), v.values,
                                                cur.values), ok, scale)
                else:
                    cur = _Vec(kind, np.where(better, v.values, cur.values), ok, scale)
            return self.out(kind, cur.values, ok, *base, *parts, scale=scale)
        if name == "ABS":
            if x.kind == "DOUBLE":
                return self.out(kind, np.abs(x.values), ok, *base)
            over = ok & (x.values == INT64_MIN)
            err = self.ctx.fail(over, call_error) if x.kind == "BIGINT" else \
                self.ctx.unsupported(over, _SCALE_MSG)
            return self.out(kind, np.abs(x.values), ok, *base, (err, None), scale=x.scale)
        if name == "SIGN":
            s = (x.values > 0).astype(np.int64) - (x.values < 0).astype(np.int64)
            if x.kind == "DOUBLE":
                return self.out(kind, s.astype(np.float64), ok, *base)
            return self.out(kind, s, ok, *base)            # DECIMAL: scale 0
        if name == "ROUND":
            return self._round(e, args, ok, base, call_error)
        if name in ("FLOOR", "CEIL", "CEILING"):
            floor = name == "FLOOR"
            if x.kind == "DOUBLE":
                r = (np.floor(x.values) if floor else np.ceil(x.values)) + 0.0   # no -0.0
                return self.out(kind, r, ok, *base)
            if x.kind == "DECIMAL":
                m = 10**x.scale
                q = np.floor_divide(x.values, m) if x.scale <= 18 else np.where(x.values < 0, -1, 0)
                if not floor:
                    q = q + (x.values != q * m) if x.scale <= 18 else q + (x.values != 0)
                return self.out(kind, q, ok, *base)
            return self.out(kind, x.values, ok, *base)
        if name == "SQRT":
            d, err = self.to_double(x)
            return self.out(kind, np.sqrt(d), ok, *base, (err, ok))
        if name in ("LN", "LOG10", "EXP"):
            fn = {"LN": math.log, "LOG10": math.log10, "EXP": math.exp}[name]
            d, err = self.to_double(x)
            return self.out(kind, _pycall(lambda v: I._math(fn, v), ok, d), ok, *base, (err, ok))
        if name in ("POWER", "POW"):
            d, ex = self.to_double(x)
            y, ey = self.to_double(args[1])
            return self.out(kind, _pycall(_pow, ok, d, y), ok, *base, (ex, ok), (ey, ok))
        if name == "MOD":
            fake = A.Binary(pos=e.pos, op="%", left=e.args[0], right=e.args[1], type=e.type)
            res = self.arith(fake, x, args[1])
            return res
        if name in ("LOWER", "UPPER"):
            return self.out(kind, _case_map(x.values, ok, name == "UPPER"), ok, *base)
        if name in ("TRIM", "LTRIM", "RTRIM"):
            fn = {"TRIM": pc.utf8_trim, "LTRIM": pc.utf8_ltrim, "RTRIM": pc.utf8_rtrim}[name]
            return self.out(kind, fn(x.values, characters=" "), ok, *base)
        if name in ("LENGTH", "CHAR_LENGTH"):
            lengths = pc.fill_null(pc.utf8_length(x.values), 0).to_numpy(zero_copy_only=False)
            return self.out(kind, lengths.astype(np.int64), ok, *base)
        if name == "SUBSTR":
            if all(isinstance(a, A.Literal) and a.value is not None for a in e.args[1:]):
                # positions beyond +-2**62 act as infinitely far; clipping keeps Arrow's int64 sums safe
                sliced = _substr_constant(x.values, *[max(-2**62, min(2**62, int(a.value)))
                                                      for a in e.args[1:]])
            else:
                sliced = _substr(x.values, ok, args[1].values,
                                 args[2].values if len(args) > 2 else None)
            return self.out(kind, sliced, ok, *base)
        if name == "REPLACE":
            old, new = e.args[1], e.args[2]
            if not (isinstance(old, A.Literal) and isinstance(new, A.Literal)):
                raise _Reject("REPLACE with a non-constant search or replacement string")
            if old.value is None or new.value is None:
                return self.out(kind, x.values, np.zeros(self.n, dtype=bool), *base)
            if old.value == "":
                raise _Reject("REPLACE of the empty string (Python inserts between every "
                              "character)")
            return self.out(kind, pc.replace_substring(x.values, old.value, new.value), ok, *base)
        if name == "LIKE":
            pattern = e.args[1]
            escape = e.args[2] if len(e.args) > 2 else None
            if not isinstance(pattern, A.Literal) or (escape is not None and
                                                      not isinstance(escape, A.Literal)):
                raise _Reject("LIKE with a non-constant pattern or escape")
            if pattern.value is None or (escape is not None and escape.value is None):
                return self.out(kind, np.zeros(self.n, dtype=bool), np.zeros(self.n, dtype=bool),
                                *base)
            regex = _like_re2(pattern.value, escape.value if escape is not None else None)
            return self.out(kind, _np_bool(pc.match_substring_regex(x.values, pattern=regex)),
                            ok, *base)
        raise _Reject(f"function {name}")

    def _round(self, e: A.Call, args: list, ok, base, call_error) -> _Vec:
        x = args[0]
        kind = e.type.kind
        digits = 0
        if len(args) > 1:
            lit = e.args[1]
            if not isinstance(lit, A.Literal):
                raise _Reject("ROUND with a non-constant number of digits")
            if lit.value is None:
                return self.out(kind, self.nulls(kind).values, np.zeros(self.n, dtype=bool), *base)
            digits = int(lit.value)
        if x.kind == "DOUBLE":
            if digits != 0:
                raise _Reject("ROUND of a DOUBLE to a nonzero number of digits (it rounds "
                              "Python's shortest decimal text; not vectorised)")
            return self.out(kind, _round_half_away(x.values), ok, *base)
        if x.kind == "BIGINT":
            if digits >= 0:
                return self.out(kind, x.values, ok, *base)
            r, over = _times_pow10(_rescale_half_up(x.values, -digits, 0), -digits)
            return self.out(kind, r, ok, *base, (self.ctx.fail(ok & over, call_error), None))
        if x.kind == "DECIMAL":
            if digits >= x.scale:
                return self.out(kind, x.values, ok, *base, scale=x.scale)
            if digits >= 0:
                return self.out(kind, _rescale_half_up(x.values, x.scale, digits), ok, *base,
                                scale=digits)
            r, over = _times_pow10(_rescale_half_up(x.values, x.scale, digits), -digits)
            return self.out(kind, r, ok, *base,
                            (self.ctx.unsupported(ok & over, _SCALE_MSG), None))
        raise _Reject(f"ROUND of {x.kind}")


_SCALE_MSG = "a DECIMAL whose unscaled value leaves 64 bits"
_TIME_MSG = "a timestamp or interval beyond the int64 nanosecond range"


# =====================================================================
# Kernels: plain numpy functions of whole columns
# =====================================================================

def _ls(s: str) -> pa.Scalar:
    return pa.scalar(s, pa.large_string())


def _shift(x, k: int, prev: bool):
    """``x`` moved ``k`` rows later (``prev``: row r holds x[r - k]) or
    earlier; the rows moved in from outside hold zeros / NULL."""
    n = len(x)
    if isinstance(x, pa.Array):
        pad = pa.nulls(k, x.type)
        return pa.concat_arrays([pad, x.slice(0, n - k)] if prev else [x.slice(k), pad])
    out = np.empty_like(x)
    if prev:
        out[k:] = x[:n - k]
        out[:k] = 0
    else:
        out[:n - k] = x[k:]
        out[n - k:] = 0
    return out


_UFUNCS = {"=": np.equal, "<>": np.not_equal, "<": np.less, "<=": np.less_equal,
           ">": np.greater, ">=": np.greater_equal}


def _moved_rows(v: _Vec, lo: int, hi: int) -> np.ndarray:
    """Rows ``lo:hi`` of ``v.values`` without building a lazy PREV/NEXT whole."""
    if v._values is not None or v.moved is None:
        return v.values[lo:hi]
    base, k, prev = v.moved
    s = k if prev else -k                          # row r holds base[r - s]
    out = np.zeros(hi - lo, dtype=base.dtype)
    a, b = max(lo, s), min(hi, len(base) + s)
    if a < b:
        out[a - lo:b - lo] = base[a - s:b - s]
    return out


def _compare_direct(op: str, a: _Vec, b: _Vec, n: int) -> np.ndarray:
    """``_op(op, a.values, b.values)`` for numpy columns of one form; a lazy
    PREV/NEXT operand is read as a slice of its base column (no shifted copy)."""
    lazy_a = a._values is None and a.moved is not None
    lazy_b = b._values is None and b.moved is not None
    if not (lazy_a or lazy_b):
        return _op(op, a.values, b.values)
    xa, sa = (a.moved[0], a.moved[1] if a.moved[2] else -a.moved[1]) if lazy_a else (a.values, 0)
    xb, sb = (b.moved[0], b.moved[1] if b.moved[2] else -b.moved[1]) if lazy_b else (b.values, 0)
    lo, hi = max(0, sa, sb), min(n, n + sa, n + sb)      # rows reading inside both arrays
    if lo >= hi:
        return _op(op, a.values, b.values)
    out = np.empty(n, dtype=bool)
    _UFUNCS[op](xa[lo - sa:hi - sa], xb[lo - sb:hi - sb], out=out[lo:hi])
    if lo > 0:
        out[:lo] = _op(op, _moved_rows(a, 0, lo), _moved_rows(b, 0, lo))
    if hi < n:
        out[hi:] = _op(op, _moved_rows(a, hi, n), _moved_rows(b, hi, n))
    return out


def _np_bool(arr) -> np.ndarray:
    return pc.fill_null(arr, False).to_numpy(zero_copy_only=False).astype(bool)


def _concat(parts: list) -> pa.Array:
    return pc.binary_join_element_wise(*parts, _ls(""))


def _op(op: str, a, b) -> np.ndarray:
    return I.COMPARISONS[op](a, b)


def _op_sign(op: str, sign: np.ndarray) -> np.ndarray:
    return _op(op, sign, 0)


def _sign_int_float(i: np.ndarray, f: np.ndarray) -> np.ndarray:
    """sign(i - f) exactly (Python compares int with float exactly); NaN rows 0."""
    g = np.floor(f)
    big = g >= 2.0**63
    small = g < -2.0**63
    bad = big | small | np.isnan(g)
    gi = np.where(bad, 0.0, g).astype(np.int64)
    frac = np.where(bad, 0.0, f - g)
    sign = np.where(i < gi, -1, np.where(i > gi, 1, np.where(frac > 0, -1, 0)))
    return np.where(big, -1, np.where(small, 1, sign)).astype(np.int8)


def _sign_days_ns(days: np.ndarray, ns: np.ndarray) -> np.ndarray:
    """sign(days * DAY - ns), exactly, with no overflow."""
    q = np.floor_divide(ns, DAY)
    r = ns - q * DAY
    return np.where(days > q, 1, np.where(days < q, -1, np.where(r == 0, 0, -1))).astype(np.int8)


def _sign_scaled(x: np.ndarray, d: int, y: np.ndarray) -> np.ndarray:
    """sign(x * 10**d - y) exactly, for d > 0."""
    if d >= 19:                      # |x * 10**d| >= 10**19 > |y| unless x == 0
        return np.where(x != 0, np.sign(x), -np.sign(y)).astype(np.int8)
    m = 10**d
    q = np.floor_divide(y, m)
    r = y - q * m
    return np.where(x > q, 1, np.where(x < q, -1, np.where(r == 0, 0, -1))).astype(np.int8)


def _checked(op: str, x: np.ndarray, y: np.ndarray) -> tuple:
    """int64 + - * with an exact overflow mask (two's complement wraps)."""
    if op == "+":
        r = x + y
        return r, ((x ^ r) & (y ^ r)) < 0
    if op == "-":
        r = x - y
        return r, ((x ^ y) & (x ^ r)) < 0
    r = x * y
    xs = np.where((x == 0) | (x == -1), 1, x)
    q = np.floor_divide(r, xs)
    over = np.where(x == 0, False, np.where(x == -1, y == INT64_MIN, (q != y) | (r - q * xs != 0)))
    return r, over


def _divmod_trunc(x: np.ndarray, y: np.ndarray) -> tuple:
    """(quotient truncated toward zero, remainder with the dividend's sign,
    overflow of INT64_MIN / -1); rows with y == 0 give garbage."""
    minus = (x == INT64_MIN) & (y == -1)
    special = (y == 0) | minus
    ys = np.where(special, 1, y) if special.any() else y
    q, r = np.divmod(x, ys)                       # floor division
    fix = (r != 0) & ((x ^ ys) < 0)               # signs differ: floor -> toward zero
    if fix.any():
        q += fix
        r -= np.where(fix, ys, 0)
    if minus.any():
        q[minus] = INT64_MIN
        r[minus] = 0
    return q, r, minus


def _magnitude(x: np.ndarray) -> np.ndarray:
    """|x| as uint64 (exact for INT64_MIN)."""
    u = x.astype(np.uint64)
    return np.where(x < 0, ~u + np.uint64(1), u)


def _ndigits(x: np.ndarray) -> np.ndarray:
    """Decimal digits of |x| (0 for 0)."""
    return np.searchsorted(_POW10_U64, _magnitude(x), side="right").astype(np.int64)


def _align(v: _Vec, scale: int) -> tuple:
    """Unscaled values of a BIGINT/DECIMAL column at a larger ``scale``, and
    the rows where that leaves int64."""
    s = v.scale if v.kind == "DECIMAL" else 0
    x = v.values
    d = scale - s
    if d == 0:
        return x, np.zeros(len(x), dtype=bool)
    if d >= 19:
        return np.zeros(len(x), dtype=np.int64), x != 0
    m = 10**d
    over = (x > INT64_MAX // m) | (x < -(INT64_MAX // m))
    return np.where(over, 0, x) * m, over


def _rescale_half_up(x: np.ndarray, s: int, t: int) -> np.ndarray:
    """Round unscaled values at scale ``s`` to scale ``t <= s``, ties away from
    zero (Decimal ROUND_HALF_UP)."""
    d = s - t
    if d == 0:
        return x
    if d >= 20:
        return np.zeros(len(x), dtype=np.int64)
    m = np.uint64(10**d)
    mag = _magnitude(x)
    q = mag // m
    r = mag - q * m
    q = q + (r >= m - r).astype(np.uint64)
    q = q.astype(np.int64)
    return np.where(x < 0, -q, q)


def _times_pow10(q: np.ndarray, k: int) -> tuple:
    """``q * 10**k`` (k > 0) and where it leaves int64."""
    m = 10**k
    if m > INT64_MAX:
        return np.zeros(len(q), dtype=np.int64), q != 0
    limit = INT64_MAX // m
    over = (q > limit) | (q < -limit)
    return np.where(over, 0, q) * m, over


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """Round doubles to integers, ties away from zero, keeping -0.0 (as the
    interpreter's Decimal round trip: for doubles the shortest repr ties
    exactly when the value does)."""
    t = np.trunc(x)
    f = x - t
    return np.where(f >= 0.5, t + 1.0, np.where(f <= -0.5, t - 1.0, t))


def _clip_months(m: np.ndarray) -> np.ndarray:
    # Beyond 200,000 months every result leaves the years 1-9999 anyway.
    return np.clip(m, -200_000, 200_000)


def _add_months_days(days: np.ndarray, months: np.ndarray) -> tuple:
    """``interpreter._add_months_date`` on day numbers: (days, out of range)."""
    safe = np.clip(days, DATE_MIN_DAYS - 1, DATE_MAX_DAYS + 1)
    month = safe.astype("datetime64[D]").astype("datetime64[M]").astype(np.int64)
    start = month.astype("datetime64[M]").astype("datetime64[D]").astype(np.int64)
    day_of_month = safe - start
    target = month + months
    year = np.floor_divide(target, 12) + 1970
    bad = (year < 1) | (year > 9999)
    target = np.where(bad, 0, target)
    first = target.astype("datetime64[M]").astype("datetime64[D]").astype(np.int64)
    nxt = (target + 1).astype("datetime64[M]").astype("datetime64[D]").astype(np.int64)
    return np.where(bad, 0, first + np.minimum(day_of_month, nxt - first - 1)), bad


def _add_months_ns(ns: np.ndarray, months: np.ndarray) -> tuple:
    """``interpreter._add_months`` on nanoseconds: (ns, out of range, overflow)."""
    days = np.floor_divide(ns, DAY)
    rem = ns - days * DAY
    d, bad = _add_months_days(days, months)
    limit = (INT64_MAX - DAY) // DAY
    over = ~bad & ((d > limit) | (d < -limit))
    return np.where(bad | over, 0, d) * DAY + rem, bad, over


def _pow(x: float, y: float) -> float:
    """The interpreter's POWER."""
    try:
        return math.pow(x, y)
    except ValueError:
        return math.nan
    except OverflowError:
        return math.inf


def _pycall(fn: Callable, ok: np.ndarray, *cols) -> np.ndarray:
    """``fn`` (a Python math function) on the rows ``ok`` through an object
    ufunc: bit-identical to the interpreter, at per-element call cost."""
    out = np.zeros(len(ok), dtype=np.float64)
    idx = np.flatnonzero(ok)
    if idx.size:
        ufunc = np.frompyfunc(fn, len(cols), 1)
        out[idx] = ufunc(*[c[idx] for c in cols]).astype(np.float64)
    return out


def _case_map(arr: pa.Array, ok: np.ndarray, upper: bool) -> pa.Array:
    """str.upper / str.lower: ASCII rows in pyarrow; other rows through
    Python's full Unicode mapping (an object array of just those rows)."""
    out = pc.ascii_upper(arr) if upper else pc.ascii_lower(arr)
    ascii_ = _np_bool(pc.string_is_ascii(arr)) | ~ok
    if ascii_.all():
        return out
    idx = np.flatnonzero(~ascii_)
    sub = arr.take(pa.array(idx, pa.int64())).to_numpy(zero_copy_only=False)
    mapped = np.frompyfunc(str.upper if upper else str.lower, 1, 1)(sub)
    return pc.replace_with_mask(out, pa.array(~ascii_, pa.bool_()),
                                pa.array(mapped, pa.large_string()))


def _substr(arr: pa.Array, ok: np.ndarray, start: np.ndarray,
            length: Optional[np.ndarray]) -> pa.Array:
    """SQL SUBSTR (1-based; a negative start counts from the end) as the
    interpreter slices code points, for per-row start and length."""
    cplen = pc.fill_null(pc.utf8_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    empty = ~ok | (start == 0) | ((start < 0) & (cplen + start < 0))
    begin = np.where(start > 0, start - 1, cplen + start)
    b = np.clip(begin, 0, cplen)
    if length is None:
        e = cplen
    else:
        empty |= length < 0
        e = np.minimum(b + np.clip(length, 0, cplen), cplen)
    b = np.where(empty, 0, b)
    e = np.where(empty, 0, e)
    return _slice_codepoints(arr, b, e)


def _substr_constant(arr: pa.Array, start: int, length: Optional[int] = None) -> pa.Array:
    """SUBSTR with constant positions: pyarrow's code point slice (Python's
    slicing semantics, checked in the tests), plus SQL's rule that a
    negative start before the first character gives ''."""
    empty = pa.repeat(_ls(""), len(arr))
    if start == 0 or (length is not None and length < 0):
        return empty
    if start > 0:
        stop = None if length is None else start - 1 + length
        return pc.utf8_slice_codeunits(arr, start - 1, stop)
    stop = None if length is None or start + length >= 0 else start + length
    sliced = pc.utf8_slice_codeunits(arr, start, stop)
    lengths = pc.utf8_length(arr)
    too_short = pc.fill_null(pc.less(pc.add(lengths, pa.scalar(start, pa.int64())), 0), False)
    return pc.if_else(too_short, empty, sliced)


def _slice_codepoints(arr: pa.Array, lo: np.ndarray, hi: np.ndarray) -> pa.Array:
    """Rows' code points ``lo:hi`` (0 <= lo <= hi <= length): a ragged gather
    over the UTF-8 bytes (a code point starts at each non-continuation byte)."""
    n = len(arr)
    if n == 0:
        return arr
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64)[arr.offset:arr.offset + n + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else \
        np.zeros(0, dtype=np.uint8)
    first, last = int(offsets[0]), int(offsets[-1])
    leads = np.flatnonzero((data[first:last] & 0xC0) != 0x80) + first
    before = np.searchsorted(leads, offsets)           # code points before each offset
    pos = np.append(leads, last)                       # byte of the k-th code point
    row_first = before[:-1]
    start = pos[row_first + lo]
    stop = pos[row_first + hi]
    sizes = stop - start
    new_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=new_offsets[1:])
    gather = np.repeat(start - new_offsets[:-1], sizes) + np.arange(new_offsets[-1])
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(new_offsets),
                                            pa.py_buffer(data[gather].tobytes()))


def _like_re2(pattern: str, escape: Optional[str]) -> str:
    """``interpreter._like_regex`` for RE2: the same token walk, each literal
    character as ``\\x{hex}`` so no character needs RE2 escaping rules."""
    out, i = [r"(?s)\A"], 0
    while i < len(pattern):
        ch = pattern[i]
        if escape and ch == escape and i + 1 < len(pattern):
            out.append("\\x{%x}" % ord(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else "\\x{%x}" % ord(ch))
        i += 1
    out.append(r"\z")
    return "".join(out)
