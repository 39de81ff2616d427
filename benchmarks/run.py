"""Benchmark runner for the MATCH_RECOGNIZE engines (CPU side).

What: runs a fixed set of pattern queries (V-shape, W-shape, the 2007
proposal's state-dependent ``A B C* D E* F+``, a running-AVG query and an ALL
ROWS PER MATCH query) over deterministic tick data from ``ticks.py``, for each
chosen size and partition count, with each chosen engine; prints a table and
writes JSON under ``benchmarks/results/``.

Why ratios: the machines are shared, so a single absolute time says little
(DESIGN.md section 9). Every claim is a ratio measured within one run:

* ``vs ref``: rows/s of an engine over rows/s of the reference engine. The
  reference engine is slow, so it runs on the first ``--ref-rows`` rows of
  each dataset only; the fast engine runs on the whole dataset. The fast
  engine is also run on that same subset and its result compared with the
  reference result: ``identical``.
* ``numpy ratio``: the end-to-end time of ``gpu_mr.match_recognize(table,
  V_SHAPE, engine="cpu")`` on pre-sorted rows over the time numpy takes for
  one vectorised pass ``p[1:] < p[:-1]`` over the same float64 price column
  already in memory (best of ``--repeat`` for both). It says how far the
  whole pipeline is from the cost of evaluating one DEFINE.
* ``memory``: peak resident memory growth beyond the input, measured in a
  subprocess (``memcheck.py``), per input byte.

Absolute times and rows/s are printed for context only.

Cost: ``--quick`` takes one to two minutes on two cores; ``--full`` adds 1e7
rows and the memory checks (tens of minutes; the 1e8-row check streams from a
temporary Parquet file of about 0.5 GB).

Usage::

    python benchmarks/run.py --quick
    python benchmarks/run.py --full
    python benchmarks/run.py --rows 1e6 --partitions 1,100 --queries v_shape,all_rows \\
        --engines cpu,reference
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import pyarrow as pa

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import ticks  # noqa: E402  (benchmarks/ticks.py, found through HERE)
from report import fmt_rate  # noqa: E402

import gpu_mr  # noqa: E402
from gpu_mr.errors import UnsupportedError  # noqa: E402

RESULTS_DIR = os.path.join(HERE, "results")
SCHEMA_VERSION = 1


# --------------------------------------------------------------------------
# Queries
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Query:
    name: str
    kind: str          # "row-local" (every DEFINE a mask) or "state-dependent"
    text: str
    note: str


QUERIES = {q.name: q for q in (
    Query("v_shape", "row-local", """
PARTITION BY symbol ORDER BY ts
MEASURES FIRST(STRT.ts) AS start_ts, LAST(UP.ts) AS end_ts,
         FIRST(STRT.price) AS start_price, MIN(DOWN.price) AS bottom,
         LAST(UP.price) AS end_price, COUNT(*) AS ticks, MATCH_NUMBER() AS mno
ONE ROW PER MATCH
AFTER MATCH SKIP PAST LAST ROW
PATTERN (STRT DOWN+ UP+)
DEFINE DOWN AS price < PREV(price), UP AS price > PREV(price)
""", "a fall then a rise"),
    Query("w_shape", "row-local", """
PARTITION BY symbol ORDER BY ts
MEASURES FIRST(STRT.ts) AS start_ts, LAST(E.ts) AS end_ts,
         MIN(B.price) AS first_bottom, MAX(C.price) AS middle_peak,
         MIN(D.price) AS second_bottom, AVG(E.price) AS avg_last_leg,
         SUM(STRT.volume) AS start_volume, COUNT(*) AS ticks, MATCH_NUMBER() AS mno
ONE ROW PER MATCH
AFTER MATCH SKIP PAST LAST ROW
PATTERN (STRT B+ C+ D+ E+)
DEFINE B AS price < PREV(price), C AS price > PREV(price),
       D AS price < PREV(price), E AS price > PREV(price)
""", "double bottom: down, up, down, up"),
    Query("proposal", "state-dependent", """
PARTITION BY symbol ORDER BY ts
MEASURES FIRST(A.ts) AS a_ts, FIRST(A.price) AS a_price, MIN(C.price) AS c_low,
         LAST(F.ts) AS f_ts, LAST(F.price) AS f_price, COUNT(*) AS ticks,
         MATCH_NUMBER() AS mno
ONE ROW PER MATCH
AFTER MATCH SKIP PAST LAST ROW
PATTERN (A B C* D E* F+)
DEFINE B AS B.price < PREV(B.price),
       C AS C.price <= PREV(C.price),
       D AS D.price > PREV(D.price),
       E AS E.price >= PREV(E.price),
       F AS F.price >= PREV(F.price) AND F.price > A.price
""", "the 2007 proposal's example: F refers to A's row"),
    Query("avg_dip", "state-dependent", """
PARTITION BY symbol ORDER BY ts
MEASURES FIRST(STRT.ts) AS start_ts, LAST(UP.ts) AS end_ts, AVG(DOWN.price) AS avg_down,
         MAX(UP.price) AS high, COUNT(*) AS ticks, MATCH_NUMBER() AS mno
ONE ROW PER MATCH
AFTER MATCH SKIP PAST LAST ROW
PATTERN (STRT DOWN+ UP+)
DEFINE DOWN AS price < PREV(price),
       UP AS price > PREV(price) AND price <= AVG(DOWN.price)
""", "a rebound that stays at or below the average price of the fall"),
    Query("quick_rebound", "state-dependent", """
PARTITION BY symbol ORDER BY ts
MEASURES FIRST(A.ts) AS start_ts, LAST(C.ts) AS end_ts, MIN(B.price) AS low,
         COUNT(*) AS ticks, MATCH_NUMBER() AS mno
ONE ROW PER MATCH
AFTER MATCH SKIP PAST LAST ROW
PATTERN (A B+ C)
DEFINE B AS price < PREV(price),
       C AS C.price > A.price AND C.ts - A.ts <= INTERVAL '30' SECOND
""", "a fall and a recovery past the start within 30 seconds (timestamps in registers)"),
    Query("all_rows", "row-local", """
PARTITION BY symbol ORDER BY ts
MEASURES CLASSIFIER() AS cls, MATCH_NUMBER() AS mno, FIRST(STRT.price) AS start_price,
         MIN(DOWN.price) AS low_so_far, COUNT(*) AS n
ALL ROWS PER MATCH
AFTER MATCH SKIP PAST LAST ROW
PATTERN (STRT DOWN+ UP+)
DEFINE DOWN AS price < PREV(price), UP AS price > PREV(price)
""", "the V-shape, every matched row with running measures"),
    Query("v_shape_vwap", "row-local", """
PARTITION BY symbol ORDER BY ts
MEASURES FIRST(STRT.ts) AS start_ts, LAST(UP.ts) AS end_ts,
         LAST(UP.price) - FIRST(STRT.price) AS gain,
         SUM(price * volume) / SUM(volume) AS vwap,
         CASE WHEN COUNT(*) > 10 THEN 'long' ELSE 'short' END AS kind
ONE ROW PER MATCH
AFTER MATCH SKIP PAST LAST ROW
PATTERN (STRT DOWN+ UP+)
DEFINE DOWN AS price < PREV(price), UP AS price > PREV(price)
""", "the V-shape with measures computed from others (gain, volume-weighted price)"),
)}

#: The query of the numpy ratio: its DEFINE is exactly ``price < PREV(price)``
#: (and its mirror image).
NUMPY_RATIO_QUERY = "v_shape"
#: Repetitions of the numpy pass (milliseconds each); the best one is kept.
NUMPY_REPEAT = 20
#: Repetitions of the engine's run for the numpy ratio: a process's first
#: calls on 1e7 rows take 2-5x longer (fresh memory for the pool and the
#: threads; in a process that ran every other query first, spikes came up
#: to the seventh call on the 2-core VM), and the ratio is of the steady
#: state; the first call is reported apart.
ENGINE_RATIO_REPEAT = 15

PRESETS = {
    # ~1-2 minutes on two cores.
    "quick": dict(rows=[100_000, 1_000_000], partitions=[1, 100, 10_000], ref_rows=30_000,
                  repeat=3, ref_repeat=1, numpy_rows=10_000_000, numpy_partitions=100,
                  memory_rows=0, memory_inmem_rows=0),
    # Tens of minutes on two cores.
    "full": dict(rows=[100_000, 1_000_000, 10_000_000], partitions=[1, 100, 10_000],
                 ref_rows=100_000, repeat=3, ref_repeat=1, numpy_rows=10_000_000,
                 numpy_partitions=100, memory_rows=100_000_000,
                 memory_inmem_rows=10_000_000),
}


# --------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------

def _run_once(table: pa.Table, query: Query, engine: str):
    gc.collect()
    t0 = time.perf_counter()
    out = gpu_mr.match_recognize(table, query.text, engine=engine)
    return time.perf_counter() - t0, out


def _attempt(table: pa.Table, query: Query, engine: str, repeat: int,
             between: Callable = lambda: None) -> dict:
    """Best of ``repeat`` runs, ``between()`` after each; never raises (the
    outcome is in ``status``)."""
    times = []
    out = None
    try:
        for _ in range(max(1, repeat)):
            dt, out = _run_once(table, query, engine)
            times.append(dt)
            between()
    except UnsupportedError as exc:
        return {"status": "unsupported", "reason": str(exc), "rows": table.num_rows}
    except Exception as exc:  # recorded, reported, and the run goes on
        return {"status": "error", "reason": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=8), "rows": table.num_rows}
    best = min(times)
    return {"status": "ok", "rows": table.num_rows, "seconds": best, "all_seconds": times,
            "rows_per_s": table.num_rows / best if best > 0 else None,
            "output_rows": out.num_rows, "_out": out}


def _compare(a: pa.Table, b: pa.Table) -> tuple:
    """(identical, detail) for two result tables."""
    if a.schema != b.schema:
        return False, f"schemas differ: {a.schema.to_string()!r} vs {b.schema.to_string()!r}"
    if a.num_rows != b.num_rows:
        return False, f"{a.num_rows} vs {b.num_rows} rows"
    for name in a.column_names:
        if not a.column(name).equals(b.column(name)):
            # Arrow's equality says NaN != NaN; look for a real difference.
            x, y = a.column(name).to_pylist(), b.column(name).to_pylist()
            for i, (u, v) in enumerate(zip(x, y)):
                if type(u) is not type(v) or (u != v and not (_is_nan(u) and _is_nan(v))):
                    return False, f"column {name!r} differs first at row {i}: {u!r} vs {v!r}"
    return True, ""


def _is_nan(x) -> bool:
    return isinstance(x, float) and x != x


#: Warm-up tables (rows, partitions): small, and past the size where the
#: fast engine switches to its parallel kernels (50,000 rows when this was
#: written) with one and with many partitions, so that no timed run pays a
#: JIT compilation.
WARM_UP_SHAPES = ((2_000, 1), (120_000, 1), (120_000, 64))
_warm_up_tables: dict = {}


def _warm_up(query: Query, engine: str, seed: int, max_rows: int) -> Optional[float]:
    """First calls on small tables of the benchmark's schema: pay any JIT
    compilation (serial and parallel kernels); returns their total time.
    Tables larger than the largest dataset (``max_rows``) are left out."""
    total = 0.0
    try:
        for shape in WARM_UP_SHAPES:
            if shape[0] > max(max_rows, WARM_UP_SHAPES[0][0]):
                continue
            if shape not in _warm_up_tables:
                _warm_up_tables[shape] = ticks.generate(*shape, seed=seed + 1)
            dt, _ = _run_once(_warm_up_tables[shape], query, engine)
            total += dt
        return total
    except Exception:
        return None  # the measured runs report the failure


def bench_dataset(rows: int, partitions: int, args, queries, engines, first_calls: dict,
                  log) -> list:
    t0 = time.perf_counter()
    table = ticks.generate(rows, partitions, seed=args.seed, skew=args.skew, order=args.order)
    gen_s = time.perf_counter() - t0
    subset = table.slice(0, min(rows, args.ref_rows)) if "reference" in engines else None
    log(f"# dataset rows={rows:,} partitions={partitions:,}: generated in {gen_s:.1f} s")
    records = []
    for q in queries:
        rec = {"rows": rows, "partitions": partitions, "query": q.name, "kind": q.kind,
               "generate_seconds": gen_s, "engines": {}, "subset": None}
        ref = None
        if subset is not None:
            if (q.name, "reference") not in first_calls:
                # The reference engine compiles nothing, but its first call
                # still pays lazy imports and caches: keep them out too.
                first_calls[(q.name, "reference")] = _run_once(
                    subset.slice(0, 500), q, "reference")[0] if subset.num_rows else None
            ref = _attempt(subset, q, "reference", args.ref_repeat)
            rec["engines"]["reference"] = ref
        for engine in engines:
            if engine == "reference":
                continue
            if (q.name, engine) not in first_calls:
                first_calls[(q.name, engine)] = _warm_up(q, engine, args.seed, max(args.rows))
            res = _attempt(table, q, engine, args.repeat)
            rec["engines"][engine] = res
            if ref is not None and ref["status"] == "ok" and res["status"] == "ok":
                res["vs_reference"] = res["rows_per_s"] / ref["rows_per_s"]
                if subset.num_rows == table.num_rows:
                    same = res
                else:
                    same = _attempt(subset, q, engine, 1)
                if same["status"] == "ok":
                    ok, detail = _compare(ref["_out"], same["_out"])
                    rec["subset"] = {"rows": subset.num_rows, "engine": engine,
                                     "identical": ok, "detail": detail,
                                     "seconds": same["seconds"]}
        for res in rec["engines"].values():
            res.pop("_out", None)
        records.append(rec)
        for line in _table_lines([rec], header=False):
            log(line)
    return records


def numpy_ratio(args, log) -> dict:
    """End-to-end match_recognize (engine=cpu) over one numpy comparison pass."""
    rows, parts = args.numpy_rows, args.numpy_partitions
    table = ticks.generate(rows, parts, seed=args.seed, skew=args.skew)
    price = table.column("price").combine_chunks().to_numpy()
    assert price.dtype == np.float64 and price.flags.c_contiguous
    np_times = []

    def numpy_pass() -> None:
        t0 = time.perf_counter()
        mask = price[1:] < price[:-1]
        np_times.append(time.perf_counter() - t0)
        del mask
    q = QUERIES[NUMPY_RATIO_QUERY]
    first = _warm_up(q, "cpu", args.seed, rows)
    engine_repeat = max(ENGINE_RATIO_REPEAT, args.repeat)
    for _ in range(max(NUMPY_REPEAT, args.repeat) - engine_repeat):
        numpy_pass()
    # the rest of the numpy passes one after each of the engine's runs, so
    # that both sides of the ratio are measured over the same stretch of
    # time (this VM's speed drifts by 10-40% for minutes)
    res = _attempt(table, q, "cpu", engine_repeat, between=numpy_pass)
    res.pop("_out", None)
    rec = {"rows": rows, "partitions": parts, "query": q.name, "engine": "cpu",
           "numpy_seconds": min(np_times), "numpy_all_seconds": np_times}
    first_big = res["all_seconds"][0] if res["status"] == "ok" else None
    rec.update(first_call_seconds=first, first_full_size_seconds=first_big, result=res)
    if res["status"] == "ok":
        rec["ratio"] = res["seconds"] / rec["numpy_seconds"]
        log(f"# numpy ratio: match_recognize(engine='cpu', {q.name}) on {rows:,} pre-sorted rows "
            f"({parts} partitions): {res['seconds']:.3f} s; numpy p[1:] < p[:-1]: "
            f"{rec['numpy_seconds'] * 1e3:.2f} ms; ratio {rec['ratio']:.1f}x (best of "
            f"{max(ENGINE_RATIO_REPEAT, args.repeat)}; the process's first call at this size: "
            f"{first_big:.3f} s)")
    else:
        log(f"# numpy ratio: {res['status']}: {res['reason']}")
    return rec


def memory_check(mode: str, rows: int, args, log) -> dict:
    """Peak RSS growth of one partition of ``rows`` rows, in a subprocess."""
    cmd = [sys.executable, os.path.join(HERE, "memcheck.py"), "--mode", mode,
           "--rows", str(rows), "--query", NUMPY_RATIO_QUERY, "--seed", str(args.seed)]
    log(f"# memory ({mode}, {rows:,} rows, one partition): running in a subprocess ...")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    try:
        rec = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        rec = {"status": "error", "reason": f"memcheck exited {proc.returncode}: "
                                            f"{proc.stderr.strip()[-800:]}"}
    rec.update(mode=mode, rows=rows)
    if rec.get("status") == "ok":
        log(f"# memory ({mode}): input {rec['input_bytes'] / 2**20:,.0f} MiB, peak growth "
            f"{rec['peak_growth_bytes'] / 2**20:,.0f} MiB = "
            f"{rec['growth_per_input_byte']:.2f} x input ({rec['method']}), "
            f"{rec['seconds']:.1f} s")
    else:
        log(f"# memory ({mode}): {rec.get('status')}: {rec.get('reason')}")
    return rec


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------

HEADER = (f"{'rows':>10} {'parts':>6} {'query':<9} {'engine':<9} {'timed rows':>10} "
          f"{'first s':>8} {'best s':>8} {'rows/s':>10} {'out rows':>9} {'vs ref':>8} "
          f"{'identical':>9}")


def _table_lines(records: list, header: bool = True) -> list:
    lines = [HEADER, "-" * len(HEADER)] if header else []
    for rec in records:
        for engine, res in rec["engines"].items():
            head = f"{rec['rows']:>10,} {rec['partitions']:>6,} {rec['query']:<9} {engine:<9} "
            if res["status"] != "ok":
                lines.append(head + f"{res['status']}: {_short(res['reason'])}")
                continue
            vs = f"{res['vs_reference']:.1f}x" if "vs_reference" in res else "-"
            ident = "-"
            sub = rec.get("subset")
            if engine != "reference" and sub is not None and sub["engine"] == engine:
                ident = "yes" if sub["identical"] else "no"
            lines.append(head + f"{res['rows']:>10,} {res['all_seconds'][0]:>8.3f} "
                         f"{res['seconds']:>8.3f} "
                         f"{fmt_rate(res['rows_per_s']):>10} {res['output_rows']:>9,} "
                         f"{vs:>8} {ident:>9}")
    return lines


def _short(reason: str, width: int = 110) -> str:
    reason = " ".join(reason.split())
    return reason if len(reason) <= width else reason[: width - 3] + "..."


def plan_lines(query: Query) -> list:
    """What ``explain()`` says about the engines for this query (which engine
    ``auto`` takes and the path it follows), so that a ratio can be read
    against the code path that produced it."""
    try:
        text = gpu_mr.compile(query.text, ticks.SCHEMA).explain()
    except Exception as exc:  # explain is context, never a reason to stop
        return [f"explain failed: {type(exc).__name__}: {exc}"]
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("engine"):
            return [ln.strip() for ln in lines[i:]]
    return [ln.strip() for ln in lines if ln.startswith("dfa")]


def host_kind() -> str:
    """A machine kind, never a machine name: ``x86_64-2cpu``."""
    return f"{platform.machine() or 'unknown'}-{os.cpu_count()}cpu"


def _cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _git_commit() -> Optional[str]:
    """The commit measured; ``BENCH_GIT_COMMIT`` names it when the runner runs
    from an export of a commit (``git archive``) rather than a checkout."""
    if os.environ.get("BENCH_GIT_COMMIT"):
        return os.environ["BENCH_GIT_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                             capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=HERE, capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def environment() -> dict:
    import numpy
    env = {"host_kind": host_kind(), "cpu_count": os.cpu_count(), "cpu_model": _cpu_model(),
           "python": platform.python_version(), "numpy": numpy.__version__,
           "pyarrow": pa.__version__, "gpu_mr": gpu_mr.__version__, "git": _git_commit()}
    try:  # other work on the machine skews every number; say how busy it was
        env["load_average_1_5_15_min"] = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        env["load_average_1_5_15_min"] = None
    try:
        import numba
        env["numba"] = numba.__version__
    except ImportError:
        env["numba"] = None
    return env


def summary_lines(records: list, ratio: Optional[dict], memory: list) -> list:
    lines = []
    for engine in sorted({e for r in records for e in r["engines"]} - {"reference"}):
        vs = [r["engines"][engine]["vs_reference"] for r in records
              if "vs_reference" in r["engines"].get(engine, {})]
        subs = [r["subset"]["identical"] for r in records
                if r.get("subset") and r["subset"]["engine"] == engine]
        if vs:
            lines.append(f"{engine} vs reference (fast engine on whole datasets, reference on "
                         f"the first rows of each): median {np.median(vs):.1f}x, "
                         f"min {min(vs):.1f}x, max {max(vs):.1f}x over {len(vs)} runs")
        if subs:
            lines.append(f"identical: {'yes' if all(subs) else 'no'} ({engine} vs reference "
                         f"on the same rows, {len(subs)} comparisons)")
        skipped = [f"{r['query']}: {r['engines'][engine]['status']}" for r in records
                   if r["engines"].get(engine, {}).get("status") not in (None, "ok")]
        if skipped:
            lines.append(f"{engine} did not run {len(skipped)} (dataset, query) pairs: "
                         + ", ".join(sorted(set(skipped))))
    if ratio and "ratio" in ratio:
        lines.append(f"numpy ratio: end-to-end match_recognize(engine='cpu') on "
                     f"{ratio['rows']:,} pre-sorted rows = {ratio['ratio']:.1f}x one numpy "
                     f"pass p[1:] < p[:-1]")
    for m in memory:
        if m.get("status") == "ok":
            lines.append(f"memory ({m['mode']}, {m['rows']:,} rows, one partition): peak growth "
                         f"{m['growth_per_input_byte']:.2f}x the input")
        else:
            lines.append(f"memory ({m['mode']}, {m['rows']:,} rows): {m.get('status')}: "
                         f"{m.get('reason')}")
    return lines


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

def _counts(text: str) -> list:
    out = []
    for part in text.split(","):
        value = float(part)
        if value != int(value) or value < 0:
            raise argparse.ArgumentTypeError(f"expected whole numbers, got {part!r}")
        out.append(int(value))
    return out


def _count(text: str) -> int:
    (value,) = _counts(text)
    return value


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    preset = ap.add_mutually_exclusive_group()
    preset.add_argument("--quick", action="store_const", dest="preset", const="quick",
                        help="1e5 and 1e6 rows x 1/100/10,000 partitions (default)")
    preset.add_argument("--full", action="store_const", dest="preset", const="full",
                        help="adds 1e7 rows and the 1e8-row memory check")
    ap.add_argument("--rows", type=_counts, help="dataset sizes, e.g. 1e5,1e6")
    ap.add_argument("--partitions", type=_counts, help="partition counts, e.g. 1,100,1e4")
    ap.add_argument("--queries", help=f"comma list of {', '.join(QUERIES)} (default all)")
    ap.add_argument("--engines", default="cpu,reference",
                    help="comma list of engines (default cpu,reference); the reference "
                         "engine runs on the first --ref-rows rows only")
    ap.add_argument("--ref-rows", type=_count, help="rows given to the reference engine")
    ap.add_argument("--repeat", type=int, help="timed runs per fast engine (best is kept)")
    ap.add_argument("--ref-repeat", type=int, help="timed runs of the reference engine")
    ap.add_argument("--numpy-rows", type=_count,
                    help="rows of the numpy-ratio check (0 skips it)")
    ap.add_argument("--numpy-partitions", type=_count)
    ap.add_argument("--memory-rows", type=_count,
                    help="rows of the streaming peak-memory check (0 skips it)")
    ap.add_argument("--memory-inmem-rows", type=_count,
                    help="rows of the in-memory peak-memory check (0 skips it)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skew", type=float, default=1.0, help="Zipf exponent of symbol sizes")
    ap.add_argument("--order", choices=ticks.ORDERS, default="symbol",
                    help="row order of the input: symbol = pre-sorted by (symbol, ts) "
                         "(default); time = feed order and random = shuffled, so the engines "
                         "pay the sort (the numpy ratio always uses pre-sorted rows)")
    ap.add_argument("-o", "--output",
                    help="JSON file (default benchmarks/results/cpu-<date>-<host kind>-<preset>"
                         ".json)")
    ap.add_argument("--no-json", action="store_true", help="print the table only")
    args = ap.parse_args(argv)
    args.preset = args.preset or "quick"
    for key, value in PRESETS[args.preset].items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    if args.queries:
        unknown = [q for q in args.queries.split(",") if q not in QUERIES]
        if unknown:
            ap.error(f"unknown queries {unknown}; choose from {', '.join(QUERIES)}")
    return args


def _command_line(argv) -> str:
    """The command as run, with the output file reduced to its base name."""
    argv = list(sys.argv[1:] if argv is None else argv)
    for i, a in enumerate(argv):
        if a in ("-o", "--output") and i + 1 < len(argv):
            argv[i + 1] = os.path.basename(argv[i + 1])
        elif a.startswith("--output="):
            argv[i] = "--output=" + os.path.basename(a.split("=", 1)[1])
    return " ".join(["python benchmarks/run.py", *argv])


def main(argv=None) -> int:
    args = parse_args(argv)
    queries = [QUERIES[q] for q in (args.queries.split(",") if args.queries else QUERIES)]
    engines = [e for e in args.engines.split(",") if e]
    t_start = time.perf_counter()
    started = _dt.datetime.now(_dt.timezone.utc)

    def log(line: str) -> None:
        print(line, flush=True)

    log(f"gpu_mr benchmarks ({args.preset}), {host_kind()}, {started:%Y-%m-%d %H:%M} UTC"
        + (f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""))
    log(f"input: pyarrow tables, rows in {args.order} order, symbol sizes Zipf(skew="
        f"{args.skew:g}); reference engine timed on the first {args.ref_rows:,} rows of each "
        f"dataset, other engines on the whole dataset (best of {args.repeat})")
    log(HEADER)
    log("-" * len(HEADER))
    records, first_calls = [], {}
    for rows in args.rows:
        for parts in args.partitions:
            records += bench_dataset(rows, parts, args, queries, engines, first_calls, log)

    ratio = numpy_ratio(args, log) if args.numpy_rows and "cpu" in engines else None
    memory = []
    if args.memory_inmem_rows and "cpu" in engines:
        memory.append(memory_check("in-memory", args.memory_inmem_rows, args, log))
    if args.memory_rows and "cpu" in engines:
        memory.append(memory_check("stream", args.memory_rows, args, log))

    log("")
    for (qname, engine), t in sorted(first_calls.items()):
        if t is not None:
            log(f"first call (incl. compilation) {engine}/{qname}: {t:.2f} s")
    summary = summary_lines(records, ratio, memory)
    for line in summary:
        log(line)
    elapsed = time.perf_counter() - t_start
    log(f"total {elapsed:.0f} s")

    report = {
        "schema": SCHEMA_VERSION,
        "preset": args.preset,
        "command": _command_line(argv),
        "started_utc": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "elapsed_seconds": elapsed,
        "environment": environment(),
        "settings": {k: getattr(args, k) for k in (
            "rows", "partitions", "ref_rows", "repeat", "ref_repeat", "numpy_rows",
            "numpy_partitions", "memory_rows", "memory_inmem_rows", "seed", "skew", "order")},
        "engines": engines,
        "queries": {q.name: {"kind": q.kind, "note": q.note, "text": q.text.strip(),
                             "plan": plan_lines(q)} for q in queries},
        "results": records,
        "first_call_seconds": {f"{e}/{q}": t for (q, e), t in sorted(first_calls.items())},
        "numpy_ratio": ratio,
        "memory": memory,
        "summary": summary,
        "table": _table_lines(records),
    }
    if not args.no_json:
        path = args.output or os.path.join(
            RESULTS_DIR, f"cpu-{started:%Y-%m-%d}-{host_kind()}-{args.preset}.json")
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(report, f, indent=1, default=_json_default)
            f.write("\n")
        log(f"wrote {os.path.relpath(path)}")
    errors = [r for r in records for res in r["engines"].values() if res["status"] == "error"]
    return 1 if errors else 0


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


if __name__ == "__main__":
    sys.exit(main())
