"""gpu_mr's CPU engine against a peer MATCH_RECOGNIZE on the same query and data.

What: generates sorted ticks (``ticks.py``), writes them to CSV, runs a
V-shape query in a peer's own Python -- each peer pins its own numpy, pandas
or pyarrow, so it lives in a virtual environment of its own -- and with
``gpu_mr.match_recognize(engine="cpu")`` here, checks that both give the same
matches, and prints the speed ratio measured in this one run. Peers:

- ``pandas-match-recognize`` (PyPI ``pandas-match-recognize``, a pure pandas
  implementation; the default): ``STRT DOWN+ UP+``, or with ``--query
  rebound`` ``A B+ C`` with ``C.price > A.price`` (a DEFINE that reads the
  match so far). JSON goes to
  ``benchmarks/results/peers-<date>-<host kind>[-rebound].json`` unless
  ``-o`` names a file (a second run on the same day replaces the default).
- ``flink``: Apache Flink SQL through PyFlink (PyPI ``apache-flink``), batch
  mode, parallelism 1, a filesystem CSV source and a filesystem CSV sink.
  Flink rejects a greedy quantifier at the end of a pattern, so both engines
  run ``STRT DOWN+ UP`` (a fall, then the first rise); Flink's text differs
  only in ``ORDER BY rt``, a millisecond time attribute. JSON goes to
  ``benchmarks/results/peers-flink-<date>-<host kind>-<rows>[-last].json``.

Usage::

    python -m venv peer-venv && peer-venv/bin/pip install pandas-match-recognize
    python benchmarks/peers.py --peer-python peer-venv/bin/python --rows 1e6

    python3 -m venv flink-venv && flink-venv/bin/pip install apache-flink==2.3.0
    python benchmarks/peers.py --peer flink --rows 1e6 --symbols 100

Both sides read the same CSV. pandas-match-recognize and gpu_mr are timed on
the in-memory frame, best of ``--repeat`` runs after one warm-up (imports,
JIT), so file reading is not measured. Flink is timed inside its own process
from submitting ``INSERT INTO sink SELECT * FROM ticks MATCH_RECOGNIZE (...)``
to the job's end, so its times include planning, the job's start, reading and
parsing the CSV and writing the matches: JVM start-up is excluded and printed
apart, the first run is printed as ``first`` and the best of ``--repeat``
further runs is the one compared; a job over 1,000 rows gives the fixed cost
of one job.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import ticks  # noqa: E402

PEERS = ("pandas-match-recognize", "flink")
DEFAULT_PYTHON = {"pandas-match-recognize": "peer-venv/bin/python",
                  "flink": "flink-venv/bin/python"}
COLUMNS = ["symbol", "ts", "price", "volume"]

# Measures the peer computes (its MIN(DOWN.price) came back NULL, and then
# every measure did): the comparison stays on ground both engines cover.
CLAUSE = """PARTITION BY symbol ORDER BY ts
  MEASURES FIRST(STRT.ts) AS start_ts, LAST(UP.ts) AS end_ts, LAST(DOWN.price) AS bottom
  ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
  PATTERN (STRT DOWN+ UP+)
  DEFINE DOWN AS price < PREV(price), UP AS price > PREV(price)"""

# A query whose DEFINE reads the match so far (C's price against A's): the
# peer's matcher runs it row by row; gpu_mr's register machine.
REBOUND_CLAUSE = """PARTITION BY symbol ORDER BY ts
  MEASURES FIRST(A.ts) AS start_ts, LAST(C.ts) AS end_ts, COUNT(*) AS ticks
  ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
  PATTERN (A B+ C)
  DEFINE B AS price < PREV(price), C AS C.price > A.price"""
PEER_QUERIES = {"v_shape": ("V-shape (STRT DOWN+ UP+)", CLAUSE),
                "rebound": ("rebound past the start (A B+ C, C.price > A.price)",
                            REBOUND_CLAUSE)}

# The query run against Flink, in standard text (what gpu_mr runs). Flink
# rejects PATTERN (STRT DOWN+ UP+) ("Greedy quantifiers are not allowed as the
# last element of a Pattern yet"), so the V ends at the first rise.
FLINK_CLAUSE = """PARTITION BY symbol ORDER BY ts
  MEASURES FIRST(STRT.ts) AS start_ts, LAST(UP.ts) AS end_ts, LAST(DOWN.price) AS bottom
  ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
  PATTERN (STRT DOWN+ UP)
  DEFINE DOWN AS price < PREV(price), UP AS price > PREV(price)"""

# The same query in Flink's dialect: ORDER BY must name a time attribute. The
# source declares rt = ts (microseconds) truncated to milliseconds, with a
# watermark, and the runner checks that no two rows of a symbol share an rt
# (then ordering by rt is ordering by ts). The measures read the BIGINT column
# ts itself, so they are microseconds. The rest is the standard text: Flink's
# planner (Calcite) turns an unqualified PREV(price) into LAST(*.price, 1),
# the row before in the match so far, which is the row before in the
# partition for every row but a match's first (STRT here, which has no
# condition). A qualified PREV(DOWN.price) is rejected ("Flink does not
# support physical offsets within partition").
FLINK_SQL_CLAUSES = {"prev": FLINK_CLAUSE.replace("ORDER BY ts", "ORDER BY rt")}
# The same with the row before named by its variable, the form of Flink's own
# documentation example, exact for this pattern: before a DOWN row comes the
# previous DOWN row (LAST(DOWN.price, 1)) or, for the first DOWN, STRT; before
# the UP row comes the last DOWN row.
FLINK_SQL_CLAUSES["last"] = """PARTITION BY symbol ORDER BY rt
  MEASURES FIRST(STRT.ts) AS start_ts, LAST(UP.ts) AS end_ts, LAST(DOWN.price) AS bottom
  ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
  PATTERN (STRT DOWN+ UP)
  DEFINE DOWN AS (LAST(DOWN.price, 1) IS NULL AND DOWN.price < STRT.price)
                 OR DOWN.price < LAST(DOWN.price, 1),
         UP AS UP.price > LAST(DOWN.price)"""

# Runs in the peer's interpreter: argv = csv in, csv out, repeat, clause.
PEER_SCRIPT = """
import json, sys, time
import pandas as pd
from pandas_match_recognize import match_recognize
df = pd.read_csv(sys.argv[1])
sql = "SELECT * FROM ticks MATCH_RECOGNIZE (" + sys.argv[4] + ")"
match_recognize(sql, df.head(1000))
best = float("inf")
for _ in range(int(sys.argv[3])):
    t0 = time.perf_counter()
    out = match_recognize(sql, df)
    best = min(best, time.perf_counter() - t0)
out.to_csv(sys.argv[2], index=False)
print(json.dumps({"seconds": best, "rows": len(out)}))
"""

# Runs in PyFlink's interpreter: argv = csv in (no header), output folder,
# repeat, clause, csv of the first 1,000 rows. Prints one JSON line.
FLINK_SCRIPT = r"""
import json, os, sys, time
t0 = time.perf_counter()
from pyflink.table import EnvironmentSettings, TableEnvironment
env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
conf = env.get_config()
conf.set("parallelism.default", "1")
conf.set("table.exec.resource.default-parallelism", "1")
startup = time.perf_counter() - t0
src, out, repeat, clause, tiny = sys.argv[1:6]

def source(name, path):
    env.execute_sql(f'''CREATE TEMPORARY TABLE {name} (
        symbol STRING, ts BIGINT, price DOUBLE, volume BIGINT,
        rt AS TO_TIMESTAMP_LTZ(CAST(ts / 1000 AS BIGINT), 3),
        WATERMARK FOR rt AS rt
      ) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv')''')

def run(name, table, query=None):
    path = os.path.join(out, name)
    env.execute_sql(f'''CREATE TEMPORARY TABLE {name} (
        symbol STRING, start_ts BIGINT, end_ts BIGINT, bottom DOUBLE
      ) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv')''')
    query = query or f"SELECT * FROM {table} MATCH_RECOGNIZE ({clause})"
    t = time.perf_counter()
    env.execute_sql(f"INSERT INTO {name} {query}").wait()
    return time.perf_counter() - t, path

source("ticks", src)
source("tiny", tiny)
first, path = run("warmup", "ticks")
times = [run(f"run{i}", "ticks")[0] for i in range(int(repeat))]
job = [run(f"tiny{i}", "tiny")[0] for i in range(2)]
# the floor: the same file read and parsed, one row out per symbol, no sort, no match
scan = run("scan", "ticks", "SELECT symbol, MIN(ts), MAX(ts), MIN(price) FROM ticks "
           "GROUP BY symbol")[0]
import pyflink
print(json.dumps({"startup_seconds": startup, "first_seconds": first,
                  "seconds": min(times), "all_seconds": times, "tiny_job_seconds": min(job),
                  "scan_seconds": scan,
                  "output": path, "version": pyflink.version.__version__}))
"""


def _count(text: str) -> int:
    return int(float(text))


def _size(rows: int) -> str:
    """1000000 -> '1e6' (a file name's size tag)."""
    text = str(rows)
    return f"1e{len(text) - 1}" if text.strip("0") == "1" else text


def _canonical(df: pd.DataFrame) -> pd.DataFrame:
    """The result in one order and one set of dtypes (the peer returns the
    integer timestamps as float64; they are exact below 2**53)."""
    last = "bottom" if "bottom" in df.columns else "ticks"     # the V-shape's, the rebound's
    out = df[["symbol", "start_ts", "end_ts", last]].astype(
        {"symbol": str, "start_ts": "int64", "end_ts": "int64",
         last: "float64" if last == "bottom" else "int64"})
    return out.sort_values(["symbol", "start_ts"]).reset_index(drop=True)


def _difference(ours: pd.DataFrame, theirs: pd.DataFrame) -> str:
    """A short account of how two canonical results differ."""
    a, b = _canonical(ours), _canonical(theirs)
    both = a.merge(b, how="outer", indicator=True)
    only_a = both[both["_merge"] == "left_only"]
    only_b = both[both["_merge"] == "right_only"]
    text = (f"{len(a):,} rows against {len(b):,}; {len(only_a):,} only in gpu_mr, "
            f"{len(only_b):,} only in the peer")
    if len(only_a):
        text += "; first only in gpu_mr: " + only_a.iloc[0, :4].to_json()
    if len(only_b):
        text += "; first only in the peer: " + only_b.iloc[0, :4].to_json()
    return text


# The frame's columns the V-shape and the rebound read (partition key, order
# key, the DEFINEs' column): no engine answers without reading each once.
READ_COLUMNS = ("symbol", "ts", "price")


def read_floor(frame: pd.DataFrame, columns=READ_COLUMNS, repeat: int = 15
               ) -> tuple[int, float]:
    """(bytes, seconds): the size of the Arrow buffers behind ``columns`` of
    the frame (values, offsets, string bytes, validity) and the best time to
    read every byte of them once on all cores (a sum per piece, numpy
    releasing the GIL). An engine that answers from the frame reads at least
    these bytes, so ``peer seconds / floor seconds`` bounds any speed-up
    this machine can show against the peer on this data."""
    import concurrent.futures
    import numpy as np
    import pyarrow as pa
    words, size = [], 0
    for name in columns:
        arr = pa.array(frame[name])
        for chunk in (arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]):
            for buf in chunk.buffers():
                if buf is not None:         # read as words: a buffer's last < 8 bytes left
                    size += buf.size
                    words.append(np.frombuffer(buf, np.uint64, count=buf.size // 8))
    step = 1 << 19
    pieces = [(w, lo, min(lo + step, len(w))) for w in words for lo in range(0, len(w), step)]
    best = float("inf")
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        for _ in range(repeat):
            t0 = time.perf_counter()
            list(pool.map(lambda p: p[0][p[1]:p[2]].sum(), pieces))
            best = min(best, time.perf_counter() - t0)
    return size, best


def _load() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (the machines are shared)."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def _load_text(load) -> str:
    return "n/a" if load is None else " ".join(f"{x:.2f}" for x in load)


def _run_flink(args, frame: pd.DataFrame, tmp: str) -> tuple[dict, pd.DataFrame] | None:
    src, tiny = os.path.join(tmp, "ticks.csv"), os.path.join(tmp, "tiny.csv")
    frame.head(1000).to_csv(tiny, index=False, header=False)
    out = os.path.join(tmp, "flink_out")
    proc = subprocess.run([args.peer_python, "-c", FLINK_SCRIPT, src, out, str(args.repeat),
                           FLINK_SQL_CLAUSES[args.flink_define], tiny],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stderr[-4000:], file=sys.stderr)
        print("error: the peer failed (is apache-flink installed there? java on PATH?)",
              file=sys.stderr)
        return None
    peer = json.loads(proc.stdout.strip().splitlines()[-1])
    parts = [p for p in sorted(glob.glob(os.path.join(peer["output"], "**"), recursive=True))
             if os.path.isfile(p) and not os.path.basename(p).startswith(".")]
    names = ["symbol", "start_ts", "end_ts", "bottom"]
    peer_out = pd.concat([pd.read_csv(p, names=names, header=None) for p in parts]
                         + [pd.DataFrame(columns=names)], ignore_index=True)
    peer["rows"] = len(peer_out)
    return peer, peer_out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", choices=PEERS, default=PEERS[0])
    ap.add_argument("--peer-python",
                    help="python of the peer's virtual environment (default: "
                         + ", ".join(f"{v} for {k}" for k, v in DEFAULT_PYTHON.items()) + ")")
    ap.add_argument("--flink-define", choices=sorted(FLINK_SQL_CLAUSES), default="prev",
                    help="Flink's DEFINE: PREV(price) as written (default), or the row before "
                         "named by its variable with LAST(DOWN.price, 1)")
    ap.add_argument("--query", choices=sorted(PEER_QUERIES), default="v_shape",
                    help="pandas-match-recognize's query: the row-local V-shape (default) "
                         "or a rebound whose DEFINE reads the match so far")
    ap.add_argument("--rows", type=_count, default=1_000_000)
    ap.add_argument("--symbols", type=_count, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("-o", "--output",
                    help="JSON file (default benchmarks/results/peers-<date>-<host kind>"
                         "[-...].json, which a second run on the same day replaces)")
    ap.add_argument("--no-json", action="store_true")
    args = ap.parse_args(argv)
    if args.peer_python is None:
        args.peer_python = DEFAULT_PYTHON[args.peer]
    flink = args.peer == "flink"
    if flink and args.query != "v_shape":
        print("error: Flink runs the V-shape only (--query v_shape)", file=sys.stderr)
        return 2
    title, clause = PEER_QUERIES[args.query]
    clause = FLINK_CLAUSE if flink else clause
    if not os.path.exists(args.peer_python):
        print(f"error: no {args.peer_python}; set up the peer's venv (see the module's doc)",
              file=sys.stderr)
        return 2

    import gpu_mr
    table = ticks.generate(args.rows, args.symbols, seed=0)
    frame = table.to_pandas()
    frame["ts"] = frame["ts"].astype("int64")          # microseconds: no clock parsing
    load_before = _load()
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "ticks.csv"), os.path.join(tmp, "peer_out.csv")
        if flink:                                       # Flink's csv format reads no header
            frame.to_csv(src, index=False, header=False)
            t0 = time.perf_counter()
            frame = pd.read_csv(src, names=COLUMNS, header=None)
            read_seconds = time.perf_counter() - t0
            ran = _run_flink(args, frame, tmp)
            if ran is None:
                return 2
            peer, peer_out = ran
        else:
            frame.to_csv(src, index=False)
            frame = pd.read_csv(src)                    # both sides read the same file
            proc = subprocess.run([args.peer_python, "-c", PEER_SCRIPT, src, dst,
                                   str(args.repeat), clause], capture_output=True, text=True)
            if proc.returncode != 0:
                print(proc.stderr[-2000:], file=sys.stderr)
                print("error: the peer failed (is pandas-match-recognize installed there?)",
                      file=sys.stderr)
                return 2
            peer = json.loads(proc.stdout.strip().splitlines()[-1])
            peer_out = pd.read_csv(dst)

    gpu_mr.match_recognize(frame.head(1000), clause, engine="cpu")
    t0 = time.perf_counter()
    gpu_mr.match_recognize(frame, clause, engine="cpu")    # the parallel kernels compile
    first = time.perf_counter() - t0
    best = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ours = gpu_mr.match_recognize(frame, clause, engine="cpu")
        best = min(best, time.perf_counter() - t0)
    identical = _canonical(ours).equals(_canonical(peer_out))
    ratio = peer["seconds"] / best
    load_after = _load()
    if flink:
        # Flink orders by ts truncated to milliseconds: ties would make its order arbitrary.
        ms_ties = int(frame.assign(ms=frame["ts"] // 1000).duplicated(["symbol", "ms"]).sum())
        lines = [f"{args.rows:,} ticks, {args.symbols} symbols, V-shape ending at the first "
                 f"rise (STRT DOWN+ UP), {len(ours):,} matches; rows sharing a (symbol, ms): "
                 f"{ms_ties}",
                 f"Flink SQL {peer['version']} (batch, parallelism 1, DEFINE with "
                 f"{'PREV(price)' if args.flink_define == 'prev' else 'LAST(DOWN.price, 1)'}"
                 f"): best "
                 f"{peer['seconds']:.3f} s ({args.rows / peer['seconds']:,.0f} rows/s); first "
                 f"{peer['first_seconds']:.3f} s; JVM start {peer['startup_seconds']:.1f} s; "
                 f"a 1,000-row job {peer['tiny_job_seconds']:.3f} s; reading the CSV "
                 f"alone (GROUP BY symbol) {peer['scan_seconds']:.3f} s",
                 f"gpu_mr cpu: best {best:.3f} s ({args.rows / best:,.0f} rows/s) on the "
                 f"frame; first {first:.3f} s; pandas reads the CSV in {read_seconds:.3f} s",
                 f"Flink / gpu_mr: {ratio:.0f}x; with the CSV read on both sides "
                 f"{peer['seconds'] / (best + read_seconds):.0f}x; identical matches: "
                 f"{'yes' if identical else 'NO'}",
                 f"load average (1, 5, 15 min) {_load_text(load_before)} before, "
                 f"{_load_text(load_after)} after"]
    else:
        ms_ties = None
        floor_bytes, floor = read_floor(frame)
        lines = [f"{args.rows:,} ticks, {args.symbols} symbols, {title}, "
                 f"{len(ours):,} matches",
                 f"pandas-match-recognize: {peer['seconds']:.3f} s "
                 f"({args.rows / peer['seconds']:,.0f} rows/s)",
                 f"gpu_mr cpu:             {best:.3f} s ({args.rows / best:,.0f} rows/s)",
                 f"speed-up: {ratio:.0f}x; identical matches: {'yes' if identical else 'NO'}",
                 f"floor: reading the {floor_bytes / 1e6:.0f} MB behind "
                 f"{', '.join(READ_COLUMNS)} once on {os.cpu_count()} cores takes "
                 f"{floor * 1e3:.1f} ms ({floor_bytes / floor / 1e9:.0f} GB/s); gpu_mr takes "
                 f"{best / floor:.1f}x that; no engine reading them can be more than "
                 f"{peer['seconds'] / floor:.0f}x the peer on this machine",
                 f"load average (1, 5, 15 min) {_load_text(load_before)} before, "
                 f"{_load_text(load_after)} after"]
    if not identical:
        lines.append("difference: " + _difference(ours, peer_out))
    print("\n".join(lines))
    if not args.no_json:
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        import platform
        name = (f"peers-{'flink-' if flink else ''}{_dt.date.today().isoformat()}-"
                f"{platform.machine()}-{os.cpu_count()}cpu"
                f"{'-' + _size(args.rows) if flink else ''}"
                f"{'-' + args.query if args.query != 'v_shape' else ''}"
                f"{'-last' if flink and args.flink_define == 'last' else ''}.json")
        record = {"rows": args.rows, "symbols": args.symbols, "query": clause,
                  "peer": args.peer, "peer_seconds": peer["seconds"],
                  "gpu_mr_cpu_seconds": best, "speedup": ratio,
                  "matches": len(ours), "peer_matches": len(peer_out),
                  "identical": identical, "repeat": args.repeat,
                  **({} if flink else {"read_floor_bytes": floor_bytes,
                                       "read_floor_seconds": floor,
                                       "speedup_bound_by_read_floor": peer["seconds"] / floor}),
                  "load_average_1_5_15_min_before": load_before,
                  "load_average_1_5_15_min_after": load_after,
                  "summary": lines}
        from run import environment                     # versions, git commit, host kind
        record["environment"] = environment()
        if flink:
            record.update({"peer_query": FLINK_SQL_CLAUSES[args.flink_define],
                           "flink_define": args.flink_define, "peer_version": peer["version"],
                           "peer_first_seconds": peer["first_seconds"],
                           "peer_all_seconds": peer["all_seconds"],
                           "peer_startup_seconds": peer["startup_seconds"],
                           "peer_1000_row_job_seconds": peer["tiny_job_seconds"],
                           "peer_scan_seconds": peer["scan_seconds"],
                           "gpu_mr_cpu_first_seconds": first,
                           "pandas_read_csv_seconds": read_seconds,
                           "speedup_with_csv_read": peer["seconds"] / (best + read_seconds),
                           "ms_ties": ms_ties, "peer_settings": "batch mode, parallelism 1, "
                           "filesystem csv source and sink"})
        path = args.output or os.path.join(HERE, "results", name)
        with open(path, "w") as f:
            json.dump(record, f, indent=1)
        print(f"wrote {args.output or 'benchmarks/results/' + name}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
