"""``gpu_mr.spark.sql``: a full Spark SQL statement whose FROM holds MATCH_RECOGNIZE.

What: the statement is split around each ``source MATCH_RECOGNIZE (...)
[AS] alias`` table factor by gpu_mr's own splitter (``outer_sql``); each
clause runs through :func:`gpu_mr.spark.match_recognize` over its source (a
table or view name -> ``spark.table``; a subquery or WITH query ->
``spark.sql``), its result is registered as a temporary view, and Spark SQL
runs the rest of the statement over those views.
Why: Spark SQL has no MATCH_RECOGNIZE; everything around it (joins,
filters, aggregates, ordering) stays in Spark, lazily, as one DataFrame.
Errors: gpu_mr's errors carry line and column in the caller's statement;
Spark's parse and analysis errors are re-raised as gpu_mr errors, with the
position of the name they mention when it occurs once in the statement.
Cost: analysis only on the driver; every view is dropped once the outer
statement is analysed (the returned DataFrame keeps its plan).
"""

from __future__ import annotations

import re

from ..errors import AnalysisError, SqlSyntaxError, UnsupportedError
from ..outer_sql import Backend, MatchRecognizeSite, SqlStatement, _tokens
from ..syntax.tokens import QIDENT
from ..window_sql import has_pattern_window
from . import execution
from .session import require_pyspark

_SPARK_CONTEXT = re.compile(r"\s*(?:== SQL.*|JVM stacktrace:.*)", re.DOTALL)
_SPARK_NAMES = (
    re.compile(r"The table or view `?([^`\s]+?)`? cannot be found"),
    re.compile(r"with name `(?:[^`]+`\.`)*([^`]+)` cannot be resolved"),
    re.compile(r"Syntax error at or near '([^']+)'"),
    re.compile(r"function `?([^`\s]+?)`? cannot be found"),
)


def sql(spark, query: str, engine: str = "auto"):
    """Run a Spark SQL statement whose FROM holds a MATCH_RECOGNIZE.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
    query : str
        ``SELECT ...`` or ``WITH ... SELECT ...`` in Spark SQL. A factor's
        source is a table or view name (as ``spark.table`` resolves it,
        qualified names not included), a parenthesised subquery, or a WITH
        query of the statement.
    engine : {"auto", "gpu", "cpu", "reference"}
        As for :func:`gpu_mr.spark.match_recognize`.

    Returns
    -------
    pyspark.sql.DataFrame
        The statement's result, lazy.

    Raises
    ------
    SqlSyntaxError, AnalysisError
        With line and column in ``query``: the clause's own errors, a source
        that names no table or view, Spark's parse and analysis errors.
    UnsupportedError
        WINDOW-clause pattern recognition (in-process ``gpu_mr.sql`` only).

    Examples
    --------
    >>> import gpu_mr.spark  # doctest: +SKIP
    >>> gpu_mr.spark.sql(spark, '''
    ...     SELECT m.symbol, count(*) AS v_shapes
    ...     FROM ticks MATCH_RECOGNIZE (
    ...         PARTITION BY symbol ORDER BY ts
    ...         MEASURES LAST(B.price) AS bottom
    ...         PATTERN (A B+ C+)
    ...         DEFINE B AS price < PREV(price), C AS price > PREV(price)) AS m
    ...     GROUP BY m.symbol''').show()  # doctest: +SKIP
    """
    require_pyspark()
    if not isinstance(query, str):
        raise SqlSyntaxError(f"the query must be a string, got {type(query).__name__}",
                             code="not_text")
    tokens = _tokens(query)
    if has_pattern_window(tokens):
        raise UnsupportedError(
            "pattern recognition in the WINDOW clause runs in gpu_mr.sql (DuckDB), not yet "
            "on Spark; use a MATCH_RECOGNIZE table factor", engine="spark",
            construct="WINDOW ... PATTERN")
    backend = SparkBackend(spark, engine)
    try:
        return backend.evaluate(SqlStatement(query))
    finally:
        backend.close()


class SparkBackend(Backend):
    """Spark SQL as the engine around the clauses (see outer_sql.Backend)."""

    def __init__(self, spark, engine: str):
        self.spark = spark
        self.engine = engine
        self.views: list[str] = []
        self.readable: dict[str, str] = {}
        self._name_tokens: dict = {}

    def close(self) -> None:
        for name in self.views:
            try:
                self.spark.catalog.dropTempView(name)
            except Exception:      # the session is gone; nothing to clean
                pass

    def table_names(self) -> list[str]:
        return []

    def _resolve_table(self, tok) -> str:
        # Spark quotes names with backticks; a "quoted" name keeps its case.
        name = (f"`{str(tok.value).replace('`', '``')}`" if tok.kind == QIDENT
                else str(tok.value))
        self._name_tokens[name] = tok
        return name

    def table_source(self, name: str):
        return self._guard(lambda: self.spark.table(name), None, at=self._name_tokens[name])

    def query_source(self, sql: str, site: MatchRecognizeSite):
        kw = site.keyword
        return self._guard(lambda: self.spark.sql(sql),
                           f"the source of the MATCH_RECOGNIZE at line {kw.line}, column "
                           f"{kw.column}")

    def run_clause(self, source, text: str, start: int, end: int):
        return execution.match_recognize(source, text, self.engine, _span=(start, end))

    def register(self, result, name: str) -> None:
        result.createOrReplaceTempView(name)
        self.views.append(name)

    def _replace(self, site):
        replacement = super()._replace(site)
        name = self._done[site.start]
        self.readable[name] = (f"MATCH_RECOGNIZE result {site.alias.text}"
                               if site.alias is not None else "MATCH_RECOGNIZE result")
        return replacement

    def run(self, sql: str):
        return self._guard(lambda: self.spark.sql(sql), None)

    def _guard(self, action, where, at=None):
        from pyspark.errors import AnalysisException, ParseException
        try:
            return action()
        except ParseException as exc:
            raise self._translate(exc, where, SqlSyntaxError, "outer_syntax", at) from None
        except AnalysisException as exc:
            raise self._translate(exc, where, AnalysisError, "outer_sql", at) from None

    def _translate(self, exc, where, cls, code, at):
        text = str(getattr(exc, "getMessage", lambda: str(exc))() or exc)
        message = _SPARK_CONTEXT.sub("", text).strip()
        for internal, readable in self.readable.items():
            message = message.replace(f"`{internal}`", readable).replace(internal, readable)
        message = message.replace("__gpu_mr_src", "subquery")
        if where:
            message = f"in {where}: {message}"
        line = column = None
        if at is not None:
            line, column = at.line, at.column
        else:
            for pattern in _SPARK_NAMES:
                m = pattern.search(text)
                if m:
                    hits = self._statement.positions_of(m.group(1).split(".")[-1])
                    if len(hits) == 1:
                        line, column = hits[0].line, hits[0].column
                    break
        return cls(message, code=code, line=line, column=column)
