"""The ordered-subset DFA (pattern/dfa.py) finds the reference engine's match spans.

For row-local DEFINEs the DFA over "which variables hold here" classes must
reproduce the Pike VM exactly: same starts, same ends, same empty matches.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_mr.analysis import analyze
from gpu_mr.engines.reference import ReferenceEngine
from gpu_mr.frames import sort_for_matching
from gpu_mr.interpreter import Interpreter, MatchView
from gpu_mr.pattern.dfa import DEAD, Dfa, DfaTooLarge, match_end, match_spans
from gpu_mr.pattern.nfa import compile_nfa
from gpu_mr.syntax import parse_clause
from gpu_mr.syntax import types as T

from test_differential import ROW_LOCAL, VARS, patterns, tables

FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"


def row_classes(query, data):
    """Bit i set where primary variable i's (row-local) DEFINE holds."""
    columns = {n: T.arrow_values(data.table.column(n), t) for n, t in query.column_types.items()}
    interp = Interpreter(query, columns)
    offsets = data.partition_offsets
    classes = [0] * data.table.num_rows
    for p in range(len(offsets) - 1):
        lo, hi = int(offsets[p]), int(offsets[p + 1])
        for row in range(lo, hi):
            for var, name in enumerate(query.primary_vars):
                expr = query.defines.get(name)
                view = MatchView(lo, hi, row, [var], row, row, row, 1)
                if expr is None or interp.eval(expr, view) is True:
                    classes[row] |= 1 << var
    return classes


def dfa_spans(query, data):
    dfa = Dfa(compile_nfa(query.pattern, query.primary_vars))
    spans = match_spans(dfa, row_classes(query, data), data.partition_offsets,
                        query.skip.kind == "NEXT_ROW")
    return [(start, end - 1) for start, end in spans]


@st.composite
def row_local_clauses(draw):
    """Random patterns with row-local DEFINEs and the two skips a DFA scan
    decides alone (SKIP TO a variable needs the mapping: path recovery)."""
    text = draw(patterns()).to_sql()
    used = [v for v in VARS if v in text.replace("PERMUTE", "")]
    defines = [f"{v} AS {draw(st.sampled_from(ROW_LOCAL)).format(v=v, k=draw(st.integers(0, 3)))}"
               for v in used if draw(st.integers(0, 4))]
    skip = draw(st.sampled_from(["PAST LAST ROW", "TO NEXT ROW"]))
    return (f"PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP {skip} "
            f"PATTERN ({text})" + (f" DEFINE {', '.join(defines)}" if defines else ""))


@settings(max_examples=2000 if FULL else 200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(row_local_clauses(), tables())
def test_dfa_matches_the_reference_engine(clause, table):
    query = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    want = [(m.start, m.end) for m in ReferenceEngine().find_matches(query, data)]
    assert dfa_spans(query, data) == want, clause


def test_states_are_shared_and_capped():
    q = analyze(parse_clause("MEASURES COUNT(*) AS n PATTERN ((A | B)* A (A | B){6}) "
                                  "DEFINE A AS x = 1, B AS x = 2"),
                None)
    dfa = Dfa(compile_nfa(q.pattern, q.primary_vars))
    assert dfa.explore([1, 2, 3]) > 64          # the classic exponential blow-up
    small = Dfa(compile_nfa(q.pattern, q.primary_vars), max_states=20)
    with pytest.raises(DfaTooLarge):
        small.explore([1, 2, 3])


def test_dead_state_and_end_anchor():
    q = analyze(parse_clause("MEASURES COUNT(*) AS n PATTERN (A B $) DEFINE A AS x = 1, B AS x = 2"),
                None)
    dfa = Dfa(compile_nfa(q.pattern, q.primary_vars))
    s = dfa.start(True)
    assert dfa.step(s, 0b10) == (DEAD, False)     # a B first: nothing can follow
    s, matched = dfa.step(s, 0b01)
    s, matched = dfa.step(s, 0b10)
    assert not matched and dfa.accepts_at_end(s)  # $ holds only at the end
    assert match_end(dfa, [0b01, 0b10], 0, 0, 2) == 2
    assert match_end(dfa, [0b01, 0b10, 0b01], 0, 0, 3) == -1
