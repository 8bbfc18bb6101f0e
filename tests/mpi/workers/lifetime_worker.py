# SPDX-License-Identifier: Apache-2.0
"""Lifetimes across initialize()/finalize(): CYCLES cycles never hang and leak nothing.

    mpiexec -n P python lifetime_worker.py [CYCLES]

Each cycle initializes redist, builds objects of every host method (push, the default on one
node, hybrid, pack and a push object of two fields) and executes them, then leaves them in
every state a program can: freed, dropped without free(), still referenced (the previous
cycle's objects, used after finalize() freed them), and results held past free() and past
finalize() (read in the next cycle: a held result stays a valid array with its last data).
Twelve push objects are also freed within the cycle: their shared memory must go at free(),
before any further collective call. After a warm-up the process's resident memory, open file
descriptors, communicators (the handle a fresh ``Dup`` gets: it grows when one leaks) and
mapped shared memory (/proc/self/maps) must stay flat, and no file redist made may be left in
/dev/shm.
"""

from __future__ import annotations

import gc
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from helpers import Report, global_values, open_fds, rss_mib, same_bits, shm_files, shm_mapped, sl  # noqa: E402

import redist  # noqa: E402
from redist import Redistribute, Slab  # noqa: E402
from redist.engine import errors  # noqa: E402

SHAPE = (16, 12, 8)



def comm_handle() -> int:
    from mpi4py import MPI

    c = MPI.COMM_WORLD.Dup()
    h = c.py2f()
    c.Free()
    return h


def sample() -> tuple:
    gc.collect()
    return rss_mib(), open_fds(), comm_handle(), shm_mapped(), shm_files()


def main() -> int:
    cycles = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank, P = world.Get_rank(), world.Get_size()
    report = Report(world)
    g = global_values(SHAPE, np.float64)
    ib, ob = Slab.X.box(rank, SHAPE, nranks=P), Slab.Y.box(rank, SHAPE, nranks=P)
    a = np.ascontiguousarray(g[sl(ib)])
    want = g[sl(ob)]
    kept: list = []  # the previous cycle's objects, still referenced
    held: list = []  # (result, factor) held past free() / finalize()
    base = None
    warm = min(5, cycles // 2)
    for cyc in range(cycles):
        if cyc == warm:
            base = sample()
        redist.initialize()
        for res, k in held:  # results of the previous cycle, past its free() and finalize()
            report.check(same_bits(res, want * k), f"cycle {cyc}: a result held past finalize() changed")
        for r in kept:  # freed by the previous finalize(): refused, never a hang
            report.expect_error(r.execute, errors.InvalidStateError, r"after free\(\)", f"cycle {cyc}: old object")
        held, kept = [], []
        before = shm_mapped()
        for i in range(12):  # freed within the cycle: their shared memory goes at free()
            r = Redistribute(np.ascontiguousarray(g[sl(ib)]), Slab.X, Slab.Y, options={"host_method": "push"})
            r.plan()
            r.execute()
            r.free()
        report.check(shm_mapped() == before, f"cycle {cyc}: 12 freed push objects left "
                                             f"{shm_mapped() - before} B of shared memory mapped")
        objs = {}
        for m in ("auto", "push", "hybrid", "pack"):
            r = Redistribute(a * 2, Slab.X, Slab.Y, options={"host_method": m})
            r.plan()
            objs[m] = r
        fields = Redistribute((a * 4, a.astype(np.float32)), Slab.X, Slab.Y)
        fields.plan()
        for m, r in objs.items():
            res = r.execute()
            report.check(same_bits(res, want * 2), f"cycle {cyc}, {m}: wrong result")
        u, v = fields.execute()
        report.check(same_bits(u, want * 4) and same_bits(v, want.astype(np.float32)), f"cycle {cyc}: fields wrong")
        held = [(objs["auto"].execute(), 2), (u, 4)]  # held past finalize()
        res = objs["push"].execute()
        objs["push"].free()  # freed, its result held past free()
        held.append((res, 2))
        del objs["hybrid"]  # dropped without free()
        kept = [objs["pack"], fields]  # still referenced across finalize()
        redist.finalize()
        for res, k in held:
            report.check(same_bits(res, want * k), f"cycle {cyc}: a result changed at finalize()")
        del objs, res, u, v
    if base is not None:
        summary = check_flat(report, base, sample(), cycles)
        if rank == 0:
            print(f"P={P}: {summary}", flush=True)
    return report.finish()


def check_flat(report: Report, base: tuple, now: tuple, cycles: int) -> str:
    """Resources after the cycles against the warm-up sample; their account."""
    (rss0, fd0, comm0, shm0, _), (rss1, fd1, comm1, shm1, files) = base, now
    report.check(rss1 - rss0 <= 16, f"{cycles} cycles: RSS {rss0:.1f} -> {rss1:.1f} MiB")
    report.check(fd1 == fd0, f"{cycles} cycles: open descriptors {fd0} -> {fd1}")
    report.check(comm1 == comm0, f"{cycles} cycles: a fresh Dup's handle {comm0:#x} -> {comm1:#x} (communicators leak)")
    report.check(shm1 == shm0, f"{cycles} cycles: shared memory mapped {shm0} -> {shm1} B")
    report.check(not files, f"{cycles} cycles: files left in /dev/shm: {files}")
    return (f"{cycles} cycles: RSS {rss0:.1f} -> {rss1:.1f} MiB, fds {fd0} -> {fd1}, Dup handle {comm0:#x} -> "
            f"{comm1:#x}, shared memory mapped {shm0} -> {shm1} B")


if __name__ == "__main__":
    sys.exit(main())
