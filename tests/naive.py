"""A deliberately naive matcher: the oracle for the reference engine's search.

Plain recursive backtracking over the NFA program, trying edges in priority
order: the preferred match is the first accepting path, ALL MATCHES is every
accepting path. No thread merging, no caching, no dead-state memo:
exponential, for tiny inputs only. Within one step (between two consumed
rows) a path may not re-enter an epsilon state it already passed, which is
the empty-iteration rule the engines follow. The match drivers (AFTER MATCH
SKIP, empty matches, time limits, the proposal's modes) are written again
here from the texts rather than shared with the engine.
"""

from __future__ import annotations

from gpu_mr.interpreter import Interpreter, MatchView
from gpu_mr.pattern.nfa import (ASSERT_END, ASSERT_NOT, ASSERT_START, CONSUME, EPS, MATCH, SPLIT,
                                compile_nfa)
from gpu_mr.syntax import types as T


class SkipError(Exception):
    pass


def naive_matches(query, data):
    """[(partition, number, start, end, labels)] for every match."""
    prog = compile_nfa(query.pattern, query.primary_vars)
    columns = {n: T.arrow_values(data.table.column(n), t) for n, t in query.column_types.items()}
    interp = Interpreter(query, columns)
    out = []
    offsets = data.partition_offsets
    for part in range(len(offsets) - 1):
        lo, hi = int(offsets[part]), int(offsets[part + 1])
        paths = _Paths(query, prog, interp, columns, lo, hi)
        mode = "ALL" if query.skip.kind == "CURRENT_ROW" else query.mode
        driver = {None: _standard, "ALL": _all, "MAXIMAL": _maximal,
                  "INCREMENTAL": _incremental}[mode]
        out += [(part,) + m for m in driver(query, paths, interp, lo, hi)]
    return out


def _next_start(query, interp, start, end, labels):
    """Where matching resumes after the non-empty match start..end."""
    skip = query.skip
    if skip.kind == "PAST_LAST_ROW":
        return end + 1
    if skip.kind in ("NEXT_ROW", "CURRENT_ROW"):
        return start + 1
    wanted = interp.var_sets[skip.var]
    hits = [start + i for i, v in enumerate(labels) if v in wanted]
    if not hits:
        raise SkipError("missing variable")
    target = hits[0] if skip.kind == "FIRST" else hits[-1]
    if target == start:
        raise SkipError("first row")
    return target


def _standard(query, paths, interp, lo, hi):
    out, row, number = [], lo, 0
    while row < hi:
        found = next(paths.accepting(row, number + 1), None)
        if found is None:
            row += 1
            continue
        end, labels = found
        number += 1
        out.append((number, row, end - 1, tuple(labels)))
        row = row + 1 if end == row else _next_start(query, interp, row, end - 1, labels)
    return out


def _distinct(found):
    seen, out = set(), []
    for end, labels in found:
        if (end, tuple(labels)) not in seen:
            seen.add((end, tuple(labels)))
            out.append((end, labels))
    return out


def _all(query, paths, interp, lo, hi):
    out, row, number = [], lo, 0
    while row < hi:
        found = [f for f in _distinct(paths.accepting(row, number + 1)) if f[0] > row]
        if not found:
            row += 1
            continue
        for end, labels in found:
            number += 1
            out.append((number, row, end - 1, tuple(labels)))
        first_end, first_labels = found[0]
        row = _next_start(query, interp, row, first_end - 1, first_labels)
    return out


def _maximal(query, paths, interp, lo, hi):
    out, taken, row, number = [], [], lo, 0
    while row < hi:
        pool = []
        for end, labels in _distinct(paths.accepting(row, number + 1)):
            if end == row:
                continue                  # MAXIMAL is a subset of ALL: no empty matches
            last = end - 1
            inside = any(a <= row <= b for a, b in taken) if last < row else \
                any(a <= row and last <= b for a, b in taken)
            if not inside:
                pool.append((end, labels))
        if not pool:
            row += 1
            continue
        longest = max(e for e, _ in pool)
        end, labels = next(p for p in pool if p[0] == longest)
        number += 1
        out.append((number, row, end - 1, tuple(labels)))
        if end == row:
            row += 1
        else:
            taken.append((row, end - 1))
            row = _next_start(query, interp, row, end - 1, labels)
    return out


def _incremental(query, paths, interp, lo, hi):
    out, start, last, number, issued = [], lo, lo, 0, None
    while start < hi:
        last = max(last, start)
        exact = next((f for f in paths.accepting(start, number + 1) if f[0] == last + 1), None)
        alive = last + 1 < hi and paths.alive_after(start, last, number + 1)
        if exact is not None:
            number += 1
            issued = (start, last, exact[1])
            out.append((number, start, last, tuple(exact[1])))
        if exact is not None or alive:
            if last == hi - 1:
                break
            last += 1
            continue
        start = start + 1 if issued is None else _next_start(query, interp, *issued)
        issued = None
    return out


class _Paths:
    """Every path of the program from a start row, depth-first in edge order."""

    def __init__(self, query, prog, interp, columns, lo, hi):
        self.query, self.insts, self.start_state = query, prog.insts, prog.start
        self.interp, self.lo, self.hi = interp, lo, hi
        self.defines = [query.defines.get(v) for v in query.primary_vars]
        self.clock = columns.get(query.time_column) if query.time_limit is not None else None

    def _walk(self, start, match_number):
        """Yield ('match', end, labels) and ('consume', q, labels) events."""
        lo, hi, insts = self.lo, self.hi, self.insts
        limit = None
        if self.clock is not None and self.clock[start] is not None:
            # a row may join only while its time is below start time + limit
            limit = self.clock[start] + self.query.time_limit.interval.value

        def in_time(q):
            if self.clock is None:
                return True
            return limit is not None and self.clock[q] is not None and self.clock[q] < limit

        def holds(var, q, labels):
            expr = self.defines[var]
            if expr is None:
                return True
            view = MatchView(lo, hi, start, labels + [var], q, q, q, match_number)
            return self.interp.eval(expr, view) is True

        def walk(state, q, labels, visited):
            inst = insts[state]
            if inst.op == MATCH:
                yield "match", q, labels
                return
            if inst.op == CONSUME:
                yield "consume", q, labels
                if q < hi and in_time(q) and holds(inst.var, q, labels):
                    yield from walk(inst.out, q + 1, labels + [inst.var], frozenset())
                return
            if state in visited:
                return
            visited = visited | {state}
            if inst.op == SPLIT:
                yield from walk(inst.out, q, labels, visited)
                yield from walk(inst.out2, q, labels, visited)
            elif inst.op == EPS:
                yield from walk(inst.out, q, labels, visited)
            elif inst.op == ASSERT_START:
                if q == lo:
                    yield from walk(inst.out, q, labels, visited)
            elif inst.op == ASSERT_END:
                if q == hi:
                    yield from walk(inst.out, q, labels, visited)
            elif inst.op == ASSERT_NOT:
                # a possessive loop may stop only where its variable cannot go on
                if not (q < hi and in_time(q) and holds(inst.var, q, labels)):
                    yield from walk(inst.out, q, labels, visited)

        return walk(self.start_state, start, [], frozenset())

    def accepting(self, start, match_number):
        for kind, q, labels in self._walk(start, match_number):
            if kind == "match":
                yield q, labels

    def alive_after(self, start, last, match_number):
        """Whether some path has consumed rows start..last and waits to consume more."""
        return any(kind == "consume" and q == last + 1
                   for kind, q, _ in self._walk(start, match_number))
