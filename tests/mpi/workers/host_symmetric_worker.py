# SPDX-License-Identifier: Apache-2.0
"""Host symmetric memory (``allocate_symmetric_memory(shape, numpy)``) and push's stores straight
into an ``out=`` there.

    mpiexec -n P python host_symmetric_worker.py

Every host method and every push route (tests/helpers.py, PUSH_ROUTES), uneven slabs, float64
and complex64: a double-buffered loop into two symmetric out= arrays is right at every step, the
engine-owned result never changes, and on push the peers stored straight into the out= (counted:
``PushExecutable._into_shared``) instead of landing or messages. Also: some ranks' out= private,
an out= in symmetric memory laid out unlike the result, one rank's bad out= (every rank raises,
no byte of any out= changes), allocation and free misused on one rank (every rank raises the same
error, nothing is freed anywhere), arrays used after free (ordinary memory: right, through the
other routes) and finalize()/initialize() cycles with live allocations (no file left in
/dev/shm, mapped shared memory flat).
"""

from __future__ import annotations

import gc
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from helpers import PUSH_ROUTES, Report, global_values, push_route, shm_files, shm_mapped, sl  # noqa: E402

import redist  # noqa: E402
from redist import Redistribute, Slab  # noqa: E402
from redist.engine import errors  # noqa: E402
from redist.engine.host import push  # noqa: E402

SHAPES = ((13, 10, 6), (40, 33, 20))  # the second lands nothing below LANDING_MAX at P=2: every route runs
METHODS = (*PUSH_ROUTES, "hybrid", "datatype", "pack", "alltoallw")  # "auto" is push on one node
stored = [0]  # sends stored straight into a peer's symmetric out=
_into_shared = push.PushExecutable._into_shared


def counting(self, send):
    stored[0] += 1
    return _into_shared(self, send)


push.PushExecutable._into_shared = counting


def problem(shape, dtype, rank, P):
    g = global_values(shape, dtype)
    ib, ob = Slab.X.box(rank, shape, nranks=P), Slab.Y.box(rank, shape, nranks=P)
    return g, ib, ob, np.ascontiguousarray(g[sl(ib)])


def loops(report: Report, world) -> None:
    rank, P = world.Get_rank(), world.Get_size()
    for shape in SHAPES:
        for dtype in (np.float64, np.complex64):
            g, ib, ob, a = problem(shape, dtype, rank, P)
            want = g[sl(ob)]
            outs = [redist.allocate_symmetric_memory(want.shape, np, dtype=dtype, make_symmetric=True)
                    for _ in range(3)]
            for method in METHODS:
                label = f"{method} {shape} {np.dtype(dtype).name}"
                with push_route(method):
                    r = Redistribute(a, ib, ob, options={"host_method": method.split("-")[0]})
                    try:
                        r.plan()
                    except errors.NotSupportedError:  # alltoallw before MPI-4 (raised on every rank)
                        r.free()
                        continue
                result = r.execute()
                kept = result.copy()
                before = stored[0]
                for step in range(4):
                    operand = a + step
                    r.reset_operand(operand)
                    out = outs[step % 2]
                    out[...] = -1
                    r.execute(out=out)
                    report.check(np.array_equal(out, want + step), f"{label}: step {step} wrong")
                    report.check(np.array_equal(result, kept), f"{label}: step {step} changed the result")
                fixed = a.copy()  # one operand, the out= cycling: each call stores where the peers' headers say now
                r.reset_operand(fixed)
                for step in range(6):
                    fixed[...] = a + 10 + step
                    out = outs[step % 3]
                    out[...] = -1
                    r.execute(out=out)
                    report.check(np.array_equal(out, want + 10 + step), f"{label}: one operand, step {step} wrong")
                both = (a + 20, a + 30)  # two live operands, the out= alternating: stores from the one bound now
                for step in range(4):
                    r.reset_operand(both[step // 2])
                    out = outs[step % 2]
                    out[...] = -1
                    r.execute(out=out)
                    report.check(np.array_equal(out, want + (20, 30)[step // 2]), f"{label}: two operands, step {step} wrong")
                uses = stored[0] - before
                route = r.plan_description
                crosses = world.allreduce(int(any(t != rank for t in range(P)) and P > 1 and a.size > 0))
                if "method=push" in route and P > 1 and crosses:
                    report.check(world.allreduce(uses) > 0, f"{label}: no peer stored into a symmetric out=")
                elif "method=push" not in route:
                    report.check(uses == 0, f"{label}: {uses} symmetric stores outside push")
                # rank 0's out= private, the others' symmetric: right on every rank
                mine = np.empty_like(want) if rank == 0 else outs[0]
                mine[...] = -1
                r.reset_operand(a)
                r.execute(out=mine)
                report.check(np.array_equal(mine, want), f"{label}: mixed private/symmetric out= wrong")
                r.free()
            # laid out unlike the result (Fortran order): not stored into straight, still right
            f_out = redist.allocate_symmetric_memory(want.shape, np, dtype=dtype, axis_order="F", make_symmetric=True)
            r = Redistribute(a, ib, ob, options={"host_method": "push"})
            r.plan()
            r.execute(out=f_out)
            report.check(np.array_equal(f_out, want), f"{shape}: a Fortran-ordered symmetric out= wrong")
            r.free()
            redist.free_symmetric_memory(*outs, f_out)


def bad_input(report: Report, world) -> None:
    rank, P = world.Get_rank(), world.Get_size()
    last = P - 1
    shape = SHAPES[0]
    g, ib, ob, a = problem(shape, np.float64, rank, P)
    want = g[sl(ob)]
    r = Redistribute(a, ib, ob, options={"host_method": "push"})
    r.plan()
    result = r.execute()
    good = redist.allocate_symmetric_memory(want.shape, np, make_symmetric=True)
    good[...] = 7.0
    wrong = redist.allocate_symmetric_memory((want.shape[0] + 1, *want.shape[1:]), np, make_symmetric=True)
    kept = result.copy()
    report.expect_error(lambda: r.execute(out=wrong if rank == last else good), errors.InvalidValueError,
                        rf"rank {last}", "the last rank's out= of the wrong shape")
    report.check(bool((good == 7.0).all()), "a refused call wrote into a symmetric out=")
    report.check(np.array_equal(result, kept), "a refused call changed the result")
    r.execute(out=good)  # and the object still works
    report.check(np.array_equal(good, want), "after the refused call: wrong")
    r.free()
    plain = np.empty(4)
    extra = redist.allocate_symmetric_memory(4, np)
    report.expect_error(lambda: redist.free_symmetric_memory(plain if rank == last else extra),
                        errors.InvalidValueError, "not in host symmetric memory", "free of a private array")
    report.expect_error(lambda: redist.free_symmetric_memory(extra[1:] if rank == last else extra),
                        errors.InvalidValueError, "not a view", "free of a view")
    report.expect_error(lambda: redist.free_symmetric_memory(extra[:2] if rank == last else extra),
                        errors.InvalidValueError, "not a view", "free of a view at its start")
    if P > 1:
        report.expect_error(lambda: redist.allocate_symmetric_memory(4 + rank, np, make_symmetric=rank == 0),
                            errors.InvalidValueError, "same size", "make_symmetric on one rank only")
    if P > 1:  # misuse only where another rank does something else
        report.expect_error(lambda: redist.free_symmetric_memory(*((wrong, good) if rank == last else (good, wrong))),
                            errors.InvalidValueError, "same order", "free in another order")
        report.expect_error(lambda: redist.allocate_symmetric_memory(4 + (rank == last), np),
                            errors.InvalidValueError, "same size", "allocations of different sizes")
    report.expect_error(lambda: redist.allocate_symmetric_memory(-1 if rank == last else 4, np),
                        errors.InvalidValueError, "non-negative", "allocation of a negative size")
    report.expect_error(lambda: redist.allocate_symmetric_memory(4, np, dtype="no-such-type" if rank == last else None),
                        errors.InvalidTypeError, "dtype", "allocation of a bad dtype")
    # nothing was freed by the refused calls: the arrays are still symmetric
    r = Redistribute(a, ib, ob, options={"host_method": "push"})
    r.plan()
    before = stored[0]
    r.execute(out=good)
    report.check(np.array_equal(good, want), "after the refused frees: wrong")
    if P > 1:
        report.check(world.allreduce(stored[0] - before) > 0, "after the refused frees: not stored straight")
    redist.free_symmetric_memory(good, wrong, extra)
    report.expect_error(lambda: redist.free_symmetric_memory(extra), errors.InvalidValueError, "double free",
                        "a double free")
    # freed: ordinary memory now, still valid, through the other routes
    good[...] = -1
    before = stored[0]
    r.execute(out=good)
    report.check(np.array_equal(good, want), "a freed symmetric array as out=: wrong")
    report.check(stored[0] == before, "a freed symmetric array was stored into straight")
    r.free()


def cycles(report: Report, world, n: int) -> None:
    rank, P = world.Get_rank(), world.Get_size()
    g, ib, ob, a = problem(SHAPES[0], np.float64, rank, P)
    want = g[sl(ob)]
    held, mapped = [], []
    for cycle in range(n):
        redist.initialize(device_id="cpu")
        out = redist.allocate_symmetric_memory(want.shape, np, make_symmetric=True)
        report.check(not shm_files(), f"cycle {cycle}: files left in /dev/shm: {shm_files()}")
        r = Redistribute(a, ib, ob, options={"host_method": "push"})
        r.plan()
        r.execute(out=out)
        report.check(np.array_equal(out, want), f"cycle {cycle}: wrong")
        if cycle % 2:
            r.free()
        held = [out]  # the previous cycle's array dropped, this one held past finalize()
        redist.finalize()
        report.check(np.array_equal(held[0], want), f"cycle {cycle}: an array held past finalize() changed")
        gc.collect()
        mapped.append(shm_mapped())
    report.check(max(mapped[n // 2:]) <= mapped[n // 2 - 1] + (1 << 20),
                 f"mapped shared memory grows across cycles: {mapped}")


def main() -> int:
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    report = Report(world)
    for part in (loops, bad_input):
        try:
            part(report, world)
        except Exception:  # noqa: BLE001
            report.exception(part.__name__)
    redist.finalize()
    try:
        cycles(report, world, 20)
    except Exception:  # noqa: BLE001
        report.exception("cycles")
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
