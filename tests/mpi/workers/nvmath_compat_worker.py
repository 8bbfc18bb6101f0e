# SPDX-License-Identifier: Apache-2.0
"""nvmath-python 1.0 drop-in behaviours on the MPI host backend (run by tests/mpi/test_nvmath_runtime.py).

Usage: nvmath_compat_worker.py [torch]   (torch: the torch example's flow only)

Written as an nvmath user writes code, with ``nvmath.distributed`` spelled ``redist``: the
runtime and process group, the flows of nvmath's CPU examples (function form, stateful with
fresh results, reset_operand, Box distributions), the errors nvmath's suite checks (types and
phrases), release_operand, BlockCyclic. Failures are reduced across ranks; rank 0 prints ALL OK.
"""

from __future__ import annotations

import gc
import os
import sys
import weakref

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from helpers import Report, global_values  # noqa: E402

import redist  # noqa: E402
from redist import MPIProcessGroup  # noqa: E402
from redist.distribution import BlockCyclic, BlockNonCyclic, Box, ProcessGrid, Slab  # noqa: E402
from redist.process_group import ReductionOp  # noqa: E402

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
rep = Report(comm)


def piece(g, box):
    return np.ascontiguousarray(g[tuple(slice(lo, hi) for lo, hi in zip(box.lower, box.upper))])


def runtime():
    rep.check(redist.get_context() is None, "get_context() before initialize must be None")
    rep.expect_error(lambda: redist.initialize("invalid_device", MPIProcessGroup(comm), backends=["nvshmem"]),
                     TypeError, r"The device ID used to initialize the redist module must be an integer\. The "
                     r"provided device ID is invalid_device\.", "device id type")
    rep.expect_error(lambda: redist.initialize("cpu", MPIProcessGroup(comm), backends=["invalid_backend"]),
                     ValueError, r"backend must be one of \('nvshmem', 'nccl'\), got invalid_backend", "backend")
    rep.expect_error(lambda: redist.initialize("cpu", MPIProcessGroup(comm), backends=[]), ValueError,
                     r"Need to specify at least one of \('nvshmem', 'nccl'\) communication backends", "no backend")
    rep.expect_error(lambda: redist.initialize("cpu", "not_a_communicator"), TypeError,
                     r"Unrecognized process group type \(not_a_communicator\)\. Need redist\.ProcessGroup or mpi4py "
                     r"communicator\.", "process group type")
    # one rank wrong: every rank raises, naming it
    rep.expect_error(lambda: redist.initialize("cpu" if rank != P - 1 else 2.5, comm), TypeError,
                     rf"rank {P - 1}: The device ID", "device id on the last rank")
    redist.initialize("cpu", MPIProcessGroup(comm))
    ctx = redist.get_context()
    rep.check(ctx is not None and ctx.device_id is None and ctx.nvshmem_available is False and ctx.nccl_comm is None,
              f"context fields {ctx}")
    pg = ctx.process_group
    rep.check(isinstance(pg, redist.ProcessGroup) and pg._mpi_comm is comm and (pg.rank, pg.nranks) == (rank, P),
              "process group")
    rep.expect_error(lambda: redist.initialize("cpu", comm), RuntimeError, "redist has already been initialized",
                     "already initialized")
    a = np.array([rank + 1, -rank], dtype=np.int64)
    pg.allreduce_buffer(a, op=ReductionOp.SUM)
    rep.check(a.tolist() == [P * (P + 1) // 2, -P * (P - 1) // 2], f"allreduce SUM {a}")
    b = np.array([rank, rank], dtype=np.float64)
    pg.allreduce_buffer(b[:1], op=ReductionOp.MIN)
    pg.allreduce_buffer(b[1:], op=ReductionOp.MAX)
    rep.check(b.tolist() == [0, P - 1], f"allreduce MIN/MAX {b}")
    c = np.full(3, rank, dtype=np.int32)
    pg.broadcast_buffer(c, root=P - 1)
    rep.check(c.tolist() == [P - 1] * 3, f"broadcast {c}")
    rep.check(pg.allreduce_object({rank}, op=lambda x, y: x | y) == set(range(P)), "allreduce_object")


def function_form():
    """example01: a Slab.Y array to Slab.X with the function form; the result is the caller's."""
    g = global_values((12, 8, 5), np.complex64)
    a = piece(g, Slab.Y.box(rank, g.shape, nranks=P))
    b = redist.distribution.redistribute(a, Slab.Y, Slab.X)
    rep.check(np.array_equal(b, piece(g, Slab.X.box(rank, g.shape, nranks=P))), "function form result")
    rep.check(b.flags.c_contiguous and b.dtype == a.dtype, "function form layout and dtype")


def stateful_fresh_results():
    """example02/05: the nvmath namespace returns a new array per execute; reset_operand keeps going."""
    import torch

    g = global_values((9, 6, 4), np.float64)
    ib, ob = Slab.X.box(rank, g.shape, nranks=P), Slab.Y.box(rank, g.shape, nranks=P)
    a = torch.from_numpy(piece(g, ib))
    with redist.distribution.Redistribute(a, Slab.X, Slab.Y) as r:
        r.plan()
        b = r.execute()
        c = torch.from_numpy(piece(g, ib) * 2)
        r.reset_operand(c)
        d = r.execute()
        rep.check(b.data_ptr() != d.data_ptr() or b.numel() == 0, "fresh results must be new arrays")
        rep.check(np.array_equal(b.numpy(), piece(g, ob)) and np.array_equal(d.numpy(), 2 * piece(g, ob)),
                  "fresh results keep their values")
    rep.check(np.array_equal(b.numpy(), piece(g, ob)), "a fresh result outlives free()")
    with redist.Redistribute(a, Slab.X, Slab.Y) as r:  # redist's default: one persistent result
        r.plan()
        e, f = r.execute(), r.execute()
        rep.check(e.data_ptr() == f.data_ptr(), "redist.Redistribute returns its persistent result")


def boxes():
    """example08: every rank gives its own input and output boxes."""
    n = 4 * P
    g = global_values((n, 6), np.int32)
    lo, hi = rank * 4, rank * 4 + 4
    ib, ob = Box((lo, 0), (hi, 6)), Box((0, (6 * rank) // P), (n, (6 * (rank + 1)) // P))
    b = redist.distribution.redistribute(piece(g, ib), ib, ob)
    rep.check(np.array_equal(b, piece(g, ob)), "Box -> Box result")


def errors():
    """The validation errors nvmath's suite checks: type and phrase, raised on every rank."""
    if P > 1:
        data = np.arange(4, dtype=np.int32).reshape(2, 2)
        rep.expect_error(lambda: redist.distribution.redistribute(data, Box((0, 0), (2, 2)), Box((0, 0), (2, 2))),
                         ValueError, r"The global number of elements is incompatible with the inferred global shape "
                         r"\(2, 2\)", "overlapping boxes")
        lo = (0, 0) if rank % 2 == 0 else (4, 4)
        box = Box(lo, (lo[0] + 2, lo[1] + 2))
        rep.expect_error(lambda: redist.distribution.redistribute(data, box, box), ValueError,
                         r"The global number of elements is incompatible with the inferred global shape \(6, 6\)",
                         "boxes implying a larger array")
        layout = np.ones((4, 3)) if rank == 0 else np.asfortranarray(np.ones((4, 3)))
        rep.expect_error(lambda: redist.distribution.redistribute(layout, Slab.X, Slab.Y), ValueError,
                         "The input memory layout is not C or Fortran, or is inconsistent across processes", "layout")
    rep.expect_error(lambda: redist.distribution.redistribute(np.ones((2, 2)), Box((2, 2), (0, 0)),
                                                              Box((0, 0), (2, 2))), ValueError,
                     r"The upper coordinates must be larger than the lower coordinates, but got lower=\(2, 2\) "
                     r"upper=\(0, 0\)", "Box corners")
    a = np.ones((3, 4))
    r = redist.distribution.Redistribute(a, Slab.X, Slab.Y)
    rep.expect_error(r.execute, RuntimeError, "Execution cannot be performed before plan", "execute before plan")
    r.plan()
    r.release_operand()
    rep.expect_error(r.execute, RuntimeError, "Execution cannot be performed after the operand has been released",
                     "execute after release")
    rep.expect_error(lambda: r.reset_operand(None), ValueError, r"reset_operand\(\) requires a valid operand",
                     "reset_operand(None)")
    r.free()
    rep.expect_error(r.plan, RuntimeError, "cannot be called after free", "plan after free")
    if P > 1:
        rep.expect_error(lambda: Box((0,), (1,)).shape((rank + 1) % P), RuntimeError,
                         "Can't calculate local shape of peer process with Box distribution", "peer Box shape")


def release_operand_drops_references():
    """release_operand() after plan() and after execute(): nothing keeps the operand alive."""
    for when in ("after_init", "after_plan", "after_execute"):
        a = np.ones((4, 5))
        ref = weakref.ref(a)
        r = redist.distribution.Redistribute(a, Slab.X, Slab.Y)
        if when != "after_init":
            r.plan()
        if when == "after_execute":
            r.execute()
        r.release_operand()
        del a
        gc.collect()
        rep.check(ref() is None, f"release_operand {when}: the operand is still referenced")
        r.free()


def distributions_through_the_runtime():
    """_bind checks this rank's shape (nvmath's private API); BlockCyclic without cycling works."""
    g = (10, 4)
    s = Slab.X.copy()._bind(g, shape=Slab.X.shape(rank, g))
    rep.check(s._bound and not Slab.X._bound, "_bind binds the copy in place")
    rep.check(s.to(Box) == Box(*Slab.X.box(rank, g, nranks=P)), "bound Slab to Box")
    if P > 1:
        rep.expect_error(lambda: Slab.X.copy()._bind(g, shape=(10, 4)), redist.BindDistributionError,
                         r"don't fit distribution", "_bind with the wrong local shape")
    grid = ProcessGrid((P,))
    gv = global_values((3 * P + 1, 4), np.float32)
    bc = BlockCyclic(grid, (4,))  # 3P+1 rows in blocks of 4 over P ranks: at most one block each
    a = piece(gv, Box(*bc.box(rank, gv.shape)))
    res = redist.distribution.redistribute(a, bc, Slab.Y)
    rep.check(np.array_equal(res, piece(gv, Slab.Y.box(rank, gv.shape))), "BlockCyclic (one block each) -> Slab.Y")
    if P > 1:
        cyc = BlockCyclic(grid, (1,))
        shape = cyc.shape(rank, gv.shape)
        rep.expect_error(lambda: redist.distribution.redistribute(np.zeros(shape, np.float32), cyc, Slab.Y),
                         TypeError, "Redistribute requires distributions compatible with Box distribution",
                         "cyclic input")
    pencils = BlockNonCyclic(ProcessGrid((P, 1)))
    rep.check(pencils.shape(rank, (2 * P, 3)) == (2, 3), "BlockNonCyclic shape through the runtime")


def main():
    if sys.argv[1:] == ["torch"]:  # the flow of nvmath's torch example (needs PyTorch)
        steps = [runtime, stateful_fresh_results]
    else:
        steps = [runtime, function_form, boxes, errors, release_operand_drops_references,
                 distributions_through_the_runtime]
    for step in steps:
        try:
            step()
        except Exception:  # noqa: BLE001
            rep.exception(step.__name__)
        if not rep.ok_everywhere():
            break
    rep.finish()
    redist.finalize()


if __name__ == "__main__":
    main()
