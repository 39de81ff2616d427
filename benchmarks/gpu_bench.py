"""GPU benchmark: the GPU engine checked against the CPU engine, every stage timed.

What: on a CUDA device, for each size (1e7 to 1e9 rows of ~32 B: symbol,
timestamp, price, volume) and partition count (1 to 100,000), generates
pre-sorted tick data on the device, runs the V-shape query's GPU pipeline
stage by stage (the order check that finds the input sorted, the sort of
the same keys shuffled, masks, classes and DFA tables, chunked scan with
repair and numbering, path recovery, ONE ROW measures on the device), then
the whole pipeline at once as the engine runs it (``end_to_end``: data on
the device, per-match results to the host), and the older split for
comparison (matches to the host, measures on the host). Per stage it prints
the time, rows/s and the fraction of the device's memory bandwidth it
achieved (bytes the stage must move over the bandwidth of a large
device-to-device copy measured in the same run). It checks the GPU matches
against the CPU engine's on the same rows (whole datasets up to
``--check-rows``), compares the output tables (the end-to-end run's with
the CPU engine's, and the public API's), times the CPU engine on the same
rows for the speed ratios (matching alone, and end to end), and writes
everything to JSON.

Why one script: a lent GPU is rare and its time short (the device README and
METHOD.md): one call builds, checks and times every case, and the raw
output comes back to ``benchmarks/results/``.

Run on a GPU machine, from the repository root (no install needed: the
in-tree package is used; cupy, numba-cuda, numpy, pyarrow, pandas must be
there)::

    python3 benchmarks/gpu_bench.py --out-dir benchmarks/results
    python3 benchmarks/gpu_bench.py --quick          # 1e7 and 1e8 rows only

Under numba's CUDA simulator (tests: a tiny run of the same code)::

    NUMBA_ENABLE_CUDASIM=1 python benchmarks/gpu_bench.py --rows 3000 --partitions 1,7 \\
        --cpu-rows 3000 --check-rows 3000 --repeat 1
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent


def _use_tree_package() -> None:
    """Import gpu_mr from this checkout even when it is not installed: the
    kernels/ folder installs as gpu_mr.kernels, so map it by hand."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import gpu_mr
    try:
        import gpu_mr.kernels  # noqa: F401
    except ImportError:
        spec = importlib.util.spec_from_file_location(
            "gpu_mr.kernels", ROOT / "kernels" / "__init__.py",
            submodule_search_locations=[str(ROOT / "kernels")])
        module = importlib.util.module_from_spec(spec)
        sys.modules["gpu_mr.kernels"] = module
        spec.loader.exec_module(module)
        gpu_mr.kernels = module


_use_tree_package()

import gpu_mr  # noqa: E402
from gpu_mr import backend as B  # noqa: E402
from gpu_mr.analysis import analyze  # noqa: E402
from gpu_mr.engines import gpu as G  # noqa: E402
from gpu_mr import device_measures as DMe  # noqa: E402
from gpu_mr.device_frames import order_rows  # noqa: E402
from gpu_mr.device_input import from_device_columns  # noqa: E402
from gpu_mr.transfer import to_device_staged  # noqa: E402
from gpu_mr.engines.cpu import CpuEngine  # noqa: E402
from gpu_mr.frames import SortedInput  # noqa: E402
from gpu_mr.kernels.gpu_scan import DEVICE_CHUNK_ROWS  # noqa: E402
from gpu_mr.measures import assemble  # noqa: E402
from gpu_mr.syntax import parse_clause  # noqa: E402

V_SHAPE = """
    PARTITION BY symbol ORDER BY ts
    MEASURES FIRST(STRT.ts) AS start_ts, LAST(DOWN.price) AS bottom,
             LAST(UP.ts) AS end_ts, COUNT(*) AS n
    ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
    PATTERN (STRT DOWN+ UP+)
    DEFINE DOWN AS price < PREV(price), UP AS price > PREV(price)
"""
# Measures computed from others on the device: a gain, a volume-weighted
# price (SUM of a row expression), a CASE (benchmarks/run.py's v_shape_vwap).
V_SHAPE_VWAP = """
    PARTITION BY symbol ORDER BY ts
    MEASURES FIRST(STRT.ts) AS start_ts, LAST(UP.ts) AS end_ts,
             LAST(UP.price) - FIRST(STRT.price) AS gain,
             SUM(price * volume) / SUM(volume) AS vwap,
             CASE WHEN COUNT(*) > 10 THEN 'long' ELSE 'short' END AS kind
    ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
    PATTERN (STRT DOWN+ UP+)
    DEFINE DOWN AS price < PREV(price), UP AS price > PREV(price)
"""
SCHEMA = pa.schema([("symbol", pa.int64()), ("ts", pa.int64()), ("price", pa.float64()),
                    ("volume", pa.int64())])
ROW_BYTES = 32


def generate(backend, rows: int, partitions: int, seed: int) -> tuple:
    """Device columns of pre-sorted ticks and their partition offsets:
    equal partitions, a random walk of prices in cents (ties happen)."""
    xp = backend.xp
    rng = xp.random.default_rng(seed) if hasattr(xp.random, "default_rng") else None
    steps = (rng.standard_normal(rows) if rng is not None
             else xp.random.standard_normal(rows))
    price = xp.round(100.0 + xp.cumsum(steps * 0.05), 2)
    offsets = (xp.arange(partitions + 1, dtype=np.int64) * rows) // partitions
    symbol = xp.searchsorted(offsets[1:], xp.arange(rows, dtype=np.int64), side="right")
    ts = xp.arange(rows, dtype=np.int64) * 1000
    volume = (xp.arange(rows, dtype=np.int64) * 7919) % 1000
    return {"symbol": symbol, "ts": ts, "price": price, "volume": volume}, offsets


def timed(backend, fn, repeat: int):
    """(median seconds of ``repeat`` runs after one warm-up, last result)."""
    result = fn()
    backend.synchronize()
    times = []
    for _ in range(repeat):
        backend.synchronize()
        t0 = time.perf_counter()
        result = fn()
        backend.synchronize()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), result


def kernel_profile(backend, fn) -> tuple:
    """``({kernel: {"seconds", "launches"}}, run seconds)`` of one run of
    ``fn`` with every kernel launch timed alone (``backend.kernel_times``),
    slowest first; the run's time beyond the kernels is array-module work
    (sorts, scans, reductions) and the host's."""
    with B.kernel_times() as times:
        backend.synchronize()
        t0 = time.perf_counter()
        fn()
        backend.synchronize()
        seconds = time.perf_counter() - t0
    ranked = sorted(times.items(), key=lambda kv: -kv[1][0])
    return {name: {"seconds": s, "launches": n} for name, (s, n) in ranked}, seconds


def copy_bandwidth(backend, repeat: int) -> float:
    """Bytes/s of a large device-to-device copy (read + write counted)."""
    xp = backend.xp
    n = (1 << 28) if not backend.simulated else (1 << 20)       # 2 GiB of float64
    src = xp.ones(n, dtype=np.float64)
    dst = xp.empty_like(src)
    seconds, _ = timed(backend, lambda: xp.copyto(dst, src), max(repeat, 5))
    return 2 * src.nbytes / seconds


def pinned_bandwidth(backend, repeat: int) -> float:
    """Bytes/s of a host-to-device copy from pinned memory (the bus's
    practical ceiling); the simulator's figure means nothing."""
    if backend.simulated:
        return copy_bandwidth(backend, repeat)
    import cupyx
    n = 1 << 30
    src = cupyx.empty_pinned(n, dtype=np.uint8)
    src[:] = 1
    dst = backend.xp.empty(n, dtype=np.uint8)
    seconds, _ = timed(backend, lambda: dst.set(src), max(repeat, 5))
    return n / seconds


def transfer_rates(backend, repeat: int) -> dict:
    """Bytes/s of the copies the pipeline's host side is made of, on 1 GiB:
    host memory into a pinned buffer (the staging ring's fill, on all
    cores), device into pinned memory, device into new pageable memory (a
    plain ``asnumpy``), and device into new pageable memory through the
    staging ring (``Backend.to_host``). Tells whether the bus or the host's
    copies set the staged transfers' pace."""
    from gpu_mr.transfer import _fill
    xp = backend.xp
    n = (1 << 30) if not backend.simulated else (1 << 20)
    host = np.random.default_rng(0).integers(0, 255, n, dtype=np.uint8)
    device = backend.to_device(host)
    if backend.simulated:
        pinned = np.empty(n, np.uint8)
    else:
        import cupyx
        pinned = cupyx.empty_pinned(n, dtype=np.uint8)
    rates = {}
    seconds, _ = timed(backend, lambda: _fill(pinned, host), max(repeat, 3))
    rates["host_to_pinned"] = n / seconds
    if not backend.simulated:
        seconds, _ = timed(backend, lambda: device.get(out=pinned), max(repeat, 3))
        rates["device_to_pinned"] = n / seconds
        seconds, _ = timed(backend, lambda: xp.asnumpy(device), max(repeat, 3))
        rates["device_to_pageable"] = n / seconds
    seconds, back = timed(backend, lambda: backend.to_host(device), max(repeat, 3))
    assert np.array_equal(back, host), "the staged copy back differs from what went in"
    rates["device_to_host_staged"] = n / seconds
    # What the staged copy's host side costs: the same fill into pages
    # already touched (``pinned``) and into new ones (first-touch faults).
    seconds, _ = timed(backend, lambda: _fill(np.empty(n, np.uint8), host), max(repeat, 3))
    rates["host_to_new_pageable"] = n / seconds
    if not backend.simulated:
        # A result received straight into pinned memory from cupy's pool:
        # the first allocation of a size pins new pages, later ones reuse them.
        t0 = time.perf_counter()
        first = cupyx.empty_pinned(n, dtype=np.uint8)
        device.get(out=first)
        backend.synchronize()
        rates["device_to_new_pinned_first"] = n / (time.perf_counter() - t0)
        del first

        def into_pool():
            out = cupyx.empty_pinned(n, dtype=np.uint8)
            device.get(out=out)
            return out
        seconds, _ = timed(backend, into_pool, max(repeat, 3))
        rates["device_to_pooled_pinned"] = n / seconds

        def into_new_pinned():         # outside the pool: pinned and freed each time
            memory = xp.cuda.PinnedMemory(n)
            out = np.frombuffer(xp.cuda.PinnedMemoryPointer(memory, 0), np.uint8, n)
            device.get(out=out)
            return out
        try:
            seconds, _ = timed(backend, into_new_pinned, max(repeat, 3))
            rates["device_to_new_pinned"] = n / seconds
        except Exception as exc:        # a measurement, not a check: say why and go on
            print(f"device to new pinned: {type(exc).__name__}: {exc}", flush=True)
    return rates


def host_table(backend, columns: dict) -> pa.Table:
    return pa.table({name: backend.to_host(columns[name]) for name in SCHEMA.names},
                    schema=SCHEMA)


def run_case(backend, rows: int, partitions: int, args, bandwidth: float, log) -> dict:
    xp = backend.xp
    columns, offsets = generate(backend, rows, partitions, seed=rows + partitions)
    query = analyze(parse_clause(V_SHAPE), SCHEMA)
    engine = G.GpuEngine()
    _, _, device_set, dfa = engine._plan_for(query, SCHEMA)
    if isinstance(device_set, str):
        raise SystemExit(f"the V-shape DEFINEs do not run on the device: {device_set}")
    needed = {name: (columns[name], None) for name in device_set.columns}
    stages, declined, record = {}, {}, {}

    def stage(name: str, fn, bytes_moved: float):
        seconds, result = timed(backend, fn, args.repeat)
        stages[name] = {"seconds": seconds, "bytes": bytes_moved,
                        "rows_per_s": rows / seconds,
                        "bandwidth_fraction": bytes_moved / seconds / bandwidth}
        return result

    keys = [(columns["symbol"], None, True, False), (columns["ts"], None, True, False)]
    order = stage("order_check", lambda: order_rows(backend, keys, 1, rows), rows * 8 * 2 * 2)
    assert order.was_sorted and np.array_equal(order.offsets, backend.to_host(offsets)), \
        "the device order check disagrees with the generated partitions"
    shuffle = xp.random.permutation(rows) if args.sort_rows >= rows else None
    if shuffle is not None:
        shuffled = [(k[shuffle], None, True, False) for k, *_ in keys]
        # two stable argsorts and gathers of 8-byte keys, read and written
        resorted = stage("sort", lambda: order_rows(backend, shuffled, 1, rows),
                         rows * 8 * 2 * 6)
        assert bool((shuffle[resorted.rows] == xp.arange(rows)).all()), \
            "the device sort did not restore the generated order"
        del shuffle, shuffled, resorted
        backend.release_memory()
    bits, failed = stage("masks", lambda: device_set.evaluate(xp, needed, offsets, rows),
                         rows * (8 * len(device_set.columns) + 1))
    assert not failed, "a device mask failed on generated data"
    classes, tables, n_states, n_classes = stage(
        "classes", lambda: G.classes_and_tables(backend, query, dfa, bits), rows * 1)
    found, _ = stage("scan", lambda: G.scan(backend, query, classes, offsets, tables,
                                            args.chunk_rows or None), rows * (1 + 2))
    n_matches = found.starts.shape[0]
    matched_rows = backend.scalar(xp.sum(found.ends - found.starts))
    for chunk_rows in args.chunk_sweep:     # the chunk size's effect on the scan alone
        swept, _ = stage(f"scan_chunks_{chunk_rows}", lambda: G.scan(
            backend, query, classes, offsets, tables, chunk_rows), rows * (1 + 2))
        assert bool((swept.starts == found.starts).all()) and bool(
            (swept.ends == found.ends).all()), f"chunks of {chunk_rows} rows find other matches"
        del swept
    found = stage("recovery", lambda: G.recover(backend, classes, offsets, G.DeviceMatches(
        found.starts, found.ends, found.partitions, found.numbers), tables),
        matched_rows * (1 + 4 + 2 + 1) * 2 + n_matches * 8 * 3)
    measure_columns = {name: (columns[name], None, SCHEMA.field(name).type)
                       for name in DMe.device_measure_columns(query)}
    per_match = stage("measures_device", lambda: DMe.measures_on_device(
        backend, query, measure_columns, found), matched_rows * (1 + 8) + n_matches * 8 * 6)
    assert not isinstance(per_match, str), per_match
    matches = stage("to_host", lambda: found.to_host(backend),
                    n_matches * 8 * 5 + matched_rows * 3)
    # At 1e9 rows the stages' outputs beside the columns leave too little
    # device memory for the engine's own run of the same pipeline.
    order = bits = classes = found = per_match = None
    backend.release_memory()
    source = from_device_columns(backend, SCHEMA, {n: (c, None) for n, c in columns.items()})
    engine.max_rows = rows          # try it whatever the memory estimate; it says if it declines
    out_device = stage("end_to_end", lambda: engine.run_input(query, source), 0)
    profile = None
    if out_device is None:          # e.g. out of device memory beside the generated data
        del stages["end_to_end"]
        declined["end_to_end"] = engine._declined[1]
    else:
        # the output left on the device (what a cuDF input gets back)
        kept = stage("end_to_end_on_device",
                     lambda: engine.run_input(query, source, on_device=True), 0)
        record["output_on_device_identical"] = (not isinstance(kept, pa.Table)
                                                and kept.to_arrow(backend).equals(out_device))
        kept = None
        kernels, seconds = kernel_profile(backend, lambda: engine.run_input(query, source))
        profile = {"run_seconds": seconds, "kernels": kernels}
        spans = [(name, k) for name, k in kernels.items() if name.startswith("[")]
        launched = [(name, k) for name, k in kernels.items() if not name.startswith("[")]
        log(f"  one end-to-end run profiled ({seconds * 1e3:.1f} ms, each launch and stage "
            "synchronised alone): " + ", ".join(f"{name} {k['seconds'] * 1e3:.1f} ms"
                                                for name, k in spans))
        log("  its kernels: " + ", ".join(f"{name} {k['seconds'] * 1e3:.1f} ms x{k['launches']}"
                                          for name, k in launched[:8]))
    device_seconds = sum(stages[s]["seconds"] for s in ("order_check", "masks", "classes", "scan",
                                                       "recovery"))
    record.update({"rows": rows, "partitions": partitions, "matches": int(n_matches),
              "end_to_end_kernels": profile,
              "dfa_states": n_states, "classes": n_classes,
              "chunk_rows": args.chunk_rows or DEVICE_CHUNK_ROWS,
              "stages": stages, "device_seconds": device_seconds,
              "device_rows_per_s": rows / device_seconds,
              "with_transfer_rows_per_s": rows / (device_seconds
                                                  + stages["to_host"]["seconds"]),
              "declined": declined})
    if "end_to_end" in stages:
        record["end_to_end_device_rows_per_s"] = rows / stages["end_to_end"]["seconds"]
        record["end_to_end_on_device_rows_per_s"] = (
            rows / stages["end_to_end_on_device"]["seconds"])
    table = host_table(backend, columns)
    needed_host = [np.ascontiguousarray(table.column(name).to_numpy())
                   for name in sorted(set(device_set.columns)
                                      | set(DMe.device_measure_columns(query))
                                      | {"symbol", "ts"})]
    host_bytes = sum(a.nbytes for a in needed_host)
    stage("from_host", lambda: [to_device_staged(backend, a) for a in needed_host], host_bytes)
    stages["from_host"]["pinned_fraction"] = (host_bytes / stages["from_host"]["seconds"]
                                              / args.pinned_bandwidth)
    out_host = stage("end_to_end_from_host", lambda: engine.run_table(query, table), 0)
    if out_host is None:
        del stages["end_to_end_from_host"]
        declined["end_to_end_from_host"] = engine._declined[1]
    else:
        kernels, seconds = kernel_profile(backend, lambda: engine.run_table(query, table))
        record["end_to_end_from_host_kernels"] = {"run_seconds": seconds, "kernels": kernels}
        log(f"  one end-to-end run from host memory profiled ({seconds * 1e3:.1f} ms): "
            + ", ".join(f"{name} {k['seconds'] * 1e3:.1f} ms" for name, k in kernels.items()
                        if name.startswith("[")))
        record["end_to_end_from_host_rows_per_s"] = (
            rows / stages["end_to_end_from_host"]["seconds"])
        record["from_host_identical"] = out_device is None or bool(out_host.equals(out_device))
    if rows <= args.cpu_rows:
        data = SortedInput(table, backend.to_host(offsets), None, True)
        out = stage("measures_host", lambda: assemble(query, data, matches), 0)
        record["end_to_end_rows_per_s"] = rows / (
            device_seconds + stages["to_host"]["seconds"] + stages["measures_host"]["seconds"])
        cpu = CpuEngine()
        cpu_seconds, cpu_matches = timed(backend, lambda: cpu.find_matches(query, data),
                                         args.repeat)
        record["cpu_engine_seconds"] = cpu_seconds
        record["gpu_vs_cpu_engine"] = cpu_seconds / device_seconds
        cpu_end, cpu_out = timed(backend, lambda: gpu_mr.match_recognize(table, V_SHAPE,
                                                                           engine="cpu"),
                                 args.repeat)
        record["cpu_end_to_end_seconds"] = cpu_end
        if out_device is not None:
            record["gpu_vs_cpu_end_to_end"] = cpu_end / stages["end_to_end"]["seconds"]
            record["end_to_end_identical"] = bool(out_device.equals(cpu_out))
        if rows <= args.check_rows:
            same = all(np.array_equal(getattr(matches, f), getattr(cpu_matches, f))
                       for f in ("partition", "number", "start", "end", "label_offsets",
                                 "labels", "excluded"))
            cpu_out = assemble(query, data, cpu_matches)
            record["identical_to_cpu_engine"] = bool(same and out.equals(cpu_out))
        small = table.slice(0, min(rows, 200_000))
        record["public_api_identical"] = gpu_mr.match_recognize(
            small, V_SHAPE, engine="gpu").equals(gpu_mr.match_recognize(small, V_SHAPE,
                                                                         engine="cpu"))
    log(summary_line(record))
    return record


def run_measures_case(backend, rows: int, partitions: int, args, log) -> dict:
    """``V_SHAPE_VWAP`` end to end with data on the device against the CPU
    engine on the same rows: the time of measures computed from others."""
    columns, _ = generate(backend, rows, partitions, seed=rows + partitions + 1)
    columns["volume"] = columns["volume"] + 1       # no zero total volume
    query = analyze(parse_clause(V_SHAPE_VWAP), SCHEMA)
    engine = G.GpuEngine()
    engine.max_rows = rows
    source = from_device_columns(backend, SCHEMA, {n: (c, None) for n, c in columns.items()})
    seconds, out = timed(backend, lambda: engine.run_input(query, source), args.repeat)
    record = {"query": "v_shape_vwap", "rows": rows, "partitions": partitions}
    if out is None:
        record["declined"] = engine._declined[1]
        log(f"v_shape_vwap {rows:,} rows: the device pipeline declined: {record['declined']}")
        return record
    kernels, profiled = kernel_profile(backend, lambda: engine.run_input(query, source))
    record["kernels"] = {"run_seconds": profiled, "kernels": kernels}
    log(f"  v_shape_vwap profiled ({profiled * 1e3:.1f} ms): "
        + ", ".join(f"{name} {k['seconds'] * 1e3:.1f} ms" for name, k in kernels.items()
                    if name.startswith("[")))
    table = host_table(backend, columns)
    cpu_seconds, cpu_out = timed(backend, lambda: gpu_mr.match_recognize(
        table, V_SHAPE_VWAP, engine="cpu"), args.repeat)
    record.update(seconds=seconds, rows_per_s=rows / seconds, cpu_seconds=cpu_seconds,
                  gpu_vs_cpu_end_to_end=cpu_seconds / seconds,
                  identical_to_cpu_engine=bool(out.equals(cpu_out)))
    log(f"v_shape_vwap {rows:,} rows {partitions:,} parts | end to end {seconds * 1e3:.1f} ms "
        f"({rows / seconds:.3g} rows/s) | cpu engine {cpu_seconds * 1e3:.1f} ms | "
        f"x cpu {cpu_seconds / seconds:.1f} | identical "
        + ("yes" if record["identical_to_cpu_engine"] else "NO"))
    return record


def summary_line(r: dict) -> str:
    s = r["stages"]
    parts = [f"{r['rows']:>12,} rows {r['partitions']:>7,} parts {r['matches']:>11,} matches",
             f"device {r['device_rows_per_s']:.3g} rows/s"]
    sweep = [name for name in s if name.startswith("scan_chunks_")]
    for name in ("order_check", "sort", "masks", "classes", "scan", *sweep, "recovery",
                 "measures_device", "end_to_end", "end_to_end_on_device", "from_host",
                 "end_to_end_from_host",
                 "to_host", "measures_host"):
        if name in s:
            frac = s[name]["bandwidth_fraction"]
            parts.append(f"{name} {s[name]['seconds'] * 1e3:.2f} ms"
                         + (f" ({frac:.0%} bw)" if s[name]["bytes"] else ""))
    if "end_to_end_device_rows_per_s" in r:
        parts.append(f"end to end {r['end_to_end_device_rows_per_s']:.3g} rows/s")
        parts.append(f"output kept on the device {r['end_to_end_on_device_rows_per_s']:.3g} "
                     "rows/s, identical " + ("yes" if r["output_on_device_identical"] else "NO"))
    if "from_host" in s:
        parts.append(f"from host {s['from_host']['pinned_fraction']:.0%} of pinned")
    if "end_to_end_from_host_rows_per_s" in r:
        parts.append(f"end to end from host {r['end_to_end_from_host_rows_per_s']:.3g} rows/s")
    for name, why in r.get("declined", {}).items():
        parts.append(f"{name} declined: {why}")
    if "gpu_vs_cpu_engine" in r:
        parts.append(f"x cpu engine {r['gpu_vs_cpu_engine']:.1f} (matching)")
    if "gpu_vs_cpu_end_to_end" in r:
        parts.append(f"x cpu engine {r['gpu_vs_cpu_end_to_end']:.1f} (end to end)")
    if "end_to_end_identical" in r:
        parts.append("end to end identical " + ("yes" if r["end_to_end_identical"] else "NO"))
    if "identical_to_cpu_engine" in r:
        parts.append("identical " + ("yes" if r["identical_to_cpu_engine"] else "NO"))
    if "public_api_identical" in r:
        parts.append("api " + ("yes" if r["public_api_identical"] else "NO"))
    return " | ".join(parts)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="1e7,1e8,1e9", help="comma-separated row counts")
    p.add_argument("--partitions", default="1,100,10000,100000",
                   help="comma-separated partition counts")
    p.add_argument("--quick", action="store_true", help="1e7 and 1e8 rows, 1 and 10000 parts")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per stage (median)")
    p.add_argument("--chunk-rows", type=int, default=0, help="rows per scan chunk (0: default)")
    p.add_argument("--cpu-rows", type=float, default=1e8,
                   help="time the CPU engine and the host measures up to this many rows")
    p.add_argument("--check-rows", type=float, default=1e8,
                   help="compare every match with the CPU engine's up to this many rows")
    p.add_argument("--sort-rows", type=float, default=1e9,
                   help="time the device sort of shuffled keys up to this many rows")
    p.add_argument("--chunk-sweep", default="256,4096",
                   help="also time the scan with these rows per chunk (empty: none)")
    p.add_argument("--vwap-rows", type=float, default=1e8,
                   help="rows of the v_shape_vwap case (measures computed from others; 0 skips)")
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args(argv)
    if args.quick:
        args.rows, args.partitions = "1e7,1e8", "1,10000"
    args.chunk_sweep = [int(float(x)) for x in args.chunk_sweep.split(",") if x.strip()]
    found = B.detect()
    if isinstance(found, str):
        print(f"gpu_bench: no device: {found}", file=sys.stderr)
        return 2
    rows_list = [int(float(x)) for x in args.rows.split(",")]
    parts_list = [int(float(x)) for x in args.partitions.split(",")]
    lines = []

    def log(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    bandwidth = copy_bandwidth(found, args.repeat)
    args.pinned_bandwidth = pinned_bandwidth(found, args.repeat)
    log(f"device: {found.device}; measured copy bandwidth {bandwidth / 1e9:.0f} GB/s; "
        f"host to device from pinned memory {args.pinned_bandwidth / 1e9:.1f} GB/s")
    rates = transfer_rates(found, args.repeat)
    log("copies, GB/s: " + ", ".join(f"{name.replace('_', ' ')} {rate / 1e9:.1f}"
                                     for name, rate in rates.items()))
    records = []
    stamp = _dt.date.today().isoformat()
    slug = "".join(c if c.isalnum() else "-" for c in found.device.lower()).strip("-")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"gpu-{stamp}-{slug}.json"

    def write_results() -> None:
        """Rewritten after every case: a run cut off by its time limit keeps
        the cases it finished."""
        result = {"date": stamp, "device": found.device, "simulated": found.simulated,
                  "copy_bandwidth_bytes_per_s": bandwidth,
                  "pinned_host_to_device_bytes_per_s": args.pinned_bandwidth,
                  "copy_rates_bytes_per_s": rates,
                  "query": V_SHAPE.strip(),
                  "row_bytes": ROW_BYTES, "python": platform.python_version(),
                  "cases": records, "log": lines}
        path.write_text(json.dumps(result, indent=1))
        (out_dir / f"gpu-{stamp}-{slug}.txt").write_text("\n".join(lines) + "\n")

    for rows in rows_list:
        for partitions in parts_list:
            if partitions > rows:
                continue
            try:
                records.append(run_case(found, rows, partitions, args, bandwidth, log))
            except Exception as exc:        # keep the other cases' numbers
                traceback.print_exc()
                log(f"{rows:,} rows {partitions:,} partitions: FAILED {type(exc).__name__}: "
                    f"{exc}")
                records.append({"rows": rows, "partitions": partitions,
                                "error": f"{type(exc).__name__}: {exc}"})
            finally:
                if not found.simulated:
                    found.xp.get_default_memory_pool().free_all_blocks()
                write_results()
    if args.vwap_rows:
        rows = int(args.vwap_rows)
        try:
            parts = max(1, min(10_000, rows // 1000))
            records.append(run_measures_case(found, rows, parts, args, log))
        except Exception as exc:
            traceback.print_exc()
            log(f"v_shape_vwap {rows:,} rows: FAILED {type(exc).__name__}: {exc}")
            records.append({"query": "v_shape_vwap", "rows": rows,
                            "error": f"{type(exc).__name__}: {exc}"})
        finally:
            found.release_memory()
            write_results()
    for rows in rows_list:       # one huge partition against many small ones
        by_parts = {r["partitions"]: r for r in records if r.get("rows") == rows
                    and "device_seconds" in r}
        if 1 in by_parts and len(by_parts) > 1:
            most = max(by_parts)
            ratio = by_parts[1]["device_seconds"] / by_parts[most]["device_seconds"]
            log(f"{rows:,} rows: one partition takes {ratio:.2f}x the time of {most:,}")
            ends = [by_parts[p].get("end_to_end_device_rows_per_s") for p in (1, most)]
            if all(ends):
                log(f"{rows:,} rows end to end: one partition takes {ends[1] / ends[0]:.2f}x "
                    f"the time of {most:,}")
    write_results()
    print(f"wrote {path.name}")
    return 0 if all("error" not in r for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
