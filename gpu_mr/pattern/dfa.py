"""Priority-ordered NFA -> DFA by ordered subset construction (leftmost-first).

What: for queries whose DEFINEs are all row-local, what a row can be mapped
to depends only on that row's class: the bitmask of variables whose DEFINE
holds there (bit i = primary variable i). Over that alphabet the reference
engine's Pike VM (engines/reference.py) becomes deterministic: a DFA state is
the ordered list of NFA states the live threads wait in, before their
epsilon closure (RE2's DFA does the same for leftmost-first matching). One
step on a row's class takes the closure in priority order (the possessive
guard ASSERT_NOT reads the same class), notes whether MATCH comes up (a match
ending before this row: threads after it are cut, as in the Pike VM), and
keeps the states of the consuming threads whose variable is in the class.
Why: this is the automaton the fast engines scan (kernels/, later issues);
``explain()`` reports its size.
Cost: states are built lazily and cached per (state, class); at most
``max_states`` states, beyond which :class:`DfaTooLarge` tells the caller to
fall back to NFA simulation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .nfa import ASSERT_END, ASSERT_NOT, ASSERT_START, CONSUME, EPS, MATCH, SPLIT, Program

# Dense tables of this many states x the classes seen stay in cache; more
# means a pathological pattern (e.g. (A|B)*A(A|B){20}) that NFA simulation
# serves better.
MAX_STATES = 10_000
DEAD = 0


class DfaTooLarge(Exception):
    """The DFA would exceed its state cap; simulate the NFA instead."""


@dataclass
class Dfa:
    program: Program
    max_states: int = MAX_STATES
    states: list = field(default_factory=list)        # id -> (seeds tuple, at_start)
    index: dict = field(default_factory=dict)         # (seeds, at_start) -> id
    transitions: dict = field(default_factory=dict)   # (id, class) -> (id, matched)
    end_accepts: dict = field(default_factory=dict)   # id -> bool

    def __post_init__(self):
        self._intern((), False)                      # DEAD = 0: no live thread

    # ------------------------------------------------------------ building
    def _intern(self, seeds: tuple, at_start: bool) -> int:
        key = (seeds, at_start)
        sid = self.index.get(key)
        if sid is None:
            if len(self.states) >= self.max_states:
                raise DfaTooLarge(f"the DFA needs more than {self.max_states} states")
            sid = len(self.states)
            self.index[key] = sid
            self.states.append(key)
        return sid

    def start(self, at_partition_start: bool) -> int:
        """The state of a search that begins at a row (``^`` holds only at
        the partition's first row)."""
        return self._intern((self.program.start,), at_partition_start)

    def _closure(self, sid: int, cls: int, at_end: bool) -> list:
        """CONSUME/MATCH instructions reachable from the state's seeds, in
        priority order, each once (the Pike VM's closure)."""
        seeds, at_start = self.states[sid]
        insts = self.program.insts
        out, seen = [], set()
        for seed in seeds:
            stack = [seed]
            while stack:
                s = stack.pop()
                if s in seen:
                    continue
                seen.add(s)
                inst = insts[s]
                if inst.op == SPLIT:
                    stack.append(inst.out2)
                    stack.append(inst.out)
                elif inst.op == EPS:
                    stack.append(inst.out)
                elif inst.op == ASSERT_START:
                    if at_start:
                        stack.append(inst.out)
                elif inst.op == ASSERT_END:
                    if at_end:
                        stack.append(inst.out)
                elif inst.op == ASSERT_NOT:
                    if at_end or not (cls >> inst.var) & 1:
                        stack.append(inst.out)
                else:
                    out.append(s)
        return out

    def step(self, sid: int, cls: int) -> tuple:
        """Read one row of class ``cls``: (next state, whether a match ends
        just before this row)."""
        key = (sid, cls)
        hit = self.transitions.get(key)
        if hit is not None:
            return hit
        insts = self.program.insts
        nxt, seen, matched = [], set(), False
        for s in self._closure(sid, cls, at_end=False):
            inst = insts[s]
            if inst.op == MATCH:
                matched = True
                break                     # lower-priority threads are cut
            if (cls >> inst.var) & 1 and inst.out not in seen:
                seen.add(inst.out)
                nxt.append(inst.out)
        result = (self._intern(tuple(nxt), False) if nxt else DEAD, matched)
        self.transitions[key] = result
        return result

    def accepts_at_end(self, sid: int) -> bool:
        """Whether a match ends at the partition's end from this state."""
        hit = self.end_accepts.get(sid)
        if hit is None:
            hit = any(self.program.insts[s].op == MATCH
                      for s in self._closure(sid, 0, at_end=True))
            self.end_accepts[sid] = hit
        return hit

    def dense_tables(self, classes: list) -> tuple:
        """The DFA over ``classes`` as arrays for a kernel: trans[state, class
        index] (0 = dead), matched[state, class index] (a match ends before
        the row), end_accept[state], and the two start states (at the
        partition's first row, elsewhere)."""
        start_first, start_other = self.start(True), self.start(False)
        self.explore(classes)
        n_states = len(self.states)
        trans = np.zeros((n_states, len(classes)), dtype=np.int32)
        matched = np.zeros((n_states, len(classes)), dtype=np.uint8)
        end_accept = np.zeros(n_states, dtype=np.uint8)
        for sid in range(1, n_states):
            end_accept[sid] = self.accepts_at_end(sid)
            for ci, c in enumerate(classes):
                trans[sid, ci], matched[sid, ci] = self.step(sid, c)
        return trans, matched, end_accept, start_first, start_other

    def explore(self, classes) -> int:
        """Build every state reachable on ``classes``; return the state count."""
        todo = [self.start(True), self.start(False)]
        done = set()
        while todo:
            sid = todo.pop()
            if sid in done or sid == DEAD:
                continue
            done.add(sid)
            self.accepts_at_end(sid)
            for c in classes:
                todo.append(self.step(sid, c)[0])
        return len(self.states)


def match_end(dfa: Dfa, classes, start: int, lo: int, hi: int) -> int:
    """The exclusive end of the preferred match starting at ``start`` (rows
    ``lo..hi`` are the partition), or -1: the scan a kernel performs, written
    plainly as its specification."""
    sid = dfa.start(start == lo)
    best = -1
    q = start
    while True:
        if q == hi:
            if dfa.accepts_at_end(sid):
                best = hi
            return best
        sid, matched = dfa.step(sid, int(classes[q]))
        if matched:
            best = q
        if sid == DEAD:
            return best
        q += 1


def match_spans(dfa: Dfa, classes, offsets, next_row: bool) -> list:
    """(start, end exclusive) of every match, partition by partition, resuming
    past the last row (or at the next row when ``next_row``); after an empty
    match at the next row. The specification of kernels/scan.py."""
    spans = []
    for p in range(len(offsets) - 1):
        lo, hi = int(offsets[p]), int(offsets[p + 1])
        pos = lo
        while pos < hi:
            end = match_end(dfa, classes, pos, lo, hi)
            if end < 0:
                pos += 1
                continue
            spans.append((pos, end))
            pos = pos + 1 if end == pos or next_row else end
    return spans
