"""The unanchored scan (pattern/dfa.py UnanchoredDfa, kernels/unanchored.py).

For AFTER MATCH SKIP PAST LAST ROW one unanchored leftmost-first search per
partition must find exactly what the anchored scan finds by retrying every
start row (``match_spans``, its specification) and recover the same labels
and exclusion marks as the anchored path recovery: spans and paths are
compared with the anchored kernels' plain bodies on random class sequences,
and the CPU engine with the reference engine on random queries and data.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("numba", reason="the cpu extra (numba) is not installed")

import gpu_mr  # noqa: E402
from gpu_mr.analysis import analyze  # noqa: E402
from gpu_mr.engines.cpu import CpuEngine  # noqa: E402
from gpu_mr.engines.reference import ReferenceEngine  # noqa: E402
from gpu_mr.frames import sort_for_matching  # noqa: E402
from gpu_mr.kernels import unanchored as U  # noqa: E402
from gpu_mr.kernels.scan import SKIP_PAST_LAST_ROW, run_recovery, run_scan  # noqa: E402
from gpu_mr.pattern.dfa import (EMPTY_MATCH, Dfa, DfaTooLarge, UnanchoredDfa,  # noqa: E402
                                match_spans)
from gpu_mr.pattern.nfa import compile_nfa  # noqa: E402
from gpu_mr.syntax import parse_clause  # noqa: E402

from test_cpu_engine import outcome, row_local_clauses, tables, v_shape_table  # noqa: E402
from test_cpu_engine import V_SHAPE  # noqa: E402

PATTERNS = ["A*", "A+?", "(A | B)", "^ A+", "A+ $", "^ A* $", "A {- B+ -} C", "{- A -}",
            "PERMUTE(A, B, C)", "A+ B", "A B+ C+", "(A | B)* C", "A* B*?", "A++ B", "()",
            "A{2,3} B{,2}", "(A B)+ | C", "A?? B", "(A | A B)+ C?", "$", "^"]


def program_of(pattern: str):
    defines = ", ".join(f"{v} AS {v.lower()}" for v in "ABC" if v in pattern)
    query = analyze(parse_clause(f"MEASURES COUNT(*) AS n PATTERN ({pattern})"
                                 + (f" DEFINE {defines}" if defines else "")), None)
    return compile_nfa(query.pattern, query.primary_vars)


def both_scans(pattern: str, bits: list, cuts: list, compiled: bool):
    """(anchored scan + recovery, unanchored scan) results as lists, and the
    specification's spans."""
    program = program_of(pattern)
    dfa = Dfa(program)
    present = sorted(set(bits)) or [0]
    index = {c: i for i, c in enumerate(present)}
    dense = np.array([index[b] for b in bits], dtype=np.uint8)
    offsets = np.array(sorted({0, len(bits)} | {min(c, len(bits)) for c in cuts}),
                       dtype=np.int64)
    anchored = dfa.dense_tables(present)
    starts, ends, parts, errors = run_scan(dense, offsets, anchored, SKIP_PAST_LAST_ROW,
                                           compiled=False)
    recovered = run_recovery(dense, offsets, starts, ends, parts, anchored, compiled=False)
    want = [a.tolist() for a in (starts, ends, parts, errors, *recovered)]
    unanchored = UnanchoredDfa(program).dense_tables(present)
    got = [a.tolist() for a in U.run_unanchored(dense, offsets, unanchored, compiled=compiled)]
    return want, got, match_spans(dfa, bits, offsets, False)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATTERNS), st.lists(st.integers(0, 7), max_size=40),
       st.lists(st.integers(0, 40), max_size=4), st.booleans())
def test_unanchored_scan_equals_anchored_scan_and_recovery(pattern, bits, cuts, compiled):
    want, got, spans = both_scans(pattern, bits, cuts, compiled)
    assert list(zip(got[0], got[1])) == spans
    assert got == want


def test_long_runs_without_a_match_and_with_one():
    # A+ B over a long run of A: each row stepped once, one state per row.
    n = 5000
    want, got, spans = both_scans("A+ B", [1] * n, [], True)
    assert got == want and spans == []
    want, got, spans = both_scans("A+ B", [1] * n + [2], [], True)
    assert got == want and spans == [(0, n + 1)]
    assert got[5] == [0] * n + [1]                  # labels: A ... A B


def test_construction_of_small_patterns():
    # A*: the search injected at a row without A matches empty there.
    u = UnanchoredDfa(program_of("A*"))
    s = u.start(False)
    assert u.injected_thread(s) == 0 and u.seeds(s) == (u.program.start,)
    nxt, matched = u.step(s, 0b0)
    assert matched and u.lineage[(s, 0b0)][1] == u.injected_thread(s)
    assert nxt == 0                                 # nothing left: the search ends
    tables = u.dense_tables([0, 1])
    assert tables.match_thread[s, 0] == EMPTY_MATCH
    # A+ B: on A the injected search becomes a carried thread, and a new one is
    # injected behind it; a MATCH stops the injection.
    u = UnanchoredDfa(program_of("A+ B"))
    s = u.start(False)
    a, matched = u.step(s, 0b01)
    assert not matched and u.injected_thread(a) == len(u.states[a][0]) >= 1
    b, matched = u.step(a, 0b10)
    assert not matched and u.injected_thread(b) >= 0
    done, matched = u.step(b, 0b00)
    assert u.lineage[(b, 0b00)] == ((), 0)          # the A B thread matches first
    assert matched and done == 0                    # no thread, no injection: dead
    # (A | B): the left branch has priority on a row where both hold.
    want, got, _ = both_scans("(A | B)", [3, 1, 2, 0, 3], [], False)
    assert got == want and got[5] == [0, 0, 1, 0]
    # ^ holds only at each partition's first row; $ only at its end.
    want, got, spans = both_scans("^ A+", [1, 1, 1, 1], [2], False)
    assert got == want and spans == [(0, 2), (2, 4)]
    want, got, spans = both_scans("A+ $", [1, 0, 1, 1], [], False)
    assert got == want and spans == [(2, 4)]


def test_exclusion_marks_and_permute():
    for pattern, bits in [("A {- B+ -} C", [1, 2, 2, 4, 1, 4]),
                          ("PERMUTE(A, B, C)", [4, 2, 1, 7, 7, 7, 1])]:
        want, got, _ = both_scans(pattern, bits, [], True)
        assert got == want and got[0], pattern


def test_state_cap_raises_and_is_remembered():
    u = UnanchoredDfa(program_of("(A | B)* A (A | B){4}"), max_states=4)
    with pytest.raises(DfaTooLarge):
        u.dense_tables([1, 2, 3])
    with pytest.raises(DfaTooLarge):
        u.explore([1])                              # at once, without exploring again


def test_work_cap_raises_names_itself_and_is_remembered(monkeypatch):
    # PERMUTE(A, B, C, D, E, F)'s unanchored DFA took 60 million closure
    # steps (8.7 s) to build; past MAX_CLOSURE_WORK the anchored scan serves
    from gpu_mr.pattern import dfa
    u = UnanchoredDfa(program_of("PERMUTE(A, B, C)"))
    u.dense_tables([1, 2, 4])
    assert 0 < u.work[0] < 1_000
    monkeypatch.setattr(dfa, "MAX_CLOSURE_WORK", 100)
    u = UnanchoredDfa(program_of("PERMUTE(A, B, C)"))
    with pytest.raises(DfaTooLarge, match="more than 100 NFA steps"):
        u.dense_tables([1, 2, 4])
    with pytest.raises(DfaTooLarge):
        u.explore([1])                              # at once, without exploring again


def test_work_capped_unanchored_dfa_falls_back_to_the_anchored_scan(monkeypatch):
    from gpu_mr.pattern import dfa
    monkeypatch.setattr(dfa, "MAX_CLOSURE_WORK", 50)
    engine, got, want = _run_cpu(v_shape_table(500), V_SHAPE.format(rows="",
                                                                     skip="PAST LAST ROW"))
    assert got == want
    assert engine.last_run.path == "dfa" and "cap" in engine.last_run.scan


def _run_cpu(table, clause):
    query = analyze(parse_clause(clause), table.schema)
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    engine = CpuEngine()
    return engine, outcome(engine, query, data), outcome(ReferenceEngine(), query, data)


def test_capped_unanchored_dfa_falls_back_to_the_anchored_scan(monkeypatch):
    from gpu_mr.engines import cpu as cpu_module
    monkeypatch.setattr(cpu_module, "UnanchoredDfa",
                        lambda program: UnanchoredDfa(program, max_states=2))
    engine, got, want = _run_cpu(v_shape_table(500), V_SHAPE.format(rows="",
                                                                     skip="PAST LAST ROW"))
    assert got == want
    assert engine.last_run.path == "dfa" and "cap" in engine.last_run.scan


def test_which_scan_runs():
    t = v_shape_table(500)
    engine, got, want = _run_cpu(t, V_SHAPE.format(rows="", skip="PAST LAST ROW"))
    assert got == want and engine.last_run.scan == "unanchored"
    engine, got, want = _run_cpu(t, V_SHAPE.format(rows="", skip="TO NEXT ROW"))
    assert got == want and engine.last_run.scan.startswith("anchored")


def test_long_partitions_take_the_unanchored_scan_in_chunks(monkeypatch):
    from gpu_mr.kernels import scan as S
    monkeypatch.setattr(S, "CHUNKED_MIN_ROWS", 100)
    monkeypatch.setattr(S, "CHUNK_MIN_ROWS", 37)
    monkeypatch.setattr(S, "CHUNK_THREADS", 8)
    t = v_shape_table(3000)
    engine, got, want = _run_cpu(t, V_SHAPE.format(rows="", skip="PAST LAST ROW").replace(
        "PARTITION BY sym ", ""))
    assert got == want
    assert engine.last_run.scan.startswith("unanchored") and "chunks" in engine.last_run.scan


def _chunked(pattern: str, bits: list, cuts: list, rows: int, compiled: bool):
    """both_scans with the unanchored scan cutting partitions into
    speculative chunks of ``rows`` rows."""
    from gpu_mr.kernels import scan as S
    saved = S.CHUNKED_MIN_ROWS, S.CHUNK_MIN_ROWS, S.CHUNK_THREADS
    S.CHUNKED_MIN_ROWS, S.CHUNK_MIN_ROWS, S.CHUNK_THREADS = 1, rows, 64
    try:
        return both_scans(pattern, bits, cuts, compiled)
    finally:
        S.CHUNKED_MIN_ROWS, S.CHUNK_MIN_ROWS, S.CHUNK_THREADS = saved


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATTERNS), st.lists(st.integers(0, 7), max_size=60),
       st.lists(st.integers(0, 60), max_size=3), st.integers(1, 9), st.booleans())
def test_speculative_chunks_equal_the_anchored_scan(pattern, bits, cuts, rows, compiled):
    # A partition wider than a thread's share is scanned in chunks, each as
    # if a search began at its first row, then replayed from where the
    # chunk before it left until both scans are fresh at the same row.
    want, got, spans = _chunked(pattern, bits, cuts, rows, compiled)
    assert list(zip(got[0], got[1])) == spans
    assert got == want


@pytest.mark.parametrize("pattern", ["A B+ C+", "(A B)+", "A+ B", "(A | B)* C", "A*"])
def test_chunk_replays_converge_and_drop_the_speculation(pattern, monkeypatch):
    # The plain bodies, counted: on random rows most chunks are entered in
    # the middle of a search, replayed a few rows and joined again; the
    # matches are the anchored scan's all the same.
    calls = []
    real = U.repair_chunk

    def counting(k, *args):
        at = real(k, *args)
        n_fix, drops, counts = args[-3], args[-2], args[15]
        calls.append((int(n_fix[k]), int(drops[k]), int(counts[k])))
        return at
    monkeypatch.setattr(U, "repair_chunk", counting)
    bits = np.random.default_rng(11).integers(0, 8, 3000).tolist()
    want, got, spans = _chunked(pattern, bits, [1000, 1001, 2500], 50, False)
    assert got == want and list(zip(got[0], got[1])) == spans
    assert len(calls) > 40
    replayed = [c for c in calls if c[0] or c[1]]
    joined = [c for c in replayed if c[1] < c[2]]     # some speculative matches kept
    assert replayed and joined


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(row_local_clauses(), tables())
def test_cpu_engine_unanchored_equals_reference(clause, table):
    head, tail = clause.split(" AFTER MATCH SKIP ", 1)
    clause = f"{head} AFTER MATCH SKIP PAST LAST ROW PATTERN{tail.split(' PATTERN', 1)[1]}"
    engine, got, want = _run_cpu(table, clause)
    assert got == want, f"\n{clause}\n{table.to_pydict()}"
    assert engine.last_run.scan == "unanchored" or not table.num_rows


def test_large_inputs_run_the_parallel_kernels():
    # Past PARALLEL_MIN_ROWS: partitions in parallel groups, matches walked
    # and copied in parallel chunks; the same as the serial plain bodies.
    rng = np.random.default_rng(3)
    n = 120_000
    t = pa.table({"sym": np.sort(rng.integers(0, 7, n)), "ts": np.arange(n),
                  "price": np.round(100 + np.cumsum(rng.normal(size=n)), 1)})
    q = V_SHAPE.format(rows="ALL ROWS PER MATCH", skip="PAST LAST ROW")
    assert gpu_mr.match_recognize(t, q, engine="cpu").equals(
        gpu_mr.match_recognize(t, q, engine="reference"))


def test_conformance_cases_take_the_unanchored_scan(monkeypatch):
    # The conformance suite runs engine="cpu" through this scan wherever the
    # skip is PAST LAST ROW (the default).
    from conformance_cases import load_cases, run_case
    calls = []

    def counting(real):
        def call(*args, **kwargs):
            calls.append(1)
            return real(*args, **kwargs)
        return call
    # ONE ROW queries whose measures need no labels take the measured walk
    for name in ("run_unanchored", "run_unanchored_measured"):
        monkeypatch.setattr(U, name, counting(getattr(U, name)))
    for case in load_cases():
        if "query" in case.spec and "error" not in case.spec:
            try:
                run_case(case, "cpu")
            except gpu_mr.errors.GpuMrError:
                pass
    assert len(calls) >= 50


def test_too_many_threads_per_state_fall_back_to_the_anchored_scan():
    # A{300} B over a long run of A: every start is alive at once.
    n = 400
    t = pa.table({"ts": np.arange(n + 1), "x": np.r_[np.ones(n, dtype=np.int64), 2]})
    engine, got, want = _run_cpu(t, "ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A{300} B) "
                                    "DEFINE A AS x = 1, B AS x = 2")
    assert got == want and len(got) == 1 and "threads" in engine.last_run.scan


@pytest.mark.parametrize("dtype", [np.uint8, np.int32])
def test_class_ids_of_either_width(dtype):
    # uint8 bitmasks or dense ids; int32 ids past 256 classes present.
    program = program_of("A B+ C+")
    bits = np.random.default_rng(0).integers(0, 8, 1000)
    present = sorted(set(bits.tolist()))
    dense = np.searchsorted(present, bits).astype(dtype)
    offsets = np.array([0, 400, 1000], dtype=np.int64)
    anchored = Dfa(program).dense_tables(present)
    starts, ends, parts, errors = run_scan(dense, offsets, anchored, SKIP_PAST_LAST_ROW)
    want = [a.tolist() for a in (starts, ends, parts, errors,
                                 *run_recovery(dense, offsets, starts, ends, parts, anchored))]
    unanchored = UnanchoredDfa(program).dense_tables(present)
    for compiled in (False, True):
        got = U.run_unanchored(dense, offsets, unanchored, compiled=compiled)
        assert [a.tolist() for a in got] == want and len(got[0]) > 50


def test_long_segments_first_the_rest_in_memory_order():
    # segments 2 .. 9 of a thread's range: two past 1/LONG_SHARE of its rows
    # go first, longest first; the others keep their order (the prefetchers
    # follow them); the entries outside the range are left alone
    lengths = np.array([5, 5, 3, 4000, 2, 9000, 1, 6, 0, 7, 5])
    seg_lo = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    seg_hi = seg_lo + lengths
    order = np.arange(11, dtype=np.int64) * 100
    U._longest_first(order, seg_lo, seg_hi, 2, 10)
    assert order.tolist() == [0, 100, 5, 3, 2, 4, 6, 7, 8, 9, 1000]
    # none long: the order in memory
    order = np.arange(4, dtype=np.int64)
    U._longest_first(order, seg_lo[:4] * 0, seg_hi[:4] * 0 + 1, 0, 4)
    assert order.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("pattern", ["A+ B", "(A | B)* C", "A+? B", "A B+ C+", "A*",
                                     "A{2,3} B{,2}", "^ A+ B*", "A+ $"])
def test_partitions_scanned_four_then_two_at_a_time(pattern, compiled):
    # A thread scans four partitions at once, each lane taking the next
    # partition when its own ends, then the last ones two at a time and the
    # very last alone: many partitions of mixed lengths (empty ones, single
    # rows, long ones) must give what the anchored scan gives.
    rng = np.random.default_rng(len(pattern))
    n = 4000
    cuts = np.sort(np.r_[rng.integers(0, n, 60), [7, 7, 7, 8, 9, n - 1, n - 1]])
    _assert_partitions_as_anchored(pattern, compiled, rng.integers(0, 8, n).tolist(),
                                   np.r_[0, cuts, n].astype(np.int64))


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("n_parts", range(1, 10))
def test_every_lane_may_end_last(n_parts, compiled):
    # Few partitions: when the partitions run out, four lanes become two
    # (the third parked) and then one; whichever lane ends first or last,
    # empty or not, the matches are the anchored scan's.
    for seed in range(12):
        rng = np.random.default_rng(100 * n_parts + seed)
        lengths = rng.choice([0, 1, 5, 40, 300], n_parts)
        offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
        bits = rng.integers(0, 8, int(offsets[-1])).tolist()
        _assert_partitions_as_anchored("A B+ C+", compiled, bits, offsets)


def _assert_partitions_as_anchored(pattern, compiled, bits, offsets):
    n = len(bits)
    program = program_of(pattern)
    present = sorted(set(bits))
    dense = np.searchsorted(present, bits).astype(np.uint8)
    anchored = Dfa(program).dense_tables(present)
    starts, ends, parts, errors = run_scan(dense, offsets, anchored, SKIP_PAST_LAST_ROW,
                                           compiled=False)
    want = [a.tolist() for a in (starts, ends, parts, errors,
                                 *run_recovery(dense, offsets, starts, ends, parts, anchored,
                                               compiled=False))]
    unanchored = UnanchoredDfa(program).dense_tables(present)
    got = U.run_unanchored(dense, offsets, unanchored, compiled=compiled)
    assert [a.tolist() for a in got] == want
    assert len(got[0]) > 20 or n < 2000
