"""The fast CPU engine: vectorised DEFINE masks, a DFA scan and path recovery.

What: for a query whose DEFINEs are all row-local, one compiled pass
evaluates every DEFINE at each row and writes its class, the bitmask of the
variables that may take it (predicates/fused.py), or, for the column types
and data that pass declines, each DEFINE becomes vectorised numpy passes
(predicates/masks.py) whose masks are bit-packed; classes are read as they
are up to 8 variables, else renumbered densely; the leftmost-first DFA
(pattern/dfa.py) is explored over the classes the data holds and scanned by
the numba kernels of kernels/scan.py, partitions in parallel; the preferred
path of each match (which variable each row took) comes from the DFA's
thread lineage, one independent job per match. For AFTER MATCH SKIP PAST
LAST ROW the unanchored automaton (kernels/unanchored.py) finds the same
matches in one step per row and recovers each in one backward walk. The
result is a ``MatchArrays``, identical to the reference engine's matches.
Queries whose DEFINEs depend on the match so far go to the register machine
(engines/registers.py) when it can hold their state.

Exactness before speed, always: where the data would make a vectorised
answer differ from the reference semantics -- a DEFINE that raises at some
row (the reference raises only if its search reaches that row, so whether
and which error depends on the search), a value the masks cannot represent
exactly, or a DFA past its state cap -- this engine hands the query to the
reference engine's matcher and says so in ``last_run``.

Cost: about one pass over the DEFINE columns (fused; masks.py: a numpy pass
per operator, one to pack the classes), one scan of the rows (one DFA step
per row for SKIP PAST LAST ROW; else about two on tick data: a failed
search is retried from the next row, and a successful one looks past its
end), and O(match length) per match for recovery.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..analysis import CheckedQuery
from ..frames import SortedInput
from ..pattern.dfa import Dfa, DfaTooLarge, UnanchoredDfa
from ..pattern.nfa import compile_nfa
from ..predicates import masks as M
from .base import DeferredMatchArrays, MatchArrays, skip_error
from .reference import ReferenceEngine

_SKIP_MODES = {"PAST_LAST_ROW": 0, "NEXT_ROW": 1, "FIRST": 2, "LAST": 3}

# Up to this many variables the kernels read the packed uint8 bitmask itself
# (tables get 2**n columns); beyond it, classes are renumbered densely.
_DIRECT_MAX_VARS = 8
# Up to this many, the renumbering is a lookup table of 2**n entries (a
# bincount); beyond it, np.unique (a sort).
_LOOKUP_MAX_VARS = 16


def numba_missing() -> Optional[str]:
    try:
        import numba  # noqa: F401
    except ImportError:
        return "numba is not installed (pip install 'gpu_mr[cpu]')"
    return None


def unsupported_reason(query: CheckedQuery) -> Optional[str]:
    """Why the mask-and-DFA path cannot run ``query``, or None."""
    if query.mode is not None:
        return f"the matching mode {query.mode} (the 2007 proposal's) runs on the reference engine"
    if query.skip.kind == "CURRENT_ROW":
        return "AFTER MATCH SKIP TO CURRENT ROW (all matches) runs on the reference engine"
    if query.match_filter is not None:
        return "a condition on the whole match (ESL-TS) runs on the reference engine"
    if query.history_dependent:
        return "a DEFINE depends on the match so far"
    return M.supports_query(query)


def choose_path(query: CheckedQuery) -> tuple:
    """("dfa" | "registers" | None, None or the reason neither can run it):
    masks and the DFA when every DEFINE is a row mask, else the register
    machine when it can hold what the DEFINEs read."""
    reason = unsupported_reason(query)
    if reason is None:
        return "dfa", None
    if (query.mode is not None or query.skip.kind == "CURRENT_ROW"
            or query.match_filter is not None):
        return None, reason
    registers_reason = _registers_reason(query)
    if registers_reason is None:
        return "registers", None
    return None, f"{reason}; and the register machine cannot run it: {registers_reason}"


@dataclass
class RunInfo:
    """What the last ``find_matches`` did, for explain-style reporting
    (``scan``: which DFA scan ran, and why that one)."""
    path: str = ""
    reason: str = ""
    dfa_states: int = 0
    classes: int = 0
    scan: str = ""


# Class sets whose DFA tables a plan keeps (each a few kilobytes).
_TABLES_KEPT = 16


class CpuEngine:
    name = "cpu"
    # api.py may run it on input whose order key is checked beside it
    # (frames.sort_for_matching_deferred): out of order, its answer is dropped
    checks_order_later = True

    def __init__(self):
        self.last_run = RunInfo()
        # (query, MaskSet, Dfa, UnanchoredDfa, tables by classes present) of
        # the last query: batches and calls again reuse it
        self._plan = None
        self._path = None        # (query, choose_path(query)): supports and find_matches share it

    def path_of(self, query: CheckedQuery) -> tuple:
        """:func:`choose_path` of ``query``, decided once per query object."""
        known = self._path       # one read: another thread may replace it meanwhile
        if known is None or known[0] is not query:
            known = self._path = (query, choose_path(query))
        return known[1]

    def supports(self, query: CheckedQuery) -> Optional[str]:
        missing = numba_missing()
        if missing is not None:
            return missing
        return self.path_of(query)[1]

    def find_matches(self, query: CheckedQuery, data: SortedInput):
        if self.path_of(query)[0] == "registers":
            from . import registers
            self.last_run = RunInfo("registers")
            return registers.find_matches(query, data)
        return self.find_row_local(query, data)

    def find_row_local(self, query: CheckedQuery, data: SortedInput) -> MatchArrays:
        if data.table.num_rows == 0:
            self.last_run = RunInfo("dfa", "no rows")
            return MatchArrays.empty()
        prepared = self.prepare(query, data)
        if isinstance(prepared, str):
            return self._fallback(query, data, prepared)
        matches, _, scan = _scan_to_matches(query, data, *prepared)
        self.last_run.scan = scan
        return matches

    def prepare(self, query: CheckedQuery, data: SortedInput):
        """(dense classes, DFA tables, unanchored DFA tables or None) for the
        scan, or the reason the DFA path cannot answer exactly on this data
        (the caller falls back). The unanchored tables serve AFTER MATCH SKIP
        PAST LAST ROW (kernels/unanchored.py), built when a scan first uses
        them (:class:`_UnanchoredTables`); None for other modes."""
        n = data.table.num_rows
        plan = self._plan            # one read: another thread may replace it meanwhile
        if plan is None or plan[0] is not query:
            program = compile_nfa(query.pattern, query.primary_vars)
            plan = (query, M.compile_masks(query), Dfa(program),
                    UnanchoredDfa(program)
                    if query.skip.kind == "PAST_LAST_ROW" and query.time_limit is None else None,
                    {})
            self._plan = plan
        _, mask_set, dfa, unanchored_dfa, tables_of = plan
        n_vars = len(query.primary_vars)
        # One compiled pass (predicates/fused.py), else masks.py's vectorised
        # passes, which also report the exact error of a row that raises.
        from ..predicates import fused
        fast = fused.class_bits(query, data)
        if fast is not None:
            bits, present = fast
        else:
            results = mask_set.evaluate_detailed(data)
            failing = [v for v, r in results.items() if r is not None and r.failed.any()]
            if failing:
                return f"DEFINE {failing[0]} raises or cannot be represented exactly at some row"
            bits, present = class_bits(query, results, n), None
        timed = query.time_limit is not None
        if n_vars <= _DIRECT_MAX_VARS:
            if present is None:
                from ..kernels.scan import present_classes
                present = present_classes(bits, 1 << n_vars)
            if timed and 0 not in present:
                present = [0] + list(present)
            classes = bits
        else:
            present, classes = _renumber(bits, n_vars, timed)
        # The tables of the classes present, kept for the next call with the
        # same ones (most calls: the same query over more data), which then
        # builds none (v_shape: 0.4 ms of 24).
        key = tuple(int(c) for c in present)
        known = tables_of.get(key)
        if known is None:
            try:
                tables = dfa.dense_tables(present)
            except DfaTooLarge as exc:
                return str(exc)
            n_states = tables.n_states - 1
            if n_vars <= _DIRECT_MAX_VARS:
                tables = tables.over_bitmasks(present, n_vars)
            unanchored = None
            if unanchored_dfa is not None:
                unanchored = _UnanchoredTables(unanchored_dfa, present, n_vars)
            if len(tables_of) >= _TABLES_KEPT:
                tables_of.clear()
            known = tables_of[key] = (tables, unanchored, n_states)
        tables, unanchored, n_states = known
        self.last_run = RunInfo("dfa", "", n_states, len(present))
        return classes, tables, unanchored

    def scan_to_matches(self, query: CheckedQuery, data: SortedInput, dense, tables,
                        unanchored=None, **stream) -> tuple:
        """:func:`scan_to_matches` (streams call it through the engine, so
        the GPU engine can stand in)."""
        return scan_to_matches(query, data, dense, tables, unanchored, **stream)

    def _fallback(self, query: CheckedQuery, data: SortedInput, reason: str):
        self.last_run = RunInfo("reference", reason)
        return ReferenceEngine().find_matches(query, data)


class _UnanchoredTables:
    """The :class:`UnanchoredDfa`'s tables over the classes present, built
    on the first call and then kept: a query the anchored scan serves (a
    time limit, an automaton past its caps) does not pay for exploring the
    automaton. Calling it gives the tables, or None past the automaton's
    caps. Kept by the engine's plan for later calls, maybe on other threads:
    one builds them."""

    def __init__(self, dfa: UnanchoredDfa, present, n_vars: int):
        self._args = (dfa, present, n_vars)
        self._built = None
        self._lock = threading.Lock()

    def __call__(self):
        with self._lock:
            if self._args is not None:
                dfa, present, n_vars = self._args
                try:
                    built = dfa.dense_tables(present)
                    if n_vars <= _DIRECT_MAX_VARS:
                        built = built.over_bitmasks(present, n_vars)
                except DfaTooLarge:
                    built = None
                self._built, self._args = built, None
            return self._built


def _registers_reason(query: CheckedQuery) -> Optional[str]:
    from . import registers
    return registers.supports(query)


def class_bits(query: CheckedQuery, results: dict, n: int) -> np.ndarray:
    """Per row, the bitmask of variables that may take it (bit i: primary
    variable i; a variable without DEFINE always may): uint8 for up to 8
    variables, else uint32."""
    n_vars = len(query.primary_vars)
    dtype = np.uint8 if n_vars <= 8 else np.uint32
    always = sum(1 << i for i, v in enumerate(query.primary_vars) if results[v] is None)
    defined = [(i, results[v].holds) for i, v in enumerate(query.primary_vars)
               if results[v] is not None]
    from ..kernels.scan import packed_bits
    return packed_bits([np.ascontiguousarray(h).view(np.uint8) for _, h in defined],
                       [i for i, _ in defined], always, n, dtype)


def _renumber(bits: np.ndarray, n_vars: int, with_empty: bool = False) -> tuple:
    """(class bitmasks present, ascending; per-row dense class index).
    ``with_empty``: bitmask 0 (no variable holds: a time limit's horizon)
    is among them even where no row has it, so its index is 0."""
    if n_vars <= _LOOKUP_MAX_VARS:
        seen = np.bincount(bits, minlength=1 << n_vars) > 0
        seen[0] |= with_empty
        present = np.flatnonzero(seen)
        lookup = np.zeros(1 << n_vars, dtype=np.int32)
        lookup[present] = np.arange(present.size, dtype=np.int32)
        dense = lookup[bits]
    else:
        present, dense = np.unique(bits, return_inverse=True)
        if with_empty and (present.size == 0 or present[0] != 0):
            present = np.concatenate(([0], present)).astype(present.dtype)
            dense = dense + 1
    dtype = np.uint8 if present.size <= 256 else np.int32
    return present.tolist(), dense.astype(dtype, copy=False)


def skip_variables(query: CheckedQuery) -> int:
    """The bitmask of the primary variables AFTER MATCH SKIP TO FIRST/LAST
    names (a SUBSET names several); 0 for the other modes."""
    skip = query.skip
    mask = 0
    if skip.kind in ("FIRST", "LAST"):
        ids = {name: i for i, name in enumerate(query.primary_vars)}
        for name in query.subsets.get(skip.var, (skip.var,)):
            mask |= 1 << ids[name]
    return mask


def scan_to_matches(query: CheckedQuery, data: SortedInput, dense: np.ndarray, tables,
                    unanchored=None, scan_from: int = -1, continues: bool = False,
                    open_end: bool = False, end_margin: int = 0, number_base: int = 0,
                    rows_before: int = 0) -> tuple:
    """Scan the dense classes, raise a SKIP error where the reference would,
    recover every match's path, number the matches: ``(MatchArrays, row to
    resume at in the last partition)``. The stream arguments are those of
    ``kernels.scan.run_scan``; ``number_base`` is the count of matches an
    earlier batch already gave the first partition. ``unanchored``: the
    :class:`UnanchoredDfa`'s tables as ``prepare`` gives them (built on
    first use), scanned instead of ``tables`` where they can serve (see
    :func:`_scan_to_matches`)."""
    return _scan_to_matches(query, data, dense, tables, unanchored, scan_from, continues,
                            open_end, end_margin, number_base, rows_before)[:2]


def _scan_to_matches(query: CheckedQuery, data: SortedInput, dense: np.ndarray, tables,
                     unanchored=None, scan_from: int = -1, continues: bool = False,
                     open_end: bool = False, end_margin: int = 0, number_base: int = 0,
                     rows_before: int = 0) -> tuple:
    """:func:`scan_to_matches` and which scan ran. The unanchored scan
    (kernels/unanchored.py: one DFA step per row, recovery in one backward
    walk) runs for AFTER MATCH SKIP PAST LAST ROW over whole partitions
    (long ones in speculative chunks) when its automaton is within its cap;
    else the anchored scan and its path recovery (kernels/scan.py)."""
    from ..kernels.scan import ERR_SKIP_NO_ROW, run_recovery, run_scan
    offsets = data.partition_offsets.astype(np.int64, copy=False)
    skip = query.skip
    why = _anchored_reason(query, unanchored, scan_from, continues, open_end)
    horizon = None
    if query.time_limit is not None:
        from ..horizons import row_horizons
        horizon = row_horizons(query, data)
    walked = numbers = lasts = None
    if why is None:
        from ..kernels import unanchored as U
        from ..measures import walk_request
        request = walk_request(query, data)
        stream = ((scan_from, continues, open_end, end_margin)
                  if scan_from >= 0 or continues or open_end else ())
        if request is None:
            starts, ends, partitions, errors, *paths = U.run_unanchored(
                dense, offsets, unanchored(), stream=stream)
        else:
            # ONE ROW measures computed in the walk, the labels only if read
            walk = _walk_columns(request, len(query.primary_vars))
            starts, lasts, partitions, errors, label_offsets, paths, got = \
                U.run_unanchored_measured(dense, offsets, unanchored(), walk, stream=stream)
            walked = _walked(request, got)
            numbers = got["numbers"]             # from 1 per batch: number_base below
    else:
        starts, ends, partitions, errors = run_scan(
            dense, offsets, tables, _SKIP_MODES[skip.kind], skip_variables(query),
            scan_from=scan_from, continues=continues, open_end=open_end, end_margin=end_margin,
            horizon=horizon)
        paths = None
    if lasts is None:
        lasts = ends - 1
    if numbers is None:
        counts = np.bincount(partitions, minlength=len(offsets) - 1)
        first_of_partition = np.zeros(len(offsets), dtype=np.int64)
        np.cumsum(counts, out=first_of_partition[1:])
        numbers = np.arange(starts.shape[0], dtype=np.int64) - first_of_partition[partitions] + 1
    if number_base:
        numbers[partitions == 0] += number_base
    failing = np.flatnonzero(errors[:, 0])
    if failing.size:
        p = int(failing[0])
        i = int(errors[p, 1])
        origin = int(offsets[p]) - (rows_before if p == 0 else 0)
        raise skip_error(skip, int(errors[p, 0]) == ERR_SKIP_NO_ROW, int(numbers[i]),
                         int(starts[i]), int(lasts[i]), origin, p)
    if paths is None:
        paths = run_recovery(dense, offsets, starts, ends, partitions, tables,
                             continues=continues, horizon=horizon)
    resume = int(errors[-1, 2]) if len(errors) else 0
    if walked is not None:
        found = DeferredMatchArrays(partitions, numbers, starts, lasts, label_offsets, paths,
                                    walked)
    else:
        found = MatchArrays(partitions, numbers, starts, lasts, *paths)
    if why is not None:
        return found, resume, f"anchored: {why}"
    from ..kernels.unanchored import chunk_rows
    return found, resume, ("unanchored, long partitions in speculative chunks on all cores"
                           if chunk_rows(offsets) else "unanchored")


def _walk_columns(request: tuple, n_vars: int):
    """measures.walk_request's answer as the walk's arguments."""
    from ..kernels.unanchored import WalkColumns
    bounds, chunks, edges, extremes, landings = request
    ext = [(c, floats, want_max,
            [member is None or v in member for v in range(n_vars)], at)
           for c, floats, want_max, member, at in extremes.values()]
    lands = [([v in member for v in range(n_vars)], kind == "FIRST")
             for member, kind in landings]
    return WalkColumns(bounds, chunks, list(edges.values()), ext, n_vars, lands)


def _walked(request: tuple, got: dict) -> dict:
    """The walk's values keyed as measures.py looks them up: ``("edge",
    column, at the last row)`` -> words per match; ``("extreme", column,
    MAX, variable ids or None)`` -> (row, words, whether a match has no
    row for it) per match; none for a MIN/MAX that met a NaN (Python's
    answer then depends on the order); ``("landing", variable ids, "FIRST"
    or "LAST")`` -> row per match, -1 none; ``("lengths",)`` -> rows per
    match; ``("any empty",)`` -> whether a match has no row; ``("per
    partition",)`` -> the matches of each partition."""
    _, _, edges, extremes, landings = request
    out = {("edge",) + key: got["edges"][j] for j, key in enumerate(edges)}
    out[("lengths",)] = got["lengths"]
    out[("any empty",)] = got["any_empty"]
    out[("per partition",)] = got["per_partition"]
    out.update({("landing",) + key: got["landings"][j] for j, key in enumerate(landings)})
    for j, key in enumerate(extremes):
        if not got["ext_nan"][j]:
            out[("extreme",) + key] = (got["ext_rows"][j], got["ext_values"][j],
                                       bool(got["ext_gap"][j]))
    return out


def _anchored_reason(query: CheckedQuery, unanchored, scan_from: int, continues: bool,
                     open_end: bool) -> Optional[str]:
    """Why the anchored scan runs rather than the unanchored one, or None."""
    if query.skip.kind != "PAST_LAST_ROW":
        return f"AFTER MATCH SKIP TO {query.skip.kind.replace('_', ' ')}"
    if query.time_limit is not None:
        return (f"the time limit {query.time_limit.to_sql()}: each search stops at its own "
                "horizon, which the unanchored scan cannot follow")
    if numba_missing() is not None:
        return "numba is not installed"
    if unanchored is None or unanchored() is None:
        return "the unanchored DFA is past its cap (states, or threads per state)"
    return None
