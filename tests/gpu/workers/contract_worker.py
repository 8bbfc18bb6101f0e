# SPDX-License-Identifier: Apache-2.0
"""The contract on the CUDA backend: ``mpiexec -n P python contract_worker.py MODE``.

Modes (tests/gpu/test_contract.py): ``failed`` (a call that raises -- the last rank's out= is a
host array, or its operand released -- launches nothing: no byte of any rank's engine-owned result
or symmetric out= changes), ``out`` (``execute(out=x)`` leaves the engine-owned result as it was),
``reshaped`` (an out= reshaped in place after its first use is checked anew), ``torch-empty``
(torch CUDA operands with empty output boxes), ``lifetime`` (initialize/finalize cycles with
objects freed, dropped and kept: no hang; an object used after finalize() raises),
``fresh-mixed`` (result="fresh" with out= on some ranks only raises on every rank). One rank per
GPU, or several on one under REDIST_SHARED_GPU=1. Failures are reduced across ranks; rank 0
prints ALL OK.
"""

from __future__ import annotations

import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from helpers import Report, global_values, run_report_mode, sl  # noqa: E402

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
last = P - 1
SHAPE = (8, 6, 5)


def device() -> int:
    import cupy as cp

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    local = node.Get_rank()
    node.Free()
    return local % cp.cuda.runtime.getDeviceCount()


def start():
    import cupy as cp
    import redist

    dev = device()
    cp.cuda.Device(dev).use()
    redist.initialize(device_id=dev)
    return dev


def problem():
    """(cupy operand, the expected result on the host, the global array) of Slab.X -> Slab.Y."""
    import cupy as cp
    from redist import Slab

    g = global_values(SHAPE, np.float64)
    a = cp.asarray(np.ascontiguousarray(g[sl(Slab.X.box(rank, SHAPE, nranks=P))]))
    return a, g[sl(Slab.Y.box(rank, SHAPE, nranks=P))]


def host(x) -> np.ndarray:
    import cupy as cp

    cp.cuda.runtime.deviceSynchronize()
    return cp.asnumpy(x)


def refused(report: Report, call, cls, text: str, label: str) -> None:
    """``call()`` raises ``cls`` naming the last rank and ``text``, the same on every rank."""
    report.expect_error(call, cls, rf"rank {last}.*{text}", label)


def run_failed(report: Report) -> None:
    import cupy as cp
    import redist
    from redist import Redistribute, Slab

    start()
    a, want = problem()
    for transport in ("push", "put"):
        r = Redistribute(a, Slab.X, Slab.Y, options={"transport": transport})
        r.plan()
        b = r.execute()
        kept = host(b)
        report.check(np.array_equal(kept, want), f"{transport}: first execute wrong")
        r.reset_operand(a * 2)  # any write of the refused calls would show
        sym = redist.allocate_symmetric_memory(want.shape, cp, dtype=np.float64)
        sym[...] = 7.0
        out = np.empty(want.shape, np.float64) if rank == last else sym  # a host array on the last rank
        refused(report, lambda: r.execute(out=out), redist.InvalidValueError, "", f"{transport}: host out=")
        report.check(np.array_equal(host(b), kept), f"{transport}: a refused call wrote into the result")
        report.check((host(sym) == 7.0).all(), f"{transport}: a refused call wrote into a symmetric out=")
        if rank == last:
            r.release_operand()
        refused(report, r.execute, redist.InvalidStateError, "released", f"{transport}: released operand")
        report.check(np.array_equal(host(b), kept), f"{transport}: a refused execute() wrote into the result")
        # the same with an out=: the released rank binds it back to its result after the refusal too
        refused(report, lambda: r.execute(out=sym), redist.InvalidStateError, "released",
                f"{transport}: released operand, out=")
        report.check((host(sym) == 7.0).all(), f"{transport}: a refused call (released operand) wrote into out=")
        report.check(np.array_equal(host(b), kept), f"{transport}: a refused call (released operand) wrote into the result")
        if rank == last:
            r.reset_operand_unchecked(a * 2)
        report.check(np.array_equal(host(r.execute(out=sym)), want * 2), f"{transport}: out= after the refusals")
        r.free()
        redist.free_symmetric_memory(sym)


def run_out(report: Report) -> None:
    import cupy as cp
    import redist
    from redist import Redistribute, Slab

    start()
    a, want = problem()
    for transport in ("push", "put"):
        with Redistribute(a, Slab.X, Slab.Y, options={"transport": transport}) as r:
            r.plan()
            b = r.execute()
            kept = host(b)
            sym = redist.allocate_symmetric_memory(want.shape, cp, dtype=np.float64)
            r.reset_operand(a * 2)
            got = r.execute(out=sym)
            report.check(got is sym and np.array_equal(host(sym), want * 2), f"{transport}: out= wrong")
            report.check(np.array_equal(host(b), kept), f"{transport}: execute(out=) changed the engine-owned result")
            report.check(np.array_equal(host(r.execute()), want * 2), f"{transport}: the result after")
            redist.free_symmetric_memory(sym)


def run_reshaped(report: Report) -> None:
    import cupy as cp
    import redist
    from redist import Redistribute, Slab

    start()
    a, want = problem()
    with Redistribute(a, Slab.X, Slab.Y) as r:
        r.plan()
        sym = redist.allocate_symmetric_memory(want.shape, cp, dtype=np.float64)
        report.check(np.array_equal(host(r.execute(out=sym)), want), "out= wrong")
        if rank == last:
            sym.shape = want.shape[::-1]  # the same object, reshaped in place
        report.expect_error(lambda: r.execute(out=sym), redist.InvalidValueError,
                            rf"rank {last}: execute\(out=...\): out= has shape \(5, \d, 8\)", "reshaped out=")
        if rank == last:
            sym.shape = want.shape
        report.check(np.array_equal(host(r.execute(out=sym)), want), "out= reshaped back")
        redist.free_symmetric_memory(sym)


def run_torch_empty(report: Report) -> None:
    import torch
    from redist import Redistribute, Slab

    dev = start()
    shape = (4, 1)  # Slab.Y of one column: every rank but rank 0 has an empty output box
    g = global_values(shape, np.float32)
    a = torch.from_numpy(np.ascontiguousarray(g[sl(Slab.X.box(rank, shape, nranks=P))])).to(f"cuda:{dev}")
    with Redistribute(a, Slab.X, Slab.Y) as r:
        r.plan()
        res = r.execute()
        torch.cuda.synchronize()
        want = g[sl(Slab.Y.box(rank, shape, nranks=P))]
        report.check(isinstance(res, torch.Tensor) and res.dtype == torch.float32 and res.is_cuda, f"result {res!r}")
        report.check(np.array_equal(res.cpu().numpy(), want), "torch CUDA result with empty boxes")


def run_lifetime(report: Report, cycles: int = 10) -> None:
    import redist
    from redist import Redistribute, Slab

    kept = []
    for cyc in range(cycles):
        start()
        for r in kept:  # freed by the previous finalize(): refused, never a hang
            report.expect_error(r.execute, redist.InvalidStateError, r"after free\(\)", f"cycle {cyc}: old object")
        a, want = problem()
        objs = [Redistribute(a, Slab.X, Slab.Y) for _ in range(3)]
        for r in objs:
            r.plan()
            report.check(np.array_equal(host(r.execute()), want), f"cycle {cyc}: wrong result")
        objs[0].free()
        kept = [objs[1]]  # referenced across finalize(); objs[2] is dropped
        del objs, r
        redist.finalize()


def run_fresh_mixed(report: Report) -> None:
    """result="fresh" with out= on the last rank only: one collective allocation cannot happen on
    some ranks, so every rank raises the same error (it hung before); out= everywhere and nowhere work."""
    import cupy as cp
    import redist
    from redist import Redistribute, Slab

    start()
    a, want = problem()
    with Redistribute(a, Slab.X, Slab.Y, options={"result": "fresh"}) as r:
        r.plan()
        sym = redist.allocate_symmetric_memory(want.shape, cp, dtype=np.float64)
        sym[...] = 7.0
        if P > 1:
            report.expect_error(lambda: r.execute(out=sym if rank == last else None), redist.InvalidValueError,
                                rf"rank\(s\) \[{last}\] passed out= and the others did not", "fresh, out= on one rank")
            report.check((host(sym) == 7.0).all(), "the refused call wrote the out=")
        report.check(r.execute(out=sym) is sym and np.array_equal(host(sym), want), "fresh, out= everywhere")
        fresh = r.execute()
        report.check(fresh is not sym and np.array_equal(host(fresh), want), "fresh, out= nowhere")
        redist.free_symmetric_memory(fresh)
        redist.free_symmetric_memory(sym)


MODES = {"failed": run_failed, "out": run_out, "reshaped": run_reshaped, "torch-empty": run_torch_empty,
         "lifetime": run_lifetime, "fresh-mixed": run_fresh_mixed}


if __name__ == "__main__":
    sys.exit(run_report_mode(comm, MODES))
