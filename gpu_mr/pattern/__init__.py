"""Pattern compilation: row pattern AST -> priority-ordered NFA program."""

from .nfa import Program, compile_nfa, desugar

__all__ = ["Program", "compile_nfa", "desugar"]
