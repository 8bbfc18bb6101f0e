# SPDX-License-Identifier: Apache-2.0
"""GPU tests of the CUDA backend (NVSHMEM + CUDA graphs): skipped when no GPU is visible.

Each case runs tests/gpu/workers/cuda_worker.py in one of its modes under ``mpiexec`` with a
timeout; the worker reduces failures across ranks and rank 0 prints ALL OK. Modes (pytest
parameters, so ``-k replay`` picks one): ``engine`` (the backend at the plan level: layouts,
dimensions, item sizes, transports, alignment, eager vs graph), ``replay`` (1000 launches with a
rebind of input and out= every iteration), ``api`` (redist.Redistribute with cupy, torch, numpy
and RawArray operands, streams, out=, symmetric memory), ``fields`` (several arrays in one exchange),
``heap`` (a too-large allocation).
Cases of P ranks need P GPUs, or one GPU and ``REDIST_SHARED_GPU=1`` (several NVSHMEM PEs on one
GPU: correct but slow, the processes time-slice; ids end in ``-shared``).
"""

from __future__ import annotations

import pytest
from helpers import gpu_env, gpu_ranks

pytestmark = [pytest.mark.gpu, pytest.mark.mpi]

ENV = gpu_env()

MODES = {"engine": 300, "replay": 240, "api": 240, "fields": 180}


@pytest.mark.parametrize("nranks", gpu_ranks(1, 2, 3, 4))
@pytest.mark.parametrize("mode", list(MODES))
def test_worker_mode(mpirun, mode, nranks):
    mpirun(nranks, "cuda_worker.py", mode, timeout=MODES[mode], env=ENV)


@pytest.mark.parametrize("nranks", gpu_ranks(2))
def test_heap_too_small_names_the_setting(mpirun, nranks):
    """A symmetric allocation larger than the heap may grow to (NVSHMEM_MAX_MEMORY_PER_GPU with
    CUDA VMM) raises InvalidValueError on every rank, naming the settings to raise; the runtime keeps
    working afterwards."""
    env = gpu_env(NVSHMEM_SYMMETRIC_SIZE=str(256 << 20), NVSHMEM_MAX_MEMORY_PER_GPU=str(2 << 30))
    mpirun(nranks, "cuda_worker.py", "heap", timeout=120, env=env)
