"""Per-stage times of ``engine="cpu"`` as multiples of one numpy pass.

What: on ``ticks.py`` data (pre-sorted, chunked as the generator writes it),
times each stage of the CPU engine's row-local path separately -- the
sortedness check and partition offsets (``frames.sort_for_matching``), the
DEFINE masks, classes and DFA tables (``CpuEngine.prepare``), the scan, path
recovery and numbering (``scan_to_matches``), the measures and output table
(``measures.assemble``) -- and ``match_recognize`` end to end, next to one
numpy pass ``p[1:] < p[:-1]`` over the price column, all interleaved in one
loop so that a busy machine slows them alike. Best of ``--repeat``.
The DEFINE stage is also timed the way it runs where the one compiled pass
(predicates/fused.py) declines: masks.py's numpy passes, packed and scanned
for the classes present (checked to give the same bits).
Why: the numpy ratio of ``run.py`` says how far the whole pipeline is from
one pass; this says which stage holds the difference (docs/benchmarks.md).
Cost: about ``repeat x 2`` end-to-end runs.

Usage::

    python benchmarks/stages.py --rows 1e7 --partitions 100 --query v_shape --repeat 7
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

import gpu_mr  # noqa: E402
from gpu_mr import frames  # noqa: E402
from gpu_mr.analysis import analyze  # noqa: E402
from gpu_mr.engines.cpu import CpuEngine, class_bits, scan_to_matches  # noqa: E402
from gpu_mr.kernels.scan import present_classes  # noqa: E402
from gpu_mr.measures import assemble  # noqa: E402
from gpu_mr.predicates import masks as M  # noqa: E402
from gpu_mr.syntax import parse_clause  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=run._count, default=10_000_000)
    ap.add_argument("--partitions", type=run._count, default=100)
    ap.add_argument("--query", default="v_shape", choices=sorted(run.QUERIES))
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    text = run.QUERIES[args.query].text
    table = ticks.generate(args.rows, args.partitions, seed=0)
    query = analyze(parse_clause(text), table.schema)
    engine = CpuEngine()
    price = table.column("price").combine_chunks().to_numpy()
    data = frames.sort_for_matching(table, query.partition_columns, query.order_keys)
    prepared = engine.prepare(query, data)
    if isinstance(prepared, str):
        print(f"not on the DFA path: {prepared}")
        return 1
    matches = scan_to_matches(query, data, *prepared)[0]
    gpu_mr.match_recognize(table, text, engine="cpu")         # compile everything first
    mask_set, n_vars = M.compile_masks(query), len(query.primary_vars)

    def numpy_masks():
        bits = class_bits(query, mask_set.evaluate_detailed(data), table.num_rows)
        return bits, present_classes(bits, 1 << n_vars) if n_vars <= 8 else None

    fallback = numpy_masks()
    if n_vars <= 8 and not (np.array_equal(fallback[0], prepared[0])
                            and list(fallback[1]) == np.unique(prepared[0]).tolist()):
        print("the numpy masks and the compiled pass disagree")
        return 1
    stages = {
        "numpy pass p[1:] < p[:-1]": lambda: price[1:] < price[:-1],
        "sortedness check, partitions": lambda: frames.sort_for_matching(
            table, query.partition_columns, query.order_keys),
        "masks, classes, DFA tables": lambda: engine.prepare(query, data),
        "(masks by numpy passes, where the compiled pass declines)": numpy_masks,
        "scan, recovery, numbering": lambda: scan_to_matches(query, data, *prepared),
        "measures, output table": lambda: assemble(query, data, matches),
        "end to end": lambda: gpu_mr.match_recognize(table, text, engine="cpu"),
    }
    best = {name: float("inf") for name in stages}
    for _ in range(args.repeat):
        for name, fn in stages.items():
            gc.collect()
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    unit = best["numpy pass p[1:] < p[:-1]"]
    print(f"# {args.query}, {args.rows:,} rows, {args.partitions} partitions, "
          f"{len(matches):,} matches, best of {args.repeat}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| stage | ms | x numpy pass |\n| --- | --- | --- |")
    for name, s in best.items():
        print(f"| {name} | {s * 1e3:.1f} | {s / unit:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
