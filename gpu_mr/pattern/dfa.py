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
Why: this is the automaton the CPU and GPU engines scan (kernels/);
``explain()`` reports its size.
Path recovery: a step also records, for each thread of the next state,
which thread of the current state it came from and through which CONSUME
instruction, and which thread reached MATCH. Walking those records backwards
from the accepting thread of a match yields the Pike VM's preferred path
(which variable each row took) in O(match length), with no search: this is
the "one thread per match" recovery of DESIGN.md §5, exact by construction
because the records are the Pike VM's own thread lineage.
:class:`UnanchoredDfa` is the same construction for a search that starts at
every row at once (RE2's unanchored leftmost-first DFA): AFTER MATCH SKIP
PAST LAST ROW then needs one step per row (kernels/unanchored.py), and the
lineage walk also finds where each match starts.
Cost: states are built lazily and cached per (state, class); at most
``max_states`` states, beyond which :class:`DfaTooLarge` tells the caller to
fall back to NFA simulation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .nfa import ASSERT_END, ASSERT_NOT, ASSERT_START, EPS, MATCH, SPLIT, Program

# Dense tables of this many states x the classes seen stay in cache; more
# means a pathological pattern (e.g. (A|B)*A(A|B){20}) that NFA simulation
# serves better.
MAX_STATES = 10_000
DEAD = 0
# NFA instructions visited by the closures while the unanchored DFA is
# built (about 0.1-0.2 s of Python; the conformance suite's largest took
# 2,272): past it the anchored scan, whose DFA is built lazily, serves.
# PERMUTE(A, B, C, D, E, F) expands to 720 alternatives; its unanchored DFA
# took 60 million visits and 8.7 s to build for a scan of 2,000 rows that
# the anchored scan ran in 0.76 s.
MAX_CLOSURE_WORK = 1_000_000


class DfaTooLarge(Exception):
    """The DFA would exceed its state cap; simulate the NFA instead."""


def closure(program: Program, seeds: tuple, at_start: bool, cls: int, at_end: bool,
            work: list = None) -> list:
    """(instruction, index of the seed it comes from) for every CONSUME/MATCH
    instruction reachable from ``seeds`` (NFA instructions, in priority
    order) on a row of class ``cls``, in priority order, each once: the Pike
    VM's closure. ``^`` holds when ``at_start``, ``$`` when ``at_end``.
    ``work[0]`` (when given) grows by the instructions visited."""
    insts = program.insts
    out, seen = [], set()
    for thread, seed in enumerate(seeds):
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
                out.append((s, thread))
    if work is not None:
        work[0] += len(seen)
    return out


@dataclass
class Dfa:
    program: Program
    max_states: int = MAX_STATES
    states: list = field(default_factory=list)        # id -> (seeds tuple, at_start)
    index: dict = field(default_factory=dict)         # (seeds, at_start) -> id
    transitions: dict = field(default_factory=dict)   # (id, class) -> (id, matched)
    end_accepts: dict = field(default_factory=dict)   # id -> bool
    # (id, class) -> (per next-state thread: (source thread, CONSUME inst),
    #                 index of the thread that reached MATCH or -1)
    lineage: dict = field(default_factory=dict)
    end_threads: dict = field(default_factory=dict)   # id -> thread reaching MATCH at the end, or -1

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
        """(instruction, index of the seed thread it comes from) for every
        CONSUME/MATCH instruction reachable from the state's seeds, in
        priority order, each once (the Pike VM's closure)."""
        seeds, at_start = self.states[sid]
        return closure(self.program, seeds, at_start, cls, at_end)

    def step(self, sid: int, cls: int) -> tuple:
        """Read one row of class ``cls``: (next state, whether a match ends
        just before this row)."""
        key = (sid, cls)
        hit = self.transitions.get(key)
        if hit is not None:
            return hit
        insts = self.program.insts
        nxt, seen, matched, parents, match_thread = [], set(), False, [], -1
        for s, thread in self._closure(sid, cls, at_end=False):
            inst = insts[s]
            if inst.op == MATCH:
                matched, match_thread = True, thread
                break                     # lower-priority threads are cut
            if (cls >> inst.var) & 1 and inst.out not in seen:
                seen.add(inst.out)
                nxt.append(inst.out)
                parents.append((thread, s))
        result = (self._intern(tuple(nxt), False) if nxt else DEAD, matched)
        self.transitions[key] = result
        self.lineage[key] = (tuple(parents), match_thread)
        return result

    def accepts_at_end(self, sid: int) -> bool:
        """Whether a match ends at the partition's end from this state."""
        hit = self.end_accepts.get(sid)
        if hit is None:
            threads = [t for s, t in self._closure(sid, 0, at_end=True)
                       if self.program.insts[s].op == MATCH]
            hit = bool(threads)
            self.end_accepts[sid] = hit
            self.end_threads[sid] = threads[0] if threads else -1
        return hit

    def dense_tables(self, classes) -> "DfaTables":
        """The DFA over ``classes`` (the class bitmasks present, in the order
        of their dense index) as arrays for the kernels; see :class:`DfaTables`."""
        # No rows, no classes: one column keeps the tables well formed.
        classes = [int(c) for c in classes] or [0]
        start_first, start_other = self.start(True), self.start(False)
        self.explore(classes)
        n_states, n_classes = len(self.states), len(classes)
        width = max(1, max(len(seeds) for seeds, _ in self.states))
        trans = np.zeros((n_states, n_classes), dtype=np.int32)
        matched = np.zeros((n_states, n_classes), dtype=np.uint8)
        end_accept = np.zeros(n_states, dtype=np.uint8)
        parent_thread = np.full((n_states, n_classes, width), -1, dtype=np.int32)
        parent_inst = np.full((n_states, n_classes, width), -1, dtype=np.int32)
        match_thread = np.full((n_states, n_classes), -1, dtype=np.int32)
        end_thread = np.full(n_states, -1, dtype=np.int32)
        for sid in range(1, n_states):
            end_accept[sid] = self.accepts_at_end(sid)
            end_thread[sid] = self.end_threads[sid]
            for ci, c in enumerate(classes):
                trans[sid, ci], matched[sid, ci] = self.step(sid, c)
                parents, match_thread[sid, ci] = self.lineage[(sid, c)]
                for k, (thread, inst) in enumerate(parents):
                    parent_thread[sid, ci, k] = thread
                    parent_inst[sid, ci, k] = inst
        insts = self.program.insts
        inst_var = np.array([i.var for i in insts], dtype=np.int16)
        inst_excluded = np.array([i.excluded for i in insts], dtype=np.uint8)
        steps = trans * 2 + matched
        return DfaTables(trans, matched, end_accept, start_first, start_other, parent_thread,
                         parent_inst, match_thread, end_thread, inst_var, inst_excluded, steps,
                         pack_lineage(parent_thread, parent_inst, inst_var, inst_excluded))

    def explore(self, classes) -> int:
        """Build every state reachable on ``classes``; return the state count."""
        return explore(self, classes, self.accepts_at_end)


def explore(automaton, classes, at_end) -> int:
    """Build every state of ``automaton`` (a :class:`Dfa` or
    :class:`UnanchoredDfa`) reachable from its two start states on
    ``classes``, and ``at_end(state)`` of each (what the partition's end
    does there); return the state count."""
    todo = [automaton.start(True), automaton.start(False)]
    done = set()
    while todo:
        sid = todo.pop()
        if sid in done or sid == DEAD:
            continue
        done.add(sid)
        at_end(sid)
        for c in classes:
            todo.append(automaton.step(sid, c)[0])
    return len(automaton.states)


@dataclass(frozen=True)
class DfaTables:
    """A DFA explored over the classes present in the data, as arrays.

    ``trans[state, class index]``: the next state (0 = dead);
    ``matched[state, class index]``: a match ends just before that row;
    ``end_accept[state]``: a match ends at the partition's end;
    ``start_first`` / ``start_other``: the state of a search starting at a
    partition's first row / elsewhere. Lineage for path recovery:
    ``parent_thread[state, class index, k]`` and ``parent_inst[...]`` give,
    for thread ``k`` of the next state, its thread in ``state`` and the
    CONSUME instruction it took; ``match_thread[state, class index]`` and
    ``end_thread[state]`` the thread that reached MATCH (-1: none);
    ``inst_var`` / ``inst_excluded`` the variable id and ``{- -}`` mark of
    each instruction. ``steps`` packs ``trans`` and ``matched`` for the scan's
    hot loop (one lookup per row).
    """
    trans: np.ndarray
    matched: np.ndarray
    end_accept: np.ndarray
    start_first: int
    start_other: int
    parent_thread: np.ndarray
    parent_inst: np.ndarray
    match_thread: np.ndarray
    end_thread: np.ndarray
    inst_var: np.ndarray
    inst_excluded: np.ndarray
    steps: np.ndarray             # trans * 2 + matched: the scan's one lookup per row
    lineage: np.ndarray           # pack_lineage(...): path recovery's one lookup per row

    @property
    def n_states(self) -> int:
        return int(self.trans.shape[0])

    def over_bitmasks(self, present, n_vars: int) -> "DfaTables":
        """The same tables indexed by the raw class bitmask (``2**n_vars``
        columns) instead of the dense index of ``present``: a kernel can then
        read the packed masks directly, with no per-row renumbering. Columns
        of bitmasks absent from the data repeat column 0 (never read)."""
        lookup = np.zeros(1 << n_vars, dtype=np.intp)
        lookup[np.asarray(present, dtype=np.intp)] = np.arange(len(present))

        def columns(table):     # C order, as the kernels' numba types expect
            return np.ascontiguousarray(table[:, lookup])
        return DfaTables(columns(self.trans), columns(self.matched), self.end_accept,
                         self.start_first, self.start_other, columns(self.parent_thread),
                         columns(self.parent_inst), columns(self.match_thread),
                         self.end_thread, self.inst_var, self.inst_excluded,
                         columns(self.steps), columns(self.lineage))


def pack_lineage(parent_thread, parent_inst, inst_var, inst_excluded) -> np.ndarray:
    """``parent_thread | variable << 16 | excluded << 32`` per (state, class,
    thread) as int64: what path recovery reads at each row, in one lookup
    instead of four dependent ones (threads and variables fit 16 bits: the
    DFA's states hold a handful of threads, patterns a handful of
    variables)."""
    inst = np.maximum(parent_inst, 0)           # -1 (no such thread) is never read
    return ((parent_thread.astype(np.int64) & 0xFFFF)
            | (inst_var[inst].astype(np.int64) & 0xFFFF) << 16
            | inst_excluded[inst].astype(np.int64) << 32)


# The match thread of a step that is the search injected at that very row:
# the match consumed nothing (an empty match starting and ending there).
EMPTY_MATCH = -2
# Threads per unanchored state: the scan packs a match's thread in a byte
# (kernels/unanchored.py). More means a pattern of long fixed repeats over
# rows where every start stays alive, which the anchored scan serves.
MAX_THREADS = 253


@dataclass
class UnanchoredDfa:
    """The leftmost-first DFA of an *unanchored* search, for AFTER MATCH SKIP
    PAST LAST ROW: one scan of the rows finds what :func:`match_spans` finds
    by running the anchored :class:`Dfa` from every start row.

    A state is the ordered seeds of every live thread, earlier starts first
    (higher priority), and while no match has been seen, one more seed last:
    a search *injected* at the row about to be read (RE2's unanchored
    leftmost-first DFA). The closure keeps each NFA instruction once, for its
    earliest start: a later start reaching it has the same future and lower
    priority. A MATCH cuts the threads after it, later injections included,
    and from then on nothing is injected; the search ends when no thread is
    left (or at the partition's end), and a fresh one starts where the match
    ends. Key: (carried seeds, ``^`` holds, injected). Lineage is
    :class:`Dfa`'s, plus per state the index of its injected seed: walking a
    match back from its MATCH thread, the row whose pre-state's injected
    seed the walk reaches is where the match starts.
    Cost: states are built lazily and cached per (state, class), at most
    ``max_states`` (and :data:`MAX_THREADS` threads per state, and
    :data:`MAX_CLOSURE_WORK` closure steps in all); past it
    :class:`DfaTooLarge` (remembered, so a later call fails at once) tells
    the caller to scan with the anchored DFA.
    """
    program: Program
    max_states: int = MAX_STATES
    states: list = field(default_factory=list)        # id -> (carried, at_start, injected)
    index: dict = field(default_factory=dict)         # key -> id
    transitions: dict = field(default_factory=dict)   # (id, class) -> (id, matched)
    # (id, class) -> (per next-state thread: (source thread, CONSUME inst),
    #                 index of the thread that reached MATCH or -1)
    lineage: dict = field(default_factory=dict)
    end_threads: dict = field(default_factory=dict)   # id -> MATCH thread at the end, or -1
    too_large: str = ""
    # tuple of classes -> UnanchoredTables: batches of a stream, and runs of the
    # same query, mostly see the same classes (the arrays cost Python loops)
    tables: dict = field(default_factory=dict)
    work: list = field(default_factory=lambda: [0])   # closure visits so far

    def __post_init__(self):
        self._intern((), False, False)                # DEAD = 0: no thread, no injection

    def _intern(self, carried: tuple, at_start: bool, injected: bool) -> int:
        key = (carried, at_start, injected)
        sid = self.index.get(key)
        if sid is None:
            if len(self.states) >= self.max_states:
                self.too_large = f"the unanchored DFA needs more than {self.max_states} states"
                raise DfaTooLarge(self.too_large)
            sid = len(self.states)
            self.index[key] = sid
            self.states.append(key)
        return sid

    def start(self, at_partition_start: bool) -> int:
        """The state of a fresh search at a row (``^`` holds only at the
        partition's first row)."""
        return self._intern((), at_partition_start, True)

    def seeds(self, sid: int) -> tuple:
        """The state's seeds in priority order, the injected one last."""
        carried, _, injected = self.states[sid]
        return carried + (self.program.start,) if injected else carried

    def injected_thread(self, sid: int) -> int:
        """Index of the state's injected seed among :meth:`seeds`, or -1."""
        carried, _, injected = self.states[sid]
        return len(carried) if injected else -1

    def step(self, sid: int, cls: int) -> tuple:
        """Read one row of class ``cls``: (next state, whether a match ends
        just before this row)."""
        key = (sid, cls)
        hit = self.transitions.get(key)
        if hit is not None:
            return hit
        carried, at_start, injected = self.states[sid]
        insts = self.program.insts
        nxt, seen, matched, parents, match_thread = [], set(), False, [], -1
        reached = closure(self.program, self.seeds(sid), at_start, cls, False, self.work)
        if self.work[0] > MAX_CLOSURE_WORK:
            self.too_large = (f"building the unanchored DFA took more than "
                              f"{MAX_CLOSURE_WORK:,} NFA steps")
            raise DfaTooLarge(self.too_large)
        for s, thread in reached:
            inst = insts[s]
            if inst.op == MATCH:
                matched, match_thread = True, thread
                break                     # lower priority threads and later starts are cut
            if (cls >> inst.var) & 1 and inst.out not in seen:
                seen.add(inst.out)
                nxt.append(inst.out)
                parents.append((thread, s))
        injecting = injected and not matched
        nid = self._intern(tuple(nxt), False, injecting) if nxt or injecting else DEAD
        result = (nid, matched)
        self.transitions[key] = result
        self.lineage[key] = (tuple(parents), match_thread)
        return result

    def end_thread(self, sid: int) -> int:
        """The thread reaching MATCH at the partition's end from this state,
        or -1. The injected seed takes no part: no search starts at the end."""
        hit = self.end_threads.get(sid)
        if hit is None:
            carried, at_start, _ = self.states[sid]
            reached = closure(self.program, carried, at_start, 0, True, self.work)
            threads = [t for s, t in reached if self.program.insts[s].op == MATCH]
            hit = self.end_threads[sid] = threads[0] if threads else -1
        return hit

    def explore(self, classes) -> int:
        """Build every state reachable on ``classes``; return the state count."""
        if self.too_large:
            raise DfaTooLarge(self.too_large)
        return explore(self, classes, self.end_thread)

    def dense_tables(self, classes) -> "UnanchoredTables":
        """The automaton over ``classes`` (bitmasks present, in the order of
        their dense index) as arrays for kernels/unanchored.py (built once
        per set of classes: the last few are kept)."""
        classes = [int(c) for c in classes] or [0]
        hit = self.tables.get(tuple(classes))
        if hit is not None:
            return hit
        start_first, start_other = self.start(True), self.start(False)
        self.explore(classes)
        n_states, n_classes = len(self.states), len(classes)
        width = max(1, max(len(carried) for carried, _, _ in self.states))
        if width > MAX_THREADS:
            self.too_large = f"an unanchored DFA state holds more than {MAX_THREADS} threads"
            raise DfaTooLarge(self.too_large)
        steps = np.zeros((n_states, n_classes), dtype=np.int32)
        match_thread = np.full((n_states, n_classes), -1, dtype=np.int32)
        end_accept = np.zeros(n_states, dtype=np.uint8)
        end_thread = np.full(n_states, -1, dtype=np.int32)
        injected = np.full(n_states, -1, dtype=np.int32)
        parent_thread = np.full((n_states, n_classes, width), -1, dtype=np.int32)
        parent_inst = np.full((n_states, n_classes, width), -1, dtype=np.int32)
        for sid in range(1, n_states):
            injected[sid] = self.injected_thread(sid)
            end_thread[sid] = self.end_thread(sid)
            end_accept[sid] = end_thread[sid] >= 0
            for ci, c in enumerate(classes):
                nid, matched = self.step(sid, c)
                steps[sid, ci] = nid * 2 + matched
                parents, thread = self.lineage[(sid, c)]
                if thread >= 0 and thread == injected[sid]:
                    thread = EMPTY_MATCH
                match_thread[sid, ci] = thread
                for k, (parent, inst) in enumerate(parents):
                    parent_thread[sid, ci, k] = parent
                    parent_inst[sid, ci, k] = inst
        insts = self.program.insts
        inst_var = np.array([i.var for i in insts], dtype=np.int16)
        inst_excluded = np.array([i.excluded for i in insts], dtype=np.uint8)
        lineage = pack_lineage(parent_thread, parent_inst, inst_var, inst_excluded)
        # Bit 33: the parent is the pre-state's injected seed (the match starts there).
        started = (parent_thread >= 0) & (parent_thread == injected[:, None, None])
        lineage |= started.astype(np.int64) << 33
        built = UnanchoredTables(steps, match_thread, end_accept, end_thread, lineage, injected,
                                 start_first, start_other)
        if len(self.tables) >= 8:
            self.tables.clear()
        self.tables[tuple(classes)] = built
        return built


@dataclass(frozen=True)
class UnanchoredTables:
    """An :class:`UnanchoredDfa` explored over the classes in the data.

    ``steps[state, class index]``: next state * 2 + (a match ends just
    before that row), 0 = dead (only after a match: before one, the
    injected search keeps the state alive); ``match_thread[...]``: the
    thread that reached MATCH (:data:`EMPTY_MATCH` when it is the search
    injected at that row; -1 none); ``end_accept`` / ``end_thread``: a match
    ends at the partition's end, and its thread; ``lineage[state, class
    index, k]``: :func:`pack_lineage`'s word for thread ``k`` of the next
    state, plus bit 33 when its parent is the injected seed (the match
    starts at that row); ``injected[state]``: that seed's index or -1;
    ``start_first`` / ``start_other``: a fresh search at a partition's first
    row / elsewhere.
    """
    steps: np.ndarray
    match_thread: np.ndarray
    end_accept: np.ndarray
    end_thread: np.ndarray
    lineage: np.ndarray
    injected: np.ndarray
    start_first: int
    start_other: int

    @property
    def n_states(self) -> int:
        return int(self.steps.shape[0])

    def over_bitmasks(self, present, n_vars: int) -> "UnanchoredTables":
        """Indexed by the raw class bitmask, as :meth:`DfaTables.over_bitmasks`."""
        lookup = np.zeros(1 << n_vars, dtype=np.intp)
        lookup[np.asarray(present, dtype=np.intp)] = np.arange(len(present))

        def columns(table):
            return np.ascontiguousarray(table[:, lookup])
        return UnanchoredTables(columns(self.steps), columns(self.match_thread),
                                self.end_accept, self.end_thread, columns(self.lineage),
                                self.injected, self.start_first, self.start_other)


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
