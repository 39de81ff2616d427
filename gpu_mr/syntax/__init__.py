"""Syntax: tokens, AST node types and the parser of the MATCH_RECOGNIZE clause."""

from .parser import parse_clause, parse_expression, parse_window_spec
from .tokens import tokenize

__all__ = ["parse_clause", "parse_expression", "parse_window_spec", "tokenize"]
