# SPDX-License-Identifier: Apache-2.0
"""Does the order of timing change which host method looks fastest (issue #47)?

    mpiexec -n 2 python perf/probe_tune_order.py [N]

Slab.X -> Slab.Y of an N^3 float64 array (default 128), one planned object per host method; each
method timed (a) back to back, 15 calls of one method then the next (how tune= timed before it
interleaved), (b) interleaved, one call of each per round, (c) interleaved with a barrier before
every call (perf/bench_tune.py's loop). Median ms per call, the slowest rank's median.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import redist
from redist import Redistribute, Slab
from redist.engine.host import available_methods


def main() -> None:
    redist.initialize()
    comm = redist.get_context().process_group.mpi_comm
    rank = comm.Get_rank()
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 128
    a = np.ones(Slab.X.shape(rank, (n, n, n)))
    methods = ["push", *available_methods()]
    objects = {}
    for m in methods:
        objects[m] = Redistribute(a, Slab.X, Slab.Y, options={"host_method": m})
        objects[m].plan()
    for r in objects.values():
        r.execute()
        r.execute()

    def slowest_median(ts):
        return max(comm.allgather(statistics.median(ts))) * 1e3

    def call(r, barrier):
        if barrier:
            comm.Barrier()
        t0 = time.perf_counter()
        r.execute()
        return time.perf_counter() - t0

    rows = {"back to back": {m: slowest_median([call(r, False) for _ in range(15)]) for m, r in objects.items()}}
    for label, barrier in (("interleaved", False), ("interleaved+barrier", True)):
        ts: dict[str, list[float]] = {m: [] for m in objects}
        for _ in range(15):
            for m, r in objects.items():
                ts[m].append(call(r, barrier))
        rows[label] = {m: slowest_median(v) for m, v in ts.items()}
    if rank == 0:
        print(f"probe_tune_order: P = {comm.Get_size()}, {n}^3 float64; ms per call")
        for label, row in rows.items():
            print(f"  {label:<20} " + " ".join(f"{m}={t:.3f}" for m, t in row.items())
                  + f"  fastest: {min(row, key=row.get)}")
    for r in objects.values():
        r.free()
    redist.finalize()


if __name__ == "__main__":
    main()
