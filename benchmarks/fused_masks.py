"""The CPU engine's mask stage: numpy passes (masks.py) against one fused pass.

What: on ``ticks.py`` data sorted as ``stages.py`` sorts it, times the stage
``CpuEngine.prepare`` spends on DEFINEs -- masks.py's ``evaluate_detailed``,
``engines.cpu.class_bits`` and ``kernels.scan.present_classes`` -- against
``predicates/fused.py``'s ``class_bits`` (one compiled pass), checks that
both give the same bits and classes, and prints the best of ``--repeat``
next to one numpy pass ``p[1:] < p[:-1]``.
Why: the fused pass exists to make this stage cheaper; this says by how much.
Cost: a few seconds of data generation, then ``repeat x 3`` short stages.

Usage::

    python benchmarks/fused_masks.py --rows 1e7 --partitions 100 --query v_shape --repeat 5
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import run  # noqa: E402  (benchmarks/run.py: the queries)
import ticks  # noqa: E402

from gpu_mr import frames  # noqa: E402
from gpu_mr.analysis import analyze  # noqa: E402
from gpu_mr.engines.cpu import class_bits  # noqa: E402
from gpu_mr.kernels.scan import present_classes  # noqa: E402
from gpu_mr.predicates import fused  # noqa: E402
from gpu_mr.predicates import masks as M  # noqa: E402
from gpu_mr.syntax import parse_clause  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=run._count, default=10_000_000)
    ap.add_argument("--partitions", type=run._count, default=100)
    ap.add_argument("--query", default="v_shape", choices=sorted(run.QUERIES))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    table = ticks.generate(args.rows, args.partitions, seed=0)
    query = analyze(parse_clause(run.QUERIES[args.query].text), table.schema)
    data = frames.sort_for_matching(table, query.partition_columns, query.order_keys)
    price = table.column("price").combine_chunks().to_numpy()
    mask_set = M.compile_masks(query)
    n, n_vars = table.num_rows, len(query.primary_vars)

    def numpy_passes():
        bits = class_bits(query, mask_set.evaluate_detailed(data), n)
        return bits, present_classes(bits, 1 << n_vars)

    def fused_pass():
        return fused.class_bits(query, data)

    want, got = numpy_passes(), fused_pass()     # compiles (or loads) both first
    if got is None:
        print(f"the fused pass declines this query or data: {fused.supports(query)}")
        return 1
    assert np.array_equal(want[0], got[0]) and list(want[1]) == list(got[1])
    stages = {"numpy pass p[1:] < p[:-1]": lambda: price[1:] < price[:-1],
              "masks.py + class_bits + present_classes": numpy_passes,
              "fused.class_bits": fused_pass}
    best = {name: float("inf") for name in stages}
    for _ in range(args.repeat):
        for name, fn in stages.items():
            gc.collect()
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    unit = best["numpy pass p[1:] < p[:-1]"]
    print(f"# {args.query}, {n:,} rows in {table.column('price').num_chunks} chunks, "
          f"{args.partitions} partitions, best of {args.repeat}; {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| stage | ms | x numpy pass |\n| --- | --- | --- |")
    for name, s in best.items():
        print(f"| {name} | {s * 1e3:.1f} | {s / unit:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
