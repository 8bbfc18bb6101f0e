#!/usr/bin/env bash
# One batched call on a lent GPU machine (device tool): install, GPU tests, benchmarks; logs under $OUT.
#   bash perf/device_run.sh STEP...      steps: tests capture shared bench bench-old cabi tune autotune nvmath permuted sizes fields
#                                        bench-capture contract examples host pencils out-ab torch jax user-memory bench-user
#                                        um-diag tune-host torch-host torch-bwd
#   SHARED_K="P2 or P3" picks the rank counts of the shared step (default P2); UM_BENCH_SHARED=0: bench-user at P = 1 only.
# Carry .whl (nvshmem4py, cffi, pycparser wheels for cp312), for bench-old .old (a worktree of
# the commit to compare with), for nvmath .nvmath (nvmath-python's tests and examples). One rank per GPU unless a step says otherwise ("shared": several
# ranks on one GPU, REDIST_SHARED_GPU=1). "host" uses the machine's CPU cores only (P = 2 and 4 without
# oversubscription; HOST_SIZES, HOST_METHODS, HOST_BETWEEN for bench_out; "out-ab": bench_out for this tree
# and .old alternating, OUT_ROUNDS rounds at OUT_RANKS (2 4), OUT_ARGS more bench_out.py arguments; HOST_PROBE=1 adds
# probe_hot_destination.py and probe_cold_call.py); for its 2DECOMP&FFT part (D2D_GRIDS=none skips it; D2D_BETWEEN: what the drivers
# do before each timed call, default poison) carry scratch/2decomp-src (a 2DECOMP&FFT source tree).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export NVSHMEM_SYMMETRIC_SIZE=${NVSHMEM_SYMMETRIC_SIZE:-4G}
MPI="mpiexec --allow-run-as-root --bind-to none --oversubscribe"
step() { echo "=== $* ($(date +%T))" | tee -a "$OUT/steps.txt"; }
install_old() {  # the commit in .old, beside this tree's /tmp/site
  rm -rf /tmp/site_old; python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site_old ./.old > /dev/null 2>&1
}
step install
rm -rf /tmp/site build ./*.egg-info; python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > "$OUT/install.txt" 2>&1 || { tail -20 "$OUT/install.txt"; exit 1; }
export PYTHONPATH=/tmp/site  # cffi from .whl: setup.py generates the compiled replays' C source with it
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site . >> "$OUT/install.txt" 2>&1 || { tail -20 "$OUT/install.txt"; exit 1; }
python3 -c "from redist.engine.host import compiled; print('compiled replays:', compiled.unavailable_reason() or 'built')" | tee -a "$OUT/install.txt"
{ nvidia-smi -L; python3 -c 'import torch, cupy, cuda.core, mpi4py; print(torch.__version__, cupy.__version__, mpi4py.__version__)'; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
for s in "$@"; do
  case $s in
  tests)
    step "GPU tests P=1 + CUDA compile tests"
    timeout ${TESTS_TIMEOUT:-540} python3 -m pytest -q -p no:cacheprovider -x tests/gpu/test_cuda.py tests/unit/test_cuda_compile.py \
      tests/unit/test_user_memory.py 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -15 ;;
  user-memory)
    step "#44 out= in ordinary device memory: P=1, then ${UM_K:-P2 or P3 or P4} ranks sharing the GPU"
    timeout ${UM_TIMEOUT:-240} python3 -m pytest -q -p no:cacheprovider -rs tests/gpu/test_user_memory_gpu.py -k "not shared" 2>&1 | tee "$OUT/pytest_user_memory.txt" | tail -8
    REDIST_SHARED_GPU=1 timeout ${UM_SHARED_TIMEOUT:-400} python3 -m pytest -q -p no:cacheprovider -rs tests/gpu/test_user_memory_gpu.py \
      -k "shared and (${UM_K:-P2 or P3 or P4})" 2>&1 | tee -a "$OUT/pytest_user_memory.txt" | tail -8 ;;
  um-diag)
    # the #44 worker run directly (its failure evidence printed whole): capture at UM_CAPTURE_RANKS (shared beyond 1),
    # bad input at UM_BAD_RANKS (shared), USER_MEMORY_REPLAYS replays; then bench_user_out P=1 (32^3, 256^3). At most 4.5 min after the install.
    step "#44 diagnostics: capture at P=${UM_CAPTURE_RANKS:-1 2}, bad at P=${UM_BAD_RANKS:-3}, bench_user_out P=1"
    export USER_MEMORY_REPLAYS=${USER_MEMORY_REPLAYS:-1000}
    for p in ${UM_CAPTURE_RANKS:-1 2}; do
      shared=0; [ "$p" -gt 1 ] && shared=1
      REDIST_SHARED_GPU=$shared timeout ${UM_DIAG_TIMEOUT:-70} $MPI -n "$p" python3 tests/gpu/workers/user_memory_worker.py capture \
        > "$OUT/um_capture_p$p.txt" 2>&1; echo "capture P=$p rc=$?" | tee -a "$OUT/steps.txt"; tail -40 "$OUT/um_capture_p$p.txt"
    done
    for p in ${UM_BAD_RANKS:-3}; do
      REDIST_SHARED_GPU=1 timeout ${UM_DIAG_TIMEOUT:-70} $MPI -n "$p" python3 tests/gpu/workers/user_memory_worker.py bad \
        > "$OUT/um_bad_p$p.txt" 2>&1; echo "bad P=$p rc=$?" | tee -a "$OUT/steps.txt"; tail -40 "$OUT/um_bad_p$p.txt"
    done
    timeout ${UM_BENCH_TIMEOUT:-50} $MPI -n 1 python3 perf/bench_user_out.py --n 32 256 --iters 20 --reps 3 \
      --out "$OUT/bench_user_out_p1.md" > "$OUT/um_bench_p1.txt" 2>&1; echo "bench_user_out P=1 rc=$?" | tee -a "$OUT/steps.txt"
    tail -14 "$OUT/um_bench_p1.txt" ;;
  bench-user)
    step "#44 out= in user memory vs the engine-owned result: P=1, then 4 ranks sharing the GPU"
    timeout ${UM_BENCH_TIMEOUT:-200} $MPI -n 1 python3 perf/bench_user_out.py --n ${UM_SIZES:-32 256 512} --out "$OUT/bench_user_out_p1.md" 2>&1 | tail -12
    [ "${UM_BENCH_SHARED:-1}" = 0 ] || REDIST_SHARED_GPU=1 timeout 200 $MPI -n 4 python3 perf/bench_user_out.py --n 32 128 --iters 5 --reps 3 \
      --out "$OUT/bench_user_out_p4_shared.md" 2>&1 | tail -12 ;;
  capture)
    step "capture tests P=1, then ${CAPTURE_K:-P2} ranks sharing the GPU"
    timeout ${CAPTURE_TIMEOUT:-300} python3 -m pytest -q -p no:cacheprovider -rs tests/gpu/test_capture.py -k P1 2>&1 | tee "$OUT/pytest_capture.txt" | tail -15
    REDIST_SHARED_GPU=1 timeout ${CAPTURE_SHARED_TIMEOUT:-400} python3 -m pytest -q -p no:cacheprovider -rs tests/gpu/test_capture.py -k "shared and (${CAPTURE_K:-P2})" 2>&1 | tee -a "$OUT/pytest_capture.txt" | tail -15 ;;
  bench-capture)
    step "captured step vs eager, P=1"
    timeout 300 $MPI -n 1 python3 perf/bench_capture.py --out "$OUT/bench_capture.md" 2>&1 | tail -30 ;;
  autotune)
    step "tune= on GPUs (#47): P=1, then 2 ranks sharing the GPU; the CLI's table at P=1"
    timeout ${TUNE_TIMEOUT:-400} python3 -m pytest -q -p no:cacheprovider -rs tests/gpu/test_cuda_tune.py -k P1 2>&1 | tee "$OUT/pytest_tune.txt" | tail -8
    REDIST_SHARED_GPU=1 timeout ${TUNE_SHARED_TIMEOUT:-500} python3 -m pytest -q -p no:cacheprovider -rs tests/gpu/test_cuda_tune.py -k "shared and P2" 2>&1 | tee -a "$OUT/pytest_tune.txt" | tail -8
    for n in ${TUNE_SIZES:-64 256}; do
      timeout ${TUNE_CLI_TIMEOUT:-300} $MPI -n 1 python3 -m redist tune --in-place --gpu --shape $n $n $n --dtype complex128 2>&1 | tee -a "$OUT/tune_gpu.txt" | tail -20
    done ;;
  shared)
    step "GPU tests, several ranks on one GPU"
    REDIST_SHARED_GPU=1 timeout ${SHARED_TIMEOUT:-540} python3 -m pytest -q -p no:cacheprovider -rs tests/gpu/test_cuda.py tests/cabi/test_cabi.py -k "shared and (${SHARED_K:-P2})" 2>&1 | tee -a "$OUT/pytest_shared.txt" | tail -15 ;;
  cabi)
    step "C ABI device example"
    timeout 300 python3 -m pytest -q -p no:cacheprovider tests/cabi/test_cabi.py -k device 2>&1 | tee "$OUT/pytest_cabi_gpu.txt" | tail -5
    REDIST_SHARED_GPU=1 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/cabi/test_cabi.py -k "device_loop and P2" 2>&1 | tee -a "$OUT/pytest_cabi_gpu.txt" | tail -3 ;;
  bench)
    step "bench P=1 (this tree)"
    timeout 300 $MPI -n 1 python3 perf/bench_cuda.py --sizes 32 128 512 --iters 100 --reps 9 --out "$OUT/bench_p1_new.md" 2>&1 | grep -v '^{' | tail -8 ;;
  bench-old)
    step "bench P=1 (the old commit in .old)"
    install_old
    (cd .old && PYTHONPATH=/tmp/site_old:/tmp/site timeout 300 $MPI -n 1 python3 perf/bench_cuda.py --sizes 32 128 512 --iters 100 --reps 9 --out "$OUT/bench_p1_old.md" 2>&1 | grep -v '^{' | tail -8) ;;
  nvmath)
    step "nvmath-python 1.0 suite and examples, imports swapped: P=1, then examples on 2 ranks sharing the GPU"
    timeout 240 python3 perf/nvmath_suite.py --nvmath-src .nvmath --nranks 1 --mode strict --modules test_redistribute.py \
      --example-nranks 1 2>&1 | tee "$OUT/nvmath_p1.txt" | tail -25
    REDIST_SHARED_GPU=1 timeout 200 python3 perf/nvmath_suite.py --nvmath-src .nvmath --mode strict --modules none \
      --example-nranks 2 2>&1 | tee "$OUT/nvmath_examples_p2_shared.txt" | tail -18 ;;
  fields)
    step "fused fields vs separate exchanges, P=1"
    timeout 300 $MPI -n 1 python3 perf/bench_fields.py --gpu --n 32 64 128 256 512 --iters 9 2>&1 | tee "$OUT/bench_fields_gpu.md" | tail -9 ;;
  permuted)
    step "permuted results vs dense (+ transpose copy), P=1"
    timeout 200 $MPI -n 1 python3 perf/bench_permuted.py --gpu --n 128 256 512 --iters 9 2>&1 | tee "$OUT/bench_permuted_gpu.md" | tail -6 ;;
  sizes)
    step "permuted results of several element sizes, P=1"
    (cd perf && timeout 200 python3 bench_permuted_sizes.py this 2>&1 | grep -E "^this" | tee "$OUT/bench_permuted_sizes.txt") ;;
  contract)
    step "CUDA contract tests (#22) P=1, then ${CONTRACT_K:-P2 or P3} ranks sharing the GPU"
    timeout ${CONTRACT_TIMEOUT:-300} python3 -m pytest -q -p no:cacheprovider -rs tests/gpu/test_contract.py -k "not shared" 2>&1 | tee "$OUT/pytest_contract.txt" | tail -8
    REDIST_SHARED_GPU=1 timeout ${CONTRACT_SHARED_TIMEOUT:-400} python3 -m pytest -q -p no:cacheprovider -rs tests/gpu/test_contract.py -k "shared and (${CONTRACT_K:-P2 or P3})" 2>&1 | tee -a "$OUT/pytest_contract.txt" | tail -8 ;;
  jax)
    step "redist.jax (#46): GPU tests P=1 and 2 ranks sharing the GPU (needs a CUDA jaxlib: carry its wheels in .whl), the GPU step (bench_jax.py --step, P=1), then bench_jax.py on the host cores (P = ${JAX_RANKS:-2 4})"
    python3 -c "import jax; print('jax', jax.__version__, jax.devices())" 2>&1 | tee "$OUT/jax_env.txt" | tail -2
    timeout ${JAX_TIMEOUT:-400} python3 -m pytest -q -p no:cacheprovider -rs tests/gpu/test_jax_gpu.py -k "not shared" 2>&1 | tee "$OUT/pytest_jax_gpu.txt" | tail -8
    REDIST_SHARED_GPU=1 timeout ${JAX_SHARED_TIMEOUT:-400} python3 -m pytest -q -p no:cacheprovider -rs tests/gpu/test_jax_gpu.py -k shared 2>&1 | tee -a "$OUT/pytest_jax_gpu.txt" | tail -8
    XLA_PYTHON_CLIENT_PREALLOCATE=false timeout ${JAX_BENCH_TIMEOUT:-300} $MPI -n 1 python3 perf/bench_jax.py --step --sizes ${JAX_GPU_SIZES:-128 256} 2>&1 | tee "$OUT/bench_jax_gpu.txt" | tail -8
    # the same with XLA's command buffers (its CUDA graphs of the step's kernels) off: how much of the gap they are
    echo "--- XLA_FLAGS=--xla_gpu_enable_command_buffer= (command buffers off)" | tee -a "$OUT/bench_jax_gpu.txt"
    XLA_FLAGS=--xla_gpu_enable_command_buffer= XLA_PYTHON_CLIENT_PREALLOCATE=false timeout ${JAX_BENCH_TIMEOUT:-300} $MPI -n 1 python3 perf/bench_jax.py --step \
      --sizes ${JAX_GPU_SIZES:-128 256} 2>&1 | tee -a "$OUT/bench_jax_gpu.txt" | tail -8
    for p in ${JAX_RANKS-2 4}; do  # JAX_RANKS="" skips the host rows; JAX_HOST_GLIBC=1 adds them with glibc's tunables (docs/jax.md)
      CUDA_VISIBLE_DEVICES= JAX_PLATFORMS=cpu timeout ${JAX_HOST_TIMEOUT:-500} $MPI -n $p python3 perf/bench_jax.py --sizes ${JAX_SIZES:-64 128 256} 2>&1 | tee -a "$OUT/bench_jax.txt" | tail -14
      [ "${JAX_HOST_GLIBC:-0}" = 1 ] || continue
      echo "--- GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296" | tee -a "$OUT/bench_jax.txt"
      CUDA_VISIBLE_DEVICES= JAX_PLATFORMS=cpu timeout ${JAX_HOST_TIMEOUT:-500} $MPI -n $p -x GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296 \
        python3 perf/bench_jax.py --sizes ${JAX_SIZES:-64 128 256} 2>&1 | tee -a "$OUT/bench_jax.txt" | tail -14
    done ;;
  examples)
    step "spectral examples on the GPU (#23): tests P=1 and 2 ranks sharing, Taylor-Green captured vs eager"
    timeout 300 python3 -m pytest -q -p no:cacheprovider -rs tests/examples/test_spectral.py -k gpu 2>&1 | tee "$OUT/pytest_examples_gpu.txt" | tail -8
    REDIST_SHARED_GPU=1 timeout 300 python3 -m pytest -q -p no:cacheprovider -rs tests/examples/test_spectral.py -k "gpu and shared" 2>&1 | tee -a "$OUT/pytest_examples_gpu.txt" | tail -8
    for n in ${TG_SIZES:-64 256}; do for mode in "" --eager; do
      timeout 200 $MPI -n 1 python3 examples/taylor_green.py --gpu $mode --n $n --steps ${TG_STEPS:-20} --every 10 2>&1 | tee -a "$OUT/taylor_green_gpu.txt" | tail -3
    done; done ;;
  tune)
    step "copy kernel variants and launch layers, P=1"
    timeout 300 python3 perf/tune_copy.py ${TUNE_ARGS:-} --out "$OUT/tune_copy.md" 2>&1 | tail -20 ;;
  host)
    step "host: out= vs the engine-owned result at P=2 and 4 (bench_out), then redist vs 2DECOMP&FFT (bench_2decomp.sh)"
    { lscpu | grep -E "^Model name|^CPU\(s\)|cache"; mpiexec --version 2>&1 | head -1; command -v gfortran cmake mpif90 mpicc; } \
      > "$OUT/host_env.txt" 2>&1; cat "$OUT/host_env.txt"
    export CUDA_VISIBLE_DEVICES=  # host runs: no rank sees the GPU
    for b in ${HOST_BETWEEN:-loop}; do  # bench_out.py --between; none: no bench_out
      [ "$b" = none ] && continue
      for p in 2 4; do
        # shellcheck disable=SC2086
        timeout 150 mpiexec --allow-run-as-root --bind-to core -n $p python3 perf/bench_out.py --sizes ${HOST_SIZES:-32 128 256} \
          --methods ${HOST_METHODS:-auto push-messages hybrid} --reps 9 --between $b 2>&1 | tee "$OUT/bench_out_p${p}_$b.txt" | tail -13
      done
    done
    if [ -n "${HOST_PROBE:-}" ]; then
      timeout 100 mpiexec --allow-run-as-root --bind-to core -n 2 python3 perf/probe_hot_destination.py \
        2>&1 | tee "$OUT/probe_hot_destination.txt"
      python3 -m redist.cabi build --out /tmp/cabi > /dev/null
      # shellcheck disable=SC2046
      mpicc -O2 perf/probe_cold_cabi.c $(python3 -m redist.cabi flags --out /tmp/cabi --cflags --libs) -o /tmp/probe_cold_cabi
      for p in 2 4; do
        timeout 60 mpiexec --allow-run-as-root --bind-to core -n $p python3 perf/probe_cold_call.py 8 2>&1 | tee "$OUT/probe_cold_call_p$p.txt"
        LD_LIBRARY_PATH=/tmp/cabi timeout 60 mpiexec --allow-run-as-root --bind-to core -n $p /tmp/probe_cold_cabi 2>&1 \
          | tee "$OUT/probe_cold_cabi_p$p.txt"
      done
    fi
    # without gfortran here: carry scratch/d2d-bin, made with D2D_BUILD_ONLY=scratch/d2d-bin D2D_ARCH= (bench_2decomp.sh)
    command -v gfortran > /dev/null || [ -n "${D2D_BIN:-}" ] || [ ! -d scratch/d2d-bin ] || export D2D_BIN=scratch/d2d-bin
    if [ "${D2D_GRIDS:-}" != none ] && command -v mpicc > /dev/null && [ -d scratch/2decomp-src ] \
       && { [ -n "${D2D_BIN:-}" ] || command -v gfortran; }; then
      btl=self,vader; mpiexec --version 2>&1 | grep -q "Open MPI.* 5\." && btl=self,sm  # renamed in Open MPI 5
      for b in ${D2D_BETWEEN:-poison}; do  # what both drivers do before each timed call (bench_2decomp.f90)
        BENCH_BETWEEN=$b MPIFC=mpif90 MPICC=mpicc MPIEXEC="mpiexec --allow-run-as-root --bind-to core" OMPI_MCA_btl=$btl \
          timeout ${D2D_TIMEOUT:-400} bash perf/bench_2decomp.sh scratch/2decomp-src "$OUT/d2d_$b" 20 \
          "${D2D_GRIDS:-4:2:2 4:1:4 2:1:2 2:2:1}" "${D2D_SIZES:-64 128 256}" > "$OUT/d2d_$b.log" 2>&1
        tail -5 "$OUT/d2d_$b.log"
      done
    fi ;;
  out-ab)
    step "host: bench_out.py at P=2 and 4, alternating OUT_TAGS (new: this tree, old: the commit in .old, python: this tree with REDIST_COMPILED_REPLAY=0), OUT_ROUNDS rounds"
    export CUDA_VISIBLE_DEVICES=  # host runs: no rank sees the GPU
    case " ${OUT_TAGS:-new old} " in *" old "*) install_old ;; esac
    python3 -c "from redist.engine.host import compiled; raise SystemExit(compiled.unavailable_reason())" \
      || { echo "out-ab: this tree's compiled replays are not built: no A/B" | tee -a "$OUT/steps.txt"; continue; }
    for r in $(seq ${OUT_ROUNDS:-2}); do for tag in ${OUT_TAGS:-new old}; do for p in ${OUT_RANKS:-2 4}; do
      site=/tmp/site; [ $tag = old ] && site=/tmp/site_old:/tmp/site
      compiled=1; [ $tag = python ] && compiled=0
      # shellcheck disable=SC2086
      REDIST_COMPILED_REPLAY=$compiled PYTHONPATH=$site timeout 150 mpiexec --allow-run-as-root --bind-to core -x REDIST_COMPILED_REPLAY -n $p python3 perf/bench_out.py \
        --sizes ${HOST_SIZES:-32 64 128 256} --methods ${HOST_METHODS:-push-symmetric auto hybrid} --reps 9 ${OUT_ARGS:-} \
        > "$OUT/out_ab_p${p}_${tag}_r$r.txt" 2>&1 || echo "rc=$? $tag P=$p round $r" | tee -a "$OUT/steps.txt"
    done; done; done
    tail -n 14 "$OUT"/out_ab_p2_*_r1.txt ;;
  pencils)
    step "host: perf/bench_pencils.c per host method (PENCIL_METHODS), this tree and the commit in .old if carried"
    export CUDA_VISIBLE_DEVICES=  # host runs: no rank sees the GPU
    for tree in . .old; do
      [ -d "$tree/engine" ] || continue
      tag=new; site=/tmp/site; [ "$tree" = .old ] && { tag=old; site=/tmp/site_old:/tmp/site
        install_old; }
      PYTHONPATH=$site python3 -m redist.cabi build --out /tmp/cabi_$tag > /dev/null
      # this tree's driver against either library (the same C ABI)
      # shellcheck disable=SC2046
      mpicc -O2 perf/bench_pencils.c $(PYTHONPATH=$site python3 -m redist.cabi flags --out /tmp/cabi_$tag --cflags --libs) -o /tmp/bench_pencils_$tag
      for m in ${PENCIL_METHODS:-auto hybrid}; do for g in ${PENCIL_GRIDS:-2:1:2 4:2:2}; do for n in ${PENCIL_SIZES:-32 64 128}; do
        IFS=: read -r p prow pcol <<< "$g"
        PYTHONPATH=$site LD_LIBRARY_PATH=/tmp/cabi_$tag BENCH_HOST_METHOD=$m BENCH_BETWEEN=${PENCIL_BETWEEN:-nothing} timeout 120 \
          mpiexec --allow-run-as-root --bind-to core -n "$p" /tmp/bench_pencils_$tag "$n" "$prow" "$pcol" ${PENCIL_ITERS:-50} \
          > "$OUT/pencils_${tag}_${m}_${n}_${prow}x$pcol.md" 2>&1 || echo "rc=$? $tag $m $n $g" | tee -a "$OUT/steps.txt"
      done; done; done
    done ;;
  torch)
    step "redist.torch (#45): where an eager call's host time goes, the reduce-overhead bench P=1, then GPU tests P=1 (and P=2 on two GPUs) and 2 ranks sharing a GPU"
    # TORCH_PROBE=0 skips the probe, TORCH_BENCH=0 the bench, TORCH_TESTS=0 the tests
    [ "${TORCH_PROBE:-1}" = 0 ] || { timeout 90 $MPI -n 1 python3 perf/probe_torch_gpu_call.py 64 > "$OUT/probe_torch_gpu_call.txt" 2>&1
      head -16 "$OUT/probe_torch_gpu_call.txt"; }
    [ "${TORCH_BENCH:-1}" = 0 ] || TORCH_LOGS=perf_hints timeout ${TORCH_BENCH_TIMEOUT:-300} $MPI -n 1 python3 perf/bench_torch_gpu.py \
      --n ${TORCH_GPU_SIZES:-64 128 256} --iters 50 --reps 9 2>&1 | tee "$OUT/bench_torch_gpu.md" | sed -n '/^redist.torch on GPUs/,$p'
    [ "${TORCH_TESTS:-1}" = 0 ] && continue
    timeout ${TORCH_TIMEOUT:-500} python3 -m pytest -q -p no:cacheprovider -rs tests/gpu/test_torch_gpu.py -k "not shared" 2>&1 | tee "$OUT/pytest_torch_gpu.txt" | tail -8
    REDIST_SHARED_GPU=1 timeout ${TORCH_SHARED_TIMEOUT:-500} python3 -m pytest -q -p no:cacheprovider -rs tests/gpu/test_torch_gpu.py -k "shared and P2" 2>&1 | tee -a "$OUT/pytest_torch_gpu.txt" | tail -8 ;;
  torch-host)
    step "host: probe_torch_call.py (P = 1) and bench_torch.py (#45) on the machine's cores, P = ${TORCH_HOST_RANKS:-2 4}"
    CUDA_VISIBLE_DEVICES= timeout 120 mpiexec --allow-run-as-root -n 1 python3 perf/probe_torch_call.py 2>&1 | tee "$OUT/probe_torch_call.txt" | tail -11
    for p in ${TORCH_HOST_RANKS:-2 4}; do
      CUDA_VISIBLE_DEVICES= timeout ${TORCH_HOST_TIMEOUT:-200} mpiexec --allow-run-as-root --bind-to core -n "$p" python3 perf/bench_torch.py \
        --n ${TORCH_HOST_SIZES:-64 128 256} --iters 15 > "$OUT/bench_torch_p$p.txt" 2>&1 || echo "rc=$? bench_torch P=$p" | tee -a "$OUT/steps.txt"
      tail -n 6 "$OUT/bench_torch_p$p.txt"
    done ;;
  torch-bwd)
    step "host: probe_torch_backward.py (#45) at P = ${TORCH_BWD_RANKS:-4} on the machine's cores, N = ${TORCH_BWD_SIZES:-64 128}, then with glibc's malloc tunables"
    for p in ${TORCH_BWD_RANKS:-4}; do for n in ${TORCH_BWD_SIZES:-64 128}; do
      CUDA_VISIBLE_DEVICES= timeout 120 mpiexec --allow-run-as-root --bind-to core -n "$p" python3 perf/probe_torch_backward.py "$n" 2>&1 | tee -a "$OUT/probe_torch_backward.txt" | tail -9
      echo "--- GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296" | tee -a "$OUT/probe_torch_backward.txt"
      CUDA_VISIBLE_DEVICES= GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296 timeout 120 \
        mpiexec --allow-run-as-root --bind-to core -x GLIBC_TUNABLES -n "$p" python3 perf/probe_torch_backward.py "$n" 2>&1 | tee -a "$OUT/probe_torch_backward.txt" | tail -9
    done; done ;;
  tune-host)
    step "host: bench_tune.py (#47) on the machine's cores with its MPI, P = ${TUNE_HOST_RANKS:-2 4} (pencils from P = 4), operands and --out"
    for p in ${TUNE_HOST_RANKS:-2 4}; do
      layouts=slab; [ "$p" -ge 4 ] && layouts="slab pencil"
      for o in "" --out; do
        # shellcheck disable=SC2086
        CUDA_VISIBLE_DEVICES= timeout ${TUNE_HOST_TIMEOUT:-150} mpiexec --allow-run-as-root --bind-to core -n "$p" python3 perf/bench_tune.py \
          --layouts $layouts --iters 30 $o > "$OUT/bench_tune_p$p${o:+_out}.md" 2>&1 || echo "rc=$? bench_tune P=$p $o" | tee -a "$OUT/steps.txt"
        tail -n 20 "$OUT/bench_tune_p$p${o:+_out}.md"
      done
    done ;;
  *) echo "unknown step $s" ;;
  esac
done
step done
# the device tool brings back 8 files: everything, in one archive (named to sort first)
tar czf /tmp/all.tgz -C "$OUT" . && mv /tmp/all.tgz "$OUT/all.tgz"
