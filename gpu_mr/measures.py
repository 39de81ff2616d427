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
computed with numpy (:func:`output_rows`). Fixed-width columns (numbers,
dates, timestamps) are gathered straight from their chunks' buffers by
kernels/gather.py, every row set the measures need from one column in one
pass (FIRST, LAST and MIN of a column read the same cache lines); in ONE ROW
a partition column is read once per partition and repeated; other columns
go through Arrow ``take``. In ONE ROW the output rows are the matches, so
per-match results serve as they are (no gather by match index, no mask).
The common measures are vectorised over the match
rows laid end to end ("elements", ``MatchArrays.labels``): MATCH_NUMBER(),
CLASSIFIER, column references, FIRST/LAST (RUNNING or FINAL, any variable or
subset), PREV/NEXT around those, COUNT(*)/COUNT(X.*)/COUNT(X.c) and
SUM/AVG/MIN/MAX(X.c). A per-variable prefix count of elements answers "the
k-th first/last row of X up to element u" and counts; running SUM/MIN/MAX are
segmented kernels (kernels/segmented.py). An expression over these
(arithmetic, CASE, comparisons, casts, functions) is evaluated around their
arrays by the masks' evaluator (measure_exprs.py). Each such measure
reproduces the interpreter's value and Arrow type exactly. Any other measure, or one whose
data the vectorised form cannot reproduce exactly (a BIGINT sum that may
overflow, NaN, an unusual column type), is evaluated row by row by the
interpreter (interpreter.py), which is the semantics; ``vectorised=False``
forces that path for every measure.
Cost: vectorised, O(output rows + total match length) numpy and kernel work
per measure, plus one gather pass per column read (v_shape's seven measures
over 1e6 matches of 1e7 rows: about 15 numpy passes over the price column);
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
from .frames import CHUNK_MIN_ROWS, MANY_CHUNKS, SortedInput, _string_piece, _valid_bytes
from . import measure_exprs, monotone
from .interpreter import INT64_MAX, INT64_MIN, Interpreter, MatchView, _nav_var
from .kernels import buffers as B
from .kernels import gather as G
from .kernels import segmented as segmented_kernels
from .kernels.segmented import (EVERY_ROW, Segments, find_members,
                                segmented_arg_extreme, segmented_count, segmented_sum)
from .kernels.threads import least, run_all, run_pieces, split, split_even, thread_count
from .strings import repeat_strings
from .pattern.nfa import compile_nfa, edge_variables
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
        pending = {}
        for m in query.measures:
            arr = vec.measure(m)
            if isinstance(arr, _Pending):
                pending[m.name] = arr
            elif arr is not None:
                arrays[m.name] = arr
        # the gathers of every measure, one pass per column
        arrays.update((k, v) for k, v in vec.resolve(pending).items() if v is not None)
    rest = [m for m in query.measures if m.name not in arrays]
    if rest:
        values = _interpret(query, data, ma, rows, rest, interp)
        for m, vals in zip(rest, values):
            arrays[m.name] = measure_array(m, vals)
    per_partition = (getattr(ma, "walked", None) or {}).get(("per partition",)) \
        if query.rows_per_match == "ONE" else None
    return _build_table(query, data, rows.source, arrays, columns,
                        _partition_of(query, data, ma, rows),
                        _output_spans(data, ma, rows.source), per_partition)


def _partition_of(query: CheckedQuery, data: SortedInput, ma: MatchArrays,
                  rows: OutputRows) -> Optional[np.ndarray]:
    """The partition of each output row, when the partition columns need
    one (see :func:`_partition_values`)."""
    if not query.partition_columns:
        return None
    if query.rows_per_match == "ONE":
        return ma.partition
    if rows.running_is_element and ma.partition.dtype.itemsize == 8:
        return _spread(ma.label_offsets, ma.partition, 0)   # output row o is element o
    match = rows.match
    if not match.size or match.min() >= 0:
        return ma.partition[match]
    return np.searchsorted(data.partition_offsets, rows.source, side="right") - 1


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
    # running[o] == o for every output row (every row of every match, in
    # order): per-element results serve as they are
    running_is_element: bool = False


class _OneRowPerMatch:
    """:class:`OutputRows` of ONE ROW PER MATCH (output row i: match i),
    each array built on first read: vectorised measures mostly need none."""

    running_is_element = False

    def __init__(self, ma: MatchArrays):
        self._ma = ma
        self.source = ma.start

    @property
    def match(self) -> np.ndarray:
        return np.arange(len(self._ma), dtype=np.int64)

    @property
    def current(self) -> np.ndarray:
        ma = self._ma
        return np.where(ma.end < ma.start, -1, ma.end)

    @property
    def running(self) -> np.ndarray:
        return self._ma.label_offsets[1:] - 1


def vectorised_reason(query: CheckedQuery, e: A.Expr) -> Optional[str]:
    """None when the measure expression ``e`` is computed over whole arrays
    (:class:`_Vectors`, measure_exprs.py), else why the interpreter computes
    it per output row (for explain()). Data can still send a vectorised
    measure to the interpreter (a BIGINT sum leaving its range, a row where
    the expression raises)."""
    if isinstance(e, (A.MatchNumber, A.Classifier, A.ColumnRef)):
        return None
    if isinstance(e, A.Navigation):
        inner = e.arg.arg if isinstance(e.arg, A.Navigation) else e.arg
        if isinstance(inner, (A.ColumnRef, A.Classifier)):
            return None
        return f"{e.kind} of an expression"
    if isinstance(e, A.Aggregate):
        if e.star:
            return None
        if e.distinct or e.over_order or len(e.args) != 1 \
                or e.name not in ("COUNT", "SUM", "AVG", "MIN", "MAX"):
            return f"{e.to_sql()}"
        arg = e.args[0]
        if (e.name in ("SUM", "AVG") and arg.type is not None
                and arg.type.kind not in ("BIGINT", "DOUBLE")
                and not (e.name == "SUM" and arg.type.kind == "DECIMAL")):
            return f"{e.name} of a {arg.type.kind} value"
        if isinstance(arg, A.ColumnRef):
            return None
        empty = SortedInput(query.input_schema.empty_table(), np.zeros(1, dtype=np.int64),
                            np.zeros(0, dtype=np.int64), True)
        if measure_exprs.row_values(query, empty, arg, e.var) is None:
            return f"the argument of {e.to_sql()}"
        return None
    found = measure_exprs.leaves(e)
    if found is None:
        return "it reads the clock or a subquery"
    for leaf in found:
        reason = vectorised_reason(query, leaf)
        if reason is not None:
            return reason
    empty = {id(leaf): pa.array([], leaf.type.arrow()) for leaf in found if leaf.type}
    if measure_exprs.evaluate(query, e, e.type, 0, lambda leaf: empty.get(id(leaf))) is None:
        return f"{e.to_sql()} is not vectorised"
    return None


def output_rows(query: CheckedQuery, data: SortedInput, ma: MatchArrays) -> OutputRows:
    """The output rows of ``query`` over ``ma`` (for ALL ROWS, ``ma`` must be
    in partition order; match order within a partition is kept)."""
    if query.rows_per_match == "ONE":
        return _OneRowPerMatch(ma)
    start, end = ma.start, ma.end
    first, nxt = ma.label_offsets[:-1], ma.label_offsets[1:]
    empty = end < start
    if not ma.excluded.any() and not empty.any():
        # the usual case: every row of every match, in match order
        total = ma.labels.shape[0]
        mid = _spread(ma.label_offsets, None, 0)
        source = _spread(ma.label_offsets, start, 1)
        running = np.arange(total, dtype=np.int64)
        rows = OutputRows(source, mid, source, running, True)
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


def _spread(label_offsets: np.ndarray, per_match: Optional[np.ndarray], step: int):
    """Per element of every match (kernels/gather.py ``spread``): its
    match's 8-byte value (None: the match's index) plus ``step`` times its
    place in the match, as int64 (the values' bits for other types), on
    all cores in pieces of about equal elements."""
    total = int(label_offsets[-1])
    out = B.empty(total, np.int64)
    kernel = G.kernels(_compiled_gather(total))[4]
    pieces = (split(label_offsets) if kernel is not G.DRIVERS[4]
              else [(0, label_offsets.shape[0] - 1)])
    values = _NO_SPREAD if per_match is None else per_match.view(np.int64)
    run_pieces(lambda a, b: kernel(values, per_match is None, label_offsets, a, b, step, out),
               pieces)
    return out


_NO_SPREAD = np.zeros(1, np.int64)


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
    cover = (np.bincount(start, minlength=n + 1)[:n + 1]
             - np.bincount(stop, minlength=n + 1)[:n + 1])
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
    pos_un = slot_begin[slot_un] + (np.arange(unmatched.shape[0])
                                    - _exclusive_cumsum(count_un)[slot_un])
    mid = stream.match
    within = np.arange(mid.shape[0]) - _exclusive_cumsum(per_match)[mid]
    pos_m = slot_begin[match_slot[mid]] + count_un[match_slot[mid]] + within
    out = [B.empty(total, np.int64) for _ in range(4)]
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


# ------------------------------------------------------------ measures in the walk

# Chunks beyond which the walk's column reads are left to the gathers (each
# chunk is a kernel call of its own).
_WALK_MAX_CHUNKS = 64


def walk_request(query: CheckedQuery, data: SortedInput) -> Optional[tuple]:
    """What the unanchored scan's backward walk can compute for ONE ROW
    PER MATCH measures so that no measure reads the labels: ``(bounds,
    chunks, edges, extremes, landings)`` -- the chunk bounds and per chunk
    the values of the columns read, ``(column index, at the match's last
    row)`` for FIRST/LAST at the match's edge, ``(column index, float
    keys, MAX, variable ids or None: all)`` for MIN/MAX, ``(variable ids,
    "FIRST" or "LAST")`` for FIRST/LAST of a variable elsewhere (the walk
    finds the row, measures.py gathers the value there) -- or None when
    some measure needs the labels (they are then written by the walk as
    usual). An aggregate over every row of the match (``SUM(price
    * volume)``, no variable) needs none either: the segmented kernels read
    only the rows from each match's start (kernels/segmented.py
    ``EVERY_ROW``). Columns: 8-byte numbers, timestamps and durations
    without NULLs, chunked alike. Why: the walk's chain of dependent
    lookups leaves room for these loads, which as passes of their own read
    the columns again (kernels/unanchored.py ``walk_measures``)."""
    if query.rows_per_match != "ONE":
        return None
    columns: dict = {}

    def column(name: str) -> Optional[int]:
        col = data.table.column(name)
        t = col.type
        if col.null_count or not _walk_type(t):
            return None
        return columns.setdefault(name, len(columns))
    plan = _walk_plan(query, column, lambda name: data.table.column(name).type)
    if isinstance(plan, str):
        return None
    edges, extremes, landings = plan
    names = list(columns)
    chunked = [[c for c in data.table.column(name).chunks if len(c)] for name in names]
    bounds = [tuple(np.cumsum([0] + [len(c) for c in cs]).tolist()) for cs in chunked]
    if names and (len(set(bounds)) > 1 or len(chunked[0]) > _WALK_MAX_CHUNKS):
        return None
    chunks = [tuple(np.frombuffer(cs[k].buffers()[1], dtype=np.uint64,
                                  count=cs[k].offset + len(cs[k]))[cs[k].offset:]
                    for cs in chunked) for k in range(len(chunked[0]) if names else 0)]
    return (bounds[0] if names else (0,), chunks, edges, extremes, landings)


def walk_labels_reason(query: CheckedQuery) -> Optional[str]:
    """For ``explain()``: None when the ONE ROW measures of ``query`` can
    all come from the walk without per-row labels (columns permitting: a
    MIN/MAX over a column holding NULLs, or columns chunked unlike each
    other, still take the labels), else which measure reads the labels."""
    if query.rows_per_match != "ONE":
        return "ALL ROWS PER MATCH reports every row's variable"
    plan = _schema_plan(query)
    return plan if isinstance(plan, str) else None


def walk_decided_extremes(query: CheckedQuery) -> list:
    """For ``explain()``: ``"MIN(DOWN.price) at DOWN's last row"`` per
    MIN/MAX the walk takes at a row its variable's DEFINE decides
    (gpu_mr/monotone.py), without comparing keys."""
    from .kernels.unanchored import EXT_AT_FIRST, EXT_COMPARED
    plan = _schema_plan(query) if query.rows_per_match == "ONE" else "ALL ROWS"
    if isinstance(plan, str):
        return []
    out = []
    for (column, want_max, member), (*_, at) in plan[1].items():
        if at != EXT_COMPARED and member is not None and len(member) == 1:
            var = A.quote_ident(query.primary_vars[member[0]])
            out.append(f"{'MAX' if want_max else 'MIN'}({var}.{column}) at "
                       f"{var}'s {'first' if at == EXT_AT_FIRST else 'last'} row")
    # past the walk's extremes: the FIRST/LAST row it finds, the value gathered
    ids = {name: i for i, name in enumerate(query.primary_vars)}
    for m in query.measures:
        for e in m.expr.walk():
            nav = monotone.as_navigation(query, e)
            if nav is None or (nav.arg.resolved, e.name == "MAX", (ids[e.var],)) in plan[1]:
                continue
            var = A.quote_ident(e.var)
            text = f"{e.name}({var}.{nav.arg.resolved}) at {var}'s {nav.kind.lower()} row"
            if text not in out:
                out.append(text)
    return out


def _schema_plan(query: CheckedQuery):
    """:func:`_walk_plan` over the query's input schema, where one was given
    (a column not in it reads as if the walk can read it)."""
    schema = query.input_schema
    names: dict = {}

    def column(name: str) -> Optional[int]:
        if schema is not None and name in schema.names and not _walk_type(
                schema.field(name).type):
            return None             # not in the schema (none given yet): as if it fits
        return names.setdefault(name, len(names))

    def arrow_type(name: str):
        return schema.field(name).type if schema is not None and name in schema.names \
            else None
    return _walk_plan(query, column, arrow_type)


def _walk_type(t: pa.DataType) -> bool:
    """Columns the walk reads in place: 8-byte numbers and times."""
    return t in (pa.int64(), pa.float64()) or pa.types.is_timestamp(t) or \
        pa.types.is_duration(t)


def _walk_plan(query: CheckedQuery, column, arrow_type):
    """:func:`walk_request`'s choice over the measures: ``(edges, extremes,
    landings)``, or the measure that needs the labels (its text).
    ``column(name)``: the walk's index of a column it can read, or None;
    ``arrow_type(name)``: the column's Arrow type."""
    if not query.measures:
        return "no measures"
    from .kernels.unanchored import (EXT_AT_FIRST, EXT_AT_LAST, EXT_COMPARED, WALK_EDGES,
                                     WALK_EXTREMES, WALK_LANDINGS)
    walk_at = {"FIRST": EXT_AT_FIRST, "LAST": EXT_AT_LAST}
    first_vars, last_vars = _edges_of(query)
    ids = {name: i for i, name in enumerate(query.primary_vars)}
    var_ids = {name: (i,) for name, i in ids.items()}
    for name, members in query.subsets.items():
        var_ids[name] = tuple(sorted(ids[x] for x in members))
    edges: dict = {}
    extremes: dict = {}
    landings: dict = {}

    def at_edge(var: Optional[str], kind: str) -> bool:
        return var is None or (frozenset(var_ids[var])
                               >= (first_vars if kind == "FIRST" else last_vars))

    def landing(var: str, kind: str) -> bool:
        """FIRST/LAST of ``var`` inside the match: its row found by the
        walk (at most WALK_LANDINGS of them), the value gathered there."""
        key = (var_ids[var], kind)
        if key not in landings and len(landings) >= WALK_LANDINGS:
            return False
        landings.setdefault(key, len(landings))
        return True

    runs = run_sequence(query)

    def var_range(var: Optional[str]) -> bool:
        """An aggregate over ``var``'s rows as one range of the match: its
        FIRST and LAST rows at the match's edge, found by the walk, or (at
        most one row) the same."""
        if var is None or var not in ids or ids[var] not in runs:
            return False
        if not (at_edge(var, "FIRST") or landing(var, "FIRST")):
            return False
        return runs[ids[var]] or at_edge(var, "LAST") or landing(var, "LAST")

    def label_free(e: A.Expr) -> bool:
        if isinstance(e, A.MatchNumber):
            return True
        if isinstance(e, A.ColumnRef):          # DOWN.price: LAST(DOWN.price)
            return at_edge(e.var, "LAST") or landing(e.var, "LAST")
        if isinstance(e, A.Navigation):
            if not (isinstance(e.arg, A.ColumnRef) and e.kind in ("FIRST", "LAST")
                    and int(e.offset.value) == 0):
                return False
            if not at_edge(e.arg.var, e.kind):
                return landing(e.arg.var, e.kind)
            c = column(e.arg.resolved)
            if c is not None and len(edges) < WALK_EDGES:     # more: gathered as usual
                edges.setdefault((e.arg.resolved, e.kind == "LAST"), (c, e.kind == "LAST"))
            return True
        if isinstance(e, A.Aggregate):
            if e.star:
                return e.name == "COUNT" and (e.var is None or var_range(e.var))
            if (e.name not in ("COUNT", "SUM", "AVG", "MIN", "MAX") or e.distinct
                    or e.over_order or len(e.args) != 1):
                return False
            ref = e.args[0]
            if e.name in ("MIN", "MAX") and isinstance(ref, A.ColumnRef):
                c = column(ref.resolved)
                member = None if e.var is None else var_ids[e.var]
                key = (ref.resolved, e.name == "MAX", member)
                if c is not None and (key in extremes or len(extremes) < WALK_EXTREMES):
                    floats = arrow_type(ref.resolved) == pa.float64()
                    # at a row the DEFINE decides, where it does: no key compared
                    at = (monotone.extreme_at(query, e.var, ref.resolved, e.name == "MAX")
                          if e.var in ids else None)
                    extremes.setdefault(key, (c, floats, e.name == "MAX", member,
                                              walk_at.get(at, EXT_COMPARED)))
                    return True
                # past the walk's extremes: the FIRST/LAST it equals, where
                # the DEFINE decides its row (_Vectors._aggregate alike)
                nav = monotone.as_navigation(query, e)
                if nav is not None:
                    return label_free(nav)
            # Over every row of the match, or of a variable's range of it:
            # the segmented kernels read no labels (kernels/segmented.py
            # EVERY_ROW), only those rows.
            return measure_exprs.reads_row_only(ref, e.var) and (
                e.var is None or var_range(e.var))
        found = measure_exprs.leaves(e)
        return (found is not None and not any(leaf is e for leaf in found)   # CLASSIFIER
                and all(label_free(leaf) for leaf in found))

    try:
        for m in query.measures:
            if not label_free(m.expr):
                return f"{m.name} = {m.expr.to_sql()}"
        return edges, extremes, list(landings)
    finally:
        # label_free calls itself: its cell holds it, a cycle that kept
        # ``column``, and with it the caller's input table, alive until the
        # garbage collector ran (a stream's batches piled up in memory)
        label_free = None  # noqa: F841


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
                 measures: dict, columns: dict,
                 partition_of: Optional[np.ndarray] = None, spans=None,
                 per_partition: Optional[np.ndarray] = None) -> pa.Table:
    """Input columns gathered from the sorted table at ``source_rows``, then
    the measures (analysis guarantees measure names never clash with input
    columns). ``partition_of`` (each output row's partition): a
    partition column is then read once per partition and repeated
    (``per_partition``: its output rows per partition, where known).
    ``spans``: see :func:`_gather_sets`."""
    arrays = []
    take = None
    partition_columns = set(query.partition_columns)
    exact = None                     # spans from source_rows itself, once known to ascend
    known: dict = {}                 # whether source_rows holds a -1, once known
    for field in query.output_schema:
        if field.name in measures:
            arrays.append(measures[field.name])
            continue
        if partition_of is not None and field.name in partition_columns:
            arr = _partition_values(data, field.name, partition_of, spans is not None,
                                    per_partition)
            if arr is not None:
                if pa.types.is_dictionary(field.type) and not pa.types.is_dictionary(arr.type):
                    # decoded by _take_sorted; Arrow casts strings back, not numbers
                    arr = arr.dictionary_encode().cast(field.type)
                arrays.append(arr)
                continue
        src = _fixed_chunks(data.table.column(field.name))
        if src is not None:
            if exact is None:
                exact = _ascending_spans(source_rows, src) or False
            values, valid = _gather_sets(src, [source_rows], exact or spans, known)[0]
            arrays.append(_fixed_array(src, values, valid))
            continue
        if take is None:
            take = pa.array(source_rows, pa.int64())
        arrays.append(_combined(data, field.name, columns).take(take))
    return pa.Table.from_arrays(arrays, schema=query.output_schema)


# From this many chunks a column's gathers at ascending rows take each
# chunk's own outputs (:func:`_ascending_spans`).
ASCENDING_MIN_CHUNKS = 4


def _ascending_spans(rows: np.ndarray, src: _FixedChunks):
    """``spans`` for :func:`_gather_sets` at ``rows`` when they ascend (ALL
    ROWS of matches that do not overlap): each chunk's exact outputs, found
    by binary search; None when they do not, or the column has fewer than
    ``ASCENDING_MIN_CHUNKS`` chunks (the check is a pass over the rows).
    Why: the partition spans cover every output of each partition a chunk
    overlaps, so a partition over k chunks was passed over k times (ALL
    ROWS over 40 chunks of 1e7 rows: 96 against 65 ms of measures)."""
    if len(src.chunks) < ASCENDING_MIN_CHUNKS or not rows.shape[0]:
        return None
    if rows[0] < 0 or not bool(np.all(rows[1:] >= rows[:-1])):
        return None

    def spans(lo: int, hi: int) -> tuple:
        return (int(np.searchsorted(rows, lo, side="left")),
                int(np.searchsorted(rows, hi, side="left")))
    return spans


def _partition_values(data: SortedInput, name: str, partition_of: np.ndarray,
                      ordered: bool = False, per_partition: Optional[np.ndarray] = None):
    """A partition column at output rows of known partitions: its value at
    each partition's first row, repeated (``ordered``: ``partition_of`` is
    ascending, the rows come as one run per partition, ``per_partition``
    of them in each where the engine counted them). None for floats
    (``-0.0`` and ``0.0`` share a partition but print differently) and other
    types whose equal keys need not be identical values."""
    col = data.table.column(name)
    t = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
    if not (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
            or pa.types.is_binary(t) or pa.types.is_large_binary(t)
            or pa.types.is_timestamp(t) or pa.types.is_date(t)):
        return None
    small = _take_sorted(col, data.partition_offsets[:-1])
    if ordered and not small.null_count:
        # output rows in partition order: runs, one per partition
        counts = per_partition
        if counts is None or counts.shape[0] != len(small):
            counts = _run_lengths(partition_of, len(small))
        got = _fill_runs(small, counts)
        if got is not None:
            return got
    if small.null_count or not _is_binary_like(t):
        return small.take(pa.array(partition_of, pa.int64()))
    return repeat_strings(small, partition_of, compiled=_compiled_gather(len(partition_of)))


def _run_lengths(ascending: np.ndarray, n: int) -> np.ndarray:
    """How many times each of ``0 .. n-1`` occurs in ``ascending``: a
    search per value where they are few, else one count over the array
    (100,000 partitions' searches among 680,000 matches took 1.2 ms)."""
    if n * 24 < ascending.shape[0]:
        return np.diff(np.searchsorted(ascending, np.arange(n + 1)))
    return np.bincount(ascending, minlength=n)


# Output rows per run below which _fill_runs leaves strings to a kernel: a run
# costs a few numpy calls (microseconds each), the kernel a few nanoseconds a
# row.
_MIN_RUN_ROWS = 1_000


def _fill_runs(small: pa.Array, counts: np.ndarray) -> Optional[pa.Array]:
    """``small[p]`` repeated ``counts[p]`` times, p ascending (no NULLs), by
    block copies: np.repeat of the values of a fixed-width type; strings by
    one compiled pass (kernels/gather.py ``string_runs``), else a string's
    bytes doubled by numpy's memcpy along its run. None for other types, or
    (without the compiled pass) strings in runs too short to repay a few
    numpy calls each."""
    t, n = small.type, int(counts.sum())
    fixed = _fixed_chunks(pa.chunked_array([small], t))
    if fixed is not None:
        words = fixed.chunks[0][2] if fixed.chunks else np.zeros(0, fixed.word)
        runs = np.flatnonzero(counts)
        if n >= _MIN_RUN_ROWS * len(runs):
            # long runs: one slice fill each (a memset's speed) beats np.repeat's
            # per-element loop (about 5 ns a row)
            out = B.empty(n, words.dtype)
            ends = np.cumsum(counts)
            for p in runs.tolist():
                out[int(ends[p] - counts[p]):int(ends[p])] = words[p]
        else:
            out = np.repeat(words, counts)
        return pa.Array.from_buffers(t, n, [None, pa.py_buffer(out)])
    if not _is_binary_like(t):
        return None
    kernel = G.kernels(_compiled_gather(n))[5]
    runs = np.flatnonzero(counts)
    if kernel is G.DRIVERS[5] and n < _MIN_RUN_ROWS * len(runs):
        return None
    piece = _string_piece(small)
    lengths = np.diff(piece.offsets).astype(np.int64)
    total = int(counts @ lengths)
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    if not large and total >= 2**31:
        return None
    out_offsets = B.empty(n + 1, np.int64 if large else np.int32)
    out_offsets[0] = 0
    out_data = B.empty(total, np.uint8)
    if kernel is not G.DRIVERS[5]:          # compiled: one pass, no Python loop per run
        kernel(piece.offsets, piece.data, counts.astype(np.int64, copy=False), out_offsets,
               out_data)
        return pa.Array.from_buffers(t, n, [None, pa.py_buffer(out_offsets),
                                            pa.py_buffer(out_data)])
    pos = o = 0
    for p in runs.tolist():
        c, width, a = int(counts[p]), int(lengths[p]), int(piece.offsets[p])
        if width:
            out_offsets[o + 1:o + c + 1] = np.arange(pos + width, pos + width * c + 1, width)
            run = out_data[pos:pos + c * width]
            run[:width] = piece.data[a:a + width]
            done = width
            while done < run.shape[0]:      # doubling block copies (memcpy each)
                step = min(done, run.shape[0] - done)
                run[done:done + step] = run[:step]
                done += step
        else:
            out_offsets[o + 1:o + c + 1] = pos
        pos += c * width
        o += c
    return pa.Array.from_buffers(t, n, [None, pa.py_buffer(out_offsets),
                                        pa.py_buffer(out_data)])


def _is_binary_like(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t))


def _combined(data: SortedInput, name: str, cache: dict):
    """A sorted input column in one piece (a gather from one array is several
    times faster than from a chunked one)."""
    col = cache.get(name)
    if col is None:
        chunked = data.table.column(name)
        col = cache[name] = chunked.chunk(0) if chunked.num_chunks == 1 else (
            chunked.combine_chunks() if chunked.num_chunks else chunked)
    return col


def _take_sorted(col: pa.ChunkedArray, rows: np.ndarray) -> pa.Array:
    """The values at ascending ``rows``, taken chunk by chunk (a take from a
    chunked column may combine it first), dictionaries decoded."""
    lengths = [len(c) for c in col.chunks]
    bounds = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    # each chunk's rows, a slice of the ascending rows (a pass per chunk
    # over 100,000 rows, and their np.unique, took 1.5 ms)
    cuts = np.searchsorted(rows, bounds).tolist()
    parts = []
    for c in range(len(lengths)):
        if cuts[c + 1] > cuts[c]:
            part = col.chunk(c).take(pa.array(rows[cuts[c]:cuts[c + 1]] - bounds[c], pa.int64()))
            parts.append(part.dictionary_decode() if pa.types.is_dictionary(part.type) else part)
    if not parts:
        t = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
        return pa.array([], t)
    return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)


# ---- fixed-width columns read from their buffers (kernels/gather.py)

# Below this many output rows the plain Python bodies (about a microsecond a
# value) cost at most a few ms and never wait for numba to load or compile
# the kernel; above it the kernel (compiled once, then from numba's disk
# cache) wins: at 20,000 the plain bodies took 24 ms of a 30 ms query.
G_MIN_ROWS = 2_000


def _compiled_gather(n: int) -> bool:
    """Whether ``n`` outputs take kernels/gather.py's compiled kernels: from
    ``G_MIN_ROWS`` on, or at any size once the process is warm
    (``G.use_compiled``)."""
    return G.use_compiled(n, G_MIN_ROWS)
_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


class _FixedChunks:
    """A fixed-width column as ``chunks`` of (first row, end row, values as
    unsigned words of the type's width, validity bytes or None)."""

    __slots__ = ("type", "word", "chunks")

    def __init__(self, type_, word, chunks):
        self.type, self.word, self.chunks = type_, word, chunks


def _fixed_chunks(col) -> Optional[_FixedChunks]:
    """The column's chunks as numpy views, None for types without a plain
    fixed-width layout (booleans, decimals, strings, dictionaries)."""
    t = col.type
    if not (pa.types.is_integer(t) or t in (pa.float32(), pa.float64())
            or pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t)
            or pa.types.is_duration(t)):
        return None
    word = _WORDS.get(t.bit_width // 8)
    if word is None:
        return None
    chunks = [c for c in col.chunks if len(c)]
    if len(chunks) > MANY_CHUNKS and len(col) < CHUNK_MIN_ROWS * len(chunks):
        chunks = [col.combine_chunks()]
    out, lo = [], 0
    for c in chunks:
        values = np.frombuffer(c.buffers()[1], dtype=word, count=c.offset + len(c))[c.offset:]
        out.append((lo, lo + len(c), values, _valid_bytes(c)))
        lo += len(c)
    return _FixedChunks(t, word, out)


_NO_VALID = np.ones(1, np.uint8)


def _gather_sets(src: _FixedChunks, sets: list, spans=None, known: Optional[dict] = None) -> list:
    """(values, validity bytes or None: no NULL) of ``src`` at each int64 array of rows in
    ``sets`` (-1: NULL), all of one length, in as few passes as possible.
    ``spans(lo, hi)``, if given, bounds the outputs whose rows may lie in
    rows ``lo .. hi - 1`` (so that each chunk's pass skips the others').
    ``known``: remembers across calls which row arrays hold a -1
    (:func:`_rows_valid`)."""
    m = sets[0].shape[0]
    has_valid = any(valid is not None for _, _, _, valid in src.chunks)
    # values under NULLs are never read: left as they come
    outs = [(B.empty(m, src.word), B.zeros(m if has_valid else 1, np.uint8))
            for _ in sets]
    gather = G.kernels(_compiled_gather(m))[0]
    k_max = G.GATHER_SETS
    jobs = []
    for lo, hi, values, valid in src.chunks:
        if has_valid and valid is None:
            valid = np.ones(hi - lo, np.uint8)
        first_out, end_out = (0, m) if spans is None else spans(lo, hi)
        for g in range(0, len(sets), k_max):
            group = list(range(g, min(g + k_max, len(sets))))
            pad = group + [group[0]] * (k_max - len(group))
            args = ([sets[i] for i in pad] + [outs[i][0] for i in pad]
                    + [outs[i][1] for i in pad])

            def piece(a, b, values=values, valid=valid, lo=lo, hi=hi, k=len(group),
                      args=args, first_out=first_out):
                gather(values, valid if has_valid else _NO_VALID, has_valid, lo, hi,
                       first_out + a, first_out + b, k, *args)
            pieces = (split_even(end_out - first_out, len(group))
                      if gather is not G.DRIVERS[0] else [(0, end_out - first_out)])
            jobs += [(piece, a, b) for a, b in pieces]
    # the outputs are independent: every chunk's pieces at once on all cores
    # (the kernel drops the GIL; a chunk at a time, each under MIN_WORK ran
    # on one: w_shape, 1e7 rows in 3 chunks, 2.3 ms a column)
    run_all(lambda job: job[0](job[1], job[2]), jobs)
    if has_valid:
        return outs
    # No NULL values: NULL only where there is no row (None: none of those)
    return [(values, _rows_valid(rows, known)) for (values, _), rows in zip(outs, sets)]


def _rows_valid(rows: np.ndarray, known: Optional[dict] = None) -> Optional[np.ndarray]:
    """``rows >= 0`` as validity bytes, None when every row is one. ``known``
    keeps the answer per array (by identity, with the array, so that the
    identity stays its own): the output rows of ALL ROWS feed every input
    column, and a pass over millions of rows each is 1 ms."""
    hit = known.get(id(rows)) if known is not None else None
    if hit is not None and hit[0] is rows:
        negative = hit[1]
    else:
        negative = bool(rows.size and least(rows) < 0)
        if known is not None:
            known[id(rows)] = (rows, negative)
    return (rows >= 0).view(np.uint8) if negative else None


def _source_spans(offsets: np.ndarray, source: np.ndarray):
    """``spans`` for :func:`_gather_sets` over outputs in partition order
    whose rows (``source``, and any row a measure reads for them) lie in
    their own partition: the outputs of the partitions overlapping a row
    range are a range. ``source`` need not be sorted (overlapping matches
    repeat rows), but "row at or past partition p's start" flips once along
    it, which is all a binary search needs."""
    def spans(lo: int, hi: int) -> tuple:
        p_lo = max(int(np.searchsorted(offsets, lo, side="right")) - 1, 0)
        p_hi = min(int(np.searchsorted(offsets, hi, side="left")), len(offsets) - 1)
        return (int(np.searchsorted(source, offsets[p_lo], side="left")),
                int(np.searchsorted(source, offsets[p_hi], side="left")))
    return spans


def _output_spans(data: SortedInput, ma: MatchArrays, source: np.ndarray):
    if not ma.in_partition_order():
        return None
    return _source_spans(data.partition_offsets, source)


def _fixed_array(src: _FixedChunks, values: np.ndarray,
                 valid: Optional[np.ndarray]) -> pa.Array:
    """The gathered ``values`` as an Arrow array of the column's type;
    ``valid`` bytes, or None: no NULL."""
    m = values.shape[0]
    nulls = 0 if valid is None else m - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(src.type, m, [bitmap, pa.py_buffer(values)],
                                 null_count=nulls)


# Matches spanning a chunk border beyond which the chunks are combined
# instead (each such match costs a small copy and a kernel call).
_MAX_CROSSING = 64


def _balanced_jobs(jobs: list, offsets: np.ndarray) -> list:
    """``_chunk_jobs``' jobs with each run of matches cut into slices of at
    most a share of the elements (a quarter of a core's), so that pieces of
    whole jobs come out about equal."""
    total = int(offsets[-1] - offsets[0]) if offsets.shape[0] else 0
    share = max(1, total // (4 * thread_count()))
    out = []
    for kind, a, b, ci in jobs:
        if kind != "run" or int(offsets[b] - offsets[a]) <= share:
            out.append((kind, a, b, ci))
            continue
        targets = int(offsets[a]) + share * np.arange(1, -(-int(offsets[b] - offsets[a]) // share))
        cuts = np.searchsorted(offsets[a:b + 1], targets, side="left") + a
        bounds = sorted({a, b} | {int(c) for c in cuts if a < c < b})
        out += [(kind, x, y, ci) for x, y in zip(bounds, bounds[1:])]
    return out


def _rows_across(chunks: list, lo: int, hi: int) -> tuple:
    """(values, valid or None) of rows ``lo .. hi - 1`` copied out of the
    chunks holding them."""
    values, valid, any_valid = [], [], False
    for c_lo, c_hi, v, ok in chunks:
        a, b = max(lo, c_lo), min(hi, c_hi)
        if a < b:
            values.append(v[a - c_lo:b - c_lo] if v is not None else None)
            valid.append(np.ones(b - a, bool) if ok is None else ok[a - c_lo:b - c_lo])
            any_valid |= ok is not None
    v_out = None if not values or values[0] is None else np.concatenate(values)
    return v_out, (np.concatenate(valid) if any_valid else None)


@dataclass(frozen=True)
class _Pending:
    """A measure that is a column's values at some rows, gathered later
    together with the other measures reading that column."""
    column: str
    rows: np.ndarray
    target: pa.DataType


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
        from decimal import Context, Decimal, InvalidOperation
        quantum = Decimal(1).scaleb(-t.scale)
        # the default context holds 28 digits; a DECIMAL(38, s) value can need 38
        wide = Context(prec=max(t.precision, 28) + t.scale + 2)
        try:
            vals = [None if v is None else Decimal(v).quantize(quantum, context=wide)
                    for v in vals]
        except InvalidOperation:
            raise DataError(f"measure {m.name}: a value does not fit {t.sql_name()}",
                            column=m.name, code="bad_measure_value") from None
    try:
        return T.to_arrow_array(vals, t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        reason = _RANGES.get(t.kind, str(exc))
        raise DataError(f"measure {m.name}: its values do not fit {t.sql_name()} ({reason})",
                        column=m.name, code="bad_measure_value") from None


# What a 64-bit result holds, for the error of a value past it (Python's own
# words are "int too large to convert to C long").
_RANGES = {"BIGINT": "64-bit integers: -2**63 .. 2**63 - 1",
           "INTERVAL": "64-bit nanoseconds: within about 292 years of zero",
           "TIMESTAMP": "64 bits in the column's unit; in nanoseconds, the years 1677 .. 2262",
           "INTERVAL_YM": "64-bit months"}


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


# (query, nfa.edge_variables) of the last query assembled: a stream's batches
# and repeated runs of one compiled query skip compiling its NFA again.
_last_edges: tuple = (None, None)


def _edges_of(query: CheckedQuery) -> tuple:
    """``nfa.edge_variables`` of the query's pattern (cached for the last query)."""
    global _last_edges
    last = _last_edges              # one read: another thread may replace it
    if last[0] is not query:
        edges = edge_variables(compile_nfa(query.pattern, query.primary_vars))
        last = _last_edges = (query, edges)
    return last[1]


def run_sequence(query: CheckedQuery) -> dict:
    """For a pattern that is a sequence of runs, each of a variable of its
    own (``STRT DOWN+ UP+``: no alternation, group, PERMUTE or variable
    met twice; anchors and exclusions do not matter), per variable id
    whether it takes at most one row; else empty. There a variable's rows
    are one contiguous range of the match, from its FIRST row to its LAST,
    so an aggregate over it needs no labels once those two rows are known
    (measures.py ``_Vectors._var_range``)."""
    ids = {name: i for i, name in enumerate(query.primary_vars)}
    pattern = query.pattern
    items = pattern.items if isinstance(pattern, A.PConcat) else (pattern,)
    out: dict = {}
    for item in items:
        if isinstance(item, A.PAnchor):
            continue
        if isinstance(item, A.PExclude):
            item = item.body
        at_most_one = True
        if isinstance(item, A.PQuant):
            at_most_one = item.max == 1
            item = item.body
        if not isinstance(item, A.PVar) or item.name not in ids or ids[item.name] in out:
            return {}
        out[ids[item.name]] = at_most_one
    return out


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
        self._rows = rows
        self._delta = self._current = self._running = None
        if self.one_row:
            # output row o is match o: per-match arrays serve as they are
            # (``mi`` and ``has`` None: no gather, no mask)
            self.has = self.mi = None
            self._first = self._stop = None     # the label offsets, on first read
        else:
            match = rows.match
            if match.size and least(match) < 0:     # WITH UNMATCHED ROWS
                self.has = match >= 0
                mi = np.where(self.has, match, 0)
            else:                                   # every output row has a match
                self.has, mi = None, match
            self.mi = mi
            self._first = self._stop = None     # gathered on first read
        ids = {name: i for i, name in enumerate(query.primary_vars)}
        self.var_ids = {name: (i,) for name, i in ids.items()}
        for name, members in query.subsets.items():
            self.var_ids[name] = tuple(sorted(ids[x] for x in members))
        self._cache: dict = {}
        self._decoded: dict = {}
        self._part = None
        # per-match values the engine's walk computed (see walk_request)
        self.walked = (getattr(ma, "walked", None) or {}) if self.one_row else {}

    # built on first read (ONE ROW's common measures need none of them)
    @property
    def first(self) -> np.ndarray:
        """Per output row, its match's first element."""
        if self._first is None:
            offsets = self.ma.label_offsets
            self._first = offsets[:-1] if self.mi is None else offsets[self.mi]
        return self._first

    @property
    def stop(self) -> np.ndarray:
        """Per output row, the element after its match's last."""
        if self._stop is None:
            offsets = self.ma.label_offsets
            self._stop = offsets[1:] if self.mi is None else offsets[1:][self.mi]
        return self._stop

    @property
    def delta(self) -> np.ndarray:
        if self._delta is None:
            self._delta = self._at(self.ma.start) - self.first
        return self._delta

    @property
    def current(self) -> np.ndarray:
        if self._current is None:
            self._current = self._rows.current
        return self._current

    @property
    def running(self) -> np.ndarray:
        if self._running is None:
            self._running = self._rows.running
        return self._running

    # -------------------------------------------------------- entry point
    def measure(self, m):
        """The measure as an Arrow array of its type, a ``_Pending`` gather
        (see :meth:`resolve`), or None: interpret it."""
        try:
            arr = self._eval(m.expr)
        except _Fallback:
            return None
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            # A gather or cast Arrow refuses for this column's type: the
            # interpreter computes the measure instead (same answer, slower).
            return None
        if isinstance(arr, _Pending):
            return arr if arr.target == m.type.arrow() else None
        return arr if arr.type == m.type.arrow() else None

    def resolve(self, pending: dict) -> dict:
        """The ``_Pending`` measures (name -> pending) as arrays: each column
        read once for all the row sets its measures need (row sets shared
        between measures, e.g. FIRST(A.x) and FIRST(A.y), gathered once);
        None where the cast to the measure's type fails (interpret it)."""
        out: dict = {}
        by_column: dict = {}
        for name, p in pending.items():
            by_column.setdefault(p.column, []).append((name, p))
        for column, items in by_column.items():
            src = self._fixed(column)
            sets, slot = [], {}
            for _, p in items:
                if id(p.rows) not in slot:
                    slot[id(p.rows)] = len(sets)
                    sets.append(p.rows)
            walked = {}
            for name, p in items:       # FIRST/LAST at the match's edge, from the walk
                at_end = (True if p.rows is self.ma.end
                          else False if p.rows is self.ma.start else None)
                got = self.walked.get(("edge", column, at_end))
                if at_end is not None and got is not None:
                    walked[name] = _fixed_array(src, got, None)
            sets = [r for r in sets if not all(
                name in walked for name, p in items if p.rows is r)]
            slot = {id(r): i for i, r in enumerate(sets)}
            gathered = (_gather_sets(src, sets, self._spans(), self._cache.setdefault(
                ("rows with none",), {})) if sets else [])
            for name, p in items:
                arr = (walked[name] if name in walked
                       else _fixed_array(src, *gathered[slot[id(p.rows)]]))
                try:
                    out[name] = arr if arr.type == p.target else arr.cast(p.target)
                except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                    out[name] = None        # a cast Arrow refuses: the interpreter's value
        return out

    def _spans(self):
        """``spans`` for :func:`_gather_sets` (see :func:`_source_spans`;
        output rows come in partition order and a measure's row lies in its
        match's partition), or None when the matches are not in partition
        order (ONE ROW keeps the engine's order)."""
        key = ("spans",)
        if key not in self._cache:
            self._cache[key] = _output_spans(self.data, self.ma, self._rows.source)
        return self._cache[key]

    def _fixed(self, name: str) -> Optional[_FixedChunks]:
        key = ("fixed", name)
        if key not in self._cache:
            self._cache[key] = _fixed_chunks(self.data.table.column(name))
        return self._cache[key]

    def _at(self, per_match: np.ndarray) -> np.ndarray:
        """Per-match values at each output row."""
        if self.mi is None:
            return per_match
        if (self.has is None and self._rows.running_is_element
                and per_match.dtype.itemsize == 8):
            # output row o is element o: each match's value over its elements
            return _spread(self.ma.label_offsets, per_match, 0).view(per_match.dtype)
        return per_match[self.mi]

    def _where_has(self, values: np.ndarray, fill) -> np.ndarray:
        """``values`` where the output row has a match, else ``fill``."""
        return values if self.has is None else np.where(self.has, values, fill)

    def _eval(self, e: A.Expr) -> pa.Array:
        if isinstance(e, A.MatchNumber):
            return self._ints(self._at(self.ma.number), self.has)
        if isinstance(e, A.Classifier):
            if (e.var is None and not self.one_row and self.has is None
                    and self._rows.running_is_element):
                # ALL ROWS, every row of every match in order: row o's label is
                # element o's (no empty match: the current row is always one)
                names = pa.array(list(self.q.primary_vars), pa.string())
                return repeat_strings(names, self.ma.labels, None, runs=False,
                                      compiled=_compiled_gather(len(self.ma.labels)))
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
        # an expression over the above: evaluated around their arrays
        arr = measure_exprs.evaluate(self.q, e, e.type, self.n, self._leaf, self.has)
        if arr is None:
            raise _Fallback
        return arr

    def _argument_column(self, arg: A.Expr, var: Optional[str]) -> A.ColumnRef:
        """An aggregate's row-level argument evaluated at every row, added to
        the input as a column of its own; a reference to it."""
        key = ("argument", id(arg), var)
        name = self._cache.get(key)
        if name is None:
            arr = measure_exprs.row_values(self.q, self.data, arg, var)
            if arr is None:
                raise _Fallback
            name = self._cache[key] = f"\x00argument {len(self._cache)}"
            d = self.data
            self.data = SortedInput(d.table.append_column(name, pa.chunked_array([arr])),
                                    d.partition_offsets, d._source_rows, d.was_sorted)
        return A.ColumnRef(var=var, column=name, resolved=name, type=arg.type)

    def _leaf(self, e: A.Expr) -> Optional[pa.Array]:
        """A leaf of a measure expression as an array (its gather done now),
        or None where the interpreter must compute it."""
        try:
            arr = self._eval(e)
            if isinstance(arr, _Pending):
                arr = self.resolve({"leaf": arr})["leaf"]
        except _Fallback:
            return None
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            return None
        if arr is not None and e.type is not None and arr.type != e.type.arrow():
            return None
        return arr

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

    def _at_edge(self, ids, kind: str, k: int) -> bool:
        """Whether FIRST/LAST(.., k) over ``ids`` always lands on the match's
        first/last row (k = 0 and the pattern's first/last row is always one
        of ``ids``): then no walk over the labels is needed."""
        if k != 0:
            return False
        return _edges_of(self.q)[0 if kind == "FIRST" else 1] <= frozenset(ids)

    def _per_match_landing(self, ids, kind: str, k: int) -> np.ndarray:
        """Per match, the element FIRST/LAST(.., k) lands on over the whole
        match, -1 for none."""
        return self._landings(ids, kind, k, as_rows=False)

    def _final_rows(self, ids, kind: str, k: int) -> np.ndarray:
        """Per output row of ONE ROW (one per match), the row FIRST/LAST(..,
        k) lands on over the whole match, -1 for none."""
        return self._landings(ids, kind, k, as_rows=True)

    def _landings(self, ids, kind: str, k: int, as_rows: bool) -> np.ndarray:
        """Per match, where FIRST/LAST(.., k) over the whole match lands: its
        element, or its row (``as_rows``); -1 for none. At the match's edge
        by index arithmetic, else by the kernel that walks the labels
        (without the elements in between)."""
        key = ("landing", ids, kind, k, as_rows)
        got = self._cache.get(key)
        if got is None:
            ma = self.ma
            walked = self.walked.get(("landing", ids, kind)) if k == 0 else None
            if walked is not None:          # the engine's walk found the rows
                got = walked if as_rows else np.where(
                    walked >= 0, walked - ma.start + ma.label_offsets[:-1], -1)
            elif ids is None or self._at_edge(ids, kind, k):
                if as_rows:
                    edge = ma.start if kind == "FIRST" else ma.end
                else:
                    edge = (ma.label_offsets[:-1] if kind == "FIRST"
                            else ma.label_offsets[1:] - 1)
                if k == 0 and self._none_empty():
                    got = edge                  # no copy: every match has a first row
                else:
                    got = np.where(self._lengths() > k, edge + k if kind == "FIRST"
                                   else edge - k, -1)
            else:
                got = find_members(self._member(ids), ma.labels, ma.label_offsets[:-1],
                                   ma.label_offsets[1:] - 1,
                                   k, kind == "LAST", row_of_lo=ma.start if as_rows else None)
            self._cache[key] = got
        return got

    def _lengths(self) -> np.ndarray:
        """Rows per match."""
        got = self._cache.get(("lengths",))
        if got is None:
            got = self.walked.get(("lengths",))        # the engine's walk counted them
            if got is None:
                got = np.diff(self.ma.label_offsets)
            self._cache[("lengths",)] = got
        return got

    def _none_empty(self) -> bool:
        """Whether every match has at least one row."""
        got = self._cache.get(("none empty",))
        if got is None:
            walked = self.walked.get(("any empty",))     # the engine's walk saw them
            if walked is not None:
                got = not walked
            else:
                lengths = self._lengths()
                got = not lengths.size or bool(least(lengths) > 0)
            self._cache[("none empty",)] = got
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
            el = self._at(self._per_match_landing(ids, kind, k))
            if not final:                           # the k-th first row, if seen yet
                el = np.where(el <= self.running, el, -1)
        elif ids is None:
            el = np.where(self.running - k >= self.first, self.running - k, -1)
        else:                                       # LAST up to the running end
            cum, pos = self._cumulative(ids)
            idx = cum[self.running + 1] - 1 - k
            el = pos[np.where(idx >= cum[self.first], idx, -1)]
        return self._where_has(el, -1)

    def _to_row(self, el: np.ndarray) -> np.ndarray:
        return np.where(el >= 0, el + self.delta, -1)

    def _last_row(self, var: Optional[str]) -> np.ndarray:
        """The interpreter's last_row_of: the current row for the universal
        variable, else the last row mapped to ``var`` up to the running end."""
        if var is None:
            return self._where_has(self.current, -1)
        if self.one_row:
            return self._final_rows(self._ids(var), "LAST", 0)
        return self._to_row(self._landing(self._ids(var), "LAST", 0, False))

    def _bounds(self) -> tuple:
        if self._part is None:
            offsets = self.data.partition_offsets
            p = self._at(self.ma.partition)
            self._part = (offsets[p], offsets[p + 1])
        return self._part

    def _navigate(self, e: A.Navigation) -> np.ndarray:
        """The row each output row's navigation lands on, -1 for none."""
        k = int(e.offset.value)
        if e.kind in ("FIRST", "LAST"):
            # FIRST(A.ts) and FIRST(A.price) land on the same rows: once.
            key = ("rows", self._ids(_nav_var(e.arg)), e.kind, k, self._final(e.semantics))
            if self.one_row:
                return self._final_rows(*key[1:4])
            rows = self._cache.get(key)
            if rows is None:
                ids = key[1]
                if (e.kind == "FIRST" and k == 0 and self.has is None
                        and self._rows.running_is_element
                        and (ids is None or self._at_edge(ids, "FIRST", 0))):
                    # every row of every match is an output row, at or after
                    # its match's first row, which is the landing: its start
                    rows = self._at(self.ma.start)
                else:
                    rows = self._to_row(self._landing(*key[1:]))
                self._cache[key] = rows
            return rows
        if isinstance(e.arg, A.Navigation):
            base = self._navigate(e.arg)
        else:
            base = self._last_row(_nav_var(e.arg))
        target = base - k if e.kind == "PREV" else base + k
        lo, hi = self._bounds()
        return np.where((base >= 0) & (target >= lo) & (target < hi), target, -1)

    # -------------------------------------------------------- values
    def _ints(self, values: np.ndarray, valid: Optional[np.ndarray]) -> pa.Array:
        mask = None if valid is None or bool(valid.all()) else ~valid
        return pa.array(values.astype(np.int64, copy=False), pa.int64(), mask=mask)

    def _doubles(self, values: np.ndarray, valid: Optional[np.ndarray]) -> pa.Array:
        mask = None if valid is None or bool(valid.all()) else ~valid
        return pa.array(values, pa.float64(), mask=mask)

    def _label_at(self, rows: np.ndarray) -> pa.Array:
        """CLASSIFIER at ``rows``: the label if the row is in the match."""
        el = rows - self.delta
        ok = (rows >= 0) & (el >= self.first) & (el < self.stop)
        if not ok.any():
            return pa.nulls(self.n, pa.string())
        labels = self.ma.labels[np.where(ok, el, 0)]
        names = pa.array(list(self.q.primary_vars), pa.string())
        return repeat_strings(names, labels, None if ok.all() else ok, runs=False,
                              compiled=_compiled_gather(len(labels)))

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

    def _gather(self, ref: A.ColumnRef, rows: np.ndarray):
        target = ref.type.arrow()
        if self._fixed(ref.resolved) is not None:
            return _Pending(ref.resolved, rows, target)
        col = self._column(ref.resolved)
        if not _gatherable(col.type):
            raise _Fallback
        mask = rows < 0
        if mask.any():
            idx = pa.array(np.where(mask, 0, rows), pa.int64(), mask=mask)
        else:
            idx = pa.array(rows, pa.int64())
        out = col.take(idx)
        return out if out.type == target else out.cast(target)

    def _numbers(self, ref: A.ColumnRef, keys: bool) -> list:
        """The column's values per row as int64 or float64 numpy, chunk by
        chunk: [(first row, end row, values, valid per row or None when no
        NULL)]; with ``keys``, order-preserving keys for MIN/MAX of any
        orderable type (strings: ranks over the whole column, one chunk)."""
        key = ("numbers", ref.resolved, keys)
        got = self._cache.get(key)
        if got is not None:
            return got
        col = self.data.table.column(ref.resolved)
        t = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
        chunks = [c for c in col.chunks if len(c)]
        if (t in (pa.string(), pa.large_string()) or not chunks
                or (len(chunks) > MANY_CHUNKS and len(col) < CHUNK_MIN_ROWS * len(chunks))):
            chunks = [self._column(ref.resolved)]
        got, lo = [], 0
        for c in chunks:
            got.append((lo, lo + len(c), *self._chunk_numbers(c, keys)))
            lo += len(c)
        self._cache[key] = got
        return got

    @staticmethod
    def _chunk_numbers(col: pa.Array, keys: bool) -> tuple:
        """(values, valid or None) of one chunk, as :meth:`_numbers` says."""
        if pa.types.is_dictionary(col.type):
            col = col.dictionary_decode()
        t = col.type
        valid = None
        if col.null_count:
            valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        if pa.types.is_integer(t) or t == pa.bool_():
            kind = pa.int64()
        elif t in (pa.float32(), pa.float64()):
            kind = pa.float64()
        elif pa.types.is_decimal(t) and not keys:
            # SUM: the unscaled integers, exact while they and the sums fit int64
            from .predicates.masks import _decimal_unscaled
            values, fits = _decimal_unscaled(col)
            if valid is not None:
                fits |= ~valid
            if not fits.all():
                raise _Fallback
            return np.where(valid, values, 0) if valid is not None else values, valid
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
        # NaN: the kernels report a counted one (the caller falls back)
        return np.ascontiguousarray(col.to_numpy(zero_copy_only=False)), valid

    def _valid_chunks(self, name: str) -> list:
        """[(first row, end row, None, valid per row or None)] of a column."""
        col = self.data.table.column(name)
        out, lo = [], 0
        for c in col.chunks:
            valid = None
            if c.null_count:
                valid = np.asarray(c.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            out.append((lo, lo + len(c), None, valid))
            lo += len(c)
        return out or [(0, 0, None, None)]

    def _chunk_jobs(self, chunks: list, spans=None) -> Optional[list]:
        """How the matches split over the chunks of a column: ("run", first
        match, end match, chunk) for consecutive matches whose rows all lie in
        one chunk, ("cross", match, match + 1, chunk) for a match spanning a
        chunk border. None when that takes too many pieces or the matches are
        not in row order (the caller combines the chunks). ``spans``: the
        ``(key, labels, starts, offsets)`` of :meth:`_spans_of` (None: the
        matches' own rows)."""
        key_of, _, starts, offsets = spans or self._spans_of(None)
        bounds = tuple((lo, hi) for lo, hi, _, _ in chunks)
        key = ("jobs", bounds, key_of)
        if key in self._cache:
            return self._cache[key]
        jobs: Optional[list] = []
        if starts.shape[0] > 1 and not bool(np.all(starts[1:] >= starts[:-1])):
            jobs = None
        else:
            ends = starts + np.diff(offsets)
            for ci, (lo, hi) in enumerate(bounds):
                a = int(np.searchsorted(starts, lo, side="left"))
                b = int(np.searchsorted(starts, hi, side="left"))
                cross = (np.flatnonzero(ends[a:b] > hi) + a).tolist()
                if len(cross) > _MAX_CROSSING:
                    jobs = None
                    break
                prev = a
                for i in cross:
                    if prev < i:
                        jobs.append(("run", prev, i, ci))
                    jobs.append(("cross", i, i + 1, ci))
                    prev = i + 1
                if prev < b:
                    jobs.append(("run", prev, b, ci))
        self._cache[key] = jobs
        return jobs

    def _segmented(self, call, chunks: list, ids, per_element: bool, dtype,
                   counts: Optional[np.ndarray] = None) -> tuple:
        """``call(values, segments, out, counts, row_base)`` (a
        kernels/segmented.py function) over every match, chunk by chunk of
        the per-row arrays (see :meth:`_chunk_jobs`; no combined copy of a
        chunked column): (out, whether any call returned True).
        ``row_base``: the first row of the piece the values come from (a
        kernel that writes rows adds it). ``counts``: a second output, laid
        out as ``out`` (None: the call gets None)."""
        ma = self.ma
        member = self._member(ids)
        spans = self._spans_of(ids, per_element)
        _, labels, starts, offsets = spans
        if len(chunks) > 1 and self._chunk_jobs(chunks, spans) is None:
            values = (None if chunks[0][2] is None
                      else np.concatenate([c[2] for c in chunks]))
            valid = (None if all(c[3] is None for c in chunks) else np.concatenate(
                [np.ones(c[1] - c[0], bool) if c[3] is None else c[3] for c in chunks]))
            chunks = [(0, chunks[-1][1], values, valid)]
        if len(chunks) == 1:
            seg = Segments(member, labels, starts, offsets, chunks[0][3], per_element)
            got = call(chunks[0][2], seg, None, counts, 0)
            return got if isinstance(got, tuple) else (got, False)
        elements = int(offsets[-1])
        size = elements if per_element else len(ma)
        out = B.empty(size, dtype)
        compiled = elements >= segmented_kernels.JIT_MIN_ELEMENTS   # tests lower it
        jobs = _balanced_jobs(self._chunk_jobs(chunks, spans), offsets)

        def run(j0: int, j1: int) -> bool:
            """Jobs ``j0 .. j1-1`` on this thread; whether a call flagged."""
            flag = False
            for kind, a, b, ci in jobs[j0:j1]:
                lo, hi, values, valid = chunks[ci]
                if kind == "cross":            # the match's rows, copied out of each chunk
                    lo = int(starts[a])
                    values, valid = _rows_across(chunks, lo,
                                                 lo + int(offsets[b] - offsets[a]))
                seg = Segments(member, labels, starts[a:b] - lo, offsets[a:b + 1],
                               valid, per_element, compiled, threads=False)
                target = out if per_element else out[a:b]
                got = call(values, seg, target,
                           None if counts is None else counts if per_element else counts[a:b],
                           lo)
                flag |= bool(got[1]) if isinstance(got, tuple) else False
            return flag
        # every chunk's jobs in one hand-off to the cores, in pieces of about
        # equal elements (a hand-off per chunk left cores waiting at each)
        work = np.zeros(len(jobs) + 1, dtype=np.int64)
        np.cumsum([int(offsets[b] - offsets[a]) for _, a, b, _ in jobs], out=work[1:])
        pieces = split(work) if compiled and jobs else [(0, len(jobs))]
        return out, any(run_pieces(run, pieces))

    def _segments(self, ids, valid, per_element: bool) -> Segments:
        _, labels, starts, offsets = self._spans_of(ids, per_element)
        return Segments(self._member(ids), labels, starts, offsets, valid, per_element)

    def _spans_of(self, ids, per_element: bool = False) -> tuple:
        """``(key, labels, starts, offsets)``: the rows an aggregate over
        ``ids`` walks, as segments of elements. Every match's rows, with
        their labels (none when every row counts: ``ids`` None, so that the
        engine need not write them); or, for a variable whose rows are one
        range of each match whose ends the engine's walk found
        (:meth:`_var_range`), those ranges alone, every row counting."""
        ma = self.ma
        if ids is None:
            return "match", EVERY_ROW, ma.start, ma.label_offsets
        ranged = None if per_element else self._var_range(ids)
        if ranged is not None:
            return ("range", ids), EVERY_ROW, ranged[0], ranged[1]
        return "match", ma.labels, ma.start, ma.label_offsets

    def _over_one_row(self, e: A.Aggregate, ref: A.ColumnRef, ids) -> Optional[pa.Array]:
        """SUM/AVG/MIN/MAX over a variable that takes at most one row of
        each match (``STRT`` of ``STRT B+ C+``), in ONE ROW, where that row
        is known without labels (:meth:`_var_range`'s condition): the value
        at the row, NULL for none; None where that does not apply. Why: the
        segmented kernels and their ranges cost 13 ns a match for what is
        one gather (``w_shape``'s ``SUM(STRT.volume)``: 5.5 ms of 423,000
        matches)."""
        rows = self._var_range(ids, need_range=False)
        if rows is None:
            return None
        if e.name in ("MIN", "MAX") or (e.name == "SUM" and ref.type.kind == "BIGINT"):
            return self._gather(ref, rows)      # the value itself, of the column's type
        col = self._fixed(ref.resolved)
        if col is None or col.type not in (pa.int64(), pa.float64()):
            return None
        # the match's first row, whose values the walk may have read (as resolve)
        walked = (self.walked.get(("edge", ref.resolved, False)) if rows is self.ma.start
                  else None)
        values, valid = (walked, None) if walked is not None else _gather_sets(
            col, [rows], self._spans(), self._cache.setdefault(("rows with none",), {}))[0]
        values = values.view(np.float64 if col.type == pa.float64() else np.int64)
        # Python's sum of one float is 0 + x (-0.0 gives 0.0); AVG divides it by 1
        total = values + 0.0 if col.type == pa.float64() else values.astype(np.float64)
        return self._doubles(total, None if valid is None else valid.view(np.bool_))

    def _var_range(self, ids, need_range: bool = True) -> Optional[tuple]:
        """``(first row, offsets)`` of each match's range of one variable's
        rows (an empty range at the match's start), where the pattern is a
        sequence of runs (:func:`run_sequence`) and the range's ends are
        known without labels: at the match's edge, or found by the walk;
        else None. Without ``need_range``: for a variable that takes at most
        one row, that row per match (-1 none), else None."""
        key = ("var range", ids, need_range)
        if key in self._cache:
            return self._cache[key]
        got = None
        runs = run_sequence(self.q) if self.one_row and ids and len(ids) == 1 else {}
        if runs and ids[0] in runs:
            def known(kind: str) -> bool:
                return (self.walked.get(("landing", ids, kind)) is not None
                        or self._at_edge(ids, kind, 0))
            at_most_one = runs[ids[0]]
            if not need_range:
                if at_most_one and known("FIRST"):
                    got = self._final_rows(ids, "FIRST", 0)
            elif known("FIRST") and (at_most_one or known("LAST")):
                first = self._final_rows(ids, "FIRST", 0)
                last = first if at_most_one else self._final_rows(ids, "LAST", 0)
                has = first >= 0
                lengths = np.where(has, last - first + 1, 0)
                offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
                np.cumsum(lengths, out=offsets[1:])
                got = (np.where(has, first, self.ma.start), offsets)
        self._cache[key] = got
        return got

    def _pick(self, per: np.ndarray, final: bool, fill) -> np.ndarray:
        """Per-match (final) or per-element (running) results at each output row."""
        if final:
            return self._where_has(self._at(per), fill)
        if self.has is None and self._rows.running_is_element:
            return per                  # output row o is element o, and it has a row
        ok = self.running >= self.first
        if self.has is not None:
            ok &= self.has
        return np.append(per, fill)[np.where(ok, self.running, -1)]

    def _aggregate(self, e: A.Aggregate) -> pa.Array:
        final = self._final(e.semantics)
        ids = self._ids(e.var)
        if e.star:
            if ids is None:
                if self.one_row:
                    return self._ints(self._lengths(), None)
                if not final and self.has is None and self._rows.running_is_element:
                    ones = np.ones(len(self.ma), np.int64)
                    return self._ints(_spread(self.ma.label_offsets, ones, 1), None)
                upto = self.stop - 1 if final else self.running
                return self._ints(self._where_has(upto + 1 - self.first, 0), self.has)
            count = segmented_count(self._segments(ids, None, not final))
            return self._ints(self._pick(count, final, 0), self.has)
        if (e.distinct or e.over_order or len(e.args) != 1
                or e.name not in ("COUNT", "SUM", "AVG", "MIN", "MAX")):
            raise _Fallback
        ref = e.args[0]
        if not isinstance(ref, A.ColumnRef):        # SUM(A.price * A.volume)
            ref = self._argument_column(ref, e.var)
        if e.name == "COUNT":
            count, _ = self._segmented(lambda v, seg, out, _, __: segmented_count(seg, out),
                                       self._valid_chunks(ref.resolved), ids, not final,
                                       np.int64)
            return self._ints(self._pick(count, final, 0), self.has)
        decimal = ref.type.kind == "DECIMAL"
        if e.name in ("SUM", "AVG") and ref.type.kind not in ("BIGINT", "DOUBLE") and not (
                decimal and e.name == "SUM"):
            raise _Fallback
        if e.name in ("MIN", "MAX") and final and self.one_row:
            got = self.walked.get(("extreme", ref.resolved, e.name == "MAX", ids))
            if got is not None:         # from the engine's walk: row and value per match
                rows, words, gap = got
                valid = (rows >= 0).view(np.uint8) if gap else None
                arr = _fixed_array(self._fixed(ref.resolved), words, valid)
                target = ref.type.arrow()
                return arr if arr.type == target else arr.cast(target)
        if e.name in ("MIN", "MAX") and final and self.one_row and ref is e.args[0]:
            # the FIRST/LAST it equals where the DEFINE decides its row
            # (monotone.py): one row per match, not a pass over the rows
            # (in ALL ROWS the running LAST costs more than the running MIN:
            # all_rows, 1e7 rows, 88 -> 154 ms)
            nav = monotone.as_navigation(self.q, e)
            if nav is not None:
                return self._eval(nav)
        if final and self.one_row and not decimal:
            got = self._over_one_row(e, ref, ids)      # after the walk's values: no gather twice
            if got is not None:
                return got
        chunks = self._numbers(ref, e.name in ("MIN", "MAX"))
        if e.name in ("MIN", "MAX"):
            want_max = e.name == "MAX"
            rows, nan = self._segmented(
                lambda v, seg, out, _, base: segmented_arg_extreme(v, seg, want_max, out, True,
                                                                  base),
                chunks, ids, not final, np.int64)
            if nan:
                raise _Fallback      # Python's min/max with NaN depends on the order
            return self._gather(ref, self._pick(rows, final, -1))
        floats = chunks[0][2].dtype.kind == "f"
        # the counts come from the same walk as the sums
        count = B.empty(int(self.ma.label_offsets[-1]) if not final else len(self.ma), np.int64)
        sums, overflow = self._segmented(
            lambda v, seg, out, counts, _: segmented_sum(v, seg, out, counts), chunks, ids,
            not final, np.float64 if floats else np.int64, counts=count)
        if overflow:
            # the interpreter raises (SUM) or is exact (AVG); NaN: its rules
            raise _Fallback
        count = self._pick(count, final, 0)
        some = count > 0 if self.has is None else self.has & (count > 0)
        total = self._pick(sums, final, 0)
        if e.name == "SUM":
            if floats:
                return self._doubles(total, some)
            if decimal:             # exact unscaled sums at the column's scale
                arr = measure_exprs.decimal_array(total, some, ref.type.scale, e.type.arrow())
                if arr is None:
                    raise _Fallback
                return arr
            return self._ints(total, some)
        return self._doubles(total.astype(np.float64) / np.where(some, count, 1), some)
