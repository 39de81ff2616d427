"""Spark end-to-end against the floor of any Spark-based matcher.

What: for each size, the same Parquet ticks read by local Spark go through
(1) the floor: ``repartition(symbol).sortWithinPartitions(symbol, ts)``
then an identity ``mapInArrow`` (every row shuffled, sorted and sent through
a Python worker and back, nothing matched), (1b) the same with a
``mapInArrow`` that reads every batch and returns nothing (the floor without
the way back, closer to a matcher whose output is small), and (2)
``gpu_mr.spark.match_recognize`` with a query; both end in Spark's ``noop``
writer, so every row is computed and nothing is collected. Prints times,
rows/s and the ratios ours / floor and ours / draining floor (DESIGN.md §9: a ratio measured in one
run), checks at the smallest size that the Spark result equals
``gpu_mr.match_recognize`` row for row, and writes JSON to
``benchmarks/results/spark-<date>-<host kind>.json``.
Why that floor: a Spark matcher cannot avoid the shuffle, the sort and the
Arrow round trip to Python; the ratio shows what the matching itself adds.
Cost: generating the data (about a second per million rows), then
``repeat`` timed runs of each pipeline after one warm-up run.

Command line::

    python benchmarks/spark_bench.py                     # 1e6 and 1e7 rows, local[*]
    python benchmarks/spark_bench.py --rows 1e6 --repeat 1 --no-json
    python benchmarks/spark_bench.py --single 5e7 --executor-memory 2g --rows 0
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import pyarrow as pa  # noqa: E402

import gpu_mr  # noqa: E402
import gpu_mr.spark as gspark  # noqa: E402
from gpu_mr.demo import V_SHAPE  # noqa: E402
from report import fmt_rate  # noqa: E402
from run import environment, host_kind  # noqa: E402
import ticks  # noqa: E402

RESULTS_DIR = os.path.join(HERE, "results")

#: Queries: row-local ones (the goal's subject) by default.
QUERIES = {
    "v_shape": V_SHAPE,
    "v_simple": """PARTITION BY symbol ORDER BY ts
        MEASURES FIRST(A.ts) AS start_ts, LAST(D.price) AS bottom, LAST(U.ts) AS end_ts
        PATTERN (A D+ U+) DEFINE D AS price < PREV(price), U AS price > PREV(price)""",
    "up_runs": """PARTITION BY symbol ORDER BY ts
        MEASURES FIRST(A.ts) AS start_ts, LAST(U.ts) AS end_ts, COUNT(U.*) AS ups
        PATTERN (A U{3,}) DEFINE U AS price > PREV(price)""",
}


def _count(text: str) -> int:
    return int(float(text))


def identity(batches):
    yield from batches


def drain(batches):
    """Reads every batch and returns nothing: the floor without the way back."""
    for _ in batches:
        pass
    return
    yield


def floor_frame(df, keys, order, function=identity):
    from pyspark.sql import functions as F
    staged = df.repartition(*[F.col(k) for k in keys]) if keys else df.repartition(1)
    staged = staged.sortWithinPartitions(*(keys + order))
    with gspark.session.quiet_pandas_warning():
        return staged.mapInArrow(function, df.schema)


def timed(frame) -> float:
    t0 = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0


def best_of(make, repeat: int) -> float:
    timed(make())                                   # warm-up: JIT in the workers, JVM
    return min(timed(make()) for _ in range(repeat))


def same_rows(spark_result: pa.Table, local: pa.Table) -> bool:
    """Row-for-row equality after sorting both by every column."""
    keys = [(c, "ascending") for c in local.column_names]
    a = spark_result.cast(pa.schema([f.with_type(local.schema.field(f.name).type)
                                     for f in spark_result.schema]))
    return a.sort_by(keys).equals(local.sort_by(keys))


def bench_size(spark, workdir: str, rows: int, symbols: int, queries, repeat: int,
               check: bool, log) -> list:
    path = os.path.join(workdir, f"ticks-{rows}-{symbols}.parquet")
    table = ticks.generate(rows, symbols, seed=0, order="time")
    import pyarrow.parquet as pq
    pq.write_table(table, path, coerce_timestamps="us", row_group_size=1 << 20)
    df = spark.read.parquet(path)
    keys = ["symbol"] if symbols else []
    floor = best_of(lambda: floor_frame(df, keys, ["ts"]), repeat)
    drained = best_of(lambda: floor_frame(df, keys, ["ts"], drain), repeat)
    log(f"{rows:>11,} rows  {symbols:>6} symbols  floor (identity mapInArrow) "
        f"{floor:7.2f} s  {fmt_rate(rows / floor):>7} rows/s; draining mapInArrow "
        f"(no rows back) {drained:7.2f} s")
    out = []
    for name in queries:
        clause = QUERIES[name]
        if not symbols:
            clause = clause.replace("PARTITION BY symbol", "")
        ours = best_of(lambda: gspark.match_recognize(df, clause), repeat)
        rec = {"rows": rows, "symbols": symbols, "query": name, "floor_s": round(floor, 3),
               "drain_s": round(drained, 3), "gpu_mr_s": round(ours, 3),
               "ratio": round(ours / floor, 3), "ratio_to_drain": round(ours / drained, 3),
               "floor_rows_per_s": rows / floor, "gpu_mr_rows_per_s": rows / ours}
        if check:
            got = gspark.match_recognize(df, clause).toArrow()
            rec["identical"] = same_rows(got, gpu_mr.match_recognize(table, clause))
        log(f"{'':>11}  {name:<14} gpu_mr.spark {ours:7.2f} s  {fmt_rate(rows / ours):>7} "
            f"rows/s  ratio {ours / floor:5.2f}x the floor ({ours / drained:5.2f}x draining)"
            + (f"  identical: {rec['identical']}" if "identical" in rec else ""))
        out.append(rec)
    return out


def single_partition(spark, workdir: str, rows: int, log) -> dict:
    """One PARTITION BY group of ``rows`` rows, written in chunks (bounded memory)."""
    path = os.path.join(workdir, f"single-{rows}.parquet")
    ticks.write_parquet(path, rows, 1, seed=0)
    df = spark.read.parquet(path)
    t0 = time.perf_counter()
    # v_simple: the one symbol's cents-rounded prices rarely give V_SHAPE's
    # three-row legs, and a run with no match would prove little.
    n = gspark.match_recognize(df, QUERIES["v_simple"]).count()
    seconds = time.perf_counter() - t0
    log(f"single partition of {rows:,} rows: {n:,} matches in {seconds:.1f} s "
        f"({fmt_rate(rows / seconds)} rows/s)")
    return {"rows": rows, "matches": n, "seconds": round(seconds, 2)}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1e6,1e7", help="sizes, comma-separated (0: none)")
    ap.add_argument("--symbols", type=_count, default=100, help="PARTITION BY groups")
    ap.add_argument("--queries", default="v_shape", help=f"of {', '.join(QUERIES)}")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs, best kept")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--executor-memory", default=None,
                    help="driver memory in local mode (the executor is the driver)")
    ap.add_argument("--single", type=_count, default=0,
                    help="also run one partition of this many rows")
    ap.add_argument("--no-json", action="store_true")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    sizes = [_count(x) for x in args.rows.split(",") if _count(x) > 0]
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    conf = {"spark.sql.shuffle.partitions": str(os.cpu_count() or 2),
            "spark.ui.showConsoleProgress": "false"}
    if args.executor_memory:
        conf["spark.driver.memory"] = args.executor_memory
        conf["spark.executor.memory"] = args.executor_memory
    spark = gspark.local_session(args.master, app_name="gpu_mr-bench", conf=conf)

    def log(text):
        print(text, flush=True)

    started = _dt.datetime.now(_dt.timezone.utc)
    workdir = tempfile.mkdtemp(prefix="gpu_mr_spark_bench_")
    records, single = [], None
    try:
        for i, rows in enumerate(sizes):
            records += bench_size(spark, workdir, rows, args.symbols, queries, args.repeat,
                                  check=(i == 0), log=log)
        if args.single:
            single = single_partition(spark, workdir, args.single, log)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    import pyspark
    report = {"command": "python benchmarks/spark_bench.py " + " ".join(argv or sys.argv[1:]),
              "started_utc": started.isoformat(timespec="seconds"),
              "environment": dict(environment(), pyspark=pyspark.__version__,
                                  master=args.master),
              "records": records, "single_partition": single}
    if not args.no_json:
        os.makedirs(RESULTS_DIR, exist_ok=True)
        kind = "" if sizes else f"-single-{args.single:.0e}".replace("+0", "")
        out = os.path.join(RESULTS_DIR, f"spark-{started:%Y-%m-%d}-{host_kind()}{kind}.json")
        with open(out, "w") as f:
            json.dump(report, f, indent=1)
        log(f"wrote benchmarks/results/{os.path.basename(out)}")
    return 0 if all(r.get("identical", True) for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
