#!/usr/bin/env bash
# One call on a lent GPU machine: what is there, the benchmark, the device tests.
#
#   bash benchmarks/device_run.sh BENCH_SECONDS TEST_SECONDS [gpu_bench.py flags...]
#
# Writes env.txt, bench.log, gpu_bench's JSON and text, tests.log and
# conformance.log under $OUT (the device tool's folder that comes back), or
# under ./device-out when OUT is unset. Each part has its own time limit so
# that a slow or hanging part still leaves the others' output.
#
# The machine has cupy, numba-cuda, pyarrow, pandas, pytest and hypothesis but
# no network; wheels it lacks (duckdb, for the few conformance cases that run
# gpu_mr.sql) travel in .whl/ when the call carries it.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-device-out}"
mkdir -p "$OUT"
BENCH_SECONDS="${1:-240}"
TEST_SECONDS="${2:-150}"
shift 2 || true
export PYTHONUNBUFFERED=1 NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0

if compgen -G ".whl/*.whl" >/dev/null; then
    SITE="$(mktemp -d)"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target "$SITE" .whl/*.whl && export PYTHONPATH="$SITE"
fi
# kernels/ installs as gpu_mr.kernels; on the device the tree is used as it is.
[[ -e gpu_mr/kernels ]] || ln -s ../kernels gpu_mr/kernels

{
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    python3 - <<'EOF'
import sys, numba, cupy, numpy, pyarrow, pandas
print("python", sys.version.split()[0], "numba", numba.__version__, "cupy", cupy.__version__,
      "numpy", numpy.__version__, "pyarrow", pyarrow.__version__, "pandas", pandas.__version__)
try:
    import numba_cuda
    print("numba-cuda", numba_cuda.__version__)
except Exception as exc:
    print("numba-cuda:", exc)
EOF
    nproc
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

timeout "$BENCH_SECONDS" python3 benchmarks/gpu_bench.py --out-dir "$OUT" "$@" 2>&1 \
    | tee "$OUT/bench.log"

# Several test processes share the one GPU (pytest-xdist is on the image):
# the tests check results, not speed. -v names each test as it ends, so a
# run cut off by its time limit still says which ones failed (pytest's own
# summary comes only at the end: 2026-11-28's first device run lost it).
PYTEST=(python3 -m pytest -v -rfE --tb=short -p no:cacheprovider -p no:benchmark --timeout 120)
python3 -c "import xdist" 2>/dev/null && PYTEST+=(-n 8)
if (( TEST_SECONDS > 0 )); then
    timeout "$TEST_SECONDS" "${PYTEST[@]}" \
        tests/test_device_frames.py tests/test_device_input.py tests/test_device_masks.py \
        tests/test_device_measures.py tests/test_gpu_engine.py tests/test_gpu_registers.py \
        tests/test_time_limits.py tests/test_transfer.py >"$OUT/tests.log" 2>&1
    grep -E "FAILED|ERROR" "$OUT/tests.log" | tail -n 40; tail -n 3 "$OUT/tests.log"
    timeout "$TEST_SECONDS" "${PYTEST[@]}" tests/test_conformance.py -k gpu >"$OUT/conformance.log" 2>&1
    grep -E "FAILED|ERROR" "$OUT/conformance.log" | tail -n 40; tail -n 3 "$OUT/conformance.log"
fi
