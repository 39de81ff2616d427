"""gpu_mr on Spark: MATCH_RECOGNIZE for PySpark DataFrames and Spark SQL.

``match_recognize(df, clause)`` and ``sql(spark, query)`` return lazy Spark
DataFrames. Execution (execution.py): repartition by the PARTITION BY keys,
sort within partitions by (keys, ORDER BY keys, input order), then
``mapInArrow`` streams each task's record batches through the engine, a
PARTITION BY group spanning any number of batches. Types and the sort order
are in schema.py, the statement splitting for Spark SQL in sql.py, sessions
gpu_mr starts (local mode, the CLI, the tests) in session.py. docs/spark.md
covers running on a RAPIDS cluster.

PySpark is imported only when these functions run, so ``import gpu_mr.spark``
works without it (and raises a clear error on use).
"""

from __future__ import annotations

from .execution import match_recognize, translate_error
from .session import SparkUnavailableError, local_session
from .sql import sql

__all__ = ["match_recognize", "sql", "local_session", "translate_error",
           "SparkUnavailableError"]
