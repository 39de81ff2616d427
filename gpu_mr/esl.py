"""ESL-TS sequence queries (shared/seeds/003), run as MATCH_RECOGNIZE.

What: ``gpu_mr.esl(query, **tables)`` accepts the paper's form

    SELECT <items> FROM <table> [PARTITION BY cols] [SEQUENCE BY cols]
    AS (X, *Y, ...) [WHERE <conjuncts>]

and translates it into one checked MATCH_RECOGNIZE plan:
- ``X`` is one row; ``*Y`` is the paper's star: a maximal run of one or more
  rows taken sequentially, never given back (a possessive ``Y++``);
- each WHERE conjunct goes to the DEFINE of the last tuple variable it
  mentions (conditions are tested as rows arrive); ``Y.previous.col`` is the
  row before (PREV), ``ccount(Y)`` / ``csum(Y.col)`` / ``cavg`` / ``cmin`` /
  ``cmax`` are continuous (running) aggregates;
- conjuncts with final aggregates, ``count(*Y)``, ``sum(*Y.col)``,
  ``LAST(*Y).col``, ``FIRST(*Y).col``, are tested once the match is complete
  (like HAVING): a match that fails them is rejected;
- ``FIRST(Y).col`` / ``LAST(Y).col`` in the SELECT list are the first / last
  row of the run; one output row per match; matching resumes after it.
Why a translation: the same engines, semantics and checks serve both
languages. Joins in FROM are not supported (join the result in SQL).
"""

from __future__ import annotations

from typing import Optional

import pyarrow as pa

from . import engines, frames
from .analysis import analyze
from .errors import AnalysisError, GpuMrError, SqlSyntaxError
from .measures import assemble
from .syntax import ast as A
from .syntax import parse_expression
from .syntax.tokens import EOF, IDENT, QIDENT, Token, tokenize

_CONTINUOUS = {"CCOUNT": "COUNT", "CSUM": "SUM", "CAVG": "AVG", "CMIN": "MIN", "CMAX": "MAX"}
_FINAL = {"COUNT", "SUM", "AVG", "MIN", "MAX"}


def esl(query: str, engine: str = "auto", **tables):
    """Run an ESL-TS sequence query over the tables passed by name.

    >>> import pyarrow as pa, gpu_mr
    >>> clicks = pa.table({"sess": [1, 1, 1, 1], "t": [1, 2, 3, 4],
    ...                    "page": ["a", "b", "d", "a"]})
    >>> gpu_mr.esl("SELECT sess, count(*A) AS pages FROM clicks PARTITION BY sess "
    ...            "SEQUENCE BY t AS (*A, B) WHERE A.page <> 'd' AND B.page = 'd' "
    ...            "AND count(*A) < 20", clicks=clicks).to_pylist()
    [{'sess': 1, 'pages': 2}]
    """
    if not isinstance(query, str):
        raise GpuMrError(f"the query must be a string of ESL-TS, not {type(query).__name__}",
                         code="bad_argument")
    parsed = _parse(query)
    table = _lookup(parsed["table"], tables)
    arrow, kind = frames.to_arrow(table)
    clause, names = _translate(query, parsed)
    checked = analyze(clause, arrow.schema)
    chosen = engines.choose(checked, engine)
    data = frames.sort_for_matching(arrow, checked.partition_columns, checked.order_keys)
    result = assemble(checked, data, chosen.find_matches(checked, data))
    columns = [result.column(f"__esl{i}") for i in range(len(names))]
    return frames.from_arrow(pa.Table.from_arrays(columns, names=names), kind)


# ------------------------------------------------------------------ parsing

def _err(message: str, tok: Token, code: str = "esl_syntax") -> SqlSyntaxError:
    return SqlSyntaxError(message, code=code, line=tok.line, column=tok.column)


def _parse(query: str) -> dict:
    toks = tokenize(query)
    depth, at_depth = 0, []
    for t in toks:
        if t.is_op(")"):
            depth -= 1
        at_depth.append(depth)
        if t.is_op("("):
            depth += 1

    def find(word: str, start: int = 0) -> Optional[int]:
        return next((i for i in range(start, len(toks))
                     if at_depth[i] == 0 and toks[i].is_keyword(word)), None)

    if not toks[0].is_keyword("SELECT"):
        raise _err("an ESL-TS query starts with SELECT", toks[0])
    f = find("FROM")
    if f is None:
        raise _err("expected FROM", toks[-1])
    i = f + 1
    if toks[i].kind not in (IDENT, QIDENT):
        raise _err("expected a table name after FROM", toks[i])
    table = toks[i]
    i += 1
    if toks[i].is_keyword("AS") and toks[i + 1].kind in (IDENT, QIDENT):
        i += 2                       # a table alias; only a join would need it
    if toks[i].is_op(","):
        raise _err("ESL-TS queries over a join are not supported: run the sequence query on "
                   "one table and join its result in SQL", toks[i], "esl_join")
    partition, order = [], []
    if toks[i].is_keyword("PARTITION") and toks[i + 1].is_keyword("BY"):
        i, partition = _names(toks, i + 2)
    if toks[i].is_keyword("SEQUENCE") and toks[i + 1].is_keyword("BY"):
        i, order = _names(toks, i + 2)
    if not (toks[i].is_keyword("AS") and toks[i + 1].is_op("(")):
        raise _err("expected AS (X, *Y, ...): the sequence of tuple variables", toks[i])
    i += 2
    variables = []
    while True:
        star = bool(toks[i].is_op("*"))
        if star:
            i += 1
        if toks[i].kind not in (IDENT, QIDENT):
            raise _err("expected a tuple variable (X or *X)", toks[i])
        variables.append((toks[i].text.upper() if toks[i].kind == IDENT else toks[i].value,
                          star, toks[i]))
        i += 1
        if toks[i].is_op(","):
            i += 1
            continue
        if not toks[i].is_op(")"):
            raise _err("expected ',' or ')' in the tuple variable list", toks[i])
        i += 1
        break
    conjuncts = []
    if toks[i].is_keyword("WHERE"):
        conjuncts = _split(toks, i + 1, len(toks) - 1, at_depth, "AND", between_aware=True)
        i = len(toks) - 1
    if toks[i].kind != EOF:
        raise _err("expected WHERE or the end of the query", toks[i])
    items = _split(toks, 1, f, at_depth, ",")
    return {"table": table, "partition": partition, "order": order, "vars": variables,
            "items": items, "conjuncts": conjuncts}


def _names(toks: list, i: int) -> tuple:
    names = []
    while True:
        if toks[i].kind not in (IDENT, QIDENT):
            raise _err("expected a column name", toks[i])
        names.append(toks[i])
        i += 1
        if not toks[i].is_op(","):
            return i, names
        i += 1


def _split(toks: list, lo: int, hi: int, at_depth: list, sep: str,
           between_aware: bool = False) -> list:
    """Token ranges between top-level separators (',' or AND)."""
    parts, start, pending_between = [], lo, False
    for i in range(lo, hi):
        t = toks[i]
        if at_depth[i] != 0:
            continue
        if between_aware and t.is_keyword("BETWEEN"):
            pending_between = True
        is_sep = t.is_op(",") if sep == "," else t.is_keyword(sep)
        if is_sep and sep == "AND" and pending_between:
            pending_between = False
            continue
        if is_sep:
            parts.append((start, i))
            start = i + 1
    parts.append((start, hi))
    if any(a >= b for a, b in parts):
        raise _err(f"expected an expression before or after {sep}", toks[parts[0][0]])
    return parts


def _lookup(tok: Token, tables: dict):
    name = tok.value if tok.kind == QIDENT else tok.text
    matches = [k for k in tables if k == name] or \
        [k for k in tables if tok.kind == IDENT and k.upper() == name.upper()]
    if not matches:
        raise AnalysisError(f"unknown table {name}; tables passed: "
                            f"{', '.join(tables) or 'none'}", code="unknown_table",
                            line=tok.line, column=tok.column)
    return tables[matches[0]]


# -------------------------------------------------------------- translation

def _rewrite(query: str, toks: list, lo: int, hi: int, variables: set) -> tuple:
    """ESL-TS expression tokens -> (SQL text for our parser, uses a final aggregate)."""
    out, final, i = [], False, lo

    def var_at(k: int) -> Optional[str]:
        t = toks[k]
        name = t.text.upper() if t.kind == IDENT else t.value if t.kind == QIDENT else None
        return name if name in variables else None

    while i < hi:
        t = toks[i]
        # V.previous.col -> PREV(V.col)
        if var_at(i) and toks[i + 1].is_op(".") and toks[i + 2].is_keyword("PREVIOUS") \
                and toks[i + 3].is_op("."):
            out.append(f"PREV({t.text}.{toks[i + 4].text})")
            i += 5
            continue
        word = t.text.upper() if t.kind == IDENT else ""
        if word in ("FIRST", "LAST") and toks[i + 1].is_op("("):
            k = i + 2
            star = toks[k].is_op("*")
            k += star
            if var_at(k) and toks[k + 1].is_op(")") and toks[k + 2].is_op("."):
                out.append(f"{word}({toks[k].text}.{toks[k + 3].text})")
                final = final or star
                i = k + 4
                continue
        if (word in _FINAL or word in _CONTINUOUS) and toks[i + 1].is_op("("):
            k = i + 2
            star = toks[k].is_op("*")
            k += star
            name = _CONTINUOUS.get(word, word)
            if var_at(k) and toks[k + 1].is_op(")"):           # count(*Y), ccount(Y)
                out.append(f"{name}({toks[k].text}.*)" if name == "COUNT"
                           else f"{name}({toks[k].text}.*)")
                final = final or (star and word in _FINAL)
                i = k + 2
                continue
            if var_at(k) and toks[k + 1].is_op(".") and toks[k + 3].is_op(")"):  # sum(*Y.c)
                out.append(f"{name}({toks[k].text}.{toks[k + 2].text})")
                final = final or (star and word in _FINAL)
                i = k + 4
                continue
        out.append(query[t.start:t.end])
        i += 1
    return " ".join(out), final


def _translate(query: str, parsed: dict) -> tuple:
    toks = tokenize(query)
    variables = {name for name, _, _ in parsed["vars"]}
    order = [name for name, _, _ in parsed["vars"]]
    seen = {}
    for name, _, tok in parsed["vars"]:
        if name in seen:
            raise _err(f"tuple variable {name} appears twice in AS (...)", tok, "esl_duplicate")
        seen[name] = tok
    define_parts: dict = {name: [] for name in order}
    filters = []
    for lo, hi in parsed["conjuncts"]:
        text, final = _rewrite(query, toks, lo, hi, variables)
        expr = _parse_part(text, toks[lo])
        used = _variables_of(expr)
        if not used and not final:
            raise _err("qualify the columns of this condition with a tuple variable "
                       "(X.col)", toks[lo], "esl_unqualified")
        if final:
            filters.append(expr)
        else:
            define_parts[max(used, key=order.index)].append(expr)
    items = []
    names = []
    for n, (lo, hi) in enumerate(parsed["items"]):
        alias = None
        if hi - lo >= 2 and toks[hi - 2].is_keyword("AS") and toks[hi - 1].kind in (IDENT,
                                                                                   QIDENT):
            alias = toks[hi - 1]
            hi -= 2
        text, _ = _rewrite(query, toks, lo, hi, variables)
        expr = _parse_part(text, toks[lo])
        if alias is not None:
            names.append(alias.value if alias.kind == QIDENT else alias.text)
        elif isinstance(expr, A.ColumnRef):
            names.append(expr.column)
        else:
            names.append(query[toks[lo].start:toks[hi - 1].end])
        items.append(A.Measure(expr, f"__esl{n}", True, pos=A.Pos(toks[lo].line,
                                                                   toks[lo].column)))
    pattern_items = []
    for name, star, tok in parsed["vars"]:
        var = A.PVar(pos=A.Pos(tok.line, tok.column), name=name)
        pattern_items.append(A.PQuant(pos=var.pos, body=var, min=1, max=None, greedy=True,
                                      possessive=True) if star else var)
    pattern = pattern_items[0] if len(pattern_items) == 1 else A.PConcat(
        items=tuple(pattern_items))
    defines = tuple(A.Define(var=name, expr=_conjunction(parts), pos=A.Pos(seen[name].line,
                                                                        seen[name].column))
                    for name, parts in define_parts.items() if parts)
    clause = A.MatchRecognize(
        partition_by=tuple(_column(t) for t in parsed["partition"]),
        order_by=tuple(A.SortKey(_column(t)) for t in parsed["order"]),
        measures=tuple(items), pattern=pattern, defines=defines,
        match_filter=_conjunction(filters) if filters else None)
    return clause, names


def _parse_part(text: str, at: Token) -> A.Expr:
    try:
        return parse_expression(text)
    except SqlSyntaxError as exc:
        raise SqlSyntaxError(f"in the ESL-TS expression starting here: {exc.reason}",
                             code=exc.code, line=at.line, column=at.column) from None


def _variables_of(expr: A.Expr) -> set:
    used = set()
    for n in expr.walk():
        if isinstance(n, A.ColumnRef) and n.var:
            used.add(n.var)
        elif isinstance(n, A.Aggregate) and n.star_var:
            used.add(n.star_var)
    return used


def _conjunction(parts: list) -> A.Expr:
    expr = parts[0]
    for p in parts[1:]:
        expr = A.Binary(pos=expr.pos, op="AND", left=expr, right=p)
    return expr


def _column(tok: Token) -> A.ColumnRef:
    return A.ColumnRef(pos=A.Pos(tok.line, tok.column),
                       column=tok.value if tok.kind == QIDENT else tok.text,
                       quoted=tok.kind == QIDENT)
