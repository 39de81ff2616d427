"""``gpu_mr.sql``: run a full SELECT whose FROM holds MATCH_RECOGNIZE clauses.

What: splits the statement around each ``source MATCH_RECOGNIZE (...) [AS]
alias`` table factor, evaluates the clause with gpu_mr, and lets a real SQL
engine (DuckDB in process; Spark SQL through the same :class:`Backend`
interface) run everything else: the source subqueries and the outer
statement, which sees each clause result as a registered table.
Why text splitting: no SQL parser we can use parses the clause (sqlglot lacks
SUBSET and keeps PATTERN as raw text), and only the table factors need to be
found. The shared tokenizer (``syntax/tokens.py``) knows strings, quoted
identifiers and comments, so ``'MATCH_RECOGNIZE ('`` in a literal or a
comment is never mistaken for the clause, and every position we report is
one in the caller's text.
How a factor is found: a ``MATCH_RECOGNIZE`` token followed by ``(``; the
clause body is the balanced parentheses after it; the source is the name, the
parenthesised subquery or the table-function call before it (with an
optional alias of its own, which the clause ignores); the factor's alias
follows the closing parenthesis. A source subquery that itself holds a
MATCH_RECOGNIZE is evaluated first (innermost first). A named source is a
visible WITH query if one has that name, else a keyword table.
Cost: one tokenizer pass over the statement, linear bookkeeping per factor,
then the engines' own costs; each table crosses into DuckDB as Arrow (no
copy for Arrow input, one conversion for pandas).
"""

from __future__ import annotations

import abc

import re
from dataclasses import dataclass
from typing import Callable, Mapping

import pyarrow as pa

from .errors import AnalysisError, DataError, GpuMrError, SqlSyntaxError
from .frames import from_arrow, to_arrow
from .window_sql import INPUT_NAME as WINDOW_INPUT
from .window_sql import has_pattern_window, rewrite_pattern_windows
from .syntax.tokens import EOF, IDENT, OP, QIDENT, Positions, Token, tokenize

__all__ = [
    "MatchRecognizeSite", "SqlStatement", "Backend", "run_sql",
    "find_match_recognize", "extract_clause",
]

# Words that end a table factor or stand before one, so they can be neither
# a table name nor an alias written without AS.
_RESERVED = frozenset("""
    ALL AND ANTI AS ASOF BETWEEN BY CASE CROSS DISTINCT ELSE END EXCEPT FETCH
    FOR FROM FULL GROUP HAVING IN INNER INTERSECT INTO IS JOIN LATERAL LEFT
    LIKE LIMIT MATCH_RECOGNIZE MINUS NATURAL NOT ON OR ORDER OUTER PIVOT
    POSITIONAL QUALIFY RETURNING RIGHT SAMPLE SELECT SEMI TABLESAMPLE THEN
    UNION UNPIVOT USING VALUES WHEN WHERE WINDOW WITH
""".split())

# Prefix of every name this module registers in the SQL engine.
_INTERNAL_PREFIX = "__gpu_mr_"


# Words after which a name followed by `(` is a table function, not an alias.
_CLAUSE_WORDS = ("FROM", "JOIN", "LATERAL", "ON", "USING", "SELECT", "WHERE", "AND", "OR",
                 "AS", "IN", "EXISTS", "NOT")


def _is_name(tok: Token) -> bool:
    """An identifier usable as a table name or alias."""
    return tok.kind == QIDENT or (tok.kind == IDENT and tok.upper not in _RESERVED)


def _same_name(ref: Token, name: str, name_quoted: bool) -> bool:
    """SQL name matching: unquoted names fold case, two quoted names must be
    identical."""
    if ref.kind == QIDENT and name_quoted:
        return ref.value == name
    return str(ref.value).casefold() == name.casefold()


# --------------------------------------------------------------------------
# Finding the table factors
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class MatchRecognizeSite:
    """One ``source MATCH_RECOGNIZE (...) [AS] alias`` table factor.

    All offsets are absolute offsets into the statement text.

    Attributes
    ----------
    start, end : int
        The whole table factor, from its source to its alias (or to the
        clause's closing parenthesis when there is no alias).
    keyword : Token
        The ``MATCH_RECOGNIZE`` token.
    body_start, body_end : int
        The clause body: the text between its parentheses.
    source_kind : str
        ``"table"`` (a name), ``"subquery"`` (a parenthesised query) or
        ``"function"`` (a table function call such as ``read_parquet('x')``).
    source_start, source_end : int
        The name; the text inside the subquery's parentheses; or the whole
        function call.
    source_token : Token
        The name token, the subquery's ``(`` or the function name (for error
        positions).
    alias : Token or None
        The factor's alias (an IDENT or QIDENT token), if any.
    """

    start: int
    end: int
    keyword: Token
    body_start: int
    body_end: int
    source_kind: str
    source_start: int
    source_end: int
    source_token: Token
    alias: Token | None
    alias_columns: str = ""          # "(c1, c2)" renaming the output columns, or ""


@dataclass(frozen=True)
class _Cte:
    name: Token
    start: int        # the name
    end: int          # just past its closing parenthesis


@dataclass(frozen=True)
class _With:
    start: int        # the WITH keyword
    lo: int           # the query this WITH clause heads: [lo, hi)
    hi: int
    ctes: tuple[_Cte, ...]

    def visible(self, pos: int) -> int:
        """How many of the CTEs are visible at ``pos``: inside the j-th
        definition only the earlier ones, in the main query all of them."""
        for j, cte in enumerate(self.ctes):
            if cte.start <= pos < cte.end:
                return j
        return len(self.ctes)


def _tokens(text: str) -> list[Token]:
    """Tokenize the whole statement. Characters the clause tokenizer does not
    know (DuckDB's ``@``, ``&``, ``~``, ``#``, backticks, ...) become one-character
    operator tokens here: the outer statement is DuckDB's business."""
    positions = Positions(text)
    out: list[Token] = []
    i = 0
    while True:
        try:
            out += tokenize(text, i)
            return out
        except SqlSyntaxError as exc:
            if exc.code != "bad_character" or exc.line is None:
                raise
            at = positions.line_starts[exc.line - 1] + exc.column - 1
            out += tokenize(text, i, at)[:-1]          # drop that piece's EOF
            out.append(Token(OP, text[at], text[at], at, at + 1, exc.line, exc.column))
            i = at + 1


def _parenthesis_pairs(tokens: list[Token]) -> dict[int, int]:
    """Token index of each '(' -> its ')' and back."""
    match: dict[int, int] = {}
    stack: list[int] = []
    for i, tok in enumerate(tokens):
        if tok.is_op("("):
            stack.append(i)
        elif tok.is_op(")"):
            if not stack:
                raise _syntax("unbalanced ')'", tok, "unbalanced_parentheses")
            j = stack.pop()
            match[i], match[j] = j, i
    if stack:
        raise _syntax("'(' is never closed", tokens[stack[-1]], "unbalanced_parentheses")
    return match


def _syntax(message: str, tok: Token, code: str) -> SqlSyntaxError:
    return SqlSyntaxError(message, code=code, line=tok.line, column=tok.column)


class SqlStatement:
    """A statement split into its MATCH_RECOGNIZE table factors.

    Parameters
    ----------
    text : str
        A full SELECT (or WITH ... SELECT) holding at least one
        MATCH_RECOGNIZE table factor.

    Raises
    ------
    SqlSyntaxError
        ``no_match_recognize`` when there is none; ``expected_source``,
        ``expected_alias``, ``column_alias_list``, ``unbalanced_parentheses``
        for malformed factors, with line and column.

    Examples
    --------
    >>> st = SqlStatement("SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A) DEFINE A AS TRUE) AS m")
    >>> [(s.source_kind, s.alias.text) for s in st.sites]
    [('table', 'm')]
    """

    def __init__(self, text: str):
        if not isinstance(text, str):
            raise SqlSyntaxError(
                f"the query must be a string, got {type(text).__name__}",
                code="not_text")
        self.text = text
        self.tokens = _tokens(text)
        self._match = self._match_parentheses()
        sites = []
        for k, tok in enumerate(self.tokens):
            if tok.is_keyword("MATCH_RECOGNIZE") and self.tokens[k + 1].is_op("("):
                sites.append(self._site(k))
        if not sites:
            stray = next((t for t in self.tokens if t.is_keyword("MATCH_RECOGNIZE")), None)
            hint = (f"; MATCH_RECOGNIZE at line {stray.line}, column {stray.column} "
                    "is not followed by '('" if stray else "")
            raise SqlSyntaxError(
                "gpu_mr.sql needs a statement with a MATCH_RECOGNIZE clause in its "
                "FROM (source MATCH_RECOGNIZE (...) AS alias); for a clause body "
                "alone use gpu_mr.match_recognize" + hint,
                code="no_match_recognize")
        self._check_single_query()
        #: every factor, in text order
        self.sites: tuple[MatchRecognizeSite, ...] = tuple(sites)
        self._withs = self._find_withs()

    # -- structure ----------------------------------------------------------

    def _check_single_query(self) -> None:
        toks = self.tokens
        first = toks[0]
        if not (first.is_keyword("SELECT", "WITH", "FROM") or first.is_op("(")):
            raise _syntax(
                "gpu_mr.sql runs one query (SELECT ..., WITH ... SELECT ... or "
                f"FROM ... SELECT ...), not a statement starting with {first.text!r}",
                first, "not_a_query")
        for i, tok in enumerate(toks):
            if tok.is_op(";") and not all(t.is_op(";") or t.kind == EOF
                                          for t in toks[i + 1:]):
                raise _syntax("gpu_mr.sql runs one statement; remove everything "
                              "after this ';'", tok, "multiple_statements")

    def _match_parentheses(self) -> dict[int, int]:
        return _parenthesis_pairs(self.tokens)

    def _site(self, k: int) -> MatchRecognizeSite:
        toks, kw = self.tokens, self.tokens[k]
        close = self._match[k + 1]
        body_start, body_end = toks[k + 1].end, toks[close].start

        # alias after the clause
        alias, end, j = None, toks[close].end, close + 1
        if toks[j].is_keyword("AS"):
            if not _is_name(toks[j + 1]):
                raise _syntax("expected an alias after AS", toks[j + 1], "expected_alias")
            alias, j = toks[j + 1], j + 2
        elif _is_name(toks[j]):
            alias, j = toks[j], j + 1
        alias_columns = ""
        if alias is not None:
            end = alias.end
            if toks[j].is_op("("):
                # `AS m (c1, c2, ...)` renames the output columns; DuckDB does it
                close_list = self._match[j]
                if not all(_is_name(t) or t.is_op(",") for t in toks[j + 1:close_list]):
                    raise _syntax("expected a list of column names after the "
                                  "MATCH_RECOGNIZE alias", toks[j], "column_alias_list")
                alias_columns = self.text[toks[j].start:toks[close_list].end]
                end = toks[close_list].end

        # source before the keyword, with an optional alias of its own
        i = k - 1
        if i >= 1 and _is_name(toks[i]):
            prev = toks[i - 1]
            if prev.is_keyword("AS"):
                i -= 2
            elif prev.is_op(")") or _is_name(prev):
                i -= 1
        expected = ("MATCH_RECOGNIZE must follow its source: a table name or a "
                    "parenthesised subquery, as in FROM t MATCH_RECOGNIZE (...) AS m")
        if i < 0:
            raise _syntax(expected, kw, "expected_source")
        src = toks[i]
        derived = self._derived_column_list(i) if src.is_op(")") else None
        if derived is not None:
            # `source [AS] alias(col, ...)`: DuckDB renames the columns
            kind, s0, s1, stok, start = ("function", toks[derived].start, src.end,
                                         toks[derived], toks[derived].start)
        elif src.is_op(")"):
            open_ = self._match[i]
            before = toks[open_ - 1] if open_ > 0 else None
            if before is not None and _is_name(before) and before.kind == IDENT and not (
                    open_ >= 2 and toks[open_ - 2].is_op(".")):
                kind, s0, s1, stok, start = ("function", before.start, src.end, before,
                                             before.start)
            else:
                if open_ + 1 == i:
                    raise _syntax("empty subquery before MATCH_RECOGNIZE",
                                  toks[open_], "expected_source")
                kind, s0, s1, stok, start = ("subquery", toks[open_].end, src.start,
                                             toks[open_], toks[open_].start)
        elif _is_name(src):
            if i >= 1 and toks[i - 1].is_op("."):
                raise AnalysisError(
                    "qualified table names are not supported before MATCH_RECOGNIZE; "
                    "pass the table as a keyword argument and use its plain name",
                    code="unknown_table", line=src.line, column=src.column)
            kind, s0, s1, stok, start = "table", src.start, src.end, src, src.start
        else:
            raise _syntax(expected, kw, "expected_source")
        return MatchRecognizeSite(start, end, kw, body_start, body_end, kind, s0, s1,
                                  stok, alias, alias_columns)

    def _derived_column_list(self, close: int) -> int | None:
        """If the ``)`` at token ``close`` ends ``source [AS] alias(c1, ...)``,
        the index of the source's first token, else None (a table function
        such as ``read_parquet('x')`` or a plain subquery)."""
        toks = self.tokens
        open_ = self._match[close]
        if open_ < 2 or not _is_name(toks[open_ - 1]):
            return None
        if not all(_is_name(t) or t.is_op(",") for t in toks[open_ + 1:close]):
            return None
        j = open_ - 2
        if toks[j].is_keyword("AS"):
            j -= 1
        elif not (toks[j].is_op(")") or (_is_name(toks[j]) and not toks[j].is_keyword(
                *_CLAUSE_WORDS))):
            return None
        if j < 0:
            return None
        if toks[j].is_op(")"):
            return self._match[j]
        if _is_name(toks[j]) and not toks[j].is_keyword(*_CLAUSE_WORDS):
            return j
        return None

    def _find_withs(self) -> list[_With]:
        toks, out = self.tokens, []
        for w, tok in enumerate(toks):
            if not tok.is_keyword("WITH"):
                continue
            if w == 0:
                lo, hi = 0, len(self.text)
            elif toks[w - 1].is_op("("):
                lo, hi = toks[w - 1].end, toks[self._match[w - 1]].start
            else:
                continue
            i, ctes = w + 1, []
            if toks[i].is_keyword("RECURSIVE"):
                i += 1
            while toks[i].kind in (IDENT, QIDENT):
                name = toks[i]
                i += 1
                if toks[i].is_op("("):                       # column list
                    i = self._match[i] + 1
                if not toks[i].is_keyword("AS"):
                    break
                i += 1
                if toks[i].is_keyword("NOT"):
                    i += 1
                if toks[i].is_keyword("MATERIALIZED"):
                    i += 1
                if not toks[i].is_op("("):
                    break
                close = self._match[i]
                ctes.append(_Cte(name, name.start, toks[close].end))
                i = close + 1
                if not toks[i].is_op(","):
                    break
                i += 1
            if ctes:
                out.append(_With(tok.start, lo, hi, tuple(ctes)))
        return out

    # -- queries over the structure ------------------------------------------

    def outermost(self, lo: int, hi: int) -> list[MatchRecognizeSite]:
        """The factors inside ``[lo, hi)`` not nested in another one there."""
        inside = [s for s in self.sites if lo <= s.start and s.end <= hi]
        return [s for s in inside
                if not any(o is not s and o.start <= s.start and s.end <= o.end
                           for o in inside)]

    def visible_cte(self, name: Token, pos: int) -> bool:
        """Whether ``name`` at ``pos`` refers to a WITH query in scope."""
        for w in self._withs:
            if w.lo <= pos < w.hi:
                if any(_same_name(name, str(c.name.value), c.name.kind == QIDENT)
                       for c in w.ctes[:w.visible(pos)]):
                    return True
        return False

    def render(self, lo: int, hi: int, replace: Callable[[MatchRecognizeSite], str]) -> str:
        """``text[lo:hi]`` with every outermost factor replaced by ``replace(site)``."""
        parts, at = [], lo
        for site in self.outermost(lo, hi):
            parts += [self.text[at:site.start], replace(site)]
            at = site.end
        parts.append(self.text[at:hi])
        return "".join(parts)

    def with_scopes(self, sql: str, pos: int,
                    replace: Callable[[MatchRecognizeSite], str]) -> str:
        """Wrap ``sql`` (to be run on its own) in the WITH queries visible at
        ``pos``, innermost scope first, so that it can name them."""
        for w in sorted((w for w in self._withs if w.lo <= pos < w.hi),
                        key=lambda w: -w.lo):
            m = w.visible(pos)
            if m:
                prefix = self.render(w.start, w.ctes[m - 1].end, replace)
                sql = f"{prefix}\nSELECT * FROM (\n{sql}\n) AS {_INTERNAL_PREFIX}src"
        return sql

    def positions_of(self, name: str) -> list[Token]:
        """Identifier tokens spelling ``name`` (case-insensitively) outside the
        clause bodies, which the SQL engine never sees."""
        return [t for t in self.tokens
                if t.kind in (IDENT, QIDENT)
                and str(t.value).casefold() == name.casefold()
                and not any(s.body_start <= t.start < s.body_end for s in self.sites)]


def find_match_recognize(query: str) -> list[MatchRecognizeSite]:
    """Every MATCH_RECOGNIZE table factor of ``query``, in text order.

    Raises
    ------
    SqlSyntaxError
        As :class:`SqlStatement`, ``no_match_recognize`` included.

    Examples
    --------
    >>> q = "SELECT * FROM (SELECT * FROM t) s MATCH_RECOGNIZE (PATTERN (A) DEFINE A AS x > 0) m"
    >>> [(s.source_kind, q[s.source_start:s.source_end], s.alias.text)
    ...  for s in find_match_recognize(q)]
    [('subquery', 'SELECT * FROM t', 'm')]
    """
    return list(SqlStatement(query).sites)


def extract_clause(query: str) -> tuple[int, int] | None:
    """Span ``(body_start, body_end)`` of the first MATCH_RECOGNIZE body.

    Lenient: only the first ``MATCH_RECOGNIZE (`` and its closing parenthesis
    are looked at (for ``gpu-mr explain`` on a full SELECT).

    Returns
    -------
    (int, int) or None
        Offsets of the text between the clause's parentheses, or None when
        the text holds no ``MATCH_RECOGNIZE (`` (it may be a clause body).

    Raises
    ------
    SqlSyntaxError
        For an unterminated string or comment, or a clause whose parenthesis
        is never closed.

    Examples
    --------
    >>> q = "SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A) DEFINE A AS TRUE) m"
    >>> s, e = extract_clause(q); q[s:e]
    'PATTERN (A) DEFINE A AS TRUE'
    >>> extract_clause("PATTERN (A) DEFINE A AS TRUE") is None
    True
    """
    toks = _tokens(query)
    for k, tok in enumerate(toks):
        if tok.is_keyword("MATCH_RECOGNIZE") and toks[k + 1].is_op("("):
            depth = 0
            for j in range(k + 1, len(toks)):
                if toks[j].is_op("("):
                    depth += 1
                elif toks[j].is_op(")"):
                    depth -= 1
                    if depth == 0:
                        return toks[k + 1].end, toks[j].start
            raise _syntax("'(' is never closed", toks[k + 1], "unbalanced_parentheses")
    return None


# --------------------------------------------------------------------------
# Evaluating a statement
# --------------------------------------------------------------------------

class Backend(abc.ABC):
    """What a SQL engine supplies to evaluate a :class:`SqlStatement`.

    Subclasses implement the six hooks; :meth:`evaluate` does the rest.
    DuckDB over Arrow is the in-process one; a Spark backend would run
    sources with ``spark.sql``, clauses with the Spark layer and register
    results as temporary views.
    """

    @abc.abstractmethod
    def table_names(self) -> list[str]:
        """Names of the tables the caller passed."""
        ...

    @abc.abstractmethod
    def table_source(self, name: str) -> object:
        """The table passed as ``name``, as the clause runner takes it."""
        ...

    @abc.abstractmethod
    def query_source(self, sql: str, site: MatchRecognizeSite) -> object:
        """Run the source query of ``site`` (a subquery, table function or
        WITH query, made standalone)."""
        ...

    @abc.abstractmethod
    def run_clause(self, source: object, text: str, start: int, end: int) -> object:
        """Evaluate the clause body ``text[start:end]`` over ``source``."""
        ...

    @abc.abstractmethod
    def register(self, result: object, name: str) -> None:
        """Make a clause result visible to later SQL as ``name``."""
        ...

    @abc.abstractmethod
    def run(self, sql: str) -> object:
        """Run the rewritten outer statement."""
        ...

    # -- the driver ----------------------------------------------------------

    def evaluate(self, statement: SqlStatement) -> object:
        """Evaluate every factor (sources first) and run the rewritten
        statement; returns the outer statement's result."""
        self._statement = statement
        self._done: dict[int, str] = {}
        self._fresh = 0
        sql = statement.render(0, len(statement.text), self._replace)
        return self.run(sql)

    def _fresh_name(self) -> str:
        taken = {n.casefold() for n in self.table_names()}
        taken |= {str(t.value).casefold() for t in self._statement.tokens
                  if t.kind in (IDENT, QIDENT)}
        while True:
            name = f"{_INTERNAL_PREFIX}mr_{self._fresh}"
            self._fresh += 1
            if name.casefold() not in taken:
                return name

    def _replace(self, site: MatchRecognizeSite) -> str:
        if site.start not in self._done:
            source = self._source(site)
            result = self.run_clause(source, self._statement.text,
                                     site.body_start, site.body_end)
            name = self._fresh_name()
            self.register(result, name)
            self._done[site.start] = name
        name = self._done[site.start]
        if site.alias is None:
            return name
        return f"{name} AS {site.alias.text}{site.alias_columns}"

    def _source(self, site: MatchRecognizeSite) -> object:
        st = self._statement
        if site.source_kind == "subquery":
            sql = st.render(site.source_start, site.source_end, self._replace)
            first = _tokens(sql)[0]
            if not (first.is_keyword("SELECT", "WITH", "VALUES", "FROM", "TABLE")
                    or first.is_op("(")):
                sql = f"SELECT * FROM ({sql})"
            return self.query_source(st.with_scopes(sql, site.start, self._replace), site)
        if site.source_kind == "function":
            sql = "SELECT * FROM " + st.render(site.source_start, site.source_end,
                                               self._replace)
            return self.query_source(st.with_scopes(sql, site.start, self._replace), site)
        tok = site.source_token
        if st.visible_cte(tok, site.start):
            return self.query_source(
                st.with_scopes(f"SELECT * FROM {tok.text}", site.start, self._replace),
                site)
        return self.table_source(self._resolve_table(tok))

    def _resolve_table(self, tok: Token) -> str:
        names = self.table_names()
        if tok.kind == QIDENT:
            found = [n for n in names if n == tok.value]
        else:
            found = [n for n in names if n == tok.value] or \
                [n for n in names if n.casefold() == str(tok.value).casefold()]
        if len(found) == 1:
            return found[0]
        passed = ", ".join(sorted(names)) or "none"
        if found:
            raise AnalysisError(
                f"table name {tok.text} matches several tables passed ({', '.join(found)}); "
                "quote it to pick one", code="ambiguous_table",
                line=tok.line, column=tok.column)
        raise AnalysisError(
            f"unknown table {tok.text} before MATCH_RECOGNIZE; tables passed: {passed}",
            code="unknown_table", line=tok.line, column=tok.column)


# DuckDB messages quote the failing SQL after "LINE n:"; that text is our
# rewritten statement, whose positions mean nothing to the caller.
_DUCKDB_CONTEXT = re.compile(r"\n*LINE \d+:.*", re.DOTALL)
# "Did you mean" hints that point at DuckDB's own catalog tables.
_DUCKDB_SYSTEM_HINT = re.compile(
    r'\n?Did you mean "(?:pg_|duckdb_|sqlite_|information_schema)[^"]*"\?')
_DUCKDB_NAMES = (
    re.compile(r"Table with name (\S+?) does not exist"),
    re.compile(r'Referenced (?:column|table) "([^"]+)" not found'),
    re.compile(r'does not have a column named "([^"]+)"'),
    re.compile(r'syntax error at or near "([^"]+)"'),
)


class _DuckDBBackend(Backend):
    """In-process DuckDB over Arrow: one in-memory connection per call."""

    def __init__(self, tables: Mapping[str, pa.Table], engine: str,
                 clause_runner: Callable[..., object]):
        import duckdb
        self._duckdb = duckdb
        self.tables = dict(tables)
        self.engine = engine
        self.clause_runner = clause_runner
        self.aliases: dict[str, str] = {}
        self.con = duckdb.connect(":memory:")
        for name, table in self.tables.items():
            self._guard(lambda: self.con.register(name, table), None)

    def close(self) -> None:
        self.con.close()

    def table_names(self) -> list[str]:
        return list(self.tables)

    def table_source(self, name: str) -> pa.Table:
        return self.tables[name]

    def query_source(self, sql: str, site: MatchRecognizeSite) -> pa.Table:
        kw = site.keyword
        return self._query(sql, where=f"the source of the MATCH_RECOGNIZE at line "
                                      f"{kw.line}, column {kw.column}")

    def run_clause(self, source, text, start, end) -> pa.Table:
        result = self.clause_runner(source, text, engine=self.engine,
                                    start=start, end=end)
        if isinstance(result, pa.RecordBatch):
            result = pa.Table.from_batches([result])
        return result

    def register(self, result: pa.Table, name: str) -> None:
        self._guard(lambda: self.con.register(name, result), None)

    def _replace(self, site):
        replacement = super()._replace(site)
        name = self._done[site.start]
        self.aliases[name] = (f"MATCH_RECOGNIZE result {site.alias.text}"
                              if site.alias is not None else "MATCH_RECOGNIZE result")
        return replacement

    def run(self, sql: str) -> pa.Table:
        return self._query(sql, where=None)

    def _query(self, sql: str, where: str | None) -> pa.Table:
        def go():
            rel = self.con.sql(sql)
            if rel is None:
                raise AnalysisError(
                    "the statement returned no rows to read; gpu_mr.sql expects a "
                    "SELECT", code="not_a_query")
            return rel.to_arrow_table()
        return self._guard(go, where)

    def _guard(self, action: Callable[[], object], where: str | None):
        duckdb = self._duckdb
        try:
            return action()
        except duckdb.Error as exc:
            raise self._translate(exc, where) from None
        except pa.ArrowException as exc:
            raise DataError(f"cannot exchange a table with DuckDB: {exc}",
                            code="outer_data") from None

    def _translate(self, exc: Exception, where: str | None) -> GpuMrError:
        duckdb = self._duckdb
        message = _DUCKDB_CONTEXT.sub("", str(exc)).strip()
        message = _DUCKDB_SYSTEM_HINT.sub("", message)
        for internal, readable in self.aliases.items():
            message = message.replace(internal, readable)
        message = message.replace(f"{_INTERNAL_PREFIX}src", "subquery")
        if where:
            message = f"in {where}: {message}"
        line = column = None
        st = getattr(self, "_statement", None)
        if st is not None:
            for pattern in _DUCKDB_NAMES:
                m = pattern.search(str(exc))
                if m:
                    hits = st.positions_of(m.group(1))
                    if len(hits) == 1:
                        line, column = hits[0].line, hits[0].column
                    break
        if isinstance(exc, duckdb.ParserException):
            return SqlSyntaxError(message, code="outer_syntax", line=line, column=column)
        if isinstance(exc, duckdb.DataError):
            return DataError(message, code="outer_data")
        return AnalysisError(message, code="outer_sql", line=line, column=column)


def _default_clause_runner(table, text, *, engine, start, end):
    from .api import run_clause_on_arrow
    return run_clause_on_arrow(table, text, engine=engine, start=start, end=end)


def run_sql(query: str, tables: Mapping[str, object], engine: str = "auto", *,
            run_clause: Callable[..., object] | None = None):
    """Run a full SELECT holding MATCH_RECOGNIZE table factors.

    This implements ``gpu_mr.sql(query, engine=..., **tables)``. Each
    ``source MATCH_RECOGNIZE (...) [AS] alias`` factor is evaluated by
    gpu_mr; the rest of the statement (and any subquery source) by DuckDB,
    with every table in ``tables`` registered under its name.

    Parameters
    ----------
    query : str
        ``SELECT ...`` or ``WITH ... SELECT ...``. A factor's source is a
        table name (a key of ``tables``: unquoted names match
        case-insensitively, "quoted" names exactly; a WITH query of the
        statement takes precedence), a parenthesised subquery, or a table
        function call; the source may carry an alias of its own. The factor's
        alias is optional, and may carry a column alias list that renames the output.
    tables : mapping of str to table
        pyarrow Tables/RecordBatches or pandas DataFrames.
    engine : str
        Passed to the clause evaluation (``"auto"``, ``"gpu"``, ``"cpu"``,
        ``"reference"``).
    run_clause : callable, optional
        ``run_clause(arrow_table, text, engine=, start=, end=) -> pa.Table``;
        defaults to :func:`gpu_mr.api.run_clause_on_arrow`. For tests and
        other drivers.

    Returns
    -------
    pandas.DataFrame or pyarrow.Table
        pandas if any table passed is pandas (cuDF if any is cuDF), else
        Arrow. Timestamps may come back in microseconds (DuckDB's unit).

    Raises
    ------
    SqlSyntaxError
        ``no_match_recognize`` when the statement has no factor; malformed
        factors, with line and column; DuckDB parser errors
        (``outer_syntax``).
    AnalysisError
        ``unknown_table`` (with line and column) for a source that names no
        table passed; DuckDB binder/catalog errors (``outer_sql``; line and
        column only when the offending name occurs exactly once in the text).
    DataError
        Unusable input tables; DuckDB conversion errors (``outer_data``).

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"id": [1, 2, 3], "v": [1, -1, 2]})
    >>> fake = lambda tbl, text, engine, start, end: tbl.filter(pa.compute.field("v") > 0)
    >>> run_sql("SELECT count(*) AS n FROM t MATCH_RECOGNIZE (PATTERN (A) DEFINE A AS v > 0) m",
    ...         {"t": t}, run_clause=fake).to_pylist()
    [{'n': 2}]
    """
    if not isinstance(query, str):
        raise SqlSyntaxError(f"the query must be a string, got {type(query).__name__}",
                             code="not_text")
    converted: dict[str, pa.Table] = {}
    kinds: set[str] = set()
    folded: dict[str, str] = {}
    for name, table in tables.items():
        if not isinstance(name, str) or not name:
            raise DataError(f"table names must be non-empty strings, got {name!r}",
                            code="bad_table_name")
        if name.casefold() in folded:
            raise DataError(
                f"tables {folded[name.casefold()]!r} and {name!r} differ only in case; "
                "SQL cannot tell them apart, rename one", code="duplicate_table")
        folded[name.casefold()] = name
        converted[name], kind = to_arrow(table)
        kinds.add(kind)
    kind = "cudf" if "cudf" in kinds else "pandas" if "pandas" in kinds else "arrow"
    backend = _DuckDBBackend(converted, engine, run_clause or _default_clause_runner)
    try:
        tokens = _tokens(query)
        if has_pattern_window(tokens):
            # WINDOW w AS (... PATTERN ...): evaluated first, into columns of the input
            rewritten = rewrite_pattern_windows(query, tokens, _parenthesis_pairs(tokens),
                                                backend.run, engine)
            if rewritten is not None:
                query, widened = rewritten
                backend.register(widened, WINDOW_INPUT)
                if not any(t.is_keyword("MATCH_RECOGNIZE") for t in _tokens(query)):
                    return from_arrow(backend.run(query), kind)
        result = backend.evaluate(SqlStatement(query))
    finally:
        backend.close()
    return from_arrow(result, kind)
