# SPDX-License-Identifier: Apache-2.0
"""redist on communicators other than COMM_WORLD (run under mpiexec by tests/mpi/test_communicators.py).

Usage: communicator_worker.py {split|dup|group}

``split``: COMM_WORLD split in two (ranks of the same parity), redist initialised on the half
this rank is in; ``dup``: a duplicate of COMM_WORLD; ``group``: an MPIProcessGroup over the split.
On each, every host method plans and executes Slab.X -> Slab.Y with every element checked
("alltoallw" on an MPI without persistent collectives, e.g. Open MPI 4: refused on every rank).
Open MPI and Intel MPI return None for predefined attributes (MPI_TAG_UB) on such communicators:
this is where that shows. Failures are reduced over COMM_WORLD; rank 0 prints ALL OK.
"""

from __future__ import annotations

import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from helpers import Report, global_values, sl  # noqa: E402

import redist  # noqa: E402
from redist import MPIProcessGroup, Redistribute, Slab  # noqa: E402
from redist.engine.errors import NotSupportedError  # noqa: E402
from redist.engine.host.lowering import available_methods  # noqa: E402

world = MPI.COMM_WORLD
rep = Report(world)
METHODS = ("auto", "push", "hybrid", "datatype", "pack", "alltoallw")  # alltoallw: refused before MPI-4


def communicator(kind: str):
    if kind == "dup":
        return world.Dup()
    half = world.Split(world.Get_rank() % 2, world.Get_rank())
    return MPIProcessGroup(half) if kind == "group" else half


def main() -> int:
    kind = sys.argv[1]
    comm = communicator(kind)
    try:
        redist.initialize(device_id="cpu", process_group=comm)
        pg = redist.get_context().process_group
        rank, nranks = pg.rank, pg.nranks
        shape = (7, 5 + nranks, 3)
        g = global_values(shape, np.float64, salt=nranks)
        a = np.ascontiguousarray(g[sl(Slab.X.box(rank, shape, nranks=nranks))])
        want = g[sl(Slab.Y.box(rank, shape, nranks=nranks))]
        for method in METHODS:
            if method not in available_methods() + ("auto", "push"):
                rep.expect_error(
                    lambda: Redistribute(a, Slab.X, Slab.Y, options={"host_method": method}).plan(),
                    NotSupportedError,
                    r"needs MPI-4 persistent collectives",
                    f"{kind}: {method}",
                )
                continue
            with Redistribute(a, Slab.X, Slab.Y, options={"host_method": method}) as r:
                r.plan()
                for step in range(2):
                    rep.check(
                        np.array_equal(r.execute(), want), f"{kind}, host_method={method}, execute {step}"
                    )
    except Exception:  # noqa: BLE001
        rep.exception(kind)
    rc = rep.finish()
    redist.finalize()
    return rc


if __name__ == "__main__":
    sys.exit(main())
