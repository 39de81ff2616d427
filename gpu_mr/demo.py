"""Synthetic tick data and the demo's pattern queries.

``generate_ticks`` makes a deterministic, realistic-looking tick table: one
trade about every second per symbol (with jitter), prices following a
geometric random walk with fat-tailed returns and per-symbol volatility,
rounded to cents, and lot-sized volumes. It is vectorised numpy (no Python
loop per row), so it also serves the benchmarks: millions of rows take about a
second. The same seed always gives the same table, on every platform numpy's
``PCG64`` generator runs on.

``V_SHAPE`` and ``W_SHAPE`` are MATCH_RECOGNIZE clause bodies for
``gpu_mr.match_recognize``; ``gpu-mr demo`` runs both over ``generate_ticks``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["generate_ticks", "V_SHAPE", "W_SHAPE", "TICKERS"]

#: Names of the first symbols; more than these get ``SYM0009``-style names.
TICKERS = ("ACME", "BOLT", "CRUX", "DYNA", "EPIC", "FLUX", "GRID", "HALO")

# 09:30:00 on the first trading day of 2024, in microseconds since the epoch.
_SESSION_OPEN_US = int(np.datetime64("2024-01-02T09:30:00", "us").astype(np.int64))

# Seconds in a trading year (252 days of 6.5 hours): turns an annual
# volatility into a per-second one.
_TRADING_SECONDS_PER_YEAR = 252 * 6.5 * 3600

# Degrees of freedom of the Student-t returns: fat tails as in real ticks,
# finite variance so the volatility still means what it says.
_RETURN_DOF = 4


def generate_ticks(rows: int = 100_000, symbols: int = 8, seed: int = 0) -> pa.Table:
    """Generate a deterministic table of synthetic trades.

    Parameters
    ----------
    rows : int
        Total number of rows, split as evenly as possible over the symbols.
    symbols : int
        Number of distinct symbols (partitions).
    seed : int
        Seed of numpy's ``PCG64`` generator; equal seeds give equal tables.

    Returns
    -------
    pyarrow.Table
        Columns ``symbol`` (string), ``ts`` (timestamp[us]), ``price``
        (float64, cents) and ``volume`` (int64). Rows are ordered by ``ts``
        as a feed would deliver them (symbols interleaved); within a symbol
        ``ts`` strictly increases.

    Examples
    --------
    >>> t = generate_ticks(rows=1000, symbols=4, seed=1)
    >>> t.num_rows, t.column_names
    (1000, ['symbol', 'ts', 'price', 'volume'])
    >>> generate_ticks(rows=1000, symbols=4, seed=1).equals(t)
    True
    """
    rows = int(rows)
    symbols = int(symbols)
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    if symbols < 1:
        raise ValueError(f"symbols must be >= 1, got {symbols}")
    rng = np.random.default_rng(seed)

    # Rows per symbol: as even as possible, the first symbols taking the rest.
    counts = np.full(symbols, rows // symbols, dtype=np.int64)
    counts[: rows % symbols] += 1
    sym_id = np.repeat(np.arange(symbols), counts)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    first_of_symbol = np.zeros(rows, dtype=bool)
    first_of_symbol[starts[counts > 0]] = True

    # Times: gaps of 0.2 to 1.8 s (mean 1 s), whole microseconds, so ts
    # strictly increases within a symbol. Each symbol opens a little apart.
    gaps_us = rng.integers(200_000, 1_800_000, size=rows, endpoint=True)
    open_offset_us = rng.integers(0, 1_000_000, size=symbols)
    gaps_us[first_of_symbol] = open_offset_us[sym_id[first_of_symbol]]
    ts_us = _SESSION_OPEN_US + segmented_cumsum(gaps_us, starts, counts)

    # Prices: a geometric random walk per symbol. Start between $10 and $500
    # (log-uniform), annual volatility between 15% and 60%, scaled to each
    # tick's own time step; Student-t shocks normalised to unit variance.
    start_price = np.exp(rng.uniform(np.log(10.0), np.log(500.0), size=symbols))
    annual_vol = rng.uniform(0.15, 0.60, size=symbols)
    dt_years = gaps_us / 1e6 / _TRADING_SECONDS_PER_YEAR
    shocks = rng.standard_t(_RETURN_DOF, size=rows) * np.sqrt((_RETURN_DOF - 2) / _RETURN_DOF)
    log_ret = annual_vol[sym_id] * np.sqrt(dt_years) * shocks
    log_ret[first_of_symbol] = 0.0
    log_price = np.log(start_price)[sym_id] + segmented_cumsum(log_ret, starts, counts)
    price = np.maximum(np.round(np.exp(log_price), 2), 0.01)

    # Volumes: mostly round lots of 100 (geometric count), some odd lots.
    lots = rng.geometric(0.35, size=rows)
    odd = rng.random(rows) < 0.15
    volume = np.where(odd, rng.integers(1, 100, size=rows, endpoint=True), 100 * lots)

    # Deliver in time order, as a feed would: a stable sort on (ts, symbol).
    order = np.lexsort((sym_id, ts_us))
    names = np.array([_symbol_name(i) for i in range(symbols)], dtype=object)
    return pa.table(
        {
            "symbol": pa.array(names[sym_id[order]], type=pa.string()),
            "ts": pa.array(ts_us[order], type=pa.timestamp("us")),
            "price": pa.array(price[order], type=pa.float64()),
            "volume": pa.array(volume[order].astype(np.int64), type=pa.int64()),
        }
    )


def segmented_cumsum(values: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Cumulative sum restarting at each segment (segments are contiguous)."""
    total = np.cumsum(values)
    before = np.concatenate(([0], total))[starts]  # sum of everything before each segment
    return total - np.repeat(before, counts)


def _symbol_name(i: int) -> str:
    return TICKERS[i] if i < len(TICKERS) else f"SYM{i + 1:04d}"


#: A V: a run of at least three falling ticks, then at least three rising.
V_SHAPE = """\
PARTITION BY symbol
ORDER BY ts
MEASURES
    FIRST(A.ts)    AS start_ts,
    FIRST(A.price) AS start_price,
    LAST(B.price)  AS bottom,
    LAST(C.price)  AS end_price,
    LAST(C.ts)     AS end_ts,
    MATCH_NUMBER() AS mno
ONE ROW PER MATCH
AFTER MATCH SKIP PAST LAST ROW
PATTERN (A B{3,} C{3,})
DEFINE
    B AS price < PREV(price),
    C AS price > PREV(price)
"""

#: A W (double bottom): down, up, down, up, each leg at least two ticks.
W_SHAPE = """\
PARTITION BY symbol
ORDER BY ts
MEASURES
    FIRST(A.ts)    AS start_ts,
    LAST(B.price)  AS first_bottom,
    LAST(C.price)  AS middle_peak,
    LAST(D.price)  AS second_bottom,
    LAST(E.ts)     AS end_ts,
    COUNT(*)       AS ticks,
    MATCH_NUMBER() AS mno
ONE ROW PER MATCH
AFTER MATCH SKIP PAST LAST ROW
PATTERN (A B{2,} C{2,} D{2,} E{2,})
DEFINE
    B AS price < PREV(price),
    C AS price > PREV(price),
    D AS price < PREV(price),
    E AS price > PREV(price)
"""
