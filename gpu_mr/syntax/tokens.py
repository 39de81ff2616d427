"""Tokenizer for MATCH_RECOGNIZE clauses and the SQL around them.

What: text -> list of :class:`Token` with absolute offsets and 1-based line
and column. Keywords are not reserved here (the parser decides by context,
since pattern variables such as ``A`` or ``LAST`` may look like keywords).
Why separate: one place knows strings, quoted identifiers and comments, so
the parser and the statement splitter (outer_sql) agree on where things are.
Cost: one linear pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from ..errors import SqlSyntaxError

IDENT = "ident"            # unquoted identifier or keyword
QIDENT = "qident"          # "double quoted" identifier
NUMBER = "number"
STRING = "string"
OP = "op"
EOF = "eof"

# Longest first, so that '<=' wins over '<'.
_OPERATORS = ("{-", "-}", "||", "<=", ">=", "<>", "!=", "=>", "(", ")", ",", ".",
              "+", "-", "*", "/", "%", "=", "<", ">", "|", "?", "{", "}", "^",
              "$", "[", "]", ";", ":")


@dataclass(frozen=True)
class Token:
    kind: str
    text: str          # the source text of the token
    value: object      # identifier name, literal value, or operator text
    start: int         # absolute offsets into the whole text
    end: int
    line: int
    column: int

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == IDENT else ""

    def is_keyword(self, *words: str) -> bool:
        return self.kind == IDENT and self.text.upper() in words

    def is_op(self, *ops: str) -> bool:
        return self.kind == OP and self.text in ops


class Positions:
    """Maps absolute offsets to 1-based (line, column)."""

    def __init__(self, text: str):
        self.line_starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self.line_starts.append(i + 1)

    def locate(self, offset: int) -> tuple[int, int]:
        lo, hi = 0, len(self.line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.line_starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, offset - self.line_starts[lo] + 1


def tokenize(text: str, start: int = 0, end: int | None = None) -> list[Token]:
    """Split ``text[start:end]`` into tokens; positions refer to all of ``text``.

    >>> [t.text for t in tokenize("PATTERN (A+ B*?) -- comment")][:5]
    ['PATTERN', '(', 'A', '+', 'B']
    """
    end = len(text) if end is None else end
    pos = Positions(text)
    tokens: list[Token] = []
    i = start

    def fail(message: str, at: int, code: str):
        line, col = pos.locate(at)
        raise SqlSyntaxError(message, code=code, line=line, column=col)

    def emit(kind: str, j: int, value: object) -> None:
        line, col = pos.locate(i)
        tokens.append(Token(kind, text[i:j], value, i, j, line, col))

    while i < end:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif text.startswith("--", i):
            nl = text.find("\n", i, end)
            i = end if nl < 0 else nl + 1
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2, end)
            if close < 0:
                fail("unterminated comment", i, "unterminated_comment")
            i = close + 2
        elif ch == "'":
            j, value = _scan_quoted(text, i, end, "'")
            if j < 0:
                fail("unterminated string literal", i, "unterminated_string")
            emit(STRING, j, value)
            i = j
        elif ch == '"':
            j, value = _scan_quoted(text, i, end, '"')
            if j < 0:
                fail("unterminated quoted identifier", i, "unterminated_identifier")
            if value == "":
                fail("empty quoted identifier", i, "empty_identifier")
            emit(QIDENT, j, value)
            i = j
        elif ch.isdigit() or (ch == "." and i + 1 < end and text[i + 1].isdigit()):
            j = i
            while j < end and text[j].isdigit():
                j += 1
            is_int = True
            if j < end and text[j] == "." and not text.startswith("..", j):
                is_int = False
                j += 1
                while j < end and text[j].isdigit():
                    j += 1
            if j < end and text[j] in "eE":
                k = j + 1
                if k < end and text[k] in "+-":
                    k += 1
                if k < end and text[k].isdigit():
                    is_int = False
                    j = k
                    while j < end and text[j].isdigit():
                        j += 1
            if j < end and (text[j].isalpha() or text[j] == "_"):
                fail(f"malformed number {text[i:j + 1]!r}", i, "bad_number")
            raw = text[i:j]
            emit(NUMBER, j, int(raw) if is_int else Decimal(raw))
            i = j
        elif ch.isalpha() or ch == "_":
            j = i + 1
            while j < end and (text[j].isalnum() or text[j] == "_"):
                j += 1
            emit(IDENT, j, text[i:j])
            i = j
        else:
            for op in _OPERATORS:
                if text.startswith(op, i) and i + len(op) <= end:
                    emit(OP, i + len(op), op)
                    i += len(op)
                    break
            else:
                fail(f"unexpected character {ch!r}", i, "bad_character")
    line, col = pos.locate(end)
    tokens.append(Token(EOF, "", None, end, end, line, col))
    return tokens


def _scan_quoted(text: str, i: int, end: int, quote: str) -> tuple[int, str]:
    """Scan a quoted token starting at ``i``; a doubled quote is an escaped one.
    Returns (index after the closing quote, unescaped value), or (-1, '')."""
    j = i + 1
    parts = []
    while j < end:
        k = text.find(quote, j, end)
        if k < 0:
            return -1, ""
        parts.append(text[j:k])
        if k + 1 < end and text[k + 1] == quote:
            parts.append(quote)
            j = k + 2
            continue
        return k + 1, "".join(parts)
    return -1, ""
