"""Spark sessions gpu_mr starts, and the checks that PySpark is usable.

What: ``local_session(master)`` starts (or returns) a SparkSession set up for
gpu_mr: Python workers run the interpreter running this code, Parquet is
written with microsecond timestamps, and the web UI is off.
``require_pyspark()`` turns a missing PySpark or Java into a gpu_mr error
that says what to install.
Why: PySpark's Python workers start the interpreter named by
``PYSPARK_PYTHON`` (or ``spark.pyspark.python``), not the driver's; in a
virtual environment the workers would otherwise lack gpu_mr, numba and the
rest. Spark writes INT96 timestamps to Parquet unless told otherwise, which
other readers handle poorly.
Cost: starting a JVM takes several seconds (about 10 s on a 2-core machine);
a session already running is reused, not restarted.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import warnings
from typing import Mapping, Optional

from ..errors import GpuMrError

#: Settings of every session gpu_mr starts (a caller's ``conf`` wins).
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.session.timeZone": "UTC",
}


class SparkUnavailableError(GpuMrError):
    """PySpark or the Java runtime it needs is missing."""

    kind = "unsupported"


def require_pyspark():
    """Import pyspark, or raise :class:`SparkUnavailableError` saying how to get it.

    Returns
    -------
    module
        The ``pyspark`` module.

    Examples
    --------
    >>> require_pyspark().__name__  # doctest: +SKIP
    'pyspark'
    """
    try:
        import pyspark
    except ImportError:
        raise SparkUnavailableError(
            "gpu_mr.spark needs PySpark: pip install 'gpu_mr[spark]' (and a Java 17+ "
            "runtime)", code="no_pyspark") from None
    return pyspark


def java_available() -> bool:
    """Whether a Java runtime can be found (``JAVA_HOME`` or ``java`` on PATH).

    >>> isinstance(java_available(), bool)
    True
    """
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return True
    return shutil.which("java") is not None


@contextlib.contextmanager
def quiet_pandas_warning():
    """Silence PySpark's "pandas >= 3 is not fully supported" warning.

    gpu_mr's Spark path is Arrow only (``mapInArrow``, ``toArrow``): pandas
    never carries the data, so the warning does not apply to it.

    >>> with quiet_pandas_warning():
    ...     pass
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas",
                                category=FutureWarning)
        yield


def local_cores(master: str) -> int:
    """Cores of a ``local``, ``local[N]``, ``local[*]`` or ``local[N,F]`` master; 0 otherwise.

    >>> local_cores("local[4]"), local_cores("local[2,3]"), local_cores("yarn")
    (4, 2, 0)
    """
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if not m:
        return 0
    if m.group(1) in (None, "*"):
        return 1 if m.group(1) is None else (os.cpu_count() or 1)
    return int(m.group(1))


def local_session(master: str = "local[*]", app_name: str = "gpu_mr",
                  conf: Optional[Mapping[str, str]] = None):
    """A SparkSession for gpu_mr: local by default, any master given.

    Python workers run ``sys.executable`` (unless ``PYSPARK_PYTHON`` is
    already set), so a virtual environment's packages are there; see
    :data:`DEFAULT_CONF` for the other settings. An active session is
    returned as it is (Spark keeps one per JVM) with ``conf`` applied where
    Spark allows changing it at run time.

    Parameters
    ----------
    master : str
        ``local[*]``, ``local[2]``, ``spark://host:7077``, ``yarn``, ...
    app_name : str
    conf : mapping of str to str, optional
        More Spark settings, e.g. ``{"spark.executor.memory": "2g"}``.

    Returns
    -------
    pyspark.sql.SparkSession

    Raises
    ------
    SparkUnavailableError
        When PySpark is not installed or no Java runtime is found.

    Examples
    --------
    >>> spark = local_session("local[2]", conf={"spark.sql.shuffle.partitions": "2"})  # doctest: +SKIP
    """
    require_pyspark()
    if not java_available():
        raise SparkUnavailableError(
            "gpu_mr.spark needs a Java runtime (Java 17 or newer) for a local Spark "
            "session: install one and put it on PATH or set JAVA_HOME", code="no_java")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    settings = dict(DEFAULT_CONF)
    settings["spark.pyspark.python"] = os.environ["PYSPARK_PYTHON"]
    cores = local_cores(master)
    if cores:
        # Spark's 200 shuffle partitions are 200 tasks (and Python worker
        # round trips) for a few cores: twice the cores keeps them busy.
        settings["spark.sql.shuffle.partitions"] = str(2 * cores)
    settings.update(conf or {})
    active = SparkSession.getActiveSession()
    if active is not None:
        for key, value in (conf or {}).items():
            with contextlib.suppress(Exception):   # static settings cannot change
                active.conf.set(key, value)
        return active
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    with quiet_pandas_warning():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
