# SPDX-License-Identifier: Apache-2.0
"""Where redist.torch's forward + backward goes (issue #45), apart from perf/bench_torch.py's loop.

    mpiexec -n 2 python perf/probe_torch_backward.py [N]

A pencil transpose (BlockNonCyclic (P,1,1) -> (1,P,1)) of an N^3 complex128 array (default 128),
ms per call (slowest rank, median of 15 after two warm-up calls, variants interleaved):

* fwd            -- the forward under no_grad
* fwd (graph)    -- the forward recording its backward (x requires grad), dropped unused
* fwd+bwd        -- forward, then backward() accumulating into .grad (an add_ per call after the first)
* fwd+bwd cleared-- the same into a cleared .grad (as after optimizer.zero_grad())
* fwd+grad       -- torch.autograd.grad (no .grad at all)
* adjoint        -- the backward's operator alone (redist::redistribute_adjoint)
* add_           -- one in-place add over the input: what accumulating costs
* copy fwd, copy fwd+grad -- the floor: a torch.autograd.Function copying the input (clone forward,
                    clone backward), under no_grad and with torch.autograd.grad: what torch's
                    autograd costs around any operator of this size
* X->Y, Y->X     -- ``Redistribute.execute(out=fresh tensor)`` of the forward's and the adjoint's
                    directions, no adapter (is one direction slower on this machine, or the adapter?)

Beside each time, the minor page faults of a call (getrusage): fresh memory the kernel hands out
page by page is what the glibc tunables in perf/device_run.sh's torch-bwd step take away.
"""

from __future__ import annotations

import resource
import statistics
import sys
import time

import torch

import redist
import redist.torch
from redist import BlockNonCyclic, ProcessGrid


def main() -> None:
    redist.initialize()
    comm = redist.get_context().process_group.mpi_comm
    nranks, rank = comm.Get_size(), comm.Get_rank()
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 128
    g = (n, n, n)
    a, b = BlockNonCyclic(ProcessGrid((nranks, 1, 1))).bind(g), BlockNonCyclic(ProcessGrid((1, nranks, 1))).bind(g)
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(a.shape(rank), dtype=torch.complex128, generator=gen, requires_grad=True)
    scratch = x.detach().clone()
    seed = torch.randn(b.shape(rank), dtype=torch.complex128, generator=gen)
    codes = redist.torch._resolve(redist.torch._plain(a), redist.torch._plain(b), None, None, 3)

    def fwd():
        with torch.no_grad():
            redist.torch.redistribute(x, a, b)

    def fwd_graph():  # the forward recording its backward, dropped unused
        redist.torch.redistribute(x, a, b)

    def fwd_bwd():
        redist.torch.redistribute(x, a, b).backward(seed)

    def fwd_bwd_cleared():
        x.grad = None
        redist.torch.redistribute(x, a, b).backward(seed)

    def fwd_grad():
        torch.autograd.grad(redist.torch.redistribute(x, a, b), x, seed)

    def adjoint():
        torch.ops.redist.redistribute_adjoint([seed], list(codes[0]), list(codes[1]), codes[2], list(x.shape))

    def add():
        scratch.add_(scratch)

    class Copy(torch.autograd.Function):  # the floor: a differentiable copy of the same bytes, no exchange
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, g):
            return g.clone()

    def copy_fwd():
        with torch.no_grad():
            Copy.apply(x)

    def copy_fwd_grad():
        torch.autograd.grad(Copy.apply(x), x, scratch)

    forward = redist.Redistribute(x.detach(), a, b)
    inverse = redist.Redistribute(seed, b, a)
    forward.plan()
    inverse.plan()

    def x_to_y():
        forward.execute(out=torch.empty(b.shape(rank), dtype=torch.complex128))

    def y_to_x():
        inverse.execute(out=torch.empty(a.shape(rank), dtype=torch.complex128))

    variants = {"fwd": fwd, "fwd (graph)": fwd_graph, "fwd+bwd": fwd_bwd, "fwd+bwd cleared": fwd_bwd_cleared, "fwd+grad": fwd_grad,
                "adjoint": adjoint, "add_": add, "X->Y": x_to_y, "Y->X": y_to_x,
                "copy fwd": copy_fwd, "copy fwd+grad": copy_fwd_grad}
    for fn in variants.values():
        fn()
        fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    faults: dict[str, list[int]] = {k: [] for k in variants}
    for _ in range(15):
        for k, fn in variants.items():
            comm.Barrier()
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0 = time.perf_counter()
            fn()
            elapsed = time.perf_counter() - t0
            faults[k].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
            times[k].append(max(comm.allgather(elapsed)))
    most_faults = {k: max(comm.allgather(statistics.median(v))) for k, v in faults.items()}
    if rank == 0:
        print(f"probe_torch_backward: P = {nranks}, {n}^3 complex128, torch {torch.__version__}; ms per call, "
              "the most minor page faults per call on a rank (median)")
        for k, ts in times.items():
            print(f"  {k:<16} {statistics.median(ts) * 1e3:8.3f}   {most_faults[k]:8.0f} faults")
    forward.free()
    inverse.free()
    redist.finalize()


if __name__ == "__main__":
    main()
