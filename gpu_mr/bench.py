"""``gpu-mr bench``: how fast the engines are on this machine, in one run.

What: generates deterministic ticks (``demo.generate_ticks``), sorted by
(symbol, ts) as a historical store holds them, runs the demo's V- and W-shape
queries with each engine and prints ratios measured in this one run: each
engine against the reference engine (which runs on the first
``reference_rows`` rows only, being slow; its result is compared with the
fast engine's on the same rows) and the whole pipeline against one numpy pass
``p[1:] < p[:-1]`` over the price column. The full benchmark suite (skewed
partitions, state-dependent queries, memory) is ``benchmarks/run.py`` in a
source checkout.
Cost: about ``rows`` / 1e7 seconds per query on one core, plus the reference
engine's ``reference_rows`` / 3e4 seconds.
"""

from __future__ import annotations

import time
from typing import Callable

import pyarrow.compute as pc

from .api import match_recognize
from .demo import V_SHAPE, W_SHAPE, generate_ticks
from . import backend


def _best(fn: Callable, repeat: int) -> tuple:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def run_bench(rows: int = 1_000_000, symbols: int = 100, reference_rows: int = 20_000,
              repeat: int = 3, log: Callable = print) -> list:
    """Run the benchmark; print its table with ``log``; return its records.

    >>> records = run_bench(rows=2_000, symbols=4, reference_rows=500, repeat=1,
    ...                     log=lambda line: None)
    >>> sorted(records[0])
    ['engine', 'identical', 'matches', 'numpy_ratio', 'query', 'rows_per_s', 'vs_reference']
    """
    table = generate_ticks(rows, symbols, seed=0)
    table = table.take(pc.sort_indices(table, [("symbol", "ascending"), ("ts", "ascending")]))
    table = table.combine_chunks()
    subset = table.slice(0, min(reference_rows, rows))
    prices = table.column("price").to_numpy()
    numpy_pass, _ = _best(lambda: prices[1:] < prices[:-1], max(repeat, 5))
    # The GPU engine on a real device only: the CUDA simulator is for tests.
    found = backend.detect()
    engines = (["gpu"] if not isinstance(found, str) and not found.simulated else []) + ["cpu"]
    records = []
    for name, clause in (("V-shape", V_SHAPE), ("W-shape", W_SHAPE)):
        ref_time, ref_out = _best(lambda: match_recognize(subset, clause, engine="reference"), 1)
        ref_rate = subset.num_rows / ref_time
        for engine in engines:
            match_recognize(subset, clause, engine=engine)           # compile, warm caches
            seconds, out = _best(lambda: match_recognize(table, clause, engine=engine), repeat)
            same = match_recognize(subset, clause, engine=engine).equals(ref_out)
            rate = rows / seconds
            records.append({"query": name, "engine": engine, "matches": out.num_rows,
                            "rows_per_s": rate, "vs_reference": rate / ref_rate,
                            "numpy_ratio": seconds / numpy_pass, "identical": same})
    log(f"{rows:,} ticks, {symbols} symbols, sorted; reference engine on the first "
        f"{subset.num_rows:,} rows; one numpy pass over price: {numpy_pass * 1e3:.1f} ms")
    log(f"{'query':9} {'engine':7} {'matches':>9} {'rows/s':>10} {'x reference':>12} "
        f"{'x numpy pass':>13} identical")
    for r in records:
        log(f"{r['query']:9} {r['engine']:7} {r['matches']:9,} {r['rows_per_s']:10.3g} "
            f"{r['vs_reference']:12.0f} {r['numpy_ratio']:13.1f} "
            f"{'yes' if r['identical'] else 'NO'}")
    return records


__all__ = ["run_bench"]
