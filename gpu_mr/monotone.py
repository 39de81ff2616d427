"""Which MIN/MAX over a variable its DEFINE decides: the value at its first
or last row.

What: :func:`extreme_at` answers ``"FIRST"``, ``"LAST"`` or None for
``MIN(X.c)`` / ``MAX(X.c)``. Where every match maps ``X`` to one run of
consecutive rows (``X`` occurs once in the pattern, under no quantifier
that repeats a group around it) and ``X``'s DEFINE holds only where
``c < PREV(c)`` (a conjunct of it; ``PREV(c) > c`` alike), each of ``X``'s
rows but the first is below the row before it, which is ``X``'s too: the
keys fall strictly along the run, so MIN is the last row's and MAX the
first's; ``c > PREV(c)`` the other way round. That holds for the final
value and for RUNNING values alike (the rows so far are a prefix of the
run). ``<=``/``>=`` make the keys fall or rise with ties, which give equal
values but for floats (``-0.0`` and ``0.0`` are equal, and ``MIN`` keeps
the first of them), so those count for integer and time columns only.
NULL and NaN do not get in: a comparison with either is not true, so no
row of ``X`` holds one.
Why: the walk computing ONE ROW measures compares every counted row's key
for a MIN/MAX; the row alone is a bit test and one load per match
(kernels/unanchored.py ``EXT_AT_LAST``): ``MIN(DOWN.price)`` in V-shape
queries, ``MIN(B.price)``/``MAX(C.price)`` in W-shapes. Past the walk's two
extremes such a MIN/MAX is computed as the FIRST/LAST it equals
(:func:`as_navigation`; ONE ROW only): one row per match where the segmented
kernels passed over the variable's rows (``w_shape``'s ``MIN(D.price)``,
423,000 matches: 4.8 -> 0.04 ms, the value then gathered with the others).
"""

from __future__ import annotations

from typing import Optional

from .syntax import ast as A
from .syntax.types import BIGINT as _BIGINT

_FALLS = {"<": (True, True), "<=": (True, False), ">": (False, True), ">=": (False, False)}
# ``PREV(c) op c`` read as ``c op' PREV(c)``
_MIRRORED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
_ORDERED_KINDS = ("BIGINT", "DOUBLE", "DECIMAL", "DATE", "TIMESTAMP", "INTERVAL")


def extreme_at(query, var: str, column: str, want_max: bool) -> Optional[str]:
    """``"FIRST"`` or ``"LAST"``: the row of ``var``'s rows in a match whose
    ``column`` is the MIN (MAX with ``want_max``) of them; None when the
    query does not decide it (see the module's doc). ``var``: a primary
    variable; ``column``: an input column's resolved name."""
    if var not in query.primary_vars or not _one_run(query.pattern, var):
        return None
    # UNKNOWN before a schema is given (explain()): strict steps only
    kind = query.column_types[column].kind if column in query.column_types else None
    if kind not in _ORDERED_KINDS + ("UNKNOWN",):
        return None
    define = query.defines.get(var)
    for conjunct in _conjuncts(define) if define is not None else ():
        step = _step(conjunct, var, column)
        if step is None:
            continue
        falls, strict = step
        if strict or kind not in ("UNKNOWN", "DOUBLE"):
            return "LAST" if falls != want_max else "FIRST"
    return None


def _one_run(pattern: A.Pattern, var: str) -> bool:
    """Whether every match maps ``var`` to consecutive rows: it occurs once,
    and no quantifier around a group holding it lets the group repeat."""
    found: list = []

    def visit(node: A.Pattern, repeats: bool) -> None:
        if isinstance(node, A.PVar):
            if node.name == var:
                found.append(repeats)
        elif isinstance(node, A.PQuant):
            # X+ repeats X alone: its rows stay together
            again = repeats or (not isinstance(node.body, A.PVar)
                                and (node.max is None or node.max > 1))
            visit(node.body, again)
        elif isinstance(node, A.PExclude):
            visit(node.body, repeats)
        elif isinstance(node, (A.PConcat, A.PAlt, A.PPermute)):
            for item in node.items:
                visit(item, repeats)
        elif not isinstance(node, (A.PEmpty, A.PAnchor)):
            found.append(True)          # a node this check does not know: no answer
    visit(pattern, False)
    return found == [False]


def _conjuncts(e: A.Expr) -> list:
    if isinstance(e, A.Binary) and e.op == "AND":
        return _conjuncts(e.left) + _conjuncts(e.right)
    return [e]


def _step(e: A.Expr, var: str, column: str) -> Optional[tuple]:
    """``(falls, strict)`` when ``e`` is ``c op PREV(c)`` (or mirrored) on
    the current row of ``var``, else None."""
    if not isinstance(e, A.Binary) or e.op not in _FALLS:
        return None
    op = e.op
    if _is_current(e.left, var, column) and _is_prev(e.right, var, column):
        return _FALLS[op]
    if _is_prev(e.left, var, column) and _is_current(e.right, var, column):
        return _FALLS[_MIRRORED[op]]
    return None


def _is_current(e: A.Expr, var: str, column: str) -> bool:
    """``c`` or ``X.c`` in ``X``'s DEFINE: the row being matched."""
    return isinstance(e, A.ColumnRef) and e.var in (None, var) and e.resolved == column


def _is_prev(e: A.Expr, var: str, column: str) -> bool:
    """``PREV(c)`` or ``PREV(c, 1)``: the row physically before."""
    if not (isinstance(e, A.Navigation) and e.kind == "PREV" and not e.indexed):
        return False
    offset = e.offset
    one = offset is None or (isinstance(offset, A.Literal) and offset.value == 1
                             and not isinstance(offset.value, bool))
    return one and _is_current(e.arg, var, column)


def as_navigation(query, e: A.Expr) -> Optional[A.Navigation]:
    """``MIN(X.c)`` / ``MAX(X.c)`` as the ``FIRST(X.c)`` or ``LAST(X.c)`` it
    equals (RUNNING or FINAL alike, as written), where :func:`extreme_at`
    decides its row; else None. The engines then find one row per match
    (the walk's FIRST/LAST of a variable) instead of reducing over the
    variable's rows."""
    if not (isinstance(e, A.Aggregate) and e.name in ("MIN", "MAX") and not e.star
            and not e.distinct and not e.over_order and len(e.args) == 1
            and isinstance(e.args[0], A.ColumnRef) and e.var in query.primary_vars):
        return None
    ref = e.args[0]
    at = extreme_at(query, e.var, ref.resolved, e.name == "MAX")
    if at is None:
        return None
    zero = A.Literal(value=0, literal_type="bigint", type=_BIGINT)
    return A.Navigation(kind=at, arg=ref, offset=zero, semantics=e.semantics, type=e.type,
                        pos=e.pos)
