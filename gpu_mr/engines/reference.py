"""The reference engine: SQL:2016 row pattern matching, straight from the rules.

What: for each partition, starting at its first row, find the preferred
match at the current row, record it, and move on per AFTER MATCH SKIP (after
an empty match or no match: the next row). "The preferred match" is the
first complete path in preferment order (greedy: more iterations first,
reluctant: fewer, alternation: left first, PERMUTE: lexicographic), with
every DEFINE evaluated on the path so far (interpreter.py).

How: the candidate paths are enumerated in preferment order by a Pike VM
over the priority-ordered NFA (pattern/nfa.py): threads advance row by row,
kept in priority order; when a thread accepts, lower-priority threads are
dropped and higher ones go on (they would be preferred if they accept later).
This is backtracking in preferment order without re-exploring equivalent
paths: two threads in the same NFA state at the same row are merged (the
higher-priority one kept) when nothing they carry can make their futures
differ: always when every DEFINE is row-local (then DEFINE results are
also cached per row), else only when their paths assigned the same
variables to the same rows. After a search that found nothing, its threads
are remembered as dead so later searches skip them (row-local DEFINEs only),
which keeps patterns like ``(A|A)*B`` linear per search.
Bounds: a search that needs more than SEARCH_STEP_LIMIT thread steps, or
more than THREAD_LIMIT live threads (only possible with state-dependent
DEFINEs on ambiguous patterns), stops with a SearchLimitError rather than
running for hours; docs/semantics.md says so.
Cost: O(rows x NFA states) per search for row-local queries.
"""

from __future__ import annotations

from typing import Optional

from ..analysis import CheckedQuery
from ..errors import SearchLimitError
from ..frames import SortedInput
from ..interpreter import Interpreter, MatchView, _add_months, _as_ns, compare
from ..pattern.nfa import (ASSERT_END, ASSERT_NOT, ASSERT_START, CONSUME, EPS, MATCH, SPLIT,
                           Program, compile_nfa)
from ..syntax import ast as A
from ..syntax import types as T
from . import modes
from .base import Match, skip_error

# Enough for every test and for tens of thousands of rows of state-dependent
# matching; a search beyond it is almost surely an exponential pattern.
SEARCH_STEP_LIMIT = 50_000_000
THREAD_LIMIT = 200_000


_NEVER = object()
_FOREVER = object()


def time_limit_deadline(start_time, interval: A.Literal):
    """``start_time + interval`` on the clock column (DATE or TIMESTAMP), or
    _NEVER when the start time is NULL (no row can join such a match)."""
    if start_time is None:
        return _NEVER
    ns = _as_ns(start_time)
    if interval.literal_type == "interval_ym":
        try:
            return _add_months(ns, interval.value)
        except (ValueError, OverflowError):
            # past the year 9999 (Python's dates end there): later than every
            # clock value, so every row is in time (horizons.py saturates alike)
            return _FOREVER
    return ns + interval.value


class ReferenceEngine:
    name = "reference"

    def supports(self, query: CheckedQuery) -> Optional[str]:
        return None

    def find_matches(self, query: CheckedQuery, data: SortedInput) -> list:
        program = compile_nfa(query.pattern, query.primary_vars)
        needed = query.matching_columns()
        columns = {name: T.arrow_values(data.table.column(name), t)
                   for name, t in query.column_types.items() if name in needed}
        interp = Interpreter(query, columns)
        matches: list[Match] = []
        offsets = data.partition_offsets
        for part in range(len(offsets) - 1):
            lo, hi = int(offsets[part]), int(offsets[part + 1])
            matches.extend(_PartitionMatcher(query, program, interp, part, lo, hi).run())
        return matches


def find_matches_from(query: CheckedQuery, data: SortedInput, scan_from: int,
                      number_base: int, continues: bool, rows_before: int = 0) -> list:
    """The matches of ``data``'s first partition from row ``scan_from`` on,
    numbered after ``number_base`` earlier ones; ``continues``: the partition
    began before the rows at hand (``^`` holds nowhere, PREV reaches back only
    as far as they go), ``rows_before`` of its rows came before them (for
    row numbers in messages). For a stream that resumes a partition mid-way."""
    program = compile_nfa(query.pattern, query.primary_vars)
    needed = query.matching_columns()
    columns = {name: T.arrow_values(data.table.column(name), t)
               for name, t in query.column_types.items() if name in needed}
    lo, hi = int(data.partition_offsets[0]), int(data.partition_offsets[1])
    matcher = _PartitionMatcher(query, program, Interpreter(query, columns), 0, lo, hi)
    if continues:
        matcher.part_start = -1
    matcher.row_origin = lo - rows_before
    return matcher.run_from(scan_from, number_base)


class _PartitionMatcher:
    def __init__(self, query: CheckedQuery, program: Program, interp: Interpreter,
                 part: int, lo: int, hi: int):
        self.q = query
        self.prog = program.insts
        self.start_state = program.start
        self.interp = interp
        self.part = part
        self.lo, self.hi = lo, hi
        self.part_start = lo     # where ^ holds: -1 when the partition began before lo
        self.row_origin = lo     # row numbers in messages count from here (a stream's
                                 # resumed partition began before lo)
        self.var_ids = {name: i for i, name in enumerate(query.primary_vars)}
        self.define_of = [query.defines.get(name) for name in query.primary_vars]
        self.row_local = not query.history_dependent
        self.uses_match_number = any(isinstance(n, A.MatchNumber)
                                     for e in query.defines.values() for n in e.walk())
        self.step_limit = SEARCH_STEP_LIMIT
        self.cache: dict = {}
        self.dead: set = set()
        # WITHIN / INTERVAL: a row joins a match only before its first row's
        # time plus the limit; this depends on the start row, so dead-thread
        # memo across searches is off.
        self.clock = interp.columns[query.time_column] if query.time_limit else None
        self.memo_dead = self.row_local and not self.uses_match_number and self.clock is None
        self.steps = 0

    # --------------------------------------------------------------- driver
    def run(self) -> list:
        mode = self.q.mode
        if mode == "ALL" or self.q.skip.kind == "CURRENT_ROW":
            return modes.run_all_matches(self)
        if mode == "MAXIMAL":
            return modes.run_maximal(self)
        if mode == "INCREMENTAL":
            return modes.run_incremental(self)
        return self.run_from(self.lo, 0)

    def run_from(self, pos: int, number: int) -> list:
        """Matches from row ``pos`` on, numbered after ``number`` earlier ones."""
        matches = []
        while pos < self.hi:
            found = self.search(pos, number + 1)
            if found is None:
                pos += 1
                continue
            end_exclusive, labels, excluded = found
            m = Match(self.part, number + 1, pos, end_exclusive - 1, labels, excluded)
            if not self.passes_filter(m):
                pos += 1            # rejected as a whole: no match starts here
                continue
            number += 1
            matches.append(m)
            pos = pos + 1 if m.is_empty else self.resume_row(m)
        return matches

    def passes_filter(self, m: Match) -> bool:
        """The match-level condition (ESL-TS's final aggregates), as of the
        match's last row."""
        if self.q.match_filter is None:
            return True
        view = MatchView(self.lo, self.hi, m.start, list(m.labels),
                         None if m.is_empty else m.end, m.end, m.end, m.number)
        return self.interp.eval(self.q.match_filter, view) is True

    def resume_row(self, m: Match) -> int:
        skip = self.q.skip
        if skip.kind == "PAST_LAST_ROW":
            return m.end + 1
        if skip.kind == "NEXT_ROW":
            return m.start + 1
        ids = self.interp.var_sets[skip.var]
        rows = [m.start + i for i, v in enumerate(m.labels) if v in ids]
        if not rows:
            raise skip_error(skip, True, m.number, m.start, m.end, self.row_origin, self.part)
        target = rows[0] if skip.kind == "FIRST" else rows[-1]
        if target == m.start:
            raise skip_error(skip, False, m.number, m.start, m.end, self.row_origin, self.part)
        return target

    # --------------------------------------------------------------- search
    def search(self, start: int, match_number: int):
        """The preferred match starting at ``start``: (end exclusive, labels,
        excluded), or None."""
        # Paths are hash-consed: equal ids mean equal (row -> variable,
        # excluded) assignments. Label ids ignore exclusion; they decide merging.
        path_parent, path_var, path_excl = [-1], [-1], [False]
        path_index: dict = {}
        label_of_path = [0]
        label_index: dict = {}
        self.match_number = match_number
        visited: list = []

        def extend(path: int, var: int, excluded: bool) -> int:
            key = (path, var, excluded)
            pid = path_index.get(key)
            if pid is None:
                pid = len(path_parent)
                path_index[key] = pid
                path_parent.append(path)
                path_var.append(var)
                path_excl.append(excluded)
                lkey = (label_of_path[path], var)
                lid = label_index.get(lkey)
                if lid is None:
                    lid = len(label_index) + 1
                    label_index[lkey] = lid
                label_of_path.append(lid)
            return pid

        def labels_of(path: int) -> list:
            out = []
            while path > 0:
                out.append(path_var[path])
                path = path_parent[path]
            out.reverse()
            return out

        deadline = self.deadline(start)
        self.search_start, self.labels_of = start, labels_of
        best = None
        threads: list = []
        seen: set = set()
        self.closure(self.start_state, 0, start, threads, seen, label_of_path)
        q = start
        while threads:
            visited.extend((s, q) for s, _ in threads)
            nxt: list = []
            seen = set()
            for state, path in threads:
                inst = self.prog[state]
                if inst.op == MATCH:
                    best = (q, path)
                    break
                if q >= self.hi:
                    continue
                self.steps += 1
                if self.steps > SEARCH_STEP_LIMIT:
                    raise SearchLimitError(
                        f"the reference engine gave up after {SEARCH_STEP_LIMIT} search steps "
                        f"(partition {self.part}, match starting at row "
                        f"{start - self.row_origin + 1}); the pattern is ambiguous and the DEFINE "
                        f"conditions depend on the match so far", partition=self.part, row=start)
                if deadline is not None and not self.in_time(q, deadline):
                    continue
                if self.holds(inst.var, q, start, path, labels_of):
                    self.closure(inst.out, extend(path, inst.var, inst.excluded), q + 1, nxt,
                                 seen, label_of_path)
            if len(nxt) > THREAD_LIMIT:
                raise SearchLimitError(
                    f"the reference engine gave up: more than {THREAD_LIMIT} distinct partial "
                    f"matches alive at once (partition {self.part}, match starting at row "
                    f"{start - self.row_origin + 1})", partition=self.part, row=start)
            threads = nxt
            q += 1
        if best is None:
            if self.memo_dead:
                self.dead.update(visited)
            return None
        end, path = best
        labels, excluded = [], []
        while path > 0:
            labels.append(path_var[path])
            excluded.append(path_excl[path])
            path = path_parent[path]
        labels.reverse()
        excluded.reverse()
        return end, tuple(labels), tuple(excluded)

    def closure(self, state: int, path: int, q: int, out: list, seen: set,
                label_of_path: list) -> None:
        """Add the CONSUME/MATCH states reachable from ``state`` by epsilon
        edges at position ``q`` to ``out``, in priority order, each once."""
        merge_key = None if self.row_local else label_of_path[path]
        for s in self.epsilon_closure(state, q, seen, merge_key, lambda: self.labels_of(path)):
            if not (self.memo_dead and self.prog[s].op == CONSUME and (s, q) in self.dead):
                out.append((s, path))

    def closure_plain(self, state: int, labels: tuple, excluded: tuple, q: int, out: list,
                      seen: set) -> None:
        """Like :meth:`closure`, for threads that carry their labels as tuples
        (the matching modes)."""
        merge_key = None if self.row_local else labels
        for s in self.epsilon_closure(state, q, seen, merge_key, lambda: list(labels)):
            out.append((s, labels, excluded))

    def epsilon_closure(self, state: int, q: int, seen: set, merge_key, labels):
        """The CONSUME and MATCH states reachable from ``state`` at position
        ``q``, in priority order (a depth-first walk taking the preferred edge
        first). Each state is entered once per step and ``merge_key`` (the
        path's mapping when DEFINEs depend on it): the empty-iteration rule and
        the merging of equivalent threads. ``labels()`` gives the path's
        mapping for the guard of a possessive quantifier."""
        stack = [state]
        while stack:
            s = stack.pop()
            key = (s, merge_key)
            if key in seen:
                continue
            seen.add(key)
            inst = self.prog[s]
            op = inst.op
            if op == SPLIT:
                stack.append(inst.out2)
                stack.append(inst.out)
            elif op == EPS:
                stack.append(inst.out)
            elif op == ASSERT_START:
                if q == self.part_start:
                    stack.append(inst.out)
            elif op == ASSERT_END:
                if q == self.hi:
                    stack.append(inst.out)
            elif op == ASSERT_NOT:
                if self.consume_fails(inst.var, q, labels()):
                    stack.append(inst.out)
            else:
                yield s

    def deadline(self, start: int):
        """The clock value a match starting at ``start`` must stay below, or
        None without a time limit (an unknown start time admits no row)."""
        if self.clock is None:
            return None
        return time_limit_deadline(self.clock[start], self.q.time_limit.interval)

    def in_time(self, row: int, deadline) -> bool:
        t = self.clock[row]
        if deadline is _FOREVER:
            return t is not None
        return deadline is not _NEVER and t is not None and compare("<", t, deadline) is True

    def consume_fails(self, var: int, q: int, labels: list) -> bool:
        """Whether ``var`` cannot take row ``q`` on this path (the guard of a
        possessive quantifier's exit): past the partition, out of time, or
        its DEFINE does not hold."""
        if q >= self.hi:
            return True
        deadline = self.deadline(self.search_start)
        if deadline is not None and not self.in_time(q, deadline):
            return True
        return not self.holds_on(var, q, self.search_start, labels)

    def holds_on(self, var: int, row: int, start: int, labels: list) -> bool:
        """DEFINE of ``var`` at ``row`` for a path given as its labels so far."""
        return self.holds(var, row, start, None, lambda _: list(labels))

    def holds(self, var: int, row: int, start: int, path: int, labels_of) -> bool:
        """Whether DEFINE of ``var`` is true at ``row`` on this path."""
        expr = self.define_of[var]
        if expr is None:
            return True
        if self.row_local:
            key = (var, row, self.match_number if self.uses_match_number else 0)
            hit = self.cache.get(key)
            if hit is None:
                view = MatchView(self.lo, self.hi, row, [var], row, row, row, self.match_number)
                hit = self.interp.eval(expr, view) is True
                self.cache[key] = hit
            return hit
        labels = labels_of(path)
        labels.append(var)
        view = MatchView(self.lo, self.hi, start, labels, row, row, row, self.match_number)
        return self.interp.eval(expr, view) is True
