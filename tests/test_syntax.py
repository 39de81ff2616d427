"""Parser unit tests: round trips through to_sql, and located syntax errors."""

from __future__ import annotations

import pytest

from gpu_mr.errors import AnalysisError, SqlSyntaxError
from gpu_mr.syntax import parse_clause, parse_expression, tokenize

ROUND_TRIP = [
    "PATTERN (A)",
    "PARTITION BY s, \"Mixed\" ORDER BY ts DESC NULLS FIRST, id ASC NULLS LAST PATTERN (A B)",
    "MEASURES FIRST(A.ts) AS s, FINAL LAST(B.p, 2) AS e, RUNNING COUNT(*) AS n, "
    "COUNT(A.*) AS na, CLASSIFIER() AS c, CLASSIFIER(U) AS cu, MATCH_NUMBER() AS m "
    "ALL ROWS PER MATCH WITH UNMATCHED ROWS AFTER MATCH SKIP TO FIRST U PATTERN (A B) "
    "SUBSET U = (A, B)",
    "ALL ROWS PER MATCH OMIT EMPTY MATCHES AFTER MATCH SKIP TO NEXT ROW PATTERN (A*)",
    "AFTER MATCH SKIP TO LAST A PATTERN (A B)",
    "PATTERN (^ A+? B?? C{2} D{2,} E{,3} F{1,4}? $)",
    "PATTERN ((A | B C)* | PERMUTE(A, B | C, D) {- E -} ())",
    "PATTERN (()) DEFINE A AS TRUE",
    "PATTERN (A) DEFINE A AS CASE WHEN x BETWEEN 1 AND 2 THEN 'a''b' ELSE NULL END = 'x' "
    "AND y NOT IN (1, 2) AND z IS NOT NULL OR NOT w LIKE 'a%'",
    "PATTERN (A) DEFINE A AS ts - PREV(ts) > INTERVAL '5' MINUTE AND d = DATE '2024-01-02' "
    "AND t < TIMESTAMP '2024-01-02 09:30:00.5' AND CAST(p AS DECIMAL(10, 2)) > 1.5",
    "PATTERN (A) DEFINE A AS PREV(LAST(A.p, 1), 2) > NEXT(p) * -3 + ABS(q) % 2 "
    "AND a || 'x' = 'y'",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_round_trip(text):
    first = parse_clause(text)
    again = parse_clause(first.to_sql())
    assert again == first
    assert again.to_sql() == first.to_sql()


def test_identifiers_fold_to_upper_unless_quoted():
    mr = parse_clause('PATTERN (a "b" c) SUBSET u = (a, c) DEFINE a AS x > 0')
    assert [v.name for v in mr.pattern.items] == ["A", "b", "C"]
    assert mr.subsets[0].name == "U" and mr.subsets[0].vars == ("A", "C")
    assert mr.defines[0].var == "A"


def test_precedence():
    e = parse_expression("1 + 2 * 3 - 4 / 2")
    assert e.to_sql() == "((1 + (2 * 3)) - (4 / 2))"
    e = parse_expression("NOT a = 1 AND b = 2 OR c = 3")
    assert e.to_sql() == "(((NOT (a = 1)) AND (b = 2)) OR (c = 3))"


def test_tokens_carry_line_and_column():
    toks = tokenize("PATTERN (A)\n  DEFINE A AS x > 'y'")
    define = [t for t in toks if t.text == "DEFINE"][0]
    assert (define.line, define.column) == (2, 3)
    assert [t for t in toks if t.kind == "string"][0].value == "y"


SYNTAX_ERRORS = [
    # text, line, column, words in the message
    ("ORDER BY ts PATTERN (A B", 1, 25, ["')'", "end of input"]),
    ("ORDER BY ts\nPATTERN A B", 2, 9, ["'('"]),
    ("PATTERN (A) DEFINE A x > 1", 1, 22, ["AS"]),
    ("PATTERN (A) DEFINE A AS", 1, 24, ["expression"]),
    ("PATTERN (A B) MEASURES x AS y", 1, 15, ["MEASURES", "order"]),
    ("PATTERN (A**)", 1, 12, ["quantifier"]),
    ("PATTERN (A) DEFINE A AS x = 'abc", 1, 29, ["unterminated"]),
    ("PATTERN (A) /* comment", 1, 13, ["unterminated comment"]),
    ("PATTERN (A |)", 1, 13, ["pattern variable"]),
    ("AFTER MATCH SKIP TO PATTERN (A)", None, None, []),
    ("AFTER MATCH SKIP PATTERN (A)", 1, 18, ["PAST LAST ROW"]),
    ("PATTERN (A) DEFINE A AS x > 1 extra", 1, 31, ["end of the MATCH_RECOGNIZE"]),
    ("PATTERN (A) DEFINE A AS a < b < c", 1, 31, ["chain"]),
    ("PATTERN (A) DEFINE A AS x = DATE '2024-13-01'", 1, 34, ["DATE"]),
    ("PATTERN (A) DEFINE A AS x # 1", 1, 27, ["unexpected character"]),
    ("PATTERN (A{,})", None, None, []),
]


@pytest.mark.parametrize("text,line,column,words", SYNTAX_ERRORS)
def test_syntax_errors_are_located(text, line, column, words):
    if line is None:
        # valid or invalid, it must never escape as anything but our errors
        try:
            parse_clause(text)
        except SqlSyntaxError:
            pass
        return
    with pytest.raises(SqlSyntaxError) as info:
        parse_clause(text)
    err = info.value
    assert (err.line, err.column) == (line, column), str(err)
    for w in words:
        assert w.lower() in str(err).lower(), str(err)


def test_quantifier_bounds_are_checked():
    with pytest.raises(AnalysisError, match="minimum greater"):
        parse_clause("PATTERN (A{3,2})")


def test_positions_refer_to_the_whole_statement():
    text = "SELECT *\nFROM t MATCH_RECOGNIZE (\n  PATTERN (A B\n) AS m"
    start = text.index("(") + 1
    end = text.rindex(")")
    with pytest.raises(SqlSyntaxError) as info:
        parse_clause(text, start, end)
    assert info.value.line == 4
