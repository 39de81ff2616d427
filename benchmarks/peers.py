"""gpu_mr's CPU engine against a peer MATCH_RECOGNIZE on the same query and data.

What: generates sorted ticks (``ticks.py``), writes them to CSV, runs the
V-shape query with ``pandas-match-recognize`` (PyPI ``pandas-match-recognize``,
a pure pandas implementation) in the peer's own Python -- it pins its own
numpy and pandas, so it lives in a virtual environment of its own -- and with
``gpu_mr.match_recognize(engine="cpu")`` here, checks that both give the same
matches, and prints the speed ratio measured in this one run. JSON goes to
``benchmarks/results/peers-<date>-<host kind>.json``.

Usage::

    python -m venv peer-venv && peer-venv/bin/pip install pandas-match-recognize
    python benchmarks/peers.py --peer-python peer-venv/bin/python --rows 1e6

Both sides read the same CSV into pandas and are timed on the in-memory
frame, best of ``--repeat`` runs after one warm-up (imports, JIT), so file
reading is not measured.
"""

from __future__ import annotations

import argparse
import datetime as _dt
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

# Measures the peer computes (its MIN(DOWN.price) came back NULL, and then
# every measure did): the comparison stays on ground both engines cover.
CLAUSE = """PARTITION BY symbol ORDER BY ts
  MEASURES FIRST(STRT.ts) AS start_ts, LAST(UP.ts) AS end_ts, LAST(DOWN.price) AS bottom
  ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
  PATTERN (STRT DOWN+ UP+)
  DEFINE DOWN AS price < PREV(price), UP AS price > PREV(price)"""

# Runs in the peer's interpreter: argv = csv in, csv out, repeat.
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


def _count(text: str) -> int:
    return int(float(text))


def _canonical(df: pd.DataFrame) -> pd.DataFrame:
    """The result in one order and one set of dtypes (the peer returns the
    integer timestamps as float64; they are exact below 2**53)."""
    out = df[["symbol", "start_ts", "end_ts", "bottom"]].astype(
        {"symbol": str, "start_ts": "int64", "end_ts": "int64", "bottom": "float64"})
    return out.sort_values(["symbol", "start_ts"]).reset_index(drop=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer-python", required=True,
                    help="python of a virtual environment with pandas-match-recognize")
    ap.add_argument("--rows", type=_count, default=1_000_000)
    ap.add_argument("--symbols", type=_count, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-json", action="store_true")
    args = ap.parse_args(argv)

    import gpu_mr
    table = ticks.generate(args.rows, args.symbols, seed=0)
    frame = table.to_pandas()
    frame["ts"] = frame["ts"].astype("int64")          # microseconds: no clock parsing
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "ticks.csv"), os.path.join(tmp, "peer_out.csv")
        frame.to_csv(src, index=False)
        frame = pd.read_csv(src)                        # both sides read the same file
        proc = subprocess.run([args.peer_python, "-c", PEER_SCRIPT, src, dst, str(args.repeat),
                               CLAUSE], capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr[-2000:], file=sys.stderr)
            print("error: the peer failed (is pandas-match-recognize installed there?)",
                  file=sys.stderr)
            return 2
        peer = json.loads(proc.stdout.strip().splitlines()[-1])
        peer_out = pd.read_csv(dst)

    gpu_mr.match_recognize(frame.head(1000), CLAUSE, engine="cpu")
    best = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ours = gpu_mr.match_recognize(frame, CLAUSE, engine="cpu")
        best = min(best, time.perf_counter() - t0)
    identical = _canonical(ours).equals(_canonical(peer_out))
    ratio = peer["seconds"] / best
    lines = [f"{args.rows:,} ticks, {args.symbols} symbols, V-shape (STRT DOWN+ UP+), "
             f"{len(ours):,} matches",
             f"pandas-match-recognize: {peer['seconds']:.3f} s ({args.rows / peer['seconds']:,.0f} rows/s)",
             f"gpu_mr cpu:             {best:.3f} s ({args.rows / best:,.0f} rows/s)",
             f"speed-up: {ratio:.0f}x; identical matches: {'yes' if identical else 'NO'}"]
    print("\n".join(lines))
    if not args.no_json:
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        import platform
        name = (f"peers-{_dt.date.today().isoformat()}-{platform.machine()}-"
                f"{os.cpu_count()}cpu.json")
        with open(os.path.join(HERE, "results", name), "w") as f:
            json.dump({"rows": args.rows, "symbols": args.symbols, "query": CLAUSE,
                       "peer": "pandas-match-recognize", "peer_seconds": peer["seconds"],
                       "gpu_mr_cpu_seconds": best, "speedup": ratio,
                       "matches": len(ours), "identical": identical, "summary": lines},
                      f, indent=1)
        print(f"wrote benchmarks/results/{name}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
