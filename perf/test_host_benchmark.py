# SPDX-License-Identifier: Apache-2.0
"""pytest-benchmark version of the host comparison (not part of the test-suite: perf/ is not collected).

Run both ranks in lockstep (``pedantic`` fixes the round count, so no rank calibrates alone)::

    mpiexec -n 2 python -m pytest perf/test_host_benchmark.py -q --benchmark-columns=median,min,max

Slab.X -> Slab.Y, complex128, N = 128 and 256: ``Redistribute.execute()`` (public API, host
backend) vs one hand-written ``comm.Alltoallw`` with ``Create_subarray`` types (mpi4py-fft's way).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from mpi4py import MPI

import redist

sys.path.insert(0, os.path.dirname(__file__))
from bench_host import local_values, slab_box, subarray_types  # noqa: E402

comm = MPI.COMM_WORLD
rank, P = comm.rank, comm.size
ROUNDS = 30


def _problem(n):
    g = (n, n, n)
    ib = [slab_box(0, r, g, P) for r in range(P)]
    ob = [slab_box(1, r, g, P) for r in range(P)]
    return g, ib, ob, local_values(ib[rank], g, np.complex128), local_values(ob[rank], g, np.complex128)


def _synced(fn):
    def run():
        comm.Barrier()
        fn()

    return run


@pytest.mark.parametrize("n", [128, 256])
def test_redist_host_execute(benchmark, n):
    g, ib, ob, a, want = _problem(n)
    with redist.Redistribute(a, redist.Slab.X, redist.Slab.Y) as r:
        r.plan()
        benchmark.pedantic(_synced(r.execute), rounds=ROUNDS, iterations=1, warmup_rounds=3)
        assert np.array_equal(r.execute(), want)


@pytest.mark.parametrize("n", [128, 256])
def test_handwritten_alltoallw_subarray(benchmark, n):
    g, ib, ob, a, want = _problem(n)
    out = np.empty(want.shape, np.complex128)
    T = MPI.DOUBLE_COMPLEX
    st = subarray_types(comm, T, a.shape, 1, ob, ib[rank])
    rt = subarray_types(comm, T, out.shape, 0, ib, ob[rank])
    ones, zeros = [1] * P, [0] * P
    benchmark.pedantic(_synced(lambda: comm.Alltoallw([a, ones, zeros, st], [out, ones, zeros, rt])),
                       rounds=ROUNDS, iterations=1, warmup_rounds=3)
    assert np.array_equal(out, want)
