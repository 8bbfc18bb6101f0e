# SPDX-License-Identifier: Apache-2.0
"""The one GPU timing loop of the perf/ scripts (CUDA events around repetitions of back-to-back
calls) and their common set-up."""

from __future__ import annotations

import statistics
from collections.abc import Callable


def per_iteration_us(fn: Callable[[], object], stream, *, iters: int, reps: int, warm: int,
                     comm=None) -> float:
    """Median over ``reps`` of the µs per call of ``iters`` back-to-back ``fn()`` on ``stream``
    (a cupy stream), after ``warm`` calls. With ``comm``: ranks start each repetition together
    and the slowest rank's median is returned (it sets the pace)."""
    import cupy as cp

    for _ in range(warm):
        fn()
    stream.synchronize()
    ts = []
    for _ in range(reps):
        if comm is not None:
            comm.Barrier()
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(stream)
        for _ in range(iters):
            fn()
        b.record(stream)
        b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / iters)
    t = statistics.median(ts)
    return t if comm is None else max(comm.allgather(t))


def start_gpu():
    """redist initialised on this rank's GPU (cupy's current device): (context, comm, rank, nranks,
    a non-blocking cupy stream)."""
    import cupy as cp

    import redist

    redist.initialize()
    ctx = redist.get_context()
    pg = ctx.process_group
    assert ctx.device_id is not None, "no GPU: redist runs CPU-only here"
    cp.cuda.Device(ctx.device_id).use()
    return ctx, pg.mpi_comm, pg.rank, pg.nranks, cp.cuda.Stream(non_blocking=True)
