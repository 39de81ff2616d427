"""Unanchored DFA scan for AFTER MATCH SKIP PAST LAST ROW: each row read once.

What: for each partition, run the unanchored leftmost-first automaton
(``gpu_mr.pattern.dfa.UnanchoredDfa``) over the rows, one step per row,
storing the state before each row. It finds the matches of
``gpu_mr.pattern.dfa.match_spans`` (its specification) without retrying a
failed start at the next row: every start is a thread of the one search. A
match is known by its end and the thread that reached MATCH; a second kernel
walks each match back through the lineage tables from that thread, writing
each row's variable and ``{- -}`` mark, until it reaches the seed injected at
some row: the match's start. A third copies the labels into the CSR layout of
``engines.base.MatchArrays``. For ONE ROW PER MATCH measures that need no
labels (FIRST/LAST at a match's edge, MIN/MAX, COUNT(*)), a variant of the
walk (``walk_measures``) computes them instead of writing labels, which are
then recovered only if something reads them.
Why: the anchored scan (kernels/scan.py) takes about 1.6 DFA steps per row
on tick data, with an unpredictable branch per failed start, and its path
recovery walks every match twice (forward for the states, back for the
labels). Here the hot loop is a table lookup and two stores per row with
no branch on the data in the usual case (where a match ends, and the next
search starting at that row, are conditional moves: on tick data both
happen every few rows, too often to predict), and recovery is the
backward walk alone.
After a match the search goes on while higher-priority threads live (they
may extend or replace it); when none is left, the next search starts at the
match's end, so the rows between are read again (usually none: the search
dies on the row after its match, and the table goes straight on to the
next search's state).
Kernel layout as in kernels/scan.py (see its header): ``register_jitable``
bodies, module-level drivers compiled by ``numba.njit(nogil=True,
cache=True)`` over ranges of jobs, run on the shared thread pool
(kernels/threads.py), per-partition output slots from the partition's
first row. Matches never overlap in this mode, so per-row
arrays (row keys, labels) need no slots. The scan stores each row's key,
the state before the row and the row's class together (``state << shift |
class``), which is the walk's index into the lineage: the walk reads one
array, not the states and the classes. A thread scans four partitions at
once, the long ones first: four independent chains of lookups
(:func:`scan_segments`). A partition wider than a lane's share of the rows
is cut into chunks scanned speculatively on all lanes and cores, then
replayed at their borders until the true scan agrees with the speculation
(:func:`repair_chunk`). The hot
loop carries no pending match (:func:`_lean_step`); where a search stops,
it is read back from the row keys (:func:`_pending`). A stream's batch is
scanned whole partition by whole partition, the last one open: a search
alive at its end is scanned again from where it began in the next batch
(:func:`_search_begin`).
Cost: one DFA step per row plus the rows re-read after each match; O(match
length) per match for the walk and the copy; 2 bytes per row of row keys
(4 past 65,535 keys). The measured walk reads a key per walked row for
each MIN/MAX and two words per match for each edge value, loads off its
chain of lookups (on v_shape, 1e7 rows: about 2 ns a walked row more,
where the measures' own passes took about 7), and asks for the rows of the
match ``PREFETCH_MATCHES`` ahead (kernels/prefetch.py).
"""

from __future__ import annotations

import numpy as np

from . import buffers as B
from . import scan as S
from .jitable import uncounted
from .lanes import LANES, highest_lane, lane_members, lane_min, lane_steps, lowest_lane
from .prefetch import prefetch, store_fence, stream_store
from .scan import register_jitable
from .threads import run_all, run_pieces, split, thread_count

# UnanchoredTables.match_thread's mark of an empty match (pattern/dfa.py).
EMPTY_MATCH = -2


def pack_moves(tables) -> tuple:
    """``(moves, shift)``: the scan's one lookup per row. ``moves[(state <<
    shift) + class]`` = ``next << shift << MOVE_SHIFT | pre << shift << 9 |
    restart << 8 | code``: the next state's row offset in ``moves`` (the
    class axis padded to ``1 << shift`` columns, so that the hot loop needs
    no multiply), ``code`` the match that ends before the row (0 none, 1
    empty, 2 + its MATCH thread), ``pre`` the state the scan records before
    the row (as the row key's state part: the scan adds the row's class).
    ``restart``: the step kills the search right after its match ends
    there, so the next search starts at this very row: the move goes
    straight to that search's state after the row (when that step notes no
    match itself), ``pre`` is the new search's state, and the scan records
    the match without leaving its loop. Only other deaths (a match that
    ended rows earlier, or an empty one) reach state 0 and the slow path.
    Why ``pre`` in the word: the loop is bound by its instructions, not by
    its chain of lookups, and this is one shift and mask a row instead of a
    choice between two states."""
    steps = tables.steps.astype(np.int64)
    n_states, n_classes = steps.shape
    shift = max(0, int(n_classes - 1).bit_length())
    mt = tables.match_thread.astype(np.int64)
    matched = (steps & 1).astype(bool)
    code = np.where(matched, np.where(mt == EMPTY_MATCH, 1, mt + 2), 0)
    nxt = steps >> 1
    fresh = steps[tables.start_other]                    # a new search's step, per class
    restart = (nxt == 0) & (code >= 2) & ((fresh & 1) == 0)[None, :]
    restart[0] = False                                   # the dead state is never stepped
    nxt = np.where(restart, (fresh >> 1)[None, :], nxt)
    pre = np.where(restart, tables.start_other, np.arange(n_states)[:, None])
    assert (n_states << shift) <= KEY_MASK + 1          # the DFA's caps are far below
    move = ((nxt << shift) << MOVE_SHIFT | (pre << shift) << 9
            | restart.astype(np.int64) << 8 | code)     # code < 256: MAX_THREADS
    moves = np.zeros((n_states, 1 << shift), dtype=np.int64)
    moves[:, :n_classes] = move
    return moves.ravel(), shift


# A move word's fields: the row key's state part at bits 9 .. 39, the next
# state's offset from bit MOVE_SHIFT.
KEY_MASK = (1 << 31) - 1
MOVE_SHIFT = 40
# ``found`` (``end << 8 | code``) when no match is pending: end -1, code 0.
NO_MATCH = -256


def row_key_dtype(tables) -> np.dtype:
    """The row keys' type: 2 bytes while every ``state << shift | class``
    (and every label with its mark, bit 15) fits, else 4."""
    n_states, n_classes = tables.steps.shape
    shift = max(0, int(n_classes - 1).bit_length())
    return np.dtype(np.uint16 if (n_states << shift) <= 0xFFFF else np.int32)


@register_jitable
def _step(classes, q, off, found, n_out, moves, row_keys, out, out_base):
    """One row of the scan: row ``q`` read from the move table's row
    ``off``; returns ``(q + 1, off, found, n_out)``. ``found`` is ``end << 8
    | code`` of the match so far (``NO_MATCH``: none); ``off`` 0 when the
    search died (its match ended earlier: the caller settles it)."""
    # unsigned indices: numba adds no negative-index wraparound (four
    # instructions and a spilled register a row each)
    uq = np.uint64(q)
    cls = classes[uq]
    m = moves[np.uint64(off + cls)]
    c = m & 0xFF
    restart = (m >> 8) & 1
    # Branch-free: where a match ends (often) and where the search restarts
    # at its end (as often) are data the CPU cannot predict, so each choice
    # is arithmetic (numba compiles `a if c else b` here to a branch, which
    # cost a tenth of the scan's time).
    found += np.int64(c != 0) * ((q << 8 | c) - found)
    row_keys[uq] = ((m >> 9) & KEY_MASK) | cls
    out[np.uint64(out_base + n_out)] = found      # kept only when n_out moves on
    n_out += restart
    found += restart * (NO_MATCH - found)
    return q + 1, m >> MOVE_SHIFT, found, n_out


@register_jitable
def _scan_rows(classes, q, stop, off, found, n_out, moves, row_keys, out, out_base):
    """The scan's hot loop: rows ``q .. stop-1`` (:func:`_step`) until a
    search dies; returns ``(q, off, found, n_out)``."""
    while q < stop:
        q, off, found, n_out = _step(classes, q, off, found, n_out, moves, row_keys, out,
                                     out_base)
        if off == 0:                 # rare: the search died, its match ended earlier
            break
    return q, off, found, n_out


@register_jitable
def _lean_step(classes, q, off, n_out, moves, row_keys, out, out_base):
    """:func:`_step` without the pending match: returns ``(q + 1, off,
    n_out)``. A restart records ``q << 8 | code`` (the match ends at the
    row, code >= 2); the match a search leaves pending where it dies or its
    rows end is read back from the row keys (:func:`_pending`). Why:
    carrying the pending match row by row (two choices and a multiply on a
    chain of their own) was half the loop's instructions: 1e7 rows, two
    lanes on one thread, 14.7 -> 9.8 ms."""
    uq = np.uint64(q)
    cls = classes[uq]
    m = moves[np.uint64(off + cls)]
    row_keys[uq] = ((m >> 9) & KEY_MASK) | cls
    out[np.uint64(out_base + n_out)] = (q << 8) | (m & 0xFF)    # kept only at a restart
    n_out += (m >> 8) & 1
    return q + 1, m >> MOVE_SHIFT, n_out


@register_jitable
def _lean_rows(classes, q, stop, off, n_out, moves, row_keys, out, out_base):
    """Rows ``q .. stop-1`` (:func:`_lean_step`) until a search dies;
    returns ``(q, off, n_out)``."""
    while q < stop:
        q, off, n_out = _lean_step(classes, q, off, n_out, moves, row_keys, out, out_base)
        if off == 0:                 # rare: the search died, its match ended earlier
            break
    return q, off, n_out


@register_jitable
def _lean_pair(classes, qa, offa, na, base_a, qb, offb, nb, base_b, rows, moves, row_keys,
               out):
    """:func:`_lean_rows` over two segments at once, ``rows`` rows of each
    (both have that many left), until either search dies. Why: the scan is
    a chain of dependent lookups, a row's next state from its table word;
    two independent chains keep the core busy while each waits (1e7 rows
    on one thread: 18.4 -> 9.8 ms)."""
    for _ in range(rows):
        qa, offa, na = _lean_step(classes, qa, offa, na, moves, row_keys, out, base_a)
        qb, offb, nb = _lean_step(classes, qb, offb, nb, moves, row_keys, out, base_b)
        if (offa == 0) | (offb == 0):
            break
    return qa, offa, na, qb, offb, nb


@register_jitable
def _lean_quad(classes, qa, offa, na, base_a, qb, offb, nb, base_b, qc, offc, nc, base_c, qd,
               offd, nd, base_d, rows, moves, row_keys, out):
    """:func:`_lean_pair` over four segments at once."""
    for _ in range(rows):
        qa, offa, na = _lean_step(classes, qa, offa, na, moves, row_keys, out, base_a)
        qb, offb, nb = _lean_step(classes, qb, offb, nb, moves, row_keys, out, base_b)
        qc, offc, nc = _lean_step(classes, qc, offc, nc, moves, row_keys, out, base_c)
        qd, offd, nd = _lean_step(classes, qd, offd, nd, moves, row_keys, out, base_d)
        if (offa == 0) | (offb == 0) | (offc == 0) | (offd == 0):
            break
    return qa, offa, na, qb, offb, nb, qc, offc, nc, qd, offd, nd


@uncounted
def _pending(row_keys, moves, out, out_base, n_out, n_begin, begin, q):
    """The match pending where a search that began at row ``begin`` (after
    ``n_begin`` recorded matches) stops, before row ``q``: ``end << 8 |
    code`` of the last row, since ``begin`` and since the search's last
    restart, whose move noted a match ending there, else ``NO_MATCH`` --
    what :func:`_step` carries as ``found``. The row keys of the rows a
    search read without restarting are their move-table indices (``state
    << shift | class``), so their moves are at hand."""
    lo = begin
    if n_out > n_begin:
        lo = max(lo, (out[np.uint64(out_base + n_out - 1)] >> 8) + 1)
    j = q - 1
    while j >= lo:
        c = moves[np.uint64(row_keys[np.uint64(j)])] & 0xFF
        if c != 0:
            return (j << 8) | c
        j -= 1
    return np.int64(NO_MATCH)


@uncounted
def _settle(q, hi, off, found, n_out, open_end, shift, end_accept, end_code, start_other, out,
            out_base):
    """After the hot loop stopped at the end of its rows or where a search
    died: record the match found (the partition's end when the search is
    alive there and accepts) and start the next search at its end. Returns
    ``(q, off, found, n_out, whether the rows are done)``. ``open_end``: the
    rows end inside the partition (a speculative chunk's): a search alive
    there is left as it is, for the next chunk."""
    if off != 0 and open_end:        # q == hi: the state at the chunk's end
        return q, off, found, n_out, True
    best = found >> 8
    code = found & 0xFF
    if off != 0 and end_accept[off >> shift]:     # q == hi, alive
        best = hi
        code = end_code[off >> shift]
    if best < 0:                     # at the end, no match since the last one
        return q, off, found, n_out, True
    out[out_base + n_out] = best << 8 | code
    n_out += 1
    q = best + 1 if code == 1 else best
    # q > lo: a match at lo ends past lo or is empty
    return q, np.int64(start_other << shift), np.int64(NO_MATCH), n_out, q >= hi


@uncounted
def _search_begin(out, out_base, n_out, n_begin, begin):
    """The row the search under way began at: ``begin`` (where the last one
    settled), or the row of its last restart since (recorded at
    ``out[out_base + n_out - 1]``, ``end << 8 | code``: the new search read
    that row first). Where a stream resumes when the search is still alive
    at the batch's end."""
    if n_out > n_begin:
        return max(begin, out[np.uint64(out_base + n_out - 1)] >> 8)
    return begin


@uncounted
def _lean_finish(classes, q, hi, off, n_out, begin, n_begin, done, open_end, moves, shift,
                 end_accept, start_other, end_code, row_keys, out, out_base):
    """Scan rows on (:func:`_lean_rows`) from a search that began at row
    ``begin`` after ``n_begin`` matches to ``hi``, settling each search that
    stops: returns ``(q, off, found, n_out, begin)``, where the scan stopped,
    the match pending there and the row its last search began at
    (:func:`_search_begin`)."""
    found = np.int64(NO_MATCH)
    while not done:
        q, off, n_out = _lean_rows(classes, q, hi, off, n_out, moves, row_keys, out, out_base)
        q, off, found, n_out, done, begin, n_begin = _stop(
            q, hi, off, n_out, begin, n_begin, open_end, moves, shift, end_accept, end_code,
            start_other, row_keys, out, out_base)
    return q, off, found, n_out, _search_begin(out, out_base, n_out, n_begin, begin)


@uncounted
def _stop(q, hi, off, n_out, begin, n_begin, open_end, moves, shift, end_accept, end_code,
          start_other, row_keys, out, out_base):
    """A lean search stopped at row ``q`` (it died, or its rows ended): the
    match it left pending (:func:`_pending`) settled (:func:`_settle`);
    returns ``(q, off, found, n_out, done, begin, n_begin)``, the next
    search's begin and the matches before it unless the rows are done."""
    found = _pending(row_keys, moves, out, out_base, n_out, n_begin, begin, q)
    q, off, found, n_out, done = _settle(q, hi, off, found, n_out, open_end, shift, end_accept,
                                         end_code, start_other, out, out_base)
    if not done:
        begin = q
        n_begin = n_out
    return q, off, found, n_out, done, begin, n_begin


# Most rows a chunk's replay scans between its checks for agreement.
REPLAY_STRIDE = 256


@register_jitable
def repair_chunk(k, q, off, found, classes, seg_lo, seg_hi, seg_open, moves, shift,
                 end_accept, start_other, end_code, clean, row_keys, out, counts, fix_out,
                 fix_at, fix_first, n_fix, drops, exits):
    """Speculative chunk ``k`` (scanned from its first row as if a search
    began there) when the true scan enters it at row ``q`` in state ``off``
    with ``found`` pending: replay the true scan row by row, its matches at
    ``fix_out[fix_at ...]``, until it is about to read a row in the state
    the speculative scan last read that row in, with no match pending in
    either -- its own ``found``, and the speculation's because that state
    is ``clean`` (no scan reaches it with a match pending:
    :func:`clean_states`) -- and has not itself written that row's key yet.
    The scan's future depends only on its row, state and pending match, so
    from there on both are the same: the speculative matches recorded
    before are dropped (``drops[k]``), the rest kept, with the speculative
    exit state. (A row keyed ``start_other`` may also be one where the
    speculation restarted, recording a match that ends there and going on
    as a fresh search would: that match is dropped too.) Without such a row
    the replay runs through the chunk and every speculative match is
    dropped. ``n_fix[k]``: the replayed matches (from ``fix_first[k] =
    fix_at``); returns where the next chunk's replayed matches go. Rows
    before the chunk that the replay scans again (a search that dies goes
    back to its match's end) get their true keys, as the sequential scan
    gives them."""
    lo = seg_lo[k]
    hi = seg_hi[k]
    open_end = seg_open[k]
    fix_first[k] = fix_at
    n_fix[k] = 0
    drops[k] = 0
    if q == lo and off == np.int64(start_other << shift) and found == NO_MATCH:
        return fix_at                 # the speculation was right
    n = np.int64(0)
    written = q - 1                   # rows up to here hold the replay's keys
    n_spec = counts[k]
    # rows between the checks: one at first (the scans agree within a row or
    # two on tick data), doubling up to REPLAY_STRIDE (where they never do,
    # one match over the whole partition, the replay runs at the scan's pace)
    stride = np.int64(1)
    while True:
        if found == NO_MATCH and q > written and lo <= q < hi:
            state = np.int64(row_keys[np.uint64(q)]) >> shift
            if off == state << shift and clean[state]:
                d = np.int64(0)
                while d < n_spec:
                    entry = out[lo + d]
                    end = entry >> 8
                    if end > q or (end == q and (state != start_other or (entry & 0xFF) == 1)):
                        break
                    d += 1
                drops[k] = d
                n_fix[k] = n
                return fix_at + n
        if q < hi:
            q, off, found, n = _scan_rows(classes, q, min(q + stride, hi), off, found, n, moves,
                                          row_keys, fix_out, fix_at)
            stride = min(2 * stride, REPLAY_STRIDE)
            if q - 1 > written:
                written = q - 1
            if off != 0 and q < hi:
                continue
        q, off, found, n, done = _settle(q, hi, off, found, n, open_end, shift, end_accept,
                                         end_code, start_other, fix_out, fix_at)
        if done:
            break
    drops[k] = n_spec
    n_fix[k] = n
    exits[k, 0] = q
    exits[k, 1] = off
    exits[k, 2] = found
    return fix_at + n


def clean_states(moves: np.ndarray, shift: int, start_first: int, start_other: int,
                 n_states: int) -> np.ndarray:
    """Per DFA state, whether no scan reaches it with a match pending (a
    match found that a longer one may still replace): every (state,
    pending) pair the scan can be in, explored from its starts over every
    class (a restart records its match and goes on fresh; a death settles
    and starts fresh). Where a speculative chunk read a row in a clean
    state, it had no match pending there (:func:`repair_chunk`)."""
    width = 1 << shift
    words = moves.reshape(-1, width)
    seen = np.zeros((n_states, 2), dtype=np.bool_)
    todo = [(int(start_first), 0), (int(start_other), 0)]
    while todo:
        state, pending = todo.pop()
        if seen[state, pending]:
            continue
        seen[state, pending] = True
        for m in words[state].tolist():
            nxt = (m >> MOVE_SHIFT) >> shift
            restart = (m >> 8) & 1
            code = m & 0xFF
            if nxt == 0:
                continue                  # a death: the scan goes on from start_other
            todo.append((nxt, 0 if restart else int(pending or code != 0)))
    return ~seen[:, 1]


def flat_lineage(tables) -> tuple:
    """``(lineage, thread shift)``: the tables' lineage words as one flat
    array indexed ``row key << thread shift | thread`` (the row key as the
    scan writes it, ``state << shift | class``, the class axis padded as in
    :func:`pack_moves`; the thread axis padded to a power of two), so that
    the walk's dependent lookup per row is one shift and or."""
    n_states, n_classes, width = tables.lineage.shape
    class_shift = max(0, int(n_classes - 1).bit_length())
    thread_shift = max(0, int(width - 1).bit_length())
    flat = np.zeros((n_states, 1 << class_shift, 1 << thread_shift), dtype=np.int64)
    flat[:, :n_classes, :width] = tables.lineage
    return flat.ravel(), thread_shift


# The words of the last few tables (by identity: an engine keeps a query's
# tables for its later calls), so that a call again packs none.
_WORDS_KEPT = 16
_words: dict = {}


def _table_words(tables) -> tuple:
    """``(moves, shift, end codes, lineage, thread shift)`` of ``tables``:
    :func:`pack_moves`, the code of the match that ends at the partition's
    end per state, :func:`flat_lineage`; computed once per tables object
    (while the last ``_WORDS_KEPT`` are kept)."""
    known = _words.get(id(tables))
    if known is None or known[0] is not tables:
        moves, shift = pack_moves(tables)
        end_code = np.where(tables.end_thread >= 0, tables.end_thread + 2, 0).astype(np.int32)
        known = (tables, (moves, shift, end_code) + flat_lineage(tables))
        if len(_words) >= _WORDS_KEPT:
            _words.clear()
        _words[id(tables)] = known
    return known[1]


@register_jitable
def _walk_row(row_keys, lineage, thread_shift, q, t):
    """The lineage word of row ``q`` for thread ``t``: parent | variable,
    mark, start bits (unsigned indices: no wraparound test on the chain)."""
    return lineage[np.uint64((np.int64(row_keys[q]) << thread_shift) | t)]


@register_jitable
def _next_thread(step, t, starts, i):
    """The walk's thread for the row before: the parent in ``step``. A
    branch, not arithmetic: a match's thread changes rarely (on tick data,
    at its start only), so the CPU predicts it unchanged and issues the
    next row's lookup without waiting for this one (a chain of dependent
    loads otherwise: the bare walk 16.7 against 14.4 ms on v_shape, 1e7
    rows). The store, overwritten when the match's start is known, only
    keeps the compiler from turning the branch back into arithmetic."""
    parent = step & 0xFFFF
    if parent != t:
        starts[i] = -1
        return parent
    return t


@register_jitable
def walk_matches(first, last, ends, codes, row_keys, lineage, thread_shift, starts):
    """For matches ``first .. last-1`` (exclusive end ``ends[i]``, code as
    :func:`_step` records it): walk back from the MATCH thread through the
    lineage of the row keys; set ``starts[i]``; return where the matches'
    labels begin in ``row_keys``. The walk overwrites ``row_keys`` with
    them (``variable | {- -} mark << 15``), in order, ending at row
    ``ends[last-1]``: going backwards, it writes at or after the row it has
    just read and reads no row after it again, and the matches of a chunk
    lie between the previous chunk's last end and its own, so chunks run
    in parallel and no n-row buffer is needed."""
    p = ends[last - 1] if last > first else 0
    for i in range(last - 1, first - 1, -1):
        q = ends[i]
        if i - PREFETCH_MATCHES >= first:     # as walk_measures does
            prefetch(row_keys, np.uint64(ends[i - PREFETCH_MATCHES] - 1))
        c = codes[i]
        if c != 1:
            t = c - 2
            while True:
                q -= 1
                step = _walk_row(row_keys, lineage, thread_shift, q, t)
                p -= 1
                row_keys[p] = ((step >> 16) & 0x7FFF) | (((step >> 32) & 1) << 15)
                if (step >> 33) & 1:
                    break
                t = _next_thread(step, t, starts, i)
        starts[i] = q
    return p


# Values one walk computes: FIRST/LAST at a match's edge, MIN/MAX. Each is
# arguments of its own, so that the loops read arrays held in registers (a
# loop over a tuple of columns cost twice the walk's own time).
WALK_EDGES = 4
WALK_EXTREMES = 2
# The walk's flags per group of matches (walk_measures' ``flags``).
WALK_FLAGS = 2 * WALK_EXTREMES + 1
WALK_LANDINGS = 4
# How the walk finds an extreme's row (``at<x>``): by comparing the keys of
# the rows that count, or as the last (first) of them, where the planner
# has proved the keys strictly monotone over them (gpu_mr/monotone.py):
# then no key is read but the one at that row.
EXT_COMPARED = 0
EXT_AT_LAST = 1
EXT_AT_FIRST = 2
# How many matches ahead the walk asks for rows (4 and 32 measured slower).
PREFETCH_MATCHES = 16


def toward_min(key, orient):
    """``key`` ordered for a MIN: a MAX's keys reversed, exactly (floats
    negated: ``orient`` -1.0, else 1.0; integers complemented: ``orient``
    -1, else 0), so that one loop serves both without a flag per row."""
    if isinstance(key, (float, np.floating)):
        return key * orient
    return key ^ orient


try:
    from numba.core import types as _types
    from numba.extending import overload

    @overload(toward_min)
    def _toward_min_typed(key, orient):
        if isinstance(key, _types.Float):
            return lambda key, orient: key * orient
        return lambda key, orient: key ^ orient
except ImportError:                  # the plain bodies still run without numba
    pass


@register_jitable
def _extreme_row(keys, member, orient, none, var, q, ulo, v, b, f, nan):
    """One walked row ``q`` (taken by variable ``var``) of a running MIN
    (see :func:`toward_min`) over the rows whose variable counts: ``v`` the
    extreme so far, ``b`` its row, ``f`` the earliest counted row, ``nan``
    whether a counted key is NaN. Walking backwards, a row takes the extreme
    when its key is at least as far out as every later row's (ties go to the
    earlier row). A row that does not count reads as the start value, so it
    can take the extreme only while nothing beats that; the earliest
    counted row then stands in (:func:`walk_measures`). Choices are masks:
    which rows count and which take the extreme are data the CPU cannot
    predict, and a branch on them cost a third of the walk."""
    counted = member[var]
    k = toward_min(keys[q - ulo], orient)     # always: a load under a branch mispredicts
    k = k if counted else none
    nan |= k != k
    take = -np.int64(k <= v)
    v = min(k, v)
    qi = np.int64(q)
    b ^= take & (qi ^ b)
    f ^= -np.int64(counted) & (qi ^ f)
    return v, b, f, nan


@register_jitable
def _landing_row(member, first, var, q, row):
    """One walked row ``q`` (variable ``var``) of a landing: walking
    backwards, FIRST takes every member row (the earliest stays), LAST the
    first one met. A mask, not a branch: which rows are members is data."""
    take = np.int64(member[var]) & (np.int64(first) | np.int64(row < 0))
    qi = np.int64(q)
    return row ^ (-take & (qi ^ row))


@register_jitable
def _ask_block(values, ahead, below):
    """Prefetch the lines of rows ``ahead`` (a match's last) and ``below``
    (its block's first) of one column."""
    prefetch(values, ahead)
    prefetch(values, below)


@register_jitable
def _member_bits(member):
    """``member`` (bool per variable id) as the bits of a word; the ids
    from 64 on are left out (the block path is then not taken; the DFA
    path serves at most 32 variables today)."""
    bits = np.int64(0)
    for v in range(min(member.shape[0], 64)):
        if member[v]:
            bits |= np.int64(1) << np.int64(v)
    return bits


@register_jitable
def _fresh_columns(n_ext, n_edge, keys0, keys1, edges0, edges1, edges2, edges3):
    """Bits 0-1 (keys0, keys1), 2-5 (edges0 .. edges3): the columns of the
    walk that are read (``n_ext``, ``n_edge``) and not the same memory as
    one before them."""
    seen = (keys0.ctypes.data, keys1.ctypes.data, edges0.ctypes.data, edges1.ctypes.data,
            edges2.ctypes.data, edges3.ctypes.data)
    used = (n_ext > 0, n_ext > 1, n_edge > 0, n_edge > 1, n_edge > 2, n_edge > 3)
    fresh = 0
    for j in range(6):
        if used[j]:
            new = True
            for k in range(j):
                if used[k] and seen[k] == seen[j]:
                    new = False
            if new:
                fresh |= 1 << j
    return fresh


@register_jitable
def _landing_lanes(variables, member_bits, first, inside, base):
    """A landing's row within a block (:func:`_landing_row`'s answer): the
    lowest (FIRST) or highest lane of the match's rows whose variable
    counts, as a row from ``base``; -1 for none."""
    lanes = lane_members(variables, member_bits) & inside
    at = lowest_lane(lanes | 1 << LANES) if first else highest_lane(lanes | 1)
    return base + at if lanes != 0 else np.int64(-1)


@uncounted
def _lane_extreme(keys, variables, member_bits, at, inside, base, lo, orient, none):
    """One extreme over a block's rows ``inside`` (:func:`walk_measures`):
    ``(least key toward a MIN, its earliest row or -1, a counted key is
    NaN)``; where ``at`` names the row (``EXT_AT_LAST``/``EXT_AT_FIRST``), that
    row of the rows that count, no key compared (the value left as
    ``none``)."""
    if at != EXT_COMPARED:
        return none, _landing_lanes(variables, member_bits, at == EXT_AT_FIRST, inside,
                                    base), False
    counted = lane_members(variables, member_bits) & inside
    least, ties, nan = lane_min(keys, base - lo, counted, orient, none)
    return least, (base + lowest_lane(ties | 1 << LANES) if ties != 0
                   else np.int64(-1)), nan


@register_jitable
def walk_measures(first, last, ends, codes, row_keys, lineage, thread_shift, starts, lengths,
                  lo, n_edge, edges0, edges1, edges2, edges3, at_end, edge_out0, edge_out1,
                  edge_out2, edge_out3, n_ext, keys0, member0, orient0, none0, at0, keys1,
                  member1, orient1, none1, at1, ext_row0, ext_row1, ext_val0, ext_val1, flags,
                  n_land, land_member0, land_first0, land_member1, land_first1, land_member2,
                  land_first2, land_member3, land_first3, land_out0, land_out1, land_out2,
                  land_out3):
    """:func:`walk_matches` for ONE ROW PER MATCH measures, labels not
    written (``row_keys`` are left as they are): for matches ``first ..
    last-1``, set ``starts[i]`` and ``lengths[i]`` (its rows), turn
    ``ends[i]`` into its last row (``ends[i] - 1``) and, from
    columns read from row ``lo`` on (every row of
    those matches lies there, a column's arrays non-empty):
    for the first ``n_edge`` (at most ``WALK_EDGES``) edges ``j``,
    ``edge_out<j>[i]``: ``edges<j>`` (uint64 words) at the match's first
    row (its last with ``at_end[j]``), 0 for an empty match;
    for the first ``n_ext`` (at most ``WALK_EXTREMES``) extremes ``x``,
    ``ext_row<x>[i]``: the row of the MIN of ``keys<x>`` (float64 or
    int64) in the direction ``orient<x>`` (:func:`toward_min`: a MAX's
    keys reversed; ``none<x>``: the start value, the largest in that
    direction) over the rows mapped to a variable ``v`` with
    ``member<x>[v]``, the first of equal keys, -1 for none;
    ``ext_val<x>[i]`` its key (left alone for none); where ``at<x>`` is
    ``EXT_AT_LAST`` (``EXT_AT_FIRST``) instead the last (first) such row,
    its keys not compared (the caller knows that row holds the extreme);
    ``flags[x]`` set when
    a counted key is NaN (the row is then meaningless), ``flags[WALK_EXTREMES
    + x]`` when a match has no row for it (-1), ``flags[2 * WALK_EXTREMES]``
    when a match is empty (what measures.py would otherwise learn by a pass
    over the results: v_shape, 1e7 rows, 0.6 ms of one thread);
    for the first ``n_land`` (at most ``WALK_LANDINGS``) landings ``l``,
    ``land_out<l>[i]``: the first row (``land_first<l>``) or the last of the
    match mapped to a variable ``v`` with ``land_member<l>[v]``, -1 for none
    (FIRST/LAST of a variable a match need not begin or end with).
    Why here: the walk is a chain of dependent lookups, so these loads and
    comparisons, independent of it, overlap with it, where passes of their
    own after the walk would read the columns again. A MAX is a MIN of
    reversed keys because a MIN-or-MAX choice per row cost a quarter of the
    walk; the test of ``n_ext`` per row costs about 4% (one loop per count
    measured 24.0 against 25.0 ms), not worth three copies of the loop."""
    ulo = np.uint64(lo)
    nan0 = False                    # in registers: a store per row would stay a store
    nan1 = False
    gap0 = False                    # an extreme without a row
    gap1 = False
    empty = False
    # the block path (see below) reads variables as bits of a word
    lanes_ok = member0.shape[0] <= 64
    bits0 = _member_bits(member0)
    bits1 = _member_bits(member1)
    land_bits0 = _member_bits(land_member0)
    land_bits1 = _member_bits(land_member1)
    land_bits2 = _member_bits(land_member2)
    land_bits3 = _member_bits(land_member3)
    max_key = np.int64((lineage.shape[0] >> thread_shift) - 1)
    # the columns read, each asked for once: a column is often both an
    # edge and an extreme's keys (v_shape: price thrice, ts twice; with the
    # rows in cache 13.9 -> 12.9 ns a match)
    fresh = _fresh_columns(n_ext, n_edge, keys0, keys1, edges0, edges1, edges2, edges3)
    for i in range(last - 1, first - 1, -1):
        ui = np.uint64(i)
        end = ends[ui]
        # the rows of the match PREFETCH_MATCHES on asked for now: each
        # match's exit is a mispredicted branch the CPU cannot load past, so
        # where matches lie far apart each waited for its rows from memory
        # (v_shape, 1e7 rows in one partition, 170k matches: the walk 15.0
        # -> 5.7 ms of core time; 100 partitions, denser: 22.8 -> 20.5).
        # One call per array: one helper taking the four arrays made the
        # scan and walk of 100 partitions 57 ms instead of 17.
        if i - PREFETCH_MATCHES >= first:
            ahead = np.uint64(ends[ui - np.uint64(PREFETCH_MATCHES)] - 1)
            # and the block's first row (its line before, most times): the
            # walk goes down the rows, which the CPU's own prefetch follows
            # less well (never a fault: a prefetch before the array is dropped)
            below = np.uint64(max(np.int64(ahead) - (LANES - 1), lo))
            _ask_block(row_keys, ahead, below)
            if fresh & 1:
                _ask_block(keys0, ahead - ulo, below - ulo)
            if fresh & 2:
                _ask_block(keys1, ahead - ulo, below - ulo)
            if fresh & 4:
                _ask_block(edges0, ahead - ulo, below - ulo)
            if fresh & 8:
                _ask_block(edges1, ahead - ulo, below - ulo)
            if fresh & 16:
                _ask_block(edges2, ahead - ulo, below - ulo)
            if fresh & 32:
                _ask_block(edges3, ahead - ulo, below - ulo)
        q = np.uint64(end)
        c = codes[ui]
        t = np.int64(c - 2)
        v0 = none0                  # the running extremes of the rows walked
        v1 = none1
        b0 = np.int64(-1)
        b1 = np.int64(-1)
        f0 = np.int64(-1)           # the earliest counted rows
        f1 = np.int64(-1)
        l0 = np.int64(-1)           # the landings' rows so far
        l1 = np.int64(-1)
        l2 = np.int64(-1)
        l3 = np.int64(-1)
        # A match within the LANES rows before its end, whose thread stays
        # the MATCH thread down to its first row (on tick data, nearly
        # all): those rows read at once, its first row the highest that
        # begins it (kernels/lanes.py); no branch on where it begins, which
        # the row-by-row walk mispredicts at almost every match (v_shape,
        # 1e7 rows, 100 partitions, one thread: 20.5 -> 14.5 ms). Else, and
        # for the rows of a block below ``lo``, the walk row by row.
        walked = False
        if lanes_ok and c != 1 and end - LANES >= lo:
            base = end - LANES
            begins, other, variables = lane_steps(row_keys, lineage, base, t, thread_shift,
                                                  max_key)
            first_lane = highest_lane(begins | 1)
            if begins != 0 and (other >> first_lane) >> 1 == 0:
                walked = True
                q = np.uint64(base + first_lane)
                inside = ((1 << LANES) - 1) >> first_lane << first_lane
                if n_ext > 0:
                    v0, b0, nan = _lane_extreme(keys0, variables, bits0, at0, inside, base,
                                                lo, orient0, none0)
                    nan0 |= nan
                    f0 = b0                     # the extreme's row stands (see below)
                if n_ext > 1:
                    v1, b1, nan = _lane_extreme(keys1, variables, bits1, at1, inside, base,
                                                lo, orient1, none1)
                    nan1 |= nan
                    f1 = b1
                if n_land > 0:
                    l0 = _landing_lanes(variables, land_bits0, land_first0, inside, base)
                    if n_land > 1:
                        l1 = _landing_lanes(variables, land_bits1, land_first1, inside, base)
                        if n_land > 2:
                            l2 = _landing_lanes(variables, land_bits2, land_first2, inside,
                                                base)
                            if n_land > 3:
                                l3 = _landing_lanes(variables, land_bits3, land_first3,
                                                    inside, base)
        if c != 1 and not walked:
            while True:
                q -= np.uint64(1)
                step = _walk_row(row_keys, lineage, thread_shift, q, t)
                var = np.uint64((step >> 16) & 0x7FFF)
                if n_ext > 0:
                    if at0 != EXT_COMPARED:
                        f0 = _landing_row(member0, at0 == EXT_AT_FIRST, var, q, f0)
                    else:
                        v0, b0, f0, nan0 = _extreme_row(keys0, member0, orient0, none0, var,
                                                        q, ulo, v0, b0, f0, nan0)
                if n_ext > 1:
                    if at1 != EXT_COMPARED:
                        f1 = _landing_row(member1, at1 == EXT_AT_FIRST, var, q, f1)
                    else:
                        v1, b1, f1, nan1 = _extreme_row(keys1, member1, orient1, none1, var,
                                                        q, ulo, v1, b1, f1, nan1)
                if n_land > 0:
                    l0 = _landing_row(land_member0, land_first0, var, q, l0)
                    if n_land > 1:
                        l1 = _landing_row(land_member1, land_first1, var, q, l1)
                        if n_land > 2:
                            l2 = _landing_row(land_member2, land_first2, var, q, l2)
                            if n_land > 3:
                                l3 = _landing_row(land_member3, land_first3, var, q, l3)
                if (step >> 33) & 1:
                    break
                t = _next_thread(step, t, starts, ui)
        # the per-match outputs are written once and read only when the
        # output table is built: streamed past the caches, no line read in
        # before it is written (1e7 rows, 100 partitions, two threads: the
        # walk 7.05-7.33 -> 6.76-7.05 ms); fenced at the end
        stream_store(starts, ui, np.int64(q))
        stream_store(lengths, ui, end - np.int64(q))
        ends[ui] = end - 1              # the last row, as MatchArrays hold it (no pass after)
        if n_land > 0:
            stream_store(land_out0, ui, l0)
            if n_land > 1:
                stream_store(land_out1, ui, l1)
                if n_land > 2:
                    stream_store(land_out2, ui, l2)
                    if n_land > 3:
                        stream_store(land_out3, ui, l3)
        empty |= c == 1
        if n_edge > 0 and c == 1:       # an empty match: no row (the caller makes it NULL)
            stream_store(edge_out0, ui, 0)
            if n_edge > 1:
                stream_store(edge_out1, ui, 0)
            if n_edge > 2:
                stream_store(edge_out2, ui, 0)
            if n_edge > 3:
                stream_store(edge_out3, ui, 0)
        elif n_edge > 0:
            first_row = q - ulo
            last_row = np.uint64(end - 1) - ulo
            stream_store(edge_out0, ui, edges0[last_row if at_end[0] else first_row])
            if n_edge > 1:
                stream_store(edge_out1, ui, edges1[last_row if at_end[1] else first_row])
            if n_edge > 2:
                stream_store(edge_out2, ui, edges2[last_row if at_end[2] else first_row])
            if n_edge > 3:
                stream_store(edge_out3, ui, edges3[last_row if at_end[3] else first_row])
        # every counted key is the start value (or none counts): the first
        # of equal keys is the earliest counted row (-1: none); the value is
        # read at the row (min() of -0.0 and 0.0 may give either)
        if n_ext > 0:
            b0 = f0 if v0 == none0 else b0
            stream_store(ext_row0, ui, b0)
            gap0 |= b0 < 0
            if b0 >= 0:
                stream_store(ext_val0, ui, keys0[np.uint64(b0) - ulo])
            if n_ext > 1:
                b1 = f1 if v1 == none1 else b1
                stream_store(ext_row1, ui, b1)
                gap1 |= b1 < 0
                if b1 >= 0:
                    stream_store(ext_val1, ui, keys1[np.uint64(b1) - ulo])
    store_fence()                       # the outputs' streamed stores seen by all
    flags[0] |= nan0
    flags[1] |= nan1
    flags[WALK_EXTREMES] |= gap0
    flags[WALK_EXTREMES + 1] |= gap1
    flags[2 * WALK_EXTREMES] |= empty


@register_jitable
def copy_chunk(first, last, label_offsets, begin, packed, labels, excluded):
    """The labels and marks of matches ``first .. last-1`` from where
    :func:`walk_matches` left them (``packed[begin ...]``) to their place
    in the CSR layout."""
    out = label_offsets[first]
    count = label_offsets[last] - out
    # slices indexed from 0 by a range: no negative-index wraparound test per
    # element, so the loop vectorises
    src = packed[begin:begin + count]
    dst_labels = labels[out:out + count]
    dst_excluded = excluded[out:out + count]
    for k in range(count):
        v = src[k]
        dst_labels[k] = v & 0x7FFF
        dst_excluded[k] = ((v >> 15) & 1) != 0


def compact_slots(s0, s1, i0, seg_lo, seg_part, seg_number, counts, drops, fix_first, n_fix,
                  out, fix_out, ends, codes, partitions, numbers):
    """Every match of segments ``s0 .. s1-1`` (partitions, or chunks of
    them) in row order, from index ``i0`` (the matches of the segments
    before): its end, code, partition and number (``seg_number[s]``: the
    matches of its partition before the segment), from the segment's
    replayed slots (``n_fix[s]`` from ``fix_first[s]`` of ``fix_out``) and
    then its kept speculative ones (``drops[s] .. counts[s]-1`` from row
    ``seg_lo[s]`` of ``out``; ``end << 8 | code`` each); one pass instead of
    numpy's repeat / arange / gather over the matches."""
    i = i0
    for s in range(s0, s1):
        if s + 2 < s1:
            # each segment's slots are a stream of their own, which the
            # CPU's prefetcher picks up only after a few misses: the lines of
            # the segment two on asked for now (1e7 rows on one thread,
            # 10,000 partitions: 1.82 -> 1.43 ms; 100,000: 4.2 -> 2.8)
            nxt = seg_lo[s + 2] + drops[s + 2]
            prefetch(out, nxt)
            prefetch(out, nxt + 8)
            prefetch(out, nxt + 16)
            prefetch(out, nxt + 24)
        k, i = _unpack(fix_out, fix_first[s], fix_first[s] + n_fix[s], seg_part[s],
                       seg_number[s], i, ends, codes, partitions, numbers)
        k, i = _unpack(out, seg_lo[s] + drops[s], seg_lo[s] + counts[s], seg_part[s], k, i,
                       ends, codes, partitions, numbers)
    store_fence()


@register_jitable
def _unpack(words, first, last, p, k, i, ends, codes, partitions, numbers):
    """Matches ``words[first .. last-1]`` (``end << 8 | code``) of
    partition ``p`` as numbers ``k + 1, ...`` at ``i ...``; returns the
    next ``(k, i)``. (Unsigned indices: no wraparound test per store.)"""
    for j in range(first, last):
        found = words[np.uint64(j)]
        ui = np.uint64(i)
        # streamed past the caches (:func:`walk_measures`; two threads:
        # 0.90-0.99 -> 0.65-0.84 ms), fenced at the end of the driver
        stream_store(ends, ui, found >> 8)
        stream_store(codes, ui, found & 0xFF)
        stream_store(partitions, ui, p)
        k += 1
        stream_store(numbers, ui, k)
        i += 1
    return k, i


# The drivers: each runs a range of independent jobs (partitions, groups of
# WALK_CHUNK matches) on the calling thread; ``_in_pieces`` hands ranges of
# about equal work to the shared thread pool (kernels/threads.py). Not
# numba's ``prange``: its OpenMP workers spin for a while after each launch,
# and on two cores they took the CPU from the pool threads of the next step
# (the walk ran 26-34 ms after a parallel scan, 20 ms without it).

def scan_segments(s0, s1, classes, seg_lo, seg_hi, seg_first, seg_open, moves, shift,
                  end_accept, start_first, start_other, end_code, row_keys, out, counts, exits,
                  seg_order):
    """Scan segments ``seg_order[s0 .. s1-1]`` (rows ``seg_lo[s] ..
    seg_hi[s]-1``: a whole partition, or a chunk of one scanned
    speculatively from its first row), in that order, four at a time
    (:func:`_lean_quad`) while there are segments to take, then the last
    ones two at a time (:func:`_lean_pair`) and the very last alone: each
    lane takes the next segment when its own is done.
    A segment's first search starts in ``start_first`` when it begins its
    partition (``seg_first``), else in ``start_other``; one that ends
    inside its partition (``seg_open``) leaves its last search as it is.
    ``counts[s]``: its matches, at ``out[seg_lo[s] ...]``; ``exits[s]``:
    the row it stopped at, the move-table offset and the match pending
    there. A lane holds its segment ``s``, row ``q``, end ``h``, state
    ``off``, matches ``n``, the row its search began at ``b`` and the
    matches before it ``k``, the pending match ``f`` once settled, and
    whether it is done ``d``. Why four: each lane is a chain of dependent
    lookups, and four chains keep the core busier than two (1e7 rows on
    one thread, the bare loop: 9.6 -> 7.8 ms)."""
    if s1 <= s0:
        return
    fresh_first = np.int64(start_first << shift)
    fresh = np.int64(start_other << shift)
    none = np.int64(NO_MATCH)
    sa, qa, ha, offa, na, ba, ka, fa, da = _lane(seg_order[s0], seg_lo, seg_hi, seg_first,
                                                 fresh_first, fresh, none)
    if s1 - s0 == 1:
        q, off, found, n, b = _lean_finish(classes, qa, ha, offa, na, qa, na, qa >= ha,
                                           seg_open[sa], moves, shift, end_accept, start_other,
                                           end_code, row_keys, out, seg_lo[sa])
        _record(sa, q, off, found, n, counts, exits, b)
        return
    sb, qb, hb, offb, nb, bb, kb, fb, db = _lane(seg_order[s0 + 1], seg_lo, seg_hi, seg_first,
                                                 fresh_first, fresh, none)
    # a lane parked while two run (the third of the four left when the
    # segments ran out), taken before the next segment
    parked = False
    sp, qp, hp, offp, np_, bp, kp, fp, dp = sb, qb, hb, offb, nb, bb, kb, fb, db
    nxt = s0 + 2
    if s1 - s0 >= 4:
        sc, qc, hc, offc, nc, bc, kc, fc, dc = _lane(seg_order[s0 + 2], seg_lo, seg_hi,
                                                     seg_first, fresh_first, fresh, none)
        sd, qd, hd, offd, nd, bd, kd, fd, dd = _lane(seg_order[s0 + 3], seg_lo, seg_hi,
                                                     seg_first, fresh_first, fresh, none)
        nxt = s0 + 4
        while True:
            if not da:               # the lanes are alike: let a be one that is done
                if db:
                    sa, qa, ha, offa, na, ba, ka, fa, da, sb, qb, hb, offb, nb, bb, kb, fb, db = \
                        sb, qb, hb, offb, nb, bb, kb, fb, db, sa, qa, ha, offa, na, ba, ka, fa, da
                elif dc:
                    sa, qa, ha, offa, na, ba, ka, fa, da, sc, qc, hc, offc, nc, bc, kc, fc, dc = \
                        sc, qc, hc, offc, nc, bc, kc, fc, dc, sa, qa, ha, offa, na, ba, ka, fa, da
                elif dd:
                    sa, qa, ha, offa, na, ba, ka, fa, da, sd, qd, hd, offd, nd, bd, kd, fd, dd = \
                        sd, qd, hd, offd, nd, bd, kd, fd, dd, sa, qa, ha, offa, na, ba, ka, fa, da
            if da:                   # lane a's segment is done: the next, else two lanes on
                _record(sa, qa, offa, fa, na, counts, exits,
                        _search_begin(out, seg_lo[sa], na, ka, ba))
                if nxt == s1:
                    sa, qa, ha, offa, na, ba, ka, fa, da = sc, qc, hc, offc, nc, bc, kc, fc, dc
                    sp, qp, hp, offp, np_, bp, kp, fp, dp = sd, qd, hd, offd, nd, bd, kd, fd, dd
                    parked = True
                    break
                sa, qa, ha, offa, na, ba, ka, fa, da = _lane(seg_order[nxt], seg_lo, seg_hi,
                                                             seg_first, fresh_first, fresh, none)
                nxt += 1
                if nxt < s1:
                    _ask_segment(classes, row_keys, out, seg_lo[seg_order[nxt]])
                continue
            qa, offa, na, qb, offb, nb, qc, offc, nc, qd, offd, nd = _lean_quad(
                classes, qa, offa, na, seg_lo[sa], qb, offb, nb, seg_lo[sb], qc, offc, nc,
                seg_lo[sc], qd, offd, nd, seg_lo[sd], min(min(ha - qa, hb - qb),
                                                          min(hc - qc, hd - qd)),
                moves, row_keys, out)
            qa, offa, fa, na, da, ba, ka = _lane_stop(
                qa, ha, offa, na, ba, ka, fa, da, seg_open[sa], moves, shift,
                end_accept, end_code, start_other, row_keys, out, seg_lo[sa])
            qb, offb, fb, nb, db, bb, kb = _lane_stop(
                qb, hb, offb, nb, bb, kb, fb, db, seg_open[sb], moves, shift,
                end_accept, end_code, start_other, row_keys, out, seg_lo[sb])
            qc, offc, fc, nc, dc, bc, kc = _lane_stop(
                qc, hc, offc, nc, bc, kc, fc, dc, seg_open[sc], moves, shift,
                end_accept, end_code, start_other, row_keys, out, seg_lo[sc])
            qd, offd, fd, nd, dd, bd, kd = _lane_stop(
                qd, hd, offd, nd, bd, kd, fd, dd, seg_open[sd], moves, shift,
                end_accept, end_code, start_other, row_keys, out, seg_lo[sd])
    while True:
        if db and not da:            # the lanes are alike: let a be the one that is done
            sa, qa, ha, offa, na, ba, ka, fa, da, sb, qb, hb, offb, nb, bb, kb, fb, db = \
                sb, qb, hb, offb, nb, bb, kb, fb, db, sa, qa, ha, offa, na, ba, ka, fa, da
        if da:                       # lane a's segment is done: the parked lane, the
            _record(sa, qa, offa, fa, na, counts, exits,    # next segment, else b alone
                    _search_begin(out, seg_lo[sa], na, ka, ba))
            if parked:
                sa, qa, ha, offa, na, ba, ka, fa, da = sp, qp, hp, offp, np_, bp, kp, fp, dp
                parked = False
                continue
            if nxt == s1:
                q, off, found, n, b = _lean_finish(classes, qb, hb, offb, nb, bb, kb, db,
                                                   seg_open[sb], moves, shift, end_accept,
                                                   start_other, end_code, row_keys, out,
                                                   seg_lo[sb])
                _record(sb, q, off, found if not db else fb, n, counts, exits, b)
                return
            sa, qa, ha, offa, na, ba, ka, fa, da = _lane(seg_order[nxt], seg_lo, seg_hi,
                                                         seg_first, fresh_first, fresh, none)
            nxt += 1
            continue
        qa, offa, na, qb, offb, nb = _lean_pair(classes, qa, offa, na, seg_lo[sa], qb, offb, nb,
                                                seg_lo[sb], min(ha - qa, hb - qb), moves,
                                                row_keys, out)
        qa, offa, fa, na, da, ba, ka = _lane_stop(
            qa, ha, offa, na, ba, ka, fa, da, seg_open[sa], moves, shift, end_accept,
            end_code, start_other, row_keys, out, seg_lo[sa])
        qb, offb, fb, nb, db, bb, kb = _lane_stop(
            qb, hb, offb, nb, bb, kb, fb, db, seg_open[sb], moves, shift, end_accept,
            end_code, start_other, row_keys, out, seg_lo[sb])


@uncounted
def _lane_stop(q, h, off, n, b, k, f, d, open_end, moves, shift, end_accept, end_code,
               start_other, row_keys, out, out_base):
    """A lane after a run of steps: :func:`_stop` where its rows ended or its
    search died, ``(q, off, f, n, d, b, k)`` as they were otherwise."""
    if q == h or off == 0:
        return _stop(q, h, off, n, b, k, open_end, moves, shift, end_accept, end_code,
                     start_other, row_keys, out, out_base)
    return q, off, f, n, d, b, k


@uncounted
def _ask_segment(classes, row_keys, out, lo):
    """Prefetch the first rows of the segment from row ``lo`` that a lane
    takes next: its classes, row keys and first slot begin streams of their
    own, which waited on memory at each lane's change (1e7 rows on one
    thread, 10,000 partitions: 11.2 -> 10.65 ms; 100,000: 19.8 -> 17.0;
    100 unchanged)."""
    for k in range(4):
        prefetch(classes, lo + 64 * k)
    prefetch(row_keys, lo)
    prefetch(row_keys, lo + 32)
    prefetch(out, lo)


@uncounted
def _lane(s, seg_lo, seg_hi, seg_first, fresh_first, fresh, none):
    """A lane starting segment ``s``: ``(s, q, h, off, n, b, k, f, d)``."""
    q = seg_lo[s]
    h = seg_hi[s]
    off = fresh_first if seg_first[s] else fresh
    return s, q, h, off, np.int64(0), q, np.int64(0), none, q >= h


@uncounted
def _record(s, q, off, found, n, counts, exits, begin):
    """Segment ``s`` is done: its matches and where and how it stopped,
    and the row its last search began at (where a stream resumes)."""
    counts[s] = n
    exits[s, 0] = q
    exits[s, 1] = off
    exits[s, 2] = found
    exits[s, 3] = begin


def repair_partitions(c0, c1, chain_first, chain_end, classes, seg_lo, seg_hi, seg_open, moves,
                      shift, end_accept, start_other, end_code, clean, row_keys, out, counts,
                      fix_out, fix_first, n_fix, drops, exits):
    """:func:`repair_chunk` along the chunks of chunked partitions ``c0 ..
    c1-1`` (partition ``c``'s chunks are segments ``chain_first[c] ..
    chain_end[c]-1``, in row order; its first is no speculation): each
    chunk entered where and as the (repaired) one before it left."""
    for c in range(c0, c1):
        first = chain_first[c]
        fix_at = seg_lo[first]        # the partition's replayed matches, in order
        fix_first[first] = fix_at
        n_fix[first] = 0
        drops[first] = 0
        for k in range(first + 1, chain_end[c]):
            fix_at = repair_chunk(k, exits[k - 1, 0], exits[k - 1, 1], exits[k - 1, 2],
                                  classes, seg_lo, seg_hi, seg_open, moves, shift, end_accept,
                                  start_other, end_code, clean, row_keys, out, counts, fix_out,
                                  fix_at, fix_first, n_fix, drops, exits)


# Matches per call of the walk and copy bodies: enough to amortise the call.
WALK_CHUNK = 4096


def walk_all(c0, c1, ends, codes, row_keys, lineage, thread_shift, starts, begins):
    n = ends.shape[0]
    for chunk in range(c0, c1):
        first = chunk * WALK_CHUNK
        begins[chunk] = walk_matches(first, min(n, first + WALK_CHUNK), ends, codes, row_keys,
                                     lineage, thread_shift, starts)


def walk_measures_groups(m0, m1, ends, codes, row_keys, lineage, thread_shift, starts, lengths,
                         lo, n_edge, edges0, edges1, edges2, edges3, at_end, edge_out0, edge_out1,
                         edge_out2, edge_out3, n_ext, keys0, member0, orient0, none0, at0,
                         keys1, member1, orient1, none1, at1, ext_row0, ext_row1, ext_val0,
                         ext_val1, flags, n_land, land_member0, land_first0, land_member1,
                         land_first1, land_member2, land_first2, land_member3, land_first3,
                         land_out0, land_out1, land_out2, land_out3):
    """:func:`walk_measures` over matches ``m0 .. m1-1``, whose rows lie in
    the columns' piece from row ``lo``, a group of ``WALK_CHUNK`` matches
    at a time (``flags``: a row per group)."""
    first = m0
    while first < m1:
        g = first // WALK_CHUNK
        last = min(m1, (g + 1) * WALK_CHUNK)
        walk_measures(first, last, ends, codes, row_keys, lineage, thread_shift, starts,
                      lengths, lo, n_edge, edges0, edges1, edges2, edges3, at_end, edge_out0,
                      edge_out1, edge_out2, edge_out3, n_ext, keys0, member0, orient0, none0,
                      at0, keys1, member1, orient1, none1, at1, ext_row0, ext_row1, ext_val0,
                      ext_val1, flags[g], n_land, land_member0, land_first0, land_member1,
                      land_first1, land_member2, land_first2, land_member3, land_first3,
                      land_out0, land_out1, land_out2, land_out3)
        first = last


def copy_all(c0, c1, label_offsets, begins, packed, labels, excluded):
    n = label_offsets.shape[0] - 1
    for chunk in range(c0, c1):
        first = chunk * WALK_CHUNK
        copy_chunk(first, min(n, first + WALK_CHUNK), label_offsets, begins[chunk], packed,
                   labels, excluded)


_DRIVERS = (scan_segments, compact_slots, walk_all, copy_all, walk_measures_groups,
            repair_partitions)
_compiled: list = []


def _cpu_kernels(compiled: bool = True) -> tuple:
    """(scan, compact, walk, copy, walk with measures): numba.njit,
    compiled on first use and cached on disk, or the plain Python bodies."""
    if not compiled:
        return _DRIVERS
    if not _compiled:
        import numba
        jit = numba.njit(nogil=True, cache=True)
        _compiled.append(tuple(jit(f) for f in _DRIVERS))
    return _compiled[0]


# Pieces per thread the walks are cut into, taken by the threads as
# they come free: their cost per match varies with the data more than their
# estimate (rows spanned, matches) says (v_shape, 100 partitions: one
# piece a thread left one core idle 1.4 ms of 11).
PIECES_PER_THREAD = 4


def _in_pieces(run, work_before, threads: bool, per_thread: int = 1) -> list:
    """``run(lo, hi)`` over jobs ``0 .. len(work_before)-2`` cut into ranges
    of about equal work (``work_before``: the work before each job, as an
    offsets array), on the thread pool when ``threads``: one range a thread,
    or ``per_thread`` ranges a thread taken as threads come free (not for
    the scan, whose ranges pair partitions on one thread and cut long ones
    into speculative chunks by the thread count: finer ranges slowed it)."""
    jobs = len(work_before) - 1
    if jobs <= 0:
        return []
    if not threads:
        return [run(0, jobs)]
    if per_thread <= 1:
        return run_pieces(run, split(work_before))
    pieces = split(work_before, per_thread * thread_count())
    return run_all(lambda piece: run(*piece), pieces)


# Segments a thread's scan runs at once (scan_segments' lanes).
SCAN_LANES = 4


def chunk_rows(offsets: np.ndarray) -> int:
    """Rows per speculative chunk when a partition is wider than one
    lane's share of the rows (``SCAN_LANES`` a thread), else 0: whole
    partitions. A lane runs one segment at a time, so a partition that
    outlasts the others holds its thread after the other lanes are done
    (v_shape, 100 partitions of ticks.py's sizes, the widest 19% of the
    rows: the two threads' scans took 4.7 and 5.8 ms with four lanes
    each). The thresholds are the anchored scan's (kernels/scan.py
    ``CHUNKED_MIN_ROWS``, ``CHUNK_MIN_ROWS``, ``CHUNK_THREADS``): chunks of a
    lane's share, none shorter than ``CHUNK_MIN_ROWS``, so that the replays
    at their borders stay a small share."""
    n = int(offsets[-1] - offsets[0]) if offsets.shape[0] else 0
    if n < S.CHUNKED_MIN_ROWS or offsets.shape[0] < 2:
        return 0
    threads = S.CHUNK_THREADS or thread_count()
    widest = int(np.diff(offsets).max())
    share = n // (threads * SCAN_LANES)
    if threads < 2 or widest <= share:
        return 0
    return max(S.CHUNK_MIN_ROWS, share)


# A segment longer than this share of its thread's rows is scanned first.
LONG_SHARE = 256


def _longest_first(seg_order, seg_lo, seg_hi, a: int, b: int) -> np.ndarray:
    """``seg_order`` with segments ``a .. b-1`` longest first (in place):
    the lanes' last segments, which run with fewer lanes beside them, are
    then short. Only the long ones, past ``1 / LONG_SHARE`` of the rows,
    move: the rest keep their order in memory, which the CPU's prefetchers
    follow from one segment to the next (100,000 partitions of ticks.py's
    sizes, all sorted by length, each segment began with misses on its
    classes, row keys and slots: the scan on one thread 25.2 -> 19.1 ms)."""
    lengths = seg_hi[a:b] - seg_lo[a:b]
    long = np.flatnonzero(lengths > int(lengths.sum()) // LONG_SHARE)
    order = np.arange(a, b, dtype=np.int64)
    if long.size:
        # stable: the long ones longest first, then every other in place
        key = np.zeros(b - a, dtype=np.int64)
        key[long] = -lengths[long]
        order = a + np.argsort(key, kind="stable")
    seg_order[a:b] = order
    return seg_order


def _segments(offsets: np.ndarray, rows: int) -> tuple:
    """The scan's segments: ``(lo, hi, first of its partition, open end,
    partition, chains)``, whole partitions, or for a partition wider than
    ``rows`` (> 0) chunks of about that many rows; ``chains``: per chunked
    partition its first segment and one past its last (2 x partitions)."""
    lo, hi = offsets[:-1], offsets[1:]
    parts = np.arange(lo.shape[0], dtype=np.int64)
    if rows <= 0:
        return (lo.copy(), hi.copy(), np.ones(lo.shape[0], np.bool_),
                np.zeros(lo.shape[0], np.bool_), parts, np.zeros((2, 0), np.int64))
    pieces = np.maximum(1, -(-(hi - lo) // rows))
    seg_part = np.repeat(parts, pieces)
    first_seg = np.zeros(lo.shape[0] + 1, dtype=np.int64)
    np.cumsum(pieces, out=first_seg[1:])
    place = np.arange(seg_part.shape[0], dtype=np.int64) - first_seg[seg_part]
    width = (hi - lo)[seg_part]
    count = pieces[seg_part]
    seg_lo = lo[seg_part] + width * place // count        # about equal chunks
    seg_hi = lo[seg_part] + width * (place + 1) // count
    chained = np.flatnonzero(pieces > 1)
    chains = np.stack([first_seg[chained], first_seg[chained + 1]])
    return seg_lo, seg_hi, place == 0, place < count - 1, seg_part, chains


def _scan(classes: np.ndarray, offsets: np.ndarray, tables, compiled: bool,
          stream: tuple = ()) -> tuple:
    """The scan and the compacted matches: ``(ends, codes, partitions,
    numbers, row keys, resume, kernels, matches per partition)``; compiled,
    on the thread pool in ranges of segments of about equal rows: whole
    partitions, or when one is wider than a thread's share of the rows,
    speculative chunks of the long ones, each then repaired from where the
    one before it left (:func:`repair_chunk`). ``stream``: ``(scan_from, continues, open_end,
    end_margin)`` of a batch of a stream (``kernels.scan.run_scan``'s), whole
    partitions only; ``resume``: the row the next batch resumes the last
    partition at (where its search under way began, when one is), else the
    last partition's end."""
    n = classes.shape[0]
    t = tables
    moves, shift, end_code, _, _ = _table_words(t)
    row_keys = B.empty(n, row_key_dtype(t))
    out = B.empty(n, np.int64)
    if stream:
        seg_lo, seg_hi, part_start = S.scan_ranges(offsets, *stream)
        seg_first = seg_lo == part_start
        seg_open = np.zeros(seg_lo.shape[0], dtype=np.bool_)
        seg_open[-1:] = bool(stream[2])
        seg_part = np.arange(seg_lo.shape[0], dtype=np.int64)
        chains = np.zeros((2, 0), np.int64)
    else:
        seg_lo, seg_hi, seg_first, seg_open, seg_part, chains = _segments(
            offsets, chunk_rows(offsets))
    n_seg = seg_lo.shape[0]
    start_fresh = int(t.start_other) << shift
    counts = np.zeros(n_seg, dtype=np.int64)
    exits = np.zeros((n_seg, 4), dtype=np.int64)
    kernels = _cpu_kernels(compiled)
    first_row = int(seg_lo[0]) if n_seg else 0
    rows_before = np.append(seg_lo - first_row, max(n - first_row, 0))
    seg_order = np.arange(n_seg, dtype=np.int64)
    _in_pieces(lambda a, b: kernels[0](
        np.int64(a), np.int64(b), classes, seg_lo, seg_hi, seg_first, seg_open, moves,
        np.int64(shift), t.end_accept, np.int64(t.start_first), np.int64(t.start_other),
        end_code, row_keys, out, counts, exits, _longest_first(seg_order, seg_lo, seg_hi, a, b)),
        rows_before, compiled)
    fix_first = np.zeros(n_seg, dtype=np.int64)
    n_fix = np.zeros(n_seg, dtype=np.int64)
    drops = np.zeros(n_seg, dtype=np.int64)
    fix_out = out
    if chains.shape[1]:
        # each chunked partition's chain of chunks in order, on this thread:
        # the replays are short (usually a match or two at each border)
        fix_out = B.empty(n, np.int64)
        kernels[5](np.int64(0), np.int64(chains.shape[1]), chains[0], chains[1], classes, seg_lo,
                   seg_hi, seg_open, moves, np.int64(shift), t.end_accept,
                   np.int64(t.start_other), end_code,
                   clean_states(moves, shift, t.start_first, t.start_other, t.n_states),
                   row_keys, out, counts, fix_out, fix_first, n_fix, drops, exits)
    kept = n_fix + counts - drops
    matches_before = np.zeros(n_seg + 1, dtype=np.int64)
    np.cumsum(kept, out=matches_before[1:])
    # each segment's first match number: the matches of its partition before
    # it; none where every segment is a whole partition (no chunks), else the
    # first segment of each partition found in one pass (a search per segment
    # took 1.2 ms for 100,000 partitions, the pass 2.6 for 1,000,000)
    if chains.shape[1]:
        idx = np.arange(n_seg, dtype=np.int64)
        starts_part = np.ones(n_seg, dtype=np.bool_)
        np.not_equal(seg_part[1:], seg_part[:-1], out=starts_part[1:])
        part_first = np.maximum.accumulate(np.where(starts_part, idx, 0))
        seg_number = matches_before[:-1] - matches_before[part_first]
    else:
        seg_number = np.zeros(n_seg, dtype=np.int64)
    n_matches = int(matches_before[-1])
    ends = B.empty(n_matches, np.int64)
    codes = B.empty(n_matches, np.int32)
    partitions = B.empty(n_matches, np.int64)
    numbers = B.empty(n_matches, np.int64)
    _in_pieces(lambda a, b: kernels[1](
        np.int64(a), np.int64(b), matches_before[a], seg_lo, seg_part, seg_number, counts,
        drops, fix_first, n_fix, out, fix_out, ends, codes, partitions, numbers),
        matches_before, compiled)
    resume = int(offsets[-1]) if offsets.shape[0] else 0
    if n_seg and seg_open[-1]:
        # a search alive at the batch's end (or one that found a match a
        # longer one may replace) is scanned again from where it began
        q, off, found, begin = (int(x) for x in exits[-1])
        resume = begin if off != start_fresh or found != NO_MATCH else q
    # matches per partition, from the segments' counts (the output's
    # partition keys repeat by them: a count over the matches' partitions,
    # or a search per partition, took 1 ms for 10,000 partitions)
    if not chains.shape[1]:
        per_partition = kept                # every segment a whole partition, in order
    else:
        per_partition = np.bincount(seg_part, weights=kept,
                                    minlength=offsets.shape[0] - 1).astype(np.int64)
    return ends, codes, partitions, numbers, row_keys, resume, kernels, per_partition


def _labels(ends, codes, row_keys, tables, starts, kernels, threads: bool) -> tuple:
    """The walk that writes the labels (into ``row_keys``) and their copy into
    the CSR layout: ``(label_offsets, labels, excluded)``; ``starts`` is
    filled too."""
    n_groups = -(-ends.shape[0] // WALK_CHUNK)
    begins = np.empty(n_groups, dtype=np.int64)
    _, _, _, lineage, thread_shift = _table_words(tables)
    _in_pieces(lambda a, b: kernels[2](
        np.int64(a), np.int64(b), ends, codes, row_keys, lineage, np.int64(thread_shift),
        starts, begins), _rows_before_groups(ends, n_groups),
        threads, PIECES_PER_THREAD)                       # the labels go into row_keys
    label_offsets = _label_offsets(starts, ends)
    total = int(label_offsets[-1])
    labels = B.empty(total, np.int16)
    excluded = B.empty(total, np.bool_)
    labels_before = label_offsets[np.minimum(np.arange(n_groups + 1) * WALK_CHUNK,
                                             ends.shape[0])]
    _in_pieces(lambda a, b: kernels[3](np.int64(a), np.int64(b), label_offsets, begins,
                                       row_keys, labels, excluded), labels_before, threads)
    return label_offsets, labels, excluded


def _label_offsets(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Where each match's labels begin in the CSR layout, and the total."""
    offsets = B.empty(ends.shape[0] + 1, np.int64)
    offsets[0] = 0
    np.subtract(ends, starts, out=offsets[1:])
    np.cumsum(offsets[1:], out=offsets[1:])
    return offsets


# A match's fixed cost in the walk (the mispredicted exit at its start, its
# stores), in rows spanned: what weighs groups of short matches fairly.
MATCH_COST_ROWS = 8


def _rows_before_groups(ends: np.ndarray, n_groups: int) -> np.ndarray:
    """The walks' work before each group of ``WALK_CHUNK`` matches (and
    after the last), as an offsets array: the rows the groups span, up to
    the rows between matches, plus ``MATCH_COST_ROWS`` a match."""
    bounds = np.zeros(n_groups + 1, dtype=np.int64)
    last = np.minimum(np.arange(1, n_groups + 1) * WALK_CHUNK, ends.shape[0])
    bounds[1:] = ends[last - 1] + MATCH_COST_ROWS * last
    return bounds


def _errors(offsets: np.ndarray, resume: int) -> np.ndarray:
    """``kernels.scan.run_scan``'s errors: none; each partition's end as the
    row to resume at, the last one's ``resume``."""
    errors = np.zeros((max(offsets.shape[0] - 1, 0), 3), dtype=np.int64)
    errors[:, 2] = offsets[1:]
    if errors.shape[0]:
        errors[-1, 2] = resume
    return errors


def run_unanchored(classes: np.ndarray, offsets: np.ndarray, tables,
                   compiled: bool = True, stream: tuple = ()) -> tuple:
    """Every match of AFTER MATCH SKIP PAST LAST ROW and its path, from one
    unanchored scan: ``(starts, ends exclusive, partitions, errors,
    label_offsets, labels, excluded)``, what ``kernels.scan.run_scan`` and
    ``run_recovery`` return together for whole partitions (no stream
    arguments; ``errors`` holds no error, and each partition's end as the
    row to resume at). ``tables`` is a
    :class:`gpu_mr.pattern.dfa.UnanchoredTables`; ``compiled=False`` runs
    the plain Python bodies."""
    offsets = np.asarray(offsets, dtype=np.int64)
    ends, codes, partitions, _, row_keys, resume, kernels, _ = _scan(
        classes, offsets, tables, compiled, stream)
    starts = B.empty(ends.shape[0], np.int64)
    paths = _labels(ends, codes, row_keys, tables, starts, kernels, compiled)
    return (starts, ends, partitions, _errors(offsets, resume)) + paths


# Placeholders for the walk's unused columns, typed as the columns' read-only views.
_NO_KEYS = np.zeros(1, dtype=np.float64)
_NO_KEYS.setflags(write=False)
_NO_WORDS = np.zeros(1, dtype=np.uint64)
_NO_WORDS.setflags(write=False)


def _orient(dtype, want_max: bool):
    """:func:`toward_min`'s ``orient`` for keys of ``dtype``."""
    if dtype.kind == "f":
        return np.float64(-1.0 if want_max else 1.0)
    return np.int64(-1 if want_max else 0)


class WalkColumns:
    """What :func:`run_unanchored_measured`'s walk computes per match, and
    the columns it reads: ``bounds`` (the columns' common chunk bounds in
    rows, ascending from 0), ``chunks`` (per chunk, the tuple of each
    column's values as read-only uint64 arrays), ``edges`` ((column, at
    the match's last row) pairs), ``extremes`` ((column, float keys, MAX,
    bool per variable id: the rows that count[, EXT_COMPARED, EXT_AT_LAST
    or EXT_AT_FIRST]) tuples), ``landings`` ((bool
    per variable id: the rows that count, FIRST) pairs); see
    :func:`walk_measures`."""

    def __init__(self, bounds, chunks, edges, extremes, n_vars: int, landings=()):
        self.bounds = np.asarray(bounds, dtype=np.int64)
        # read-only views, whatever the columns' own flags: one compiled
        # signature of the walk for every input (each costs a cache load)
        self.chunks = [tuple(_read_only(np.asarray(a).view()) for a in c) for c in chunks]
        self.edge_col = np.array([c for c, _ in edges], dtype=np.int64)
        self.edge_end = np.array([e for _, e in edges], dtype=np.bool_)
        self.ext_col = np.array([x[0] for x in extremes], dtype=np.int64)
        self.ext_float = np.array([x[1] for x in extremes], dtype=np.bool_)
        self.ext_max = np.array([x[2] for x in extremes], dtype=np.bool_)
        # how each extreme's row is found (EXT_COMPARED when not given)
        self.ext_at = [np.int64(x[4] if len(x) > 4 else EXT_COMPARED) for x in extremes]
        self.ext_at += [np.int64(EXT_COMPARED)] * (WALK_EXTREMES - len(extremes))
        if len(extremes) > WALK_EXTREMES or len(edges) > WALK_EDGES:
            raise ValueError(f"at most {WALK_EDGES} edges and {WALK_EXTREMES} MIN/MAX per walk")
        self.ext_member = np.zeros((WALK_EXTREMES, max(n_vars, 1)), dtype=np.bool_)
        for j, x in enumerate(extremes):
            self.ext_member[j, :len(x[3])] = x[3]
        if len(landings) > WALK_LANDINGS:
            raise ValueError(f"at most {WALK_LANDINGS} FIRST/LAST landings per walk")
        self.n_land = len(landings)
        self.land_member = np.zeros((WALK_LANDINGS, max(n_vars, 1)), dtype=np.bool_)
        self.land_first = np.zeros(WALK_LANDINGS, dtype=np.bool_)
        for j, (member, first) in enumerate(landings):
            self.land_member[j, :len(member)] = member
            self.land_first[j] = first


def _read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)      # one array type with the Arrow buffers' views
    return a


def _pieces(ends: np.ndarray, bounds: np.ndarray, chunks: list) -> list:
    """``(first match, end match, first row, words)`` covering every match in
    order: runs of matches whose rows lie in one chunk read its arrays; a
    match whose rows may cross a chunk border reads a copy of its rows (from
    the previous match's end to its own: matches do not overlap, and come in
    row order). Why not groups: a group of ``WALK_CHUNK`` matches across a
    border copied all its rows (a Parquet file read whole has a chunk per
    row group: on 40 chunks, 25 MB copied, 3 ms of ``v_shape``)."""
    m = ends.shape[0]
    if not m:
        return []
    if not chunks:                  # no column read: one typed placeholder for numba
        return [(0, m, 0, (_read_only(np.zeros(1, np.uint64)),))]
    bounds = np.asarray(bounds, dtype=np.int64)
    inner = bounds[1:-1]
    # per border, the first match that ends past it, and whether its rows
    # (from the previous match's end) may begin before it
    after = np.searchsorted(ends, inner, side="right")
    before = np.where(after > 0, ends[np.maximum(after - 1, 0)], bounds[0])
    crossing = {int(j) for j, b, p in zip(after.tolist(), inner.tolist(), before.tolist())
                if j < m and p < b}
    cuts = sorted({0, m} | {int(j) for j in after.tolist() if j < m}
                  | {j + 1 for j in crossing})
    last_chunk = len(chunks) - 1
    out = []
    for a, b in zip(cuts, cuts[1:]):
        if a in crossing:           # one match: a copy of its rows
            lo = int(bounds[0]) if a == 0 else int(ends[a - 1])
            hi = int(ends[a])
            c0 = int(np.searchsorted(bounds, lo, side="right")) - 1
            c1 = int(np.searchsorted(bounds, hi - 1, side="right")) - 1
            words = tuple(_read_only(np.concatenate(
                [chunks[c][k][max(lo, int(bounds[c])) - int(bounds[c]):
                              min(hi, int(bounds[c + 1])) - int(bounds[c])]
                 for c in range(c0, c1 + 1)])) for k in range(len(chunks[0])))
            out.append((a, a + 1, lo, words))
            continue
        # the chunk of the run's last row (empty matches alone at the
        # input's end read no row: any chunk serves)
        c = min(max(int(np.searchsorted(bounds, int(ends[b - 1]) - 1, side="right")) - 1, 0),
                last_chunk)
        out.append((a, b, int(bounds[c]), chunks[c]))
    return out


def run_unanchored_measured(classes: np.ndarray, offsets: np.ndarray, tables,
                            walk: WalkColumns, compiled: bool = True,
                            stream: tuple = ()) -> tuple:
    """:func:`run_unanchored` for ONE ROW PER MATCH: the walk computes the
    per-match values ``walk`` asks for (:func:`walk_measures`) instead of
    writing the labels. ``(starts, last rows (inclusive, where
    run_unanchored gives ends), partitions, errors, label_offsets, paths,
    walked)``: ``label_offsets()`` gives the CSR
    offsets of the labels and ``paths()`` ``(labels, excluded)``, on demand
    (the labels by a second walk, from the row keys kept);
    ``walked``: ``{"numbers": each match's number in its partition, from 1
    (computed in passing), "lengths": its rows, "edges": uint64 (edges x
    matches), "ext_rows": int64 (extremes x matches), "ext_values": per
    extreme its values as uint64 words, "ext_nan": bool per extreme (a
    counted key is NaN), "ext_gap": bool per extreme (a match has no row
    for it), "any_empty": whether a match is empty,
    "landings": int64 rows (landings x matches, -1 none), "per_partition":
    the matches of each partition}``."""
    offsets = np.asarray(offsets, dtype=np.int64)
    ends, codes, partitions, numbers, row_keys, resume, kernels, per_partition = _scan(
        classes, offsets, tables, compiled, stream)
    m = ends.shape[0]
    starts = B.empty(m, np.int64)
    # the walk writes each match's length (COUNT(*)); one cumulative sum
    # makes the label offsets when something reads them
    lengths = B.empty(m, np.int64)
    n_edge, n_ext = walk.edge_col.shape[0], walk.ext_col.shape[0]
    edge_out = B.empty((n_edge, m), np.uint64)
    ext_row = B.empty((n_ext, m), np.int64)
    ext_val = [B.empty(m if x < n_ext else 1,
                       np.float64 if x >= n_ext or walk.ext_float[x] else np.int64)
               for x in range(WALK_EXTREMES)]
    n_groups = -(-m // WALK_CHUNK)
    flags = np.zeros((max(n_groups, 1), WALK_FLAGS), dtype=np.bool_)
    _, _, _, lineage, thread_shift = _table_words(tables)
    # a MAX runs as a MIN of reversed keys (toward_min), from the largest key
    dtypes = [ext_val[x].dtype for x in range(WALK_EXTREMES)]
    orient = [_orient(dtypes[x], bool(x < n_ext and walk.ext_max[x]))
              for x in range(WALK_EXTREMES)]
    none = [dtypes[x].type(np.inf if dtypes[x].kind == "f" else np.iinfo(np.int64).max)
            for x in range(WALK_EXTREMES)]
    edge_outs = [edge_out[j] if j < n_edge else np.zeros(1, np.uint64)
                 for j in range(WALK_EDGES)]
    land_out = B.empty((walk.n_land, m), np.int64)
    land_outs = [land_out[j] if j < walk.n_land else np.zeros(1, np.int64)
                 for j in range(WALK_LANDINGS)]
    ext_rows = [ext_row[x] if x < n_ext else np.zeros(1, np.int64)
                for x in range(WALK_EXTREMES)]
    pieces = []
    for m0, m1, lo, words in _pieces(ends, walk.bounds, walk.chunks):
        edges = [words[walk.edge_col[j]] if j < n_edge else _NO_WORDS
                 for j in range(WALK_EDGES)]
        # each extreme's keys typed (float64 or int64)
        keys = [words[walk.ext_col[x]].view(dtypes[x]) if x < n_ext else _NO_KEYS
                for x in range(WALK_EXTREMES)]
        pieces.append((m0, m1, lo, edges, keys))

    def run(a: int, b: int) -> None:
        """Groups ``a .. b-1`` (their matches), piece by piece."""
        first, last = a * WALK_CHUNK, min(b * WALK_CHUNK, m)
        for m0, m1, lo, edges, keys in pieces:
            if max(m0, first) < min(m1, last):
                kernels[4](np.int64(max(m0, first)), np.int64(min(m1, last)), ends, codes,
                           row_keys, lineage, np.int64(thread_shift), starts,
                           lengths, np.int64(lo), np.int64(n_edge), *edges,
                           walk.edge_end, *edge_outs, np.int64(n_ext), keys[0], walk.ext_member[0],
                           orient[0], none[0], walk.ext_at[0], keys[1], walk.ext_member[1],
                           orient[1], none[1], walk.ext_at[1], *ext_rows, ext_val[0],
                           ext_val[1], flags, np.int64(walk.n_land), walk.land_member[0],
                           walk.land_first[0], walk.land_member[1], walk.land_first[1],
                           walk.land_member[2], walk.land_first[2], walk.land_member[3],
                           walk.land_first[3], *land_outs)
    # One hand-off to the thread pool for all the pieces (the kernel drops
    # the GIL), not a parallel launch per chunk of the columns; pieces of
    # about equal rows (matches are longer in some partitions than others).
    _in_pieces(run, _rows_before_groups(ends, n_groups), compiled, PIECES_PER_THREAD)

    def label_offsets() -> np.ndarray:
        out = B.empty(m + 1, np.int64)
        out[0] = 0
        np.cumsum(lengths, out=out[1:])
        return out

    def paths() -> tuple:
        got = _labels(ends + 1, codes, row_keys, tables, B.empty(m, np.int64), kernels,
                      compiled)
        return got[1], got[2]
    seen = flags.any(axis=0)
    walked = {"numbers": numbers, "lengths": lengths, "edges": edge_out, "ext_rows": ext_row,
              "landings": land_out, "ext_values": [v.view(np.uint64) for v in ext_val[:n_ext]],
              "ext_nan": seen[:n_ext], "ext_gap": seen[WALK_EXTREMES:WALK_EXTREMES + n_ext],
              "any_empty": bool(seen[2 * WALK_EXTREMES]), "per_partition": per_partition}
    return (starts, ends, partitions, _errors(offsets, resume), label_offsets, paths, walked)
