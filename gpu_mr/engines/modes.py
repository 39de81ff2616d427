"""The 2007 proposal's matching modes: ALL MATCHES, MAXIMAL MATCH, INCREMENTAL MATCH.

What: match drivers for the modes of the proposal (shared/seeds/000, §2.9 and
§2.13) and Esper (`all matches`, `after match skip to current row`), on top
of the reference engine's partition matcher. Plain queries never come here:
they keep SQL:2016's leftmost-first matching.

- ALL MATCHES: at each start row, every non-empty match (a distinct end and
  variable mapping), in the standard's preferment order; then the next start
  row follows AFTER MATCH SKIP from the most preferred of them. Esper's
  `skip to current row` reports the same set.
- MAXIMAL MATCH: the proposal's pool of (non-empty) matches, taken by its preferment:
  earliest start, then the longest match, then the standard's order; after a
  match is taken, matches are dropped per AFTER MATCH SKIP and so is any match
  contained in one already reported (the rule that reproduces the printed
  example; §2.13's pool rules alone would also report its suffixes).
- INCREMENTAL MATCH: the proposal's operational walk-through: rows become
  visible one at a time from the current start; when the visible rows form a
  match it is issued; when no match can cover them any more, AFTER MATCH
  SKIP moves the start (relative to the last match issued from it, or to the
  next row) and the same visible rows are tried again.
See docs/semantics.md for the worked examples and the one place the
proposal's printed INCREMENTAL list disagrees with its own walk-through.
Cost: enumerating all matches is exponential in the worst case; searches
stop with SearchLimitError past the reference engine's step limit.
"""

from __future__ import annotations

from ..errors import SearchLimitError
from ..pattern.nfa import ASSERT_END, ASSERT_NOT, ASSERT_START, CONSUME, EPS, MATCH, SPLIT
from .base import Match


def all_matches_at(m, start: int, match_number: int) -> list:
    """Every match starting at ``start`` as (end exclusive, labels, excluded),
    distinct, in preferment order (depth-first over the NFA in edge order),
    the empty match included."""
    insts = m.prog
    deadline = m.deadline(start)
    found: list = []
    seen: set = set()
    m.match_number = match_number
    m.search_start = start
    stack = [(m.start_state, start, (), (), frozenset())]
    while stack:
        state, q, labels, excluded, visited = stack.pop()
        m.steps += 1
        if m.steps > m.step_limit:
            raise SearchLimitError(f"the reference engine gave up enumerating the matches "
                                   f"starting at row {start - m.lo + 1} of partition {m.part} "
                                   f"after {m.step_limit} steps", partition=m.part, row=start)
        inst = insts[state]
        if inst.op == MATCH:
            key = (q, labels)
            if key not in seen:
                seen.add(key)
                found.append((q, labels, excluded))
            continue
        if inst.op == CONSUME:
            if q < m.hi and (deadline is None or m.in_time(q, deadline)) and \
                    m.holds_on(inst.var, q, start, list(labels)):
                stack.append((inst.out, q + 1, labels + (inst.var,),
                              excluded + (inst.excluded,), frozenset()))
            continue
        if state in visited:
            continue
        visited = visited | {state}
        if inst.op == SPLIT:
            # pushed in reverse so the preferred edge is explored first
            stack.append((inst.out2, q, labels, excluded, visited))
            stack.append((inst.out, q, labels, excluded, visited))
        elif inst.op == EPS:
            stack.append((inst.out, q, labels, excluded, visited))
        elif inst.op == ASSERT_START:
            if q == m.lo:
                stack.append((inst.out, q, labels, excluded, visited))
        elif inst.op == ASSERT_END:
            if q == m.hi:
                stack.append((inst.out, q, labels, excluded, visited))
        elif inst.op == ASSERT_NOT:
            if m.consume_fails(inst.var, q, list(labels)):
                stack.append((inst.out, q, labels, excluded, visited))
    return found


def run_all_matches(m) -> list:
    """ALL MATCHES (and Esper's skip to current row)."""
    out: list = []
    pos, number = m.lo, 0
    while pos < m.hi:
        found = [f for f in all_matches_at(m, pos, number + 1) if f[0] > pos]
        if not found:
            pos += 1
            continue
        first = None
        for end, labels, excluded in found:
            number += 1
            match = Match(m.part, number, pos, end - 1, labels, excluded)
            out.append(match)
            first = first or match
        pos = pos + 1 if m.q.skip.kind == "CURRENT_ROW" else m.resume_row(first)
    return out


def run_maximal(m) -> list:
    """MAXIMAL MATCH: the proposal's pool, longest first."""
    out: list = []
    reported: list = []          # (start, end) of reported non-empty matches
    pos, number = m.lo, 0

    def contained(start: int, end: int) -> bool:
        if end < start:                       # an empty match at `start`
            return any(a <= start <= b for a, b in reported)
        return any(a <= start and end <= b for a, b in reported)

    while pos < m.hi:
        # a subset of ALL MATCHES: non-empty matches only
        candidates = [f for f in all_matches_at(m, pos, number + 1)
                      if f[0] > pos and not contained(pos, f[0] - 1)]
        if not candidates:
            pos += 1
            continue
        # longest first; Python's max keeps the first (most preferred) of equals
        end, labels, excluded = max(candidates, key=lambda f: f[0])
        number += 1
        match = Match(m.part, number, pos, end - 1, labels, excluded)
        out.append(match)
        if not match.is_empty:
            reported.append((match.start, match.end))
        pos = pos + 1 if match.is_empty else m.resume_row(match)
    return out


def run_incremental(m) -> list:
    """INCREMENTAL MATCH: the proposal's walk-through over growing visible rows."""
    out: list = []
    start, end, number = m.lo, m.lo, 0
    last_issued = None           # the last match issued from the current start
    while start < m.hi:
        end = max(end, start)
        status, labels, excluded = exact_status(m, start, end, number + 1)
        if status == "match":
            number += 1
            last_issued = Match(m.part, number, start, end, labels, excluded)
            out.append(last_issued)
        if status in ("match", "alive"):
            if end == m.hi - 1:
                break            # no more rows will become visible
            end += 1
            continue
        # dead: no match can cover the visible rows; skip and try again
        if last_issued is None:
            start += 1
        else:
            start = m.resume_row(last_issued)
        last_issued = None
    return out


def exact_status(m, start: int, end: int, match_number: int):
    """Whether rows start..end (inclusive) form a match ("match", with the
    preferred mapping among those ending exactly there), are a live prefix of
    one ("alive"), or neither ("dead")."""
    m.match_number = match_number
    m.search_start = start
    deadline = m.deadline(start)
    threads: list = []
    m.closure_plain(m.start_state, (), (), start, threads, set())
    q = start
    while q <= end and threads:
        nxt: list = []
        seen: set = set()
        for state, labels, excluded in threads:
            inst = m.prog[state]
            if inst.op != CONSUME or q >= m.hi:
                continue
            if deadline is not None and not m.in_time(q, deadline):
                continue
            m.steps += 1
            if m.steps > m.step_limit:
                raise SearchLimitError(f"the reference engine gave up after {m.step_limit} "
                                       f"steps (partition {m.part})", partition=m.part,
                                       row=start)
            if m.holds_on(inst.var, q, start, list(labels)):
                m.closure_plain(inst.out, labels + (inst.var,), excluded + (inst.excluded,),
                                q + 1, nxt, seen)
        threads = nxt
        q += 1
    for state, labels, excluded in threads:
        if m.prog[state].op == MATCH:
            return "match", labels, excluded
    if any(m.prog[s].op == CONSUME for s, _, _ in threads) and end + 1 < m.hi:
        return "alive", None, None
    return "dead", None, None

