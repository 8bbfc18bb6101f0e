# SPDX-License-Identifier: Apache-2.0
"""tune="measure" / "wisdom" on the CUDA backend (tests/gpu/workers/cuda_tune_worker.py): every
candidate (transport x signal x kernel variant) measured on the GPU, each one made the winner in
turn and checked bit for bit, a wisdom hit. Skipped without a GPU; ``-shared`` ids run several
ranks on one GPU (REDIST_SHARED_GPU=1)."""

from __future__ import annotations

import pytest
from helpers import gpu_env, gpu_ranks

pytestmark = [pytest.mark.gpu, pytest.mark.mpi]


@pytest.mark.parametrize("nranks", gpu_ranks(1, 2))
def test_tune_on_gpus(mpirun, nranks):
    mpirun(nranks, "cuda_tune_worker.py", timeout=400, env=gpu_env())
