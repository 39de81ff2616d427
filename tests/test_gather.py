"""The gather kernels of MEASURES (kernels/gather.py) and the column gathers
of measures.py built on them, against numpy and Arrow ``take``."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gpu_mr import measures, strings
from gpu_mr.kernels import gather as G


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("n_sets", [1, 3, 6])
@pytest.mark.parametrize("nulls", [False, True])
def test_gather_sets_matches_take(compiled, n_sets, nulls, monkeypatch):
    """Several row sets (-1 for none) from a column in chunks of uneven
    size, one of them sliced, with and without NULLs."""
    monkeypatch.setattr(measures, "G_MIN_ROWS", 0 if compiled else 10**9)
    monkeypatch.setattr(G, "warm", compiled)      # not loaded yet: the plain bodies
    monkeypatch.setattr(G, "plain_values", 0)
    rng = np.random.default_rng(n_sets)
    n = 3000
    values = rng.integers(-2**40, 2**40, n + 5)
    mask = rng.random(n + 5) < 0.2 if nulls else None
    base = pa.array(values, pa.int64(), mask=mask).slice(5)
    col = pa.chunked_array([base.slice(0, 1000), base.slice(1000, 1), base.slice(1001)])
    for typ in (pa.int64(), pa.timestamp("ms"), pa.float64(), pa.int32(), pa.date32()):
        if typ == pa.date32():
            typed = pa.chunked_array([c.cast(pa.int32(), safe=False).view(typ)
                                      for c in col.chunks])
        else:
            typed = pa.chunked_array([c.cast(typ, safe=False) for c in col.chunks])
        src = measures._fixed_chunks(typed)
        sets = [np.where(rng.random(500) < 0.1, -1, rng.integers(0, n, 500)).astype(np.int64)
                for _ in range(n_sets)]
        combined = typed.combine_chunks()
        for rows, (vals, valid) in zip(sets, measures._gather_sets(src, sets)):
            got = measures._fixed_array(src, vals, valid)
            idx = pa.array(np.where(rows < 0, 0, rows), pa.int64(), mask=rows < 0)
            assert got.equals(combined.take(idx))


def test_gather_spans_skip_other_partitions():
    """With spans, each chunk's pass covers only the outputs of the
    partitions overlapping it (found from unsorted output rows); the result
    is the same."""
    offsets = np.array([0, 4, 10, 10, 16], np.int64)        # an empty partition
    col = pa.chunked_array([pa.array(np.arange(7)), pa.array(np.arange(7, 16))])
    source = np.array([2, 0, 5, 12, 11, 10], np.int64)      # overlapping matches
    rows = np.array([1, 3, 6, 10, -1, 15], np.int64)
    spans = measures._source_spans(offsets, source)
    assert spans(0, 7) == (0, 3) and spans(7, 16) == (2, 6)
    src = measures._fixed_chunks(col)
    vals, valid = measures._gather_sets(src, [rows], spans)[0]
    assert measures._fixed_array(src, vals, valid).to_pylist() == [1, 3, 6, 10, None, 15]


@pytest.mark.parametrize("compiled", [False, True])
def test_repeat_strings(compiled):
    src = pa.array(["", "ab", "ä😀", "x" * 40], pa.large_string())
    index = np.array([0, 1, 1, 1, 3, 3, 2, 1, 0, 0, 2], np.int64)
    piece = measures._string_piece(src)
    lengths = np.diff(piece.offsets)
    out_offsets = np.empty(len(index) + 1, np.int64)
    out_data = np.empty(int(lengths[index].sum()), np.uint8)
    G.kernels(compiled)[1](piece.offsets, piece.data, index, out_offsets, out_data)
    got = pa.Array.from_buffers(pa.large_string(), len(index),
                                [None, pa.py_buffer(out_offsets), pa.py_buffer(out_data)])
    assert got.to_pylist() == src.take(pa.array(index)).to_pylist()


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string(), pa.binary()])
@pytest.mark.parametrize("runs", [True, False])
@pytest.mark.parametrize("pieces", [1, 3])
def test_repeat_small_strings_as_take(typ, runs, pieces, monkeypatch):
    """strings.repeat_strings (partition keys with runs, CLASSIFIER one
    output at a time, cut into pieces on threads) equals Arrow's take, NULLs
    where ``valid`` is False."""
    from gpu_mr.kernels import threads
    monkeypatch.setattr(threads, "MIN_WORK", 1)
    monkeypatch.setattr(threads, "thread_count", lambda: pieces)
    values = ["", "ab", "ä😀", "x" * 40]
    src = pa.array([v.encode() if typ == pa.binary() else v for v in values], typ)
    rng = np.random.default_rng(pieces + 2 * runs)
    index = np.repeat(rng.integers(0, 4, 300), rng.integers(1, 6, 300)).astype(np.int16)
    for valid in (None, rng.random(len(index)) < 0.8):
        got = strings.repeat_strings(src, index, valid, runs=runs, compiled=True)
        want = src.take(pa.array(index.astype(np.int64),
                                 mask=None if valid is None else ~valid))
        assert got.type == typ
        assert got.to_pylist() == want.to_pylist()
        got.validate(full=True)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("small", [
    pa.array(["", "SYM1", "ä😀", "x" * 40]), pa.array(["a", "", "bc", ""], pa.large_string()),
    pa.array([b"\x00", b"", b"zz", b"q"]), pa.array([5, -1, 2**40, 0], pa.int64()),
    pa.array([1, 2, 3, 4], pa.int16()),
    pa.array([0, 10**12, 5, 7], pa.timestamp("us", tz="UTC")),
    pa.array(["skipped", "AB", "", "CDE", "F"]).slice(1),      # offsets not from 0
])
def test_fill_runs_is_a_take_of_sorted_runs(small, compiled, monkeypatch):
    """measures._fill_runs (a partition key per output row, one run per
    partition) equals Arrow's take, with empty runs and empty strings, by
    the compiled pass (kernels/gather.py string_runs) or numpy's copies;
    the latter declines past its run limit for strings."""
    counts = np.array([3, 0, 1, 5])
    index = np.repeat(np.arange(4), counts)
    monkeypatch.setattr(measures, "G_MIN_ROWS", 0 if compiled else 10**9)
    monkeypatch.setattr(G, "warm", compiled)      # not loaded yet: the plain bodies
    monkeypatch.setattr(G, "plain_values", 0)
    monkeypatch.setattr(measures, "_MIN_RUN_ROWS", 1)
    got = measures._fill_runs(small, counts)
    assert got.type == small.type
    got.validate(full=True)
    assert got.to_pylist() == small.take(pa.array(index)).to_pylist()
    monkeypatch.setattr(measures, "_MIN_RUN_ROWS", 4)     # 9 rows in 3 runs: too short
    if compiled or pa.types.is_integer(small.type) or pa.types.is_timestamp(small.type):
        assert measures._fill_runs(small, counts).equals(got)     # any runs
    else:
        assert measures._fill_runs(small, counts) is None


@pytest.mark.parametrize("compiled", [False, True])
def test_expand_matches_in_pieces(compiled, monkeypatch):
    """ALL ROWS output rows (measures.output_rows' usual case) from the
    kernel, whole or in pieces on threads: each element's match and row."""
    from gpu_mr.engines.base import MatchArrays
    from gpu_mr.kernels import threads
    monkeypatch.setattr(measures, "G_MIN_ROWS", 0 if compiled else 10**9)
    monkeypatch.setattr(G, "warm", compiled)      # not loaded yet: the plain bodies
    monkeypatch.setattr(G, "plain_values", 0)
    monkeypatch.setattr(threads, "MIN_WORK", 1)
    monkeypatch.setattr(threads, "thread_count", lambda: 3)
    lengths = np.array([1, 4, 2, 7, 1, 3])
    starts = np.array([0, 3, 9, 12, 30, 40])
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    n = int(offsets[-1])
    ma = MatchArrays(np.zeros(6, np.int64), np.arange(1, 7), starts, starts + lengths - 1,
                     offsets, np.zeros(n, np.int16), np.zeros(n, bool))
    q = type("Q", (), {"rows_per_match": "ALL", "empty_matches": "SHOW"})()
    rows = measures.output_rows(q, None, ma)
    want_match = np.repeat(np.arange(6), lengths)
    assert rows.match.tolist() == want_match.tolist()
    assert rows.source.tolist() == (np.arange(n) + (starts - offsets[:-1])[want_match]).tolist()
    assert rows.running_is_element and rows.running.tolist() == list(range(n))


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("pieces", [1, 3])
def test_spread_per_match_values_over_elements(compiled, pieces, monkeypatch):
    """kernels/gather.py spread: a match's value (or index) plus ``step``
    times each element's place in the match, for matches shorter and longer
    than SPREAD_WIDTH and empty ones, whole or in pieces. The pieces run
    last to first: a piece writing past its end (they run at once on
    threads) would overwrite what the next one wrote."""
    from gpu_mr.kernels import threads
    from gpu_mr.kernels.threads import split
    monkeypatch.setattr(threads, "MIN_WORK", 1)
    rng = np.random.default_rng(pieces)
    lengths = np.concatenate((rng.integers(0, 4, 50), [G.SPREAD_WIDTH + 5, 1, 0, 20],
                              rng.integers(1, 12, 30)))
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    per_match = rng.integers(-2**62, 2**62, len(lengths))    # exact past float64's 2**53
    index = np.arange(len(lengths))
    spread = G.kernels(compiled)[4]
    for values, use_index, step in ((per_match, False, 0), (per_match, False, 1),
                                    (per_match, True, 0), (per_match, True, 3)):
        out = np.full(int(offsets[-1]), -7, np.int64)
        cuts = split(offsets, parts=pieces)
        assert len(cuts) == pieces
        for a, b in reversed(cuts):
            spread(values, use_index, offsets, a, b, step, out)
        place = np.arange(offsets[-1]) - np.repeat(offsets[:-1], lengths)
        want = np.repeat(index if use_index else values, lengths) + place * step
        assert out.tolist() == want.tolist()


def test_small_jobs_take_the_compiled_kernels_once_the_process_is_warm(monkeypatch):
    """kernels.gather.use_compiled: a small job runs the plain bodies until
    the plain bodies have handled WARM_AFTER values (or the compiled kernels
    were asked for), then every job takes the compiled kernels."""
    monkeypatch.setattr(G, "warm", False)
    monkeypatch.setattr(G, "plain_values", 0)
    monkeypatch.setattr(G, "WARM_AFTER", 100)
    assert G.use_compiled(500, 400)                     # large enough on its own
    assert not G.use_compiled(60, 400)
    assert not G.use_compiled(60, 400)                  # 120 values: warm from now on
    assert G.use_compiled(1, 400)
    monkeypatch.setattr(G, "warm", False)
    G.kernels(True)                                     # asked for: loaded
    assert G.use_compiled(1, 400)


def test_small_segments_take_the_compiled_kernels_once_warm(monkeypatch):
    """kernels.segmented.kernels, the same rule for the segmented kernels."""
    from gpu_mr.kernels import segmented
    monkeypatch.setattr(segmented, "warm", False)
    monkeypatch.setattr(segmented, "plain_elements", 0)
    monkeypatch.setattr(segmented, "WARM_AFTER", 100)
    assert segmented.kernels(60) is segmented.KERNELS
    assert segmented.kernels(60) is segmented.KERNELS   # 120 elements: warm
    assert segmented.kernels(1) is not segmented.KERNELS
