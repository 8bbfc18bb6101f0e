# SPDX-License-Identifier: Apache-2.0
"""redist.jax on CPU under mpiexec (tests/mpi/workers/jax_worker.py): eager and jitted results,
vmap, jax.grad against central differences of the global loss at P = 1..4; bad input on one rank
at P = 2 and 3 (the same redist error on every rank, under the launch's watchdog). One launch per
rank count covers every check."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.skipif(
        importlib.util.find_spec("jax") is None, reason="jax is not installed (the [jax] extra)"
    ),
    pytest.mark.skipif(
        not any(shutil.which(c) for c in ("c++", "g++", "clang++")),
        reason="no C++ compiler for redist.jax's handlers",
    ),
]


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_jax(mpirun, nprocs):
    checks = ["forward", "forward-out", "grad"] + (["errors"] if nprocs in (2, 3) else [])
    mpirun(nprocs, "jax_worker.py", *checks, timeout=420)
