# SPDX-License-Identifier: Apache-2.0
"""What one call costs warm and after the caches were flushed (a time step's other work between calls).

    mpiexec -n P python perf/probe_cold_call.py [N]

Slab.X -> Slab.Y of an N^3 float64 array (default 8: the call's fixed cost). Each case is timed
60 times (medians of the last 50, the slowest rank, microseconds), once back to back ("warm") and
once after each rank wrote 32 MiB of its own, untimed ("evicted"): the timer alone, a numpy copy of
the output box's size, a zero-byte message exchange through mpi4py (MPI's own cold path), and
redist's ``execute()`` and ``execute(out=)``.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from mpi4py import MPI

from redist import Redistribute, Slab


def main() -> None:
    comm = MPI.COMM_WORLD
    junk = np.empty(32 << 20, np.uint8)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    shape = (n, n, n)
    ib, ob = Slab.X.box(comm.rank, shape, nranks=comm.size), Slab.Y.box(comm.rank, shape, nranks=comm.size)
    a = np.ones(tuple(h - l for l, h in zip(*ib)))
    r = Redistribute(a, Slab.X, Slab.Y)
    r.plan()
    out = np.empty(tuple(h - l for l, h in zip(*ob)))
    src, dst = np.ones(out.size), np.empty(out.size)
    peer = (comm.rank + 1) % comm.size

    def zero_msgs():
        reqs = [
            comm.Irecv([None, 0, MPI.BYTE], source=MPI.ANY_SOURCE, tag=5),
            comm.Isend([None, 0, MPI.BYTE], dest=peer, tag=5),
        ]
        MPI.Request.Waitall(reqs)

    cases = {
        "nothing (timer)": lambda: None,
        "np.copyto of out's size": lambda: np.copyto(dst, src),
        "zero-byte exchange (mpi4py)": zero_msgs,
        "execute()": r.execute,
        "execute(out=)": lambda: r.execute(out=out),
    }
    for name, fn in cases.items():
        row = []
        for mode in ("warm", "evict"):
            ts = []
            for i in range(60):
                if mode == "evict":
                    junk.fill(i)
                comm.Barrier()
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
            row.append(comm.allreduce(float(np.median(ts[10:])), op=MPI.MAX) * 1e6)
        if comm.rank == 0:
            print(f"{name:30} warm {row[0]:7.1f} us  evicted {row[1]:7.1f} us")


if __name__ == "__main__":
    main()
