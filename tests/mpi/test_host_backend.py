# SPDX-License-Identifier: Apache-2.0
"""The MPI host backend (engine/host) on 1-4 ranks: tests/mpi/workers/host_backend_worker.py.

One mpiexec per rank count runs every case (slabs, pencils, random boxes with empty ranks, 1-D to
5-D, 9 dtypes incl. 12/13-byte and raw-bit items, C/F/padded/strided/permuted operands) with every
method, rebinding, new outputs and release_workspace. The tests here that need no MPI check the
view helpers and that importing the backend does not start MPI.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from redist.engine.host._datatypes import copy_views, fused, is_contiguous, span_bytes
from redist.engine.plan import make_plan
from redist.engine.strided import HostBuffer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_host_backend_matrix(mpirun, nprocs):
    """Every case x dtype x method on nprocs ranks, checked bit for bit, failures reduced across ranks."""
    res = mpirun(nprocs, "host_backend_worker.py", timeout=240)
    assert "0 failure(s)" in res.stdout


@pytest.mark.mpi
def test_bench_script_smoke(mpirun):
    """perf/bench_host.py runs (tiny size, few iterations) and verifies its results."""
    res = mpirun(2, os.path.join(ROOT, "perf", "bench_host.py"), "--sizes", "16", "--iters", "3", "--warmup", "1",
                 timeout=180)
    assert "baseline" in res.stdout and "datatype" in res.stdout


def test_import_does_not_start_mpi():
    code = "import sys, redist.engine.host as h; assert 'mpi4py.MPI' not in sys.modules; print(h.METHODS)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert "datatype" in res.stdout


def test_region_helpers():
    assert is_contiguous((5,), (1,))
    assert is_contiguous((1,), (7,))
    assert not is_contiguous((5,), (2,))
    assert not is_contiguous((2, 3), (4, 1))
    assert span_bytes((2, 3), (4, 1), 16) == (4 + 2 + 1) * 16
    assert span_bytes((0, 3), (4, 1), 16) == 0
    assert fused((4, 3), (10, 1), (3, 1)) == ((4,), (10,), (3,), 3)
    assert fused((6,), (1,), (1,)) == ((1,), (0,), (0,), 6)
    assert fused((4, 3), (10, 2), (3, 1)) == ((4, 3), (10, 2), (3, 1), 1)


@pytest.mark.parametrize("dtype", ["u1", "f2", "V12", "c16"])
def test_copy_views_match_reference_pack(dtype):
    """Views built once give the same bytes as the plan's pack copy (any itemsize)."""
    ib = [((0, 0, 0), (3, 6, 7)), ((3, 0, 0), (5, 6, 7))]
    ob = [((0, 0, 0), (5, 3, 7)), ((0, 3, 0), (5, 6, 7))]
    dt = np.dtype(dtype)
    rng = np.random.default_rng(0)
    src = rng.integers(0, 256, size=(3, 6, 7, dt.itemsize), dtype=np.uint8).view(dt)[..., 0]
    plan = make_plan(0, ib, ob, itemsize=dt.itemsize)
    (t,) = plan.sends
    stage = np.zeros(t.nbytes, np.uint8)
    d, s = copy_views(t.pack, HostBuffer.of(src), HostBuffer(stage.ctypes.data, dt.itemsize, stage))
    np.copyto(d, s, casting="no")
    expect = np.ascontiguousarray(src[:, 3:6, :]).view(np.uint8).ravel()
    assert np.array_equal(stage, expect)
