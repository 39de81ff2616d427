"""A deliberately naive matcher: the oracle for the reference engine's search.

Plain recursive backtracking over the NFA program, trying edges in priority
order and returning the first path that reaches MATCH; no thread merging, no
caching, no dead-state memo: exponential, for tiny inputs only. Within one
step (between two consumed rows) a path may not re-enter an epsilon state it
already passed, which is the empty-iteration rule the engines follow. The
match driver (AFTER MATCH SKIP, empty matches) is written again here from the
standard's text rather than shared with the engine.
"""

from __future__ import annotations

from gpu_mr.interpreter import Interpreter, MatchView
from gpu_mr.pattern.nfa import ASSERT_END, ASSERT_START, CONSUME, EPS, MATCH, SPLIT, compile_nfa
from gpu_mr.syntax import types as T


class SkipError(Exception):
    pass


def naive_matches(query, data):
    """[(partition, number, start, end, labels)] for every match."""
    prog = compile_nfa(query.pattern, query.primary_vars)
    columns = {n: T.arrow_values(data.table.column(n), t) for n, t in query.column_types.items()}
    interp = Interpreter(query, columns)
    defines = [query.defines.get(v) for v in query.primary_vars]
    clock = columns.get(query.time_column) if query.time_limit is not None else None
    out = []
    offsets = data.partition_offsets
    for part in range(len(offsets) - 1):
        lo, hi = int(offsets[part]), int(offsets[part + 1])
        row, number = lo, 0
        while row < hi:
            limit = None
            if clock is not None:
                # a row may join only while its time is below start time + limit
                limit = (None if clock[row] is None
                         else clock[row] + query.time_limit.interval.value)
            found = _first_path(prog, interp, defines, lo, hi, row, number + 1, clock, limit)
            if found is None:
                row += 1
                continue
            end, labels = found
            number += 1
            out.append((part, number, row, end - 1, tuple(labels)))
            if end == row:
                row += 1
                continue
            skip = query.skip
            if skip.kind == "PAST_LAST_ROW":
                row = end
            elif skip.kind == "NEXT_ROW":
                row += 1
            else:
                wanted = interp.var_sets[skip.var]
                hits = [row + i for i, v in enumerate(labels) if v in wanted]
                if not hits:
                    raise SkipError("missing variable")
                target = hits[0] if skip.kind == "FIRST" else hits[-1]
                if target == row:
                    raise SkipError("first row")
                row = target
    return out


def _first_path(prog, interp, defines, lo, hi, start, match_number, clock=None, limit=None):
    insts = prog.insts

    def in_time(q):
        if clock is None:
            return True
        return limit is not None and clock[q] is not None and clock[q] < limit

    def holds(var, q, labels):
        expr = defines[var]
        if expr is None:
            return True
        view = MatchView(lo, hi, start, labels + [var], q, q, q, match_number)
        return interp.eval(expr, view) is True

    def walk(state, q, labels, visited):
        inst = insts[state]
        if inst.op == MATCH:
            return q, labels
        if inst.op == CONSUME:
            if q < hi and in_time(q) and holds(inst.var, q, labels):
                return walk(inst.out, q + 1, labels + [inst.var], frozenset())
            return None
        if state in visited:
            return None
        visited = visited | {state}
        if inst.op == SPLIT:
            return walk(inst.out, q, labels, visited) or walk(inst.out2, q, labels, visited)
        if inst.op == EPS:
            return walk(inst.out, q, labels, visited)
        if inst.op == ASSERT_START:
            return walk(inst.out, q, labels, visited) if q == lo else None
        if inst.op == ASSERT_END:
            return walk(inst.out, q, labels, visited) if q == hi else None
        raise AssertionError(inst)

    return walk(prog.start, start, [], frozenset())
