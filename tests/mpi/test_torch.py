# SPDX-License-Identifier: Apache-2.0
"""redist.torch on 1-4 ranks (tests/mpi/workers/torch_worker.py): values and gradients of every case
(gradcheck at P = 1, the distributed finite-difference check above), double backward, several
fields, no_grad, autocast, vmap refused; torch.compile(fullgraph=True) with zero graph breaks; the
bad-input cases with one rank wrong. Several checks share one mpiexec launch."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import NO_TORCH, have_torch

pytestmark = [pytest.mark.mpi, pytest.mark.skipif(not have_torch(), reason=NO_TORCH)]


@pytest.mark.parametrize(
    ("nprocs", "what"), [(1, ["grad"]), (2, ["grad", "compile", "bad"]), (3, ["grad", "bad"]), (4, ["grad"])]
)
def test_torch_adapter(mpirun, nprocs, what):
    mpirun(nprocs, "torch_worker.py", *what, timeout=600)


def test_import_redist_does_not_import_torch():
    code = (
        "import sys, redist; assert 'torch' not in sys.modules, 'import redist imported torch'; print('ok')"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "ok" in res.stdout, res.stdout + res.stderr
