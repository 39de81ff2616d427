"""The sortedness kernels (kernels/frames_kernels.py) against naive Python.

The string pass reads Arrow's offsets and data buffers and takes blocks of
``STRING_BLOCK`` pairs at once; these tests compare it, plain and compiled,
with a per-pair comparison of Python ``bytes`` on random strings (empty,
NULL, non-ASCII, shared prefixes, embedded NUL bytes, long runs that fill
blocks), sliced arrays and every direction and NULL placement.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gpu_mr import frames
from gpu_mr.kernels import frames_kernels as fk

WORDS = ["", "a", "ab", "abc", "b", "ä", "äb", "é", "😀", "a\x00", "a\x00b", "zz", "AB"]


def naive_refine(values, undecided, first, descending, nulls_first):
    """(in order, ties after this key) pair by pair; values are bytes or None."""
    out = []
    for i in range(len(values) - 1):
        tied = True if first else bool(undecided[i])
        a, b = values[i], values[i + 1]
        if a is None and b is None:
            after, eq = False, True
        elif a is None:
            after, eq = not nulls_first, False
        elif b is None:
            after, eq = nulls_first, False
        else:
            after, eq = (a < b) if descending else (a > b), a == b
        if tied and after:
            return False, None
        out.append(tied and eq)
    return True, np.array(out, dtype=bool)


def random_strings(rng, n, null_rate, runs):
    """Sorted-looking runs of random words (or independent draws), some NULLs."""
    out = []
    while len(out) < n:
        w = WORDS[rng.integers(len(WORDS))]
        out += [w] * (int(rng.integers(1, 700)) if runs else 1)
    out = out[:n]
    if runs and rng.random() < 0.5:
        out.sort()
    if runs and n > 2 and rng.random() < 0.5:       # one pair swapped somewhere
        i = int(rng.integers(n - 1))
        out[i], out[i + 1] = out[i + 1], out[i]
    return [None if rng.random() < null_rate else s for s in out]


def _kernel_refine(kernel, arr, undecided, first, descending, nulls_first):
    piece = frames._string_piece(arr)
    u = np.empty(len(arr) - 1, dtype=bool) if first else undecided.copy()
    has_valid = piece.valid is not None
    ok = kernel(piece.offsets, piece.data, piece.valid if has_valid else frames._NO_VALID,
                has_valid, u, first, descending, nulls_first)
    return bool(ok), u


@pytest.mark.parametrize("seed", range(40))
def test_string_pass_matches_naive(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 3000))
    runs = seed % 4 != 0
    values = random_strings(rng, n + 3, [0.0, 0.0, 0.01, 0.3][seed % 4], runs)
    typ = [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()][seed % 4]
    start = int(rng.integers(0, 4))
    arr = pa.array(values, pa.string()).cast(typ).slice(start, n)   # offsets not at 0
    as_bytes = [None if v is None else v.encode() for v in values[start:start + n]]
    earlier = rng.random(n - 1) < 0.9                  # ties on an earlier key
    kernels = [fk.refine_strings]
    if fk.compiled() is not None:
        kernels.append(fk.compiled()[2])
    for first in (True, False):
        for descending in (False, True):
            for nulls_first in (False, True):
                ok, ties = naive_refine(as_bytes, earlier, first, descending, nulls_first)
                for kernel in kernels:
                    got_ok, got = _kernel_refine(kernel, arr, earlier, first, descending,
                                                 nulls_first)
                    assert got_ok == ok
                    if ok:
                        assert got.tolist() == ties.tolist()


def test_string_pass_sorted_runs_fill_blocks():
    """Long sorted runs (the block path) with the one disorder at each spot of
    a block, and equal lengths with different bytes inside a block."""
    block = fk.STRING_BLOCK
    base = ["abcd"] * (3 * block) + ["abce"] * (2 * block) + ["b"] * block
    arr = pa.array(base)
    ok, ties = _kernel_refine(fk.refine_strings, arr, None, True, False, False)
    assert ok and np.flatnonzero(~ties).tolist() == [3 * block - 1, 5 * block - 1]
    for pos in (0, 1, block - 1, block, 2 * block + 7, len(base) - 2):
        swapped = list(base)
        swapped[pos] = "abcz"                        # above its neighbours
        if pos + 1 < len(base) and swapped[pos] > swapped[pos + 1]:
            expect = False
        else:
            expect = naive_refine([s.encode() for s in swapped], None, True, False, False)[0]
        for kernel in [fk.refine_strings] + ([fk.compiled()[2]] if fk.compiled() else []):
            assert _kernel_refine(kernel, pa.array(swapped), None, True, False,
                                  False)[0] == expect


def test_tie_breaks_matches_flatnonzero():
    rng = np.random.default_rng(0)
    for m in (0, 1, 7, 8, 9, 64, 1000):
        ties = (rng.random(m) < 0.9).astype(np.uint8)
        expect = [0] + (np.flatnonzero(ties == 0) + 1).tolist() + [m + 1]
        words = ties[:m - m % 8].view(np.uint64)
        for kernel in [fk.partition_offsets] + ([fk.compiled()[3]] if fk.compiled() else []):
            assert kernel(ties, words, m - int(ties.sum()), m + 1).tolist() == expect


def _naive_string_then_number(strings, numbers, descending):
    """string_then_number's answer, pair by pair in Python: the partition
    starts, or -1 when a pair is out of order."""
    cuts = []
    for j in range(len(strings) - 1):
        a, b = strings[j].encode(), strings[j + 1].encode()
        if a > b:
            return -1
        if a < b:
            cuts.append(j + 1)
            continue
        x, y = (numbers[j + 1], numbers[j]) if descending else (numbers[j], numbers[j + 1])
        if x > y:
            return -1
    return cuts


@pytest.mark.parametrize("seed", range(36))
def test_string_then_number_with_partition_borders_inside_blocks(seed):
    """Runs shorter and longer than a block (a border inside most blocks:
    the run's end found by binary search), with one pair out of order at a
    random spot: in a run, across a border, a string out of place that the
    search may be fooled by, or a smaller string at a run's last row (the
    row before the border the search finds) or first row (the border);
    plain and compiled against Python."""
    rng = np.random.default_rng(seed)
    block = fk.STRING_BLOCK
    runs = rng.integers(1, 3 * block, 40)
    words = sorted({f"s{rng.integers(0, 10**6):06d}" + "x" * int(rng.integers(0, 3))
                    for _ in range(80)})[:len(runs)]
    strings = [w for w, r in zip(words, runs) for _ in range(r)]
    n = len(strings)
    numbers = np.concatenate([np.sort(rng.integers(0, 50, r)) for r in runs[:len(words)]])
    descending = seed % 2 == 1
    if descending:
        numbers = -numbers
    numbers = numbers.astype(np.int64)
    kind = seed % 6
    at = int(rng.integers(1, n - 1))
    borders = np.cumsum(runs[:len(words)])[:-1]
    border = int(borders[int(rng.integers(0, len(borders)))])
    if kind == 1:                                   # a number out of order
        numbers[at] = numbers[at - 1] + (-5 if not descending else 5)
    elif kind == 2:                                 # a string out of place
        strings[at] = strings[0] if at > runs[0] else strings[-1]
    elif kind == 3:                                 # two rows swapped across a border
        strings[border - 1], strings[border] = strings[border], strings[border - 1]
    elif kind == 4:                                 # a run's last row below its run
        strings[border - 1] = "a"
    elif kind == 5:                                 # a run's first row below the run before
        strings[border] = "a"
    arr = pa.array(strings)
    offsets = np.frombuffer(arr.buffers()[1], np.int32)[:n + 1]
    data = np.frombuffer(arr.buffers()[2], np.uint8)
    want = _naive_string_then_number(strings, numbers.tolist(), descending)
    for kernel in [fk.partition_and_order] + ([fk.compiled()[4]] if fk.compiled() else []):
        cuts = np.empty(n, np.int64)
        count = kernel(offsets, data, numbers, descending, cuts)
        got = -1 if count < 0 else cuts[:count].tolist()
        assert got == want, (kernel, kind, at)
