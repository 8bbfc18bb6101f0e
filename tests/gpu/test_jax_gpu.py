# SPDX-License-Identifier: Apache-2.0
"""redist.jax with JAX on the GPU (the CUDA backend on XLA's stream): the checks of
tests/mpi/workers/jax_worker.py (eager, jit, vmap, grad against central differences; bad input at
P = 2) with ``REDIST_JAX_PLATFORM=cuda``. Skipped without a GPU, or without a CUDA build of jaxlib.
P ranks need P GPUs, or one GPU and ``REDIST_SHARED_GPU=1`` (ids end in ``-shared``).
"""

from __future__ import annotations

import importlib.util

import pytest
from helpers import gpu_env, gpu_ranks

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.mpi,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed"),
]

# JAX must not take the GPU's memory before NVSHMEM's heap does
ENV = gpu_env(REDIST_JAX_PLATFORM="cuda", XLA_PYTHON_CLIENT_PREALLOCATE="false")


def _jax_has_cuda() -> bool:
    import subprocess
    import sys

    code = "import jax; print(any(d.platform == 'gpu' for d in jax.devices()))"
    try:
        res = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=ENV
        )
    except subprocess.TimeoutExpired:
        return False
    return res.stdout.strip().endswith("True")


@pytest.mark.parametrize("nranks", gpu_ranks(1, 2))
def test_jax_gpu(mpirun, nranks):
    if not _jax_has_cuda():
        pytest.skip("this jaxlib has no CUDA backend (pip install 'jax[cuda13]')")
    checks = ["forward", "grad"] + (["errors"] if nranks == 2 else [])
    mpirun(nranks, "jax_worker.py", *checks, timeout=420, env=ENV)
