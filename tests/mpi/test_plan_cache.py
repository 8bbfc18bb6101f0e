# SPDX-License-Identifier: Apache-2.0
"""The adapters' plan cache (pybind/_plan_cache.py) under mpiexec: clear() after the ranks' caches
diverged frees collectively only what every rank held, and a clear() on one rank only is caught by
the next lookup (tests/mpi/workers/plan_cache_worker.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nprocs", [2, 3])
@pytest.mark.parametrize("mode", ["diverged", "lone-clear"])
def test_clear(mpirun, nprocs, mode):
    mpirun(nprocs, "plan_cache_worker.py", mode, timeout=120)
