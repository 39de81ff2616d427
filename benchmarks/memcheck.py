"""Peak-memory check of one MATCH_RECOGNIZE run, meant to run in its own process.

What: generates one partition of ``--rows`` tick rows (``ticks.py``), runs a
query of ``run.py`` with ``engine="cpu"`` and prints one JSON line: the input
size, the resident memory before the run, the peak during it, and the growth
per input byte.

Why a subprocess: peak resident memory (Linux ``VmHWM``, or
``resource.getrusage``'s ``ru_maxrss``) is per process and only grows; a fresh
process measures one run and nothing else.

How: the generator's own temporaries and the JIT compilation (a warm-up on a
small slice) happen before the baseline. On Linux the peak is then reset
(``echo 5 > /proc/self/clear_refs``) so ``VmHWM`` holds the peak of the run
alone; where that is not possible the report says ``method: ru_maxrss`` and the
growth is a lower bound (the baseline is then the earlier peak).

Modes:

* ``in-memory``: the whole table is built first; growth is beyond the input
  columns, which are already resident.
* ``stream``: the table is first written to a temporary Parquet file (in
  ``(symbol, ts)`` order, bounded memory); then, after the baseline, it is
  read back ``--batch-rows`` rows at a time and fed to gpu_mr's streaming API
  (``gpu_mr.match_recognize_batches``), never materialised whole. The growth
  is compared with what the whole input would take in memory. Without a
  streaming API the check reports ``skipped`` and names the entry points it
  looked for (``STREAM_APIS``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import ticks  # noqa: E402

#: Where a streaming entry point may appear: it is called as
#: ``api(batches, clause, engine="cpu")`` with an iterable of Arrow record
#: batches in (partition, order) order and must return an iterable of Arrow
#: tables or record batches.
STREAM_APIS = ("match_recognize_batches", "match_recognize_stream", "stream_match_recognize",
               "stream")


def find_stream_api():
    import gpu_mr
    for name in STREAM_APIS:
        api = getattr(gpu_mr, name, None)
        if callable(api):
            return f"gpu_mr.{name}", api
    return None, None


def _status_kb(field: str):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _maxrss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("in-memory", "stream"), required=True)
    ap.add_argument("--rows", type=lambda s: int(float(s)), required=True)
    ap.add_argument("--query", default="v_shape")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engine", default="cpu")
    ap.add_argument("--batch-rows", type=lambda s: int(float(s)), default=1 << 20,
                    help="rows per batch read from Parquet in stream mode")
    args = ap.parse_args(argv)

    import gpu_mr
    from run import QUERIES
    query = QUERIES[args.query]
    report = {"query": query.name, "engine": args.engine}

    api_name, api = None, None
    if args.mode == "stream":
        api_name, api = find_stream_api()
        if api is None:
            report.update(status="skipped", reason=(
                "gpu_mr has no streaming API yet (looked for "
                + ", ".join(f"gpu_mr.{n}" for n in STREAM_APIS) + ")"))
            print(json.dumps(report))
            return 0
        report["api"] = api_name

    # Warm-up: JIT compilation and imports, before the baseline.
    small = ticks.generate(2_000, 1, seed=args.seed)
    try:
        if api is None:
            gpu_mr.match_recognize(small, query.text, engine=args.engine)
        else:
            for _ in api(small.to_batches(), query.text, engine=args.engine):
                pass
    except gpu_mr.errors.UnsupportedError as exc:
        report.update(status="unsupported", reason=str(exc))
        print(json.dumps(report))
        return 0

    tmpdir = None
    if api is None:
        table = ticks.generate(args.rows, 1, seed=args.seed)
        input_bytes = table.nbytes
    else:
        table = None
        input_bytes = int(small.nbytes / small.num_rows * args.rows)  # if it were resident
        tmpdir = tempfile.mkdtemp(prefix="gpu_mr_memcheck_")
        path = os.path.join(tmpdir, "ticks.parquet")
        ticks.write_parquet(path, args.rows, 1, seed=args.seed)
        report["parquet_bytes"] = os.path.getsize(path)
        report["batch_rows"] = args.batch_rows
    del small
    gc.collect()
    baseline = _status_kb("VmRSS")
    if baseline is not None and _reset_peak():
        method = "VmHWM after clear_refs"
    else:
        baseline, method = _maxrss_bytes(), "ru_maxrss"

    t0 = time.perf_counter()
    out_rows = 0
    if api is None:
        out_rows = gpu_mr.match_recognize(table, query.text, engine=args.engine).num_rows
    else:
        import pyarrow.parquet as pq
        try:
            source = pq.ParquetFile(path).iter_batches(batch_size=args.batch_rows)
            for part in api(source, query.text, engine=args.engine):
                out_rows += part.num_rows
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
    seconds = time.perf_counter() - t0
    peak = _status_kb("VmHWM") if method.startswith("VmHWM") else _maxrss_bytes()
    growth = max(0, peak - baseline)
    report.update(status="ok", method=method, input_bytes=input_bytes, baseline_bytes=baseline,
                  peak_bytes=peak, peak_growth_bytes=growth,
                  growth_per_input_byte=growth / input_bytes if input_bytes else None,
                  output_rows=out_rows, seconds=seconds)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
