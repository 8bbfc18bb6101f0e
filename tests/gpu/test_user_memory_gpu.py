# SPDX-License-Identifier: Apache-2.0
"""GPU out= in ordinary device memory (issue #44): every allocator, strided, permuted and fused
out=, captured steps replayed 1,000 times, and the bad-input list (one rank wrong). Each mode runs
tests/gpu/workers/user_memory_worker.py under ``mpiexec`` with a timeout; skipped without a GPU.
Cases of P ranks need P GPUs, or one GPU and ``REDIST_SHARED_GPU=1`` (ids end in ``-shared``).
"""

from __future__ import annotations

import pytest
from helpers import gpu_env, gpu_ranks

pytestmark = [pytest.mark.gpu, pytest.mark.mpi]

ENV = gpu_env()


@pytest.mark.parametrize("nranks", gpu_ranks(1, 2, 3, 4))
@pytest.mark.parametrize("mode", ["allocators", "capture"])
def test_user_memory(mpirun, mode, nranks):
    mpirun(nranks, "user_memory_worker.py", mode, timeout=300, env=ENV)


@pytest.mark.parametrize("nranks", gpu_ranks(2, 3))
def test_user_memory_bad_input(mpirun, nranks):
    mpirun(nranks, "user_memory_worker.py", "bad", timeout=240, env=ENV)


@pytest.mark.parametrize("nranks", gpu_ranks(1, 2))
def test_user_memory_expandable_segments(mpirun, nranks):
    mpirun(
        nranks,
        "user_memory_worker.py",
        "expandable",
        timeout=240,
        env=gpu_env(PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"),
    )
