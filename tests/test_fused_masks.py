"""The fused mask pass (gpu_mr/predicates/fused.py) against the CPU masks.

For every query it accepts, ``fused.class_bits`` must give, bit for bit, the
class bits ``engines.cpu.class_bits`` packs from ``masks.MaskSet.
evaluate_detailed`` and the bitmasks present, and return None exactly when
some mask has a failed row (an error or an unrepresentable value). Table-driven cases over a table
with NULLs, extreme values, partition edges and columns in several Arrow
chunks (zones across chunk edges forced, and not), the declines, the piece
planner, the numba-compiled kernel on a larger input, and a hypothesis
differential test over random expressions, partitionings and chunkings
(GPU_MR_FULL_TESTS=1 runs many more examples).
"""

from __future__ import annotations

import operator
import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpu_mr.analysis import analyze
from gpu_mr.engines.cpu import class_bits
from gpu_mr.errors import GpuMrError
from gpu_mr.frames import sort_for_matching
from gpu_mr.kernels.scan import present_classes
from gpu_mr.predicates import fused
from gpu_mr.predicates import masks as M
from gpu_mr.syntax import parse_clause

FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"
I64_MAX, I64_MIN = 2**63 - 1, -2**63


# ---------------------------------------------------------------- harness

def cpu_bits(q, data) -> tuple:
    """What CpuEngine.prepare computes: (bits, present, failed)."""
    results = M.compile_masks(q).evaluate_detailed(data)
    failed = any(r is not None and r.failed.any() for r in results.values())
    bits = class_bits(q, results, data.table.num_rows)
    n_vars = len(q.primary_vars)
    present = present_classes(bits, 1 << n_vars) if n_vars <= 8 else np.unique(bits).tolist()
    return bits, list(present), failed


def agree(q, data, where: str = "", jit: bool = False):
    """Assert fused == CPU masks; returns fused's answer."""
    assert fused.supports(q) is None, fused.supports(q)
    got = fused.class_bits(q, data, jit=jit)
    want, present, failed = cpu_bits(q, data)
    if failed:
        assert got is None, f"fused gave bits where a mask fails{where}"
        return got
    assert got is not None, f"fused declined rows the masks evaluate{where}"
    bits, got_present = got
    assert bits.dtype == want.dtype and bits.shape == want.shape, where
    bad = np.flatnonzero(bits != want)
    assert bad.size == 0, (f"row {bad[0]}: fused {bits[bad[0]]:b}, CPU {want[bad[0]]:b}"
                           f"{where}\n{data.table.slice(int(bad[0]), 1).to_pylist()}")
    assert got_present == present, where
    return got


def query(defines: str, table: pa.Table, pattern: str = "A B*", subset: str = ""):
    clause = (f"PARTITION BY p ORDER BY id MEASURES COUNT(*) AS n PATTERN ({pattern}) "
              f"{subset} DEFINE {defines}")
    q = analyze(parse_clause(clause), table.schema)
    return q, sort_for_matching(table, q.partition_columns, q.order_keys)


def chunked(table: pa.Table, cuts: dict) -> pa.Table:
    """``table`` with column ``name`` split into Arrow chunks at rows ``cuts[name]``."""
    cols = {}
    for name in table.column_names:
        arr = table.column(name).combine_chunks()
        at = [0] + list(cuts.get(name, ())) + [len(arr)]
        cols[name] = pa.chunked_array([arr.slice(a, b - a) for a, b in zip(at, at[1:])],
                                      arr.type)
    return pa.table(cols)


def garbage_under_nulls(arr: pa.Array, value) -> pa.Array:
    """``arr`` with ``value`` (not 0) stored in the value slots of its NULLs."""
    values = arr.fill_null(value).buffers()[1]
    return pa.Array.from_buffers(arr.type, len(arr), [arr.buffers()[0], values],
                                 arr.null_count)


# ---------------------------------------------------------------- a fixed table

P = [0, 0, 0, 0, 0, 1, 1, 1, 2, 3, 3, 3, 3, 3, 3, 3]
N = len(P)
_I = pa.array([3, None, -2, 0, 7, I64_MAX, I64_MIN, 5, 2**53 + 1, -(2**60), 4, 4, None, 1, 2,
               -7], pa.int64())
_F = pa.array([1.5, 2.5, None, -0.5, float("nan"), float("inf"), -0.0, 0.49999999999999994,
               2.0**53 + 2, -float("inf"), 3.0, 3.0, 1.0, None, 2.0, 2.5], pa.float64())
TABLE = pa.table({
    "p": pa.array(P, pa.int64()),
    "id": pa.array(range(N), pa.int64()),
    "i": garbage_under_nulls(_I, I64_MIN),
    "j": pa.array([1, 0, None, 2, -3, 1, -1, 0, 4, -1, 2, 2, 0, -2, None, 3], pa.int64()),
    "k": pa.array([1, 2, 3, None, -100, 127, -128, 0, 9, 9, 1, 2, 3, 4, 5, 6], pa.int8()),
    "u": pa.array([1, 2, None, 4, 0, 2**32 - 1, 7, 3, 2, 1, 0, 0, 1, 1, 2, 2], pa.uint32()),
    "f": garbage_under_nulls(_F, float("nan")),
    "g": pa.array([0.1, None, 3.0, -2.5, 1e30, 7.0, -0.0, 16777217.0, 5.5, 0.0, 1, 2, 3, 4, 5,
                   6], pa.float32()),
    "b": pa.array([True, False, None, True, False, None, True, False, True, True, False, True,
                   None, False, True, True], pa.bool_()),
})
SMALL = pa.table({  # no value beyond 2**53, so int/double comparisons are all exact here
    "p": pa.array(P, pa.int64()),
    "id": pa.array(range(N), pa.int64()),
    "i": pa.array([3, None, -2, 0, 7, 10, -10, 5, 6, 1, 4, 4, None, 1, 2, -7], pa.int64()),
    "j": TABLE.column("j"), "k": TABLE.column("k"), "u": TABLE.column("u"),
    "f": pa.array([1.5, 2.5, None, -0.5, float("nan"), float("inf"), -0.0, 0.5, 6.0, 1.0,
                   3.0, 3.0, 1.0, None, 2.0, 2.5], pa.float64()),
    "g": TABLE.column("g"), "b": TABLE.column("b"),
})
# chunk edges inside partitions, at partition edges, two close together
CUTS = {"i": (3, 8, 9), "f": (2, 5, 13), "j": (7,), "b": (1, 2, 11), "k": (4,), "g": (14,)}

CASES = [
    # columns, literals, three-valued logic
    "i > 0", "A.i > 0", "TRUE", "FALSE", "NULL", "b", "NOT b", "A.b IS NULL", "i IS NOT NULL",
    "k > 0", "u > 4000000000", "g > 1", "g = 0.1", "f = f", "f <> f", "NOT (i > 0 AND b)",
    "b OR NULL", "b AND NULL", "NULL OR NOT b", "NOT NULL", "i > NULL", "(i > 0) = b",
    "b <> (j > 0)", "b = TRUE", "TRUE AND FALSE OR NULL", "CLASSIFIER() = 'A'",
    # BIGINT arithmetic: overflow, division by zero, truncation
    "i + j > 0", "i - j < 3", "i * j = 0", "i / j = 1", "i % j = 0", "-i > 0", "+i > 0",
    "i / 2 = -1", "-7 / j = 3", "i % 4 = -2", "j % 3 = -1", "-j / 2 = 0", "j / -1 > 0",
    "k * k > 100", "k + 1 > 0", "u * u > 0", "i + 1 > 0", "ABS(i) > 2", "ABS(j) = 1",
    "-(-i) = i", "i * 2 > 0", "i / 0 > 1", "j % 0 = 0", "MOD(i, 3) = 1",
    # DOUBLE: IEEE, NaN, signed zero, division by zero without error
    "f > 1", "f / 0 > 0", "1 / f < 0", "f % 2 > 0", "f % 0 > 0", "-f < 0", "ABS(f) > 1",
    "f * g > 1", "f + g - 1 > 0", "g / 3 > 0.1", "f / j >= 0", "f - 1.5 = 0", "SQRT(f) > 1",
    "FLOOR(f) = 2", "CEIL(g) > 1", "SIGN(f) < 0", "GREATEST(f, g) > 2", "LEAST(i, j) < 0",
    "COALESCE(f, g, 0) > 1", "NULLIF(j, 0) > 0",
    # int/double comparisons (int64 beyond 2**53)
    "i < f", "i = f", "f <> i", "i = 9223372036854775807.0", "i > 9007199254740992.0",
    "9007199254740993 > f", "k < f", "u >= g", "j = 1.0", "f IN (i, 1)",
    # BETWEEN, IN, CASE
    "i BETWEEN 0 AND 5", "i NOT BETWEEN 0 AND 5", "f BETWEEN j AND k", "i BETWEEN NULL AND 5",
    "i IN (3, 7, NULL)", "i NOT IN (3, 7)", "i NOT IN (3, NULL)", "f IN (1.5, 2)",
    "i IN (j, k)", "b IN (TRUE)", "NULL IN (1, 2)", "i IN (8 / j, 3)", "i NOT IN (0, 8 / j)",
    "CASE WHEN j = 0 THEN 0 ELSE i / j END > 0", "CASE j WHEN 0 THEN 1 WHEN 1 THEN 2 END = 2",
    "CASE WHEN b THEN f END > 0", "CASE WHEN b THEN i ELSE f END > 1",
    "CASE WHEN j > 0 THEN b ELSE NOT b END", "CASE WHEN NULL THEN TRUE ELSE b END",
    "CASE i WHEN 3 THEN TRUE WHEN NULL THEN FALSE END IS NULL", "CASE WHEN TRUE THEN 1 END = 1",
    "CASE WHEN j = 0 THEN FALSE ELSE 8 / j = 2 END", "j <> 0 AND 8 / j = 4",
    "j = 0 OR 8 / j = -8", "CASE WHEN b THEN NULL ELSE k END > 0", "CAST(j AS DOUBLE) > 0.5",
    # navigation: partition and chunk edges, offsets, around expressions
    "i > PREV(i)", "i < NEXT(i)", "PREV(i, 2) IS NULL", "NEXT(i, 0) = i", "PREV(i, 100) IS NULL",
    "PREV(A.i + A.j, 1) > 0", "PREV(CASE WHEN j = 0 THEN 1 ELSE 10 / j END) > 0",
    "NEXT(b)", "f > PREV(f, 2) * 1.01", "PREV(j) * 2 = NEXT(j, 3)", "PREV(8 / j) > 0",
    "NEXT(i + 1, 2) > 0", "PREV(g) < g AND NEXT(g) < g", "PREV(i IS NULL)",
    "NEXT(k IN (1, 2), 1)", "PREV(b AND j > 0) OR NEXT(NOT b)", "PREV(f / 0) > 1",
    "PREV(f, 3) < NEXT(f, 2)", "NEXT(j, 4) IS NOT NULL",
]


@pytest.mark.parametrize("layout", ["one_chunk", "chunks", "zones"])
@pytest.mark.parametrize("table", [TABLE, SMALL], ids=["extremes", "small"])
@pytest.mark.parametrize("define", CASES)
def test_bits_agree_with_cpu_masks(define, table, layout, monkeypatch):
    if layout != "one_chunk":
        table = chunked(table, CUTS)
    if layout == "zones":       # evaluate near-edge rows over copied windows, however many
        monkeypatch.setattr(fused, "ZONE_SHARE", 0)
    other = define.replace("A.", "C.")
    q, data = query(f"A AS {define}, C AS NOT ({other}) OR j > 0", table, pattern="A B* C")
    agree(q, data, f"\nDEFINE A AS {define}")


def test_compiled_kernels_agree_on_the_cases():
    # CASES that raise nowhere on SMALL, eight DEFINEs to a query so that one
    # compilation checks eight; spread over the list (all of them: FULL)
    table = chunked(SMALL, CUTS)
    ok = []
    for define in CASES:
        q, data = query(f"A AS {define}", table)
        if not cpu_bits(q, data)[2]:
            ok.append(define)
    groups = [ok[i:i + 8] for i in range(0, len(ok), 8)] if FULL else \
        [ok[::len(ok) // 8][:8], ok[len(ok) // 16::len(ok) // 8][:8]]
    for group in groups:
        names = [f"V{v}" for v in range(len(group))]
        defines = ", ".join(f"{x} AS {d.replace('A.', x + '.')}" for x, d in zip(names, group))
        q, data = query(defines, table, pattern=" ".join(names))
        assert agree(q, data, f"\n{defines}", jit=True) is not None


@pytest.mark.parametrize("workers", [1, 3])
def test_compiled_pass_in_tasks_on_threads(workers, monkeypatch):
    """Rows cut into many tasks (TASK_ROWS) run on the shared pool
    (kernels/threads.py), each with its own classes-present array: the same
    bits and classes present as the masks."""
    from gpu_mr.kernels import threads
    monkeypatch.setattr(fused, "TASK_ROWS", 3)
    monkeypatch.setattr(threads, "thread_count", lambda: workers)
    table = chunked(SMALL, CUTS)
    q, data = query("A AS i > PREV(i), C AS f < NEXT(f) OR b", table, pattern="A B* C")
    assert agree(q, data, "tasks", jit=True) is not None


def test_errors_and_inexact_rows_return_none():
    for define in ("i + 1 > 0", "-i > 0", "i * 2 > 0", "ABS(i) > 0", "i / 0 > 1",
                   "j % 0 = 0", "PREV(8 / j) > 0", "PREV(i - 1) > 0"):
        q, data = query(f"A AS {define}", TABLE)
        assert fused.class_bits(q, data, jit=False) is None, define
        assert any(r is not None and r.failed.any()
                   for r in M.compile_masks(q).evaluate_detailed(data).values()), define
    # int64 against double beyond 2**53: exact, as Python compares them
    column = TABLE.column("i").to_pylist()
    for op, py, literal in (("=", operator.eq, 9223372036854775807.0),
                            ("<", operator.lt, 9.223372036854776e18),
                            (">", operator.gt, 9007199254740992.0),
                            ("<>", operator.ne, -9.0e15),
                            (">=", operator.ge, -1.152921504606847e18)):
        q, data = query(f"A AS i {op} {literal!r}", TABLE)
        bits, _ = agree(q, data, f"i {op} {literal!r}")
        want = [r for r, x in enumerate(column) if x is not None and py(x, literal)]
        assert np.flatnonzero(bits & 1).tolist() == want, (op, literal)


def test_errors_are_found_in_every_piece(monkeypatch):
    # the failing row sits in a chunk's inner rows, in a zone, at the end
    monkeypatch.setattr(fused, "ZONE_SHARE", 0)
    for bad in (2, 7, 8, 15):
        values = [1] * N
        values[bad] = 0
        t = chunked(SMALL.set_column(3, "j", pa.array(values, pa.int64())), CUTS)
        q, data = query("A AS 6 / j > PREV(i)", t)
        assert fused.class_bits(q, data, jit=False) is None, bad
        values[bad] = 2
        t = chunked(SMALL.set_column(3, "j", pa.array(values, pa.int64())), CUTS)
        q, data = query("A AS 6 / j > PREV(i)", t)
        agree(q, data, f"row {bad}")


@pytest.mark.parametrize("n_vars", [6, 7, 8, 9, 17])
def test_layout_many_variables(n_vars):
    # present classes: one 64-bit word, two, four, an array, np.unique
    names = [f"V{v}" for v in range(n_vars)]
    defines = ", ".join(f"{x} AS i > {v % 9 - 3} OR PREV(j) = {v % 4 - 1}"
                        for v, x in enumerate(names) if v % 3)
    for table in (SMALL, chunked(SMALL, CUTS)):
        q, data = query(defines, table, pattern=" ".join(names))
        bits, present = agree(q, data)
        assert bits.dtype == (np.uint8 if n_vars <= 8 else np.uint32)
        assert present == sorted(set(bits.tolist()))
        assert len(present) > 3
        if (n_vars == 8 or FULL) and table is SMALL:    # compiled (seconds each)
            compiled = fused.class_bits(q, data, jit=True)
            assert np.array_equal(compiled[0], bits) and compiled[1] == present


def test_no_defines_and_no_rows():
    t = SMALL
    q, data = query("A AS TRUE", t, pattern="A B C")
    bits, present = agree(q, data)
    assert bits.dtype == np.uint8 and present == [7]
    empty = t.slice(0, 0)
    q, data = query("A AS i > PREV(i)", empty)
    bits, present = fused.class_bits(q, data, jit=False)
    assert bits.dtype == np.uint8 and bits.size == 0 and present == []


@pytest.mark.parametrize("define, fragment", [
    ("A AS i > B.i", "not row-local"),
    ("A AS S.i > 0", "not row-local"),
    ("A AS FIRST(i) > 0", "not row-local"),
    ("A AS COUNT(*) > 1", "not row-local"),
    ("A AS s = 'x'", "VARCHAR"),
    ("A AS d > 1.5", "DECIMAL"),
    ("A AS ROUND(f) > 1", "ROUND"),
])
def test_declines_name_the_construct(define, fragment):
    t = SMALL.append_column("s", pa.array(["x"] * N)).append_column(
        "d", pa.array([1] * N, pa.decimal128(10, 2)))
    q, data = query(define, t, subset="SUBSET S = (A, B)")
    reason = fused.supports(q)
    assert reason is not None and fragment in reason, reason
    assert fused.class_bits(q, data, jit=False) is None


def test_column_types_read_or_declined():
    q, _ = query("A AS i > 0", SMALL)
    other = SMALL.set_column(2, "i", pa.array([1.5] * N))
    data = sort_for_matching(other, q.partition_columns, q.order_keys)
    assert fused.class_bits(q, data, jit=False) is None
    big = SMALL.set_column(2, "i", pa.array([2**63] + [1] * (N - 1), pa.uint64()))
    q, data = query("A AS i > 0", big)
    assert fused.class_bits(q, data, jit=False) is None
    fits = SMALL.set_column(2, "i", pa.array([2**62] + [None] * (N - 1), pa.uint64()))
    q, data = query("A AS i > 0", fits)
    agree(q, data)
    encoded = SMALL.set_column(3, "j", SMALL.column("j").dictionary_encode())
    q, data = query("A AS j > PREV(j)", encoded)
    agree(q, data)
    # NULL in the dictionary, not in the indices
    values = pa.DictionaryArray.from_arrays(pa.array([i % 3 for i in range(N)]),
                                            pa.array([1, None, 2]))
    q, data = query("A AS j IS NULL OR j > NEXT(j)", SMALL.set_column(3, "j", values))
    bits, _ = agree(q, data)
    assert (bits & 1).tolist()[:3] == [0, 1, 1]


def test_pieces_cover_every_row_once_with_their_reach():
    assert fused._pieces(100, [], 3) == [(0, 100, 0, 100)]
    assert fused._pieces(100, [40, 70], 0) == [(0, 40, 0, 40), (40, 70, 40, 70),
                                               (70, 100, 70, 100)]
    pieces = fused._pieces(1000, [400, 404, 700], 3)
    assert pieces == [(0, 400, 0, 397), (404, 700, 407, 697), (700, 1000, 703, 1000),
                      (394, 410, 397, 407), (694, 706, 697, 703)]
    covered = sorted(r for _, _, a, b in pieces for r in range(a, b))
    assert covered == list(range(1000))
    edges = [400, 404, 700]
    for ws, we, a, b in pieces:
        for r in range(a, b):
            lo, hi = max(r - 3, 0), min(r + 3, 999)
            assert ws <= lo and hi < we
            if (ws, we) in ((0, 400), (404, 700), (700, 1000)):      # in place: one chunk
                assert not any(ws < e < we for e in edges)
    assert fused._pieces(100, [50], 10) is None              # zones past 1/8 of the rows
    assert fused._pieces(10**6, list(range(1000, 10**6, 1000)), 1) is None  # edges


def test_compiled_kernel_on_a_large_chunked_input():
    rng = np.random.default_rng(7)
    n = 60_000
    price = rng.normal(100, 1, n).round(2)
    nulls = rng.random(n) < 0.01
    p = np.sort(rng.integers(0, 40, n))
    t = pa.table({"p": p, "id": np.arange(n),
                  "price": pa.array(price, mask=nulls),
                  "vol": pa.array(rng.integers(-5, 5, n) * 10**17),
                  "b": pa.array(rng.random(n) < 0.5)})
    t = chunked(t, {"price": (17_000, 17_001, 40_000), "vol": (17_000, 30_000), "b": (5,)})
    for defines in ("DOWN AS price < PREV(price), UP AS price > PREV(price)",
                    "DOWN AS price < PREV(price, 2) AND vol > 0 OR b, UP AS vol + NEXT(vol) > 0"):
        q, data = query(defines, t, pattern="STRT DOWN+ UP+")
        got = agree(q, data, f"\n{defines}", jit=True)
        want, present, failed = cpu_bits(q, data)
        assert (got is None) == failed
        assert fused.class_bits(q, data) is None or not failed      # default: compiled
    # an overflowing row (vol + NEXT(vol) beyond int64) makes the compiled kernel say so
    vol = t.column("vol").to_numpy().copy()
    vol[45_678] = 2**63 - 1
    t = t.set_column(t.column_names.index("vol"), "vol", chunked(pa.table({"vol": vol}), {
        "vol": (45_679,)}).column(0))
    q, data = query(defines, t, pattern="STRT DOWN+ UP+")
    assert fused.class_bits(q, data, jit=True) is None
    assert cpu_bits(q, data)[2]


# ---------------------------------------------------------------- random expressions

INT_COLS = ("i", "j", "k", "u")
FLOAT_COLS = ("f", "g")
INT_VALUES = st.one_of(st.integers(-5, 5), st.sampled_from([I64_MAX, I64_MIN, 2**53 + 1,
                                                            -(2**62), 2**31]))
FLOAT_VALUES = st.one_of(st.floats(-6, 6).map(lambda v: round(v, 1)),
                         st.sampled_from([float("nan"), float("inf"), -0.0, 2.0**53, 1e300]))
COMPARE = st.sampled_from(["=", "<>", "<", "<=", ">", ">="])


def numeric(depth: int, shifted: bool = False):
    leaves = [st.sampled_from(INT_COLS + FLOAT_COLS), st.integers(-3, 3).map(str),
              st.sampled_from(["0.5", "2.0", "-1.5", "9007199254740993", "1e19", "NULL"])]
    if not shifted:
        leaves.append(st.builds(lambda kind, c, k: f"{kind}({c}, {k})",
                                st.sampled_from(["PREV", "NEXT"]),
                                st.sampled_from(INT_COLS + FLOAT_COLS), st.integers(0, 3)))
    if depth <= 0:
        return st.one_of(*leaves)
    sub = numeric(depth - 1, shifted)
    nodes = [st.builds(lambda a, op, b: f"({a} {op} {b})", sub,
                       st.sampled_from(["+", "-", "*", "/", "%"]), sub),
             sub.map(lambda a: f"(-{a})"), sub.map(lambda a: f"ABS({a})"),
             st.builds(lambda c, a, b: f"CASE WHEN {c} THEN {a} ELSE {b} END",
                       boolean(depth - 1, shifted), sub, sub)]
    if not shifted:
        nodes.append(st.builds(lambda kind, a, k: f"{kind}({a} + i, {k})",
                               st.sampled_from(["PREV", "NEXT"]), numeric(depth - 1, True),
                               st.integers(1, 2)))
    return st.one_of(*leaves, *nodes)


def boolean(depth: int, shifted: bool = False):
    num = numeric(max(depth - 1, 0), shifted)
    leaves = [st.sampled_from(["b", "TRUE", "FALSE", "NULL", "CLASSIFIER() = 'A'"]),
              st.builds(lambda a, op, b: f"({a} {op} {b})", num, COMPARE, num)]
    if not shifted:
        leaves.append(st.builds(lambda k: f"PREV(b, {k})", st.integers(1, 2)))
    if depth <= 0:
        return st.one_of(*leaves)
    sub = boolean(depth - 1, shifted)
    return st.one_of(
        *leaves,
        st.builds(lambda a, op, b: f"({a} {op} {b})", sub, st.sampled_from(["AND", "OR"]), sub),
        sub.map(lambda a: f"(NOT {a})"),
        st.builds(lambda a, neg: f"({a} IS {neg}NULL)", num, st.sampled_from(["", "NOT "])),
        st.builds(lambda a, neg, lo, hi: f"({a} {neg}BETWEEN {lo} AND {hi})", num,
                  st.sampled_from(["", "NOT "]), num, num),
        st.builds(lambda a, neg, items: f"({a} {neg}IN ({', '.join(items)}))", num,
                  st.sampled_from(["", "NOT "]), st.lists(num, min_size=1, max_size=3)),
        st.builds(lambda a, w, x, y: f"(CASE {a} WHEN {w} THEN {x} ELSE {y} END)", num, num,
                  sub, sub))


@st.composite
def tables(draw):
    n = draw(st.integers(0, 24))
    sizes = []
    while sum(sizes) < n:
        sizes.append(draw(st.integers(1, n - sum(sizes))))
    p = [pi for pi, s in enumerate(sizes) for _ in range(s)]

    def col(values, t):
        return pa.array(draw(st.lists(st.one_of(st.none(), values), min_size=n, max_size=n)), t)
    t = pa.table({"p": pa.array(p, pa.int64()), "id": pa.array(range(n), pa.int64()),
                  "i": col(INT_VALUES, pa.int64()), "j": col(st.integers(-3, 3), pa.int64()),
                  "k": col(st.integers(-128, 127), pa.int8()),
                  "u": col(st.integers(0, 2**32 - 1), pa.uint32()),
                  "f": col(FLOAT_VALUES, pa.float64()),
                  "g": col(st.floats(-100, 100, width=32), pa.float32()),
                  "b": col(st.booleans(), pa.bool_())})
    cut = st.lists(st.integers(1, max(n - 1, 1)), max_size=3, unique=True).map(sorted)
    return chunked(t, {name: draw(cut) if n > 1 else () for name in t.column_names})


@settings(max_examples=1500 if FULL else 120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(tables(), boolean(3), boolean(1), st.booleans())
def test_random_expressions_agree_with_cpu_masks(table, define_a, define_c, zones):
    try:
        q, data = query(f"A AS {define_a}, C AS {define_c}", table, pattern="A B C")
    except GpuMrError:
        assume(False)
    assert fused.supports(q) is None, fused.supports(q)
    old = fused.ZONE_SHARE
    fused.ZONE_SHARE = 0 if zones else old
    try:
        agree(q, data, f"\nDEFINE A AS {define_a}, C AS {define_c}")
    finally:
        fused.ZONE_SHARE = old


# ---------------------------------------------------------------- the conformance suite

class _Captured(BaseException):
    """Stops a case once the CPU engine asked for its masks."""


def test_conformance_queries_agree_with_cpu_masks(monkeypatch):
    from conformance_cases import load_cases, run_case
    seen = []

    def capture(self, data, *, now=None):
        seen.append((self.query, data))
        raise _Captured

    monkeypatch.setattr(M.MaskSet, "evaluate_detailed", capture)
    for case in load_cases():
        try:
            run_case(case, "cpu")
        except _Captured:
            pass
        except Exception:           # analysis errors, reference-engine cases, ...
            pass
    monkeypatch.undo()
    compared = declined = 0
    for q, data in seen:
        if fused.supports(q) is not None:
            declined += 1
            continue
        agree(q, data, f"\n{q.clause}")
        compared += 1
    print(f"conformance: {compared} queries compared, {declined} declined")
    assert compared >= 100, (compared, declined)
