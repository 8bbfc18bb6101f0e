# SPDX-License-Identifier: Apache-2.0
"""Lifetime: 5000 objects dropped without free() and 100,000 executes with a rebind each leave
resident memory and open file descriptors flat (tests/mpi/workers/soak_worker.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nprocs", [1, 2])
def test_soak_objects_and_rebinds(mpirun, nprocs):
    res = mpirun(nprocs, "soak_worker.py", 5000, 100_000, timeout=300)
    assert "dropped objects" in res.stdout


@pytest.mark.parametrize("nprocs", [2, 3])
def test_lifetimes_across_finalize(mpirun, nprocs):
    """50 initialize/finalize cycles with objects freed, dropped and still referenced, results held
    past free() and finalize() (tests/mpi/workers/lifetime_worker.py): no hang, results stay
    valid, RSS, descriptors, communicators and shared memory flat."""
    res = mpirun(nprocs, "lifetime_worker.py", 50, timeout=180)
    assert "50 cycles" in res.stdout
