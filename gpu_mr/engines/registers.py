"""The register engine: state-dependent DEFINEs without carrying paths.

What: the matcher the CPU engine uses when a DEFINE looks at the match so far
(``CheckedQuery.history_dependent``: another variable's column, FIRST/LAST,
running aggregates, CLASSIFIER of earlier rows, MATCH_NUMBER()). It finds
exactly the reference engine's matches (starts, ends, labels, exclusion marks)
and raises exactly its errors.

How (DESIGN.md §5, "state-dependent predicates"): the reference engine's Pike
VM (kernels/registers.py), whose threads carry a fixed row of registers
derived from the DEFINE expressions instead of their paths:

- per row set S named in a DEFINE (a primary variable, a SUBSET): the last
  k+1 rows mapped to S (``S.col``, ``LAST(S.col, k)``, PREV/NEXT of them), the
  first k+1 (``FIRST(S.col, k)``), the count (``COUNT(S.*)``);
- the labels of the last k rows (``PREV(CLASSIFIER(), k)``);
- per aggregate: its running state (COUNT, SUM, AVG, MIN, MAX, COUNT_IF,
  BOOL_AND/EVERY, BOOL_OR, ANY_VALUE), plus a flag when an argument row
  raised (the aggregate then raises when read, as the interpreter does);
- the match start and MATCH_NUMBER() are parameters of a search.

A DEFINE reads nothing else, so two threads in one NFA state with equal
registers have equal futures and merge. DEFINE conditions are generated as
Python source from the AST (three-valued logic, the interpreter's order of
evaluation and short circuits, exact int64 arithmetic with its overflow and
division errors, IEEE doubles with its division rules), run as plain Python
for small inputs and compiled with numba for large ones. Literals are not
written into that code: it reads them from two constant arrays (int64 for
integers, booleans and labels; float64 for doubles) passed to the kernel, so
queries differing only in constants (a parameter sweep) generate the same
source and share one compiled kernel, in process and in numba's disk cache;
an integer literal stays an exact int64, a double the same double. Whenever the
interpreter would raise, or a value leaves what the registers hold exactly
(an int64 sum overflowing, an int compared with a double beyond 2**53), the
kernel stops and that partition is rerun by the reference engine, which gives
the exact result or error.

A part of a DEFINE that reads only the current row and its PREV/NEXT but
computes with values the registers do not hold -- a string, a timestamp, a
decimal: ``E.type = 'Earthquake'``, ``page LIKE 'cart%'``, ``ts > PREV(ts)``
-- and yields a boolean, integer or double is not generated: masks.py
evaluates it once for all rows (exactly, three-valued, with the rows where
it raises), and the generated code reads that column at the row, stopping
for the reference engine where a row it reaches raises
(:meth:`_Plan.mask_column`). A part reading only another variable's row
(``UPPER(A.name) = 'X'`` in B's DEFINE) is read so at that variable's last
row, or, with none yet, as its value over NULLs.

Time limits (WITHIN / INTERVAL): each search stops at its row's horizon
(gpu_mr/horizons.py), as the DFA scan does.

Strings read at other rows (``B.user = A.user``, ``LAST(A.side) = 'buy'``)
are codes: ``2 * rank + 1`` among the distinct values of every string column
so read, by code point, a literal compared with them ``2 * rank + 1`` or,
absent, twice the count of values below it (``_string_codes``, per input:
the literal's code fills its constant slot), so ``=`` and ``<`` on codes are
``=`` and ``<`` on the strings. Other uses of them (functions, CASE, a
comparison with CLASSIFIER) are declined.

Decimals (``B.price > A.price`` over DECIMAL prices, Spark's usual money
type) are their unscaled int64s at their own scale: compared or added at the
larger scale, multiplied at the sum of the scales, exactly as Python's
``Decimal`` computes them (within int64, far inside its 28 digits; past
int64 the reference engine), and converted to the double ``float(Decimal)``
gives where the interpreter makes one (compared with a double, divided:
exact below 2**53 and scale 22, else the reference engine).

Timestamps (zoned or not: instants, as the interpreter holds them), dates
(their midnights) and day-to-second intervals are int64 nanoseconds, as the
interpreter's values are: ``B.ts - A.ts <= INTERVAL '5' MINUTE``,
``LAST(A.ts) + INTERVAL '1' SECOND < ts``, a date plus an interval floored
to its day. Columns are scaled to nanoseconds as they are loaded, and a
column or a sum beyond int64 goes to the reference engine, whose integers
are unbounded.

Declined (``supports`` says why): matching modes, SKIP TO CURRENT ROW,
match conditions, DISTINCT and other aggregates, AVG of decimals, dates or
timestamps (their MIN/MAX, of intervals and strings too, and SUM of
decimals and intervals run, exactly on their int64s), month intervals,
decimal modulo, strings of other rows other than compared, CLASSIFIER at
rows the registers do not keep, ROUND/LN/EXP/POWER, casts that go through
decimals, and interval arithmetic through doubles (an interval divided, or
times a double).

Cost: O(rows scanned x live threads x DEFINE cost) per search, no path
copies; numba compilation (a few seconds) is paid once per query shape
(constants aside: see above).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import sys
import tempfile
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..analysis import CheckedQuery
from ..frames import SortedInput
from ..interpreter import Interpreter, _nav_var
from ..kernels import registers as K
from ..kernels.threads import run_pieces, split
from ..pattern.nfa import compile_nfa
from ..predicates.fused import ColumnSlots
from ..syntax import ast as A
from ..syntax import types as T
from .base import MatchArrays

# Inputs this large are matched by the numba-compiled kernel; smaller ones by
# the same code as plain Python (compilation costs seconds; loading it from
# numba's disk cache a fraction of one), until the plain kernel of that
# query shape has run this many rows in the process, or its compiled kernel
# is loaded already: then every input takes the compiled one (the plain one
# costs about 10 microseconds a row, on every call).
JIT_MIN_ROWS = 20_000
_PLAIN_ROWS: dict = {}
# From this many rows the compiled kernel runs ranges of partitions on the
# thread pool (a hand-off costs tens of microseconds).
PARALLEL_MIN_ROWS = 50_000
# First sizes of the kernel's buffers (threads, register rows, seen entries,
# log nodes, matches, labels); each grows fourfold when full, and the kernel
# then resumes at the search that stopped.
INITIAL_SIZES = (64, 256, 1024, 1024, 1024, 4096)
# CLASSIFIER() of the k-th previous row is kept for k up to this.
MAX_LABEL_HISTORY = 32
# FIRST/LAST offsets kept in registers up to this.
MAX_NAV_OFFSET = 64
_NEUMAIER = sys.version_info >= (3, 12)     # sum() of floats is compensated from 3.12
_AGGREGATES = ("COUNT", "SUM", "AVG", "MIN", "MAX", "COUNT_IF", "BOOL_AND", "BOOL_OR", "EVERY",
               "ANY_VALUE")
_CMP = {"=": 0, "<>": 1, "<": 2, "<=": 3, ">": 4, ">=": 5}
_PY_CMP = {"=": "==", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


class _Decline(Exception):
    """A construct the register engine does not run (the reason)."""


# ============================================================== public API

def supports(query: CheckedQuery) -> Optional[str]:
    """None when :func:`find_matches` runs ``query``, else the reason.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from gpu_mr.analysis import analyze
    >>> from gpu_mr.syntax import parse_clause
    >>> schema = pa.schema([("t", pa.int64()), ("x", pa.float64())])
    >>> q = analyze(parse_clause("ORDER BY t MEASURES COUNT(*) AS n PATTERN (A B+ C) "
    ...     "DEFINE B AS x < AVG(B.x), C AS x > A.x"), schema)
    >>> supports(q) is None
    True
    >>> q = analyze(parse_clause("ORDER BY t MEASURES COUNT(*) AS n PATTERN (A B+) "
    ...     "DEFINE B AS COUNT(DISTINCT B.x) < 3"), schema)
    >>> supports(q)
    'DISTINCT aggregates need every value seen, not registers'
    """
    try:
        _plan(query)
    except _Decline as exc:
        return str(exc)
    return None


def masked_parts(query: CheckedQuery) -> list:
    """``(where, expression)`` of each row-local part of a DEFINE (or of an
    aggregate's argument there) that :func:`find_matches` reads as a column
    evaluated by masks.py (it holds a string, a timestamp or a decimal);
    empty when none or when declined.

    >>> import pyarrow as pa
    >>> from gpu_mr.analysis import analyze
    >>> from gpu_mr.syntax import parse_clause
    >>> schema = pa.schema([("t", pa.int64()), ("page", pa.string())])
    >>> q = analyze(parse_clause("ORDER BY t MEASURES COUNT(*) AS n PATTERN (A+ B) "
    ...     "DEFINE B AS page = 'd' AND COUNT(A.*) < 3"), schema)
    >>> [(v, e.to_sql()) for v, e in masked_parts(q)]
    [('DEFINE B', "(page = 'd')")]
    """
    try:
        return [(where, e) for _, e, where in _plan(query).masked]
    except _Decline:
        return []


def find_matches(query: CheckedQuery, data: SortedInput, *, jit: Optional[bool] = None
                 ) -> MatchArrays:
    """Every match of ``query`` in ``data``, identical to the reference engine's.

    ``jit``: compile the kernel with numba (None: when the input has at least
    ``JIT_MIN_ROWS`` rows). Raises what the reference engine raises.
    """
    plan = _plan(query)
    n = data.table.num_rows
    if jit is None:
        jit = _use_jit(plan.source, n)
    kernel = plan.kernel(jit)
    icols, fcols, valid, fallback, codes = _load_columns(plan, data, jit)
    if fallback:
        return _reference(query, data, range(data.num_partitions))
    return _drive(plan, kernel, query, data, icols, fcols, valid, jit, codes)


def find_matches_in_batch(query: CheckedQuery, data: SortedInput, scan_from: int = 0,
                          continues: bool = False, open_end: bool = False,
                          end_margin: int = 0, number_base: int = 0) -> Optional[tuple]:
    """One batch of a stream (streaming.py): ``(matches, resume)`` as
    ``engines.cpu.scan_to_matches`` gives them for the DFA path, or None
    when a partition would go to the reference engine (the stream then
    gathers whole partitions). Searches of the first partition start at row
    ``scan_from`` (rows before it are PREV's look-back) numbering their
    matches after ``number_base``; with ``continues`` that partition began
    in an earlier batch (``^`` does not hold at its first row here). With
    ``open_end`` the last partition goes on in the next batch: its rows from
    ``end_margin`` before its end are unknown to a search (NEXT's reach), and
    the first search whose outcome depends on them is left undecided:
    ``resume`` is its start (else the last partition's end). Why: a
    partition spanning many batches is matched batch by batch, carrying
    only the rows from that search on, so memory does not grow with it."""
    plan = _plan(query)
    n = data.table.num_rows
    offsets = np.asarray(data.partition_offsets, dtype=np.int64)
    if n == 0 or len(offsets) < 2:
        return MatchArrays.empty(), int(offsets[-1]) if len(offsets) else 0
    jit = _use_jit(plan.source, n)
    kernel = plan.kernel(jit)
    icols, fcols, valid, fallback, codes = _load_columns(plan, data, jit)
    if fallback:
        return None
    init_i = np.array(plan.layout.init_i or [0], dtype=np.int64)
    init_f = np.array(plan.layout.init_f or [0.0], dtype=np.float64)
    ci, cf = plan.constants(jit, codes)
    horizon, timed = offsets, False
    if query.time_limit is not None:
        from ..horizons import row_horizons
        horizon, timed = row_horizons(query, data), True
    first: dict = {}                         # the first partition's counters
    if scan_from > offsets[0] or number_base:
        first.update({K.C_POS: scan_from, K.C_NUM: number_base, K.C_M0: 0, K.C_L0: 0})
    if continues:
        first[K.C_CONT_LO] = offsets[0] + 1
    last: dict = {}                          # the last partition's
    if open_end:
        last = {K.C_OPEN_HI: offsets[-1] + 1,
                K.C_OPEN_AT: max(int(offsets[-2]), int(offsets[-1]) - end_margin)}
    n_parts = len(offsets) - 1
    args = (plan, kernel, init_i, init_f, icols, fcols, valid, ci, cf, horizon, timed)
    # The first partition and the last run alone (they begin and end with
    # the batch: their counters preset); those between are whole
    # partitions, run as find_matches runs them (the reference engine for
    # one that raises); the jobs together on all cores.
    jobs = [(0, 1)]
    if n_parts > 2:
        jobs.append((1, n_parts - 1))
        if jit and int(offsets[-2] - offsets[1]) >= PARALLEL_MIN_ROWS:
            inner = split(offsets[1:n_parts] - offsets[1])
            jobs = [(0, 1)] + ([(lo + 1, hi + 1) for lo, hi in inner] or jobs[1:])
    if n_parts > 1:
        jobs.append((n_parts - 1, n_parts))

    def job(a: int, b: int):
        if a == 0 or a == n_parts - 1:
            presets = {**(first if a == 0 else {}), **(last if b == n_parts else {})}
            return _run_alone(*args, offsets, a, presets)
        return _drive_range(plan, kernel, query, data, icols, fcols, valid, offsets, a, b,
                            init_i, init_f, ci, cf, horizon, timed)
    results = run_pieces(job, jobs) if jit and n >= PARALLEL_MIN_ROWS and len(jobs) > 1 \
        else [job(a, b) for a, b in jobs]
    chunks: list = []
    for (a, b), got in zip(jobs, results):
        if a == 0 or a == n_parts - 1:
            if got is None:
                return None
            chunks.append(got[0])
            resume = got[1]                  # the last partition's, when several
        else:
            chunks += got
    return _concat(chunks), resume


def _run_alone(plan: _Plan, kernel, init_i, init_f, icols, fcols, valid, ci, cf, horizon,
               timed: bool, offsets, part: int, presets: dict) -> Optional[tuple]:
    """Partition ``part`` of ``offsets`` alone, its counters preset (a
    stream's first or last partition in a batch): (matches, resume: where
    its undecided search begins, else its end), or None when it would go
    to the reference engine."""
    ranged = offsets[part:part + 2]
    buf = _Buffers(plan, int(ranged[1] - ranged[0]))
    for k, value in presets.items():
        buf.ctr[k] = value
    out_ctr = np.zeros(2, dtype=np.int64)
    while True:
        status, _ = _call_kernel(plan, kernel, buf, ranged, 0, init_i, init_f, icols, fcols,
                                 valid, ci, cf, out_ctr, horizon, timed)
        if status == K.GROW:
            buf.grow(int(buf.ctr[K.C_DETAIL]))
            continue
        if status == K.OPEN:
            resume = int(buf.ctr[K.C_POS])
        elif status == K.DONE:
            resume = int(ranged[1])
        else:
            return None
        return _take(buf, out_ctr, part), resume


def _use_jit(source: str, n: int) -> bool:
    """Whether ``n`` rows of the query shape ``source`` run compiled (see
    ``JIT_MIN_ROWS``); rows left to the plain kernel are counted."""
    if not _have_numba():
        return False
    done = _PLAIN_ROWS.get(source, 0)
    if n >= JIT_MIN_ROWS or done >= JIT_MIN_ROWS or (source, True) in _KERNEL_CACHE:
        return True
    if len(_PLAIN_ROWS) > 256:
        _PLAIN_ROWS.clear()
    _PLAIN_ROWS[source] = done + n
    return False


def _have_numba() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


# ================================================================ the plan

@dataclass
class _Agg:
    node: A.Aggregate
    rows: Optional[frozenset]       # var ids aggregated over; None: every row
    kind: str                       # argument kind: i f b l u
    fn: str                         # name of the generated argument function
    err: int = -1
    n: int = -1
    ival: int = -1                  # int sum / min / max / acc / any value
    ovf: int = -1                   # int sum left int64
    fval: int = -1                  # float sum / min / max / any value
    fc: int = -1                    # float sum compensation (Python >= 3.12)


@dataclass
class _Layout:
    """Register slots; grows while the DEFINEs are generated."""
    init_i: list = field(default_factory=list)
    init_f: list = field(default_factory=list)
    last: dict = field(default_factory=dict)       # S -> [slot of the (j+1)-th last row]
    first: dict = field(default_factory=dict)      # S -> [slot of the (j+1)-th row]
    first_fill: dict = field(default_factory=dict)  # S -> slot: rows of S so far, capped
    count: dict = field(default_factory=dict)      # S -> slot
    labs: list = field(default_factory=list)       # label of the j-th previous row
    aggs: dict = field(default_factory=dict)       # Aggregate node -> _Agg

    def int_slot(self, init: int) -> int:
        self.init_i.append(init)
        return len(self.init_i) - 1

    def float_slot(self, init: float) -> int:
        self.init_f.append(init)
        return len(self.init_f) - 1

    def last_slot(self, s: frozenset, j: int) -> int:
        slots = self.last.setdefault(s, [])
        while len(slots) <= j:
            slots.append(self.int_slot(-1))
        return slots[j]

    def first_slot(self, s: frozenset, j: int) -> int:
        slots = self.first.setdefault(s, [])
        if s not in self.first_fill:
            self.first_fill[s] = self.int_slot(0)
        while len(slots) <= j:
            slots.append(self.int_slot(-1))
        return slots[j]

    def count_slot(self, s: frozenset) -> int:
        if s not in self.count:
            self.count[s] = self.int_slot(0)
        return self.count[s]

    def lab_slot(self, j: int) -> int:
        while len(self.labs) <= j:
            self.labs.append(self.int_slot(-1))
        return self.labs[j]


_PLAN_CACHE: dict = {}


def _plan(query: CheckedQuery) -> "_Plan":
    key = id(query)
    hit = _PLAN_CACHE.get(key)
    if hit is not None and hit[0] is query:
        if isinstance(hit[1], _Decline):
            raise hit[1]
        return hit[1]
    try:
        plan = _Plan(query)
    except _Decline as exc:
        _PLAN_CACHE[key] = (query, exc)
        raise
    if len(_PLAN_CACHE) > 256:
        _PLAN_CACHE.clear()
    _PLAN_CACHE[key] = (query, plan)
    return plan


_KERNEL_CACHE: dict = {}


class _Plan(ColumnSlots):
    def __init__(self, query: CheckedQuery):
        q = query
        if q.mode is not None:
            raise _Decline(f"{q.mode} MATCH mode is run by the reference engine")
        if q.skip.kind == "CURRENT_ROW":
            raise _Decline("AFTER MATCH SKIP TO CURRENT ROW keeps every match (ALL MATCHES)")
        if q.match_filter is not None:
            raise _Decline("a condition on the whole match is run by the reference engine")
        self.query = q
        self.var_ids = {name: i for i, name in enumerate(q.primary_vars)}
        self.sets: dict = {name: frozenset([i]) for name, i in self.var_ids.items()}
        for name, members in q.subsets.items():
            self.sets[name] = frozenset(self.var_ids[m] for m in members)
        super().__init__()
        self.layout = _Layout()
        self.arg_sources: list = []
        # the DEFINEs' literals, in the order generated: data, not code (see _Gen.constant)
        self.const_i: list = []         # integers, booleans (0/1), labels
        self.const_f: list = []         # doubles
        self.pred_sources: dict = {}
        # row-local parts of the DEFINEs read as columns (see mask_column)
        self.masked: list = []          # (variable read, expression, where: text)
        # string literals compared with string columns: (ci slot, text), the
        # slot filled with the literal's code per input (_string_codes)
        self.string_literals: list = []
        for name in q.primary_vars:
            expr = q.defines.get(name)
            if expr is not None:
                self.pred_sources[self.var_ids[name]] = _Gen(self, self.var_ids[name]).pred(expr)
        program = compile_nfa(q.pattern, q.primary_vars)
        insts = program.insts
        guards = any(i.op == K.ASSERT_NOT for i in insts)
        self.source = self._module_source() + ("" if guards else "GUARDS = False\n")
        self.start_state = program.start
        self.op = np.array([i.op for i in insts], dtype=np.int64)
        self.out = np.array([i.out for i in insts], dtype=np.int64)
        self.out2 = np.array([i.out2 for i in insts], dtype=np.int64)
        self.var = np.array([i.var for i in insts], dtype=np.int64)
        self.excl = np.array([i.excluded for i in insts], dtype=np.bool_)
        self.skip_kind = {"PAST_LAST_ROW": K.SKIP_PAST_LAST_ROW, "NEXT_ROW": K.SKIP_TO_NEXT_ROW,
                          "FIRST": K.SKIP_TO_FIRST, "LAST": K.SKIP_TO_LAST}[q.skip.kind]
        self.skip_set = np.zeros(max(1, len(q.primary_vars)), dtype=np.bool_)
        if q.skip.var is not None:
            for v in self.sets[q.skip.var]:
                self.skip_set[v] = True

    def mask_column(self, e: A.Expr, v: int) -> Optional[tuple]:
        """``(values column, failed column, at, no_row)`` of ``e``, a part of
        the DEFINE of variable ``v`` evaluated at the current row, or (``at``)
        at the last row of the one other variable whose columns it reads
        (``no_row``: its value with no such row yet, see
        :func:`_no_row_value`); ``v`` < 0: of an aggregate's argument, at the
        aggregated row (its columns all of one variable, no CLASSIFIER,
        which varies with the row's label). When
        it is read as a column rather than generated: it reads only the row and
        its PREV/NEXT, it involves values the registers do not hold (a
        string, a timestamp, a decimal: ``_needs_mask``), it yields one they
        do, and masks.py vectorises it exactly. None otherwise.
        :func:`_load_columns` fills the columns with masks.py's values
        (``evaluate_values``): why a query comparing an event type with a
        constant runs here at all, once for all rows."""
        from ..analysis import _history_dependent
        from ..predicates import masks
        if (isinstance(e, (A.Literal, A.ColumnRef)) or e.type is None
                or e.type.kind not in masks.VALUE_DTYPES or not _needs_mask(e)):
            return None
        nodes = list(e.walk())
        quals = {n.var for n in nodes if isinstance(n, A.ColumnRef)}
        at = no_row = None
        if v >= 0:
            var = self.query.primary_vars[v]
            other = quals - {None, var}
            if (len(quals) == 1 and other and v not in self.sets[next(iter(other))]
                    and not any(isinstance(n, A.Classifier) for n in nodes)):
                # every column of another variable's row: read at its last row
                at = var = other.pop()
        else:
            quals -= {None}
            if len(quals) > 1 or any(isinstance(n, A.Classifier) for n in nodes):
                return None
            var = quals.pop() if quals else self.query.primary_vars[0]
        if _history_dependent(e, var) or masks.supports(e, var, self.query) is not None:
            return None
        if at is not None:
            no_row = _no_row_value(e, var, self.query)
            if no_row is None:
                return None
        k = len(self.masked)
        where = (f"DEFINE {self.query.primary_vars[v]}" if v >= 0 else "an aggregate's argument")
        self.masked.append((var, e, where + (f", at {at}'s last row" if at else "")))
        kind = _kind(e.type)
        return (self.column(f"{MASKED_PREFIX}{k}", kind),
                self.column(f"{MASKED_PREFIX}{k}!", "i"), at, no_row)

    # ---------------------------------------------------------- the module
    def _module_source(self) -> str:
        L = self.layout
        lines = list(self.arg_sources)
        sig = "(v, q, start, mno, lo, hi, R, F, di, icols, fcols, valid, ci, cf)"
        lines.append(f"def APPLY{sig}:")
        for v in range(len(self.query.primary_vars)):
            lines.append(f"    if v == {v}:")
            body = []
            for s, slots in L.last.items():
                if v in s:
                    for j in range(len(slots) - 1, 0, -1):
                        body.append(f"R[di, {slots[j]}] = R[di, {slots[j - 1]}]")
                    body.append(f"R[di, {slots[0]}] = q")
            for s, slots in L.first.items():
                if v in s:
                    fill = L.first_fill[s]
                    body.append(f"if R[di, {fill}] < {len(slots)}:")
                    for j, slot in enumerate(slots):
                        body.append(f"    if R[di, {fill}] == {j}:")
                        body.append(f"        R[di, {slot}] = q")
                    body.append(f"    R[di, {fill}] += 1")
            for s, slot in L.count.items():
                if v in s:
                    body.append(f"R[di, {slot}] += 1")
            for j in range(len(L.labs) - 1, 0, -1):
                body.append(f"R[di, {L.labs[j]}] = R[di, {L.labs[j - 1]}]")
            if L.labs:
                body.append(f"R[di, {L.labs[0]}] = {v}")
            for agg in L.aggs.values():
                if agg.rows is None or v in agg.rows:
                    body += _agg_update(agg, v)
            body.append("return 0")
            lines += ["        " + b for b in body]
        lines.append("    return 0")
        lines.append(f"def PRED{sig}:")
        for v, src in self.pred_sources.items():
            lines.append(f"    if v == {v}:")
            lines += ["    " + line for line in src.split("\n")]
        lines.append("    return 1")
        src = "\n".join(lines) + "\n"
        src = re.sub(r"__VI(\d+)__", lambda m: m.group(1), src)
        return re.sub(r"__VF(\d+)__", lambda m: str(self.n_icols + int(m.group(1))), src)

    def constants(self, jit: bool, literal_codes: Optional[dict] = None) -> tuple:
        """The literals the generated code reads (``ci[k]``, ``cf[k]``): int64 and
        float64 arrays for numba, lists of Python ints and floats for plain
        Python (exact as the literals were; never empty, so numba can type them).
        ``literal_codes``: slot -> code of a string literal compared with
        string columns, for the input at hand (``_load_columns``)."""
        ci = [int(x) for x in self.const_i] or [0]
        for slot, code in (literal_codes or {}).items():
            ci[slot] = int(code)
        cf = [float(x) for x in self.const_f] or [0.0]
        if not jit:
            return ci, cf
        return np.array(ci, dtype=np.int64), np.array(cf, dtype=np.float64)

    def kernel(self, jit: bool):
        key = (self.source, jit)
        hit = _KERNEL_CACHE.get(key)
        if hit is not None:
            return hit
        run = _jit_kernel(self.source) if jit else _python_kernel(self.source)
        if len(_KERNEL_CACHE) > 64:
            _KERNEL_CACHE.clear()
        _KERNEL_CACHE[key] = run
        return run


def _python_kernel(source: str):
    """The kernel as plain Python: the bodies of kernels/registers.py with the
    generated APPLY / PRED as their globals."""
    g = {"np": np, "math": math}
    g.update((n, getattr(K, n)) for n in dir(K) if n.isupper())
    g.update((n, getattr(K, n)) for n in K.SHARED_FUNCTIONS)
    exec(compile(source, "<gpu_mr register predicates>", "exec"), g)
    for name in K.QUERY_FUNCTIONS:
        f = getattr(K, name)
        g[name] = types.FunctionType(f.__code__, g, name, f.__defaults__)
    run = g["run_partitions"]

    def run_quietly(*args):
        # numpy scalars warn where IEEE arithmetic gives inf or NaN (inf + -inf);
        # the compiled kernel gives the same values without a word
        with np.errstate(all="ignore"):
            return run(*args)
    return run_quietly


def _jit_kernel(source: str):
    """The kernel compiled by numba. The kernel bodies and the generated code
    are written as one module file named by their hash, so numba's on-disk
    cache spares the compilation (seconds) in later processes."""
    import numba
    options = _jit_options()
    # the first line names how the options decorate the functions: numba's
    # disk cache keys on the file's bytecode, not on the decoration
    module, fresh = _kernel_module("gpu_mr_registers", _kernel_text(source, [f"# {options}"]))
    if fresh:
        for fname, f in list(vars(module).items()):
            if isinstance(f, types.FunctionType) and fname != "run_partitions":
                setattr(module, fname, numba.njit(cache=True, **options["inner"])(f))
        module.run_partitions = numba.njit(cache=True, **options["driver"])(
            module.run_partitions)
    return module.run_partitions


def _kernel_text(source: str, header: list, primitives: Optional[dict] = None,
                 extra: tuple = ()) -> str:
    """A kernel module's text: ``header`` lines, kernels/registers.py's
    constants and bodies, the functions ``extra`` (plain functions calling
    them), then the generated ``source``. ``primitives`` binds some helpers'
    names to other code instead of their bodies (a device's math functions,
    K.DEVICE_PRIMITIVES)."""
    primitives = primitives or {}
    body = list(header) + ["import math", "import numpy as np", ""]
    body += [f"{n} = {getattr(K, n)!r}" for n in dir(K)
             if n.isupper() and isinstance(getattr(K, n), int)]
    body += [_source_of(getattr(K, n)) for n in K.SHARED_FUNCTIONS + K.QUERY_FUNCTIONS
             if n not in primitives]
    body += [f"{n} = {code}" for n, code in primitives.items()] + [""]
    body += [_source_of(f) for f in extra]
    return "\n".join(body) + "\n" + source


_sources: dict = {}


def _source_of(fn) -> str:
    """A body's source, read once per process: inspect re-reads a file whose
    modification time changed, and bodies from a newer file than the one
    imported would not match this module's constants."""
    text = _sources.get(fn)
    if text is None:
        import inspect
        text = _sources[fn] = inspect.getsource(fn)
    return text


def _kernel_module(prefix: str, text: str) -> tuple:
    """(module, fresh): the module of source ``text``, written to the kernel
    folder as ``<prefix>_<hash of text and numba's version>.py`` so numba's
    on-disk cache (``cache=True``) finds its compiled functions in later
    processes; ``fresh`` when this call imported it (the caller then
    decorates its functions), False when this process already had it."""
    import importlib.util

    import numba
    digest = hashlib.sha256((text + numba.__version__).encode()).hexdigest()[:24]
    name = f"{prefix}_{digest}"
    module = sys.modules.get(name)
    if module is not None:
        return module, False
    try:
        path = _write_kernel_file(Path(os.environ.get("GPU_MR_CACHE_DIR") or
                                       Path(tempfile.gettempdir()) / "gpu_mr_kernels"),
                                  name, text)
    except OSError:
        # e.g. another user's folder of that name: a private one (this
        # process only, so no disk cache across processes)
        path = _write_kernel_file(Path(tempfile.mkdtemp(prefix="gpu_mr_kernels_")), name, text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module, True


def _write_kernel_file(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    if not path.exists() or path.read_text() != text:
        tmp = folder / f"{name}.{os.getpid()}.tmp"
        tmp.write_text(text)
        os.replace(tmp, path)
    return path


# How _jit_kernel compiles: run_partitions is the only compiled call; every
# other function is inlined into it (see kernels/registers.py). The kernel
# allocates nothing and its arrays belong to the caller for the call, so it
# runs without numba's reference counting (``_nrt=False``, as numba's own
# allocation-free helpers do): with it, each inlined call's array arguments
# were counted up and down, 4/5 of the kernel's time.
_JIT_OPTIONS = {"inner": {"inline": "always"}, "driver": {"_nrt": False, "nogil": True}}
_checked_options = None


def _jit_options() -> dict:
    """_JIT_OPTIONS, or the same without ``_nrt`` (a private numba option)
    when this numba does not accept it: slower, never broken."""
    global _checked_options
    if _checked_options is None:
        import numba
        try:
            # cached on disk: later processes load it instead of compiling
            # it (about 70 ms of every process's first query)
            probe = numba.njit(cache=True, **_JIT_OPTIONS["driver"])(_probe_kernel)
            probe(np.zeros(2, dtype=np.int64))
            _checked_options = _JIT_OPTIONS
        except Exception:                   # numba changed its private options
            _checked_options = {"inner": _JIT_OPTIONS["inner"], "driver": {"nogil": True}}
    return _checked_options


def _probe_kernel(a):
    a[0] = a[1] + 1


def _agg_update(agg: _Agg, v: int) -> list:
    """APPLY's lines for one aggregate when row q is mapped to variable v."""
    name = agg.node.name
    if agg.kind == "u" or agg.node.star:
        return []
    out = [f"if R[di, {agg.err}] == 0:"]
    out.append(f"    st, x, xn = {agg.fn}(q, {v}, mno, lo, hi, icols, fcols, valid, ci, cf)")
    out.append("    if st != 0:")
    out.append(f"        R[di, {agg.err}] = st")
    out.append("    elif not xn:")
    body = []
    n = f"R[di, {agg.n}]"
    if name == "COUNT":
        body.append(f"{n} += 1")
    elif name == "COUNT_IF":
        body.append("if x:")
        body.append(f"    {n} += 1")
    elif name in ("SUM", "AVG"):
        if agg.kind == "i":
            body.append(f"if R[di, {agg.ovf}] == 0:")
            body.append(f"    s, ok = add_i64(R[di, {agg.ival}], x)")
            body.append("    if ok:")
            body.append(f"        R[di, {agg.ival}] = s")
            body.append("    else:")
            body.append(f"        R[di, {agg.ovf}] = 1")
        else:
            hi_, c_ = f"F[di, {agg.fval}]", f"F[di, {agg.fc}]"
            body.append(f"if {n} == 0:")
            body.append(f"    {hi_} = 0.0 + x")
            if _NEUMAIER:
                body.append("else:")
                body.append(f"    h = {hi_}")
                body.append("    t = h + x")
                body.append("    if abs(h) >= abs(x):")
                body.append(f"        {c_} += (h - t) + x")
                body.append("    else:")
                body.append(f"        {c_} += (x - t) + h")
                body.append(f"    {hi_} = t")
            else:
                body.append("else:")
                body.append(f"    {hi_} = {hi_} + x")
        body.append(f"{n} += 1")
    elif name in ("MIN", "MAX"):
        cmp = "<" if name == "MIN" else ">"
        reg = f"R[di, {agg.ival}]" if agg.kind == "i" else f"F[di, {agg.fval}]"
        body.append(f"if {n} == 0 or x {cmp} {reg}:")
        body.append(f"    {reg} = x")
        body.append(f"{n} += 1")
    elif name in ("BOOL_AND", "EVERY"):
        body.append("if not x:")
        body.append(f"    R[di, {agg.ival}] = 0")
        body.append(f"{n} += 1")
    elif name == "BOOL_OR":
        body.append("if x:")
        body.append(f"    R[di, {agg.ival}] = 1")
        body.append(f"{n} += 1")
    elif name == "ANY_VALUE":
        reg = f"F[di, {agg.fval}]" if agg.kind == "f" else f"R[di, {agg.ival}]"
        body.append(f"if {n} == 0:")
        body.append(f"    {reg} = x" if agg.kind != "b" else f"    {reg} = 1 if x else 0")
        body.append(f"{n} += 1")
    # locals of their own per aggregate: numba types each name once per function
    lines = out + ["        " + b for b in body]
    return [re.sub(r"\b(st|x|xn|h|t|s)\b", lambda m: f"{m.group(1)}_{agg.fn}", line)
            for line in lines]


# =========================================================== code generation

def _kind(t: T.SqlType, loaded: bool = False) -> str:
    """The generated code's kind of SQL type ``t``: i (int64), f (double), b
    (bool), l (a label: a variable id), u (NULL); where ``_load_columns``
    loads the columns (``loaded``: the register machine's plans; the row
    passes' kernels read columns in place, in their unit) also t (a
    TIMESTAMP, zoned or not: the interpreter's values are instants in both),
    D (a DATE, at its midnight) and d (an
    INTERVAL DAY TO SECOND), int64 nanoseconds as the interpreter's
    ``_as_ns`` makes them, and m<s> (a DECIMAL of scale s, its unscaled
    int64). A string column's value there is s (its code: ``_string_codes``),
    set where it is read."""
    k = t.kind
    if loaded and k == "DECIMAL":
        return f"m{t.scale}"                # the unscaled int64 at that scale
    if loaded and k == "TIMESTAMP":
        return "t"                          # zoned or not: an instant, as the interpreter's
    if loaded and k == "DATE":
        return "D"                          # its midnight in nanoseconds, as _as_ns
    if loaded and k == "INTERVAL":
        return "d"
    if k == "BIGINT":
        return "i"
    if k == "DOUBLE":
        return "f"
    if k == "BOOLEAN":
        return "b"
    if k == "UNKNOWN":
        return "u"
    if k == "VARCHAR":
        return "l"
    raise _Decline(f"{t} values are not held in registers")


_ZERO = {"i": "0", "f": "0.0", "b": "False", "l": "-1", "u": "0", "t": "0", "d": "0",
         "D": "0", "s": "0", **{f"m{s}": "0" for s in range(39)}}
# Kinds compared as they are (int64, double, bool; nanoseconds for t and d;
# codes of strings for s, see _string_codes; unscaled decimals of one scale).
_ORDERED = ("i", "f", "b", "t", "d", "D", "s") + tuple(f"m{s}" for s in range(39))
# A day in nanoseconds: a DATE's value is a multiple of it.
_DAY_NS = 86400 * 10**9


def _scale(kind: str) -> Optional[int]:
    """The scale of a decimal kind (m<s>), 0 for BIGINT, else None."""
    if kind == "i":
        return 0
    return int(kind[1:]) if kind.startswith("m") else None


# (left kind, operator, right kind) of the timestamp and interval arithmetic
# generated: exact integer nanoseconds in the interpreter too (an interval
# times a double, or divided, goes through a double there: not generated).
_TEMPORAL_OPS = {("t", "+", "d"), ("d", "+", "t"), ("t", "-", "d"), ("t", "-", "t"),
                 ("d", "+", "d"), ("d", "-", "d"), ("d", "*", "i"), ("i", "*", "d"),
                 ("D", "-", "D"), ("D", "-", "t"), ("t", "-", "D")}
# DATE arithmetic giving a DATE: plus or minus an interval, floored to its
# day; plus or minus whole days (a BIGINT).
_DATE_OPS = {("D", "+", "d"), ("d", "+", "D"), ("D", "-", "d"), ("D", "+", "i"),
             ("D", "-", "i")}
# Names of the columns of masked parts (``_Plan.mask_column``): no input
# column's name starts with a NUL character.
MASKED_PREFIX = "\0masked"
_REGISTER_TYPES = ("BIGINT", "DOUBLE", "BOOLEAN", "UNKNOWN")


def _no_row_value(e: A.Expr, var: str, query: CheckedQuery) -> Optional[tuple]:
    """``(value, valid, raises)`` of the row-local part ``e`` when its
    variable ``var`` has no row yet: every column it reads NULL, as the
    interpreter reads them (masks.py over one row of NULLs). None when that
    cannot be evaluated."""
    from ..errors import GpuMrError
    from ..predicates import masks
    schema = query.input_schema
    try:
        table = pa.table({f.name: pa.nulls(1, f.type) for f in schema}, schema=schema)
        data = SortedInput(table, np.array([0, 1], dtype=np.int64), None, True)
        values, valid, failed = masks.evaluate_values(e, var, query, data)
    except (GpuMrError, pa.ArrowException, ValueError, TypeError):
        return None
    value = values[0].item()
    return (float(value) if values.dtype.kind == "f" else int(value), bool(valid[0]),
            bool(failed[0]))


def _needs_mask(e: A.Expr) -> bool:
    """Whether ``e`` computes a value of a type the registers do not hold
    (labels aside: CLASSIFIER and string literals are compared as
    variable ids; timestamps and day-to-second intervals are generated as
    nanoseconds)."""
    for n in e.walk():
        t = getattr(n, "type", None)
        if (isinstance(n, A.Expr) and not isinstance(n, (A.Literal, A.Classifier))
                and t is not None and t.kind not in _REGISTER_TYPES
                and t.kind not in ("INTERVAL", "TIMESTAMP")):
            return True
    return False


class _Gen:
    """Generates one function: a DEFINE predicate or an aggregate argument.

    Every expression becomes statements leaving its value and NULL flag in
    two fresh locals; the value local always holds its kind's type (int,
    float or bool; labels are variable ids) so numba types it consistently.
    """

    def __init__(self, plan: _Plan, var: int):
        self.plan = plan
        self.v = var                      # the defining variable (pred) or -1 (argument)
        self.lines: list = []
        self.depth = 1
        self.n = 0
        self.err_stmt = "return {code}"
        self.strings: dict = {}
        # decimals, timestamps, dates, intervals and string codes only where
        # _load_columns loads the columns in those forms, not in the row
        # passes' plans (predicates/fused.py, fused_values.py)
        self.loaded = isinstance(plan, _Plan)
        self.varchar_literals: dict = {}  # generated code of a string literal -> its text

    def kind(self, t: T.SqlType) -> str:
        return _kind(t, self.loaded)

    # ----------------------------------------------------------- plumbing
    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def tmp(self) -> tuple:
        self.n += 1
        tag = "a" if self.v < 0 else str(self.v)
        return f"t{tag}_{self.n}", f"n{tag}_{self.n}"

    def fail(self, code: int) -> None:
        self.emit(self.err_stmt.format(code=code))

    def checked(self, target: str, call: str, code: int) -> None:
        """``target, ok = call`` (an exact int64 helper: add_i64, mul_i64,
        dec_f64 ...), failing with ``code`` where it does not fit (2: the
        interpreter raises too; 3: it does not, the reference engine runs)."""
        self.emit(f"{target}, ok = {call}")
        self.emit("if not ok:")
        self.depth += 1
        self.fail(code)
        self.depth -= 1

    def pred(self, e: A.Expr) -> str:
        val, nul, kind = self.expr(e, None)
        if kind == "u":
            self.emit("return 0")
        else:
            if kind != "b":
                raise _Decline("a DEFINE condition must be boolean")
            self.emit(f"return 1 if (not {nul}) and {val} else 0")
        return "\n".join(self.lines)

    def argument(self, e: A.Expr, fn: str) -> str:
        self.v = -1
        kind = self.kind(e.type)
        self.err_stmt = "return {code}, " + _ZERO[kind] + ", True"
        val, nul, k2 = self.expr(e, "q")
        if k2 == "u":
            val, nul = _ZERO[kind], "True"
        self.emit(f"return 0, {val}, {nul}")
        head = f"def {fn}(q, v, mno, lo, hi, icols, fcols, valid, ci, cf):"
        return "\n".join([head] + self.lines)

    def label_of_current(self) -> str:
        return str(self.v) if self.v >= 0 else "v"

    def set_of(self, name: Optional[str]) -> Optional[frozenset]:
        return None if name is None else self.plan.sets[name]

    def last_row(self, name: Optional[str]) -> str:
        """Code of the last row mapped to ``name`` so far (-1: none)."""
        s = self.set_of(name)
        if s is None or (self.v >= 0 and self.v in s):
            return "q"
        return f"R[di, {self.plan.layout.last_slot(s, 0)}]"

    # --------------------------------------------------------- expressions
    def expr(self, e: A.Expr, row: Optional[str]) -> tuple:
        if row in (None, "q"):
            masked = getattr(self.plan, "mask_column", None)
            cols = masked(e, self.v) if masked is not None else None
            if cols is not None:
                return self.read_masked(*cols)
        method = getattr(self, "_" + type(e).__name__, None)
        if method is None:
            raise _Decline(f"{type(e).__name__} expressions are not compiled")
        return method(e, row)

    def read_masked(self, values: tuple, failed: tuple, at: Optional[str],
                    no_row: Optional[tuple]) -> tuple:
        """A masked part at the current row (``at`` None) or at the last row
        of variable ``at`` (``no_row``: its value, validity and failure with
        no such row, every column NULL): its column's value and NULL flag;
        where evaluating it raises, the search stops and the partition goes
        to the reference engine (which raises exactly), as for any error
        here."""
        arr, idx, kind = values
        farr, fidx, _ = failed
        val, nul = self.tmp()
        test = " != 0" if kind == "b" else ""
        r = "q"
        if at is not None:
            r = self.tmp()[0]
            self.emit(f"{r} = {self.last_row(at)}")
            value, valid, raises = no_row
            self.emit(f"if {r} < 0:")
            self.depth += 1
            if raises:
                self.fail(2)
            self.emit(f"{val} = {self.constant('f' if kind == 'f' else 'i', value)}{test}")
            self.emit(f"{nul} = {not valid}")
            self.depth -= 1
            self.emit("else:")
            self.depth += 1
        self.emit(f"if {farr}[{fidx}][{r}] != 0:")
        self.depth += 1
        self.fail(2)
        self.depth -= 1
        self.emit(f"{val} = {arr}[{idx}][{r}]{test}")
        self.emit(f"{nul} = not {self.valid(arr, idx)}[{r}]")
        if at is not None:
            self.depth -= 1
        return val, nul, kind

    def _Literal(self, e: A.Literal, row):
        lt = e.literal_type
        if lt == "null":
            return "0", "True", "u"
        if lt == "bigint":
            if not K.INT64_MIN <= e.value <= K.INT64_MAX:
                raise _Decline("an integer literal beyond 64 bits")
            return self.constant("i", int(e.value)), "False", "i"
        if lt == "double":
            return self.constant("f", float(e.value)), "False", "f"
        if lt == "boolean":
            return f"({self.constant('i', 1 if e.value else 0)} != 0)", "False", "b"
        if lt == "varchar":
            code = self.constant("i", self.label_id(e.value))
            self.varchar_literals[code] = e.value
            return code, "False", "l"
        if lt in ("timestamp", "interval", "date") and self.loaded:
            value = (e.value - T.EPOCH_DATE).days * _DAY_NS if lt == "date" else e.value
            if not K.INT64_MIN <= value <= K.INT64_MAX:
                raise _Decline(f"a {lt} literal beyond 64-bit nanoseconds")
            return self.constant("i", int(value)), "False", self.kind(e.type)
        raise _Decline(f"{lt} literals are not compiled")

    def constant(self, kind: str, value) -> str:
        """Code reading a literal from the constant arrays (``ci`` int64, ``cf``
        float64), not the literal itself: queries that differ only in their
        constants generate the same source and share one compiled kernel (a
        parameter sweep compiles once). One slot per occurrence, in the order
        generated, so the slots depend on the query's shape only."""
        consts = self.plan.const_i if kind == "i" else self.plan.const_f
        consts.append(value)
        return f"c{kind}[{len(consts) - 1}]"

    def label_id(self, text: str) -> int:
        ids = self.plan.var_ids
        if text in ids:
            return ids[text]
        # a string naming no variable equals no label, and other such strings by text only
        return -2 - self.strings.setdefault(text, len(self.strings))

    def _ColumnRef(self, e: A.ColumnRef, row):
        kind = self.kind(e.type)
        if kind == "l" and self.loaded:
            kind = "s"                      # a string as its code (_string_codes)
        if kind in ("l", "u"):
            raise _Decline(f"{e.type} columns are not held in registers")
        if kind in ("t", "d", "D"):
            arrow = self.plan.query.input_schema.field(e.resolved).type
            if not {"t": pa.types.is_timestamp, "d": pa.types.is_duration,
                    "D": pa.types.is_date}[kind](arrow):
                raise _Decline(f"{e.type} values of an Arrow {arrow} column")
        arr, idx, _ = self.plan.column(e.resolved, kind)
        r = row if row is not None else self.last_row(e.var)
        val, nul = self.tmp()
        test = " != 0" if kind == "b" else ""
        if r != "q" and not r.startswith("t"):
            rr = self.tmp()[0]
            self.emit(f"{rr} = {r}")
            r = rr
        if r == "q":
            self.emit(f"{val} = {arr}[{idx}][q]{test}")
            self.emit(f"{nul} = not {self.valid(arr, idx)}[q]")
            return val, nul, kind
        self.emit(f"if {r} < 0:")
        self.emit(f"    {val} = {_ZERO[kind]}")
        self.emit(f"    {nul} = True")
        self.emit("else:")
        self.emit(f"    {val} = {arr}[{idx}][{r}]{test}")
        self.emit(f"    {nul} = not {self.valid(arr, idx)}[{r}]")
        return val, nul, kind

    def valid(self, arr: str, idx: int) -> str:
        # validity rows: integer columns first, then doubles (numbered at the end)
        return f"valid[__{'VI' if arr == 'icols' else 'VF'}{idx}__]"

    def _Classifier(self, e: A.Classifier, row):
        val, nul = self.tmp()
        if row is not None:
            if row != "q":
                raise _Decline("CLASSIFIER at a row the registers do not keep")
            self.emit(f"{val} = {self.label_of_current()}")
            self.emit(f"{nul} = False")
            return val, nul, "l"
        s = self.set_of(e.var)
        if s is None or (self.v >= 0 and self.v in s):
            self.emit(f"{val} = {self.label_of_current()}")
            self.emit(f"{nul} = False")
            return val, nul, "l"
        # the variable of the last row of S: the member whose last row is latest
        best = self.tmp()[0]
        self.emit(f"{val} = -1")
        self.emit(f"{best} = -1")
        for m in sorted(s):
            slot = self.plan.layout.last_slot(frozenset([m]), 0)
            self.emit(f"if R[di, {slot}] > {best}:")
            self.emit(f"    {best} = R[di, {slot}]")
            self.emit(f"    {val} = {m}")
        self.emit(f"{nul} = {val} < 0")
        return val, nul, "l"

    def _MatchNumber(self, e, row):
        return "mno", "False", "i"

    def nav_row(self, e: A.Navigation) -> tuple:
        """(code of the row the navigation lands on, -1 for none; static offset
        of that row before the current one, or None when not static)."""
        off = e.offset.value
        if off > MAX_NAV_OFFSET and e.kind in ("FIRST", "LAST"):
            raise _Decline(f"{e.kind} offsets beyond {MAX_NAV_OFFSET} are not kept in registers")
        if off > 2**40:
            raise _Decline("navigation offsets beyond 2**40")
        t = self.tmp()[0]
        if e.kind in ("FIRST", "LAST"):
            s = self.set_of(_nav_var(e.arg))
            if s is None:
                if e.kind == "FIRST":
                    self.emit(f"{t} = start + {off} if start + {off} <= q else -1")
                    return t, None
                self.emit(f"{t} = q - {off} if q - {off} >= start else -1")
                return t, off
            slot = (self.plan.layout.first_slot(s, off) if e.kind == "FIRST"
                    else self.plan.layout.last_slot(s, off))
            self.emit(f"{t} = R[di, {slot}]")
            return t, None
        if isinstance(e.arg, A.Navigation):
            base, static = self.nav_row(e.arg)
            static = None
        else:
            base = self.last_row(_nav_var(e.arg))
            static = 0 if base == "q" else None
        sign = "-" if e.kind == "PREV" else "+"
        if static is not None:
            static = off if e.kind == "PREV" else -off
        self.emit(f"{t} = {base}")
        self.emit(f"if {t} >= 0:")
        self.emit(f"    {t} = {t} {sign} {off}")
        self.emit(f"    if {t} < lo or {t} >= hi:")
        self.emit(f"        {t} = -1")
        return t, static

    def _Navigation(self, e: A.Navigation, row):
        if row is not None:
            raise _Decline("navigation inside an aggregate")
        inner = e.arg.arg if isinstance(e.arg, A.Navigation) else e.arg
        has_classifier = any(isinstance(n, A.Classifier) for n in inner.walk())
        if has_classifier:
            return self.nav_classifier(e, inner)
        kind = self.kind(e.type)
        r, _ = self.nav_row(e)
        val, nul = self.tmp()
        self.emit(f"if {r} < 0:")
        self.emit(f"    {val} = {_ZERO[kind]}")
        self.emit(f"    {nul} = True")
        self.emit("else:")
        self.depth += 1
        iv, inn, ik = self.expr(inner, r)
        if ik == "u":
            iv, inn = _ZERO[kind], "True"
        elif kind == "l" and ik == "s":
            kind = "s"                      # a string column's code (both kinds are ints)
        elif ik != kind:
            raise _Decline("navigation result kind")
        self.emit(f"{val} = {iv}")
        self.emit(f"{nul} = {inn}")
        self.depth -= 1
        return val, nul, kind

    def nav_classifier(self, e: A.Navigation, inner: A.Expr):
        if not isinstance(inner, A.Classifier):
            raise _Decline("CLASSIFIER inside an expression under navigation")
        r, static = self.nav_row(e)
        val, nul = self.tmp()
        s = self.set_of(inner.var)
        if static is not None:
            # a fixed distance before the current row: the label history
            if static < 0:
                self.emit(f"{val} = -1")
            elif static == 0:
                self.emit(f"{val} = {self.label_of_current()} if {r} >= 0 else -1")
            elif static > MAX_LABEL_HISTORY:
                raise _Decline(f"CLASSIFIER more than {MAX_LABEL_HISTORY} rows back")
            else:
                slot = self.plan.layout.lab_slot(static)
                self.plan.layout.lab_slot(0)
                self.emit(f"{val} = R[di, {slot}] if {r} >= 0 else -1")
            self.emit(f"{nul} = {val} < 0")
            return val, nul, "l"
        if s is not None and len(s) == 1 and e.kind in ("FIRST", "LAST") \
                and not isinstance(e.arg, A.Navigation):
            (w,) = tuple(s)
            self.emit(f"{val} = {w} if {r} >= 0 else -1")
            self.emit(f"{nul} = {val} < 0")
            return val, nul, "l"
        if s is not None and len(s) == 1 and e.kind in ("PREV", "NEXT") and \
                e.offset.value == 0 and not isinstance(e.arg, A.Navigation):
            (w,) = tuple(s)
            self.emit(f"{val} = {w} if {r} >= 0 else -1")
            self.emit(f"{nul} = {val} < 0")
            return val, nul, "l"
        raise _Decline("CLASSIFIER at a row the registers do not keep")

    def _Aggregate(self, e: A.Aggregate, row):
        if row is not None:
            raise _Decline("aggregate inside navigation")
        L = self.plan.layout
        s = self.set_of(e.var)
        val, nul = self.tmp()
        if e.star:
            if e.name != "COUNT":
                raise _Decline(f"{e.name}(*)")
            if s is None:
                self.emit(f"{val} = q - start + 1")
            else:
                self.emit(f"{val} = R[di, {L.count_slot(s)}]")
            self.emit(f"{nul} = False")
            return val, nul, "i"
        if e.distinct:
            raise _Decline("DISTINCT aggregates need every value seen, not registers")
        if e.name not in _AGGREGATES:
            raise _Decline(f"{e.name} needs every value seen, not registers")
        agg = L.aggs.get(e)
        if agg is None:
            arg = e.args[0]
            akind = self.kind(arg.type)
            if akind == "l" and self.loaded:
                akind = "s"                 # a string column's codes
            name = e.name
            # int64s exact as the interpreter's values: decimals (unscaled),
            # timestamps, dates and intervals (nanoseconds), strings (codes)
            exact = _scale(akind) is not None or akind in ("t", "D", "d", "s")
            if name == "SUM" and not (akind in ("f", "u") or _scale(akind) is not None
                                      or akind == "d"):
                raise _Decline(f"{name} over {arg.type}")
            if name == "AVG" and akind not in ("i", "f", "u"):
                raise _Decline(f"{name} over {arg.type}")
            if name in ("MIN", "MAX", "ANY_VALUE") and not (akind in ("f", "u") or exact
                                                            or name == "ANY_VALUE"
                                                            and akind == "b"):
                raise _Decline(f"{name} over {arg.type}")
            if name in ("COUNT_IF", "BOOL_AND", "BOOL_OR", "EVERY") and akind not in ("b", "u"):
                raise _Decline(f"{name} over {arg.type}")
            fn = f"arg_{len(L.aggs)}"
            agg = _Agg(e, s, "i" if exact else akind, fn)
            agg.err = L.int_slot(0)
            agg.n = L.int_slot(0)
            if name in ("SUM", "AVG"):
                if agg.kind == "i":
                    agg.ival, agg.ovf = L.int_slot(0), L.int_slot(0)
                else:
                    agg.fval, agg.fc = L.float_slot(0.0), L.float_slot(0.0)
            elif name in ("MIN", "MAX", "ANY_VALUE"):
                if agg.kind == "f":
                    agg.fval = L.float_slot(0.0)
                else:
                    agg.ival = L.int_slot(0)
            elif name in ("BOOL_AND", "EVERY"):
                agg.ival = L.int_slot(1)
            elif name == "BOOL_OR":
                agg.ival = L.int_slot(0)
            if akind != "u":
                self.plan.arg_sources.append(_Gen(self.plan, -1).argument(arg, fn))
            L.aggs[e] = agg
        kind = self.kind(e.type)
        if kind == "l" and self.loaded and e.name in ("MIN", "MAX", "ANY_VALUE"):
            kind = "s"                      # of a string column: its code
        self.emit(f"if R[di, {agg.err}] != 0:")
        self.emit(f"    return R[di, {agg.err}]")
        n = f"R[di, {agg.n}]"
        name = e.name
        if name in ("COUNT", "COUNT_IF"):
            self.emit(f"{val} = {n}")
            self.emit(f"{nul} = False")
            return val, nul, "i"
        self.emit(f"{nul} = {n} == 0")
        self.emit(f"if {nul}:")
        self.emit(f"    {val} = {_ZERO[kind]}")
        self.emit("else:")
        if agg.kind == "u":
            self.emit(f"    {val} = {_ZERO[kind]}")
            return val, nul, kind
        if name in ("SUM", "AVG") and agg.kind == "i":
            self.emit(f"    if R[di, {agg.ovf}] != 0:")
            self.emit("        return 3")
            if name == "SUM":
                self.emit(f"    {val} = R[di, {agg.ival}]")
            else:
                self.emit(f"    {val} = float(R[di, {agg.ival}]) / {n}")
        elif name in ("SUM", "AVG"):
            total = f"F[di, {agg.fval}]"
            if _NEUMAIER:
                c = f"F[di, {agg.fc}]"
                self.emit(f"    {val} = {total} + {c} if ({c} != 0.0 and {c} - {c} == 0.0) "
                          f"else {total}")
            else:
                self.emit(f"    {val} = {total}")
            if name == "AVG":
                self.emit(f"    {val} = {val} / {n}")
        elif name in ("MIN", "MAX", "ANY_VALUE"):
            if agg.kind == "f":
                self.emit(f"    {val} = F[di, {agg.fval}]")
            elif agg.kind == "b":
                self.emit(f"    {val} = R[di, {agg.ival}] != 0")
            else:
                self.emit(f"    {val} = R[di, {agg.ival}]")
        else:   # BOOL_AND / EVERY / BOOL_OR
            self.emit(f"    {val} = R[di, {agg.ival}] != 0")
        return val, nul, kind

    # ------------------------------------------------------------ operators
    def _Unary(self, e: A.Unary, row):
        v, n, k = self.expr(e.operand, row)
        val, nul = self.tmp()
        if k == "u":
            return "0", "True", "u"
        if e.op == "NOT":
            self.emit(f"{val} = not {v}")
            self.emit(f"{nul} = {n}")
            return val, nul, "b"
        if e.op == "+":
            return v, n, k
        if k == "f":
            self.emit(f"{val} = -{v}")
            self.emit(f"{nul} = {n}")
            return val, nul, k
        if k not in ("i", "d") and not k.startswith("m"):
            raise _Decline("unary minus of a non-number")
        self.emit(f"{nul} = {n}")
        self.emit(f"{val} = 0")
        self.emit(f"if not {n}:")
        self.emit(f"    {val}, ok = neg_i64({v})")
        self.emit("    if not ok:")
        self.depth += 2
        self.fail(2 if k == "i" else 3)      # an interval's integer is unbounded there
        self.depth -= 2
        return val, nul, k

    def _Binary(self, e: A.Binary, row):
        if e.op in ("AND", "OR"):
            return self.logic(e, row)
        lv, ln, lk = self.expr(e.left, row)
        rv, rn, rk = self.expr(e.right, row)
        if e.op in _CMP:
            return self.compare(e.op, lv, ln, lk, rv, rn, rk)
        if e.op == "||":
            raise _Decline("string concatenation")
        kind = self.kind(e.type)
        if lk == "u" or rk == "u":
            return _ZERO[kind], "True", kind if kind != "l" else "u"
        val, nul = self.null_guard(ln, rn, _ZERO[kind])
        if kind == "f":
            lv, lk = self.as_double(lv, lk)
            rv, rk = self.as_double(rv, rk)
            a = f"float({lv})" if lk == "i" else lv
            b = f"float({rv})" if rk == "i" else rv
            if lk not in ("i", "f") or rk not in ("i", "f"):
                raise _Decline("arithmetic on non-numbers")
            expr = {"+": f"{a} + {b}", "-": f"{a} - {b}", "*": f"{a} * {b}",
                    "/": f"div_f64({a}, {b})", "%": f"mod_f64({a}, {b})"}[e.op]
            self.emit(f"{val} = {expr}")
        elif kind == "i":
            if lk != "i" or rk != "i":
                raise _Decline("arithmetic on non-integers")
            fn = {"+": "add_i64({a}, {b})", "-": "sub_i64({a}, {b})", "*": "mul_i64({a}, {b})",
                  "/": "div_i64({a}, {b}, False)", "%": "div_i64({a}, {b}, True)"}[e.op]
            self.checked(val, fn.format(a=lv, b=rv), 2)
        elif kind.startswith("m") and e.op in ("+", "-", "*") \
                and None not in (_scale(lk), _scale(rk)):
            # exact decimals as the interpreter's (within int64, far inside
            # the 28 digits of Python's decimal context); past int64 the host
            if e.op == "*":
                if _scale(lk) + _scale(rk) != _scale(kind):
                    raise _Decline("a decimal product past scale 38")
            else:
                lv, lk = self.rescaled(lv, _scale(lk), _scale(kind))
                rv, rk = self.rescaled(rv, _scale(rk), _scale(kind))
            fn = {"+": "add_i64", "-": "sub_i64", "*": "mul_i64"}[e.op]
            self.checked(val, f"{fn}({lv}, {rv})", 3)
        elif kind == "D" and (lk, e.op, rk) in _DATE_OPS:
            # the interpreter: the date's midnight plus the interval, floored
            # to its day (whole days: a multiple of a day already)
            if rk == "i":
                days = self.tmp()[0]
                self.checked(days, f"mul_i64({rv}, {_DAY_NS})", 3)
                rv = days
            fn = {"+": "add_i64", "-": "sub_i64"}[e.op]
            self.checked(val, f"{fn}({lv}, {rv})", 3)
            self.emit(f"{val} = ({val} // {_DAY_NS}) * {_DAY_NS}")
        elif kind in ("t", "d") and (lk, e.op, rk) in _TEMPORAL_OPS:
            # nanoseconds, exact: the interpreter's integers are unbounded,
            # so a result beyond int64 goes to the reference engine
            fn = {"+": "add_i64", "-": "sub_i64", "*": "mul_i64"}[e.op]
            self.checked(val, f"{fn}({lv}, {rv})", 3)
        else:
            raise _Decline(f"{e.type} arithmetic")
        self.depth -= 1
        return val, nul, kind

    def logic(self, e: A.Binary, row):
        is_and = e.op == "AND"
        lv, ln, lk = self.expr(e.left, row)
        val, nul = self.tmp()
        if lk == "u":
            lv, ln = "False", "True"
        elif lk != "b":
            raise _Decline("AND/OR of non-booleans")
        decided = f"(not {ln}) and (not {lv})" if is_and else f"(not {ln}) and {lv}"
        self.emit(f"if {decided}:")
        self.emit(f"    {val} = {'False' if is_and else 'True'}")
        self.emit(f"    {nul} = False")
        self.emit("else:")
        self.depth += 1
        rv, rn, rk = self.expr(e.right, row)
        if rk == "u":
            rv, rn = "False", "True"
        elif rk != "b":
            raise _Decline("AND/OR of non-booleans")
        rdecided = f"(not {rn}) and (not {rv})" if is_and else f"(not {rn}) and {rv}"
        self.emit(f"if {rdecided}:")
        self.emit(f"    {val} = {'False' if is_and else 'True'}")
        self.emit(f"    {nul} = False")
        self.emit(f"elif {ln} or {rn}:")
        self.emit(f"    {val} = False")
        self.emit(f"    {nul} = True")
        self.emit("else:")
        self.emit(f"    {val} = {'True' if is_and else 'False'}")
        self.emit(f"    {nul} = False")
        self.depth -= 1
        return val, nul, "b"

    def null_guard(self, ln: str, rn: str, zero: str) -> tuple:
        """Open a block computed only when neither operand is NULL: a fresh
        (value, null) pair, the value ``zero`` until the block sets it. The
        caller closes the block (``self.depth -= 1``)."""
        val, nul = self.tmp()
        self.emit(f"{nul} = {ln} or {rn}")
        self.emit(f"{val} = {zero}")
        self.emit(f"if not {nul}:")
        self.depth += 1
        return val, nul

    def compare(self, op, lv, ln, lk, rv, rn, rk):
        """SQL comparison (interpreter.compare) of two generated values."""
        if lk == "u" or rk == "u":
            return "False", "True", "b"
        if {lk, rk} == {"s", "l"}:
            # a string column and a literal: the literal's code for this input
            lit = rv if lk == "s" else lv
            text = self.varchar_literals.get(lit)
            if text is None:
                raise _Decline("a string column compared with CLASSIFIER")
            slot = self.constant("i", 0)
            self.plan.string_literals.append((int(slot[3:-1]), text))
            lv, lk = (slot, "s") if lk == "l" else (lv, lk)
            rv, rk = (slot, "s") if rk == "l" else (rv, rk)
        val, nul = self.null_guard(ln, rn, "False")
        if lk.startswith("m") or rk.startswith("m"):
            lv, lk, rv, rk = self.common_decimal(lv, lk, rv, rk)
        if {lk, rk} == {"D", "t"}:
            lk = rk = "t"                   # a date's midnight against a timestamp
        if lk == rk and lk in _ORDERED:
            self.emit(f"{val} = {lv} {_PY_CMP[op]} {rv}")
        elif lk == rk == "l":
            if op not in ("=", "<>"):
                raise _Decline("ordering comparisons of strings")
            self.emit(f"{val} = {lv} {_PY_CMP[op]} {rv}")
        elif {lk, rk} == {"i", "f"}:
            if lk == "i":
                self.checked(val, f"cmp_if({_CMP[op]}, {lv}, {rv})", 3)
            else:
                flipped = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
                self.checked(val, f"cmp_if({_CMP[flipped]}, {rv}, {lv})", 3)
        else:
            raise _Decline(f"comparison of {lk} with {rk} values")
        self.depth -= 1
        return val, nul, "b"

    def common_decimal(self, lv, lk, rv, rk) -> tuple:
        """Two values, one a decimal, in one form the interpreter's
        comparison agrees with: both decimals (or a BIGINT) at the larger
        scale (exact; past int64 the host falls back), or a decimal and a
        double as doubles (Python compares a Decimal with a float as
        ``float(Decimal)``). Other pairs are returned as they are."""
        if "f" in (lk, rk):
            return self.as_double(lv, lk) + self.as_double(rv, rk)
        sl, sr = _scale(lk), _scale(rk)
        if sl is None or sr is None:
            return lv, lk, rv, rk
        target = max(sl, sr)
        return self.rescaled(lv, sl, target) + self.rescaled(rv, sr, target)

    def rescaled(self, v: str, scale: int, target: int) -> tuple:
        """Unscaled value ``v`` at ``scale`` as one at ``target`` (>= scale)."""
        if target == scale:
            return v, f"m{target}"
        if target - scale > 18:
            raise _Decline("decimals of scales more than 18 apart")
        t = self.tmp()[0]
        self.checked(t, f"mul_i64({v}, {10 ** (target - scale)})", 3)
        return t, f"m{target}"

    def as_double(self, v: str, k: str) -> tuple:
        """A value as the double the interpreter's ``float()`` makes of it."""
        if not k.startswith("m"):
            return v, k
        t = self.tmp()[0]
        self.checked(t, f"dec_f64({v}, {_scale(k)})", 3)
        return t, "f"

    def _Between(self, e: A.Between, row):
        v = self.expr(e.operand, row)
        lo = self.expr(e.low, row)
        hi = self.expr(e.high, row)
        gv, gn, _ = self.compare(">=", *v, *lo)
        lv, ln, _ = self.compare("<=", *v, *hi)
        val, nul = self.tmp()
        # _and3 then NOT BETWEEN negates a non-NULL result
        self.emit(f"if ((not {gn}) and (not {gv})) or ((not {ln}) and (not {lv})):")
        self.emit(f"    {val} = False")
        self.emit(f"    {nul} = False")
        self.emit(f"elif {gn} or {ln}:")
        self.emit(f"    {val} = False")
        self.emit(f"    {nul} = True")
        self.emit("else:")
        self.emit(f"    {val} = True")
        self.emit(f"    {nul} = False")
        if e.negated:
            self.emit(f"{val} = (not {val}) if not {nul} else False")
        return val, nul, "b"

    def _InList(self, e: A.InList, row):
        ov, on, ok_ = self.expr(e.operand, row)
        val, nul = self.tmp()
        if ok_ == "u":
            return "False", "True", "b"
        done = self.tmp()[0]
        saw = self.tmp()[0]
        self.emit(f"{val} = False")
        self.emit(f"{nul} = {on}")
        self.emit(f"{done} = {on}")
        self.emit(f"{saw} = False")
        for item in e.items:
            self.emit(f"if not {done}:")
            self.depth += 1
            iv = self.expr(item, row)
            cv, cn, _ = self.compare("=", ov, on, ok_, *iv)
            self.emit(f"if (not {cn}) and {cv}:")
            self.emit(f"    {val} = {'False' if e.negated else 'True'}")
            self.emit(f"    {done} = True")
            self.emit(f"elif {cn}:")
            self.emit(f"    {saw} = True")
            self.depth -= 1
        self.emit(f"if not {done}:")
        self.emit(f"    if {saw}:")
        self.emit(f"        {nul} = True")
        self.emit("    else:")
        self.emit(f"        {val} = {'True' if e.negated else 'False'}")
        return val, nul, "b"

    def _IsNull(self, e: A.IsNull, row):
        v, n, k = self.expr(e.operand, row)
        val = self.tmp()[0]
        self.emit(f"{val} = {'not ' if e.negated else ''}{n}")
        return val, "False", "b"

    def coerce(self, v, n, k, kind):
        if k == "u":
            return _ZERO[kind], "True"
        if k == kind:
            return v, n
        if kind == "f" and k == "i":
            t = self.tmp()[0]
            self.emit(f"{t} = float({v})")
            return t, n
        raise _Decline(f"values of kinds {k} and {kind} mixed")

    def _Case(self, e: A.Case, row):
        kind = self.kind(e.type)
        val, nul = self.tmp()
        self.emit(f"{val} = {_ZERO[kind]}")
        self.emit(f"{nul} = True")
        subject = self.expr(e.operand, row) if e.operand is not None else None
        opened = 0
        for cond, result in e.whens:
            if subject is not None:
                cv = self.expr(cond, row)
                tv, tn, _ = self.compare("=", *subject, *cv)
            else:
                tv, tn, tk = self.expr(cond, row)
                if tk == "u":
                    tv, tn = "False", "True"
            self.emit(f"if (not {tn}) and {tv}:")
            self.depth += 1
            rv, rn = self.coerce(*self.expr(result, row), kind)
            self.emit(f"{val} = {rv}")
            self.emit(f"{nul} = {rn}")
            self.depth -= 1
            self.emit("else:")
            self.depth += 1
            opened += 1
        if e.else_ is not None:
            rv, rn = self.coerce(*self.expr(e.else_, row), kind)
            self.emit(f"{val} = {rv}")
            self.emit(f"{nul} = {rn}")
        else:
            self.emit("pass")
        self.depth -= opened
        return val, nul, kind

    def _Cast(self, e: A.Cast, row):
        v, n, k = self.expr(e.operand, row)
        dst = self.kind(e.target)
        if k == "u":
            return _ZERO[dst], "True", dst
        if k == dst and dst in ("i", "f", "b"):
            return v, n, k
        val = self.tmp()[0]
        if dst == "f" and k in ("i", "b"):
            self.emit(f"{val} = float({v})")
        elif dst == "i" and k == "b":
            self.emit(f"{val} = 1 if {v} else 0")
        elif dst == "b" and k in ("i", "f"):
            self.emit(f"{val} = {v} != 0")
        else:
            raise _Decline(f"CAST from {e.operand.type} to {e.target.sql_name()}")
        return val, n, dst

    def _Call(self, e: A.Call, row):
        name = e.name
        kind = self.kind(e.type)
        if name in ("ROUND", "LN", "LOG10", "EXP", "POWER", "POW"):
            raise _Decline(f"{name} is evaluated through decimals or the C library")
        args = [self.expr(a, row) for a in e.args]
        val, nul = self.tmp()
        if name == "COALESCE":
            self.emit(f"{val} = {_ZERO[kind]}")
            self.emit(f"{nul} = True")
            for a in reversed(args):
                v, n = self.coerce(*a, kind)
                self.emit(f"if not {n}:")
                self.emit(f"    {val} = {v}")
                self.emit(f"    {nul} = False")
            return val, nul, kind
        if name == "NULLIF":
            cv, cn, _ = self.compare("=", *args[0], *args[1])
            v, n, k = args[0]
            if k == "u":
                return "0", "True", "u"
            self.emit(f"{val} = {v}")
            self.emit(f"{nul} = {n} or ((not {cn}) and {cv})")
            return val, nul, k
        if any(k == "u" for _, _, k in args):
            return _ZERO[kind], "True", kind
        if name == "MOD" and kind in ("i", "f"):
            fake = A.Binary(pos=e.pos, op="%", left=e.args[0], right=e.args[1], type=e.type)
            return self.binary_of(fake, args)
        self.emit(f"{nul} = {' or '.join(n for _, n, _ in args)}")
        self.emit(f"{val} = {_ZERO[kind]}")
        self.emit(f"if not {nul}:")
        self.depth += 1
        x, _, xk = args[0]
        if name in ("GREATEST", "LEAST"):
            vals = [self.coerce(v, n, k, kind)[0] for v, n, k in args]
            self.emit(f"{val} = {vals[0]}")
            cmp = ">" if name == "GREATEST" else "<"
            for v in vals[1:]:
                self.emit(f"if {v} {cmp} {val}:")
                self.emit(f"    {val} = {v}")
        elif name == "ABS" and xk == "i":
            self.checked(val, f"({x}, True) if {x} >= 0 else neg_i64({x})", 2)
        elif name == "ABS" and xk == "f":
            self.emit(f"{val} = abs({x})")
        elif name == "SIGN" and xk in ("i", "f"):
            s = f"(1 if {x} > 0 else 0) - (1 if {x} < 0 else 0)"
            self.emit(f"{val} = float({s})" if xk == "f" else f"{val} = {s}")
        elif name == "SQRT" and xk in ("i", "f"):
            self.emit(f"{val} = sqrt_f64(float({x}))")
        elif name in ("FLOOR", "CEIL", "CEILING") and xk in ("i", "f"):
            if xk == "i":
                self.emit(f"{val} = {x}")
            else:
                fn = "floor_f64" if name == "FLOOR" else "ceil_f64"
                self.emit(f"{val} = {fn}({x})")
        else:
            raise _Decline(f"function {name} on these types")
        self.depth -= 1
        return val, nul, kind

    def binary_of(self, e: A.Binary, args):
        (lv, ln, lk), (rv, rn, rk) = args
        kind = self.kind(e.type)
        val, nul = self.null_guard(ln, rn, _ZERO[kind])
        if kind == "f":
            a = f"float({lv})" if lk == "i" else lv
            b = f"float({rv})" if rk == "i" else rv
            self.emit(f"{val} = mod_f64({a}, {b})")
        else:
            if lk != "i" or rk != "i":
                raise _Decline("MOD of non-integers")
            self.checked(val, f"div_i64({lv}, {rv}, True)", 2)
        self.depth -= 1
        return val, nul, kind


# ============================================================== execution

def _load_columns(plan: _Plan, data: SortedInput, jit: bool) -> tuple:
    """(int columns, double columns, validity rows, fallback?, string
    literal codes) as the generated code reads them; validity rows are
    named VI<k>/VF<k>."""
    n = data.table.num_rows
    ints, floats, valid_i, valid_f = [], [], [], []
    # the columns the plan computes: masked parts, string codes
    computed = _masked_columns(plan, data)
    if computed is None:
        return None, None, None, True, None
    codes, literal_codes = _string_codes(plan, data)
    computed.update(codes)
    for name, (arr, idx, kind) in sorted(plan.columns.items(), key=lambda x: (x[1][0], x[1][1])):
        if name in computed:
            values, ok = computed[name]
            (floats if kind == "f" else ints).append(
                values if kind == "f" else values.astype(np.int64))
            (valid_f if kind == "f" else valid_i).append(ok)
            continue
        col = data.table.column(name)
        if pa.types.is_dictionary(col.type):
            col = pc.cast(col, col.type.value_type)
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        ok = np.ones(n, dtype=np.bool_) if col.null_count == 0 else \
            np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
        if kind == "f":
            values = np.asarray(pc.fill_null(col.cast(pa.float64()), 0.0).to_numpy(
                zero_copy_only=False), dtype=np.float64)
            floats.append(values)
            valid_f.append(ok)
        elif kind == "b":
            values = np.asarray(pc.fill_null(col, False).to_numpy(zero_copy_only=False),
                                dtype=np.int64)
            ints.append(values)
            valid_i.append(ok)
        elif kind.startswith("m"):
            values = _unscaled(col, int(kind[1:]))
            if values is None:
                return None, None, None, True, None
            ints.append(values)
            valid_i.append(ok)
        elif kind in ("t", "d", "D"):
            values = _nanoseconds(col, kind)
            if values is None:
                return None, None, None, True, None
            ints.append(values)
            valid_i.append(ok)
        else:
            if pa.types.is_unsigned_integer(col.type) and len(col) and \
                    pc.max(col).as_py() is not None and pc.max(col).as_py() > K.INT64_MAX:
                return None, None, None, True, None
            values = np.asarray(pc.fill_null(col.cast(pa.int64()), 0).to_numpy(
                zero_copy_only=False), dtype=np.int64)
            ints.append(values)
            valid_i.append(ok)
    icols = np.stack(ints) if ints else np.zeros((1, n), dtype=np.int64)
    fcols = np.stack(floats) if floats else np.zeros((1, n), dtype=np.float64)
    valid = np.stack(valid_i + valid_f) if (valid_i or valid_f) else \
        np.ones((1, n), dtype=np.bool_)
    if not jit:
        icols, fcols, valid = icols.tolist(), fcols.tolist(), valid.tolist()
    return icols, fcols, valid, False, literal_codes


def _unscaled(col: pa.Array, scale: int) -> Optional[np.ndarray]:
    """A decimal column of ``scale`` as its unscaled int64 values, NULLs
    as 0; None when it is of another type or a value needs more than 64
    bits (the reference engine runs it)."""
    from ..predicates.masks import _decimal_unscaled
    if not pa.types.is_decimal(col.type) or col.type.scale != scale:
        return None
    values, fits = _decimal_unscaled(col)
    valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
    if not np.all(fits | ~valid):
        return None
    return np.where(valid, values, 0)


def _nanoseconds(col: pa.Array, kind: str) -> Optional[np.ndarray]:
    """A timestamp (``kind`` t, zoned or not), date (D: its midnight) or
    duration (d) column as int64 nanoseconds, NULLs as 0, as the
    interpreter's ``_as_ns`` makes its values; None when the column is of
    another type or a value is beyond int64 nanoseconds (about the years
    1677-2262): the reference engine runs it."""
    t = col.type
    if kind == "D":
        if not pa.types.is_date(t):
            return None
        # days (date32) or milliseconds (date64: its day, as Python reads it)
        raw = np.asarray(pc.fill_null(col.cast(pa.int32() if t == pa.date32() else pa.int64()),
                                      0).to_numpy(zero_copy_only=False), dtype=np.int64)
        days = raw if t == pa.date32() else raw // 86_400_000
        if len(days) and max(-int(days.min()), int(days.max())) > K.INT64_MAX // _DAY_NS:
            return None                      # outside the years 1677-2262
        return days * _DAY_NS
    if not (pa.types.is_timestamp(t) if kind == "t" else pa.types.is_duration(t)):
        return None
    raw = np.asarray(pc.fill_null(col.cast(pa.int64()), 0).to_numpy(zero_copy_only=False),
                     dtype=np.int64)
    scale = T.NS_PER[t.unit]
    if scale == 1:
        return raw
    if len(raw) and max(-int(raw.min()), int(raw.max())) > K.INT64_MAX // scale:
        return None
    return raw * scale


def _string_codes(plan: _Plan, data: SortedInput) -> tuple:
    """The string columns the code reads at other rows (kind s), as codes
    that compare as the strings do: ``2 * rank + 1`` of each value among the
    distinct values of all those columns, sorted by code point (Arrow sorts
    UTF-8 bytes, which is that order; Python compares ``str`` so); a literal
    compared with them gets its rank's odd code, or ``2 * (values below
    it)`` when absent, so ``=`` and ``<`` agree with the strings'.
    ``({name: (codes, validity)}, {ci slot: literal's code})``."""
    names = [name for name, (_, _, kind) in plan.columns.items() if kind == "s"]
    if not names:
        return {}, {}
    cols = []
    for name in names:
        col = data.table.column(name)
        if pa.types.is_dictionary(col.type):
            col = pc.cast(col, col.type.value_type)
        cols.append(col.cast(pa.large_string()))
    values = pc.unique(pa.chunked_array([c for col in cols for c in col.chunks],
                                        pa.large_string()))
    values = values.filter(values.is_valid())
    values = values.take(pc.array_sort_indices(values))
    out: dict = {}
    for name, col in zip(names, cols):
        rank = pc.index_in(col, value_set=values)
        ok = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
        codes = np.asarray(pc.fill_null(rank, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
        out[name] = (codes * 2 + 1, ok)
    literal = {}
    for slot, text in plan.string_literals:
        below = int(pc.sum(pc.less(values, pa.scalar(text, pa.large_string()))).as_py() or 0)
        present = below < len(values) and values[below].as_py() == text
        literal[slot] = 2 * below + 1 if present else 2 * below
    return out, literal


def _masked_columns(plan: _Plan, data: SortedInput) -> Optional[dict]:
    """The columns of the plan's masked parts (``_Plan.mask_column``) over
    ``data``: name -> (values, validity); a failed column holds 1 where
    the part raises (its validity all True). None when the data's types
    differ from the query's schema (the reference engine runs it)."""
    from ..errors import UnsupportedError
    from ..predicates import masks
    out: dict = {}
    for k, (var, e, _) in enumerate(plan.masked):
        try:
            values, ok, failed = masks.evaluate_values(e, var, plan.query, data)
        except UnsupportedError:
            return None
        out[f"{MASKED_PREFIX}{k}"] = (values, ok)
        out[f"{MASKED_PREFIX}{k}!"] = (failed, np.ones(len(failed), dtype=np.bool_))
    return out


class _Buffers:
    """The kernel's buffers. Search scratch (threads, register rows, seen
    entries, log nodes) is reallocated when it grows; the output (matches,
    labels) keeps its content, as the kernel resumes after GROW."""

    def __init__(self, plan: _Plan, n_rows: int):
        self.ki = max(1, len(plan.layout.init_i))
        self.kf = max(1, len(plan.layout.init_f))
        self.n_states = len(plan.op)
        self.sizes = list(INITIAL_SIZES)
        self.alloc_search()
        m, lb = self.sizes[K.B_MATCHES], self.sizes[K.B_LABELS]
        self.m_part, self.m_num, self.m_start, self.m_end = \
            (np.zeros(m, np.int64) for _ in range(4))
        self.labels = np.zeros(lb, np.int16)
        self.lexc = np.zeros(lb, np.bool_)
        self.ctr = np.zeros(K.N_COUNTERS, np.int64)
        self.ctr[K.C_POS] = -1

    def alloc_search(self):
        t, p, s, lg = self.sizes[:4]
        i64 = np.int64
        # two halves each: the current step's and the next step's
        self.th_state, self.th_node, self.th_reg = (np.zeros(2 * t, i64) for _ in range(3))
        self.pool_i = np.zeros((2 * p, self.ki), i64)
        self.pool_f = np.zeros((2 * p, self.kf), np.float64)
        self.seen_stamp = np.full(self.n_states, -1, i64)
        self.seen_head = np.zeros(self.n_states, i64)
        self.ent_row = np.zeros(s, i64)
        self.ent_next = np.zeros(s, i64)
        self.stack = np.zeros(2 * self.n_states + 4, i64)
        self.log_par = np.zeros(lg, i64)
        self.log_var = np.zeros(lg, i64)
        self.log_exc = np.zeros(lg, np.bool_)

    def grow(self, which: int):
        self.sizes[which] *= 4
        if which == K.B_MATCHES:
            for name in ("m_part", "m_num", "m_start", "m_end"):
                setattr(self, name, _grown(getattr(self, name), self.sizes[which]))
        elif which == K.B_LABELS:
            self.labels = _grown(self.labels, self.sizes[which])
            self.lexc = _grown(self.lexc, self.sizes[which])
        else:
            self.alloc_search()


def _grown(a: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, a.dtype)
    out[:len(a)] = a
    return out


def _drive(plan: _Plan, kernel, query: CheckedQuery, data: SortedInput, icols, fcols, valid,
           jit: bool, literal_codes: Optional[dict] = None) -> MatchArrays:
    """Every partition's matches: compiled, ranges of partitions of about
    equal rows on the thread pool (the kernel drops the GIL; each range has
    buffers of its own), their matches joined in partition order."""
    offsets = np.asarray(data.partition_offsets, dtype=np.int64)
    n_parts = len(offsets) - 1
    init_i = np.array(plan.layout.init_i or [0], dtype=np.int64)
    init_f = np.array(plan.layout.init_f or [0.0], dtype=np.float64)
    ci, cf = plan.constants(jit, literal_codes)
    horizon, timed = offsets, False      # never read without a time limit
    if query.time_limit is not None:
        from ..horizons import row_horizons
        horizon, timed = row_horizons(query, data), True

    def run(a: int, b: int) -> list:
        return _drive_range(plan, kernel, query, data, icols, fcols, valid, offsets, a, b,
                            init_i, init_f, ci, cf, horizon, timed)
    ranges = [(0, n_parts)]
    if jit and n_parts > 1 and data.table.num_rows >= PARALLEL_MIN_ROWS:
        ranges = split(offsets - offsets[0]) or ranges
    pieces = run_pieces(run, ranges) if len(ranges) > 1 else [run(0, n_parts)]
    return _concat([chunk for piece in pieces for chunk in piece])


def _drive_range(plan: _Plan, kernel, query: CheckedQuery, data: SortedInput, icols, fcols,
                 valid, offsets, a: int, b: int, init_i, init_f, ci, cf, horizon,
                 timed: bool) -> list:
    """The matches of partitions ``a .. b-1``, as MatchArrays chunks in
    partition order: the kernel over them (it reads the partitions' row
    offsets, numbered from ``a``), and the reference engine for a
    partition the kernel hands back."""
    ranged = offsets[a:b + 1]
    buf = _Buffers(plan, int(ranged[-1] - ranged[0]))
    chunks: list = []
    part = 0
    out_ctr = np.zeros(2, dtype=np.int64)
    while part < b - a:
        status, stop = _call_kernel(plan, kernel, buf, ranged, part, init_i, init_f, icols,
                                    fcols, valid, ci, cf, out_ctr, horizon, timed)
        if status == K.DONE:
            break
        if status == K.GROW:
            # the kernel resumes at the search that stopped, output kept
            buf.grow(int(buf.ctr[K.C_DETAIL]))
            part = int(stop)
            continue
        # ERROR / FALLBACK / SKIP_ERROR (that partition's output dropped): the
        # reference engine decides this partition
        chunks.append(_take(buf, out_ctr, a))
        out_ctr[:] = 0
        chunks.append(MatchArrays.from_matches(_reference(query, data, [a + int(stop)])))
        part = int(stop) + 1
    chunks.append(_take(buf, out_ctr, a))
    return chunks


def _call_kernel(plan: _Plan, kernel, buf: "_Buffers", offsets, part: int, init_i, init_f,
                 icols, fcols, valid, ci, cf, out_ctr, horizon, timed: bool) -> tuple:
    """One call of the kernel (``run_partitions``) over ``offsets`` from
    partition ``part``, with the plan's program and ``buf``'s buffers:
    (status, partition where it stopped)."""
    return kernel(
        offsets, part, plan.start_state, plan.op, plan.out, plan.out2, plan.var, plan.excl,
        plan.skip_kind, plan.skip_set, init_i, init_f, buf.th_state, buf.th_node, buf.th_reg,
        buf.pool_i, buf.pool_f, buf.seen_stamp, buf.seen_head, buf.ent_row, buf.ent_next,
        buf.stack, buf.log_par, buf.log_var, buf.log_exc, buf.ctr, icols, fcols, valid, ci, cf,
        buf.m_part, buf.m_num, buf.m_start, buf.m_end, buf.labels, buf.lexc, out_ctr, horizon,
        timed)


def _take(buf: _Buffers, out_ctr, part_base: int = 0) -> MatchArrays:
    """The matches in ``buf`` so far; their partitions counted from
    ``part_base``."""
    m, nl = int(out_ctr[0]), int(out_ctr[1])
    if m == 0:
        return MatchArrays.empty()
    start = buf.m_start[:m].copy()
    end = buf.m_end[:m].copy()
    offsets = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(end - start + 1, out=offsets[1:])
    assert offsets[-1] == nl
    return MatchArrays(buf.m_part[:m] + part_base, buf.m_num[:m].copy(), start, end, offsets,
                       buf.labels[:nl].copy(), buf.lexc[:nl].copy())


def _concat(chunks: list) -> MatchArrays:
    chunks = [c for c in chunks if len(c)]
    if not chunks:
        return MatchArrays.empty()
    if len(chunks) == 1:
        return chunks[0]
    offsets = [np.zeros(1, dtype=np.int64)]
    base = 0
    for c in chunks:
        offsets.append(c.label_offsets[1:] + base)
        base += int(c.label_offsets[-1])
    return MatchArrays(np.concatenate([c.partition for c in chunks]),
                       np.concatenate([c.number for c in chunks]),
                       np.concatenate([c.start for c in chunks]),
                       np.concatenate([c.end for c in chunks]),
                       np.concatenate(offsets),
                       np.concatenate([c.labels for c in chunks]).astype(np.int16),
                       np.concatenate([c.excluded for c in chunks]).astype(bool))


def _reference(query: CheckedQuery, data: SortedInput, parts) -> list:
    """The reference engine's matches (or error) for some partitions."""
    from .reference import _PartitionMatcher
    program = compile_nfa(query.pattern, query.primary_vars)
    needed = query.matching_columns()
    columns = {name: T.arrow_values(data.table.column(name), t)
               for name, t in query.column_types.items() if name in needed}
    interp = Interpreter(query, columns)
    offsets = data.partition_offsets
    out: list = []
    for part in parts:
        lo, hi = int(offsets[part]), int(offsets[part + 1])
        out.extend(_PartitionMatcher(query, program, interp, part, lo, hi).run())
    return out
