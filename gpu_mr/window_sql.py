"""``WINDOW w AS (... PATTERN ... DEFINE ...)`` in a gpu_mr.sql statement.

What: before the statement goes to DuckDB, each window that holds a row
pattern is evaluated by gpu_mr (engines/window.py) over the rows of the
statement's FROM (after its WHERE), and every call over it becomes a column
of that input:
- ``measure OVER w`` -> the measure's value for the row;
- ``agg(args) OVER w`` -> the aggregate over the rows of the row's match
  (COUNT is 0 and the others NULL for a row without a match);
then the window definition is removed and the FROM reads the widened input.
The rest of the statement (SELECT list, ORDER BY, LIMIT, other windows) is
left to DuckDB.
Scope: one SELECT whose FROM is a single table or subquery, without GROUP BY
or HAVING (window functions run after grouping, which a pattern window does
not support); anything else is a clear error.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

import pyarrow as pa

from . import frames
from .analysis import analyze
from .engines.window import run_window_pattern
from .errors import AnalysisError, SqlSyntaxError
from .syntax import ast as A
from .syntax import parse_expression, parse_window_spec
from .syntax.tokens import EOF, IDENT, QIDENT, Token

INPUT_NAME = "__gpu_mr_window_input"
_CLAUSE_KEYWORDS = ("SELECT", "FROM", "WHERE", "GROUP", "HAVING", "WINDOW", "QUALIFY", "ORDER",
                    "LIMIT", "OFFSET", "UNION", "INTERSECT", "EXCEPT", "FETCH")


@dataclass
class _Call:
    start: int            # character span of `expr OVER w` in the statement
    end: int
    window: str
    measure: Optional[str] = None      # `name OVER w`
    aggregate: Optional[str] = None    # `agg(args) OVER w`: the call's text
    pos: Optional[Token] = None
    column: str = ""


def has_pattern_window(tokens: list) -> bool:
    return any(t.is_keyword("WINDOW") for t in tokens) and any(
        t.is_keyword("PATTERN") for t in tokens)


def rewrite_pattern_windows(query: str, tokens: list, match: dict,
                            run_source: Callable[[str], pa.Table], engine: str):
    """Evaluate the pattern windows of ``query``.

    ``tokens`` is the statement's token list, ``match`` maps each '(' token
    index to its ')' (and back). ``run_source(sql)`` runs a query in DuckDB
    over the caller's tables. Returns (rewritten statement, widened input
    table), or None when the statement has no pattern window.
    """
    depth = _depths(tokens)
    windows, window_edit = _pattern_windows(query, tokens, match, depth)
    if not windows:
        nested = next((t for i, t in enumerate(tokens) if t.is_keyword("WINDOW") and depth[i] > 0
                       and _defines_pattern(tokens, match, i)), None)
        if nested is not None:
            raise AnalysisError("a WINDOW with a row pattern is supported in the outermost "
                                "SELECT only; move it out of the subquery", code="nested_window",
                                line=nested.line, column=nested.column)
        return None
    grouping = next((t for i, t in enumerate(tokens)
                     if t.is_keyword("GROUP", "HAVING") and depth[i] == 0), None)
    if grouping is not None:
        raise AnalysisError("a pattern window cannot be combined with GROUP BY or HAVING in "
                            "the same SELECT; group in an outer query", code="window_grouping",
                            line=grouping.line, column=grouping.column)
    calls = _calls(query, tokens, match, windows)
    from_start, from_end, where = _from_and_where(query, tokens, depth)
    source_sql = f"SELECT * FROM {query[from_start:from_end]}"
    if where is not None:
        # window functions see the rows WHERE keeps; the outer WHERE is then done
        source_sql += f" WHERE {query[where[1]:where[2]]}"
    source = run_source(source_sql)
    for name, spec in windows.items():
        source = _evaluate(name, spec, [c for c in calls if c.window == name], source, engine)
    edits = [(c.start, c.end, c.column) for c in calls]
    edits.append(window_edit)
    edits.append((from_start, from_end,
                  f"{INPUT_NAME} {_alias_of(tokens, from_start, from_end)}"))
    if where is not None:
        edits.append((where[0], where[2], ""))
    text = query
    for start, end, replacement in sorted(edits, reverse=True):   # back to front
        text = text[:start] + replacement + text[end:]
    return text, source


def _defines_pattern(tokens: list, match: dict, window: int) -> bool:
    """Whether the WINDOW clause at token ``window`` holds a PATTERN inside one
    of its `name AS ( ... )` definitions."""
    j = window + 1
    while j + 2 < len(tokens) and tokens[j + 1].is_keyword("AS") and tokens[j + 2].is_op("("):
        close = match[j + 2]
        if any(t.is_keyword("PATTERN") for t in tokens[j + 2:close]):
            return True
        j = close + 1
        if not tokens[j].is_op(","):
            break
        j += 1
    return False


def _depths(tokens: list) -> list:
    depth, out = 0, []
    for t in tokens:
        if t.is_op(")"):
            depth -= 1
        out.append(depth)
        if t.is_op("("):
            depth += 1
    return out


def _pattern_windows(query: str, tokens: list, match: dict, depth: list):
    """The pattern windows of the top-level WINDOW clause (name -> spec), and
    the edit that rewrites that clause keeping only the ordinary windows."""
    i = next((i for i, t in enumerate(tokens) if t.is_keyword("WINDOW") and depth[i] == 0), None)
    if i is None:
        return {}, None
    definitions = []
    j = i + 1
    while True:
        name_tok = tokens[j]
        if name_tok.kind not in (IDENT, QIDENT) or not tokens[j + 1].is_keyword("AS") \
                or not tokens[j + 2].is_op("("):
            raise SqlSyntaxError("expected `name AS (window specification)` in WINDOW",
                                 code="bad_window", line=name_tok.line, column=name_tok.column)
        close = match[j + 2]
        definitions.append((name_tok, j + 2, close))
        j = close + 1
        if not tokens[j].is_op(","):
            break
        j += 1
    clause_end = tokens[j].start if tokens[j].kind != EOF else len(query)
    windows, ordinary = {}, []
    for name_tok, open_, close in definitions:
        if any(t.is_keyword("PATTERN") and depth[k] == depth[open_] + 1
               for k, t in enumerate(tokens[open_:close], start=open_)):
            name = name_tok.value if name_tok.kind == QIDENT else name_tok.text.upper()
            windows[name] = parse_window_spec(query, tokens[open_].end, tokens[close].start)
        else:
            ordinary.append(query[name_tok.start:tokens[close].end])
    if not windows:
        return {}, None
    replacement = f"WINDOW {', '.join(ordinary)} " if ordinary else ""
    return windows, (tokens[i].start, clause_end, replacement)


def _calls(query: str, tokens: list, match: dict, windows: dict) -> list:
    calls = []
    for i, t in enumerate(tokens):
        if not t.is_keyword("OVER"):
            continue
        nxt = tokens[i + 1]
        if nxt.is_op("("):
            if any(x.is_keyword("PATTERN") for x in tokens[i + 2:match[i + 1]]):
                raise AnalysisError("a row pattern in an inline OVER (...) is not supported; "
                                    "define it in the WINDOW clause and call it OVER name",
                                    code="inline_pattern_window", line=t.line, column=t.column)
            continue
        name = nxt.value if nxt.kind == QIDENT else nxt.text.upper()
        if name not in windows:
            continue
        before = tokens[i - 1]
        if before.is_op(")"):
            open_ = match[i - 1]
            fn = tokens[open_ - 1]
            calls.append(_Call(fn.start, nxt.end, name, aggregate=query[fn.start:before.end],
                               pos=fn))
        elif before.kind in (IDENT, QIDENT):
            measure = before.value if before.kind == QIDENT else before.text
            calls.append(_Call(before.start, nxt.end, name, measure=measure, pos=before))
        else:
            raise SqlSyntaxError("expected a measure name or a function call before OVER",
                                 code="bad_window_call", line=t.line, column=t.column)
    for k, c in enumerate(calls):
        c.column = f"__gpu_mr_w{k}"
    return calls


def _from_and_where(query: str, tokens: list, depth: list):
    """Character spans of the FROM item and of the WHERE clause: (keyword
    start, condition start, end), or None."""
    top = [i for i, t in enumerate(tokens) if depth[i] == 0 and t.kind != EOF]
    f = next((i for i in top if tokens[i].is_keyword("FROM")), None)
    if f is None:
        raise AnalysisError("a pattern window needs a FROM", code="window_from")
    after = [i for i in top if i > f and tokens[i].is_keyword(*_CLAUSE_KEYWORDS)]
    from_end_tok = after[0] if after else len(tokens) - 1
    for i in top:
        if f < i < from_end_tok and (tokens[i].is_op(",") or tokens[i].is_keyword("JOIN")):
            raise AnalysisError("a pattern window needs a single table or subquery in FROM; "
                                "join in a subquery", code="window_from",
                                line=tokens[i].line, column=tokens[i].column)
    from_start = tokens[f + 1].start
    from_end = tokens[from_end_tok - 1].end
    where = None
    if after and tokens[after[0]].is_keyword("WHERE"):
        w = after[0]
        later = [i for i in after if i > w]
        where_end = tokens[later[0] - 1].end if later else tokens[len(tokens) - 2].end
        where = (tokens[w].start, tokens[w + 1].start, where_end)   # keyword, condition, end
    return from_start, from_end, where


def _alias_of(tokens: list, start: int, end: int) -> str:
    """The FROM item's alias (or its table name), so qualified references work."""
    inside = [t for t in tokens if start <= t.start < end]
    last = inside[-1]
    if last.kind in (IDENT, QIDENT):
        return f"AS {last.text}"
    return ""


def _evaluate(name: str, spec: A.WindowPattern, calls: list, source: pa.Table,
              engine: str) -> pa.Table:
    clause = spec.clause
    measures = list(clause.measures)
    by_name = {(m.name if m.quoted else m.name.upper()): m for m in measures}
    wanted = []
    for c in calls:
        if c.measure is not None:
            m = by_name.get(c.measure.upper()) or by_name.get(c.measure)
            if m is None:
                raise AnalysisError(f"{c.measure} OVER {name}: the window defines no measure "
                                    f"{c.measure}", code="unknown_measure",
                                    line=c.pos.line, column=c.pos.column)
            wanted.append((c, m.name))
        else:
            try:
                expr = parse_expression(c.aggregate)
            except SqlSyntaxError:
                expr = None
            if not isinstance(expr, A.Aggregate):
                raise AnalysisError(f"{c.aggregate} OVER {name}: over a pattern window only "
                                    f"aggregates (COUNT, SUM, AVG, MIN, MAX, ...) and the "
                                    f"window's measures can be called", code="bad_window_call",
                                    line=c.pos.line, column=c.pos.column)
            measures.append(A.Measure(replace(expr, semantics="FINAL"), c.column, True,
                                      pos=A.Pos(c.pos.line, c.pos.column)))
            wanted.append((c, c.column))
    clause = replace(clause, measures=tuple(measures))
    for node in [m.expr for m in measures] + [d.expr for d in clause.defines]:
        for n in node.walk():
            if isinstance(n, A.MatchNumber):
                raise AnalysisError("MATCH_NUMBER() cannot be used in a WINDOW pattern (a "
                                    "window gives one match per row)", code="window_match_number",
                                    line=n.pos.line or None, column=n.pos.column or None)
    for n in clause.pattern.walk():
        if isinstance(n, A.PAnchor):
            raise AnalysisError(f"the anchor {n.kind} cannot be used in a WINDOW pattern",
                                code="window_anchor", line=n.pos.line or None,
                                column=n.pos.column or None)
    from . import engines
    checked = analyze(clause, source.schema)
    engines.choose(checked, engine)
    data = frames.sort_for_matching(source, checked.partition_columns, checked.order_keys)
    aggregates = frozenset(c.column for c in calls if c.aggregate is not None)
    values = run_window_pattern(checked, data, spec.frame_end, spec.seek, aggregates)
    measure_index = {m.name: i for i, m in enumerate(checked.measures)}
    from .measures import measure_array
    for c, measure_name in wanted:
        i = measure_index[measure_name]
        sorted_values = values[i]
        in_input_order = [None] * len(sorted_values)
        for pos, original in enumerate(data.source_rows):
            in_input_order[int(original)] = sorted_values[pos]
        source = source.append_column(c.column, measure_array(checked.measures[i],
                                                              in_input_order))
    return source
