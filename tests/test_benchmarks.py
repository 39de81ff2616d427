"""The benchmark tools run end to end on a tiny size (no timing assertions).

Runs ``benchmarks/ticks.py`` and ``benchmarks/run.py`` as a user would (their
command lines, in a subprocess) on a few thousand rows, then checks the
Parquet file, the JSON report's keys, and that every engine that ran agrees
with the reference engine on the same rows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _run(*args, cwd=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc


@pytest.fixture(scope="module")
def ticks_module():
    sys.path.insert(0, str(BENCH))
    try:
        import ticks
        yield ticks
    finally:
        sys.path.remove(str(BENCH))


def test_generator_writes_sorted_skewed_parquet(tmp_path, ticks_module):
    out = tmp_path / "ticks.parquet"
    _run(BENCH / "ticks.py", "--rows", "3e3", "--symbols", "20", "--seed", "3", "-o", out)
    table = pq.read_table(out)
    assert table.schema.names == ["symbol", "ts", "price", "volume"]
    assert table.schema.field("ts").type == pa.timestamp("us")
    assert table.num_rows == 3000
    assert table.equals(ticks_module.generate(3000, 20, seed=3))
    df = table.to_pandas()
    assert df.equals(df.sort_values(["symbol", "ts"], kind="stable").reset_index(drop=True))
    sizes = df.groupby("symbol").size()
    assert len(sizes) == 20 and sizes.min() >= 1 and sizes.max() > 5 * sizes.min()
    assert (df.groupby("symbol")["ts"].diff().dropna() > pd_zero()).all()


def pd_zero():
    import pandas as pd
    return pd.Timedelta(0)


def test_generator_chunks_join_seamlessly(ticks_module, monkeypatch):
    whole = ticks_module.generate(5000, 3, seed=1)
    monkeypatch.setattr(ticks_module, "CHUNK_ROWS", 700)
    chunked = ticks_module.generate(5000, 3, seed=1)
    # Other chunking draws other random numbers, but time and price stay
    # continuous across chunk borders: no jump back in time, no price jump.
    for t in (whole, chunked):
        df = t.to_pandas()
        gaps = df.groupby("symbol")["ts"].diff().dropna().dt.total_seconds()
        assert gaps.between(0.2, 1.8).all()
        moves = df.groupby("symbol")["price"].apply(lambda p: np.abs(np.diff(np.log(p))).max())
        assert (moves < 0.02).all()


def test_generator_orders(ticks_module):
    base = ticks_module.generate(2000, 7, seed=2)
    for order in ("time", "random"):
        other = ticks_module.generate(2000, 7, seed=2, order=order)
        assert not other.equals(base)
        assert other.sort_by([("symbol", "ascending"), ("ts", "ascending")]).equals(base)


def test_runner_tiny(tmp_path):
    out = tmp_path / "report.json"
    proc = _run(BENCH / "run.py", "--rows", "3000", "--partitions", "1,25",
                "--queries", "v_shape,proposal,all_rows", "--engines", "cpu,reference",
                "--ref-rows", "3000", "--repeat", "1", "--numpy-rows", "0", "-o", out)
    report = json.loads(out.read_text())
    assert {"schema", "preset", "command", "environment", "settings", "engines", "queries",
            "results", "numpy_ratio", "memory", "summary", "table"} <= report.keys()
    assert "/" not in report["command"].replace("benchmarks/run.py", "")
    assert len(report["results"]) == 2 * 3
    for rec in report["results"]:
        assert {"rows", "partitions", "query", "kind", "engines", "subset"} <= rec.keys()
        ref = rec["engines"]["reference"]
        assert ref["status"] == "ok", ref
        assert {"rows", "seconds", "rows_per_s", "output_rows"} <= ref.keys()
        cpu = rec["engines"]["cpu"]
        assert cpu["status"] in ("ok", "unsupported"), cpu
        if cpu["status"] == "ok":
            assert rec["subset"]["identical"], rec["subset"]["detail"]
            assert cpu["output_rows"] == ref["output_rows"]  # whole table = the subset here
        else:
            assert "unsupported: " in proc.stdout
    assert "identical: no" not in proc.stdout

    markdown = _run(BENCH / "report.py", out).stdout
    assert markdown.startswith("Command: `python benchmarks/run.py ")
    assert markdown.count("| 3,000 |") == 6


def test_gpu_bench_tiny_under_the_simulator(tmp_path):
    # The GPU benchmark's own code (data on the device, every stage, the
    # checks against the CPU engine) on a few thousand rows in numba's CUDA
    # simulator, so that a lent GPU's time is not lost to a broken script.
    import os
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run(
        [sys.executable, str(BENCH / "gpu_bench.py"), "--rows", "2000", "--partitions", "1,9",
         "--cpu-rows", "2000", "--check-rows", "2000", "--repeat", "1", "--chunk-rows", "16",
         "--vwap-rows", "600", "--out-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(next(tmp_path.glob("gpu-*.json")).read_text())
    assert report["simulated"] and len(report["cases"]) == 3
    vwap = report["cases"].pop()
    assert vwap["query"] == "v_shape_vwap" and vwap["identical_to_cpu_engine"], vwap
    assert set(report["copy_rates_bytes_per_s"]) >= {"host_to_pinned", "device_to_host_staged"}
    for case in report["cases"]:
        assert case["identical_to_cpu_engine"] and case["public_api_identical"], case
        assert case["end_to_end_identical"] and case["from_host_identical"], case
        assert not case["declined"], case
        assert set(case["stages"]) >= {"order_check", "sort", "masks", "classes", "scan",
                                       "recovery", "measures_device", "end_to_end", "from_host",
                                       "end_to_end_from_host", "to_host"}
    assert str(BENCH.parent) not in json.dumps(report)       # no machine paths


def test_peers_read_floor_counts_every_buffer_of_the_columns(ticks_module):
    # the bound printed beside the peer ratio: the bytes behind the columns
    # the query reads, each read once (numpy columns as they are, strings'
    # offsets and bytes, every chunk)
    import pandas as pd
    import peers
    n = 10_000
    strings = pa.chunked_array([pa.array(["ab", "c"] * 2_500, pa.large_string()),
                                pa.array(["xyz"] * 5_000, pa.large_string())])
    frame = pd.DataFrame({"symbol": pd.arrays.ArrowStringArray(strings),
                          "ts": np.arange(n, dtype=np.int64), "price": np.ones(n),
                          "volume": np.arange(n)})
    size, seconds = peers.read_floor(frame, repeat=2)
    text_bytes = 2_500 * 3 + 5_000 * 3
    least = 2 * 8 * n + 8 * (n + 2) + text_bytes     # ts, price; two chunks' offsets; bytes
    assert least <= size < least + 512
    assert seconds > 0
    assert peers.read_floor(frame, ["ts"], repeat=1)[0] == 8 * n
