"""MEASURES of ONE ROW PER MATCH computed on the device, next to the matches.

What: for a ONE ROW PER MATCH query whose every measure is in the device
subset, the GPU engine's matches (``engines.gpu.DeviceMatches``, with
their recovered paths where a measure reads labels: see
:func:`device_measures_need_paths`) and the input columns the measures
read (on the device once: ``device_input.DeviceInput.column``, in the
matches' row order) give each measure's value per match on the
device; only those per-match values (and a few flags) come to the host,
where they become Arrow arrays, or they stay on the device as columns
(``on_device``: gpu_mr/device_output.py builds a cuDF frame of them). The
subset:

- ``MATCH_NUMBER()``; ``CLASSIFIER()`` / ``CLASSIFIER(X)`` (the label ids
  come back, the strings are built on the host from the variable names);
- a column reference (``col``: the match's last row; ``X.col``: the last
  row mapped to X), and ``FIRST``/``LAST`` of a column or CLASSIFIER with a
  constant offset, RUNNING or FINAL (in ONE ROW both are the match's end);
- ``COUNT(*)``, ``COUNT(X.*)``, ``COUNT(X.col)``, ``SUM``/``AVG``/``MIN``/
  ``MAX(X.col)`` and their forms over every row of the match;
- ``COUNT``/``SUM``/``AVG``/``MIN``/``MAX`` of a row expression
  (``SUM(A.price * A.volume)``): the argument computed at every row on the
  device by the DEFINE masks' templates (predicates/device_masks.py:
  ``DeviceValue``), then aggregated as a column is; a row where it raises
  sends the measure to the host, which gives the error;

- an expression over the above (``LAST(UP.price) - FIRST(A.price)``, CASE,
  casts): the leaves per match on the device; a BIGINT or DOUBLE expression
  evaluated there too, by the DEFINE masks' value templates over the leaves
  as columns (so one array per measure comes back, or none), others (and
  one that raises at some match) on the host over per-match arrays
  (measure_exprs.py);

over integer, floating point (32 and 64 bit), boolean, date, timestamp and
duration columns (COUNT of a column reads only its validity, so any type).
Anything else (PREV/NEXT, strings, DISTINCT, an aggregate over an
expression of other types, ...) is declined by
:func:`device_measures_reason`, and data that would make the device's
value differ from the host's (a BIGINT SUM leaving its
range, NaN under SUM/AVG/MIN/MAX, a cast Arrow refuses) by
:func:`measures_on_device` returning a reason: the caller then runs the
host's ``measures.assemble``.

Semantics are the host's (``measures._Vectors``, itself checked against
the interpreter), reproduced exactly: NULLs skipped by aggregates and
counted by none; an empty match has NULL values and 0 counts; rows inside
``{- -}`` still count (exclusion only hides rows of ALL ROWS output); SUM of
BIGINT is BIGINT, of DOUBLE is DOUBLE, summed sequentially per match in the
interpreter's order and arithmetic; AVG is DOUBLE (the sum divided by the
count, as ``_Vectors`` does, on the device: IEEE division gives the host's
bits); MIN/MAX keep the first of equal
values; a value read from a column is cast to the column's SQL type as the
host's gather is. The per-match kernels are kernels/segmented.py's bodies
compiled for the device (kernels/gpu_measures.py).

Why: the host measures need the whole per-row path (labels, three bytes
per matched row) and the columns on the host; here the O(matches) results
are all that crosses, and columns already on the device serve as they are.
Cost on the device: per measure one thread per match over its elements
(O(total match length)), or O(matches) index arithmetic for MATCH_NUMBER,
COUNT(*) and FIRST/LAST over every row or of a variable that every match
begins (ends) with (``nfa.edge_variables``, as measures.py); landings
shared by measures are computed once. Transfers: one or two per-match
arrays per measure (8 bytes a match) and one flag scalar per aggregate.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional, Union

import numpy as np
import pyarrow as pa

from . import backend as B, measure_exprs
from .analysis import CheckedQuery
from .pattern.nfa import compile_nfa, edge_variables
from .syntax import ast as A


class DeviceColumn(NamedTuple):
    """An input column on the device: ``values`` (a numpy-dtype device
    array, one per row: integers and floats as they are, booleans as 0/1
    bytes (bool arrays serve too), dates, timestamps and durations as their
    integer storage; None
    for other types, of which only the validity is moved), ``valid`` (device
    bool per row, None when the column has no NULL) and its Arrow ``type``."""
    values: object
    valid: object
    type: pa.DataType


# ---------------------------------------------------------------- the subset

def _values_type(t: pa.DataType) -> Optional[np.dtype]:
    """The numpy dtype whose values the measures read for a column of Arrow
    type ``t`` (``DeviceInput.column`` holds booleans as bool, read as
    bytes), None where only its validity is read."""
    if pa.types.is_integer(t) or t in (pa.float32(), pa.float64()):
        return np.dtype(t.to_pandas_dtype())
    if pa.types.is_boolean(t):
        return np.dtype(np.uint8)
    if t == pa.date32():
        return np.dtype(np.int32)
    if t == pa.date64() or pa.types.is_timestamp(t) or pa.types.is_duration(t):
        return np.dtype(np.int64)
    return None


def _summable(t: pa.DataType) -> bool:
    """Whether the device sums this column type as the host does (uint64
    values past the BIGINT range are the interpreter's to handle)."""
    return ((pa.types.is_integer(t) and t != pa.uint64())
            or t in (pa.float32(), pa.float64()))


# A form is what a measure computes, as plain tuples (hashable: landings
# shared between measures are computed once):
#   ("number",)
#   ("label", landing)
#   ("value", column, target type, landing)
#   ("rows",)                         COUNT(*) over every row
#   ("count", ids, column or None)    COUNT(X.*) / COUNT(X.col)
#   ("SUM" | "AVG", ids, column)
#   ("MIN" | "MAX", ids, column, target type)
# where a landing is ("FIRST" | "LAST", ids, k) and ids the variable ids
# a name covers (None: every row).

def _ids(query: CheckedQuery, var: Optional[str]):
    if var is None:
        return None
    names = query.subsets.get(var, (var,))
    order = {name: i for i, name in enumerate(query.primary_vars)}
    return tuple(sorted(order[name] for name in names))


def _form(query: CheckedQuery, e: A.Expr, edges: tuple) -> Union[tuple, str]:
    """The device form of measure expression ``e``, or why there is none.
    ``edges``: the pattern's ``(first, last)`` edge variables."""
    schema = query.input_schema

    def land(kind: str, var: Optional[str], k: int) -> tuple:
        ids = _ids(query, var)
        if ids is not None and k == 0 and edges[kind == "LAST"] <= frozenset(ids):
            # every match begins (ends) with one of ids: its first (last) row,
            # by index arithmetic, no walk over the labels (as measures.py)
            ids = None
        return (kind, ids, k)

    def column_type(ref: A.ColumnRef) -> pa.DataType:
        return schema.field(ref.resolved).type

    def value(ref: A.ColumnRef, landing: tuple):
        if _values_type(column_type(ref)) is None:
            return f"{ref.to_sql()} is of a type the device does not read ({column_type(ref)})"
        return ("value", ref.resolved, ref.type.arrow(), landing)

    if isinstance(e, A.MatchNumber):
        return ("number",)
    if isinstance(e, A.Classifier):
        return ("label", land("LAST", e.var, 0))
    if isinstance(e, A.ColumnRef):
        return value(e, land("LAST", e.var, 0))
    if isinstance(e, A.Navigation):
        if e.kind not in ("FIRST", "LAST"):
            return f"{e.kind} is not computed on the device"
        if not isinstance(e.offset, A.Literal) or not isinstance(e.offset.value, int):
            return f"{e.to_sql()}: the offset is not a constant"
        landing = land(e.kind, e.arg.var, int(e.offset.value)) if isinstance(
            e.arg, (A.ColumnRef, A.Classifier)) else None
        if isinstance(e.arg, A.Classifier):
            return ("label", landing)
        if isinstance(e.arg, A.ColumnRef):
            return value(e.arg, landing)
        return f"{e.to_sql()}: only a column or CLASSIFIER() inside {e.kind} on the device"
    if isinstance(e, A.Aggregate):
        ids = _ids(query, e.var)
        if e.distinct or e.over_order:
            return f"{e.to_sql()}: DISTINCT and OVER are not computed on the device"
        if e.star:
            return ("rows",) if ids is None else ("count", ids, None)
        if e.name not in ("COUNT", "SUM", "AVG", "MIN", "MAX") or len(e.args) != 1:
            return f"{e.to_sql()} is not computed on the device"
        if not isinstance(e.args[0], A.ColumnRef):
            return _argument_form(query, e, ids)
        ref = e.args[0]
        t = column_type(ref)
        if e.name == "COUNT":
            return ("count", ids, ref.resolved)
        if e.name in ("SUM", "AVG"):
            if ref.type.kind not in ("BIGINT", "DOUBLE") or not _summable(t):
                return f"{e.to_sql()}: the device sums integer and floating point columns only"
            return (e.name, ids, ref.resolved)
        if _values_type(t) is None:
            return f"{e.to_sql()}: the device does not order {t} values"
        return (e.name, ids, ref.resolved, ref.type.arrow())
    return f"{e.to_sql()} is not computed on the device"


def _argument_form(query: CheckedQuery, e: A.Aggregate, ids) -> Union[tuple, str]:
    """The form of COUNT/SUM/AVG/MIN/MAX over a row expression (``SUM(A.price *
    A.volume)``): the argument computed at every row on the device by the
    DEFINE masks' templates (predicates/device_masks.py), then aggregated
    as a column is; the column slot holds ``("expr", argument, variable)``."""
    from .predicates.device_masks import compile_device_value
    arg = e.args[0]
    if arg.type is None or arg.type.kind not in ("BIGINT", "DOUBLE"):
        return f"{e.to_sql()}: the device aggregates integer and floating point expressions only"
    value = compile_device_value(arg, e.var, query.input_schema)
    if isinstance(value, str):
        return f"{e.to_sql()}: {value}"
    column = ("expr", arg, e.var)
    if e.name == "COUNT":
        return ("count", ids, column)
    if e.name in ("MIN", "MAX"):
        return (e.name, ids, column, arg.type.arrow())
    return (e.name, ids, column)


# (query, its forms) of the last query seen: explain(), the engine's check
# and each device run of one compiled query share one analysis of it.
_last_forms: tuple = (None, None)


def _forms(query: CheckedQuery) -> Union[list, str]:
    """``[(measure, form)]``, or the reason for the first measure that has
    no device form."""
    global _last_forms
    last = _last_forms                  # one read: another thread may replace it
    if last[0] is query:
        return last[1]
    if query.rows_per_match != "ONE":
        out = "ALL ROWS PER MATCH: measures on the host"
    else:
        edges = edge_variables(compile_nfa(query.pattern, query.primary_vars))
        out = []
        for m in query.measures:
            form = _form(query, m.expr, edges)
            if isinstance(form, str) and not isinstance(m.expr, measure_exprs.LEAVES):
                form = _expression_form(query, m.expr, edges) or form
            if isinstance(form, str):
                out = f"measure {m.name}: {form}"
                break
            out.append((m, form))
    _last_forms = (query, out)
    return out


def _expression_form(query: CheckedQuery, e: A.Expr, edges: tuple) -> Optional[tuple]:
    """``("expr", e, ((leaf, form), ...))`` for an expression over leaves
    that all have device forms (``LAST(UP.price) - FIRST(A.price)``): the
    leaves per match on the device, the expression around them on the host
    (measure_exprs.py, O(matches)); None when some leaf has none."""
    found = measure_exprs.leaves(e)
    if not found:
        return None
    forms = []
    for leaf in found:
        form = _form(query, leaf, edges)
        if isinstance(form, str):
            return None
        forms.append((leaf, form))
    return ("expr", e, tuple(forms))


def _needs_paths(form: tuple) -> bool:
    """Whether a form reads the matches' labels (else starts, ends and
    numbers serve)."""
    kind = form[0]
    if kind == "expr":
        return any(_needs_paths(f) for _, f in form[2])
    if kind in ("number", "rows"):
        return False
    if kind == "value":
        return form[3][1] is not None       # a landing on some variable's rows
    return True


def device_measures_reason(query: CheckedQuery) -> Optional[str]:
    """None when the query is ONE ROW PER MATCH and every measure is in the
    device subset (see the module docstring); else a short reason naming
    the first measure that is not (for explain()).

    >>> import pyarrow as pa
    >>> from gpu_mr.analysis import analyze
    >>> from gpu_mr.syntax import parse_clause
    >>> t = pa.table({"ts": [1, 2], "v": [1.5, 2.5]})
    >>> def reason(m):
    ...     return device_measures_reason(analyze(parse_clause(
    ...         f"ORDER BY ts MEASURES {m} PATTERN (A B*) DEFINE B AS v > 2"), t.schema))
    >>> print(reason("SUM(B.v) AS s, LAST(A.ts, 1) AS l, CLASSIFIER() AS c"))
    None
    >>> reason("PREV(v) AS p")
    'measure p: PREV is not computed on the device'
    """
    forms = _forms(query)
    return forms if isinstance(forms, str) else None


def device_measures_need_paths(query: CheckedQuery) -> bool:
    """Whether :func:`measures_on_device` reads the matches' recovered
    paths (``DeviceMatches.labels``): False when every measure is
    MATCH_NUMBER(), COUNT(*) or a value at a row found by index arithmetic
    (the match's last row, FIRST/LAST over every row, or of a variable that
    every match begins or ends with), so that recovery can be skipped. True
    for a query outside the device subset."""
    forms = _forms(query)
    return isinstance(forms, str) or any(_needs_paths(form) for _, form in forms)


def device_measure_columns(query: CheckedQuery) -> list:
    """The input columns the measures read (sorted names)."""
    return sorted({n.resolved for m in query.measures for n in m.expr.walk()
                   if isinstance(n, A.ColumnRef)})


# ---------------------------------------------------------------- measures

def device_output_reason(query: CheckedQuery) -> Optional[str]:
    """None when every measure of ``query`` can stay on the device as a
    column (``measures_on_device(..., on_device=True)``), else why not:
    CLASSIFIER (strings) and expressions over measures of other types than
    BIGINT and DOUBLE are built on the host. (Data decides the rest: an
    expression that raises at some match is the host's too.)"""
    forms = _forms(query)
    if isinstance(forms, str):
        return forms
    for meas, form in forms:
        if form[0] == "label" or (form[0] == "expr" and (
                form[1].type is None or form[1].type.kind not in ("BIGINT", "DOUBLE")
                or any(leaf_form[0] == "label" for _, leaf_form in form[2]))):
            return f"measure {meas.name} is built on the host"
    return None


def measures_on_device(backend, query: CheckedQuery, columns: dict,
                       found, on_device: bool = False) -> Union[dict, str]:
    """``{measure name: pyarrow.Array}`` with one value per match of
    ``found`` (a ``DeviceMatches``, its paths recovered unless
    :func:`device_measures_need_paths` says they are not read), in its order, equal in
    value and Arrow type to what ``measures.assemble`` puts in those
    columns; or the reason the device form is not exact for this query or
    this data (the caller then runs the host measures). ``columns``:
    ``{name: (values, valid, Arrow type)}`` as ``DeviceInput.column`` gives
    them plus the type, in the row order the matches index, holding at
    least :func:`device_measure_columns`. ``on_device``: the values stay on
    the device, ``{measure name: DeviceColumn}`` in the measure's Arrow type
    (the storage ``DeviceColumn`` describes), or the reason they do not
    (:func:`device_output_reason`, no matches, a value that needs a cast)."""
    forms = _forms(query)
    if isinstance(forms, str):
        return forms
    missing = [c for c in device_measure_columns(query) if c not in columns]
    if missing:
        return f"column {missing[0]} is not on the device"
    if found.labels is None and device_measures_need_paths(query):
        return "the matches' paths were not recovered"
    m = int(found.starts.shape[0])
    if on_device:
        reason = device_output_reason(query) or (None if m else "no matches")
        if reason is not None:
            return reason
    if m == 0:
        return {meas.name: pa.nulls(0, meas.type.arrow()) for meas, _ in forms}
    # a plain (values, valid, type) tuple serves too (e.g. re-gathered in sorted order)
    columns = {name: DeviceColumn(*col) for name, col in columns.items()}
    run = _Run(backend, query, columns, found)
    out = {}
    if on_device:
        for meas, form in forms:
            with B.span(backend, f"measure {meas.name}"):
                got = run.on_device(form)
            if isinstance(got, str):
                return f"measure {meas.name}: {got}"
            if got.type != meas.type.arrow() or _form_target(form, got) != got.type:
                return (f"measure {meas.name}: its values are cast to {meas.type.arrow()} "
                        "on the host")
            out[meas.name] = got
        return out
    for meas, form in forms:
        with B.span(backend, f"measure {meas.name}"):
            arr = run.measure(form)
        if isinstance(arr, str):
            return f"measure {meas.name}: {arr}"
        if arr.type != meas.type.arrow():
            # the host's vectorised form declines it too: the interpreter's type rules
            return f"measure {meas.name}: its type is the interpreter's to decide"
        out[meas.name] = arr
    return out


class _Run:
    """The device arrays of one call, shared between measures (landings,
    match lengths, the all-variables member mask)."""

    def __init__(self, backend, query: CheckedQuery, columns: dict, found):
        self.b, self.xp, self.q, self.columns, self.f = backend, backend.xp, query, columns, found
        self.m = int(found.starts.shape[0])
        self._cache: dict = {}

    def _cached(self, key, make):
        got = self._cache.get(key)
        if got is None:
            got = self._cache[key] = make()
        return got

    @property
    def lengths(self):
        return self._cached(("lengths",), lambda: self.f.ends - self.f.starts)

    def member(self, ids):
        """Per variable id, whether it is one of ``ids`` (None: all), on the device."""
        def make():
            lut = np.zeros(max(len(self.q.primary_vars), 1), dtype=bool)
            lut[slice(None) if ids is None else list(ids)] = True
            return self.b.to_device(lut)
        return self._cached(("member", ids), make)

    def landing(self, landing: tuple):
        """Per match, the row FIRST/LAST(.., k) over the whole match lands
        on, -1 for none (device int64)."""
        def make():
            kind, ids, k = landing
            f, xp = self.f, self.xp
            if ids is None:                 # every row: index arithmetic
                edge = f.starts + k if kind == "FIRST" else f.ends - 1 - k
                return xp.where(self.lengths > k, edge, -1).astype(np.int64)
            from .kernels.gpu_measures import land_per_match
            return land_per_match(self.b, self.member(ids), f.labels, f.starts,
                                  f.label_offsets, k, kind == "LAST")
        return self._cached(("landing", landing), make)

    def to_host(self, array) -> np.ndarray:
        return np.asarray(self.b.to_host(array))

    def column(self, column) -> Union[DeviceColumn, str]:
        """An input column by name, or an aggregate's argument ``("expr",
        expression, variable)`` computed at every row (once per call); or
        the reason the device does not compute it for this data."""
        if isinstance(column, str):
            return self.columns[column]

        def make():
            from .predicates.device_masks import compile_device_value
            _, expr, var = column
            value = compile_device_value(expr, var, self.q.input_schema)
            n = int(self.columns[value.columns[0]].values.shape[0])
            got = value.evaluate(self.xp, {name: self.columns[name][:2]
                                           for name in value.columns}, n)
            if got is None:
                return f"{expr.to_sql()} raises at some row (the host gives the error)"
            values, valid = got
            t = pa.float64() if values.dtype.kind == "f" else pa.int64()
            return DeviceColumn(values, valid, t)
        return self._cached(("column", column), make)

    # ---- values at rows

    def at_rows(self, column, rows) -> Union[DeviceColumn, str]:
        """The column's values at ``rows`` (device, -1: NULL) on the device,
        in the column's own type; a reason where the device does not
        compute the column. ``column``: a name, or an aggregate's argument
        as :meth:`column` takes it."""
        col = self.column(column)
        if isinstance(col, str):
            return col
        xp = self.xp
        has = rows >= 0
        at = xp.where(has, rows, 0)
        ok = has if col.valid is None else has & col.valid[at]
        # one device scalar instead of a byte per match when nothing is NULL
        return DeviceColumn(col.values[at], None if bool(ok.all()) else ok, col.type)

    def host(self, got: DeviceColumn, target: pa.DataType):
        """A per-match device column as an Arrow array of ``target``, cast as
        the host's gather casts; a reason where Arrow refuses the cast (the
        interpreter decides then)."""
        ok = None if got.valid is None else self.to_host(got.valid).astype(bool)
        arr = _arrow_array(self.to_host(got.values), ok, got.type)
        if arr.type == target:
            return arr
        try:
            return arr.cast(target)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            return f"a value does not cast to {target} ({exc})"

    def labels_at(self, rows) -> pa.Array:
        """CLASSIFIER at ``rows`` (device, -1: NULL): the label ids come
        back, the strings are built here."""
        f, xp = self.f, self.xp
        names = pa.array(list(self.q.primary_vars), pa.string())
        if f.labels.shape[0] == 0:          # every match is empty: nothing to read
            return pa.nulls(self.m, pa.string())
        has = rows >= 0
        element = xp.where(has, rows - f.starts + f.label_offsets[:-1], 0)
        ids = self.to_host(xp.where(has, f.labels[element].astype(np.int64), -1))
        return names.take(pa.array(np.maximum(ids, 0), pa.int64(), mask=ids < 0))

    # ---- one measure

    def measure(self, form: tuple):
        """The measure of ``form`` per match as an Arrow array (of the
        measure's type where the form is exact), or the reason the host
        computes it."""
        kind = form[0]
        if kind == "expr":
            got = self.expression(form)         # one array back instead of its leaves
            if not isinstance(got, str):
                return self.host(got, got.type)
            _, expr, leaf_forms = form
            arrays = {id(leaf): self.measure(leaf_form) for leaf, leaf_form in leaf_forms}
            bad = [a for a in arrays.values() if isinstance(a, str)]
            if bad:
                return bad[0]
            arr = measure_exprs.evaluate(self.q, expr, expr.type, int(self.f.starts.shape[0]),
                                         lambda leaf: arrays.get(id(leaf)))
            return arr if arr is not None else "the expression raises or is inexact here"
        if kind == "label":
            return self.labels_at(self.landing(form[1]))
        got = self.on_device(form)
        if isinstance(got, str):
            return got
        return self.host(got, _form_target(form, got))

    def expression(self, form: tuple) -> Union[DeviceColumn, str]:
        """A BIGINT or DOUBLE expression over measures (``LAST(UP.price) -
        FIRST(A.price)``, ``SUM(p * v) / SUM(v)``) per match on the device:
        its leaves become the columns of a per-match table, and the DEFINE
        masks' value templates (predicates/device_masks.py) evaluate it
        there with their exact semantics (NULLs, BIGINT overflow and
        division by zero flagged); or why not (another result type, a leaf
        of another type, a match where it raises: measure_exprs.py on the
        host then decides)."""
        from .predicates.device_masks import compile_device_value
        _, expr, leaf_forms = form
        if expr.type is None or expr.type.kind not in ("BIGINT", "DOUBLE"):
            return "an expression of another type than BIGINT or DOUBLE"
        columns, refs, fields = {}, {}, []
        for i, (leaf, leaf_form) in enumerate(leaf_forms):
            got = self.on_device(leaf_form)
            if isinstance(got, str):
                return got
            if got.type not in (pa.int64(), pa.float64()) or (
                    _form_target(leaf_form, got) != got.type):
                return f"leaf {leaf.to_sql()} of type {_form_target(leaf_form, got)}"
            name = f"leaf {i}"
            columns[name] = (got.values, got.valid)
            refs[id(leaf)] = A.ColumnRef(column=name, quoted=True, resolved=name,
                                         type=leaf.type)
            fields.append(pa.field(name, got.type))
        value = compile_device_value(_with_leaves(expr, refs), None, pa.schema(fields))
        if isinstance(value, str):
            return value
        got = value.evaluate(self.xp, columns, self.m)
        if got is None:
            return "the expression raises at some match"
        values, valid = got
        t = pa.float64() if values.dtype.kind == "f" else pa.int64()
        if t != expr.type.arrow():
            return f"the device computes {t}"
        return DeviceColumn(values, valid, t)

    def on_device(self, form: tuple) -> Union[DeviceColumn, str]:
        """The measure of ``form`` per match as a device column in the
        type the device computes it in (:func:`_form_target` says the
        measure's), or why the device does not give it: CLASSIFIER and
        expressions over measures of other types than BIGINT and DOUBLE are
        built on the host."""
        from .kernels import gpu_measures as K
        f, kind = self.f, form[0]
        if kind == "expr":
            return self.expression(form)
        if kind == "label":
            return "CLASSIFIER is built on the host"
        if kind == "number":
            return DeviceColumn(f.numbers.astype(np.int64, copy=False), None, pa.int64())
        if kind == "value":
            _, column, _, landing = form
            return self.at_rows(column, self.landing(landing))
        if kind == "rows":
            return DeviceColumn(self.lengths.astype(np.int64, copy=False), None, pa.int64())
        ids, column = form[1], form[2]
        col = None if column is None else self.column(column)
        if isinstance(col, str):
            return col
        valid = None if col is None else col.valid
        member = self.member(ids)
        args = (member, f.labels, f.starts, f.label_offsets)
        if kind == "count":
            return DeviceColumn(K.count_per_match(self.b, *args, valid=valid), None, pa.int64())
        if kind in ("MIN", "MAX"):
            keys = col.values
            if keys.dtype == np.bool_:      # booleans held as bool (device_input.py): as bytes
                keys = keys.view(np.uint8)
            rows, nan = K.extreme_per_match(self.b, keys, *args, kind == "MAX", valid=valid)
            if nan:
                return "NaN among the values (Python's MIN/MAX then depends on the order)"
            return self.at_rows(column, rows)
        sums, counts, inexact = K.sum_per_match(self.b, col.values, *args, valid=valid)
        if inexact:
            return "a BIGINT sum leaves its range or a value is NaN"
        some = counts > 0
        valid = None if bool(some.all()) else some
        if kind == "SUM":
            floats = sums.dtype.kind == "f"
            return DeviceColumn(sums, valid, pa.float64() if floats else pa.int64())
        # as measures._Vectors: the sum as a double over the count (IEEE
        # division, the same on the device as on the host)
        xp = self.xp
        return DeviceColumn(sums.astype(np.float64) / xp.where(some, counts, 1), valid,
                            pa.float64())


def _with_leaves(e: A.Node, refs: dict) -> A.Node:
    """``e`` with the nodes whose ids ``refs`` holds replaced by their
    values there (AST nodes are frozen dataclasses: rebuilt, not changed)."""
    if id(e) in refs:
        return refs[id(e)]

    def one(v):
        if isinstance(v, A.Node):
            return _with_leaves(v, refs)
        if isinstance(v, tuple):
            return tuple(one(x) for x in v)
        return v
    changes = {}
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        new = one(v)
        if new is not v and new != v:
            changes[f.name] = new
    return dataclasses.replace(e, **changes) if changes else e


def _form_target(form: tuple, got: DeviceColumn) -> pa.DataType:
    """The Arrow type a device-computed measure of ``form`` becomes: a
    value read from a column is cast to the measure's SQL type (the
    form's target); counts, sums and averages are already theirs."""
    if form[0] == "value":
        return form[2]
    return form[3] if form[0] in ("MIN", "MAX") else got.type


def _arrow_array(values: np.ndarray, ok: Optional[np.ndarray], t: pa.DataType) -> pa.Array:
    """Per-match ``values`` (the column's storage, see :class:`DeviceColumn`)
    as an Arrow array of the column's type ``t``, NULL where not ``ok``
    (None: nowhere)."""
    n = values.shape[0]
    nulls = 0 if ok is None else n - int(np.count_nonzero(ok))
    if pa.types.is_boolean(t):
        return pa.array(values.astype(bool), pa.bool_(), mask=~ok if nulls else None)
    bitmap = pa.py_buffer(np.packbits(ok, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(t, n, [bitmap, pa.py_buffer(np.ascontiguousarray(values))],
                                 null_count=nulls)
