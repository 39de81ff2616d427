"""Row pattern recognition in a WINDOW: one match (or none) per input row.

What: for each row of each partition, in order (proposal §3; Trino's
"row pattern recognition in window structures"):
- a row skipped by the AFTER MATCH SKIP of an earlier row's match gets no
  match (its measures are NULL, its window aggregates run over no rows);
- otherwise the pattern is matched from that row (INITIAL) or, failing that,
  from each later row of the frame in turn (SEEK), inside the frame
  ``ROWS BETWEEN CURRENT ROW AND n FOLLOWING | UNBOUNDED FOLLOWING``: rows
  outside the frame can neither be matched nor reached by navigation;
- measures are evaluated as of the match's last row (FINAL), window
  aggregates over the matched rows; then AFTER MATCH SKIP marks the rows
  after the current one that it skips.
Built on the reference engine's matcher, so preferment and DEFINE semantics
are exactly those of MATCH_RECOGNIZE.
"""

from __future__ import annotations

from typing import Optional

from ..analysis import CheckedQuery
from ..errors import MatchRuntimeError
from ..frames import SortedInput
from ..interpreter import Interpreter, MatchView
from ..pattern.nfa import compile_nfa
from ..syntax import types as T
from .base import Match
from .reference import _PartitionMatcher


def run_window_pattern(query: CheckedQuery, data: SortedInput, frame_end: Optional[int],
                       seek: bool, frame_aggregates: frozenset = frozenset()) -> list:
    """Per measure, its value at every row of the sorted input.

    Measures named in ``frame_aggregates`` are window aggregates: on a row
    without a match they run over an empty frame (COUNT 0) instead of NULL."""
    program = compile_nfa(query.pattern, query.primary_vars)
    needed = query.matching_columns()
    columns = {name: T.arrow_values(data.table.column(name), t)
               for name, t in query.column_types.items() if name in needed}
    interp = Interpreter(query, columns)
    n = data.table.num_rows
    values = [[None] * n for _ in query.measures]
    offsets = data.partition_offsets
    over_empty = [i for i, m in enumerate(query.measures) if m.name in frame_aggregates]
    for part in range(len(offsets) - 1):
        lo, hi = int(offsets[part]), int(offsets[part + 1])
        skipped_until = lo          # rows before this one are skipped
        for row in range(lo, hi):
            empty = MatchView(row, row + 1, row, [], None, row - 1, row - 1, 1)
            for i in over_empty:
                values[i][row] = interp.eval(query.measures[i].expr, empty)
            if row < skipped_until:
                continue
            frame_hi = hi if frame_end is None else min(hi, row + frame_end + 1)
            matcher = _PartitionMatcher(query, program, interp, part, row, frame_hi)
            found = None
            for start in range(row, frame_hi if seek else row + 1):
                result = matcher.search(start, 1)
                if result is not None:
                    found = (start, result)
                    break
            if found is None:
                continue
            start, (end_exclusive, labels, excluded) = found
            match = Match(part, 1, start, end_exclusive - 1, labels, excluded)
            view = MatchView(row, frame_hi, start, list(labels),
                             None if match.is_empty else match.end, match.end, match.end, 1)
            for i, measure in enumerate(query.measures):
                values[i][row] = interp.eval(measure.expr, view)
            if not match.is_empty:
                skipped_until = max(skipped_until, _resume(query, interp, match, row))
    return values


def _resume(query: CheckedQuery, interp: Interpreter, match: Match, row: int) -> int:
    """The first row after ``row`` that AFTER MATCH SKIP does not skip."""
    skip = query.skip
    if skip.kind == "PAST_LAST_ROW":
        return match.end + 1
    if skip.kind == "NEXT_ROW":
        return match.start + 1
    ids = interp.var_sets[skip.var]
    rows = [match.start + i for i, v in enumerate(match.labels) if v in ids]
    if not rows:
        raise MatchRuntimeError(
            f"AFTER MATCH SKIP TO {skip.kind} {skip.var}: the match found for row "
            f"{row + 1} has no row mapped to {skip.var}", code="skip_to_missing_variable",
            row=row)
    # a target at or before the current row skips nothing: the next row is tried
    return rows[0] if skip.kind == "FIRST" else rows[-1]
