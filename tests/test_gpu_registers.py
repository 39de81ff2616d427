"""The register machine on the device (engines/gpu_registers.py,
kernels/gpu_registers.py) against the host register engine and the reference.

Without a GPU these run under numba's CUDA simulator (tests/conftest.py turns
it on): the kernel is the query's clone of kernels/registers.py's bodies,
one simulated thread per partition. Differential: random state-dependent
DEFINEs (tests/test_registers.py's templates), random tables with several
partitions, every AFTER MATCH SKIP mode; the device's ``MatchArrays`` must
equal ``registers.find_matches``'s array for array (dtypes included), and
its matches or error the reference engine's. Unit cases: buffers that start
at one entry (GROW, relaunching only the partitions that stopped), a
fallback and errors inside some partitions (the reference reruns them in
order), SKIP errors, launches in waves. The simulator is slow: CI runs a
sample; GPU_MR_FULL_TESTS=1 runs many more.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_mr import backend as B
from gpu_mr.analysis import analyze
from gpu_mr.engines import gpu_registers as G
from gpu_mr.engines import registers as R
from gpu_mr.engines.base import as_match_arrays
from gpu_mr.engines.reference import ReferenceEngine
from gpu_mr.errors import GpuMrError
from gpu_mr.frames import sort_for_matching
from gpu_mr.kernels import gpu_registers as GK
from gpu_mr.kernels import registers as K
from gpu_mr.syntax import parse_clause

from test_cpu_engine import tables
from test_registers import _TICKS_QUERIES, days, decimals, queries

if isinstance(B.detect(), str):
    pytest.skip(f"no GPU and no simulator: {B.detect()}", allow_module_level=True)

FULL = os.environ.get("GPU_MR_FULL_TESTS") == "1"


def _run(run):
    """``run()``'s MatchArrays, or the error it raised as a comparable tuple."""
    try:
        return as_match_arrays(run())
    except GpuMrError as exc:
        return ("error", type(exc).__name__, str(exc))


def _arrays(found):
    """Comparable lists (dtype and values) of each array."""
    if isinstance(found, tuple):
        return found
    return [(a.dtype.str, a.tolist()) for a in (
        found.partition, found.number, found.start, found.end, found.label_offsets,
        found.labels, found.excluded)]


def _matches(found):
    if isinstance(found, tuple):
        return found
    return [(m.partition, m.number, m.start, m.end, m.labels, m.excluded)
            for m in found.to_matches()]


def compare(clause: str, table: pa.Table) -> bool:
    """Device against host registers and reference; False when declined."""
    query = analyze(parse_clause(clause), table.schema)
    reason = G.device_registers_reason(query)
    if reason is not None:
        assert R.supports(query) is not None and "declines" in reason, reason
        return False
    data = sort_for_matching(table, query.partition_columns, query.order_keys)
    got = _run(lambda: G.find_matches_on_device(B.detect(), query, data))
    host = _run(lambda: R.find_matches(query, data))
    assert _arrays(got) == _arrays(host), \
        f"\n{clause}\n{table.to_pydict()}\ndevice: {_arrays(got)}\nhost: {_arrays(host)}"
    want = _matches(_run(lambda: ReferenceEngine().find_matches(query, data)))
    assert _matches(got) == want, f"\n{clause}\n{table.to_pydict()}"
    return True


@st.composite
def timed_tables(draw):
    """tests/test_cpu_engine.py's tables (up to 3 partitions, ties, NULLs)
    with ``ts`` a timestamp, for the WITHIN clauses queries() may draw, and
    the columns ``s`` and ``dur`` its string and interval templates read."""
    table = draw(tables())
    table = table.set_column(1, "ts", table.column("ts").cast(pa.timestamp("s")))
    # the string and interval columns of test_registers.py's templates
    n = table.num_rows
    strings = [draw(st.sampled_from([None, "x", "xy", "y", "", "Y"])) for _ in range(n)]
    durations = [draw(st.one_of(st.none(), st.integers(0, 3))) for _ in range(n)]
    return (table.append_column("s", pa.array(strings, pa.string()))
            .append_column("dur", pa.array(durations, pa.int64()).cast(pa.duration("ms")))
            .append_column("m", decimals(draw, n))
            .append_column("day", days(draw, n)))


_SUPPORTED: list = []


@settings(max_examples=3000 if FULL else 150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(queries(), timed_tables())
def test_device_registers_equal_host_and_reference(clause, table):
    _SUPPORTED.append(compare(clause, table))


def test_a_good_share_of_generated_queries_runs_on_the_device():
    if len(_SUPPORTED) < 20:
        pytest.skip("runs after the differential test")
    assert sum(_SUPPORTED) / len(_SUPPORTED) > 0.4


def _ticks(rows: int = 150, symbols: int = 3) -> pa.Table:
    from gpu_mr.demo import generate_ticks
    return generate_ticks(rows=rows, symbols=symbols, seed=7)


@pytest.mark.parametrize("skip", ["PAST LAST ROW", "TO NEXT ROW", "TO FIRST B", "TO LAST B",
                                  "TO FIRST C", "TO LAST U", "TO U"])
def test_every_skip_mode_on_ticks(skip):
    body = _TICKS_QUERIES[2].split("PATTERN", 1)[1]
    clause = (f"PARTITION BY symbol ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP {skip} "
              f"PATTERN {body.replace('DEFINE', 'SUBSET U = (A, C) DEFINE', 1)}")
    assert compare(clause, _ticks())


@pytest.mark.parametrize("body", _TICKS_QUERIES if FULL else _TICKS_QUERIES[1:2])
def test_tick_queries(body):
    assert compare("PARTITION BY symbol ORDER BY ts MEASURES COUNT(*) AS n " + body, _ticks())


def test_buffers_grow_and_only_stopped_partitions_relaunch(monkeypatch):
    # every buffer starts at one entry: threads, register rows, seen entries,
    # log, matches and labels all grow, in partitions of different lengths
    monkeypatch.setattr(R, "INITIAL_SIZES", (1, 1, 1, 1, 1, 1))
    launched, grown = [], set()
    original = GK._launch

    def spy(backend, kernel, wave, *args):
        status = original(backend, kernel, wave, *args)
        ctr = args[6]
        launched.append(len(wave))
        grown.update(int(b) for b in ctr[status == K.GROW, K.C_DETAIL])
        return status
    monkeypatch.setattr(GK, "_launch", spy)
    parts = [0] * 3 + [1] * 16 + [2] * 8
    table = pa.table({"p": pa.array(parts, pa.int64()), "ts": pa.array(range(27), pa.int64()),
                      "a": pa.array(np.arange(27) % 3, pa.int64())})
    for body in ["PATTERN ((A | B)* C) DEFINE A AS COUNT(A.*) < 6, B AS a <> 3, "
                 "C AS LAST(A.a) = a",
                 "AFTER MATCH SKIP TO NEXT ROW PATTERN (A B+) DEFINE B AS B.a > A.a"]:
        launched.clear()
        assert compare(f"PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n {body}", table)
        assert launched[0] == 3 and len(launched) > 2 and launched[-1] < 3, launched
    assert grown == set(range(6)), grown


def _failed_partitions(monkeypatch) -> list:
    """The partitions each device run hands to the reference engine."""
    seen: list = []
    original = GK.run_on_device

    def spy(*args):
        found = original(*args)
        seen.append(found[-1])
        return found
    monkeypatch.setattr(GK, "run_on_device", spy)
    return seen


def test_growth_with_a_fallback_in_one_partition(monkeypatch):
    # tests/test_registers.py's case: partition "x" grows many times, then an
    # int beyond 2**53 compared with a double sends it to the reference
    # engine; "y" and "z" keep the kernel's output
    monkeypatch.setattr(R, "INITIAL_SIZES", (1, 1, 1, 1, 1, 1))
    big = 2**62
    xs = [1] * 60 + [big, big, big]
    ys = [1] * 45
    table = pa.table({
        "p": pa.array(["y"] * len(ys) + ["x"] * len(xs) + ["z"] * len(ys)),
        "ts": pa.array(range(len(xs) + 2 * len(ys)), pa.int64()),
        "a": pa.array(ys + xs + ys, pa.int64())})
    clause = ("PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n "
              "PATTERN (A B B) DEFINE B AS B.a > A.a - 0.5")
    failed = _failed_partitions(monkeypatch)
    assert compare(clause, table)
    assert failed == [[0]]


@pytest.mark.parametrize("define, failing", [
    ("B AS A.a / b > 0", [1, 2]),                              # division by zero
    ("B AS SUM(B.a / B.b) > 0", [1, 2]),                       # ... in an aggregate's argument
    ("B AS B.a * (1 - b) * 4611686018427387904 >= 0", [1, 2]),  # BIGINT overflow
    ("B AS SUM(a * (1 - b) * 3458764513820540928) >= 0", [2]),  # a sum leaving int64
    ("B AS (1 - b) * 9007199254740993 >= a * 1.0", [1, 2]),      # int vs double past 2**53
])
def test_errors_and_fallbacks_give_the_reference_outcome(define, failing, monkeypatch):
    # where b = 0 (late in partition 1, early in partition 2; never in 0) the
    # kernel stops: the reference reruns those partitions in order, giving
    # the first one's error as it does, or their matches
    table = pa.table({"p": pa.array([0] * 5 + [1] * 6 + [2] * 4, pa.int64()),
                      "ts": pa.array(range(15), pa.int64()),
                      "a": pa.array([1, 2, 3, 1, 2, 1, 2, 3, 1, 2, 3, 2, 2, 3, 4], pa.int64()),
                      "b": pa.array([1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 1, 1], pa.int64())})
    clause = f"PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B+) DEFINE {define}"
    failed = _failed_partitions(monkeypatch)
    assert compare(clause, table)
    assert failed == [failing], failed


@pytest.mark.parametrize("clause", [
    "ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP TO FIRST A PATTERN (A B+) "
    "DEFINE B AS B.a > A.a",
    "PARTITION BY p ORDER BY ts MEASURES COUNT(*) AS n AFTER MATCH SKIP TO LAST C "
    "PATTERN (A B+ C?) DEFINE B AS B.a > A.a",
])
def test_skip_errors_are_the_reference_engines(clause, monkeypatch):
    table = pa.table({"p": pa.array([0, 0, 0, 1, 1, 1], pa.int64()),
                      "ts": pa.array(range(6), pa.int64()), "a": pa.array([1, 2, 3, 1, 2, 3])})
    failed = _failed_partitions(monkeypatch)
    assert compare(clause, table)
    assert failed and failed[0][0] == 0, failed


def test_partitions_run_in_waves_of_several_blocks(monkeypatch):
    # 30 partitions in waves of at most 20: blocks of 8 simulated threads
    monkeypatch.setattr(GK, "MAX_JOBS", 20)
    table = _ticks(rows=300, symbols=30)
    assert compare("PARTITION BY symbol ORDER BY ts MEASURES COUNT(*) AS n "
                   + _TICKS_QUERIES[1], table)


def test_empty_input_and_declined_queries():
    schema = pa.schema([("p", pa.int64()), ("ts", pa.int64()), ("a", pa.int64())])
    table = schema.empty_table()
    assert compare("ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B+) DEFINE B AS B.a > A.a",
                   table)
    q = analyze(parse_clause("ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B+) "
                             "DEFINE B AS COUNT(DISTINCT B.a) < 3"), schema)
    assert "DISTINCT" in G.device_registers_reason(q)


def test_queries_differing_in_constants_share_the_device_kernel():
    table = _ticks(rows=60, symbols=2)
    kernels = set()
    for k in ("1.01", "0.99"):
        clause = ("PARTITION BY symbol ORDER BY ts MEASURES COUNT(*) AS n PATTERN (A B+ C) "
                  f"DEFINE B AS B.price < AVG(B.price) * {k}, C AS C.price > A.price")
        assert compare(clause, table)
        q = analyze(parse_clause(clause), table.schema)
        kernels.add(id(G.device_kernel(B.detect(), R._plan(q).source)))
    assert len(kernels) == 1


@pytest.mark.parametrize("lengths, want", [
    ([0, 1, 10, 10**6], [[1, 1, 1, 1, 1, 1], [4, 8, 16, 4, 1, 1], [40, 80, 160, 40, 10, 10],
                         list(R.INITIAL_SIZES)]),
])
def test_first_sizes_follow_partition_lengths(lengths, want):
    assert G.first_sizes(np.array(lengths)).tolist() == want


# A process without the simulator: where a CUDA toolkit's NVVM is found (a GPU
# machine, or CUDA_HOME naming a toolkit), the query's kernel and the gather
# kernel compile to PTX with the argument types find_matches_on_device
# passes, and the device's math primitives in place of numpy's.
_PTX_SCRIPT = r"""
import sys
import numpy as np
import pyarrow as pa
import numba
from numba import cuda
try:
    from numba.cuda.cudadrv.nvvm import NVVM
    NVVM()
except Exception as exc:
    print(f"no NVVM: {exc}")
    sys.exit(77)
if not cuda.is_available():
    import numba.cuda.dispatcher as D

    class Device:               # device functions compile for an H100's capability
        compute_capability = (9, 0)
    D.get_current_device = lambda: Device()
from gpu_mr import backend as B
from gpu_mr.analysis import analyze
from gpu_mr.engines import gpu_registers as G
from gpu_mr.frames import sort_for_matching
from gpu_mr.syntax import parse_clause

compiled = []


class PtxOnly(B.Backend):
    def to_device(self, array):
        return np.ascontiguousarray(array)

    def launch(self, kernel, jobs, *args):
        sig = tuple(numba.typeof(a) for a in args)
        ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
        compiled.append(kernel.py_func.__name__)


t = pa.table({"p": [1, 1, 1, 2], "t": [1, 2, 3, 1], "x": [5, 3, 4, 2],
              "y": [0.5, -1.5, 2.0, 7.0]})
q = analyze(parse_clause(
    "PARTITION BY p ORDER BY t MEASURES COUNT(*) AS n AFTER MATCH SKIP TO LAST B "
    "PATTERN (A B+ C) DEFINE B AS x < A.x AND FLOOR(y) <= CEIL(A.y) AND y % 2.0 < 3 "
    "AND PREV(CLASSIFIER()) <> 'C', C AS AVG(B.y) < y AND SUM(B.x) / x > MIN(x)"), t.schema)
data = sort_for_matching(t, q.partition_columns, q.order_keys)
G.find_matches_on_device(PtxOnly(np, cuda, False, "ptx"), q, data)
print(" ".join(sorted(set(compiled))))
"""


def test_kernels_compile_for_a_device_where_nvvm_is_found():
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", _PTX_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode == 77:
        pytest.skip(done.stdout.strip())
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["gather_output", "partition_kernel"], done.stdout
