# SPDX-License-Identifier: Apache-2.0
"""redist.torch on GPUs (skipped without one): the torch worker with ``--gpu`` (values, gradients,
the distributed finite-difference check, torch.compile(mode="reduce-overhead") against eager,
bad input with mixed devices) and examples/fno_layer.py --gpu against its one-process run.
P ranks need P GPUs, or one GPU and REDIST_SHARED_GPU=1 (perf/device_run.sh, step "torch")."""

from __future__ import annotations

import sys

import pytest
from helpers import NO_TORCH, TESTS, gpu_env, gpu_ranks, have_torch

from redist._launch import run_mpi

pytestmark = [pytest.mark.gpu, pytest.mark.mpi, pytest.mark.skipif(not have_torch(), reason=NO_TORCH)]


@pytest.mark.parametrize("nranks", gpu_ranks(1, 2))
def test_torch_adapter_gpu(mpirun, nranks):
    what = ["grad", "compile"] + (["bad"] if nranks > 1 else [])
    mpirun(nranks, "torch_worker.py", "--gpu", *what, timeout=600, env=gpu_env())


@pytest.mark.parametrize("nranks", gpu_ranks(1, 2))
def test_fno_layer_gpu(nranks):
    script = TESTS.parent / "examples" / "fno_layer.py"
    res = run_mpi(
        nranks,
        [sys.executable, str(script), "--gpu", "--shape", "16", "12", "8", "--steps", "3"],
        timeout=400,
        env=gpu_env(),
    )
    assert res.returncode == 0 and "max relative difference" in res.stdout, res.stdout[-4000:]
