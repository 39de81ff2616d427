"""Measure expressions over per-row results, vectorised.

What: a measure such as ``LAST(UP.price) - FIRST(STRT.price)`` or ``CASE
WHEN COUNT(*) > 5 THEN 'long' END`` is an expression over *leaves* that
measures.py already computes as whole arrays, one value per output row
(MATCH_NUMBER(), CLASSIFIER, column references, FIRST/LAST/PREV/NEXT,
aggregates). :func:`evaluate` takes those arrays as the columns of a table
with one row per output row and evaluates the expression around them with
predicates/masks.py's evaluator, which reproduces the interpreter exactly
(three-valued logic, integer overflow and division by zero as errors,
CASE branches only where taken, the CAST rules, string and date functions).
Output rows without a match (WITH UNMATCHED ROWS) get NULL, as every
measure does there. An aggregate over an expression of the row
(``SUM(A.price * A.volume)``) has its argument evaluated at every row
(:func:`row_values`: in one compiled pass by predicates/fused_values.py
where it can, else the same way) and aggregated as if it were a column.

Exactness: where the expression cannot be evaluated so -- a leaf the
vectors do not compute, a construct the evaluator refuses, an ARRAY
result, a DECIMAL result its type's scale or precision cannot hold, the clock
(CURRENT_TIMESTAMP: the interpreter reads its own), or any output row where
the evaluation raises or leaves what 64 bits hold -- :func:`evaluate`
returns None and the interpreter computes the measure, giving the exact
value or error.

Why: without this a single arithmetic measure sent every output row
through the interpreter, about a hundred times the cost of the query's
other measures (DESIGN.md §5: measures are vectorised segmented work).
Cost: the leaves' own cost, plus a few numpy passes per expression node
over the output rows.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .analysis import CheckedQuery
from .frames import SortedInput
from .predicates import masks as M
from .syntax import ast as A
from .syntax import types as T

# The nodes measures.py computes as whole arrays (the evaluator's leaves here).
LEAVES = (A.MatchNumber, A.Classifier, A.ColumnRef, A.Navigation, A.Aggregate)
_CLOCK = ("CURRENT_TIMESTAMP", "LOCALTIMESTAMP", "CURRENT_DATE")
_OUT_KINDS = ("BIGINT", "DOUBLE", "BOOLEAN", "VARCHAR", "DATE", "TIMESTAMP", "INTERVAL",
              "INTERVAL_YM", "DECIMAL")


def leaves(expr: A.Expr) -> Optional[list]:
    """The leaves of ``expr`` (outermost first, each once), or None when it
    holds something only the interpreter evaluates (a subquery, the clock)."""
    found: list = []

    def visit(e: A.Expr) -> bool:
        if isinstance(e, LEAVES):
            found.append(e)
            return True
        if isinstance(e, A.Subquery) or (isinstance(e, A.Call) and e.name in _CLOCK):
            return False
        return all(visit(c) for c in e.children())
    return found if visit(expr) else None


def evaluate(query: CheckedQuery, expr: A.Expr, out_type: T.SqlType, n: int,
             leaf_array: Callable[[A.Expr], Optional[pa.Array]],
             has: Optional[np.ndarray] = None) -> Optional[pa.Array]:
    """The measure ``expr`` as an Arrow array of ``out_type``, one value per
    output row, or None (the interpreter's to compute: see the module
    docstring).

    Parameters
    ----------
    leaf_array
        A leaf's values per output row, as an Arrow array of the leaf's
        type, or None when the vectors do not compute it.
    has
        Per output row, whether it has a match (None: all do); the others
        are NULL.
    """
    if out_type is None or out_type.kind not in _OUT_KINDS:
        return None
    found = leaves(expr)
    if found is None:
        return None
    columns = {}
    for i, leaf in enumerate(found):
        arr = leaf_array(leaf)
        if arr is None or len(arr) != n:
            return None
        columns[f"leaf{i}"] = arr
    columns.setdefault("rows", pa.nulls(n))         # a table of n rows, even without leaves
    data = SortedInput(pa.table(columns), np.array([0, n], dtype=np.int64), None, True)
    ctx = M._Context(data, M._default_now())
    names = {id(leaf): f"leaf{i}" for i, leaf in enumerate(found)}
    try:
        with np.errstate(all="ignore"):
            v = _LeafEval(ctx, query, names).eval(expr)
    except (M._Reject, pa.ArrowException, ValueError):
        return None
    if v.err is not None and v.err.any():
        return None             # a row raises or is inexact: the interpreter decides
    if v.kind != out_type.kind:
        return None
    valid = v.valid if has is None else v.valid & has
    try:
        return _to_arrow(v, valid, out_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None             # e.g. a value outside the measure's narrower type


def row_values(query: CheckedQuery, data: SortedInput, expr: A.Expr,
               var: Optional[str]) -> Optional[pa.Array]:
    """An aggregate's argument (``SUM(A.price * A.volume)``: its columns read
    at the row being aggregated) at every row of ``data``, as an Arrow array
    of its type; None when it reads the match (CLASSIFIER, another
    variable), or raises or is inexact at some row (the interpreter then
    evaluates it only where counted)."""
    t = expr.type
    if t is None or t.kind not in _OUT_KINDS or not reads_row_only(expr, var):
        return None
    from .predicates import fused_values
    compiled = fused_values.row_values(expr, data.table)   # one pass, where it can
    if compiled is not None:
        return compiled
    ctx = M._Context(data, M._default_now())
    try:
        with np.errstate(all="ignore"):
            v = M._Eval(ctx, query, var).eval(expr)
    except (M._Reject, pa.ArrowException, ValueError):
        return None
    if (v.err is not None and v.err.any()) or v.kind != t.kind:
        return None
    try:
        return _to_arrow(v, v.valid, t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None


def reads_row_only(expr: A.Expr, var: Optional[str]) -> bool:
    """Whether an aggregate's argument reads only the row it aggregates
    (its columns, unqualified or of ``var``, PREV/NEXT of them, scalar
    functions): what :func:`row_values` can evaluate at every row."""
    for node in expr.walk():
        if (isinstance(node, (A.Classifier, A.MatchNumber, A.Aggregate, A.Subquery))
                or (isinstance(node, A.Navigation) and node.kind not in ("PREV", "NEXT"))
                or (isinstance(node, A.Call) and node.name in _CLOCK)
                or (isinstance(node, A.ColumnRef) and node.var not in (None, var))):
            return False
    return True


class _LeafEval(M._Eval):
    """The masks' evaluator, with the leaves read from the table of leaf
    arrays instead of evaluated."""

    def __init__(self, ctx, query: CheckedQuery, names: dict):
        super().__init__(ctx, query, None)
        self.names = names

    def leaf(self, e: A.Expr) -> M._Vec:
        return self.ctx.column(self.names[id(e)], e.type)

    _MatchNumber = _Classifier = _ColumnRef = _Navigation = _Aggregate = leaf


def _to_arrow(v: M._Vec, valid: np.ndarray, t: T.SqlType) -> Optional[pa.Array]:
    """An evaluated column as an Arrow array of the measure's type."""
    target = t.arrow()
    everywhere = bool(valid.all())          # no NULL: no validity to build
    mask = None if everywhere else ~valid
    kind = v.kind
    if kind == "VARCHAR":
        values = v.values.cast(target)
        if everywhere and values.null_count == 0:
            return values
        return pc.if_else(pa.array(valid, pa.bool_()), values, pa.nulls(len(values), target))
    values = np.asarray(v.values)
    if kind == "BOOLEAN":
        return pa.array(values.astype(bool, copy=False), pa.bool_(), mask=mask)
    if kind == "DOUBLE":
        return pa.array(values.astype(np.float64, copy=False), pa.float64(),
                        mask=mask).cast(target)
    if kind in ("BIGINT", "INTERVAL_YM", "INTERVAL"):     # intervals: ns (duration), months
        return pa.array(values.astype(np.int64, copy=False), pa.int64(), mask=mask).cast(target)
    if kind == "DECIMAL":
        return decimal_array(np.where(valid, values, 0), valid, v.scale, target)
    if kind == "DATE":
        days = np.where(valid, values, 0)
        if np.any((days < -2**31) | (days >= 2**31)):
            return None
        return pa.array(days.astype(np.int32), pa.date32(), mask=mask).cast(target)
    # TIMESTAMP: nanoseconds, in the measure's own unit when exact
    factor = T.NS_PER[target.unit]
    ns = np.where(valid, values, 0)
    if factor > 1 and np.any(ns % factor):
        return None
    return pa.array(ns // factor, pa.int64(), mask=mask).cast(target)


def decimal_array(unscaled: np.ndarray, valid: np.ndarray, scale: int,
                  target: pa.DataType) -> Optional[pa.Array]:
    """Unscaled int64 decimals at ``scale`` as a decimal128 array of
    ``target`` (NULL where not ``valid``); None where the target's scale is
    smaller (that would round) or a value does not fit its precision."""
    if not pa.types.is_decimal128(target) or target.scale < scale:
        return None
    everywhere = bool(valid.all())
    unscaled = np.where(valid, unscaled, 0)
    factor = 10 ** (target.scale - scale)
    if factor > 1:
        if np.any(np.abs(unscaled) > M.INT64_MAX // factor):
            return None
        unscaled = unscaled * factor
    if target.precision < 19 and np.any(np.abs(unscaled) >= 10 ** target.precision):
        return None
    n = unscaled.shape[0]
    words = np.empty((n, 2), dtype=np.int64)      # 16 bytes each, little-endian
    words[:, 0] = unscaled
    words[:, 1] = unscaled >> 63                  # the sign, extended
    arr = pa.Array.from_buffers(target, n, [None, pa.py_buffer(words)])
    if everywhere:
        return arr
    return pc.if_else(pa.array(valid, pa.bool_()), arr, pa.nulls(n, target))
