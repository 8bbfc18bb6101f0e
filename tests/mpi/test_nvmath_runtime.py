# SPDX-License-Identifier: Apache-2.0
"""nvmath-python 1.0 drop-in behaviours under mpiexec (tests/mpi/workers/nvmath_compat_worker.py):
the runtime forms, the CPU examples' flows, the errors nvmath's suite checks, release_operand."""

from __future__ import annotations

import pytest
from helpers import NO_TORCH, have_torch

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_nvmath_behaviours(mpirun, nprocs):
    mpirun(nprocs, "nvmath_compat_worker.py", timeout=240)


@pytest.mark.skipif(not have_torch(), reason=NO_TORCH)
def test_nvmath_torch_example_flow(mpirun):
    """example02/05: torch CPU tensors through redist.distribution, fresh results per execute."""
    mpirun(2, "nvmath_compat_worker.py", "torch", timeout=240)
