"""Deterministic synthetic tick data for the benchmarks, written as Parquet.

What: a table of trades ``symbol`` (string), ``ts`` (timestamp[us]), ``price``
(float64) and ``volume`` (int64), with the same price model as
``gpu_mr.demo.generate_ticks`` (one trade about every second per symbol, a
geometric random walk with Student-t shocks and per-symbol volatility, cents,
lot-sized volumes) but with **skewed symbol sizes**: symbol sizes follow a
Zipf-like law (the k-th largest symbol gets a share proportional to
``1 / k**skew``), so a few symbols are huge and many are small, as in real
historical stores. ``skew=0`` splits the rows evenly.

Why not ``gpu_mr.demo.generate_ticks`` itself: it splits rows evenly, delivers
rows in feed (time) order and builds the whole table at once. Benchmarks need
skewed partitions, data already sorted by ``(symbol, ts)`` as most historical
stores hold it (so that the engines' sortedness check can skip the sort), and
tables larger than comfortable in memory (one partition of 1e8 rows), so this
module generates the rows in fixed-size chunks in ``(symbol, ts)`` order,
carrying each symbol's last time and price from one chunk to the next.

Cost: vectorised numpy, roughly a second per million rows on one core; when
writing Parquet in symbol order, memory is bounded by the chunk size.

Determinism: the same ``(rows, symbols, seed, skew, order)`` gives the same
table on every machine numpy's ``PCG64`` runs on. The chunk size is a fixed
constant (``CHUNK_ROWS``) for that reason: the random stream is drawn chunk by
chunk.

Command line::

    python benchmarks/ticks.py --rows 1e7 --symbols 100 -o ticks.parquet
    python benchmarks/ticks.py --rows 1e6 --symbols 10 --order time -o feed.parquet
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

# the model's names and arithmetic are gpu_mr.demo's: one model, two layouts
from gpu_mr.demo import TICKERS, segmented_cumsum  # noqa: E402

__all__ = ["symbol_counts", "symbol_names", "iter_batches", "generate", "write_parquet",
           "SCHEMA", "CHUNK_ROWS", "ORDERS"]

#: Rows generated per chunk. Part of the definition of the data (the random
#: stream is drawn per chunk), so never derive it from a flag. 2**22 rows keep
#: the temporaries of one chunk near 200 MB.
CHUNK_ROWS = 1 << 22

#: Row orders: ``symbol`` = sorted by (symbol, ts) as a historical store holds
#: it; ``time`` = sorted by (ts, symbol) as a feed delivers it (symbols
#: interleaved); ``random`` = a seeded shuffle.
ORDERS = ("symbol", "time", "random")

SCHEMA = pa.schema([("symbol", pa.string()), ("ts", pa.timestamp("us")),
                    ("price", pa.float64()), ("volume", pa.int64())])

# 09:30:00 on the first trading day of 2024, in microseconds since the epoch
# (as gpu_mr.demo).
_SESSION_OPEN_US = int(np.datetime64("2024-01-02T09:30:00", "us").astype(np.int64))
# Seconds in a trading year (252 days of 6.5 hours): annual -> per-second volatility.
_TRADING_SECONDS_PER_YEAR = 252 * 6.5 * 3600
# Student-t degrees of freedom: fat tails with a finite variance.
_RETURN_DOF = 4


def symbol_counts(rows: int, symbols: int, skew: float = 1.0, seed: int = 0) -> np.ndarray:
    """Rows per symbol (in symbol-name order), Zipf-like and deterministic.

    The k-th largest symbol gets ``rows / k**skew`` up to normalisation,
    rounded by largest remainder so the counts sum to ``rows`` exactly; when
    ``rows >= symbols`` every symbol gets at least one row. Sizes are then
    assigned to symbol names in a seeded random order, so that the big
    symbols are spread over the alphabet (and the first rows of a
    symbol-sorted table are not all one giant symbol).

    >>> symbol_counts(1000, 4, skew=0).tolist()
    [250, 250, 250, 250]
    >>> c = symbol_counts(10_000, 100, skew=1.0)
    >>> int(c.sum()), int(c.max()), int(c.min())
    (10000, 1928, 19)
    """
    rows, symbols = int(rows), int(symbols)
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    if symbols < 1:
        raise ValueError(f"symbols must be >= 1, got {symbols}")
    if skew < 0:
        raise ValueError(f"skew must be >= 0, got {skew}")
    weights = 1.0 / np.arange(1, symbols + 1, dtype=np.float64) ** skew
    exact = rows * weights / weights.sum()
    counts = np.floor(exact).astype(np.int64)
    rest = rows - int(counts.sum())
    # Largest remainder; the stable sort breaks ties by rank (bigger first).
    counts[np.argsort(-(exact - counts), kind="stable")[:rest]] += 1
    if rows >= symbols:
        # Give every symbol a row, taken from the largest ones (rank order).
        need = int((counts == 0).sum())
        counts[counts == 0] = 1
        i = 0
        while need:
            take = min(need, int(counts[i]) - 1)
            counts[i] -= take
            need -= take
            i += 1
    rng = np.random.default_rng([int(seed), 0x5EED])
    return counts[rng.permutation(symbols)]


def symbol_names(symbols: int) -> list:
    """Names whose byte order equals their index order (so a table sorted by
    symbol id is sorted by name): gpu_mr.demo's tickers, then zero-padded
    ``SYM0009``-style names wide enough for ``symbols``."""
    width = max(4, len(str(symbols)))
    return [TICKERS[i] if i < len(TICKERS) else f"SYM{i + 1:0{width}d}"
            for i in range(symbols)]


def iter_batches(rows: int, symbols: int, seed: int = 0, skew: float = 1.0
                 ) -> Iterator[pa.RecordBatch]:
    """Yield the table in ``(symbol, ts)`` order, ``CHUNK_ROWS`` rows a batch.

    Memory stays bounded by the chunk size whatever ``rows`` is: each symbol's
    last time and log-price are carried from one chunk to the next.
    """
    counts = symbol_counts(rows, symbols, skew, seed)
    ends = np.cumsum(counts)
    starts = ends - counts
    names = pa.array(symbol_names(symbols), type=pa.string())

    rng = np.random.default_rng(seed)
    # Per-symbol parameters, drawn once: open offset, start price ($10-$500,
    # log-uniform), annual volatility (15%-60%).
    open_offset_us = rng.integers(0, 1_000_000, size=symbols)
    log_start = rng.uniform(np.log(10.0), np.log(500.0), size=symbols)
    annual_vol = rng.uniform(0.15, 0.60, size=symbols)
    t_scale = np.sqrt((_RETURN_DOF - 2) / _RETURN_DOF)

    carry_ts = 0      # last ts of the symbol cut by the previous chunk
    carry_logp = 0.0  # and its last log-price
    for a in range(0, int(rows), CHUNK_ROWS):
        b = min(int(rows), a + CHUNK_ROWS)
        n = b - a
        pos = np.arange(a, b, dtype=np.int64)
        sym = np.searchsorted(ends, pos, side="right")
        first_of_symbol = pos == starts[sym]

        # Segments: runs of one symbol inside this chunk.
        seg_start = np.flatnonzero(np.concatenate(([True], sym[1:] != sym[:-1])))
        seg_len = np.diff(np.append(seg_start, n))
        seg_sym = sym[seg_start]
        continues = not first_of_symbol[0]  # first segment carries over?

        gaps_us = rng.integers(200_000, 1_800_000, size=n, endpoint=True)
        gaps_us[first_of_symbol] = open_offset_us[sym[first_of_symbol]]
        ts_base = np.full(len(seg_start), _SESSION_OPEN_US, dtype=np.int64)
        if continues:
            ts_base[0] = carry_ts
        ts_us = np.repeat(ts_base, seg_len) + segmented_cumsum(gaps_us, seg_start, seg_len)

        dt_years = gaps_us / 1e6 / _TRADING_SECONDS_PER_YEAR
        shocks = rng.standard_t(_RETURN_DOF, size=n) * t_scale
        log_ret = annual_vol[sym] * np.sqrt(dt_years) * shocks
        log_ret[first_of_symbol] = 0.0
        p_base = log_start[seg_sym].copy()
        if continues:
            p_base[0] = carry_logp
        log_price = np.repeat(p_base, seg_len) + segmented_cumsum(log_ret, seg_start, seg_len)
        price = np.maximum(np.round(np.exp(log_price), 2), 0.01)

        lots = rng.geometric(0.35, size=n)
        odd = rng.random(n) < 0.15
        volume = np.where(odd, rng.integers(1, 100, size=n, endpoint=True), 100 * lots)

        carry_ts, carry_logp = int(ts_us[-1]), float(log_price[-1])
        yield pa.record_batch(
            [names.take(pa.array(sym)), pa.array(ts_us, type=pa.timestamp("us")),
             pa.array(price, type=pa.float64()), pa.array(volume.astype(np.int64))],
            schema=SCHEMA)


def generate(rows: int, symbols: int, seed: int = 0, skew: float = 1.0,
             order: str = "symbol") -> pa.Table:
    """The whole table in memory, in the given row order.

    >>> t = generate(1000, 10, seed=1)
    >>> t.num_rows, t.column_names, t.schema.field("ts").type
    (1000, ['symbol', 'ts', 'price', 'volume'], TimestampType(timestamp[us]))
    >>> generate(1000, 10, seed=1).equals(t)
    True
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
    batches = list(iter_batches(rows, symbols, seed, skew))
    table = pa.Table.from_batches(batches, schema=SCHEMA)
    if order == "symbol" or table.num_rows == 0:
        return table
    if order == "time":
        # A feed: by time, ties by symbol (stable, deterministic).
        return table.sort_by([("ts", "ascending"), ("symbol", "ascending")])
    perm = np.random.default_rng([int(seed), 0x0DE5]).permutation(table.num_rows)
    return table.take(pa.array(perm))


def write_parquet(path: str, rows: int, symbols: int, seed: int = 0, skew: float = 1.0,
                  order: str = "symbol", row_group_size: int = 1 << 20) -> int:
    """Write the table to ``path`` (timestamps in microseconds); returns rows.

    Symbol order streams chunk by chunk (bounded memory); other orders build
    the table in memory first.
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
    kw = dict(coerce_timestamps="us", allow_truncated_timestamps=False, compression="zstd")
    if order != "symbol":
        table = generate(rows, symbols, seed, skew, order)
        pq.write_table(table, path, row_group_size=row_group_size, **kw)
        return table.num_rows
    written = 0
    with pq.ParquetWriter(path, SCHEMA, **kw) as writer:
        for batch in iter_batches(rows, symbols, seed, skew):
            writer.write_table(pa.Table.from_batches([batch]), row_group_size=row_group_size)
            written += batch.num_rows
        if written == 0:
            writer.write_table(SCHEMA.empty_table())
    return written


def _count(text: str) -> int:
    value = float(text)
    if value != int(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative whole number, got {text!r}")
    return int(value)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=_count, default=1_000_000, help="total rows (1e7 is fine)")
    ap.add_argument("--symbols", type=_count, default=100, help="number of symbols (partitions)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skew", type=float, default=1.0,
                    help="Zipf exponent of symbol sizes (0 = even; default 1.0)")
    ap.add_argument("--order", choices=ORDERS, default="symbol",
                    help="row order: symbol = sorted by (symbol, ts) (default); "
                         "time = feed order; random = shuffled")
    ap.add_argument("-o", "--output", required=True, help="Parquet file to write")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    n = write_parquet(args.output, args.rows, args.symbols, args.seed, args.skew, args.order)
    counts = symbol_counts(args.rows, args.symbols, args.skew, args.seed)
    print(f"wrote {n:,} rows, {args.symbols:,} symbols (largest {counts.max():,} rows, "
          f"smallest {counts.min():,}), order={args.order}, in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
