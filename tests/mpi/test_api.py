# SPDX-License-Identifier: Apache-2.0
"""The public API end to end on the MPI host backend, on 1-4 ranks (tests/mpi/workers/api_worker.py)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from helpers import NO_TORCH, have_torch

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_correctness_matrix(mpirun, nprocs):
    """Slabs on every axis pair, 1-D..5-D, pencils, random boxes with empty ranks; 5 dtypes; C/F/padded."""
    mpirun(nprocs, "api_worker.py", "matrix", nprocs, timeout=300)


@pytest.mark.parametrize("nprocs", [1, 3])
def test_lifecycle(mpirun, nprocs):
    mpirun(nprocs, "api_worker.py", "lifecycle", timeout=180)


@pytest.mark.parametrize("nprocs", [2, 4])
def test_errors_raised_identically_on_every_rank(mpirun, nprocs):
    """Bad input on one rank only: every rank raises the same error and the job ends in time."""
    mpirun(nprocs, "api_worker.py", "errors", timeout=180)


def test_errors_single_rank(mpirun):
    mpirun(1, "api_worker.py", "errors", timeout=120)


@pytest.mark.skipif(not have_torch(), reason=NO_TORCH)
@pytest.mark.parametrize("nprocs", [2])
def test_torch_cpu_tensors(mpirun, nprocs):
    mpirun(nprocs, "api_worker.py", "torch", timeout=180)


def test_demo_cli():
    """`python -m redist demo --ranks 2 --shape 32 32 32` relaunches under mpiexec, verifies, prints a table."""
    res = subprocess.run([sys.executable, "-m", "redist", "demo", "--ranks", "2", "--shape", "32", "32", "32",
                          "--iterations", "5"], capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "every element verified" in res.stdout, res.stdout
    assert "ms/execute" in res.stdout and "forward" in res.stdout


def test_single_process_without_mpiexec():
    """A plain `python` process (no launcher) is a 1-rank world."""
    code = (
        "import numpy as np, redist\n"
        "a = np.arange(24.).reshape(4, 6)\n"
        "b = redist.redistribute(a, redist.Slab.X, redist.Slab.Y)\n"
        "assert np.array_equal(b, a) and redist.get_context().process_group.nranks == 1\n"
        "print('single ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "single ok" in res.stdout, res.stdout + res.stderr


def test_logging_stages_with_times():
    """options.logger gets each stage with its time: construction, planning (+ per-peer bytes), execute."""
    code = (
        "import logging, io, numpy as np, redist\n"
        "buf = io.StringIO(); log = logging.getLogger('redist-test'); log.setLevel(logging.DEBUG)\n"
        "log.addHandler(logging.StreamHandler(buf))\n"
        "a = np.arange(24.).reshape(4, 6)\n"
        "with redist.Redistribute(a, redist.Slab.X, redist.Slab.Y, options={'logger': log}) as r:\n"
        "    r.plan(); r.execute()\n"
        "print(buf.getvalue())\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "Redistribute: 1 ranks" in out and "backend host" in out, out
    assert re.search(r"plan: [0-9.]+ ms on cpu; rank 0 sends \{\}, receives \{\}, keeps 192 B", out), out
    assert re.search(r"execute: [0-9.]+ ms on cpu \(blocking\)", out), out
    assert "Plan rank 0/1" in out  # DEBUG: the plan's describe()
