#!/usr/bin/env bash
# Everything we run on the lent 2xH200 machine, in one call (see perf/history/wave1.md for the output).
# Usage (device tool, kind nvidia-h200-x2, carry .whl):  bash perf/h200_run.sh [quick]
set -o pipefail
python3 -m pip install -q --upgrade --no-index --no-deps --no-build-isolation --target /tmp/site .whl/*.whl . || exit 1
export PYTHONPATH=/tmp/site NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export NVSHMEM_SYMMETRIC_SIZE=${NVSHMEM_SYMMETRIC_SIZE:-24G}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
MPI="mpiexec --allow-run-as-root --bind-to none --oversubscribe"
{ nvidia-smi -L; nvidia-smi topo -m; python3 -c 'import torch, cupy, cuda.core; print(torch.__version__, cupy.__version__)'; } > "$OUT/env.txt" 2>&1
step() { echo "=== $* ($(date +%T))"; }
step gpu tests
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_cuda.py tests/unit/test_cuda_compile.py 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -3
step C ABI device example
python3 -m pytest -q -p no:cacheprovider tests/cabi/test_cabi.py -k device 2>&1 | tee "$OUT/pytest_cabi_gpu.txt" | tail -3
step bench P=2 slab
$MPI -n 2 python3 perf/bench_cuda.py --sizes 32 64 128 256 512 1024 --out "$OUT/bench_p2.md" 2>&1 | grep -v '^{' | tail -12
step bench P=1 slab
$MPI -n 1 python3 perf/bench_cuda.py --sizes 32 64 128 256 512 1024 --out "$OUT/bench_p1.md" 2>&1 | grep -v '^{' | tail -12
step bench P=2 put transport
$MPI -n 2 python3 perf/bench_cuda.py --sizes 32 128 512 --transport put --no-torch --out "$OUT/bench_p2_put.md" 2>&1 | grep -v '^{' | tail -6
step C ABI overhead, device problem
python3 perf/bench_cabi.py --device --iters 256 --trials 30 2>&1 | tee "$OUT/cabi_device.txt" | tail -8
[ "$1" = quick ] && exit 0
step host backend scaling on the 32-core host
for P in 2 4 8 16; do
  REDIST_DEVICE=cpu $MPI -n $P python3 perf/bench_host.py --sizes 128 256 --iters 20 --no-lowercase --directions XY 2>&1 | grep -a -E "hybrid|baseline|rror" | sed "s/^/P=$P /"
done | tee "$OUT/host_scaling.txt"
step full test-suite on Open MPI
timeout 420 python3 -m pytest -q -p no:cacheprovider -x 2>&1 | tee "$OUT/pytest_all.txt" | tail -5
