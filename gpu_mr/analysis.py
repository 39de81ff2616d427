"""Static analysis: names, variables, nesting rules and types.

What: (parsed clause, input schema) -> :class:`CheckedQuery`, or an
:class:`~gpu_mr.errors.AnalysisError` naming the rule broken and where.
Each static rule of SQL:2016 row pattern recognition is one short block
below (in the spirit of Trino's PatternRecognitionAnalyzer). Expressions come
back as the same AST classes with ``type`` (and ``ColumnRef.resolved``,
``Aggregate.var``) filled in.
Cost: linear in the size of the clause.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import pyarrow as pa

from .errors import AnalysisError
from .syntax import ast as A
from .syntax import types as T
from .syntax.types import SqlType

# Scalar functions: name -> (min args, max args or None).
SCALAR_ARITY = {
    "ABS": (1, 1), "ROUND": (1, 2), "FLOOR": (1, 1), "CEIL": (1, 1), "CEILING": (1, 1),
    "SQRT": (1, 1), "LN": (1, 1), "LOG10": (1, 1), "EXP": (1, 1), "POWER": (2, 2),
    "POW": (2, 2), "SIGN": (1, 1), "MOD": (2, 2), "GREATEST": (1, None), "LEAST": (1, None),
    "COALESCE": (1, None), "NULLIF": (2, 2), "LOWER": (1, 1), "UPPER": (1, 1),
    "LENGTH": (1, 1), "CHAR_LENGTH": (1, 1), "SUBSTR": (2, 3), "CONCAT": (1, None),
    "TRIM": (1, 1), "LTRIM": (1, 1), "RTRIM": (1, 1), "REPLACE": (3, 3), "LIKE": (2, 3),
    "CURRENT_TIMESTAMP": (0, 0), "LOCALTIMESTAMP": (0, 0), "CURRENT_DATE": (0, 0),
}
AGGREGATE_ARITY = {
    "COUNT": (1, 1), "SUM": (1, 1), "AVG": (1, 1), "MIN": (1, 1), "MAX": (1, 1),
    "ARRAY_AGG": (1, 1), "STDDEV": (1, 1), "STDDEV_SAMP": (1, 1), "STDDEV_POP": (1, 1),
    "VARIANCE": (1, 1), "VAR_SAMP": (1, 1), "VAR_POP": (1, 1), "MAX_BY": (2, 2),
    "MIN_BY": (2, 2), "BOOL_AND": (1, 1), "BOOL_OR": (1, 1), "EVERY": (1, 1),
    "COUNT_IF": (1, 1), "ANY_VALUE": (1, 1),
}


@dataclass(frozen=True)
class CheckedMeasure:
    name: str
    expr: A.Expr
    type: SqlType


@dataclass(frozen=True)
class CheckedQuery:
    """A clause that passed every static rule, with everything resolved."""
    clause: A.MatchRecognize
    input_schema: pa.Schema
    column_types: dict                    # input column name -> SqlType
    primary_vars: tuple                   # canonical names, in order of first appearance
    subsets: dict                         # subset name -> tuple of primary names
    defines: dict                         # primary name -> typed boolean Expr
    measures: tuple                       # CheckedMeasure
    partition_columns: tuple              # resolved input column names
    order_keys: tuple                     # (resolved name, ascending, nulls_first)
    rows_per_match: str                   # ONE | ALL
    empty_matches: str                    # SHOW | OMIT | UNMATCHED
    skip: A.SkipTo
    pattern: A.Pattern
    has_exclusion: bool
    history_dependent: bool               # some DEFINE looks at match state
    output_schema: pa.Schema = field(default=None)
    time_limit: Optional[A.TimeLimit] = None   # WITHIN / INTERVAL after PATTERN
    time_column: Optional[str] = None          # the ORDER BY column it is measured on
    mode: Optional[str] = None                 # None (SQL:2016) | MAXIMAL | INCREMENTAL | ALL
    match_filter: Optional[A.Expr] = None      # boolean, on the complete match (ESL-TS)

    def referenced_columns(self) -> set:
        """The input columns that DEFINEs, MEASURES and the match filter name."""
        names = set()
        exprs = list(self.defines.values()) + [m.expr for m in self.measures]
        if self.match_filter is not None:
            exprs.append(self.match_filter)
        for e in exprs:
            for n in e.walk():
                if isinstance(n, A.ColumnRef):
                    names.add(n.resolved)
        return names

    def matching_columns(self) -> set:
        """The columns the matcher reads at each row: the referenced ones
        and the time limit's column."""
        return self.referenced_columns() | ({self.time_column} if self.time_column else set())

    def columns_read(self) -> set:
        """Every input column the query reads or returns: the matching
        ones, the partition and order keys and the input columns in the
        output (all of them in ALL ROWS PER MATCH)."""
        inputs = set(self.input_schema.names)
        return (self.matching_columns() | set(self.partition_columns)
                | {name for name, _, _ in self.order_keys}
                | {f.name for f in self.output_schema if f.name in inputs})

    def var_rows(self, var: Optional[str]) -> Optional[frozenset]:
        """The primary variables a (possibly subset/universal) name covers;
        None means the universal variable."""
        if var is None:
            return None
        if var in self.subsets:
            return frozenset(self.subsets[var])
        return frozenset([var])


def analyze(clause: A.MatchRecognize, schema: Optional[pa.Schema]) -> CheckedQuery:
    """Check ``clause`` against an input ``schema`` and resolve it."""
    return _Analyzer(clause, schema).run()


def _v(name: str) -> str:
    """A variable name as the user must write it (quoted when case matters)."""
    return A.quote_ident(name)


def _err(message: str, pos: A.Pos, code: str) -> AnalysisError:
    return AnalysisError(message, code=code, line=pos.line or None, column=pos.column or None)


class _Analyzer:
    def __init__(self, clause: A.MatchRecognize, schema: Optional[pa.Schema]):
        self.clause = clause
        # No schema (compile() without data): every column name is accepted,
        # typed UNKNOWN, and type rules are checked only where types are known.
        self.open = schema is None
        schema = pa.schema([]) if schema is None else schema
        self.schema = schema
        self.column_types: dict[str, SqlType] = {}
        for f in schema:
            t = T.from_arrow_type(f.type)
            if t is not None:
                self.column_types[f.name] = t
        self.unusable = {f.name: f.type for f in schema if f.name not in self.column_types}

    # ------------------------------------------------------------------ run
    def run(self) -> CheckedQuery:
        c = self.clause
        self.primary: list[str] = []
        self.has_exclusion = False
        self._collect_pattern(c.pattern)
        self.primary_set = set(self.primary)
        self.max_rows = _max_rows(c.pattern)
        self.subsets = self._check_subsets()
        self._check_skip()
        if c.rows_per_match == "ALL" and c.empty_matches == "UNMATCHED" and self.has_exclusion:
            raise _err("pattern exclusion {- -} cannot be used with ALL ROWS PER MATCH WITH "
                       "UNMATCHED ROWS", c.pattern_pos, "exclusion_with_unmatched")
        for ref in list(c.partition_by) + [k.column for k in c.order_by]:
            # `t.col` naming the source table is fine there; a pattern variable is not
            if ref.var is not None and (ref.var in self.primary_set or ref.var in self.subsets):
                raise _err(f"PARTITION BY and ORDER BY take input columns, not the pattern "
                           f"variable reference {ref.to_sql()}", ref.pos, "qualified_column")
        partition = [self._resolve_column(ref, "PARTITION BY") for ref in c.partition_by]
        order = [(self._resolve_column(k.column, "ORDER BY"), k.ascending,
                  bool(k.nulls_first)) for k in c.order_by]
        defines = self._check_defines()
        measures = self._check_measures()
        history = any(_history_dependent(e, v) for v, e in defines.items())
        time_column = self._check_time_limit(order)
        if c.skip.kind == "CURRENT_ROW" and c.mode in ("MAXIMAL", "INCREMENTAL"):
            raise _err(f"AFTER MATCH SKIP TO CURRENT ROW keeps every match (as ALL MATCHES); it "
                       f"cannot be combined with {c.mode} MATCH", c.skip.pos, "bad_mode")
        checked = CheckedQuery(
            clause=c, input_schema=self.schema, column_types=self.column_types,
            primary_vars=tuple(self.primary), subsets=self.subsets, defines=defines,
            measures=tuple(measures), partition_columns=tuple(partition),
            order_keys=tuple(order), rows_per_match=c.rows_per_match,
            empty_matches=c.empty_matches, skip=c.skip, pattern=c.pattern,
            has_exclusion=self.has_exclusion, history_dependent=history,
            time_limit=c.time_limit, time_column=time_column, mode=c.mode,
            match_filter=self._check_match_filter())
        return replace(checked, output_schema=self._output_schema(checked))

    def _check_match_filter(self) -> Optional[A.Expr]:
        f = self.clause.match_filter
        if f is None:
            return None
        if self.clause.mode is not None or self.clause.skip.kind == "CURRENT_ROW":
            raise _err("a condition on the whole match cannot be combined with a matching "
                       "mode", f.pos, "bad_mode")
        expr = _ExprChecker(self, context="MEASURES", defining=None).check(f)
        if expr.type.kind not in ("BOOLEAN", "UNKNOWN"):
            raise _err(f"the condition on the match must be boolean, not {expr.type}", f.pos,
                       "filter_not_boolean")
        return expr

    def _check_time_limit(self, order: list) -> Optional[str]:
        """WITHIN / INTERVAL is measured on the first ORDER BY key, which must
        be an ascending DATE or TIMESTAMP: in batch the ordering column is the
        clock."""
        limit = self.clause.time_limit
        if limit is None:
            return None
        what = limit.to_sql()
        if limit.interval.value <= 0:
            raise _err(f"{what}: the time limit must be positive", limit.pos, "bad_time_limit")
        if not order:
            raise _err(f"{what} needs ORDER BY a timestamp column: the first ORDER BY key is "
                       f"the clock the limit is measured on", limit.pos, "bad_time_limit")
        column, ascending, _ = order[0]
        t = self.column_types.get(column)
        if t is not None and t.kind not in ("TIMESTAMP", "DATE", "UNKNOWN"):
            raise _err(f"{what} is measured on the first ORDER BY key, {column}, which is "
                       f"{t}, not a TIMESTAMP or DATE", limit.pos, "bad_time_limit")
        if not ascending:
            raise _err(f"{what} needs the first ORDER BY key ({column}) in ascending order",
                       limit.pos, "bad_time_limit")
        return column

    # -------------------------------------------------------------- pattern
    def _collect_pattern(self, p: A.Pattern) -> None:
        if isinstance(p, A.PVar):
            if p.name not in self.primary:
                self.primary.append(p.name)
        elif isinstance(p, A.PExclude):
            self.has_exclusion = True
        for child in p.children():
            self._collect_pattern(child)

    def _check_subsets(self) -> dict:
        subsets: dict[str, tuple] = {}
        for s in self.clause.subsets:
            if s.name in self.primary_set:
                raise _err(f"SUBSET name {_v(s.name)} is already a primary pattern variable",
                           s.pos, "subset_is_primary")
            if s.name in subsets:
                raise _err(f"SUBSET {_v(s.name)} is defined twice", s.pos, "duplicate_subset")
            members = []
            for name, pos in zip(s.vars, s.var_pos or [s.pos] * len(s.vars)):
                if name in subsets or any(name == o.name for o in self.clause.subsets):
                    raise _err(f"SUBSET {_v(s.name)} contains the union variable {_v(name)}; "
                               f"subsets cannot be nested", pos, "nested_subset")
                if name not in self.primary_set:
                    raise _err(f"unknown pattern variable {_v(name)} in SUBSET {_v(s.name)}; it does "
                               f"not appear in PATTERN", pos, "unknown_variable")
                if name not in members:
                    members.append(name)
            subsets[s.name] = tuple(members)
        return subsets

    def _check_skip(self) -> None:
        s = self.clause.skip
        if s.var is not None and s.var not in self.primary_set and s.var not in self.subsets:
            raise _err(f"AFTER MATCH SKIP TO {_v(s.var)}: no such pattern variable in PATTERN or "
                       f"SUBSET", s.pos, "unknown_variable")

    # -------------------------------------------------------------- columns
    def _resolve_column(self, ref: A.ColumnRef, where: str) -> str:
        if self.open:
            name = ref.column if ref.quoted else ref.column.lower()
            self.column_types.setdefault(name, T.UNKNOWN)
            return name
        names = list(self.column_types) + list(self.unusable)
        if ref.quoted:
            matches = [n for n in names if n == ref.column]
        else:
            matches = [n for n in names if n == ref.column] or \
                      [n for n in names if n.upper() == ref.column.upper()]
        if not matches:
            raise _err(f"unknown column {ref.column} in {where}; the input has "
                       f"{', '.join(names) if names else 'no columns'}", ref.pos,
                       "unknown_column")
        if len(matches) > 1:
            raise _err(f"column name {ref.column} in {where} is ambiguous: it matches "
                       f"{', '.join(matches)}; double-quote it", ref.pos, "ambiguous_column")
        name = matches[0]
        if name in self.unusable:
            raise _err(f"column {name} has type {self.unusable[name]}, which gpu_mr cannot "
                       f"use in {where}", ref.pos, "unsupported_column_type")
        return name

    # ------------------------------------------------------ DEFINE/MEASURES
    def _check_defines(self) -> dict:
        defines: dict[str, A.Expr] = {}
        for d in self.clause.defines:
            if d.var in defines:
                raise _err(f"pattern variable {_v(d.var)} is defined twice in DEFINE", d.pos,
                           "duplicate_define")
            if d.var not in self.primary_set:
                if d.var in self.subsets:
                    raise _err(f"{_v(d.var)} is a SUBSET union variable and cannot be defined in "
                               f"DEFINE", d.pos, "define_subset")
                raise _err(f"DEFINE {_v(d.var)}: the variable does not appear in PATTERN", d.pos,
                           "unknown_variable")
            expr = _ExprChecker(self, context="DEFINE", defining=d.var).check(d.expr)
            if expr.type.kind not in ("BOOLEAN", "UNKNOWN"):
                raise _err(f"DEFINE {_v(d.var)} must be a boolean condition, not {expr.type}",
                           d.expr.pos, "define_not_boolean")
            defines[d.var] = expr
        return defines

    def _check_measures(self) -> list:
        out = []
        seen: dict[str, A.Measure] = {}
        for m in self.clause.measures:
            key = m.name if m.quoted else m.name.upper()
            if key in seen:
                raise _err(f"measure name {m.name} is used twice", m.pos, "duplicate_measure")
            seen[key] = m
            expr = _ExprChecker(self, context="MEASURES", defining=None).check(m.expr)
            # A bare NULL measure has no type of its own; BIGINT, as Trino does.
            # Without a schema (compile() alone) types stay unknown until data comes.
            mtype = expr.type if expr.type.kind != "UNKNOWN" or self.open else T.BIGINT
            out.append(CheckedMeasure(m.name, expr, mtype))
        return out

    def _output_schema(self, q: CheckedQuery) -> pa.Schema:
        by_name = {f.name: f for f in self.schema}
        if self.open:
            by_name = {n: pa.field(n, t.arrow()) for n, t in self.column_types.items()}
        measures = [pa.field(m.name, m.type.arrow()) for m in q.measures]
        if q.rows_per_match == "ONE":
            before = [by_name[c] for c in q.partition_columns]
            after: list = []
            if not before and not measures:
                raise _err("ONE ROW PER MATCH with no PARTITION BY and no MEASURES would "
                           "produce no columns; add a measure", self.clause.pattern_pos,
                           "no_output_columns")
        else:
            # SQL:2016: partitioning columns, ordering columns (each as often as
            # it is listed, as Trino does), measures, then the remaining columns.
            lead = list(q.partition_columns) + [k[0] for k in q.order_keys]
            before = [by_name[c] for c in lead]
            after = [f for f in self.schema if f.name not in lead]
        inputs = {f.name.upper() for f in before + after}
        for m, cm in zip(self.clause.measures, q.measures):
            if cm.name.upper() in inputs:
                raise _err(f"measure {cm.name} has the name of an input column that is also "
                           f"in the output; rename the measure", m.pos,
                           "duplicate_output_column")
        fields = before + measures + after
        return pa.schema(fields)


# ----------------------------------------------------------------- exprs

class _ExprChecker:
    """Types one DEFINE or MEASURES expression and enforces the nesting rules."""

    def __init__(self, analyzer: _Analyzer, context: str, defining: Optional[str]):
        self.a = analyzer
        self.context = context
        self.defining = defining

    def check(self, e: A.Expr) -> A.Expr:
        return self._visit(e, in_nav=None, in_agg=False)

    def _known_var(self, var: str, pos: A.Pos) -> None:
        if var not in self.a.primary_set and var not in self.a.subsets:
            raise _err(f"unknown pattern variable {_v(var)}; it is neither in PATTERN nor a "
                       f"SUBSET", pos, "unknown_variable")

    def _visit(self, e: A.Expr, in_nav: Optional[str], in_agg: bool) -> A.Expr:
        method = getattr(self, "_visit_" + type(e).__name__)
        return method(e, in_nav, in_agg)

    # leaves
    def _visit_Literal(self, e: A.Literal, in_nav, in_agg):
        kinds = {"bigint": T.BIGINT, "double": T.DOUBLE, "varchar": T.VARCHAR,
                 "boolean": T.BOOLEAN, "null": T.UNKNOWN, "date": T.DATE,
                 "timestamp": T.TIMESTAMP, "interval": T.INTERVAL,
                 "interval_ym": T.INTERVAL_YM}
        return replace(e, type=kinds[e.literal_type])

    def _visit_ColumnRef(self, e: A.ColumnRef, in_nav, in_agg):
        if e.var is not None:
            self._known_var(e.var, e.pos)
        name = self.a._resolve_column(e, self.context)
        return replace(e, resolved=name, type=self.a.column_types[name])

    def _visit_Classifier(self, e: A.Classifier, in_nav, in_agg):
        if e.var is not None:
            self._known_var(e.var, e.pos)
        return replace(e, type=T.VARCHAR)

    def _visit_MatchNumber(self, e: A.MatchNumber, in_nav, in_agg):
        return replace(e, type=T.BIGINT)

    # navigation
    def _visit_Navigation(self, e: A.Navigation, in_nav, in_agg):
        if e.indexed:
            var = e.arg.var
            self._known_var(var, e.pos)
            if var in self.a.primary_set and self.a.max_rows.get(var, 0) <= 1:
                raise _err(f"{_v(var)}[{e.offset.value}]: {_v(var)} is a singleton variable (it "
                           f"matches at most one row); write {_v(var)}.{e.arg.column}", e.pos,
                           "index_on_singleton")
        physical = e.kind in ("PREV", "NEXT")
        if in_agg:
            raise _err(f"{e.kind} cannot be used inside an aggregate's arguments", e.pos,
                       "navigation_in_aggregate")
        if in_nav is not None:
            if physical or in_nav in ("FIRST", "LAST"):
                raise _err(f"{e.kind} cannot be nested inside {in_nav}; only FIRST/LAST may be "
                           f"nested inside PREV/NEXT", e.pos, "bad_navigation_nesting")
        if e.semantics is not None:
            if physical:
                raise _err(f"{e.semantics} applies only to FIRST, LAST and aggregates, not to "
                           f"{e.kind}", e.pos, "bad_semantics")
            if e.semantics == "FINAL" and self.context == "DEFINE":
                raise _err("FINAL cannot be used in DEFINE (only RUNNING semantics exists "
                           "while matching)", e.pos, "final_in_define")
        offset = self._offset(e)
        arg = self._visit(e.arg, in_nav=e.kind, in_agg=False)
        nested = [n for n in arg.walk() if isinstance(n, A.Navigation)]
        if nested and not (len(nested) == 1 and arg is nested[0]):
            raise _err(f"{e.kind}: a FIRST/LAST nested in {e.kind} must be its whole first "
                       f"argument, e.g. PREV(LAST(A.price), 1)", e.pos, "bad_navigation_nesting")
        refs = _row_refs(arg)
        if not refs:
            raise _err(f"{e.kind} needs a column reference or CLASSIFIER() in its first "
                       f"argument", e.pos, "navigation_without_column")
        if len({r for r in refs}) > 1:
            raise _err(f"{e.kind} mixes pattern variables "
                       f"{', '.join(sorted(_v(v) if v else '(universal)' for v in set(refs)))}; all its "
                       f"column references must use the same variable", e.pos,
                       "navigation_mixes_variables")
        return replace(e, arg=arg, offset=offset, type=arg.type)

    def _offset(self, e: A.Navigation) -> A.Literal:
        default = 1 if e.kind in ("PREV", "NEXT") else 0
        if e.offset is None:
            return A.Literal(pos=e.pos, value=default, literal_type="bigint", type=T.BIGINT)
        off = e.offset
        if isinstance(off, A.Unary) and off.op == "+" and isinstance(off.operand, A.Literal):
            off = off.operand
        if not isinstance(off, A.Literal) or off.literal_type not in ("bigint",):
            if isinstance(off, A.Literal) and off.literal_type in ("double", "decimal"):
                raise _err(f"the offset of {e.kind} must be an integer, not {off.to_sql()}",
                           e.offset.pos, "bad_offset")
            raise _err(f"the offset of {e.kind} must be a constant non-negative integer",
                       e.offset.pos, "bad_offset")
        if off.value < 0:
            raise _err(f"the offset of {e.kind} must be non-negative, not {off.value}",
                       e.offset.pos, "bad_offset")
        return replace(off, type=T.BIGINT)

    # aggregates
    def _visit_Aggregate(self, e: A.Aggregate, in_nav, in_agg):
        if in_agg:
            raise _err(f"aggregate {e.name} cannot be nested inside another aggregate", e.pos,
                       "nested_aggregate")
        if in_nav is not None:
            raise _err(f"aggregate {e.name} cannot be used inside {in_nav}", e.pos,
                       "aggregate_in_navigation")
        if e.semantics == "FINAL" and self.context == "DEFINE":
            raise _err("FINAL cannot be used in DEFINE (only RUNNING semantics exists while "
                       "matching)", e.pos, "final_in_define")
        if e.over_order:
            written = [(k.column.column.upper() if not k.column.quoted else k.column.column,
                        k.ascending) for k in e.over_order]
            clause = [(k.column.column.upper() if not k.column.quoted else k.column.column,
                       k.ascending) for k in self.a.clause.order_by]
            if written != clause:
                raise _err(f"{e.name}(...) OVER (ORDER BY ...) must use the ORDER BY of the "
                           f"MATCH_RECOGNIZE (a cumulative aggregate runs in match order)",
                           e.pos, "bad_cumulative_order")
            e = replace(e, over_order=())       # checked: a RUNNING aggregate
        if e.star:
            if e.star_var is not None:
                self._known_var(e.star_var, e.pos)
            return replace(e, var=e.star_var, type=T.BIGINT)
        lo, hi = AGGREGATE_ARITY[e.name]
        if not lo <= len(e.args) <= hi:
            raise _err(f"{e.name} takes {lo if lo == hi else f'{lo} to {hi}'} argument"
                       f"{'s' if hi != 1 else ''}, not {len(e.args)}", e.pos, "bad_arity")
        args = tuple(self._visit(a, in_nav=None, in_agg=True) for a in e.args)
        refs = set()
        for a in args:
            refs |= set(_row_refs(a))
        if len(refs) > 1:
            raise _err(f"the arguments of {e.name} refer to different pattern variables "
                       f"({', '.join(sorted(_v(v) if v else '(universal)' for v in refs))}); they must "
                       f"all use the same one", e.pos, "aggregate_mixes_variables")
        var = next(iter(refs)) if refs else None
        t = _aggregate_type(e, args)
        return replace(e, args=args, var=var, type=t)

    # operators
    def _visit_Unary(self, e: A.Unary, in_nav, in_agg):
        operand = self._visit(e.operand, in_nav, in_agg)
        t = operand.type
        if e.op == "NOT":
            _require(t, ("BOOLEAN",), "NOT", e.pos)
            return replace(e, operand=operand, type=T.BOOLEAN)
        if not (t.is_numeric or t.kind in ("INTERVAL", "INTERVAL_YM")):
            raise _err(f"unary {e.op} needs a number, not {t}", e.pos, "type_mismatch")
        return replace(e, operand=operand, type=t if t.kind != "UNKNOWN" else T.BIGINT)

    def _visit_Binary(self, e: A.Binary, in_nav, in_agg):
        left = self._visit(e.left, in_nav, in_agg)
        right = self._visit(e.right, in_nav, in_agg)
        t = binary_type(e.op, left.type, right.type, e.pos)
        return replace(e, left=left, right=right, type=t)

    def _visit_Between(self, e: A.Between, in_nav, in_agg):
        operand = self._visit(e.operand, in_nav, in_agg)
        low = self._visit(e.low, in_nav, in_agg)
        high = self._visit(e.high, in_nav, in_agg)
        binary_type("<=", low.type, operand.type, e.pos)
        binary_type("<=", operand.type, high.type, e.pos)
        return replace(e, operand=operand, low=low, high=high, type=T.BOOLEAN)

    def _visit_InList(self, e: A.InList, in_nav, in_agg):
        operand = self._visit(e.operand, in_nav, in_agg)
        if len(e.items) == 1 and isinstance(e.items[0], A.Subquery) and e.items[0].kind == "IN":
            from .subqueries import constant_values
            items = tuple(constant_values(e.items[0]))
            if not items:      # x IN (empty set) is FALSE, even for a NULL x
                return A.Literal(pos=e.pos, value=e.negated, literal_type="boolean",
                                 type=T.BOOLEAN)
        else:
            items = tuple(self._visit(i, in_nav, in_agg) for i in e.items)
        for i in items:
            binary_type("=", operand.type, i.type, i.pos)
        return replace(e, operand=operand, items=items, type=T.BOOLEAN)

    def _visit_Subquery(self, e: A.Subquery, in_nav, in_agg):
        from .subqueries import constant_values
        if e.kind == "IN":
            raise _err("a subquery list can only follow IN", e.pos, "bad_subquery")
        return constant_values(e)[0]

    def _visit_IsNull(self, e: A.IsNull, in_nav, in_agg):
        return replace(e, operand=self._visit(e.operand, in_nav, in_agg), type=T.BOOLEAN)

    def _visit_Case(self, e: A.Case, in_nav, in_agg):
        operand = self._visit(e.operand, in_nav, in_agg) if e.operand is not None else None
        whens = []
        for cond, result in e.whens:
            c = self._visit(cond, in_nav, in_agg)
            if operand is not None:
                binary_type("=", operand.type, c.type, c.pos)
            else:
                _require(c.type, ("BOOLEAN",), "a CASE WHEN condition", c.pos)
            whens.append((c, self._visit(result, in_nav, in_agg)))
        else_ = self._visit(e.else_, in_nav, in_agg) if e.else_ is not None else None
        results = [r for _, r in whens] + ([else_] if else_ is not None else [])
        t = common_type([r.type for r in results], "CASE results", e.pos)
        return replace(e, operand=operand, whens=tuple(whens), else_=else_, type=t)

    def _visit_Cast(self, e: A.Cast, in_nav, in_agg):
        operand = self._visit(e.operand, in_nav, in_agg)
        src, dst = operand.type, e.target
        ok = (src.kind == "UNKNOWN" or dst.kind == "VARCHAR" or src.kind == "VARCHAR"
              or (src.is_numeric and dst.is_numeric)
              or (src.is_numeric and dst.kind == "BOOLEAN")
              or (src.kind == "BOOLEAN" and dst.is_numeric)
              or (src.is_temporal and dst.is_temporal) or src.kind == dst.kind)
        if not ok:
            raise _err(f"cannot CAST {src} to {dst.sql_name()}", e.pos, "bad_cast")
        if dst.kind == "TIMESTAMP" and src.kind == "TIMESTAMP":
            dst = src
        return replace(e, operand=operand, target=dst, type=dst)

    def _visit_Call(self, e: A.Call, in_nav, in_agg):
        if e.name not in SCALAR_ARITY:
            if e.name in ("CLASSIFIER", "MATCH_NUMBER"):
                raise _err(f"{e.name} is misused", e.pos, "bad_call")
            raise _err(f"unknown function {e.name}", e.pos, "unknown_function")
        lo, hi = SCALAR_ARITY[e.name]
        if len(e.args) < lo or (hi is not None and len(e.args) > hi):
            want = f"{lo}" if lo == hi else (f"{lo} or more" if hi is None else f"{lo} to {hi}")
            raise _err(f"{e.name} takes {want} argument{'s' if want != '1' else ''}, not "
                       f"{len(e.args)}", e.pos, "bad_arity")
        args = tuple(self._visit(a, in_nav, in_agg) for a in e.args)
        return replace(e, args=args, type=scalar_type(e.name, args, e.pos))


# ------------------------------------------------------------ type rules

def _require(t: SqlType, kinds: tuple, what: str, pos: A.Pos) -> None:
    if t.kind != "UNKNOWN" and t.kind not in kinds:
        raise _err(f"{what} needs {' or '.join(k.lower() for k in kinds)}, not {t}", pos,
                   "type_mismatch")


def _numeric_result(a: SqlType, b: SqlType, op: str) -> SqlType:
    kinds = {a.kind, b.kind} - {"UNKNOWN"}
    if not kinds:
        return T.BIGINT
    if "DOUBLE" in kinds:
        return T.DOUBLE
    if "DECIMAL" in kinds:
        if op == "/":
            return T.DOUBLE
        sa = a.scale if a.kind == "DECIMAL" else 0
        sb = b.scale if b.kind == "DECIMAL" else 0
        scale = min(38, sa + sb) if op == "*" else max(sa, sb)
        return T.decimal_type(38, scale)
    return T.BIGINT


def comparable(a: SqlType, b: SqlType) -> bool:
    if "UNKNOWN" in (a.kind, b.kind):
        return True
    if a.is_numeric and b.is_numeric:
        return True
    if a.is_temporal and b.is_temporal:
        return True
    return a.kind == b.kind and a.kind != "ARRAY"


def binary_type(op: str, a: SqlType, b: SqlType, pos: A.Pos) -> SqlType:
    if op in ("AND", "OR"):
        _require(a, ("BOOLEAN",), op, pos)
        _require(b, ("BOOLEAN",), op, pos)
        return T.BOOLEAN
    if op in ("=", "<>", "<", "<=", ">", ">="):
        if not comparable(a, b):
            raise _err(f"cannot compare {a} with {b} using {op}", pos, "type_mismatch")
        return T.BOOLEAN
    if op == "||":
        for t in (a, b):
            if t.kind == "ARRAY":
                raise _err(f"|| cannot concatenate {t}", pos, "type_mismatch")
        return T.VARCHAR
    ka, kb = a.kind, b.kind
    if a.is_numeric and b.is_numeric:
        return _numeric_result(a, b, op)
    if op in ("+", "-"):
        if ka == "TIMESTAMP" and kb in ("INTERVAL", "INTERVAL_YM"):
            return a
        if op == "+" and kb == "TIMESTAMP" and ka in ("INTERVAL", "INTERVAL_YM"):
            return b
        # DATE +/- INTERVAL stays a DATE (Trino's rule; time of day is dropped)
        if ka == "DATE" and kb in ("INTERVAL", "INTERVAL_YM"):
            return T.DATE
        if op == "+" and kb == "DATE" and ka in ("INTERVAL", "INTERVAL_YM"):
            return T.DATE
        if ka == "DATE" and kb in ("BIGINT", "UNKNOWN"):
            return T.DATE
        if op == "-" and ka in ("TIMESTAMP", "DATE") and kb in ("TIMESTAMP", "DATE"):
            return T.INTERVAL
        if ka == kb and ka in ("INTERVAL", "INTERVAL_YM"):
            return a
    if op in ("*", "/") and ka in ("INTERVAL", "INTERVAL_YM") and b.is_numeric:
        return a
    if op == "*" and kb in ("INTERVAL", "INTERVAL_YM") and a.is_numeric:
        return b
    raise _err(f"operator {op} cannot be applied to {a} and {b}", pos, "type_mismatch")


def common_type(types: list, what: str, pos: A.Pos) -> SqlType:
    known = [t for t in types if t.kind != "UNKNOWN"]
    if not known:
        return T.UNKNOWN
    result = known[0]
    for t in known[1:]:
        if t == result:
            continue
        if t.is_numeric and result.is_numeric:
            result = _numeric_result(result, t, "+")
        elif t.kind == result.kind == "TIMESTAMP":
            result = result if T.NS_PER[result.unit] <= T.NS_PER[t.unit] else t
        elif {t.kind, result.kind} == {"DATE", "TIMESTAMP"}:
            result = t if t.kind == "TIMESTAMP" else result
        elif t.kind == result.kind and t.kind != "ARRAY":
            continue
        else:
            raise _err(f"{what} have incompatible types {result} and {t}", pos,
                       "type_mismatch")
    return result


def scalar_type(name: str, args: tuple, pos: A.Pos) -> SqlType:
    types = [a.type for a in args]

    def numeric(i: int) -> SqlType:
        t = types[i]
        if not t.is_numeric:
            raise _err(f"{name} needs a number as argument {i + 1}, not {t}", args[i].pos,
                       "type_mismatch")
        return t if t.kind != "UNKNOWN" else T.BIGINT

    def text(i: int) -> None:
        _require(types[i], ("VARCHAR",), f"{name} argument {i + 1}", args[i].pos)

    if name in ("ABS", "SIGN"):
        return numeric(0)
    if name == "ROUND":
        t = numeric(0)
        if len(args) == 2:
            _require(types[1], ("BIGINT",), "ROUND's digits", args[1].pos)
        return t
    if name in ("FLOOR", "CEIL", "CEILING"):
        t = numeric(0)
        return T.decimal_type(t.precision, 0) if t.kind == "DECIMAL" else t
    if name in ("SQRT", "LN", "LOG10", "EXP"):
        numeric(0)
        return T.DOUBLE
    if name in ("POWER", "POW"):
        numeric(0)
        numeric(1)
        return T.DOUBLE
    if name == "MOD":
        return _numeric_result(numeric(0), numeric(1), "%")
    if name in ("GREATEST", "LEAST", "COALESCE"):
        t = common_type(types, f"the arguments of {name}", pos)
        if name != "COALESCE" and t.kind in ("ARRAY", "BOOLEAN") and False:
            pass
        return t
    if name == "NULLIF":
        if not comparable(types[0], types[1]):
            raise _err(f"NULLIF cannot compare {types[0]} with {types[1]}", pos, "type_mismatch")
        return types[0]
    if name in ("LOWER", "UPPER", "TRIM", "LTRIM", "RTRIM"):
        text(0)
        return T.VARCHAR
    if name in ("LENGTH", "CHAR_LENGTH"):
        text(0)
        return T.BIGINT
    if name == "SUBSTR":
        text(0)
        for i in range(1, len(args)):
            _require(types[i], ("BIGINT",), f"SUBSTR argument {i + 1}", args[i].pos)
        return T.VARCHAR
    if name == "REPLACE":
        for i in range(3):
            text(i)
        return T.VARCHAR
    if name == "CONCAT":
        return T.VARCHAR
    if name == "CURRENT_TIMESTAMP":
        return T.SqlType("TIMESTAMP", unit="us", tz="UTC")
    if name == "LOCALTIMESTAMP":
        return T.SqlType("TIMESTAMP", unit="us")
    if name == "CURRENT_DATE":
        return T.DATE
    if name == "LIKE":
        for i in range(len(args)):
            text(i)
        return T.BOOLEAN
    raise _err(f"unknown function {name}", pos, "unknown_function")


def _aggregate_type(e: A.Aggregate, args: tuple) -> SqlType:
    name = e.name
    t = args[0].type
    if name == "COUNT":
        return T.BIGINT
    if name == "COUNT_IF":
        _require(t, ("BOOLEAN",), "COUNT_IF", e.pos)
        return T.BIGINT
    if name in ("BOOL_AND", "BOOL_OR", "EVERY"):
        _require(t, ("BOOLEAN",), name, e.pos)
        return T.BOOLEAN
    if name == "SUM":
        if t.kind in ("INTERVAL", "INTERVAL_YM"):
            return t
        if not t.is_numeric:
            raise _err(f"SUM needs a number, not {t}", e.pos, "type_mismatch")
        if t.kind == "DECIMAL":
            return T.decimal_type(38, t.scale)
        return T.DOUBLE if t.kind == "DOUBLE" else T.BIGINT
    if name == "AVG":
        if t.kind == "INTERVAL":
            return t
        if not t.is_numeric:
            raise _err(f"AVG needs a number, not {t}", e.pos, "type_mismatch")
        return T.DOUBLE
    if name in ("STDDEV", "STDDEV_SAMP", "STDDEV_POP", "VARIANCE", "VAR_SAMP", "VAR_POP"):
        if not t.is_numeric:
            raise _err(f"{name} needs a number, not {t}", e.pos, "type_mismatch")
        return T.DOUBLE
    if name in ("MIN", "MAX"):
        if t.kind == "ARRAY":
            raise _err(f"{name} cannot order {t}", e.pos, "type_mismatch")
        return t if t.kind != "UNKNOWN" else T.BIGINT
    if name in ("MAX_BY", "MIN_BY"):
        if args[1].type.kind == "ARRAY":
            raise _err(f"{name} cannot order by {args[1].type}", e.pos, "type_mismatch")
        return t if t.kind != "UNKNOWN" else T.BIGINT
    if name == "ARRAY_AGG":
        return T.array_of(t if t.kind != "UNKNOWN" else T.BIGINT)
    if name == "ANY_VALUE":
        return t if t.kind != "UNKNOWN" else T.BIGINT
    raise _err(f"unknown aggregate {name}", e.pos, "unknown_function")


# ------------------------------------------------------------ inspection

_MANY = 2   # "more than one row": all a singleton test needs


def _max_rows(p: A.Pattern) -> dict:
    """For each variable, the most rows one match can map to it (capped at 2)."""
    if isinstance(p, A.PVar):
        return {p.name: 1}
    if isinstance(p, (A.PEmpty, A.PAnchor)):
        return {}
    if isinstance(p, A.PAlt):
        out: dict = {}
        for item in p.items:
            for v, n in _max_rows(item).items():
                out[v] = max(out.get(v, 0), n)
        return out
    if isinstance(p, (A.PConcat, A.PPermute)):
        out = {}
        for item in p.items:
            for v, n in _max_rows(item).items():
                out[v] = min(_MANY, out.get(v, 0) + n)
        return out
    if isinstance(p, A.PQuant):
        inner = _max_rows(p.body)
        times = _MANY if p.max is None else min(p.max, _MANY)
        return {v: min(_MANY, n * times) for v, n in inner.items()}
    if isinstance(p, A.PExclude):
        return _max_rows(p.body)
    return {}


def _row_refs(e: A.Expr) -> list:
    """The pattern variables (None = universal) that column references and
    CLASSIFIER calls in ``e`` use, outside nested aggregates."""
    out = []
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, A.ColumnRef):
            out.append(n.var)
        elif isinstance(n, A.Classifier):
            out.append(n.var)
        elif isinstance(n, A.Aggregate):
            continue
        stack.extend(n.children())
    return out


def _history_dependent(e: A.Expr, defining: str) -> bool:
    """Whether a DEFINE condition can see the match so far (anything beyond
    the current row and physical offsets from it)."""
    def walk(n: A.Node, in_physical: bool) -> bool:
        if isinstance(n, A.Aggregate):
            return True
        if isinstance(n, A.Navigation):
            if n.kind in ("FIRST", "LAST"):
                return True
            return walk(n.arg, True)
        if isinstance(n, A.ColumnRef):
            return n.var not in (None, defining)
        if isinstance(n, A.Classifier):
            return in_physical or n.var not in (None, defining)
        return any(walk(c, in_physical) for c in n.children())
    return walk(e, False)
