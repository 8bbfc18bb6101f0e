# SPDX-License-Identifier: Apache-2.0
"""Does tune= time what a user's calls cost (issue #47)? tune times each candidate's executable
(``exe.execute(0)`` into its bound buffers); a user's repeated ``execute(out=)`` runs as a compiled
replay where the method has one, through Python where it has none (alltoallw).

    mpiexec -n 2 python perf/probe_tune_paths.py N DTYPE [METHOD,...]

Slab.X -> Slab.Y of an N^3 array; per host method two objects: one called through the API
(``execute(out=)``, the same out= every call), one whose executable is called as tune calls it
(input and out= bound once). Interleaved, 40 rounds after 4 warm-up calls, the two calls of a
method in alternating order; medians in ms, the
slowest rank's; and how many of the API object's calls ran in Python.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import redist
from redist import Redistribute, Slab
from redist.engine.buffer import Buffer


def buffer(array: np.ndarray) -> Buffer:
    strides = tuple(s // array.itemsize for s in array.strides)
    return Buffer(array.ctypes.data, array.shape, strides, array.itemsize, "cpu", owner=array)


def main() -> None:
    redist.initialize()
    comm = redist.get_context().process_group.mpi_comm
    rank = comm.Get_rank()
    n, dtype = int(sys.argv[1]), sys.argv[2]
    methods = sys.argv[3].split(",") if len(sys.argv) > 3 else ["push", "hybrid", "datatype", "pack", "alltoallw"]
    a = np.ones(Slab.X.shape(rank, (n, n, n)), dtype=dtype)
    api, engine, outs = {}, {}, {}
    for m in methods:
        api[m] = Redistribute(a, Slab.X, Slab.Y, options={"host_method": m})
        engine[m] = Redistribute(a, Slab.X, Slab.Y, options={"host_method": m})
        api[m].plan()
        engine[m].plan()
        outs[m] = np.empty_like(api[m].execute()), np.empty(Slab.Y.shape(rank, (n, n, n)), dtype=dtype)
        engine[m]._exe.bind_input(buffer(a), 0)
        engine[m]._exe.bind_output(buffer(outs[m][1]), 0)
    for m in methods:
        for _ in range(4):
            api[m].execute(out=outs[m][0])
            engine[m]._exe.execute(0)
    before = {m: api[m]._python_calls for m in methods}
    times = {m: ([], []) for m in methods}
    calls = {m: (lambda m=m: api[m].execute(out=outs[m][0]), lambda m=m: engine[m]._exe.execute(0)) for m in methods}
    for i in range(40):
        for m in methods:
            for k in (0, 1) if i % 2 else (1, 0):  # which goes first alternates: the second finds the input in cache
                t0 = time.perf_counter()
                calls[m][k]()
                times[m][k].append(time.perf_counter() - t0)
    rows = {m: tuple(max(comm.allgather(statistics.median(ts))) * 1e3 for ts in times[m]) for m in methods}
    if rank == 0:
        print(f"probe_tune_paths: P = {comm.Get_size()}, {n}^3 {dtype}; ms per call")
        for m, (through_api, as_tune) in rows.items():
            print(f"  {m:<10} API execute(out=) {through_api:8.3f}   as tune times it {as_tune:8.3f}   "
                  f"({api[m]._python_calls - before[m]} of 40 API calls in Python)")
    for m in methods:
        api[m].free()
        engine[m].free()
    redist.finalize()


if __name__ == "__main__":
    main()
