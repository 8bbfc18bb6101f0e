# SPDX-License-Identifier: Apache-2.0
"""GPU tests of execute() inside the user's own CUDA graph capture (torch, cupy, raw streams):
skipped when no GPU is visible. Each mode runs tests/gpu/workers/capture_worker.py under
``mpiexec`` with a timeout; P ranks need P GPUs, or one GPU and ``REDIST_SHARED_GPU=1``.
The same logic runs in CI on the simulated driver (tests/unit/test_cuda_compile.py, "capture").
"""

from __future__ import annotations

import pytest
from helpers import gpu_env, gpu_ranks

pytestmark = [pytest.mark.gpu, pytest.mark.mpi]

MODES = {"torch": 300, "cupy": 240, "step": 300, "readme": 120}


@pytest.mark.parametrize("nranks", gpu_ranks(1, 2, 3, 4))
@pytest.mark.parametrize("mode", list(MODES))
def test_capture_mode(mpirun, mode, nranks):
    mpirun(nranks, "capture_worker.py", mode, timeout=MODES[mode], env=gpu_env())
