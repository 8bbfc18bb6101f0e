# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures: the MPI launcher and the GPU skip rule.

Multi-rank tests run a worker script from tests/workers under ``mpiexec -n P`` with a timeout.
Each worker reduces its failures across ranks before deciding (so no rank hangs) and rank 0
prints ``ALL OK`` when every rank passed.
"""

from __future__ import annotations

import os
import sys

import pytest

from redist._launch import find_mpiexec, run_mpi

WORKERS = os.path.join(os.path.dirname(__file__), "workers")


def gpu_count() -> int:
    try:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return 0
        err, n = driver.cuDeviceGetCount()
        return n if err == driver.CUresult.CUDA_SUCCESS else 0
    except Exception:
        return 0


def pytest_collection_modifyitems(config, items):
    if gpu_count() == 0:
        skip = pytest.mark.skip(reason="no CUDA GPU visible (gpu tests run on the lent H200 machines)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def mpirun():
    """``mpirun(P, "worker.py", *args, timeout=...)`` -> CompletedProcess; asserts ALL OK by default."""
    if find_mpiexec() is None:
        pytest.skip("mpiexec not found")

    def run(nprocs, worker, *args, timeout=240, expect_ok=True, env=None):
        script = worker if os.path.isabs(worker) else os.path.join(WORKERS, worker)
        res = run_mpi(nprocs, [sys.executable, script, *map(str, args)], timeout=timeout, env=env)
        if expect_ok:
            assert res.returncode == 0 and "ALL OK" in res.stdout, (
                f"mpiexec -n {nprocs} {worker} {' '.join(map(str, args))} failed (rc={res.returncode}):\n"
                + res.stdout[-6000:]
            )
        return res

    return run
