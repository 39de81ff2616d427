"""An aggregate's row expression at every row, in one compiled pass.

What: the argument of ``SUM(price * volume)`` (an expression of the row's
own columns: no PREV/NEXT, which the analyzer refuses inside aggregates, no
CLASSIFIER, MATCH_NUMBER or other variable) evaluated at every row of the
input into one float64 or int64 array and its validity, by a numba kernel
generated per expression shape. measures.py aggregates it as a column
(measure_exprs.row_values).

Why: masks.py evaluates it with a numpy pass per operator, plus one to
combine each column's Arrow chunks and one per conversion: on the
benchmark's ``v_shape_vwap`` (1e7 rows of ticks.py, 3 chunks), 25 ms for
``price * volume``; this is one pass reading the columns in place.

How: the body is engines/registers.py's ``_Gen.argument``, the generator
the register engine uses for aggregate arguments (three-valued logic, the
interpreter's order of evaluation, exact int64 arithmetic with overflow as
an error, IEEE doubles), with predicates/fused.py's column reads (Arrow
buffers in place, validity bitmaps only for columns holding NULLs) and its
kernel module, disk cache and numba options. A row that raises (overflow,
division by zero) makes the pass give up: masks.py then evaluates the
expression and reports the exact error, or declines to the interpreter.
Only BIGINT and DOUBLE results over integer, floating and boolean columns
are compiled; anything else is left to masks.py.

Cost: one pass over the rows on all cores; a few seconds of numba
compilation once per expression shape and NULL layout, kept on disk.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa

from ..kernels import buffers
from ..syntax import ast as A
from . import fused as F

# Below this many rows masks.py's passes cost well under a millisecond.
MIN_ROWS = F.MIN_ROWS
# The result kinds compiled: the generator's kind letter and the numpy type.
_RESULTS = {"BIGINT": ("i", np.int64), "DOUBLE": ("f", np.float64)}


def row_values(expr: A.Expr, table: pa.Table, *, jit: Optional[bool] = None
               ) -> Optional[pa.Array]:
    """``expr`` at every row of ``table`` as an Arrow array of its type.

    Parameters
    ----------
    expr : Expr
        An analysed aggregate argument that reads only its row
        (measure_exprs.reads_row_only).
    table : pyarrow.Table
        The sorted input.
    jit : bool, optional
        Compiled (True) or the same code as plain Python (False, for tests);
        None: compiled, and None returned below ``MIN_ROWS`` rows or
        without numba.

    Returns
    -------
    pyarrow.Array or None
        None when the expression, its columns' types, or some row (it
        raises) are not for this pass.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from gpu_mr.analysis import analyze
    >>> from gpu_mr.syntax import parse_clause
    >>> t = pa.table({"t": [0, 1, 2], "p": [1.5, 2.0, None], "v": [2, 3, 4]})
    >>> q = analyze(parse_clause("ORDER BY t MEASURES SUM(p * v) AS pv PATTERN (A+) "
    ...     "DEFINE A AS TRUE"), t.schema)
    >>> row_values(q.measures[0].expr.args[0], t, jit=False).to_pylist()
    [3.0, 6.0, None]
    """
    n = table.num_rows
    if jit is None:
        if n < MIN_ROWS or not F._have_numba():
            return None
        jit = True
    shape = _shape(expr)
    if isinstance(shape, str):
        return None
    return shape.run(table, jit)


def _shape(expr: A.Expr):
    """The expression's _ValueShape, or the reason it has none; one per
    expression object (measures of one query keep theirs)."""
    return F.cached(expr, _ValueShape)


class _ValueShape(F.Plan):
    """The generated value function of one expression (the plan ``_Gen``
    writes into: columns, constants)."""

    def __init__(self, expr: A.Expr):
        from ..engines import registers as R
        if expr.type is None or expr.type.kind not in _RESULTS:
            raise F._Decline(f"{expr.type} results are not compiled")
        super().__init__({}, {})
        self.kind, self.dtype = _RESULTS[expr.type.kind]
        try:
            body = R._Gen(self, -1).argument(expr, "value")
        except R._Decline as exc:
            raise F._Decline(str(exc)) from None
        # the header _Gen writes reads the match (label, number): replaced
        self.body = body.split("\n", 1)[1]
        if self.reads_match([self.body]):
            raise F._Decline("the argument reads the match")
        self.settle()

    def source(self, nullable: tuple) -> str:
        """``value`` (error code, value, NULL at row ``q`` of the window) and
        ``run_rows``, the loop writing rows ``r0 .. r1`` of the window at
        ``shift + q``; it returns 1 when some row raises."""
        cols = "".join(f"V{c}, M{c}, O{c}, " for c in range(len(self.slots)))
        lines = [f"def value(q, {cols}ci, cf):", self._columns_read(self.body, nullable),
                 f"def run_rows(r0, r1, shift, out, ok, {cols}ci, cf):",
                 "    fail = 0",
                 "    for q in range(r0, r1):",
                 f"        st, x, xn = value(q, {cols}ci, cf)",
                 "        fail |= st",
                 "        out[np.uint64(q + shift)] = x",
                 "        ok[np.uint64(q + shift)] = not xn",
                 "    return 1 if fail != 0 else 0"]
        return "\n".join(lines) + "\n"

    def run(self, table: pa.Table, jit: bool) -> Optional[pa.Array]:
        n = table.num_rows
        found = self.inputs(table, jit)
        if found is None:
            return None
        columns, nullable, kernel = found
        columns, pieces = self.pieces(columns, n, 0)     # no PREV/NEXT in an aggregate
        out = buffers.empty(n, self.dtype)
        ok = buffers.empty(n, np.bool_)
        tasks = []
        for ws, we, _, _ in pieces:
            args = self.window_args(columns, nullable, ws, we)
            if args is None:
                return None
            for a in range(ws, we, F.TASK_ROWS):
                tasks.append((a - ws, min(a + F.TASK_ROWS, we) - ws, ws, args))
        ci, cf = self.constants(jit)

        def task(t):
            r0, r1, shift, args = t
            if not jit:
                args = [a.tolist() if isinstance(a, np.ndarray) else a for a in args]
            return kernel(r0, r1, shift, out, ok, *args, ci, cf)

        if any(F.run_tasks(task, tasks, kernel, jit)):
            return None
        mask = None if n == 0 or ok.all() else ~ok
        return pa.array(out, pa.int64() if self.kind == "i" else pa.float64(), mask=mask)
