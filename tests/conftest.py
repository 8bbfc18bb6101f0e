# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures: the MPI launcher and the GPU skip rule.

tests/ mirrors the code: ``unit/`` (pure engine, the CUDA lowering without a GPU), ``mpi/`` (the
API and the host backend under mpiexec), ``gpu/`` (the CUDA backend on a GPU), ``cabi/`` (C and
Fortran). Multi-rank tests run a worker script (``<area>/workers/*.py``) under ``mpiexec -n P``
with a timeout. Each worker reduces its failures across ranks before deciding (so no rank
hangs) and rank 0 prints ``ALL OK`` when every rank passed. Shared helpers: tests/helpers.py.
"""

from __future__ import annotations

import os
import sys

import pytest

from helpers import TESTS, gpu_count
from redist._launch import find_mpiexec, run_mpi


def worker_path(name: str) -> str:
    """The path of a worker script, found in any ``tests/<area>/workers/``."""
    if os.path.isabs(name):
        return name
    hits = sorted(TESTS.glob(f"*/workers/{name}"))
    if len(hits) != 1:
        raise FileNotFoundError(f"worker {name!r}: found {hits}")
    return str(hits[0])


#: what ``--fast`` leaves out: everything that spawns processes or compiles for long
FAST_SKIPS = ("mpi", "cabi", "fortran", "gpu", "slow")


def pytest_addoption(parser):
    parser.addoption("--fast", action="store_true",
                     help=f"run only the quick in-process tests: deselect those marked {', '.join(FAST_SKIPS)} "
                          "(about a minute on 2 cores; CI runs everything)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--fast"):
        slow = [item for item in items if any(m in item.keywords for m in FAST_SKIPS)]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if item not in slow]
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
        res = run_mpi(nprocs, [sys.executable, worker_path(worker), *map(str, args)], timeout=timeout, env=env)
        if expect_ok:
            assert res.returncode == 0 and "ALL OK" in res.stdout, (
                f"mpiexec -n {nprocs} {worker} {' '.join(map(str, args))} failed (rc={res.returncode}):\n"
                + res.stdout[-6000:]
            )
        return res

    return run
