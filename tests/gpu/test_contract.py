# SPDX-License-Identifier: Apache-2.0
"""The contract on the CUDA backend (issue #22): failed calls launch nothing and change no byte,
``execute(out=)`` leaves the engine-owned result alone, an out= reshaped in place is checked anew,
torch CUDA operands with empty output boxes, initialize/finalize cycles. Each mode runs
tests/gpu/workers/contract_worker.py under ``mpiexec`` with a timeout; skipped without a GPU.
Cases of P ranks need P GPUs, or one GPU and ``REDIST_SHARED_GPU=1`` (ids end in ``-shared``).
"""

from __future__ import annotations

import pytest
from helpers import gpu_env, gpu_ranks

pytestmark = [pytest.mark.gpu, pytest.mark.mpi]

ENV = gpu_env()

MODES = ("failed", "out", "reshaped", "torch-empty", "lifetime", "fresh-mixed")


@pytest.mark.parametrize("nranks", gpu_ranks(1, 2, 3))
@pytest.mark.parametrize("mode", MODES)
def test_contract(mpirun, mode, nranks):
    mpirun(nranks, "contract_worker.py", mode, timeout=240, env=ENV)
