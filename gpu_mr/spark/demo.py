"""``python -m gpu_mr.spark.demo``: the V-shape query on Spark, checked against in-process.

What: generates deterministic synthetic ticks (``gpu_mr.demo``), hands them
to Spark, runs ``gpu_mr.demo.V_SHAPE`` through ``gpu_mr.spark.match_recognize``
and a GROUP BY around it through ``gpu_mr.spark.sql``, prints both, and checks
the matches equal ``gpu_mr.match_recognize`` on the same rows (exit status 1
if not). With ``--rapids-jar`` the session loads the RAPIDS Accelerator so
the shuffle and sort run on the GPU (settings: docs/spark.md).
Why: one command the container images run (docker/) and the tests call.
Cost: a Spark start (seconds), one shuffle of ``--rows`` rows, one matching
pass, and the same matching in process for the check.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Optional, Sequence

#: Settings that put Spark's SQL operators on the GPU (docs/spark.md explains each).
RAPIDS_CONF = {
    "spark.plugins": "com.nvidia.spark.SQLPlugin",
    "spark.rapids.sql.enabled": "true",
    "spark.rapids.memory.pinnedPool.size": "2g",
    "spark.rapids.sql.concurrentGpuTasks": "2",
    "spark.rapids.memory.gpu.allocFraction": "0.5",
    "spark.rapids.python.memory.gpu.allocFraction": "0.3",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
}


def session_conf(rapids_jar: Optional[str]) -> dict:
    """Spark settings for the demo session; with a RAPIDS jar, the plugin's.

    >>> session_conf(None)
    {'spark.ui.showConsoleProgress': 'false'}
    >>> session_conf("rapids.jar")["spark.plugins"]
    'com.nvidia.spark.SQLPlugin'
    """
    conf = {"spark.ui.showConsoleProgress": "false"}
    if rapids_jar:
        conf.update(RAPIDS_CONF)
        conf["spark.jars"] = rapids_jar
    return conf


def main(argv: Optional[Sequence[str]] = None, spark=None) -> int:
    """Run the demo; returns the exit status (0: Spark and in-process agree).

    ``spark``: a session to use instead of starting one (tests).
    """
    ap = argparse.ArgumentParser(prog="python -m gpu_mr.spark.demo",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--symbols", type=int, default=8)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--rapids-jar", default=None, metavar="JAR",
                    help="the rapids-4-spark jar: run Spark's shuffle and sort on the GPU")
    ap.add_argument("--engine", default="auto")
    args = ap.parse_args(argv)

    import pyarrow as pa
    import gpu_mr
    import gpu_mr.spark as gspark
    from gpu_mr.demo import V_SHAPE, generate_ticks
    from pyspark.sql.pandas.types import from_arrow_schema

    if spark is None:
        spark = gspark.local_session(args.master, app_name="gpu_mr-demo",
                                     conf=session_conf(args.rapids_jar))
    ticks = generate_ticks(rows=args.rows, symbols=args.symbols, seed=0)
    with gspark.session.quiet_pandas_warning():
        df = spark.createDataFrame(ticks, schema=from_arrow_schema(ticks.schema,
                                                                   prefer_timestamp_ntz=True))
    df.createOrReplaceTempView("ticks")
    print(f"Spark {spark.version}, master {spark.sparkContext.master}; {args.rows:,} ticks, "
          f"{args.symbols} symbols")
    print("== V-shape clause through gpu_mr.spark.match_recognize")
    t0 = time.perf_counter()
    matches = gspark.match_recognize(df, V_SHAPE, engine=args.engine)
    got = matches.toArrow()
    seconds = time.perf_counter() - t0
    matches.orderBy("symbol", "start_ts").show(5, truncate=False)
    print(f"{got.num_rows} matches in {seconds:.2f} s")
    print("== GROUP BY around the clause through gpu_mr.spark.sql")
    gspark.sql(spark, f"""
        SELECT m.symbol, count(*) AS v_shapes, min(m.bottom) AS lowest
        FROM ticks MATCH_RECOGNIZE ({V_SHAPE}) AS m
        GROUP BY m.symbol ORDER BY m.symbol""", engine=args.engine).show()
    want = gpu_mr.match_recognize(ticks, V_SHAPE)
    keys = [(c, "ascending") for c in want.column_names]
    got = got.cast(pa.schema([f.with_type(want.schema.field(f.name).type) for f in got.schema]))
    same = got.sort_by(keys).equals(want.sort_by(keys))
    print("identical to gpu_mr.match_recognize in process:", same)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
