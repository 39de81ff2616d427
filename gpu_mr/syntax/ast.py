"""AST of a MATCH_RECOGNIZE clause: frozen dataclasses with a source position.

What: the parser's output and the analyzer's input. Expression nodes carry a
``type`` slot that the analyzer fills (``None`` straight from the parser);
``ColumnRef`` also gets its resolved column name. Every node prints itself
back as SQL (``to_sql``) so tests can round-trip parse -> print -> parse.
Why one hierarchy: the analyzer rebuilds checked nodes with
``dataclasses.replace`` instead of mirroring every class in a second IR.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Iterator, Optional

from .types import SqlType


@dataclass(frozen=True)
class Pos:
    line: int
    column: int

    def __str__(self) -> str:
        return f"line {self.line}, column {self.column}"


NOPOS = Pos(0, 0)


def quote_ident(name: str) -> str:
    """Print an identifier so that it parses back to the same name."""
    if name.isidentifier() and name.upper() == name and name.isascii():
        return name
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Node:
    def children(self) -> Iterator["Node"]:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Node):
                yield value
            elif isinstance(value, tuple):
                for item in value:
                    if isinstance(item, Node):
                        yield item
                    elif isinstance(item, tuple):
                        yield from (x for x in item if isinstance(x, Node))

    def walk(self) -> Iterator["Node"]:
        yield self
        for child in self.children():
            yield from child.walk()


# ---------------------------------------------------------------- expressions

@dataclass(frozen=True)
class Expr(Node):
    pos: Pos = field(default=NOPOS, compare=False, repr=False)


@dataclass(frozen=True)
class Literal(Expr):
    value: Any = None
    literal_type: str = "null"   # bigint double varchar boolean null date timestamp interval decimal
    type: Optional[SqlType] = None

    def to_sql(self) -> str:
        from .types import literal_sql
        return literal_sql(self.value, self.literal_type)


@dataclass(frozen=True)
class ColumnRef(Expr):
    """``[var.]column``. ``var`` is the canonical pattern variable name or None
    (the universal variable). ``column`` is as written; ``quoted`` says whether
    it was double-quoted (exact match) or not (case-insensitive)."""
    var: Optional[str] = None
    column: str = ""
    quoted: bool = False
    resolved: Optional[str] = None          # the input column's real name
    type: Optional[SqlType] = None

    def to_sql(self) -> str:
        col = '"' + self.column.replace('"', '""') + '"' if self.quoted else self.column
        return f"{quote_ident(self.var)}.{col}" if self.var else col


@dataclass(frozen=True)
class Unary(Expr):
    op: str = "-"                 # '-', '+', 'NOT'
    operand: Expr = None
    type: Optional[SqlType] = None

    def to_sql(self) -> str:
        sep = " " if self.op == "NOT" else ""
        return f"({self.op}{sep}{self.operand.to_sql()})"


@dataclass(frozen=True)
class Binary(Expr):
    op: str = "+"                 # + - * / % || = <> < <= > >= AND OR
    left: Expr = None
    right: Expr = None
    type: Optional[SqlType] = None

    def to_sql(self) -> str:
        return f"({self.left.to_sql()} {self.op} {self.right.to_sql()})"


@dataclass(frozen=True)
class Between(Expr):
    operand: Expr = None
    low: Expr = None
    high: Expr = None
    negated: bool = False
    type: Optional[SqlType] = None

    def to_sql(self) -> str:
        neg = "NOT " if self.negated else ""
        return f"({self.operand.to_sql()} {neg}BETWEEN {self.low.to_sql()} AND {self.high.to_sql()})"


@dataclass(frozen=True)
class InList(Expr):
    operand: Expr = None
    items: tuple = ()
    negated: bool = False
    type: Optional[SqlType] = None

    def to_sql(self) -> str:
        neg = "NOT " if self.negated else ""
        if len(self.items) == 1 and isinstance(self.items[0], Subquery) \
                and self.items[0].kind == "IN":
            return f"({self.operand.to_sql()} {neg}IN ({self.items[0].sql}))"
        return f"({self.operand.to_sql()} {neg}IN ({', '.join(i.to_sql() for i in self.items)}))"


@dataclass(frozen=True)
class IsNull(Expr):
    operand: Expr = None
    negated: bool = False
    type: Optional[SqlType] = None

    def to_sql(self) -> str:
        return f"({self.operand.to_sql()} IS {'NOT ' if self.negated else ''}NULL)"


@dataclass(frozen=True)
class Case(Expr):
    operand: Optional[Expr] = None          # CASE x WHEN ... (simple form)
    whens: tuple = ()                       # ((condition_or_value, result), ...)
    else_: Optional[Expr] = None
    type: Optional[SqlType] = None

    def to_sql(self) -> str:
        parts = ["CASE"]
        if self.operand is not None:
            parts.append(self.operand.to_sql())
        for cond, result in self.whens:
            parts.append(f"WHEN {cond.to_sql()} THEN {result.to_sql()}")
        if self.else_ is not None:
            parts.append(f"ELSE {self.else_.to_sql()}")
        parts.append("END")
        return " ".join(parts)


@dataclass(frozen=True)
class Cast(Expr):
    operand: Expr = None
    target: SqlType = None
    type: Optional[SqlType] = None

    def to_sql(self) -> str:
        return f"CAST({self.operand.to_sql()} AS {self.target.sql_name()})"


@dataclass(frozen=True)
class Call(Expr):
    """A scalar function call (ABS, COALESCE, ...)."""
    name: str = ""
    args: tuple = ()
    type: Optional[SqlType] = None

    def to_sql(self) -> str:
        if self.name in ("CURRENT_TIMESTAMP", "CURRENT_DATE", "LOCALTIMESTAMP") and not self.args:
            return self.name
        if self.name == "LIKE":
            escape = f" ESCAPE {self.args[2].to_sql()}" if len(self.args) > 2 else ""
            return f"({self.args[0].to_sql()} LIKE {self.args[1].to_sql()}{escape})"
        return f"{self.name}({', '.join(a.to_sql() for a in self.args)})"


@dataclass(frozen=True)
class Subquery(Expr):
    """An uncorrelated subquery: ``(SELECT ...)``, ``EXISTS (...)`` or the
    list of ``x IN (SELECT ...)``. Analysis runs it once and replaces it
    with its constant value(s)."""
    sql: str = ""
    kind: str = "SCALAR"        # SCALAR | EXISTS | IN
    type: Optional[SqlType] = None

    def to_sql(self) -> str:
        return ("EXISTS " if self.kind == "EXISTS" else "") + f"({self.sql})"


@dataclass(frozen=True)
class Navigation(Expr):
    """PREV/NEXT (physical) and FIRST/LAST (logical) navigation."""
    kind: str = "PREV"
    arg: Expr = None
    offset: Optional[Expr] = None           # None: the default (1 for PREV/NEXT, 0 for FIRST/LAST)
    semantics: Optional[str] = None         # RUNNING / FINAL as written (FIRST/LAST only)
    indexed: bool = False                   # written B[i].col (Esper): FIRST(B.col, i)
    type: Optional[SqlType] = None

    def to_sql(self) -> str:
        if self.indexed:
            return f"{quote_ident(self.arg.var)}[{self.offset.value}].{self.arg.to_sql().split('.', 1)[1]}"
        sem = f"{self.semantics} " if self.semantics else ""
        off = f", {self.offset.to_sql()}" if self.offset is not None else ""
        return f"{sem}{self.kind}({self.arg.to_sql()}{off})"


@dataclass(frozen=True)
class Aggregate(Expr):
    """COUNT/SUM/AVG/... over rows of a (possibly universal) pattern variable.
    ``star`` is COUNT(*) or COUNT(var.*), with ``star_var`` the variable."""
    name: str = "COUNT"
    args: tuple = ()
    star: bool = False
    star_var: Optional[str] = None
    distinct: bool = False
    semantics: Optional[str] = None
    over_order: tuple = ()                  # agg(x) OVER (ORDER BY ...): the proposal's
                                            # cumulative (RUNNING) aggregate
    var: Optional[str] = None               # filled by analysis: rows aggregated over
    type: Optional[SqlType] = None

    def to_sql(self) -> str:
        sem = f"{self.semantics} " if self.semantics and not self.over_order else ""
        if self.star:
            inner = f"{quote_ident(self.star_var)}.*" if self.star_var else "*"
        else:
            inner = ("DISTINCT " if self.distinct else "") + ", ".join(a.to_sql() for a in self.args)
        over = (" OVER (ORDER BY " + ", ".join(k.to_sql() for k in self.over_order) + ")"
                if self.over_order else "")
        return f"{sem}{self.name}({inner}){over}"


@dataclass(frozen=True)
class Classifier(Expr):
    var: Optional[str] = None
    type: Optional[SqlType] = None

    def to_sql(self) -> str:
        return f"CLASSIFIER({quote_ident(self.var) if self.var else ''})"


@dataclass(frozen=True)
class MatchNumber(Expr):
    type: Optional[SqlType] = None

    def to_sql(self) -> str:
        return "MATCH_NUMBER()"


# ------------------------------------------------------------------- patterns

@dataclass(frozen=True)
class Pattern(Node):
    pos: Pos = field(default=NOPOS, compare=False, repr=False)


@dataclass(frozen=True)
class PVar(Pattern):
    name: str = ""

    def to_sql(self) -> str:
        return quote_ident(self.name)


@dataclass(frozen=True)
class PEmpty(Pattern):
    def to_sql(self) -> str:
        return "()"


@dataclass(frozen=True)
class PAnchor(Pattern):
    kind: str = "^"          # '^' partition start, '$' partition end

    def to_sql(self) -> str:
        return self.kind


@dataclass(frozen=True)
class PConcat(Pattern):
    items: tuple = ()

    def to_sql(self) -> str:
        return " ".join(_pattern_operand(i, PConcat) for i in self.items)


@dataclass(frozen=True)
class PAlt(Pattern):
    items: tuple = ()

    def to_sql(self) -> str:
        return " | ".join(_pattern_operand(i, PAlt) for i in self.items)


@dataclass(frozen=True)
class PQuant(Pattern):
    body: Pattern = None
    min: int = 0
    max: Optional[int] = None     # None: unbounded
    greedy: bool = True
    possessive: bool = False      # `Y*+`: takes every row it can, never gives one back

    def to_sql(self) -> str:
        if (self.min, self.max) == (0, None):
            q = "*"
        elif (self.min, self.max) == (1, None):
            q = "+"
        elif (self.min, self.max) == (0, 1):
            q = "?"
        elif self.min == self.max:
            q = f"{{{self.min}}}"
        else:
            q = f"{{{self.min},{'' if self.max is None else self.max}}}"
        suffix = "+" if self.possessive else ("" if self.greedy else "?")
        return _pattern_operand(self.body, PQuant) + q + suffix


@dataclass(frozen=True)
class PPermute(Pattern):
    items: tuple = ()

    def to_sql(self) -> str:
        return "PERMUTE(" + ", ".join(i.to_sql() for i in self.items) + ")"


@dataclass(frozen=True)
class PExclude(Pattern):
    body: Pattern = None

    def to_sql(self) -> str:
        return "{- " + self.body.to_sql() + " -}"


def _pattern_operand(p: Pattern, parent: type) -> str:
    atomic = isinstance(p, (PVar, PEmpty, PAnchor, PPermute, PExclude))
    if parent is PAlt:
        atomic = atomic or isinstance(p, (PConcat, PQuant))
    elif parent is PConcat:
        atomic = atomic or isinstance(p, PQuant)
    return p.to_sql() if atomic else "(" + p.to_sql() + ")"


# --------------------------------------------------------------------- clause

@dataclass(frozen=True)
class SortKey(Node):
    column: ColumnRef = None
    ascending: bool = True
    nulls_first: Optional[bool] = None      # None: as written nothing (NULLS LAST)

    def to_sql(self) -> str:
        s = self.column.to_sql() + ("" if self.ascending else " DESC")
        if self.nulls_first is not None:
            s += " NULLS FIRST" if self.nulls_first else " NULLS LAST"
        return s


@dataclass(frozen=True)
class Measure(Node):
    expr: Expr = None
    name: str = ""                 # alias as written (quoted: exact)
    quoted: bool = False
    pos: Pos = field(default=NOPOS, compare=False, repr=False)

    def to_sql(self) -> str:
        alias = '"' + self.name.replace('"', '""') + '"' if self.quoted else self.name
        return f"{self.expr.to_sql()} AS {alias}"


@dataclass(frozen=True)
class Subset(Node):
    name: str = ""
    vars: tuple = ()               # canonical names
    pos: Pos = field(default=NOPOS, compare=False, repr=False)
    var_pos: tuple = field(default=(), compare=False, repr=False)

    def to_sql(self) -> str:
        return f"{quote_ident(self.name)} = ({', '.join(quote_ident(v) for v in self.vars)})"


@dataclass(frozen=True)
class Define(Node):
    var: str = ""
    expr: Expr = None
    pos: Pos = field(default=NOPOS, compare=False, repr=False)

    def to_sql(self) -> str:
        return f"{quote_ident(self.var)} AS {self.expr.to_sql()}"


@dataclass(frozen=True)
class SkipTo(Node):
    kind: str = "PAST_LAST_ROW"    # PAST_LAST_ROW | NEXT_ROW | FIRST | LAST
    var: Optional[str] = None
    pos: Pos = field(default=NOPOS, compare=False, repr=False)

    def to_sql(self) -> str:
        if self.kind == "PAST_LAST_ROW":
            return "AFTER MATCH SKIP PAST LAST ROW"
        if self.kind == "NEXT_ROW":
            return "AFTER MATCH SKIP TO NEXT ROW"
        if self.kind == "CURRENT_ROW":
            return "AFTER MATCH SKIP TO CURRENT ROW"
        return f"AFTER MATCH SKIP TO {self.kind} {quote_ident(self.var)}"


@dataclass(frozen=True)
class TimeLimit(Node):
    """``WITHIN interval`` (Flink) or ``INTERVAL period`` (Esper) after PATTERN."""
    keyword: str = "WITHIN"
    interval: Literal = None       # an INTERVAL literal (ns, or months)
    pos: Pos = field(default=NOPOS, compare=False, repr=False)

    def to_sql(self) -> str:
        # Esper's form reads back from the bare literal: INTERVAL '5' SECOND
        prefix = "WITHIN " if self.keyword == "WITHIN" else ""
        return prefix + self.interval.to_sql()


@dataclass(frozen=True)
class MatchRecognize(Node):
    partition_by: tuple = ()       # ColumnRef
    order_by: tuple = ()           # SortKey
    measures: tuple = ()           # Measure
    rows_per_match: str = "ONE"    # ONE | ALL
    empty_matches: str = "SHOW"    # SHOW | OMIT | UNMATCHED (ALL ROWS only)
    skip: SkipTo = field(default_factory=SkipTo)
    pattern: Pattern = None
    subsets: tuple = ()            # Subset
    defines: tuple = ()            # Define
    time_limit: Optional[TimeLimit] = None
    mode: Optional[str] = None     # None (SQL:2016) | MAXIMAL | INCREMENTAL | ALL
    # A condition on the whole match, tested once it is complete (ESL-TS's
    # final aggregates); not SQL syntax, so it does not print.
    match_filter: Optional[Expr] = None
    pattern_pos: Pos = field(default=NOPOS, compare=False, repr=False)

    def to_sql(self) -> str:
        lines = []
        if self.partition_by:
            lines.append("PARTITION BY " + ", ".join(c.to_sql() for c in self.partition_by))
        if self.order_by:
            lines.append("ORDER BY " + ", ".join(k.to_sql() for k in self.order_by))
        if self.measures:
            lines.append("MEASURES " + ", ".join(m.to_sql() for m in self.measures))
        if self.rows_per_match == "ONE":
            lines.append("ONE ROW PER MATCH")
        else:
            extra = {"SHOW": " SHOW EMPTY MATCHES", "OMIT": " OMIT EMPTY MATCHES",
                     "UNMATCHED": " WITH UNMATCHED ROWS"}[self.empty_matches]
            lines.append("ALL ROWS PER MATCH" + extra)
        lines.append(self.skip.to_sql())
        if self.mode is not None:
            lines.append("ALL MATCHES" if self.mode == "ALL" else f"{self.mode} MATCH")
        lines.append(f"PATTERN ({self.pattern.to_sql()})")
        if self.time_limit is not None:
            lines.append(self.time_limit.to_sql())
        if self.subsets:
            lines.append("SUBSET " + ", ".join(s.to_sql() for s in self.subsets))
        if self.defines:
            lines.append("DEFINE " + ", ".join(d.to_sql() for d in self.defines))
        return "\n".join(lines)


@dataclass(frozen=True)
class WindowPattern(Node):
    """Row pattern recognition in a WINDOW specification: the pattern clause
    (ONE ROW PER MATCH semantics) plus the frame and INITIAL/SEEK."""
    clause: MatchRecognize = None
    frame_end: Optional[int] = None    # rows after the current one; None: UNBOUNDED
    seek: bool = False
    pos: Pos = field(default=NOPOS, compare=False, repr=False)


def is_node(x: Any) -> bool:
    return is_dataclass(x) and isinstance(x, Node)
