"""MEASURES and output assembly, written once for every engine.

What: (checked query, sorted input, matches) -> the output Arrow table.
ONE ROW PER MATCH: one row per match (empty matches included), partition
columns then measures, with RUNNING = FINAL evaluated at the last row.
ALL ROWS PER MATCH: one row per matched row that is not inside ``{- -}``,
measures RUNNING by default (evaluated as of that row) and FINAL on request;
an empty match gives one row (the row where it was found) unless OMIT EMPTY
MATCHES; WITH UNMATCHED ROWS adds every row that is in no non-empty match and
starts no empty match, with NULL measures. Rows come out by partition, then
match number, then row; an unmatched row comes just before the first match
of its partition (in match order) that starts after it, or at the partition's
end.

How: matches arrive as ``MatchArrays`` (a list of ``Match`` is converted);
which sorted row, which match and which "as of" row feed each output row are
computed with numpy (:func:`output_rows`), and input columns are gathered
with one Arrow ``take``. The common measures are vectorised over the match
rows laid end to end ("elements", ``MatchArrays.labels``): MATCH_NUMBER(),
CLASSIFIER, column references, FIRST/LAST (RUNNING or FINAL, any variable or
subset), PREV/NEXT around those, COUNT(*)/COUNT(X.*)/COUNT(X.c) and
SUM/AVG/MIN/MAX(X.c). A per-variable prefix count of elements answers "the
k-th first/last row of X up to element u" and counts; running SUM/MIN/MAX are
segmented kernels (kernels/segmented.py). Each such measure reproduces the
interpreter's value and Arrow type exactly. Any other measure, or one whose
data the vectorised form cannot reproduce exactly (a BIGINT sum that may
overflow, NaN, an unusual column type), is evaluated row by row by the
interpreter (interpreter.py), which is the semantics; ``vectorised=False``
forces that path for every measure.
Cost: vectorised, O(rows + total match length) numpy work per measure;
interpreted, a tree walk per output row and measure, O(match length) for
aggregates and navigation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .analysis import CheckedQuery
from .engines.base import MatchArrays, as_match_arrays
from .errors import DataError
from .frames import SortedInput
from .interpreter import INT64_MAX, INT64_MIN, Interpreter, MatchView, _nav_var
from .kernels.segmented import (Segments, find_members, segmented_arg_extreme, segmented_count,
                                segmented_sum)
from .syntax import ast as A
from .syntax import types as T


def assemble(query: CheckedQuery, data: SortedInput, matches,
             interp: Optional[Interpreter] = None, *, vectorised: bool = True) -> pa.Table:
    """Build the output table of ``query`` from ``matches``.

    Parameters
    ----------
    query, data
        The checked query and its sorted input.
    matches
        A list of :class:`~gpu_mr.engines.base.Match` or a ``MatchArrays``.
    interp
        The interpreter for measures that are not vectorised (built on demand).
    vectorised
        False evaluates every measure with the interpreter (the semantics the
        vectorised forms are tested against).

    >>> import pyarrow as pa
    >>> from gpu_mr.analysis import analyze
    >>> from gpu_mr.engines.reference import ReferenceEngine
    >>> from gpu_mr.frames import sort_for_matching
    >>> from gpu_mr.syntax import parse_clause
    >>> t = pa.table({"ts": [1, 2, 3, 4], "v": [5, 3, 4, 1]})
    >>> q = analyze(parse_clause("ORDER BY ts MEASURES LAST(A.v) AS a, SUM(v) AS s "
    ...                          "ALL ROWS PER MATCH PATTERN (A B*) DEFINE B AS v < 5"), t.schema)
    >>> d = sort_for_matching(t, q.partition_columns, q.order_keys)
    >>> assemble(q, d, ReferenceEngine().find_matches(q, d)).to_pylist()[-1]
    {'ts': 4, 'a': 5, 's': 13, 'v': 1}
    """
    ma = as_match_arrays(matches)
    if query.rows_per_match != "ONE":
        ma = _partition_ordered(ma)
    rows = output_rows(query, data, ma)
    columns: dict = {}                          # combined input columns, shared
    arrays: dict = {}
    if vectorised and not len(ma):              # no match: every measure is NULL
        for m in query.measures:
            arrays[m.name] = pa.nulls(len(rows.source), m.type.arrow())
    elif vectorised:
        vec = _Vectors(query, data, ma, rows, columns)
        for m in query.measures:
            arr = vec.measure(m)
            if arr is not None:
                arrays[m.name] = arr
    rest = [m for m in query.measures if m.name not in arrays]
    if rest:
        values = _interpret(query, data, ma, rows, rest, interp)
        for m, vals in zip(rest, values):
            arrays[m.name] = measure_array(m, vals)
    return _build_table(query, data, rows.source, arrays, columns)


# ------------------------------------------------------------ output rows

@dataclass(frozen=True)
class OutputRows:
    """What feeds each output row, as int64 arrays of the output's length.

    ``source``: the sorted input row whose columns it shows; ``match``: index
    of its match in the ``MatchArrays`` (-1: an unmatched row, NULL
    measures); ``current``: the current row of the interpreter's view (-1:
    none, an empty match); ``running``: the element (index into
    ``MatchArrays.labels``) of the running end, ``label_offsets[match] - 1``
    when it covers no row.
    """
    source: np.ndarray
    match: np.ndarray
    current: np.ndarray
    running: np.ndarray


def output_rows(query: CheckedQuery, data: SortedInput, ma: MatchArrays) -> OutputRows:
    """The output rows of ``query`` over ``ma`` (for ALL ROWS, ``ma`` must be
    in partition order; match order within a partition is kept)."""
    start, end = ma.start, ma.end
    first, nxt = ma.label_offsets[:-1], ma.label_offsets[1:]
    empty = end < start
    if query.rows_per_match == "ONE":
        return OutputRows(start, np.arange(len(ma), dtype=np.int64),
                          np.where(empty, -1, end), nxt - 1)
    if not ma.excluded.any() and not empty.any():
        # the usual case: every row of every match, in match order
        mid = np.repeat(np.arange(len(ma), dtype=np.int64), nxt - first)
        running = np.arange(ma.labels.shape[0], dtype=np.int64)
        source = running + (start - first)[mid]
        rows = OutputRows(source, mid, source, running)
        if query.empty_matches != "UNMATCHED":
            return rows
        return _with_unmatched(data, ma, nxt - first, rows)
    # the match rows, in match order: kept (not excluded) rows, or the
    # start row of an empty match
    kept = np.flatnonzero(~ma.excluded)
    kept_cum = _exclusive_cumsum(~ma.excluded)
    per_match = np.where(empty, int(query.empty_matches != "OMIT"),
                         kept_cum[nxt] - kept_cum[first])
    mid = np.repeat(np.arange(len(ma), dtype=np.int64), per_match)
    on_empty = empty[mid]
    on_rows = ~on_empty
    source = np.empty(mid.shape[0], dtype=np.int64)
    current = np.empty(mid.shape[0], dtype=np.int64)
    running = np.empty(mid.shape[0], dtype=np.int64)
    running[on_rows] = kept
    source[on_rows] = kept + (start - first)[mid[on_rows]]
    current[on_rows] = source[on_rows]
    empty_mid = mid[on_empty]
    source[on_empty] = start[empty_mid]
    current[on_empty] = -1
    running[on_empty] = first[empty_mid] - 1
    if query.empty_matches != "UNMATCHED":
        return OutputRows(source, mid, current, running)
    return _with_unmatched(data, ma, per_match, OutputRows(source, mid, current, running))


def _with_unmatched(data: SortedInput, ma: MatchArrays, per_match: np.ndarray,
                    stream: OutputRows) -> OutputRows:
    """Insert the unmatched rows into the match rows. Each partition has one
    slot per match plus one at its end; an unmatched row goes to the slot of
    the first match (in match order) starting after it, before that match's
    rows (see the module docstring)."""
    offsets = data.partition_offsets
    n, m = int(offsets[-1]), len(ma)
    n_parts = len(offsets) - 1
    start, end = ma.start, ma.end
    stop = np.where(end < start, start, end) + 1          # an empty match covers its row
    cover = np.bincount(start, minlength=n + 1)[:n + 1] - np.bincount(stop, minlength=n + 1)[:n + 1]
    unmatched = np.flatnonzero(np.cumsum(cover[:n]) == 0)
    part_of = np.searchsorted(offsets, unmatched, side="right") - 1
    first_match = np.searchsorted(ma.partition, np.arange(n_parts + 1), side="left")
    # first match whose start exceeds the row: a running max makes starts sorted
    reach = np.maximum.accumulate(start) if m else start
    slot_match = np.clip(np.searchsorted(reach, unmatched, side="right"),
                         first_match[part_of], first_match[part_of + 1])
    slot_un = slot_match + part_of
    n_slots = m + n_parts
    count_un = np.bincount(slot_un, minlength=n_slots)
    count_m = np.zeros(n_slots, dtype=np.int64)
    match_slot = np.arange(m, dtype=np.int64) + ma.partition
    count_m[match_slot] = per_match
    slot_begin = _exclusive_cumsum(count_un + count_m)
    total = int(slot_begin[-1])
    pos_un = slot_begin[slot_un] + (np.arange(unmatched.shape[0]) - _exclusive_cumsum(count_un)[slot_un])
    mid = stream.match
    within = np.arange(mid.shape[0]) - _exclusive_cumsum(per_match)[mid]
    pos_m = slot_begin[match_slot[mid]] + count_un[match_slot[mid]] + within
    out = [np.empty(total, dtype=np.int64) for _ in range(4)]
    for arr, un_value, m_value in zip(out, (unmatched, -1, -1, -1),
                                      (stream.source, mid, stream.current, stream.running)):
        arr[pos_un] = un_value
        arr[pos_m] = m_value
    return OutputRows(*out)


def _exclusive_cumsum(x: np.ndarray) -> np.ndarray:
    out = np.zeros(x.shape[0] + 1, dtype=np.int64)
    np.cumsum(x, out=out[1:])
    return out


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of ``range(s, s + l)`` for each pair."""
    begins = _exclusive_cumsum(lengths)
    return np.repeat(starts - begins[:-1], lengths) + np.arange(begins[-1], dtype=np.int64)


def _partition_ordered(ma: MatchArrays) -> MatchArrays:
    """Matches stably sorted by partition (engines already deliver them so)."""
    p = ma.partition
    if p.shape[0] < 2 or bool(np.all(p[1:] >= p[:-1])):
        return ma
    order = np.argsort(p, kind="stable")
    lengths = np.diff(ma.label_offsets)[order]
    elements = _ranges(ma.label_offsets[:-1][order], lengths)
    return MatchArrays(p[order], ma.number[order], ma.start[order], ma.end[order],
                       _exclusive_cumsum(lengths), ma.labels[elements], ma.excluded[elements])


# ------------------------------------------------------------ interpreter path

def _interpret(query: CheckedQuery, data: SortedInput, ma: MatchArrays, rows: OutputRows,
               measures: list, interp: Optional[Interpreter]) -> list:
    """Values of ``measures`` per output row by the interpreter, row by row
    and measure by measure (so errors surface in the interpreter's order)."""
    if interp is None:
        needed = {n.resolved for m in measures for n in m.expr.walk()
                  if isinstance(n, A.ColumnRef)}
        columns = {name: T.arrow_values(data.table.column(name), query.column_types[name])
                   for name in needed}
        interp = Interpreter(query, columns)
    offsets = data.partition_offsets.tolist()
    part, number = ma.partition.tolist(), ma.number.tolist()
    start, end, first = ma.start.tolist(), ma.end.tolist(), ma.label_offsets.tolist()
    labels: dict = {}
    n = rows.source.shape[0]
    values: list = [[None] * n for _ in measures]
    for o, (i, cur, run) in enumerate(zip(rows.match.tolist(), rows.current.tolist(),
                                          rows.running.tolist())):
        if i < 0:
            continue
        lab = labels.get(i)
        if lab is None:
            lab = labels[i] = ma.labels[first[i]:first[i + 1]].tolist()
        p = part[i]
        view = MatchView(offsets[p], offsets[p + 1], start[i], lab, None if cur < 0 else cur,
                         start[i] + run - first[i], end[i], number[i])
        for j, m in enumerate(measures):
            values[j][o] = interp.eval(m.expr, view)
    return values


def _build_table(query: CheckedQuery, data: SortedInput, source_rows: np.ndarray,
                 measures: dict, columns: dict) -> pa.Table:
    """Input columns by one gather from the sorted table, then the measures
    (analysis guarantees measure names never clash with input columns)."""
    take = pa.array(source_rows, pa.int64())
    arrays = []
    for field in query.output_schema:
        if field.name in measures:
            arrays.append(measures[field.name])
        else:
            arrays.append(_combined(data, field.name, columns).take(take))
    return pa.Table.from_arrays(arrays, schema=query.output_schema)


def _combined(data: SortedInput, name: str, cache: dict):
    """A sorted input column in one piece (a gather from one array is several
    times faster than from a chunked one)."""
    col = cache.get(name)
    if col is None:
        chunked = data.table.column(name)
        col = cache[name] = chunked.chunk(0) if chunked.num_chunks == 1 else (
            chunked.combine_chunks() if chunked.num_chunks else chunked)
    return col


def measure_array(m, vals: list) -> pa.Array:
    """A measure's values as an Arrow array of its type (range-checked)."""
    t = m.type
    if t.kind == "BIGINT":
        for v in vals:
            if v is not None and not INT64_MIN <= v <= INT64_MAX:
                raise DataError(f"measure {m.name} overflows BIGINT ({v})", column=m.name,
                                code="overflow")
        vals = [None if v is None else int(v) for v in vals]
    elif t.kind == "DOUBLE":
        vals = [None if v is None else float(v) for v in vals]
    elif t.kind == "DECIMAL":
        from decimal import Decimal
        quantum = Decimal(1).scaleb(-t.scale)
        vals = [None if v is None else Decimal(v).quantize(quantum) for v in vals]
    try:
        return T.to_arrow_array(vals, t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise DataError(f"measure {m.name}: its values do not fit {t.sql_name()} ({exc})",
                        column=m.name, code="bad_measure_value") from None


# ------------------------------------------------------------ vectorised path

class _Fallback(Exception):
    """This measure (or this data) has no exact vectorised form."""


# Input column types whose values a gather reproduces exactly as the
# interpreter's (value list -> measure_array) path does.
def _gatherable(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or t in (pa.float32(), pa.float64(), pa.bool_(),
                                            pa.string(), pa.large_string(), pa.date32(),
                                            pa.null())
            or pa.types.is_timestamp(t) or pa.types.is_duration(t)
            or pa.types.is_decimal128(t) or getattr(pa.types, "is_string_view", bool)(t))


class _Vectors:
    """Vectorised measure evaluation over one set of output rows.

    Per output row ``o`` with match ``i``: ``first``/``stop`` bound the
    match's elements, ``delta`` maps an element to its row (row = element +
    delta), ``running`` is the element of the running end (``first - 1``: no
    row yet). Where the running end is the match's end (ONE ROW, or FINAL)
    everything is computed once per match ("final"), FIRST/LAST by walking
    from the match's start or end; RUNNING in ALL ROWS is computed per
    element (counts, sums, extremes so far) or from prefix counts (LAST).
    """

    def __init__(self, query: CheckedQuery, data: SortedInput, ma: MatchArrays,
                 rows: OutputRows, columns: dict):
        self.q, self.data, self.ma = query, data, ma
        self._combined = columns
        self.one_row = query.rows_per_match == "ONE"
        self.n = rows.source.shape[0]
        self.has = rows.match >= 0
        mi = np.where(self.has, rows.match, 0)
        self.mi = mi
        self.first = ma.label_offsets[mi]
        self.stop = ma.label_offsets[mi + 1]
        self.delta = ma.start[mi] - self.first
        self.current = rows.current
        self.running = rows.running
        ids = {name: i for i, name in enumerate(query.primary_vars)}
        self.var_ids = {name: (i,) for name, i in ids.items()}
        for name, members in query.subsets.items():
            self.var_ids[name] = tuple(sorted(ids[x] for x in members))
        self._cache: dict = {}
        self._decoded: dict = {}
        self._part = None

    # -------------------------------------------------------- entry point
    def measure(self, m) -> Optional[pa.Array]:
        """The measure as an Arrow array of its type, or None: interpret it."""
        try:
            arr = self._eval(m.expr)
        except _Fallback:
            return None
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            # A gather or cast Arrow refuses for this column's type: the
            # interpreter computes the measure instead (same answer, slower).
            return None
        return arr if arr.type == m.type.arrow() else None

    def _eval(self, e: A.Expr) -> pa.Array:
        if isinstance(e, A.MatchNumber):
            return self._ints(self.ma.number[self.mi], self.has)
        if isinstance(e, A.Classifier):
            return self._label_at(self._last_row(e.var))
        if isinstance(e, A.ColumnRef):
            return self._gather(e, self._last_row(e.var))
        if isinstance(e, A.Navigation):
            inner = e.arg.arg if isinstance(e.arg, A.Navigation) else e.arg
            if not isinstance(inner, (A.ColumnRef, A.Classifier)):
                raise _Fallback
            rows = self._navigate(e)
            if isinstance(inner, A.ColumnRef):
                return self._gather(inner, rows)
            return self._label_at(rows)
        if isinstance(e, A.Aggregate):
            return self._aggregate(e)
        raise _Fallback

    # -------------------------------------------------------- rows
    def _ids(self, var: Optional[str]):
        return None if var is None else self.var_ids[var]

    def _member(self, ids) -> np.ndarray:
        """Per variable id, whether it is one of ``ids`` (None: all)."""
        lut = np.zeros(max(len(self.q.primary_vars), 1), dtype=bool)
        if ids is None:
            lut[:] = True
        else:
            lut[list(ids)] = True
        return lut

    def _final(self, semantics: Optional[str]) -> bool:
        return self.one_row or semantics == "FINAL"

    def _per_match_landing(self, ids, kind: str, k: int) -> np.ndarray:
        """Per match, the element FIRST/LAST(.., k) lands on over the whole
        match, -1 for none."""
        key = ("land", ids, kind, k)
        got = self._cache.get(key)
        if got is None:
            ma = self.ma
            first, last = ma.label_offsets[:-1], ma.label_offsets[1:] - 1
            if ids is None:
                got = np.where(last + 1 - first > k, first + k if kind == "FIRST" else last - k, -1)
            else:
                got = find_members(self._member(ids), ma.labels, first, last, k, kind == "LAST")
            self._cache[key] = got
        return got

    def _cumulative(self, ids) -> tuple:
        """(prefix counts of the elements mapped to ``ids``, their positions
        followed by a -1 sentinel)."""
        key = ("cum", ids)
        got = self._cache.get(key)
        if got is None:
            member = self._member(ids)[self.ma.labels]
            got = self._cache[key] = (_exclusive_cumsum(member),
                                      np.append(np.flatnonzero(member), -1))
        return got

    def _landing(self, ids, kind: str, k: int, final: bool) -> np.ndarray:
        """The element FIRST/LAST(.., k) lands on per output row, -1 for none."""
        if final or kind == "FIRST":
            el = self._per_match_landing(ids, kind, k)[self.mi]
            if not final:                           # the k-th first row, if seen yet
                el = np.where(el <= self.running, el, -1)
        elif ids is None:
            el = np.where(self.running - k >= self.first, self.running - k, -1)
        else:                                       # LAST up to the running end
            cum, pos = self._cumulative(ids)
            idx = cum[self.running + 1] - 1 - k
            el = pos[np.where(idx >= cum[self.first], idx, -1)]
        return np.where(self.has, el, -1)

    def _to_row(self, el: np.ndarray) -> np.ndarray:
        return np.where(el >= 0, el + self.delta, -1)

    def _last_row(self, var: Optional[str]) -> np.ndarray:
        """The interpreter's last_row_of: the current row for the universal
        variable, else the last row mapped to ``var`` up to the running end."""
        if var is None:
            return np.where(self.has, self.current, -1)
        return self._to_row(self._landing(self._ids(var), "LAST", 0, self.one_row))

    def _bounds(self) -> tuple:
        if self._part is None:
            offsets = self.data.partition_offsets
            p = self.ma.partition[self.mi]
            self._part = (offsets[p], offsets[p + 1])
        return self._part

    def _navigate(self, e: A.Navigation) -> np.ndarray:
        """The row each output row's navigation lands on, -1 for none."""
        k = int(e.offset.value)
        if e.kind in ("FIRST", "LAST"):
            # FIRST(A.ts) and FIRST(A.price) land on the same rows: once.
            key = ("rows", self._ids(_nav_var(e.arg)), e.kind, k, self._final(e.semantics))
            rows = self._cache.get(key)
            if rows is None:
                rows = self._cache[key] = self._to_row(self._landing(*key[1:]))
            return rows
        if isinstance(e.arg, A.Navigation):
            base = self._navigate(e.arg)
        else:
            base = self._last_row(_nav_var(e.arg))
        target = base - k if e.kind == "PREV" else base + k
        lo, hi = self._bounds()
        return np.where((base >= 0) & (target >= lo) & (target < hi), target, -1)

    # -------------------------------------------------------- values
    def _ints(self, values: np.ndarray, valid: np.ndarray) -> pa.Array:
        mask = None if bool(valid.all()) else ~valid
        return pa.array(values.astype(np.int64, copy=False), pa.int64(), mask=mask)

    def _doubles(self, values: np.ndarray, valid: np.ndarray) -> pa.Array:
        mask = None if bool(valid.all()) else ~valid
        return pa.array(values, pa.float64(), mask=mask)

    def _label_at(self, rows: np.ndarray) -> pa.Array:
        """CLASSIFIER at ``rows``: the label if the row is in the match."""
        el = rows - self.delta
        ok = (rows >= 0) & (el >= self.first) & (el < self.stop)
        if not ok.any():
            return pa.nulls(self.n, pa.string())
        labels = self.ma.labels[np.where(ok, el, 0)]
        names = pa.array(list(self.q.primary_vars), pa.string())
        return names.take(pa.array(labels.astype(np.int32), pa.int32(),
                                   mask=None if ok.all() else ~ok))

    def _column(self, name: str) -> pa.Array:
        col = self._decoded.get(name)
        if col is None:
            col = _combined(self.data, name, self._combined)
            if isinstance(col, pa.ChunkedArray):            # no chunk at all
                col = pa.array([], col.type)
            if pa.types.is_dictionary(col.type):
                col = col.dictionary_decode()
            self._decoded[name] = col
        return col

    def _gather(self, ref: A.ColumnRef, rows: np.ndarray) -> pa.Array:
        col = self._column(ref.resolved)
        if not _gatherable(col.type):
            raise _Fallback
        mask = rows < 0
        if mask.any():
            idx = pa.array(np.where(mask, 0, rows), pa.int64(), mask=mask)
        else:
            idx = pa.array(rows, pa.int64())
        out = col.take(idx)
        target = ref.type.arrow()
        return out if out.type == target else out.cast(target)

    def _numbers(self, ref: A.ColumnRef, keys: bool) -> tuple:
        """(values per row as int64 or float64 numpy, valid per row or None
        when no NULL); with ``keys``, order-preserving keys for MIN/MAX of any
        orderable type."""
        key = ("numbers", ref.resolved, keys)
        got = self._cache.get(key)
        if got is not None:
            return got
        col = self._column(ref.resolved)
        t = col.type
        valid = None
        if col.null_count:
            valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        if pa.types.is_integer(t) or t == pa.bool_():
            kind = pa.int64()
        elif t in (pa.float32(), pa.float64()):
            kind = pa.float64()
        elif not keys:
            raise _Fallback
        elif t == pa.date32():
            col, kind = col.view(pa.int32()), pa.int64()
        elif pa.types.is_timestamp(t) or pa.types.is_duration(t):
            col, kind = col.view(pa.int64()), pa.int64()
        elif t in (pa.string(), pa.large_string()):
            # UTF-8 byte order is code point order, which is Python's str order
            col, kind = pc.rank(col, sort_keys="ascending", tiebreaker="dense"), pa.int64()
        else:
            raise _Fallback
        if col.type != kind:
            col = col.cast(kind)
        if col.null_count:
            col = col.fill_null(0)
        values = np.ascontiguousarray(col.to_numpy(zero_copy_only=False))
        if kind == pa.float64():
            nan = np.isnan(values)
            if (nan.any() if valid is None else (nan & valid).any()):
                raise _Fallback
        got = self._cache[key] = (values, valid)
        return got

    def _segments(self, ids, valid, per_element: bool) -> Segments:
        ma = self.ma
        return Segments(self._member(ids), ma.labels, ma.start, ma.label_offsets, valid,
                        per_element)

    def _pick(self, per: np.ndarray, final: bool, fill) -> np.ndarray:
        """Per-match (final) or per-element (running) results at each output row."""
        if final:
            return np.where(self.has, per[self.mi], fill)
        ok = self.has & (self.running >= self.first)
        return np.append(per, fill)[np.where(ok, self.running, -1)]

    def _aggregate(self, e: A.Aggregate) -> pa.Array:
        final = self._final(e.semantics)
        ids = self._ids(e.var)
        if e.star:
            if ids is None:
                upto = self.stop - 1 if final else self.running
                return self._ints(np.where(self.has, upto + 1 - self.first, 0), self.has)
            count = segmented_count(self._segments(ids, None, not final))
            return self._ints(self._pick(count, final, 0), self.has)
        if (e.distinct or e.over_order or len(e.args) != 1
                or e.name not in ("COUNT", "SUM", "AVG", "MIN", "MAX")
                or not isinstance(e.args[0], A.ColumnRef)):
            raise _Fallback
        ref = e.args[0]
        if e.name == "COUNT":
            col = self._column(ref.resolved)
            valid = None
            if col.null_count:
                valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            count = segmented_count(self._segments(ids, valid, not final))
            return self._ints(self._pick(count, final, 0), self.has)
        if e.name in ("SUM", "AVG") and ref.type.kind not in ("BIGINT", "DOUBLE"):
            raise _Fallback
        values, valid = self._numbers(ref, e.name in ("MIN", "MAX"))
        seg = self._segments(ids, valid, not final)
        if e.name in ("MIN", "MAX"):
            return self._gather(ref, self._pick(segmented_arg_extreme(values, seg,
                                                                      e.name == "MAX"),
                                                final, -1))
        sums, overflow = segmented_sum(values, seg)
        if overflow:
            raise _Fallback          # the interpreter raises (SUM) or is exact (AVG)
        count = self._pick(segmented_count(seg), final, 0)
        some = self.has & (count > 0)
        total = self._pick(sums, final, 0)
        if e.name == "SUM":
            if values.dtype.kind == "f":
                return self._doubles(total, some)
            return self._ints(total, some)
        return self._doubles(total.astype(np.float64) / np.where(some, count, 1), some)
