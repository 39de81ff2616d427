"""Row pattern -> Thompson NFA with priority-ordered epsilon edges.

What: a flat, immutable program (in the manner of Go's regexp/syntax Prog):
instructions CONSUME (one row for one variable), SPLIT (two epsilon edges, the
first preferred), EPS, ASSERT_START / ASSERT_END (the ``^`` and ``$``
anchors, tested against partition bounds) and MATCH. Engines only read it.
Desugaring happens first, as its own pass: PERMUTE becomes the alternation of
the permutations in lexicographic order of its list; ``x{n,m}`` becomes n
copies of x followed by m-n nested optional copies (``x{n,}``: n copies and a
star); exclusion ``{- -}`` only marks the CONSUME instructions inside it.
Preferment is edge order: greedy quantifiers try the body first, reluctant
ones the exit first, alternation the left branch first. Engines take epsilon
closures in priority order and visit each state once per step (RE2's rule),
so an iteration that consumes nothing beyond a quantifier's minimum does not
count and ``(A*)*`` terminates.
Cost: linear in the size of the desugared pattern; MAX_STATES bounds it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..errors import AnalysisError
from ..syntax import ast as A

CONSUME, SPLIT, EPS, ASSERT_START, ASSERT_END, MATCH, ASSERT_NOT = range(7)
OP_NAMES = {CONSUME: "consume", SPLIT: "split", EPS: "eps", ASSERT_START: "assert ^",
            ASSERT_END: "assert $", MATCH: "match", ASSERT_NOT: "assert not"}

# A bound on program size: large enough for any hand-written pattern
# (e.g. (A B C){1000} or a PERMUTE of 6 items), small enough that building
# the DFA from it later stays within memory.
MAX_STATES = 200_000


@dataclass(frozen=True)
class Inst:
    op: int
    out: int = -1            # next instruction (CONSUME, EPS, asserts) or preferred edge (SPLIT)
    out2: int = -1           # SPLIT: the less preferred edge
    var: int = -1            # CONSUME: variable id
    excluded: bool = False   # CONSUME: inside {- -}

    def describe(self, var_names: tuple) -> str:
        if self.op == CONSUME:
            mark = " excluded" if self.excluded else ""
            return f"consume {var_names[self.var]}{mark} -> {self.out}"
        if self.op == SPLIT:
            return f"split {self.out}, {self.out2}"
        if self.op == MATCH:
            return "match"
        if self.op == ASSERT_NOT:
            return f"assert not {var_names[self.var]} -> {self.out}"
        return f"{OP_NAMES[self.op]} -> {self.out}"


@dataclass(frozen=True)
class Program:
    insts: tuple
    start: int
    var_names: tuple          # variable id -> canonical name

    def dump(self) -> str:
        """Stable text form, one instruction per line (tests compare it)."""
        lines = [f"start {self.start}"]
        lines += [f"{i:4d}  {inst.describe(self.var_names)}" for i, inst in enumerate(self.insts)]
        return "\n".join(lines)


def desugar(p: A.Pattern) -> A.Pattern:
    """Expand PERMUTE into alternations (lexicographic order of the list)."""
    if isinstance(p, A.PPermute):
        items = [desugar(i) for i in p.items]
        alternatives = [A.PConcat(pos=p.pos, items=tuple(order))
                        for order in itertools.permutations(items)]
        return alternatives[0] if len(alternatives) == 1 else A.PAlt(pos=p.pos,
                                                                      items=tuple(alternatives))
    if isinstance(p, (A.PConcat, A.PAlt)):
        return type(p)(pos=p.pos, items=tuple(desugar(i) for i in p.items))
    if isinstance(p, A.PQuant):
        return A.PQuant(pos=p.pos, body=desugar(p.body), min=p.min, max=p.max, greedy=p.greedy,
                        possessive=p.possessive)
    if isinstance(p, A.PExclude):
        return A.PExclude(pos=p.pos, body=desugar(p.body))
    return p


def compile_nfa(pattern: A.Pattern, var_names: tuple) -> Program:
    """Compile a (checked) pattern into a :class:`Program`."""
    builder = _Builder({name: i for i, name in enumerate(var_names)}, pattern.pos)
    match = builder.emit(Inst(MATCH))
    start = builder.compile(desugar(pattern), match, excluded=False)
    return Program(tuple(builder.insts), start, tuple(var_names))


def edge_variables(program: Program) -> tuple:
    """``(first, last)``: the variable ids that can take the first row of a
    non-empty match, and those that can take its last row. A superset: every
    epsilon edge counts as passable (anchors and possessive guards included),
    so a variable missing from ``first`` never takes a match's first row.
    Why: FIRST(A.x) of a pattern that always begins with A is the match's
    first row, with no walk over the match's labels (measures.py).

    >>> from ..syntax import parse_clause
    >>> p = parse_clause("PATTERN (S D+ U+) DEFINE D AS TRUE").pattern
    >>> edge_variables(compile_nfa(p, ("S", "D", "U")))
    (frozenset({0}), frozenset({2}))
    """
    insts = program.insts

    def closure(entry: int) -> set:
        seen, stack = set(), [entry]
        while stack:
            i = stack.pop()
            if i in seen or i < 0:
                continue
            seen.add(i)
            inst = insts[i]
            if inst.op == SPLIT:
                stack += [inst.out, inst.out2]
            elif inst.op not in (CONSUME, MATCH):
                stack.append(inst.out)
        return seen

    first = frozenset(insts[i].var for i in closure(program.start) if insts[i].op == CONSUME)
    last = frozenset(inst.var for inst in insts if inst.op == CONSUME
                     and any(insts[j].op == MATCH for j in closure(inst.out)))
    return first, last


class _Builder:
    """Builds instructions back to front: ``compile(p, next)`` returns the
    entry of p's fragment, whose exits all lead to ``next``."""

    def __init__(self, var_ids: dict, pos: A.Pos):
        self.var_ids = var_ids
        self.insts: list[Inst] = []
        self.pos = pos

    def emit(self, inst: Inst) -> int:
        if len(self.insts) >= MAX_STATES:
            raise AnalysisError(f"the pattern expands to more than {MAX_STATES} automaton "
                                f"states (large repetition counts or PERMUTE lists); "
                                f"simplify it", code="pattern_too_large",
                                line=self.pos.line or None, column=self.pos.column or None)
        self.insts.append(inst)
        return len(self.insts) - 1

    def placeholder(self) -> int:
        return self.emit(Inst(EPS))

    def patch(self, at: int, inst: Inst) -> None:
        self.insts[at] = inst

    def compile(self, p: A.Pattern, nxt: int, excluded: bool) -> int:
        if isinstance(p, A.PVar):
            return self.emit(Inst(CONSUME, out=nxt, var=self.var_ids[p.name], excluded=excluded))
        if isinstance(p, A.PEmpty):
            return nxt
        if isinstance(p, A.PAnchor):
            return self.emit(Inst(ASSERT_START if p.kind == "^" else ASSERT_END, out=nxt))
        if isinstance(p, A.PConcat):
            entry = nxt
            for item in reversed(p.items):
                entry = self.compile(item, entry, excluded)
            return entry
        if isinstance(p, A.PAlt):
            entries = [self.compile(item, nxt, excluded) for item in p.items]
            entry = entries[-1]
            for e in reversed(entries[:-1]):
                entry = self.emit(Inst(SPLIT, out=e, out2=entry))
            return entry
        if isinstance(p, A.PExclude):
            return self.compile(p.body, nxt, True)
        if isinstance(p, A.PQuant):
            return self._quantified(p, nxt, excluded)
        raise AssertionError(f"unexpected pattern node {p!r}")

    def _quantified(self, q: A.PQuant, nxt: int, excluded: bool) -> int:
        if q.possessive:
            return self._possessive(q, nxt, excluded)
        entry = nxt
        if q.max is None:
            # star: loop: split(body -> loop, exit), body first when greedy
            loop = self.placeholder()
            body = self.compile(q.body, loop, excluded)
            self.patch(loop, Inst(SPLIT, out=body, out2=nxt) if q.greedy
                       else Inst(SPLIT, out=nxt, out2=body))
            entry = loop
        else:
            # optional copies, nested: x (x (x)?)? ... built from the inside out
            for _ in range(q.max - q.min):
                body = self.compile(q.body, entry, excluded)
                # every optional copy may exit straight to the fragment's exit
                entry = self.emit(Inst(SPLIT, out=body, out2=nxt) if q.greedy
                                  else Inst(SPLIT, out=nxt, out2=body))
        for _ in range(q.min):
            entry = self.compile(q.body, entry, excluded)
        return entry

    def _possessive(self, q: A.PQuant, nxt: int, excluded: bool) -> int:
        """``v{n,m}+``: after the n required rows, take each further row that
        v accepts (up to m), and leave only where v does not accept the next
        row: ASSERT_NOT v guards the exit, so no other path exists."""
        var = self.var_ids[q.body.name]
        if q.max is None:
            loop = self.placeholder()
            take = self.emit(Inst(CONSUME, out=loop, var=var, excluded=excluded))
            leave = self.emit(Inst(ASSERT_NOT, out=nxt, var=var))
            self.patch(loop, Inst(SPLIT, out=take, out2=leave))
            entry = loop
        else:
            entry = nxt
            for _ in range(q.max - q.min):
                take = self.emit(Inst(CONSUME, out=entry, var=var, excluded=excluded))
                leave = self.emit(Inst(ASSERT_NOT, out=nxt, var=var))
                entry = self.emit(Inst(SPLIT, out=take, out2=leave))
        for _ in range(q.min):
            entry = self.emit(Inst(CONSUME, out=entry, var=var, excluded=excluded))
        return entry
