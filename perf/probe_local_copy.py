# SPDX-License-Identifier: Apache-2.0
"""A local-copy exchange (every rank keeps its own box) against one numpy copy of that box.

    mpiexec -n P python perf/probe_local_copy.py N METHOD

An N^3 float64 array split along axis 0 (the 1 x P grid's X -> Y pencils of a Fortran code, in C
order), redistributed to the same boxes: ``execute()`` (engine-owned result), ``execute(out=)``
(the caller's array) and ``np.copyto`` of the same bytes (the floor), medians of 30 calls after 3,
barrier before each, the slowest rank. A diagnostic for the 128^3 local-copy case of perf/history/issue22.md.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from mpi4py import MPI

from redist import Redistribute


def main() -> None:
    comm = MPI.COMM_WORLD
    rank, nranks = comm.rank, comm.size
    n, method = int(sys.argv[1]), sys.argv[2]
    lo, hi = (rank * n // nranks, 0, 0), ((rank + 1) * n // nranks, n, n)
    a = np.random.default_rng(rank).random((hi[0] - lo[0], n, n))
    r = Redistribute(a, (lo, hi), (lo, hi), options={"host_method": method})
    r.plan()
    out = np.empty_like(a)

    def median_ms(fn, reps: int = 30) -> float:
        for _ in range(3):
            fn()
        times = []
        for _ in range(reps):
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return max(comm.allgather(sorted(times)[reps // 2])) * 1e3

    result, into, floor = median_ms(r.execute), median_ms(lambda: r.execute(out=out)), median_ms(
        lambda: np.copyto(out, a))
    if rank == 0:
        print(f"N={n} {method}: result {result:.3f} ms, out= {into:.3f} ms, np.copyto {floor:.3f} ms "
              f"({a.nbytes / 2**20:.0f} MiB per rank)")
    r.free()


if __name__ == "__main__":
    main()
