"""The numba DFA scan (kernels/scan.py) against its plain-Python body and the
specification scan of pattern/dfa.py, on random class sequences."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_mr.analysis import analyze
from gpu_mr.kernels.scan import SKIP_PAST_LAST_ROW, SKIP_TO_NEXT_ROW, run_scan
from gpu_mr.pattern.dfa import Dfa, match_spans
from gpu_mr.pattern.nfa import compile_nfa
from gpu_mr.syntax import parse_clause

numba = pytest.importorskip("numba", reason="the cpu extra (numba) is not installed")

PATTERNS = ["A B+ C+", "(A | B)* C", "A* B*?", "^ A+ $", "PERMUTE(A, B) C?", "(A B)+ | C",
            "A++ B", "()", "A{2,3} B{,2}"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATTERNS), st.lists(st.integers(0, 7), max_size=40),
       st.lists(st.integers(1, 10), max_size=4), st.sampled_from([SKIP_PAST_LAST_ROW,
                                                                  SKIP_TO_NEXT_ROW]))
def test_kernel_equals_plain_body_and_specification(pattern, bits, cuts, skip):
    defines = ", ".join(f"{v} AS {v.lower()}" for v in "ABC" if v in pattern)
    query = analyze(parse_clause(f"MEASURES COUNT(*) AS n PATTERN ({pattern})"
                                 + (f" DEFINE {defines}" if defines else "")), None)
    dfa = Dfa(compile_nfa(query.pattern, query.primary_vars))
    present = sorted(set(bits)) or [0]
    tables = dfa.dense_tables(present)
    index = {c: i for i, c in enumerate(present)}
    dense = np.array([index[b] for b in bits], dtype=np.int32)
    bounds = sorted({0, len(bits)} | {min(c, len(bits)) for c in cuts})
    offsets = np.array(bounds, dtype=np.int64)
    spans = match_spans(dfa, bits, bounds, skip == SKIP_TO_NEXT_ROW)
    want = ([s for s, _ in spans], [e for _, e in spans])
    for compiled in (False, True):
        starts, ends, _, _ = run_scan(dense, offsets, tables, skip, compiled=compiled)
        assert (starts.tolist(), ends.tolist()) == want
