# SPDX-License-Identifier: Apache-2.0
"""Soak: objects dropped without free() and long rebind loops keep memory and descriptors flat.

    mpiexec -n P python soak_worker.py [OBJECTS] [EXECUTES]

Phase 1 creates, plans, executes and drops OBJECTS Redistribute objects (never freed), with every
host method; phase 2 runs EXECUTES executes with a reset_operand_unchecked to one of three
buffers and an out= that alternates every iteration. Resident memory and open file descriptors
are sampled after a warm-up and at the end; they must stay flat (a few MiB of allocator noise).
"""

from __future__ import annotations

import gc
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from helpers import Report, global_values, open_fds, rss_mib, same_bits, sl  # noqa: E402

import redist  # noqa: E402
from redist import Redistribute, Slab  # noqa: E402



def main() -> int:
    objects = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    executes = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    redist.initialize()
    ctx = redist.get_context()
    comm = ctx.process_group.mpi_comm
    rank, P = ctx.process_group.rank, ctx.process_group.nranks
    report = Report(comm)
    shape = (16, 12, 8)
    g = global_values(shape, np.float64)
    ib, ob = Slab.X.box(rank, shape, nranks=P), Slab.Y.box(rank, shape, nranks=P)
    a = np.ascontiguousarray(g[sl(ib)])
    want = g[sl(ob)]
    methods = ["auto", "push", "pack", "hybrid"]

    def one(k):
        r = Redistribute(a, Slab.X, Slab.Y, options={"host_method": methods[k % len(methods)]})
        r.plan()
        res = r.execute()
        if k % 97 == 0:
            report.check(same_bits(res, want), f"object {k}: wrong result")
        # dropped here without free(): its requests, windows and buffers must go with it

    warm = min(200, objects // 10)
    for k in range(warm):
        one(k)
    gc.collect()
    base_rss, base_fds = rss_mib(), open_fds()
    for k in range(warm, objects):
        one(k)
    gc.collect()
    rss1, fds1 = rss_mib(), open_fds()
    report.check(fds1 - base_fds <= 4, f"{objects} dropped objects: open descriptors {base_fds} -> {fds1}")
    report.check(rss1 - base_rss <= 32, f"{objects} dropped objects: RSS {base_rss:.1f} -> {rss1:.1f} MiB")

    bufs = [a.copy() * (1 + k) for k in range(3)]
    wants = [want * (1 + k) for k in range(3)]
    r = Redistribute(bufs[0], Slab.X, Slab.Y)
    r.plan()
    outs = [np.empty(want.shape), np.empty(want.shape)]
    for i in range(2000):
        r.reset_operand_unchecked(bufs[i % 3])
        r.execute(out=outs[i % 2])
    gc.collect()
    base_rss, base_fds = rss_mib(), open_fds()
    for i in range(executes):
        r.reset_operand_unchecked(bufs[i % 3])
        res = r.execute(out=outs[i % 2] if i % 5 else None)
        if i % 9973 == 0:
            report.check(same_bits(res, wants[i % 3]), f"execute {i}: wrong result")
    gc.collect()
    rss2, fds2 = rss_mib(), open_fds()
    report.check(fds2 == base_fds, f"{executes} executes: open descriptors {base_fds} -> {fds2}")
    report.check(rss2 - base_rss <= 8, f"{executes} executes: RSS {base_rss:.1f} -> {rss2:.1f} MiB")
    r.free()
    if rank == 0:
        print(f"P={P}: {objects} dropped objects: RSS {rss1:.1f} MiB, fds {fds1}; {executes} executes with a "
              f"rebind each: RSS {base_rss:.1f} -> {rss2:.1f} MiB, fds {base_fds} -> {fds2}", flush=True)
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
