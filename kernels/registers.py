"""Pike VM whose threads carry registers: the body of the register engine.

What: for each partition, the reference engine's match loop (search at the
current row, record the match, resume per AFTER MATCH SKIP) with its Pike VM
(priority-ordered threads, epsilon closure as a priority-ordered DFS entering
each (state, thread content) once per step, lower-priority threads cut at
MATCH, possessive ASSERT_NOT guards), except that a thread carries a
fixed-size row of registers (int64 and float64) instead of its path. Two
threads in the same NFA state merge (the higher-priority one stays) only when
their registers are equal: the DEFINE conditions read nothing else, so every
future evaluation is then equal. Labels come from a back-pointer log (parent
node, variable, excluded mark), one node per consumed row, reset per search.

The query-specific parts are two generated functions reached as globals:
``APPLY(v, q, ...)`` updates a register row for "row q is mapped to v" and
``PRED(v, q, ...)`` evaluates DEFINE of v at row q on an updated row
(0 false, 1 true, 2 the interpreter raises, 3 not representable here: the
host reruns that partition with the reference engine, which produces the
exact result or error). The DEFINEs' literals are not in that code: they are
read from ``ci`` (int64: integers, booleans, labels) and ``cf`` (float64),
arguments passed through, so queries differing only in constants share one
compiled kernel. gpu_mr/engines/registers.py generates them and
clones these bodies with them as globals, then runs the clones as plain
Python (small inputs) or compiled with ``numba.njit``.

Buffers are fixed arrays passed in; when one is too small the kernel stops
with GROW and which buffer, and the host enlarges it and calls again, which
resumes at the search that stopped (the output so far is kept).
Cost: O(rows scanned x live threads x (registers + DEFINE cost)) per search.

Compiled, ``run_partitions`` is the only function numba calls: the others
(``closure``, APPLY / PRED and what they call) are inlined into it
(``inline='always'``), as a call between compiled functions passes and
reference-counts every array argument, which cost more than the work.
"""

from __future__ import annotations

import math

import numpy as np

CONSUME, SPLIT, EPS, ASSERT_START, ASSERT_END, MATCH, ASSERT_NOT = range(7)
# Whether the program may hold an ASSERT_NOT guard: a query's generated code
# sets it False when its pattern has none, so that numba prunes the guard's
# branch of ``closure`` before inlining the predicates into it (each copy of
# them costs compile time: 9.8 -> 3.3 s for the proposal's query, its
# first call on a machine; the kernel's speed is unchanged).
GUARDS = True

# kernel status
DONE = 0
ERROR = 2          # the interpreter raises here: rerun with the reference engine
FALLBACK = 3       # a value leaves what registers represent exactly: rerun likewise
GROW = 4           # a buffer is full (detail says which)
SKIP_ERROR = 5     # AFTER MATCH SKIP TO ... cannot resume: rerun for the exact error
OPEN = 6           # a stream's batch: the search at ctr[C_POS] needs rows not yet read

# which buffer to grow
B_THREADS, B_POOL, B_SEEN, B_LOG, B_MATCHES, B_LABELS = range(6)

# counters (one int64 array so helper calls need not return them), and where
# to resume after GROW (C_POS -1: at the partition's start)
C_NXT, C_ENT, C_POOL, C_LOG, C_STAMP, C_DETAIL, C_POS, C_NUM, C_M0, C_L0 = range(10)
# where the next thread list and register rows begin (0 or half the buffer)
C_TB, C_PB = 10, 11
# A stream's batch (0: off, so zeroed counters run whole partitions):
# C_OPEN_HI, the end row + 1 of the partition the batch leaves open; C_OPEN_AT,
# the row from which its rows are unknown to a search (the end less NEXT's
# reach); C_OPEN_HIT, set when a search's outcome depended on them;
# C_CONT_LO, the first row + 1 of a partition begun in an earlier batch (its
# first row here is not the partition's: ``^`` never holds there).
C_OPEN_HI, C_OPEN_AT, C_OPEN_HIT, C_CONT_LO = 12, 13, 14, 15
N_COUNTERS = 16

SKIP_PAST_LAST_ROW, SKIP_TO_NEXT_ROW, SKIP_TO_FIRST, SKIP_TO_LAST = range(4)

INT64_MIN = -9223372036854775808
INT64_MAX = 9223372036854775807


# ----------------------------------------------------------- arithmetic helpers
# Exact int64 operations with the interpreter's rules; ok False means the
# interpreter raises (overflow, division by zero). They never overflow
# themselves, so they give the same results as plain Python ints and as numba.

def add_i64(a, b):
    if (b > 0 and a > INT64_MAX - b) or (b < 0 and a < INT64_MIN - b):
        return 0, False
    return a + b, True


def sub_i64(a, b):
    if (b < 0 and a > INT64_MAX + b) or (b > 0 and a < INT64_MIN + b):
        return 0, False
    return a - b, True


def tdiv(x, y):
    """Truncating division of int64s (y != 0, never INT64_MIN by -1)."""
    q = x // y
    if q < 0 and q * y != x:
        q += 1
    return q


def mul_i64(a, b):
    if a == 0 or b == 0:
        return 0, True
    if a > 0:
        if b > 0:
            if a > tdiv(INT64_MAX, b):
                return 0, False
        elif b < tdiv(INT64_MIN, a):
            return 0, False
    else:
        if b > 0:
            if a < tdiv(INT64_MIN, b):
                return 0, False
        elif b < tdiv(INT64_MAX, a):
            return 0, False
    return a * b, True


def div_i64(a, b, want_rem):
    """Truncating division (or its remainder); ok False on b == 0 or overflow."""
    if b == 0:
        return 0, False
    if b == -1:
        if want_rem:
            return 0, True
        if a == INT64_MIN:
            return 0, False
        return -a, True
    q = a // b
    if q < 0 and q * b != a:
        q += 1
    if want_rem:
        return a - b * q, True
    return q, True


def neg_i64(a):
    if a == INT64_MIN:
        return 0, False
    return -a, True


def div_f64(a, b):
    if b == 0.0:
        if a == 0.0 or a != a:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def mod_f64(a, b):
    """A double's ``%``: C's fmod (np.fmod: numba has no math.fmod), NaN for
    a zero divisor or an infinite dividend, as the interpreter and masks."""
    if b == 0.0 or a != a or b != b or a == math.inf or a == -math.inf:
        return math.nan
    return fmod_c(a, b)


def sqrt_f64(x):
    if x < 0.0:
        return math.nan
    return math.sqrt(x)


def floor_f64(x):
    if x != x or x == math.inf or x == -math.inf:
        return x
    return floor_c(x)


def ceil_f64(x):
    if x != x or x == math.inf or x == -math.inf:
        return x
    return ceil_c(x)


# C's fmod, floor and ceil of doubles. numba's CPU target compiles numpy's
# (and has no math.fmod; its math.floor returns an int, as Python's); numba.cuda
# has no numpy ufunc for them but double-valued math.fmod/floor/ceil, which a
# device module binds to these names instead (DEVICE_PRIMITIVES).

def fmod_c(a, b):
    return float(np.fmod(a, b))


def floor_c(x):
    return float(np.floor(x))


def ceil_c(x):
    return float(np.ceil(x))


DEVICE_PRIMITIVES = {"fmod_c": "math.fmod", "floor_c": "math.floor", "ceil_c": "math.ceil"}


_EXACT = 9007199254740992  # 2**53: every int up to it converts to double exactly


def cmp_if(op, i, f):
    """Exact comparison of an int64 with a double, as Python compares them:
    (result, ok); ok False when |i| > 2**53 (the host falls back)."""
    if f != f:
        return op == 1, True
    if i > _EXACT or i < -_EXACT:
        return False, False
    return cmp_ff(op, float(i), f), True


def dec_f64(v, scale):
    """A decimal (its unscaled int64 at ``scale``) as the double Python's
    ``float(Decimal)`` gives, correctly rounded: (value, ok); ok False past
    2**53 or scale 22, where one IEEE division of exact operands is not
    that double (the host falls back)."""
    if v > _EXACT or v < -_EXACT or scale > 22:
        return 0.0, False
    p = 1.0
    for _ in range(scale):
        p *= 10.0                   # every power of ten to 1e22 is exact
    return float(v) / p, True


def cmp_ff(op, a, b):
    """op: 0 =, 1 <>, 2 <, 3 <=, 4 >, 5 >="""
    if op == 0:
        return a == b
    if op == 1:
        return a != b
    if op == 2:
        return a < b
    if op == 3:
        return a <= b
    if op == 4:
        return a > b
    return a >= b


def same_float(a, b):
    if a != a:
        return b != b
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


# --------------------------------------------------------------------- the VM

def regs_equal(pi, pf, r1, r2, ki, kf):
    if r1 == r2:
        return True
    for k in range(ki):
        if pi[r1, k] != pi[r2, k]:
            return False
    for k in range(kf):
        if not same_float(pf[r1, k], pf[r2, k]):
            return False
    return True


def copy_regs(si, sf, src, di, df, dst, ki, kf):
    for k in range(ki):
        di[dst, k] = si[src, k]
    for k in range(kf):
        df[dst, k] = sf[src, k]


def closure(entry, node, row, q, lo, hi, cut, start, mno, op, out, out2, var,
            pi, pf, th_state, th_node, th_reg, seen_stamp, seen_head, ent_row,
            ent_next, stack, ctr, icols, fcols, valid, ci, cf):
    """Add the CONSUME/MATCH states reachable from ``entry`` at row ``q`` to
    the next thread list (the half of ``th_*`` from ctr[C_TB]), in priority
    order, each (state, registers) once per step; ASSERT_NOT's scratch
    register row is in the next half of the pools (from ctr[C_PB]). No
    variable may take a row at or after ``cut`` (``hi``, or a time limit's
    horizon of the search). Returns a status."""
    ki = pi.shape[1]
    kf = pf.shape[1]
    stamp = ctr[C_STAMP]
    sp = 0
    stack[sp] = entry
    sp += 1
    while sp > 0:
        sp -= 1
        s = stack[sp]
        if seen_stamp[s] != stamp:
            seen_stamp[s] = stamp
            seen_head[s] = -1
        e = seen_head[s]
        dup = False
        while e >= 0:
            if regs_equal(pi, pf, ent_row[e], row, ki, kf):
                dup = True
                break
            e = ent_next[e]
        if dup:
            continue
        n_ent = ctr[C_ENT]
        if n_ent >= ent_row.shape[0]:
            ctr[C_DETAIL] = B_SEEN
            return GROW
        ent_row[n_ent] = row
        ent_next[n_ent] = seen_head[s]
        seen_head[s] = n_ent
        ctr[C_ENT] = n_ent + 1
        o = op[s]
        if o == SPLIT:
            stack[sp] = out2[s]
            stack[sp + 1] = out[s]
            sp += 2
        elif o == EPS:
            stack[sp] = out[s]
            sp += 1
        elif o == ASSERT_START:
            if q == lo and lo + 1 != ctr[C_CONT_LO]:
                stack[sp] = out[s]
                sp += 1
        elif o == ASSERT_END:
            if q == hi:
                if hi + 1 == ctr[C_OPEN_HI]:
                    ctr[C_OPEN_HIT] = 1         # the partition may go on
                else:
                    stack[sp] = out[s]
                    sp += 1
        elif o == ASSERT_NOT:
            if GUARDS:
                fails = True
                if q >= cut and hi + 1 == ctr[C_OPEN_HI] and q >= ctr[C_OPEN_AT]:
                    ctr[C_OPEN_HIT] = 1             # the row is not read yet
                if q < cut:
                    if ctr[C_POOL] >= pi.shape[0] // 2:
                        ctr[C_DETAIL] = B_POOL
                        return GROW
                    scratch = ctr[C_PB] + ctr[C_POOL]
                    copy_regs(pi, pf, row, pi, pf, scratch, ki, kf)
                    v = var[s]
                    APPLY(v, q, start, mno, lo, hi, pi, pf, scratch, icols, fcols, valid, ci,
                          cf)
                    res = PRED(v, q, start, mno, lo, hi, pi, pf, scratch, icols, fcols, valid,
                               ci, cf)
                    if res >= 2:
                        return res
                    fails = res == 0
                if fails:
                    stack[sp] = out[s]
                    sp += 1
        else:
            n = ctr[C_NXT]
            if n >= th_state.shape[0] // 2:
                ctr[C_DETAIL] = B_THREADS
                return GROW
            t = ctr[C_TB] + n
            th_state[t] = s
            th_node[t] = node
            th_reg[t] = row
            ctr[C_NXT] = n + 1
    return DONE


def run_partitions(offsets, first_part, start_state, op, out, out2, var, excl, skip_kind,
                   skip_set, init_i, init_f, th_state, th_node, th_reg, pool_i, pool_f,
                   seen_stamp, seen_head, ent_row, ent_next, stack, log_par, log_var, log_exc,
                   ctr, icols, fcols, valid, ci, cf, m_part, m_num, m_start, m_end, labels,
                   lexc, out_ctr, horizon, timed):
    """Match partitions ``first_part ..``; matches go to ``m_*`` (count in
    out_ctr[0]) and their rows' labels to ``labels``/``lexc`` (count in
    out_ctr[1]). Returns (status, partition): DONE, or the partition where it
    stopped and why (detail in ctr[C_DETAIL]). With ``timed`` (a time
    limit), a search starting at row s takes no row at or after
    ``horizon[s]`` (gpu_mr/horizons.py); else ``horizon`` is never read.

    GROW keeps the output so far and records where to resume (ctr[C_POS] the
    search to redo, ctr[C_NUM] the matches of the partition before it,
    ctr[C_M0] / ctr[C_L0] the output counts at the partition's start): the
    host enlarges that buffer, keeping the output, and calls again with the
    same partition. Any other stop discards the partition's output.

    One search (the preferred match starting at ``pos``) is the loop below,
    written inline rather than as a function (see the module docstring). The
    thread lists (``th_*``) and register rows (``pool_*``) have two halves,
    the current step's and the next one's, which swap roles per step by
    index: swapping arrays would reference-count them."""
    ki = init_i.shape[0]
    kf = init_f.shape[0]
    n_thr = th_state.shape[0] // 2
    n_pool = pool_i.shape[0] // 2
    n_parts = offsets.shape[0] - 1
    for part in range(first_part, n_parts):
        lo = offsets[part]
        hi = offsets[part + 1]
        if part == first_part and ctr[C_POS] >= 0:
            pos = ctr[C_POS]
            number = ctr[C_NUM]
            m0 = ctr[C_M0]
            l0 = ctr[C_L0]
            ctr[C_POS] = -1
        else:
            pos = lo
            number = 0
            m0 = out_ctr[0]
            l0 = out_ctr[1]
        while pos < hi:
            # ---- search at pos: the start state's closure into half 0
            mno = number + 1
            ctr[C_STAMP] += 1
            ctr[C_NXT] = 0
            ctr[C_ENT] = 0
            ctr[C_TB] = 0
            ctr[C_PB] = 0
            for k in range(ki):
                pool_i[0, k] = init_i[k]
            for k in range(kf):
                pool_f[0, k] = init_f[k]
            ctr[C_POOL] = 1
            ctr[C_LOG] = 1
            end = -1
            end_node = 0
            cut = hi
            if timed and horizon[pos] < hi:
                cut = horizon[pos]
            opened = hi + 1 == ctr[C_OPEN_HI]
            if opened and ctr[C_OPEN_AT] < cut:
                cut = ctr[C_OPEN_AT]
            ctr[C_OPEN_HIT] = 0
            st = closure(start_state, 0, 0, pos, lo, hi, cut, pos, mno, op, out, out2, var,
                         pool_i, pool_f, th_state, th_node, th_reg, seen_stamp, seen_head,
                         ent_row, ent_next, stack, ctr, icols, fcols, valid, ci, cf)
            cur = 0                     # the half holding the current thread list
            n_cur = ctr[C_NXT]
            q = pos
            while st == DONE and n_cur > 0:
                nxt = 1 - cur
                ctr[C_STAMP] += 1
                ctr[C_NXT] = 0
                ctr[C_ENT] = 0
                ctr[C_POOL] = 0
                ctr[C_TB] = nxt * n_thr
                ctr[C_PB] = nxt * n_pool
                for t in range(cur * n_thr, cur * n_thr + n_cur):
                    s = th_state[t]
                    if op[s] == MATCH:
                        end = q
                        end_node = th_node[t]
                        break
                    if q >= cut:            # past the partition, or out of time
                        if opened and q >= ctr[C_OPEN_AT]:
                            ctr[C_OPEN_HIT] = 1     # or not read yet
                        continue
                    if ctr[C_POOL] >= n_pool:
                        ctr[C_DETAIL] = B_POOL
                        st = GROW
                        break
                    r = nxt * n_pool + ctr[C_POOL]
                    copy_regs(pool_i, pool_f, th_reg[t], pool_i, pool_f, r, ki, kf)
                    v = var[s]
                    APPLY(v, q, pos, mno, lo, hi, pool_i, pool_f, r, icols, fcols, valid, ci, cf)
                    res = PRED(v, q, pos, mno, lo, hi, pool_i, pool_f, r, icols, fcols, valid, ci,
                               cf)
                    if res >= 2:
                        st = res
                        break
                    if res == 1:
                        ctr[C_POOL] += 1
                        node = ctr[C_LOG]
                        if node >= log_par.shape[0]:
                            ctr[C_DETAIL] = B_LOG
                            st = GROW
                            break
                        log_par[node] = th_node[t]
                        log_var[node] = v
                        log_exc[node] = excl[s]
                        ctr[C_LOG] = node + 1
                        st = closure(out[s], node, r, q + 1, lo, hi, cut, pos, mno, op, out,
                                     out2, var, pool_i, pool_f, th_state, th_node, th_reg,
                                     seen_stamp, seen_head, ent_row, ent_next, stack, ctr, icols,
                                     fcols, valid, ci, cf)
                        if st != DONE:
                            break
                cur = nxt
                n_cur = ctr[C_NXT]
                q += 1
            # ---- the search's outcome
            if st == DONE and ctr[C_OPEN_HIT] != 0:
                # undecided until the next batch: the output so far stands
                ctr[C_POS] = pos
                ctr[C_NUM] = number
                return OPEN, part
            length = end - pos
            if st == DONE and end >= 0:
                if out_ctr[0] >= m_start.shape[0]:
                    ctr[C_DETAIL] = B_MATCHES
                    st = GROW
                elif out_ctr[1] + length > labels.shape[0]:
                    ctr[C_DETAIL] = B_LABELS
                    st = GROW
            if st == GROW:
                ctr[C_POS] = pos
                ctr[C_NUM] = number
                ctr[C_M0] = m0
                ctr[C_L0] = l0
                return GROW, part
            if st != DONE:
                out_ctr[0] = m0
                out_ctr[1] = l0
                return st, part
            if end < 0:
                pos += 1
                continue
            number += 1
            m = out_ctr[0]
            base = out_ctr[1]
            node = end_node
            for i in range(length - 1, -1, -1):
                labels[base + i] = log_var[node]
                lexc[base + i] = log_exc[node]
                node = log_par[node]
            m_part[m] = part
            m_num[m] = number
            m_start[m] = pos
            m_end[m] = end - 1
            out_ctr[0] = m + 1
            out_ctr[1] = base + length
            if length == 0:
                pos += 1
            elif skip_kind == SKIP_PAST_LAST_ROW:
                pos = end
            elif skip_kind == SKIP_TO_NEXT_ROW:
                pos = pos + 1
            else:
                target = -1
                for i in range(length):
                    if skip_set[labels[base + i]]:
                        target = pos + i
                        if skip_kind == SKIP_TO_FIRST:
                            break
                if target < 0 or target == pos:
                    out_ctr[0] = m0
                    out_ctr[1] = l0
                    return SKIP_ERROR, part
                pos = target
    return DONE, n_parts


# Functions that reach the generated APPLY / PRED (cloned per query) and those
# that do not (compiled once).
QUERY_FUNCTIONS = ("closure", "run_partitions")
SHARED_FUNCTIONS = ("regs_equal", "copy_regs", "tdiv", "add_i64", "sub_i64", "mul_i64",
                    "div_i64", "neg_i64", "div_f64", "mod_f64", "sqrt_f64", "floor_f64",
                    "ceil_f64", "cmp_if", "dec_f64", "cmp_ff", "same_float", "fmod_c", "floor_c",
                    "ceil_c")
