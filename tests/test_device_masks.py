"""The device mask generator (gpu_mr/predicates/device_masks.py) against the CPU masks.

The device masks run here with numpy standing in for cupy. For every query
they accept, the per-row class bits must equal ``engines.cpu.class_bits`` over
the CPU MaskSet's results (masks.py, itself checked row by row against the
interpreter), and the ``failed`` flag must be True exactly when some CPU mask
has a failed row (an error or an unrepresentable value). Table-driven cases
over a table with NULLs, extreme values and partition boundaries (once with
NULL masks, once without), the declines and their reasons, a hypothesis
differential test over random expression trees and random partitionings
(GPU_MR_FULL_TESTS=1 runs many more examples), and every row-local query of
the conformance suite.
"""

from __future__ import annotations

import ast
import datetime as dt
import os
import types

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpu_mr.analysis import analyze
from gpu_mr.engines.cpu import class_bits
from gpu_mr.errors import GpuMrError, UnsupportedError
from gpu_mr.frames import sort_for_matching
from gpu_mr.predicates import masks as M
from gpu_mr.predicates.device_masks import compile_device_masks, device_masks_reason
from gpu_mr.syntax import parse_clause

from conformance_cases import load_cases, run_case

FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"
I64_MAX, I64_MIN = 2**63 - 1, -2**63
NOW = {"CURRENT_TIMESTAMP": 1_700_000_000_123_456_000,
       "LOCALTIMESTAMP": 1_700_000_000_000_000_000, "CURRENT_DATE": dt.date(2023, 11, 14)}


# ---------------------------------------------------------------- harness

def cpu_bits(q, data) -> tuple:
    """What the CPU engine computes (CpuEngine.prepare): class bits, failed."""
    results = M.compile_masks(q).evaluate_detailed(data, now=NOW)
    failed = any(r is not None and r.failed.any() for r in results.values())
    return class_bits(q, results, data.table.num_rows), failed


def device_bits(q, data) -> tuple:
    masks = compile_device_masks(q, data.table.schema)
    columns = masks.load(data.table, np)
    assert set(columns) == set(masks.columns)
    return masks.evaluate(np, columns, np.asarray(data.partition_offsets, dtype=np.int64),
                          data.table.num_rows)


def agree(q, data, where: str = "") -> tuple:
    """Assert device == CPU; returns (bits, failed)."""
    assert device_masks_reason(q, data.table.schema) is None
    assert M.supports_query(q) is None, f"the device accepts what the CPU masks refuse{where}"
    bits, failed = device_bits(q, data)
    want, want_failed = cpu_bits(q, data)
    assert failed == want_failed, f"failed {failed}, CPU {want_failed}{where}"
    if not failed:
        assert bits.dtype == want.dtype and bits.shape == want.shape, where
        bad = np.flatnonzero(bits != want)
        assert bad.size == 0, (f"row {bad[0]}: device {bits[bad[0]]:b}, CPU {want[bad[0]]:b}"
                               f"{where}\n{data.table.slice(int(bad[0]), 1).to_pylist()}")
    return bits, failed


def query(defines: str, table: pa.Table, pattern: str = "A B*"):
    clause = (f"PARTITION BY p ORDER BY id MEASURES COUNT(*) AS n PATTERN ({pattern}) "
              f"DEFINE {defines}")
    q = analyze(parse_clause(clause), table.schema)
    return q, sort_for_matching(table, q.partition_columns, q.order_keys)


def check(define: str, table: pa.Table) -> tuple:
    q, data = query(f"A AS {define}", table)
    return agree(q, data, f"\nDEFINE A AS {define}")


# ---------------------------------------------------------------- a fixed table

TABLE = pa.table({
    "p": pa.array([0, 0, 0, 0, 1, 1, 1, 2, 3, 3], pa.int64()),
    "id": pa.array(range(10), pa.int64()),
    "i": pa.array([3, None, -2, 0, 7, I64_MAX, I64_MIN, 5, 2**53 + 1, -(2**60)], pa.int64()),
    "j": pa.array([1, 0, None, 2, -3, 1, -1, 0, 4, -1], pa.int64()),
    "k": pa.array([1, 2, 3, None, -100, 127, -128, 0, 9, 9], pa.int8()),
    "u": pa.array([1, 2, None, 4, 0, 2**32 - 1, 7, 3, 2, 1], pa.uint32()),
    "f": pa.array([1.5, 2.5, None, -0.5, float("nan"), float("inf"), -0.0, 0.49999999999999994,
                   2.0**53 + 2, -float("inf")], pa.float64()),
    "g": pa.array([0.1, None, 3.0, -2.5, 1e30, 7.0, -0.0, 16777217.0, 5.5, 0.0], pa.float32()),
    "b": pa.array([True, False, None, True, False, None, True, False, True, True], pa.bool_()),
    "dt": pa.array([dt.date(2024, 1, 31), dt.date(2024, 2, 29), None, dt.date(1969, 12, 31),
                    dt.date(2000, 3, 1), dt.date(1970, 1, 1), dt.date(2023, 12, 31),
                    dt.date(2024, 3, 31), dt.date(2024, 1, 1), dt.date(1, 1, 1)], pa.date32()),
    "ts": pa.array([dt.datetime(2024, 1, 31, 9, 30), None,
                    dt.datetime(1969, 12, 31, 23, 59, 59, 1), dt.datetime(2024, 2, 29, 12),
                    dt.datetime(2000, 3, 1), dt.datetime(1970, 1, 1),
                    dt.datetime(2023, 12, 31, 23, 59, 59, 999999), dt.datetime(2024, 1, 1),
                    dt.datetime(2024, 1, 1), dt.datetime(1999, 1, 1)], pa.timestamp("us")),
    "tss": pa.array([0, 86400, None, -1, 10**9, 1704067200, 5, 6, 7, 8], pa.timestamp("s")),
    "tsn": pa.array([0, 86400 * 10**9, None, -1, 10**18, 1704067200 * 10**9, 5, 6, 7, 8],
                    pa.timestamp("ns")),
    "nul": pa.nulls(10, pa.null()),
})


def _without_nulls(t: pa.Table) -> pa.Table:
    cols = {}
    for name in t.column_names:
        col = t.column(name).combine_chunks()
        if pa.types.is_null(col.type) or not col.null_count:
            cols[name] = col
            continue
        fill = {pa.types.is_boolean: False, pa.types.is_date32: dt.date(2024, 1, 1),
                pa.types.is_timestamp: dt.datetime(2020, 1, 1)}
        value = next((v for test, v in fill.items() if test(col.type)), 1)
        cols[name] = col.fill_null(pa.scalar(value, col.type))
    return pa.table(cols)


TABLE_FULL = _without_nulls(TABLE)

CASES = [
    # columns and literals of every type, NULL, three-valued logic
    "i > 0", "A.i > 0", "TRUE", "FALSE", "NULL", "b", "NOT b", "A.b IS NULL", "i IS NOT NULL",
    "nul IS NULL", "nul > 1", "k > 0", "u > 4000000000", "g > 1", "g = 0.1", "f = f", "f <> f",
    "NOT (i > 0 AND b)", "b OR NULL", "b AND NULL", "NULL OR NOT b", "NOT NULL", "i > NULL",
    "(i > 0) = b", "b <> (j > 0)", "b = TRUE", "TRUE AND FALSE OR NULL",
    # BIGINT arithmetic: overflow, division by zero, truncation
    "i + j > 0", "i - j < 3", "i * j = 0", "i / j = 1", "i % j = 0", "-i > 0", "+i > 0",
    "i / 2 = -1", "-7 / j = 3", "i % 4 = -2", "j % 3 = -1", "-j / 2 = 0", "j / -1 > 0",
    "k * k > 100", "k + 1 > 0", "u * u > 0", "i + 1 > 0", "k * 72057594037927936 > 0",
    "ABS(i) > 2", "ABS(j) = 1", "-(-i) = i", "i * 2 > 0", "i / 0 > 1", "j % 0 = 0",
    # DOUBLE: IEEE, NaN, signed zero, division by zero without error
    "f > 1", "f / 0 > 0", "1 / f < 0", "f % 2 > 0", "f % 0 > 0", "-f < 0", "ABS(f) > 1",
    "f * g > 1", "f + g - 1 > 0", "g / 3 > 0.1", "f / j >= 0", "f - 1.5 = 0",
    # exact int/double comparisons (int64 beyond 2**53)
    "i < f", "i = f", "f <> i", "i = 9223372036854775807.0", "i > 9007199254740992.0",
    "9007199254740993 > f", "k < f", "u >= g", "i <> 9.007199254740993E15", "j = 1.0",
    "i + 1 = f", "f IN (i, 1)", "i BETWEEN f AND 1e19",
    # BETWEEN, IN, CASE
    "i BETWEEN 0 AND 5", "i NOT BETWEEN 0 AND 5", "f BETWEEN j AND k", "i BETWEEN NULL AND 5",
    "i IN (3, 7, NULL)", "i NOT IN (3, 7)", "i NOT IN (3, NULL)", "f IN (1.5, 2)",
    "i IN (j, k)", "b IN (TRUE)", "NULL IN (1, 2)", "i IN (8 / j, 3)", "i NOT IN (0, 8 / j)",
    "CASE WHEN j = 0 THEN 0 ELSE i / j END > 0", "CASE j WHEN 0 THEN 1 WHEN 1 THEN 2 END = 2",
    "CASE WHEN b THEN f END > 0", "CASE WHEN b THEN i ELSE f END > 1",
    "CASE WHEN b THEN dt ELSE ts END > TIMESTAMP '2000-01-01 00:00:00'",
    "CASE WHEN j > 0 THEN b ELSE NOT b END", "CASE WHEN NULL THEN TRUE ELSE b END",
    "CASE i WHEN 3 THEN TRUE WHEN NULL THEN FALSE END IS NULL", "CASE WHEN TRUE THEN 1 END = 1",
    "CASE WHEN j = 0 THEN FALSE ELSE 8 / j = 2 END", "j <> 0 AND 8 / j = 4",
    "j = 0 OR 8 / j = -8", "CASE WHEN b THEN NULL ELSE k END > 0",
    # dates and timestamps
    "dt > DATE '2024-01-01'", "dt = DATE '2024-02-29'", "dt < ts", "dt = ts", "ts >= dt",
    "ts > TIMESTAMP '2024-01-01 00:00:00'", "tss < ts", "tsn <= ts", "tss = tsn",
    "tss > TIMESTAMP '2001-09-09 01:46:40'", "dt BETWEEN DATE '2000-01-01' AND ts",
    "ts IN (TIMESTAMP '2024-01-01 00:00:00', dt)",
    # navigation: partition boundaries, offsets, around expressions
    "i > PREV(i)", "i < NEXT(i)", "PREV(i, 2) IS NULL", "NEXT(i, 0) = i", "PREV(i, 100) IS NULL",
    "PREV(A.i + A.j, 1) > 0", "PREV(CASE WHEN j = 0 THEN 1 ELSE 10 / j END) > 0",
    "NEXT(b)", "f > PREV(f, 2) * 1.01", "PREV(j) * 2 = NEXT(j, 3)", "PREV(8 / j) > 0",
    "NEXT(i + 1, 2) > 0", "PREV(ts) < ts", "NEXT(dt) > PREV(dt)", "PREV(tss) IS NULL",
    "PREV(g) < g AND NEXT(g) < g", "PREV(i IS NULL)", "NEXT(k IN (1, 2), 1)",
    "PREV(nul) IS NULL", "PREV(b AND j > 0) OR NEXT(NOT b)", "PREV(f / 0) > 1",
]


@pytest.mark.parametrize("table", [TABLE, TABLE_FULL], ids=["nulls", "no_nulls"])
@pytest.mark.parametrize("define", CASES)
def test_bits_agree_with_cpu_masks(define, table):
    check(define, table)


def test_errors_and_unrepresentable_values_ask_for_the_host():
    # (define, failed on TABLE): overflow, division by zero, timestamps beyond
    # the nanosecond range -- only where the interpreter would evaluate them
    for define, failed in [("i + 1 > 0", True), ("i * j = 0", True), ("k * j = 0", False),
                           ("i / j = 1", True), ("j <> 0 AND 8 / j = 4", False),
                           ("j = 0 OR 8 / j = -8", False), ("8 / j > 0", True), ("-i > 0", True),
                           ("ABS(i) > 0", True), ("i - 1 < 0", True),
                           ("k * 144115188074855872 > 0", True),      # 127 * 2**57
                           ("k * 72057594037927936 > 0", False),      # -128 * 2**56 = INT64_MIN
                           ("i / 0 > 1", True), ("PREV(8 / j) > 0", True),
                           ("CASE WHEN j = 0 THEN 0 ELSE i / j END > 0", True),
                           ("f / 0 > 0", False), ("i IN (3, 8 / j)", True),
                           ("i IN (8 / j, 3)", True), ("b OR 1 / 0 = 0", True)]:
        assert check(define, TABLE)[1] is failed, define
    far = pa.table({"p": [0, 0, 0], "id": [0, 1, 2],
                    "tss": pa.array([0, 10**10, 5], pa.timestamp("s")),    # the year 2286
                    "dt": pa.array([0, 3_000_000, 1], pa.date32())})
    assert check("tss > TIMESTAMP '2000-01-01 00:00:00'", far)[1] is True
    assert check("id <> 1 AND tss > TIMESTAMP '2000-01-01 00:00:00'", far)[1] is False
    assert check("PREV(tss) IS NULL", far)[1] is True
    assert check("CASE WHEN id = 1 THEN dt ELSE tss END > tss", far)[1] is True
    assert check("CASE WHEN id = 0 THEN dt ELSE tss END >= tss", far)[1] is True
    assert check("dt > tss", far)[1] is True       # tss beyond ns; dt vs ts itself is exact


def test_partition_boundaries_and_offsets():
    t = pa.table({"p": [0, 0, 0, 1, 1, 2, 3, 3, 3, 3], "id": range(10),
                  "x": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]})
    q, data = query("A AS PREV(x) IS NULL, B AS NEXT(x, 2) IS NULL, C AS x = PREV(x) + 1",
                    t, pattern="A B C")
    bits, failed = agree(q, data)
    assert not failed
    a = [(int(b) >> 0) & 1 for b in bits]
    b = [(int(b) >> 1) & 1 for b in bits]
    c = [(int(b) >> 2) & 1 for b in bits]
    assert a == [1, 0, 0, 1, 0, 1, 1, 0, 0, 0]
    assert b == [0, 1, 1, 1, 1, 1, 0, 0, 1, 1]
    assert c == [0, 1, 1, 0, 1, 0, 0, 1, 1, 1]
    # the input out of order: PREV reads the previous row of the sorted table
    t2 = pa.table({"p": [1, 0, 1, 0], "id": [4, 2, 3, 1], "x": [40, 20, 30, 10]})
    q, data = query("A AS x - PREV(x) = 10", t2)
    assert agree(q, data)[0].tolist() == [2, 3, 2, 3]


def test_class_bits_layout_and_many_variables():
    t = pa.table({"p": [0, 0, 0, 1], "id": range(4), "x": [1, 5, 2, 7]})
    q, data = query("C AS x > PREV(x), A AS x > 1", t, pattern="A B C D")
    bits, _ = agree(q, data)
    assert bits.dtype == np.uint8 and bits.tolist() == [0b1010, 0b1111, 0b1011, 0b1011]
    names = [f"V{i}" for i in range(12)]
    defines = ", ".join(f"{v} AS x > {i % 5}" for i, v in enumerate(names) if i % 3)
    q, data = query(defines, t, pattern=" ".join(names))
    bits, _ = agree(q, data)
    assert bits.dtype == np.uint32
    q, data = query("A AS x > 0", t.slice(0, 0))
    bits, failed = agree(q, data)
    assert bits.shape == (0,) and not failed


def test_constant_defines_fill_every_row():
    t = pa.table({"p": [0, 0, 1], "id": range(3), "x": [1, 2, 3]})
    q, data = query("A AS TRUE, B AS 1 > 2", t, pattern="A B C")
    bits, failed = agree(q, data)
    assert bits.tolist() == [0b101] * 3 and not failed
    q, data = query("A AS 1 / 0 > 0", t)
    assert agree(q, data)[1] is True


def test_generated_source_is_readable_and_cached():
    q, data = query("A AS f > PREV(f, 2) * 1.01 AND i / 2 > 0, B AS b", TABLE, pattern="A B")
    masks = compile_device_masks(q, TABLE.schema)
    assert masks.columns == ("f", "i", "b")
    src = masks.source()
    assert "def define_0_A(" in src and "def define_1_B(" in src and "def classes(" in src
    assert "A := " in src and "PREV(f, 2)" in src
    assert "c0_prev2" in src and "pos >= I64(2)" in src
    no_nulls = masks.source(nullable=())
    assert "_valid" not in no_nulls.split("def classes")[1].split(":")[0].replace("prev2_valid", "")
    assert masks.program(()) is masks.program(())
    again = compile_device_masks(q, TABLE.schema)
    assert again.program(masks.columns) is masks.program(masks.columns)     # module cache
    # a DOUBLE product feeding a sum would be contracted into an FMA by NVRTC: not fused
    assert masks.program(()).fusable
    q2, _ = query("A AS f * 2 + 1 > 0, B AS f > 0", TABLE, pattern="A B")
    assert compile_device_masks(q2, TABLE.schema).program(()).fusable is False
    q3, _ = query("A AS f * 2 > 0, B AS f + 1 > 0", TABLE, pattern="A B")
    assert compile_device_masks(q3, TABLE.schema).program(()).fusable      # never meet
    # the cache tells literals apart that compare equal: 1 / -0.0 is not 1 / 0.0
    qb, _ = query("A AS 1 / -0.0 > 0", TABLE)
    qc, _ = query("A AS 1 / 0.0 > 0", TABLE)
    assert "-0.0" in compile_device_masks(qb, TABLE.schema).source()
    assert "-0.0" not in compile_device_masks(qc, TABLE.schema).source()
    assert check("1 / -0.0 < 0", TABLE)[0].tolist() == check("TRUE", TABLE)[0].tolist()


# What cupy.fuse can trace, as the generated code spells it (see the module header)
_FUSABLE_CALLS = {"xp.where", "xp.abs", "xp.floor", "xp.isnan", "xp.fmod", "astype", "I64",
                  "F64", "U8", "U32", "_add", "_sub", "_mul", "_neg", "_mul_overflows",
                  "_sign_int_float", "_sign_days_ns"}
_FUSABLE_NODES = (ast.Module, ast.FunctionDef, ast.Pass, ast.keyword, ast.arguments, ast.arg,
                  ast.Expr,
                  ast.Assign, ast.Return, ast.Name, ast.Load, ast.Store, ast.Constant, ast.Tuple,
                  ast.Call, ast.Attribute, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BitAnd,
                  ast.BitOr, ast.BitXor, ast.Invert, ast.USub, ast.Add, ast.Sub, ast.Mult,
                  ast.Div, ast.FloorDiv, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def test_generated_code_stays_within_what_cupy_fuse_traces():
    """Straight-line code of elementwise operations only: no Python branch,
    boolean operator, subscript or call outside the allowed set."""
    import gpu_mr.predicates.device_masks as D
    for table in (TABLE, TABLE_FULL):
        sources = []
        for define in CASES:
            q, _ = query(f"A AS {define}", table)
            masks = compile_device_masks(q, table.schema)
            sources += [masks.source(), masks.source(nullable=())]
        for source in sources:
            tree = ast.parse(source)
            for node in ast.walk(tree):
                assert isinstance(node, _FUSABLE_NODES), (type(node).__name__, source)
                if isinstance(node, ast.Call):
                    f = node.func
                    name = f.attr if isinstance(f, ast.Attribute) and f.attr == "astype" else \
                        ast.unparse(f)
                    assert name in _FUSABLE_CALLS or name.startswith("define_"), (name, source)
                    assert all(k.arg == "copy" for k in node.keywords) and \
                        (not node.keywords or name == "astype"), (name, source)
    for helper in ("_add", "_mul_overflows", "_sign_int_float", "_sign_days_ns"):
        assert helper in D._namespace(np)


def _fake_cupy(fuse):
    """numpy under another name, with a ``fuse`` decorator: the cupy wrapper
    logic without cupy."""
    fake = types.ModuleType("fake_cupy")
    fake.__dict__.update({k: v for k, v in np.__dict__.items() if not k.startswith("__")})
    fake.fuse = fuse
    return fake


def test_cupy_path_fuses_and_falls_back_when_fuse_cannot_trace():
    calls = []

    def fuse_ok(kernel_name=None):
        def wrap(fn):
            def fused(*args):
                calls.append("fused")
                with np.errstate(all="ignore"):
                    return fn(*args)
            return fused
        return wrap

    def fuse_broken(kernel_name=None):
        def wrap(fn):
            def fused(*args):
                calls.append("broken")
                raise TypeError("cannot trace")
            return fused
        return wrap

    q, data = query("A AS i > PREV(f) AND j / 2 = 0, C AS NOT b", TABLE, pattern="A B C")
    want = device_bits(q, data)
    masks = compile_device_masks(q, TABLE.schema)
    for fuse, seen in ((fuse_ok, ["fused", "fused"]), (fuse_broken, ["broken"])):
        calls.clear()
        xp = _fake_cupy(fuse)
        for _ in range(2):
            with np.errstate(all="ignore"):
                got = masks.evaluate(xp, masks.load(data.table, xp), data.partition_offsets,
                                     data.table.num_rows)
            assert got[1] == want[1] and np.array_equal(got[0], want[0])
        assert calls == seen
    # a DOUBLE product feeding a sum runs unfused
    calls.clear()
    q, data = query("A AS f * 2 + 1 > 0", TABLE)
    masks = compile_device_masks(q, TABLE.schema)
    xp = _fake_cupy(fuse_ok)
    with np.errstate(all="ignore"):
        masks.evaluate(xp, masks.load(data.table, xp), data.partition_offsets, data.table.num_rows)
    assert calls == []


def test_odd_names_stay_inside_comments_and_docstrings():
    t = pa.table({"p": [0, 0, 1], "id": [0, 1, 2], 'a\nb = 1': [1, 2, 3],
                  'x"""': pa.array([True, None, False]), "é  #": [0.5, 1.5, None]})
    q, data = query('"A\nB" AS "a\nb = 1" > PREV("a\nb = 1") AND "é  #" < 1, C AS "x"""""""',
                    t, pattern='"A\nB" C')
    source = compile_device_masks(q, t.schema).source()
    compile(source, "<test>", "exec")
    assert agree(q, data)[0].tolist() == [2, 0, 0]


def test_load_moves_only_the_columns_read_in_their_own_width():
    q, data = query("A AS k > 0 AND g < 1 AND PREV(dt) < DATE '2024-01-01' AND tss IS NULL",
                    TABLE)
    masks = compile_device_masks(q, TABLE.schema)
    cols = masks.load(data.table, np)
    assert set(cols) == {"k", "g", "dt", "tss"}
    assert cols["k"][0].dtype == np.int8 and cols["g"][0].dtype == np.float32
    assert cols["dt"][0].dtype == np.int32 and cols["tss"][0].dtype == np.int64
    assert cols["k"][1] is not None and cols["k"][1].dtype == bool
    sorted_full = sort_for_matching(TABLE_FULL, ("p",), (("id", True, False),))
    full = masks.load(sorted_full.table, np)
    assert all(valid is None for _, valid in full.values())
    # validity given for columns without NULLs: the nullable variant, same bits
    forced = {k: (v, np.ones(len(v), dtype=bool)) for k, (v, _) in full.items()}
    args = (sorted_full.partition_offsets, sorted_full.table.num_rows)
    one, two = masks.evaluate(np, full, *args), masks.evaluate(np, forced, *args)
    assert np.array_equal(one[0], two[0]) and one[1] == two[1]
    chunked = pa.Table.from_batches(data.table.to_batches(max_chunksize=3))
    again = masks.load(chunked, np)
    for name in cols:
        assert np.array_equal(cols[name][0], again[name][0])
    wrong = dict(cols, g=(cols["g"][0].astype(np.float64), cols["g"][1]))
    with pytest.raises(TypeError, match="column g arrives as float64"):
        masks.evaluate(np, wrong, data.partition_offsets, data.table.num_rows)
    with pytest.raises(UnsupportedError):
        masks.load(data.table.set_column(data.table.schema.get_field_index("k"), "k",
                                         data.table.column("k").cast(pa.int16())), np)


@pytest.mark.parametrize("define, fragment", [
    ("s = 'x'", "VARCHAR"),
    ("d > 1", "DECIMAL"),
    ("u8 > 1", "uint64"),
    ("iv > INTERVAL '1' DAY", "INTERVAL"),
    ("d64 > DATE '2020-01-01'", "date64"),
    ("CAST(i AS DOUBLE) > 1", "Cast"),
    ("COALESCE(i, 0) > 1", "COALESCE"),
    ("ROUND(f) = 1", "ROUND"),
    ("MOD(i, 2) = 1", "MOD"),
    ("s LIKE 'a%'", "VARCHAR"),
    ("i > B.i", "not row-local"),
    ("i > FIRST(i)", "not row-local"),
    ("COUNT(*) > 1", "not row-local"),
    ("dt + 1 > dt", "DATE + BIGINT"),
    ("ts - PREV(ts) > INTERVAL '1' SECOND", "TIMESTAMP - TIMESTAMP"),
    ("CLASSIFIER() = 'A'", "Classifier"),
    ("i < 99999999999999999999", "64-bit range"),
    ("CURRENT_DATE > dt", "CURRENT_DATE"),
])
def test_declines_name_the_construct(define, fragment):
    from decimal import Decimal
    t = pa.table({"p": [0, 0], "id": [0, 1], "i": [1, 2], "f": [1.0, 2.0], "s": ["a", "b"],
                  "d": pa.array([Decimal("1.5"), None], pa.decimal128(5, 2)),
                  "u8": pa.array([1, 2], pa.uint64()),
                  "iv": pa.array([1, 2], pa.duration("us")),
                  "d64": pa.array([0, 86_400_000], pa.date64()),
                  "dt": pa.array([0, 1], pa.date32()),
                  "ts": pa.array([0, 1], pa.timestamp("us"))})
    q, _ = query(f"A AS {define}", t)
    reason = device_masks_reason(q, t.schema)
    assert reason is not None and fragment in reason and reason.startswith("DEFINE A: "), reason
    with pytest.raises(UnsupportedError):
        compile_device_masks(q, t.schema)


def test_declines_data_of_another_schema():
    t = pa.table({"p": [0], "id": [0], "x": [1]})
    q, _ = query("A AS x > 0", t)
    other = pa.schema([("p", pa.int64()), ("id", pa.int64()), ("x", pa.string())])
    assert "column x" in device_masks_reason(q, other)
    assert "does not name column x" in device_masks_reason(q, pa.schema([("p", pa.int64())]))


# ---------------------------------------------------------------- random expressions

INT_COLS = ("i", "j", "k")          # int64, int64, int8
FLOAT_COLS = ("f", "g")             # float64, float32
INT_VALUES = st.one_of(st.integers(-5, 5), st.sampled_from([I64_MAX, I64_MIN, 2**53 + 1,
                                                            -(2**62), 2**31]))
FLOAT_VALUES = st.one_of(st.floats(-6, 6).map(lambda v: round(v, 1)),
                         st.sampled_from([float("nan"), float("inf"), -0.0, 2.0**53, 1e300]))


def numeric(depth: int, shifted: bool = False):
    leaves = [st.sampled_from(INT_COLS + FLOAT_COLS),
              st.integers(-3, 3).map(str),
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


TEMPORAL = st.sampled_from(
    ["dt", "ts", "tss", "PREV(dt)", "NEXT(tss, 2)", "PREV(ts, 3)", "DATE '2000-01-01'",
     "TIMESTAMP '2000-01-01 00:00:00'", "TIMESTAMP '1969-12-31 23:59:59.999999'",
     "CASE WHEN b THEN dt ELSE ts END", "CASE WHEN b THEN tss END", "NULL"])
COMPARE = st.sampled_from(["=", "<>", "<", "<=", ">", ">="])


def boolean(depth: int, shifted: bool = False):
    num = numeric(max(depth - 1, 0), shifted)
    leaves = [st.just("b"), st.sampled_from(["TRUE", "FALSE", "NULL"]),
              st.builds(lambda a, op, b: f"({a} {op} {b})", num, COMPARE, num)]
    if not shifted:
        leaves.append(st.builds(lambda a, op, b: f"({a} {op} {b})", TEMPORAL, COMPARE, TEMPORAL))
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
    n = draw(st.integers(0, 14))
    sizes = []
    while sum(sizes) < n:
        sizes.append(draw(st.integers(1, n - sum(sizes))))
    p = [pi for pi, s in enumerate(sizes) for _ in range(s)]

    def col(values, t):
        return pa.array(draw(st.lists(st.one_of(st.none(), values), min_size=n, max_size=n)), t)
    return pa.table({"p": pa.array(p, pa.int64()), "id": pa.array(range(n), pa.int64()),
                     "i": col(INT_VALUES, pa.int64()), "j": col(st.integers(-3, 3), pa.int64()),
                     "k": col(st.integers(-128, 127), pa.int8()),
                     "f": col(FLOAT_VALUES, pa.float64()),
                     "g": col(st.floats(-100, 100, width=32), pa.float32()),
                     "b": col(st.booleans(), pa.bool_()),
                     "dt": col(st.integers(-719162, 2932896), pa.date32()),
                     "ts": col(st.integers(-2**62, 2**62) | st.integers(-10**7, 10**7),
                               pa.timestamp("us")),
                     "tss": col(st.integers(-10**10, 10**10) | st.integers(-100, 100),
                                pa.timestamp("s"))})


@settings(max_examples=1500 if FULL else 100, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(tables(), boolean(3), boolean(1), st.booleans())
def test_random_expressions_agree_with_cpu_masks(table, define_a, define_c, fill):
    if fill:
        table = _without_nulls(table)
    try:
        q, data = query(f"A AS {define_a}, C AS {define_c}", table, pattern="A B C")
    except GpuMrError:
        assume(False)
    reason = device_masks_reason(q, table.schema)
    assert reason is None, reason
    agree(q, data, f"\nDEFINE A AS {define_a}, C AS {define_c}")


# ---------------------------------------------------------------- the conformance suite

class _Captured(BaseException):
    """Stops a case once the CPU engine asked for its masks."""


def test_conformance_queries_agree_with_cpu_masks(monkeypatch):
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
        if device_masks_reason(q, data.table.schema) is not None:
            declined += 1
            continue
        agree(q, data, f"\n{q.clause}")
        compared += 1
    print(f"conformance: {compared} queries compared, {declined} declined")
    assert compared >= 100, (compared, declined)


_RNG_SIZES = np.random.default_rng(4).choice([0, 1, 2, 3, 5, 9, 17], 40).tolist()


@pytest.mark.parametrize("block_shift", [10, 2, 0])
@pytest.mark.parametrize("sizes", [[5], [1, 0, 3, 0, 0, 7], [0, 0, 4], [2, 9, 1, 0],
                                   _RNG_SIZES, [0] + _RNG_SIZES + [0, 0]])
def test_device_positions_equal_the_array_expression(sizes, block_shift, monkeypatch):
    """The device kernel for each row's place in its partition (pos/rest for
    PREV/NEXT) gives what the host's array expression gives, empty
    partitions included, whatever the blocks of its two-level search."""
    from gpu_mr import backend as B
    from gpu_mr.kernels import gpu_positions
    from gpu_mr.kernels.gpu_positions import run_positions
    from gpu_mr.predicates.device_masks import _positions
    backend = B.detect()
    if isinstance(backend, str):
        pytest.skip(backend)
    if not backend.simulated and block_shift != gpu_positions.BLOCK_SHIFT:
        pytest.skip("a compiled kernel keeps the block size it was compiled with")
    monkeypatch.setattr(gpu_positions, "BLOCK_SHIFT", block_shift)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    pos, rest = run_positions(backend, offsets, n, True, True)
    assert backend.to_host(pos).tolist() == _positions(np, offsets, n, True).tolist()
    assert backend.to_host(rest).tolist() == _positions(np, offsets, n, False).tolist()
    assert _positions(np, offsets, n, True).tolist() == [
        r - offsets[np.searchsorted(offsets, r, side="right") - 1] for r in range(n)]
    only_rest = run_positions(backend, offsets, n, False, True)
    assert only_rest[0] is None and backend.to_host(only_rest[1]).tolist() == \
        backend.to_host(rest).tolist()
