# SPDX-License-Identifier: Apache-2.0
"""GPU tests of the CUDA backend (NVSHMEM + CUDA graphs): skipped when no GPU is visible.

Each test runs tests/workers/cuda_worker.py under ``mpiexec`` with a timeout, one rank per
GPU; the worker reduces failures across ranks and rank 0 prints ALL OK. Two-rank tests need two
GPUs (NVSHMEM runs one PE per GPU).
"""

from __future__ import annotations

import os

import pytest
from conftest import gpu_count

pytestmark = [pytest.mark.gpu, pytest.mark.mpi]

ENV = dict(os.environ)
ENV.setdefault("NVSHMEM_DISABLE_NVLS", "1")
ENV.setdefault("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo")
ENV.setdefault("PYTHONUNBUFFERED", "1")


def ranks_available(n: int):
    return pytest.mark.skipif(gpu_count() < n, reason=f"needs {n} GPUs (one NVSHMEM PE per GPU)")


@pytest.mark.parametrize(
    "nranks", [pytest.param(1, marks=ranks_available(1)), pytest.param(2, marks=ranks_available(2))]
)
def test_engine_layouts_transports_eager_vs_graph(mpirun, nranks):
    """Slabs X<->Y<->Z, pencils, random and uneven/empty boxes, 1-D..5-D, C/F, item sizes 1..16,
    padded / transposed / misaligned operands, push and put; each graph result equals the eager
    (uncaptured) run of the same kernels and the expected global pattern."""
    mpirun(nranks, "cuda_worker.py", "engine", timeout=300, env=ENV)


@pytest.mark.parametrize(
    "nranks", [pytest.param(1, marks=ranks_available(1)), pytest.param(2, marks=ranks_available(2))]
)
def test_replay_1000_with_rebind_every_iteration(mpirun, nranks):
    """1000 launches, each with a new operand (alternating alignment, so the kernel node's vector
    width switches too) and a new out= buffer, entry sync toggled, some eager launches mixed in;
    every result is compared on the device: bit-exact."""
    mpirun(nranks, "cuda_worker.py", "replay", timeout=240, env=ENV)


@pytest.mark.parametrize(
    "nranks", [pytest.param(1, marks=ranks_available(1)), pytest.param(2, marks=ranks_available(2))]
)
def test_redistribute_api_on_gpus(mpirun, nranks):
    """redist.Redistribute with cupy, torch (CUDA and CPU via execution='cuda'), numpy and RawArray;
    streams of every kind; out= symmetric buffers; release_workspace; the function form and
    allocate/free_symmetric_memory with their errors."""
    mpirun(nranks, "cuda_worker.py", "api", timeout=240, env=ENV)


@pytest.mark.parametrize("nranks", [pytest.param(2, marks=ranks_available(2))])
def test_heap_too_small_names_the_setting(mpirun, nranks):
    """A symmetric allocation larger than the heap may grow to (NVSHMEM_MAX_MEMORY_PER_GPU with
    CUDA VMM) raises InvalidValueError on every rank, naming the settings to raise; the runtime keeps
    working afterwards."""
    env = dict(ENV, NVSHMEM_SYMMETRIC_SIZE=str(256 << 20), NVSHMEM_MAX_MEMORY_PER_GPU=str(2 << 30))
    mpirun(nranks, "cuda_worker.py", "heap", timeout=120, env=env)
