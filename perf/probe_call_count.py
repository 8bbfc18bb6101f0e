# SPDX-License-Identifier: Apache-2.0
"""How many Python-level calls one ``execute()`` makes (what a cold interpreter has to fetch).

    mpiexec -n P python perf/probe_call_count.py [N]

Slab.X -> Slab.Y of an N^3 float64 array (default 8), planned and called a few times first; then one
``execute()`` and one ``execute(out=)`` under ``sys.setprofile``. Rank 0 prints the number of
Python functions entered and of C functions called, each by name.
"""

from __future__ import annotations

import collections
import sys

import numpy as np
from mpi4py import MPI

from redist import Redistribute, Slab


def main() -> None:
    comm = MPI.COMM_WORLD
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    shape = (n, n, n)
    ib, ob = Slab.X.box(comm.rank, shape, nranks=comm.size), Slab.Y.box(comm.rank, shape, nranks=comm.size)
    r = Redistribute(np.ones(tuple(h - l for l, h in zip(*ib))), Slab.X, Slab.Y)
    r.plan()
    out = np.empty(tuple(h - l for l, h in zip(*ob)))
    for _ in range(5):
        r.execute(out=out)
        r.execute()
    for name, fn in (("execute()", r.execute), ("execute(out=)", lambda: r.execute(out=out))):
        calls: collections.Counter = collections.Counter()

        def profile(frame, event, arg, calls=calls):
            if event == "call":
                calls[f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_code.co_name}"] += 1
            elif event == "c_call":
                calls[f"C:{getattr(arg, '__qualname__', arg)}"] += 1

        comm.Barrier()
        sys.setprofile(profile)
        fn()
        sys.setprofile(None)
        calls.pop("C:setprofile", None)
        if comm.rank == 0:
            print(
                f"{name}: {sum(calls.values())} calls: "
                + ", ".join(f"{k} x{v}" for k, v in calls.most_common())
            )
    r.free()


if __name__ == "__main__":
    main()
