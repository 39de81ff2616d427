"""Recursive-descent parser for the MATCH_RECOGNIZE clause body.

What: tokens -> :class:`~gpu_mr.syntax.ast.MatchRecognize`. One ``_parse_*``
method per grammar rule; expressions by precedence climbing. Every error goes
through :meth:`Parser.fail`, which names what was expected and what was
found, with the line and column of the offending token.
Why hand-written (not Lark): the clause is small, context decides whether a
word is a keyword (``LAST`` is a function, a skip target keyword and a valid
variable name), and hand-written errors say exactly what was expected in the
user's terms. See docs/architecture.md.
Cost: linear in the number of tokens.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Optional

from ..errors import AnalysisError, SqlSyntaxError
from . import ast as A
from . import types as T
from .tokens import EOF, IDENT, NUMBER, OP, QIDENT, STRING, Token, tokenize

NAVIGATION = {"PREV", "NEXT", "FIRST", "LAST"}
AGGREGATES = {"COUNT", "SUM", "AVG", "MIN", "MAX", "ARRAY_AGG", "STDDEV", "STDDEV_SAMP",
              "STDDEV_POP", "VARIANCE", "VAR_SAMP", "VAR_POP", "MAX_BY", "MIN_BY",
              "BOOL_AND", "BOOL_OR", "EVERY", "COUNT_IF", "ANY_VALUE"}
CLAUSE_ORDER = ("PARTITION BY", "ORDER BY", "MEASURES", "ROWS PER MATCH",
                "AFTER MATCH SKIP", "PATTERN", "SUBSET", "DEFINE")
_CLAUSE_STARTS = ("PARTITION", "ORDER", "MEASURES", "ONE", "ALL", "AFTER", "PATTERN", "SUBSET",
                  "DEFINE", "AS")
COMPARISONS = ("=", "<>", "!=", "<", "<=", ">", ">=")
# Words that end an expression inside the clause; never column names there.
_RESERVED_IN_EXPR = {"AND", "OR", "NOT", "AS", "WHEN", "THEN", "ELSE", "END", "FROM",
                     "FOR", "IS", "IN", "BETWEEN", "LIKE", "ESCAPE"}


def parse_clause(text: str, start: int = 0, end: Optional[int] = None) -> A.MatchRecognize:
    """Parse the body of ``MATCH_RECOGNIZE ( ... )`` found at ``text[start:end]``.

    Positions in errors refer to the whole ``text`` (1-based line and column).

    >>> mr = parse_clause("ORDER BY ts PATTERN (A B+) DEFINE B AS price < PREV(price)")
    >>> mr.pattern.to_sql()
    'A B+'
    """
    parser = Parser(tokenize(text, start, end))
    clause = parser.parse_clause()
    parser.expect_eof()
    return clause


def parse_window_spec(text: str, start: int = 0, end: Optional[int] = None) -> A.WindowPattern:
    """Parse the body of ``WINDOW w AS ( ... )`` holding a row pattern."""
    parser = Parser(tokenize(text, start, end))
    spec = parser.parse_window_spec()
    parser.expect_eof()
    return spec


def parse_expression(text: str) -> A.Expr:
    """Parse one expression (used by tests and tools)."""
    parser = Parser(tokenize(text))
    expr = parser.parse_expr()
    parser.expect_eof()
    return expr


class Parser:
    def __init__(self, tokens: list[Token]):
        self.tokens = tokens
        self.i = 0

    # ------------------------------------------------------------ utilities
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def peek(self, k: int = 1) -> Token:
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def advance(self) -> Token:
        t = self.tokens[self.i]
        if t.kind != EOF:
            self.i += 1
        return t

    def pos(self, t: Optional[Token] = None) -> A.Pos:
        t = t or self.tok
        return A.Pos(t.line, t.column)

    def fail(self, expected: str, t: Optional[Token] = None, code: str = "expected") -> None:
        t = t or self.tok
        found = "end of input" if t.kind == EOF else repr(t.text)
        raise SqlSyntaxError(f"expected {expected}, found {found}", code=code,
                             line=t.line, column=t.column)

    def at_keyword(self, *words: str) -> bool:
        return self.tok.is_keyword(*words)

    def at_keywords(self, *seq: str) -> bool:
        return all(self.peek(k).is_keyword(w) for k, w in enumerate(seq))

    def accept_keyword(self, *words: str) -> Optional[Token]:
        if self.tok.is_keyword(*words):
            return self.advance()
        return None

    def expect_keyword(self, word: str, context: str = "") -> Token:
        if not self.tok.is_keyword(word):
            self.fail(word + (f" {context}" if context else ""))
        return self.advance()

    def accept_op(self, *ops: str) -> Optional[Token]:
        if self.tok.is_op(*ops):
            return self.advance()
        return None

    def accept_list_comma(self, clause: str) -> bool:
        """The ',' between the items of a clause's list. A ',' that ends the
        list (the next clause or the end right after it) is named there:
        parsed as the start of another item, ``MEASURES x AS y, PATTERN
        (A B+)`` said "expected ')' to close PATTERN, found 'B'"."""
        comma = self.accept_op(",")
        if comma is None:
            return False
        nxt, after = self.tok, self.peek()
        ends = nxt.kind == EOF or (nxt.kind == IDENT and (
            (nxt.is_keyword("PATTERN") and after.is_op("("))
            or (nxt.is_keyword("ONE") and after.is_keyword("ROW"))
            or (nxt.is_keyword("ALL") and after.is_keyword("ROWS"))
            or (nxt.is_keyword("AFTER") and after.is_keyword("MATCH"))
            or (nxt.is_keyword("PARTITION", "ORDER") and after.is_keyword("BY"))
            or nxt.is_keyword("MEASURES")))
        if ends:
            found = "the end of input" if nxt.kind == EOF else nxt.text.upper()
            raise SqlSyntaxError(f"a ',' ends the {clause} list before {found}; remove it",
                                 code="trailing_comma", line=comma.line, column=comma.column)
        return True

    def expect_op(self, op: str, context: str = "") -> Token:
        if not self.tok.is_op(op):
            self.fail(repr(op) + (f" {context}" if context else ""))
        return self.advance()

    def expect_eof(self) -> None:
        if self.tok.kind != EOF:
            self._fail_misplaced_clause()
            self.fail("end of the MATCH_RECOGNIZE clause")

    def parse_name(self, what: str) -> tuple[str, bool, Token]:
        """An identifier: (canonical name, quoted, token). Unquoted names are
        upper-cased; quoted ones are kept exactly."""
        t = self.tok
        if t.kind == IDENT:
            self.advance()
            return t.text.upper(), False, t
        if t.kind == QIDENT:
            self.advance()
            return t.value, True, t
        self.fail(what)

    # --------------------------------------------------------------- clause
    def parse_clause(self) -> A.MatchRecognize:
        partition_by, order_by, measures = self._parse_head()
        rows, empty = "ONE", "SHOW"
        skip = A.SkipTo()
        if self.at_keyword("ONE"):
            self.advance()
            self.expect_keyword("ROW", "(in ONE ROW PER MATCH)")
            self.expect_keyword("PER")
            self.expect_keyword("MATCH")
        elif self.at_keyword("ALL") and not self.peek().is_keyword("MATCHES"):
            self.advance()
            self.expect_keyword("ROWS", "(in ALL ROWS PER MATCH)")
            self.expect_keyword("PER")
            self.expect_keyword("MATCH")
            rows = "ALL"
            if self.accept_keyword("SHOW"):
                self.expect_keyword("EMPTY")
                self.expect_keyword("MATCHES")
            elif self.accept_keyword("OMIT"):
                self.expect_keyword("EMPTY")
                self.expect_keyword("MATCHES")
                empty = "OMIT"
            elif self.accept_keyword("WITH"):
                self.expect_keyword("UNMATCHED")
                self.expect_keyword("ROWS")
                empty = "UNMATCHED"
        mode = self._parse_mode()
        if self.at_keyword("AFTER"):
            skip = self._parse_skip()
        if mode is None:
            mode = self._parse_mode()      # the proposal puts it after AFTER MATCH SKIP
        pattern_tok, pattern, time_limit, subsets, defines = self._parse_tail()
        return A.MatchRecognize(tuple(partition_by), tuple(order_by), tuple(measures), rows,
                                empty, skip, pattern, tuple(subsets), tuple(defines),
                                time_limit=time_limit, mode=mode,
                                pattern_pos=self.pos(pattern_tok))

    def parse_window_spec(self) -> A.WindowPattern:
        """A WINDOW specification with row pattern recognition (proposal §3,
        Trino): ``[PARTITION BY] [ORDER BY] [MEASURES] ROWS BETWEEN CURRENT ROW
        AND frame_end [EXCLUDE NO OTHERS] [AFTER MATCH SKIP] [INITIAL | SEEK]
        PATTERN (...) [SUBSET] DEFINE ...``."""
        partition_by, order_by, measures = self._parse_head()
        frame_tok = self.tok
        if self.at_keyword("ONE") or self.at_keywords("ALL", "ROWS"):
            raise SqlSyntaxError(f"{'ONE ROW' if self.at_keyword('ONE') else 'ALL ROWS'} PER "
                                 f"MATCH cannot be used in a WINDOW specification: a window "
                                 f"gives one row per input row", code="rows_per_match_in_window",
                                 line=frame_tok.line, column=frame_tok.column)
        self.expect_keyword("ROWS", "BETWEEN CURRENT ROW AND ... (a pattern window's frame)")
        self.expect_keyword("BETWEEN")
        self.expect_keyword("CURRENT", "ROW (a pattern window's frame starts at the current row)")
        self.expect_keyword("ROW")
        self.expect_keyword("AND")
        if self.accept_keyword("UNBOUNDED"):
            self.expect_keyword("FOLLOWING")
            frame_end = None
        elif self.accept_keyword("CURRENT"):
            self.expect_keyword("ROW")
            frame_end = 0
        else:
            if self.tok.kind != NUMBER or not isinstance(self.tok.value, int):
                self.fail("UNBOUNDED FOLLOWING, CURRENT ROW or n FOLLOWING")
            frame_end = self.advance().value
            self.expect_keyword("FOLLOWING")
        if self.accept_keyword("EXCLUDE"):
            self.expect_keyword("NO", "(only EXCLUDE NO OTHERS is allowed with a pattern)")
            self.expect_keyword("OTHERS")
        skip = self._parse_skip() if self.at_keyword("AFTER") else A.SkipTo()
        seek = False
        if self.accept_keyword("SEEK"):
            seek = True
        else:
            self.accept_keyword("INITIAL")
        mode_tok = self.tok
        mode = self._parse_mode()
        if mode is not None:
            raise AnalysisError(f"{'ALL MATCHES' if mode == 'ALL' else mode + ' MATCH'} cannot be "
                                f"used in a WINDOW pattern: a window gives one match per row",
                                code="mode_in_window", line=mode_tok.line,
                                column=mode_tok.column)
        pattern_tok, pattern, time_limit, subsets, defines = self._parse_tail()
        clause = A.MatchRecognize(tuple(partition_by), tuple(order_by), tuple(measures), "ONE",
                                  "SHOW", skip, pattern, tuple(subsets), tuple(defines),
                                  time_limit=time_limit, pattern_pos=self.pos(pattern_tok))
        return A.WindowPattern(clause=clause, frame_end=frame_end, seek=seek,
                               pos=self.pos(frame_tok))

    def _parse_head(self) -> tuple:
        partition_by: list = []
        order_by: list = []
        measures: list = []
        if self.accept_keyword("PARTITION"):
            self.expect_keyword("BY", "after PARTITION")
            partition_by.append(self._parse_column_ref("PARTITION BY"))
            while self.accept_list_comma("PARTITION BY"):
                partition_by.append(self._parse_column_ref("PARTITION BY"))
        if self.accept_keyword("ORDER"):
            self.expect_keyword("BY", "after ORDER")
            order_by.append(self._parse_sort_key())
            while self.accept_list_comma("ORDER BY"):
                order_by.append(self._parse_sort_key())
        if self.accept_keyword("MEASURES"):
            measures.append(self._parse_measure())
            while self.accept_list_comma("MEASURES"):
                measures.append(self._parse_measure())
        return partition_by, order_by, measures

    def _parse_tail(self) -> tuple:
        """PATTERN (...) [time limit] [SUBSET ...] [DEFINE ...]."""
        if not self.at_keyword("PATTERN"):
            self._fail_misplaced_clause()
            self.fail("PATTERN")
        pattern_tok = self.advance()
        self.expect_op("(", "after PATTERN")
        if self.tok.is_op(")"):
            pattern: A.Pattern = A.PEmpty(pos=self.pos())
        else:
            pattern = self._parse_pattern_alt()
        self.expect_op(")", "to close PATTERN")
        time_limit = self._parse_time_limit()
        subsets: list = []
        if self.accept_keyword("SUBSET"):
            subsets.append(self._parse_subset())
            while self.accept_op(","):
                subsets.append(self._parse_subset())
        defines: list = []
        if self.accept_keyword("DEFINE"):
            defines.append(self._parse_define())
            while self.accept_op(","):
                defines.append(self._parse_define())
        return pattern_tok, pattern, time_limit, subsets, defines

    def _parse_mode(self) -> Optional[str]:
        """The 2007 proposal's MAXIMAL MATCH / INCREMENTAL MATCH / ALL MATCHES
        (Esper's `all matches`)."""
        if self.at_keywords("ALL", "MATCHES"):
            self.i += 2
            return "ALL"
        if self.at_keywords("MAXIMAL", "MATCH") or self.at_keywords("INCREMENTAL", "MATCH"):
            word = self.advance().text.upper()
            self.advance()
            return word
        return None

    def _parse_time_limit(self) -> Optional[A.TimeLimit]:
        """Flink's ``WITHIN INTERVAL '10' SECOND`` (or Oracle CQL's ``WITHIN 3000
        MILLISECONDS``) and Esper's ``INTERVAL 5 SECONDS`` after PATTERN."""
        t = self.tok
        if t.is_keyword("WITHIN"):
            self.advance()
            if self.tok.is_keyword("INTERVAL") and self.peek().kind == STRING or \
                    self.tok.is_keyword("INTERVAL") and self.peek().is_op("-", "+"):
                literal = self._parse_interval()
            else:
                literal = self._parse_time_period("WITHIN")
            return A.TimeLimit(keyword="WITHIN", interval=literal, pos=self.pos(t))
        if t.is_keyword("INTERVAL") and self.peek().kind in (NUMBER, STRING) or \
                t.is_keyword("INTERVAL") and self.peek().is_op("-", "+"):
            if self.peek().kind == STRING or self.peek().is_op("-", "+") and \
                    self.peek(2).kind == STRING:
                literal = self._parse_interval()
            else:
                self.advance()
                literal = self._parse_time_period("INTERVAL")
            return A.TimeLimit(keyword="INTERVAL", interval=literal, pos=self.pos(t))
        return None

    def _parse_time_period(self, after: str) -> A.Literal:
        """Esper's time period: ``5 seconds``, ``1 minute 30 sec``, ``500 msec``."""
        start = self.tok
        units = {"WEEK": 7 * 86400 * 10**9, "DAY": 86400 * 10**9, "HOUR": 3600 * 10**9,
                 "MINUTE": 60 * 10**9, "MIN": 60 * 10**9, "SECOND": 10**9, "SEC": 10**9,
                 "MILLISECOND": 10**6, "MSEC": 10**6, "MICROSECOND": 10**3, "USEC": 10**3}
        total = Decimal(0)
        seen = False
        while self.tok.kind == NUMBER or (self.tok.is_op("-") and self.peek().kind == NUMBER):
            sign = -1 if self.accept_op("-") else 1
            amount = Decimal(self.advance().value) * sign
            word = self.tok.upper
            word = word[:-1] if word.endswith("S") and word[:-1] in units else word
            if word not in units:
                self.fail("a time unit (DAYS, HOURS, MINUTES, SECONDS, MILLISECONDS, ...)")
            self.advance()
            total += amount * units[word]
            seen = True
        if not seen:
            self.fail(f"an interval after {after}, e.g. INTERVAL '10' SECOND or 10 SECONDS")
        return A.Literal(pos=self.pos(start), value=int(total), literal_type="interval")

    def _fail_misplaced_clause(self) -> None:
        """A clause keyword in the wrong place gets a message about order."""
        names = {"PARTITION": "PARTITION BY", "ORDER": "ORDER BY", "MEASURES": "MEASURES",
                 "ONE": "ROWS PER MATCH", "ALL": "ROWS PER MATCH", "AFTER": "AFTER MATCH SKIP",
                 "PATTERN": "PATTERN", "SUBSET": "SUBSET", "DEFINE": "DEFINE"}
        t = self.tok
        if t.kind == IDENT and t.text.upper() in names:
            clause = names[t.text.upper()]
            raise SqlSyntaxError(
                f"unexpected {t.text.upper()}: the {clause} clause is misplaced or repeated; "
                f"clauses go in the order {', '.join(CLAUSE_ORDER)}",
                code="clause_order", line=t.line, column=t.column)

    def _parse_column_ref(self, clause: str) -> A.ColumnRef:
        """A PARTITION BY / ORDER BY item: parsed as an expression so that
        anything but a plain column gets an error saying why."""
        t = self.tok
        if t.kind not in (IDENT, QIDENT) and not t.is_op("(") and t.kind not in (NUMBER, STRING):
            self.fail(f"a column name in {clause}")
        expr = self.parse_expr()
        if isinstance(expr, A.ColumnRef):
            return expr      # a qualifier (the source's name) is checked in analysis
        if any(isinstance(n, (A.Classifier, A.MatchNumber)) for n in expr.walk()):
            what = "CLASSIFIER()" if any(isinstance(n, A.Classifier) for n in expr.walk()) \
                else "MATCH_NUMBER()"
            raise AnalysisError(f"{what} can only be used in MEASURES and DEFINE, not in "
                                f"{clause}", code="misplaced_function", line=t.line,
                                column=t.column)
        raise AnalysisError(f"{clause} accepts column names only, not {expr.to_sql()}; compute "
                            f"the expression in a subquery", code="expression_key",
                            line=t.line, column=t.column)

    def _parse_sort_key(self) -> A.SortKey:
        col = self._parse_column_ref("ORDER BY")
        asc = True
        if self.accept_keyword("DESC"):
            asc = False
        else:
            self.accept_keyword("ASC")
        nulls_first = None
        if self.accept_keyword("NULLS"):
            if self.accept_keyword("FIRST"):
                nulls_first = True
            elif self.accept_keyword("LAST"):
                nulls_first = False
            else:
                self.fail("FIRST or LAST after NULLS")
        return A.SortKey(col, asc, nulls_first)

    def _parse_measure(self) -> A.Measure:
        start = self.tok
        expr = self.parse_expr()
        # AS is optional before the name (Oracle, Snowflake), unless the next
        # word starts a clause: then the name is missing.
        bare_alias = self.tok.kind == QIDENT or (
            self.tok.kind == IDENT and not self.tok.is_keyword(*_CLAUSE_STARTS))
        if not bare_alias:
            if not self.at_keyword("AS"):
                self.fail("AS and a name for the measure")
            self.advance()
        name_tok = self.tok
        _, quoted, tok = self.parse_name("a measure name after AS")
        name = tok.value if quoted else tok.text
        return A.Measure(expr, name, quoted, pos=self.pos(name_tok if name_tok else start))

    def _parse_skip(self) -> A.SkipTo:
        start = self.advance()   # AFTER
        self.expect_keyword("MATCH", "after AFTER")
        self.expect_keyword("SKIP", "after AFTER MATCH")
        if self.accept_keyword("PAST"):
            self.expect_keyword("LAST")
            self.expect_keyword("ROW")
            return A.SkipTo("PAST_LAST_ROW", pos=self.pos(start))
        if not self.accept_keyword("TO"):
            self.fail("PAST LAST ROW or TO after AFTER MATCH SKIP")
        if self.at_keywords("NEXT", "ROW"):
            self.i += 2
            return A.SkipTo("NEXT_ROW", pos=self.pos(start))
        if self.at_keywords("CURRENT", "ROW"):      # Esper: keep every match in the pool
            self.i += 2
            return A.SkipTo("CURRENT_ROW", pos=self.pos(start))
        kind = "LAST"
        # FIRST/LAST are keywords here unless they are the variable itself
        # (SKIP TO LAST is "skip to the variable named LAST").
        if self.tok.is_keyword("FIRST", "LAST") and self.peek().kind in (IDENT, QIDENT):
            kind = self.advance().text.upper()
        var_tok = self.tok
        name, _, _ = self.parse_name("a pattern variable, FIRST v, LAST v or NEXT ROW after SKIP TO")
        return A.SkipTo(kind, name, pos=self.pos(var_tok))

    def _parse_subset(self) -> A.Subset:
        t = self.tok
        name, _, _ = self.parse_name("a SUBSET name")
        self.expect_op("=", "after the SUBSET name")
        self.expect_op("(", "to open the SUBSET list")
        names, positions = [], []
        while True:
            positions.append(self.pos())
            n, _, _ = self.parse_name("a pattern variable in the SUBSET list")
            names.append(n)
            if not self.accept_op(","):
                break
        self.expect_op(")", "to close the SUBSET list")
        return A.Subset(name, tuple(names), pos=self.pos(t), var_pos=tuple(positions))

    def _parse_define(self) -> A.Define:
        t = self.tok
        name, _, _ = self.parse_name("a pattern variable to DEFINE")
        self.expect_keyword("AS", "after the variable in DEFINE")
        return A.Define(name, self.parse_expr(), pos=self.pos(t))

    # -------------------------------------------------------------- pattern
    def _parse_pattern_alt(self) -> A.Pattern:
        start = self.pos()
        items = [self._parse_pattern_concat()]
        while self.accept_op("|"):
            items.append(self._parse_pattern_concat())
        return items[0] if len(items) == 1 else A.PAlt(pos=start, items=tuple(items))

    def _parse_pattern_concat(self) -> A.Pattern:
        start = self.pos()
        items = []
        while not (self.tok.is_op("|", ")", "-}", ",") or self.tok.kind == EOF):
            # `DEFINE v AS` / `SUBSET u =` here means PATTERN's ')' is missing
            # (the words are valid variable names, so look at what follows).
            if (self.tok.is_keyword("DEFINE") and self.peek().kind in (IDENT, QIDENT)
                    and self.peek(2).is_keyword("AS")) or (
                    self.tok.is_keyword("SUBSET") and self.peek().kind in (IDENT, QIDENT)
                    and self.peek(2).is_op("=")):
                self.fail("')' to close PATTERN")
            items.append(self._parse_pattern_quantified())
        if not items:
            self.fail("a pattern variable, '(', '^', '$', '{-' or PERMUTE")
        return items[0] if len(items) == 1 else A.PConcat(pos=start, items=tuple(items))

    def _parse_pattern_quantified(self) -> A.Pattern:
        primary = self._parse_pattern_primary()
        quant = self._parse_quantifier()
        if quant is None:
            return primary
        lo, hi, greedy, qpos = quant
        possessive = greedy and bool(self.accept_op("+"))
        if possessive and not isinstance(primary, A.PVar):
            raise AnalysisError("a possessive quantifier (`*+`, `++`, `?+`) applies to a single "
                                "pattern variable", code="bad_possessive", line=qpos.line,
                                column=qpos.column)
        node = A.PQuant(pos=primary.pos, body=primary, min=lo, max=hi, greedy=greedy,
                        possessive=possessive)
        if self.tok.is_op("*", "+", "?", "{"):
            self.fail("a pattern element (a quantifier cannot follow a quantifier; "
                      "use parentheses)", code="double_quantifier")
        return node

    def _parse_quantifier(self):
        t = self.tok
        if t.is_op("*"):
            self.advance()
            lo, hi = 0, None
        elif t.is_op("+"):
            self.advance()
            lo, hi = 1, None
        elif t.is_op("?"):
            self.advance()
            lo, hi = 0, 1
        elif t.is_op("{"):
            self.advance()
            lo = self._parse_bound() if self.tok.kind == NUMBER else None
            exact = not self.tok.is_op(",")
            if self.accept_op(","):
                hi = self._parse_bound() if self.tok.kind == NUMBER else None
                lo = 0 if lo is None else lo
            else:
                if lo is None:
                    self.fail("a repetition count or ',' in the quantifier")
                hi = lo
            self.expect_op("}", "to close the quantifier")
            if hi == 0 and lo == 0 and not exact:
                raise AnalysisError("a quantifier's maximum must be greater than 0 (SQL:2016); "
                                    "write {0} for no repetition", code="bad_quantifier",
                                    line=t.line, column=t.column)
            if hi is not None and lo > hi:
                raise AnalysisError(f"quantifier {{{lo},{hi}}} has a minimum greater than its "
                                    f"maximum", code="bad_quantifier", line=t.line,
                                    column=t.column)
        else:
            return None
        greedy = not bool(self.accept_op("?"))
        return lo, hi, greedy, self.pos(t)

    def _parse_bound(self) -> int:
        t = self.advance()
        if not isinstance(t.value, int):
            self.fail("a non-negative integer repetition count", t)
        return t.value

    def _parse_pattern_primary(self) -> A.Pattern:
        t = self.tok
        p = self.pos()
        if t.is_op("("):
            self.advance()
            if self.accept_op(")"):
                return A.PEmpty(pos=p)
            inner = self._parse_pattern_alt()
            self.expect_op(")", "to close the pattern group")
            return inner
        if t.is_op("^", "$"):
            self.advance()
            return A.PAnchor(pos=p, kind=t.text)
        if t.is_op("{-"):
            self.advance()
            inner = self._parse_pattern_alt()
            self.expect_op("-}", "to close the exclusion '{-'")
            return A.PExclude(pos=p, body=inner)
        if t.is_keyword("PERMUTE") and self.peek().is_op("("):
            self.advance()
            self.advance()
            items = [self._parse_pattern_alt()]
            while self.accept_op(","):
                items.append(self._parse_pattern_alt())
            self.expect_op(")", "to close PERMUTE")
            return A.PPermute(pos=p, items=tuple(items))
        if t.kind in (IDENT, QIDENT):
            name, _, _ = self.parse_name("a pattern variable")
            return A.PVar(pos=p, name=name)
        self.fail("a pattern variable, '(', '^', '$', '{-' or PERMUTE")

    # ---------------------------------------------------------- expressions
    def parse_expr(self) -> A.Expr:
        return self._parse_or()

    def _parse_or(self) -> A.Expr:
        left = self._parse_and()
        while self.at_keyword("OR"):
            t = self.advance()
            left = A.Binary(pos=self.pos(t), op="OR", left=left, right=self._parse_and())
        return left

    def _parse_and(self) -> A.Expr:
        left = self._parse_not()
        while self.at_keyword("AND"):
            t = self.advance()
            left = A.Binary(pos=self.pos(t), op="AND", left=left, right=self._parse_not())
        return left

    def _parse_not(self) -> A.Expr:
        if self.at_keyword("NOT"):
            t = self.advance()
            return A.Unary(pos=self.pos(t), op="NOT", operand=self._parse_not())
        return self._parse_predicate()

    def _parse_predicate(self) -> A.Expr:
        left = self._parse_concat()
        t = self.tok
        if t.kind == OP and t.text in COMPARISONS:
            self.advance()
            op = "<>" if t.text == "!=" else t.text
            right = self._parse_concat()
            node = A.Binary(pos=self.pos(t), op=op, left=left, right=right)
            nt = self.tok
            if nt.kind == OP and nt.text in COMPARISONS:
                self.fail("AND or OR (comparisons do not chain; write a < b AND b < c)")
            return node
        if t.is_keyword("IS"):
            self.advance()
            negated = bool(self.accept_keyword("NOT"))
            if not self.accept_keyword("NULL"):
                self.fail("NULL or NOT NULL after IS")
            return A.IsNull(pos=self.pos(t), operand=left, negated=negated)
        negated = False
        if t.is_keyword("NOT") and self.peek().is_keyword("BETWEEN", "IN", "LIKE"):
            self.advance()
            negated = True
            t = self.tok
        if t.is_keyword("BETWEEN"):
            self.advance()
            low = self._parse_concat()
            self.expect_keyword("AND", "in BETWEEN")
            high = self._parse_concat()
            return A.Between(pos=self.pos(t), operand=left, low=low, high=high, negated=negated)
        if t.is_keyword("IN"):
            self.advance()
            if self.tok.is_op("(") and self.peek().is_keyword("SELECT", "WITH", "VALUES"):
                sub = self._parse_subquery("IN", self.pos())
                return A.InList(pos=self.pos(t), operand=left, items=(sub,), negated=negated)
            self.expect_op("(", "after IN")
            items = [self.parse_expr()]
            while self.accept_op(","):
                items.append(self.parse_expr())
            self.expect_op(")", "to close the IN list")
            return A.InList(pos=self.pos(t), operand=left, items=tuple(items), negated=negated)
        if t.is_keyword("LIKE"):
            self.advance()
            pattern = self._parse_concat()
            args = [left, pattern]
            if self.accept_keyword("ESCAPE"):
                args.append(self._parse_concat())
            call = A.Call(pos=self.pos(t), name="LIKE", args=tuple(args))
            return A.Unary(pos=self.pos(t), op="NOT", operand=call) if negated else call
        return left

    def _parse_concat(self) -> A.Expr:
        left = self._parse_additive()
        while self.tok.is_op("||"):
            t = self.advance()
            left = A.Binary(pos=self.pos(t), op="||", left=left, right=self._parse_additive())
        return left

    def _parse_additive(self) -> A.Expr:
        left = self._parse_multiplicative()
        while self.tok.is_op("+", "-"):
            t = self.advance()
            left = A.Binary(pos=self.pos(t), op=t.text, left=left,
                            right=self._parse_multiplicative())
        return left

    def _parse_multiplicative(self) -> A.Expr:
        left = self._parse_unary()
        while self.tok.is_op("*", "/", "%"):
            t = self.advance()
            left = A.Binary(pos=self.pos(t), op=t.text, left=left, right=self._parse_unary())
        return left

    def _parse_unary(self) -> A.Expr:
        if self.tok.is_op("-", "+"):
            t = self.advance()
            operand = self._parse_unary()
            if t.text == "-" and isinstance(operand, A.Literal) and operand.literal_type in (
                    "bigint", "double", "decimal"):
                return A.Literal(pos=self.pos(t), value=-operand.value,
                                 literal_type=operand.literal_type)
            return A.Unary(pos=self.pos(t), op=t.text, operand=operand)
        return self._parse_primary()

    def _parse_primary(self) -> A.Expr:
        t = self.tok
        p = self.pos()
        if t.kind == NUMBER:
            self.advance()
            if isinstance(t.value, int):
                return A.Literal(pos=p, value=t.value, literal_type="bigint")
            return A.Literal(pos=p, value=float(t.value), literal_type="double")
        if t.kind == STRING:
            self.advance()
            return A.Literal(pos=p, value=t.value, literal_type="varchar")
        if t.is_op("(") and self.peek().is_keyword("SELECT", "WITH", "VALUES"):
            return self._parse_subquery("SCALAR", p)
        if t.is_op("("):
            self.advance()
            inner = self.parse_expr()
            self.expect_op(")", "to close the parenthesis")
            return inner
        if t.kind == QIDENT:
            if self.peek().is_op("("):
                raise AnalysisError(f"unknown function \"{t.value}\" (a double-quoted name is "
                                    f"never a built-in function)", code="unknown_function",
                                    line=t.line, column=t.column)
            return self._parse_reference()
        if t.kind != IDENT:
            self.fail("an expression")
        word = t.text.upper()
        nxt = self.peek()
        if word in ("CURRENT_TIMESTAMP", "CURRENT_DATE", "LOCALTIMESTAMP") and not nxt.is_op("("):
            self.advance()
            return A.Call(pos=p, name=word, args=())
        if word in ("TRUE", "FALSE"):
            self.advance()
            return A.Literal(pos=p, value=word == "TRUE", literal_type="boolean")
        if word == "NULL":
            self.advance()
            return A.Literal(pos=p, value=None, literal_type="null")
        if word in ("DATE", "TIMESTAMP") and nxt.kind == STRING:
            return self._parse_typed_literal(word)
        if word == "INTERVAL" and (nxt.kind == STRING or nxt.is_op("-", "+")):
            return self._parse_interval()
        if word == "EXISTS" and nxt.is_op("(") and self.peek(2).is_keyword("SELECT", "WITH",
                                                                             "VALUES"):
            self.advance()
            return self._parse_subquery("EXISTS", p)
        if word == "CASE":
            return self._parse_case()
        if word == "CAST" and nxt.is_op("("):
            return self._parse_cast()
        if word in ("RUNNING", "FINAL") and nxt.kind == IDENT and self.peek(2).is_op("("):
            self.advance()
            call = self._parse_call()
            if isinstance(call, (A.Navigation, A.Aggregate)):
                from dataclasses import replace
                return replace(call, semantics=word)
            raise AnalysisError(f"{word} applies only to FIRST, LAST and aggregate functions, "
                                f"not to {call.to_sql()}", code="bad_semantics",
                                line=t.line, column=t.column)
        if nxt.is_op("(") and word not in _RESERVED_IN_EXPR:
            return self._parse_call()
        if word in _RESERVED_IN_EXPR:
            self.fail("an expression")
        return self._parse_reference()

    def _parse_reference(self) -> A.Expr:
        t = self.tok
        name, quoted, tok = self.parse_name("a column")
        if self.tok.is_op("["):
            return self._parse_indexed_reference(name, t)
        if self.accept_op("."):
            ct = self.tok
            if ct.is_op("*"):
                self.fail("a column name after '.' ('var.*' is allowed only in COUNT)")
            _, cquoted, ctok = self.parse_name("a column name after '.'")
            if self.tok.is_op("."):
                self.fail("an operator (only var.column references are allowed; no table "
                          "qualifiers)")
            return A.ColumnRef(pos=self.pos(t), var=name,
                               column=ctok.value if cquoted else ctok.text, quoted=cquoted)
        return A.ColumnRef(pos=self.pos(t), column=tok.value if quoted else tok.text,
                           quoted=quoted)

    def _parse_indexed_reference(self, var: str, t: Token) -> A.Navigation:
        """Esper's ``B[i].col``: the i-th row (from 0) mapped to group variable
        B, which is FIRST(B.col, i)."""
        self.advance()   # [
        index_tok = self.tok
        if index_tok.kind != NUMBER or not isinstance(index_tok.value, int):
            self.fail("a non-negative integer index in var[index].column")
        self.advance()
        self.expect_op("]", "to close the index")
        self.expect_op(".", "and a column after var[index]")
        _, cquoted, ctok = self.parse_name("a column name after var[index].")
        column = A.ColumnRef(pos=self.pos(t), var=var, column=ctok.value if cquoted else ctok.text,
                             quoted=cquoted)
        offset = A.Literal(pos=self.pos(index_tok), value=index_tok.value, literal_type="bigint")
        return A.Navigation(pos=self.pos(t), kind="FIRST", arg=column, offset=offset,
                            indexed=True)

    def _parse_typed_literal(self, word: str) -> A.Literal:
        t = self.advance()
        s = self.advance()
        if word == "DATE":
            value = T.date_from_text(s.value)
            if value is None:
                raise SqlSyntaxError(f"invalid DATE literal {s.text}; expected 'YYYY-MM-DD'",
                                     code="bad_literal", line=s.line, column=s.column)
            return A.Literal(pos=self.pos(t), value=value, literal_type="date")
        value = T.timestamp_from_text(s.value)
        if value is None:
            raise SqlSyntaxError(f"invalid TIMESTAMP literal {s.text}; expected "
                                 f"'YYYY-MM-DD HH:MM:SS[.ffffff]'", code="bad_literal",
                                 line=s.line, column=s.column)
        return A.Literal(pos=self.pos(t), value=value, literal_type="timestamp")

    def _parse_interval(self) -> A.Literal:
        t = self.advance()
        sign = 1
        if self.tok.is_op("-", "+"):
            sign = -1 if self.advance().text == "-" else 1
        s = self.tok
        if s.kind != STRING:
            self.fail("a quoted interval value, e.g. INTERVAL '5' MINUTE")
        self.advance()
        units = ("YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "SECOND")
        plural = {u + "S": u for u in units}

        def unit() -> str:
            u = self.tok.upper
            u = plural.get(u, u)
            if u not in units:
                self.fail("an interval unit (YEAR, MONTH, DAY, HOUR, MINUTE, SECOND)")
            self.advance()
            return u

        first = unit()
        last = first
        if self.accept_keyword("TO"):
            last = unit()
            if units.index(last) <= units.index(first) or (first in ("YEAR", "MONTH")) != (
                    last in ("YEAR", "MONTH")):
                raise SqlSyntaxError(f"invalid interval qualifier {first} TO {last}",
                                     code="bad_literal", line=t.line, column=t.column)
        value = _interval_value(s.value, first, last)
        if value is None:
            raise SqlSyntaxError(f"invalid INTERVAL literal {s.text} for {first}"
                                 + (f" TO {last}" if last != first else ""),
                                 code="bad_literal", line=s.line, column=s.column)
        kind = "interval_ym" if first in ("YEAR", "MONTH") else "interval"
        return A.Literal(pos=self.pos(t), value=sign * value, literal_type=kind)

    def _parse_case(self) -> A.Case:
        t = self.advance()
        operand = None
        if not self.at_keyword("WHEN"):
            operand = self.parse_expr()
        whens = []
        while self.accept_keyword("WHEN"):
            cond = self.parse_expr()
            self.expect_keyword("THEN", "in CASE")
            whens.append((cond, self.parse_expr()))
        if not whens:
            self.fail("WHEN in CASE")
        else_ = self.parse_expr() if self.accept_keyword("ELSE") else None
        self.expect_keyword("END", "to close CASE")
        return A.Case(pos=self.pos(t), operand=operand, whens=tuple(whens), else_=else_)

    def _parse_cast(self) -> A.Cast:
        t = self.advance()
        self.advance()   # (
        operand = self.parse_expr()
        self.expect_keyword("AS", "in CAST")
        target = self._parse_type_name()
        self.expect_op(")", "to close CAST")
        return A.Cast(pos=self.pos(t), operand=operand, target=target)

    def _parse_type_name(self) -> T.SqlType:
        t = self.tok
        word = t.upper
        self.advance()
        simple = {"BIGINT": T.BIGINT, "INT": T.BIGINT, "INTEGER": T.BIGINT, "SMALLINT": T.BIGINT,
                  "TINYINT": T.BIGINT, "DOUBLE": T.DOUBLE, "FLOAT": T.DOUBLE, "REAL": T.DOUBLE,
                  "BOOLEAN": T.BOOLEAN, "BOOL": T.BOOLEAN, "DATE": T.DATE,
                  "VARCHAR": T.VARCHAR, "CHAR": T.VARCHAR, "STRING": T.VARCHAR,
                  "TEXT": T.VARCHAR, "TIMESTAMP": T.TIMESTAMP}
        if word == "DOUBLE":
            self.accept_keyword("PRECISION")
        if word in ("VARCHAR", "CHAR") and self.accept_op("("):
            if self.tok.kind != NUMBER:
                self.fail("a length")
            self.advance()
            self.expect_op(")")
        if word in ("DECIMAL", "NUMERIC"):
            precision, scale = 38, 0
            if self.accept_op("("):
                precision = self._parse_bound()
                if self.accept_op(","):
                    scale = self._parse_bound()
                self.expect_op(")", "to close the DECIMAL precision")
            if not (1 <= precision <= 38 and 0 <= scale <= precision):
                raise AnalysisError(f"invalid DECIMAL({precision}, {scale})", code="bad_type",
                                    line=t.line, column=t.column)
            return T.decimal_type(precision, scale)
        if word in simple:
            return simple[word]
        self.fail("a type name (BIGINT, DOUBLE, DECIMAL(p, s), VARCHAR, BOOLEAN, DATE, "
                  "TIMESTAMP)", t)

    def _parse_subquery(self, kind: str, p: A.Pos) -> A.Subquery:
        """``( SELECT ... )``: kept as SQL text; analysis runs it once."""
        self.expect_op("(")
        depth, parts = 1, []
        while True:
            t = self.tok
            if t.kind == EOF:
                self.fail("')' to close the subquery")
            if t.is_op("("):
                depth += 1
            elif t.is_op(")"):
                depth -= 1
                if depth == 0:
                    self.advance()
                    break
            parts.append(t.text)
            self.advance()
        return A.Subquery(pos=p, sql=" ".join(parts), kind=kind)

    def _reject_window_syntax(self) -> None:
        t = self.tok
        if t.is_keyword("OVER", "FILTER", "WITHIN") and self.peek().is_op("(") or \
                t.is_keyword("WITHIN") and self.peek().is_keyword("GROUP"):
            raise AnalysisError(f"{t.text.upper()} is not allowed inside MATCH_RECOGNIZE: "
                                f"window functions, FILTER and WITHIN GROUP cannot be used in "
                                f"MEASURES or DEFINE", code="window_syntax",
                                line=t.line, column=t.column)

    def _parse_call(self) -> A.Expr:
        call = self._parse_call_inner()
        if isinstance(call, A.Aggregate) and self.at_keyword("OVER") and \
                self.peek().is_op("(") and self.peek(2).is_keyword("ORDER"):
            # the proposal's cumulative aggregate, agg(x) OVER (ORDER BY ...): RUNNING
            self.advance()
            self.advance()
            self.advance()
            self.expect_keyword("BY", "after ORDER")
            keys = [self._parse_sort_key()]
            while self.accept_op(","):
                keys.append(self._parse_sort_key())
            self.expect_op(")", "to close OVER (ORDER BY ...)")
            if call.semantics == "FINAL":
                raise AnalysisError("a cumulative aggregate (OVER (ORDER BY ...)) is RUNNING; "
                                    "it cannot be FINAL", code="bad_semantics",
                                    line=call.pos.line, column=call.pos.column)
            from dataclasses import replace
            call = replace(call, semantics="RUNNING", over_order=tuple(keys))
        self._reject_window_syntax()
        return call

    def _parse_call_inner(self) -> A.Expr:
        t = self.advance()
        name = t.text.upper()
        p = self.pos(t)
        self.advance()   # (
        if name in NAVIGATION:
            args = self._parse_arguments(name)
            if not 1 <= len(args) <= 2:
                raise AnalysisError(f"{name} takes 1 or 2 arguments (a value and an offset), "
                                    f"not {len(args)}", code="bad_arity", line=t.line,
                                    column=t.column)
            return A.Navigation(pos=p, kind=name, arg=args[0],
                                offset=args[1] if len(args) > 1 else None)
        if name == "CLASSIFIER":
            args = self._parse_arguments(name)
            if len(args) > 1 or (args and not (isinstance(args[0], A.ColumnRef)
                                               and args[0].var is None)):
                raise AnalysisError("CLASSIFIER takes no argument or one pattern variable",
                                    code="bad_arity", line=t.line, column=t.column)
            var = None
            if args:
                var = args[0].column if args[0].quoted else args[0].column.upper()
            return A.Classifier(pos=p, var=var)
        if name == "MATCH_NUMBER":
            if self._parse_arguments(name):
                raise AnalysisError("MATCH_NUMBER takes no arguments", code="bad_arity",
                                    line=t.line, column=t.column)
            return A.MatchNumber(pos=p)
        if name in AGGREGATES:
            return self._parse_aggregate(name, p)
        if name in ("SUBSTRING", "SUBSTR") and not self.tok.is_op(")"):
            first = self.parse_expr()
            if self.accept_keyword("FROM"):
                args = [first, self.parse_expr()]
                if self.accept_keyword("FOR"):
                    args.append(self.parse_expr())
                self.expect_op(")", f"to close {name}")
                return A.Call(pos=p, name="SUBSTR", args=tuple(args))
            args = [first]
            while self.accept_op(","):
                args.append(self.parse_expr())
            self.expect_op(")", f"to close {name}")
            return A.Call(pos=p, name="SUBSTR", args=tuple(args))
        return A.Call(pos=p, name=name, args=tuple(self._parse_arguments(name)))

    def _parse_arguments(self, name: str) -> list:
        """The comma-separated arguments after '(' up to and including ')'."""
        args = []
        if not self.tok.is_op(")"):
            args.append(self.parse_expr())
            while self.accept_op(","):
                args.append(self.parse_expr())
        self.expect_op(")", f"to close {name}")
        return args

    def _parse_aggregate(self, name: str, p: A.Pos) -> A.Aggregate:
        if name == "COUNT":
            if self.accept_op("*"):
                self.expect_op(")", "to close COUNT(*)")
                return A.Aggregate(pos=p, name=name, star=True)
            if self.tok.is_op(")"):
                self.advance()
                return A.Aggregate(pos=p, name=name, star=True)
            if self.tok.kind in (IDENT, QIDENT) and self.peek().is_op(".") \
                    and self.peek(2).is_op("*"):
                var, _, _ = self.parse_name("a pattern variable")
                self.i += 2
                self.expect_op(")", "to close COUNT(var.*)")
                return A.Aggregate(pos=p, name=name, star=True, star_var=var)
        distinct = bool(self.accept_keyword("DISTINCT"))
        self.accept_keyword("ALL") if not distinct else None
        args = [self.parse_expr()]
        while self.accept_op(","):
            args.append(self.parse_expr())
        self.expect_op(")", f"to close {name}")
        return A.Aggregate(pos=p, name=name, args=tuple(args), distinct=distinct)


def _interval_value(text: str, first: str, last: str) -> Optional[int]:
    """Interval text for the qualifier ``first TO last`` -> ns (or months)."""
    text = text.strip()
    neg = text.startswith("-")
    if neg:
        text = text[1:].strip()
    try:
        if first in ("YEAR", "MONTH"):
            if first == last:
                n = int(text)
                months = n * 12 if first == "YEAR" else n
            else:
                y, m = text.split("-")
                months = int(y) * 12 + int(m)
                if not 0 <= int(m) < 12:
                    return None
            return -months if neg else months
        order = ["DAY", "HOUR", "MINUTE", "SECOND"]
        fields_wanted = order[order.index(first):order.index(last) + 1]
        parts: list[str] = []
        if "DAY" in fields_wanted and len(fields_wanted) > 1:
            day, _, rest = text.partition(" ")
            parts = [day] + (rest.split(":") if rest else [])
        else:
            parts = text.split(":")
        if len(parts) != len(fields_wanted):
            return None
        total = Decimal(0)
        for unit_name, part in zip(fields_wanted, parts):
            value = Decimal(part)
            if unit_name != "SECOND" and value != value.to_integral_value():
                return None
            total += value * T.INTERVAL_UNITS_NS[unit_name]
        if total != total.to_integral_value():
            return None
        return -int(total) if neg else int(total)
    except (ValueError, InvalidOperation):
        return None
