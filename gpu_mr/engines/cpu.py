"""The compiled CPU engine: DEFINE masks, a DFA scan in numba, exact paths.

What: for queries whose DEFINEs are all row-local (DESIGN.md §5):
1. every DEFINE is evaluated once for all rows as a vectorised mask and the
   masks are packed into one class id per row (predicates/masks.py);
2. the DFA of pattern/dfa.py is built over the classes the data holds and
   laid out as dense tables;
3. the numba kernel of kernels/scan.py scans every partition for the
   leftmost-first matches (AFTER MATCH SKIP PAST LAST ROW / TO NEXT ROW);
4. each match's mapping (which variable each row took) comes from the
   reference matcher started at the match's first row, only when a measure,
   CLASSIFIER or `{- -}` needs it;
then measures.py assembles the output as for every engine.
``supports`` says why a query must go elsewhere (state-dependent DEFINEs,
the proposal's modes, time limits, SKIP TO a variable, a DFA over its cap);
``engine="auto"`` then takes the reference engine.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..analysis import CheckedQuery
from ..frames import SortedInput
from ..interpreter import Interpreter
from ..pattern.dfa import DEAD, Dfa, DfaTooLarge
from ..pattern.nfa import compile_nfa
from ..syntax import ast as A
from ..syntax import types as T
from .base import Match
from .reference import ReferenceEngine, _PartitionMatcher, _referenced_columns


class CpuEngine:
    name = "cpu"

    def supports(self, query: CheckedQuery) -> Optional[str]:
        try:
            import numba  # noqa: F401
        except ImportError:
            return "numba is not installed (pip install 'gpu_mr[cpu]')"
        if query.history_dependent:
            return ("a DEFINE depends on the match so far (other variables, FIRST/LAST, "
                    "aggregates); the register fallback is not built yet")
        if query.mode is not None or query.skip.kind == "CURRENT_ROW":
            return "the 2007 proposal's matching modes run on the reference engine"
        if query.time_limit is not None:
            return "time limits (WITHIN / INTERVAL) run on the reference engine"
        if query.match_filter is not None:
            return "conditions on the whole match (ESL-TS) run on the reference engine"
        if query.skip.kind not in ("PAST_LAST_ROW", "NEXT_ROW"):
            return "AFTER MATCH SKIP TO a variable needs path recovery inside the scan"
        from ..predicates import mask_support
        return mask_support(query)

    def find_matches(self, query: CheckedQuery, data: SortedInput) -> list:
        from ..kernels.scan import SKIP_PAST_LAST_ROW, SKIP_TO_NEXT_ROW, run_scan

        from ..predicates import row_classes
        classes = row_classes(query, data)
        present, dense = np.unique(classes, return_inverse=True)
        program = compile_nfa(query.pattern, query.primary_vars)
        dfa = Dfa(program)
        try:
            tables = _dense_tables(dfa, [int(c) for c in present])
        except DfaTooLarge:
            return ReferenceEngine().find_matches(query, data)
        trans, matched, end_accept, start_first, start_other = tables
        skip = SKIP_TO_NEXT_ROW if query.skip.kind == "NEXT_ROW" else SKIP_PAST_LAST_ROW
        offsets = np.asarray(data.partition_offsets, dtype=np.int64)
        starts, ends = run_scan(dense.astype(np.int32), offsets, trans, matched, end_accept,
                                start_first, start_other, skip)
        return _matches(query, data, program, offsets, starts, ends)


def _dense_tables(dfa: Dfa, classes: list) -> tuple:
    """The DFA over ``classes`` as arrays: trans[state, class index] (0 = dead),
    matched[state, class index], end_accept[state], and the two start states."""
    start_first, start_other = dfa.start(True), dfa.start(False)
    dfa.explore(classes)
    n_states = len(dfa.states)
    trans = np.zeros((n_states, len(classes)), dtype=np.int32)
    matched = np.zeros((n_states, len(classes)), dtype=np.uint8)
    end_accept = np.zeros(n_states, dtype=np.uint8)
    for sid in range(1, n_states):
        end_accept[sid] = dfa.accepts_at_end(sid)
        for ci, c in enumerate(classes):
            nxt, hit = dfa.step(sid, c)
            trans[sid, ci] = nxt
            matched[sid, ci] = hit
    assert DEAD == 0
    return trans, matched, end_accept, start_first, start_other


def _needs_mapping(query: CheckedQuery) -> bool:
    """Whether the output depends on which variable each row took."""
    if query.has_exclusion:
        return True
    for m in query.measures:
        for n in m.expr.walk():
            if isinstance(n, A.ColumnRef) and n.var is not None:
                return True
            if isinstance(n, A.Classifier):
                return True
            if isinstance(n, A.Aggregate) and n.var is not None:
                return True
    return False


def _matches(query: CheckedQuery, data: SortedInput, program, offsets: np.ndarray,
             starts: np.ndarray, ends: np.ndarray) -> list:
    parts = np.searchsorted(offsets, starts, side="right") - 1
    mapping = _needs_mapping(query)
    interp = None
    if mapping:
        needed = _referenced_columns(query)
        columns = {n: T.arrow_values(data.table.column(n), t)
                   for n, t in query.column_types.items() if n in needed}
        interp = Interpreter(query, columns)
    out: list = []
    number, current, matcher = 0, -1, None
    for part, start, end in zip(parts.tolist(), starts.tolist(), ends.tolist()):
        if part != current:
            current, number = part, 0
            if mapping:
                matcher = _PartitionMatcher(query, program, interp, part, int(offsets[part]),
                                            int(offsets[part + 1]))
        number += 1
        if mapping and end > start:
            found_end, labels, excluded = matcher.search(start, number)
            assert found_end == end, "the DFA scan and the reference search disagree"
        else:
            labels, excluded = (0,) * (end - start), (False,) * (end - start)
        out.append(Match(part, number, start, end - 1, labels, excluded))
    return out
