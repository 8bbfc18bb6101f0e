# SPDX-License-Identifier: Apache-2.0
"""redist.torch (issue #45): the adapter's cost against Redistribute.execute(), forward + backward
against forward, and DTensor ``redistribute`` (gloo) side by side, on the host.

    mpiexec -n 2 python perf/bench_torch.py --n 64 128 256 --iters 15
    mpiexec -n 4 python perf/bench_torch.py --n 64 128 256 --iters 15
    mpiexec -n 2 python perf/bench_torch.py --n 16 --iters 3 --backend aot_eager   # a quick sanity run

One table per run, n³ complex128, variants interleaved (perf/host_timing.py: slowest rank,
medians after one warm-up call each):

* execute    -- ``Redistribute.execute(out=fresh)`` of a planned Slab.X -> Slab.Y object: the floor
* eager      -- ``redist.torch.redistribute(x, X, Y)`` (the plan cache's lookup, the op, a fresh output)
* compiled   -- the same call inside ``torch.compile(fullgraph=True)`` (``--backend``)
* fwd+bwd    -- a pencil transpose (BlockNonCyclic (P,1,1) -> (1,P,1)) forward, then ``backward``
                into a cleared ``.grad`` (as after ``optimizer.zero_grad()``, whose default sets it to
                None: autograd then keeps the gradient tensor, with no accumulating pass)
* fwd        -- the same forward alone (ratio fwd+bwd / fwd)
* dtensor    -- ``DTensor.redistribute`` Shard(0) -> Shard(1) on a gloo process group (pad, all_to_all,
                unpad); its result is compared with redist's (the same values, exactly)

Targets (issue #45): compiled <= 1.1x execute; fwd+bwd <= 2.2x fwd at 128³; redist >= 2x faster
than DTensor at 64³-256³, P = 2 and 4. Figures taken on a loaded machine are not results.
"""

from __future__ import annotations

import argparse
import os

from host_timing import interleaved_medians_ms


def dtensor_mesh(comm):
    """A gloo process group over the MPI ranks (rendezvous through MPI), and its 1-D device mesh."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(comm.bcast(29500 + os.getpid() % 20000 if comm.Get_rank() == 0 else None))
    dist.init_process_group("gloo", rank=comm.Get_rank(), world_size=comm.Get_size())
    return init_device_mesh("cpu", (comm.Get_size(),))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--backend", default="inductor", help="torch.compile backend")
    ap.add_argument("--no-dtensor", action="store_true")
    args = ap.parse_args()

    import torch

    import redist
    import redist.torch
    from redist import BlockNonCyclic, ProcessGrid, Slab

    redist.initialize("cpu")
    pg = redist.get_context().process_group
    comm, rank, P = pg.mpi_comm, pg.rank, pg.nranks
    mesh = None if args.no_dtensor or P == 1 else dtensor_mesh(comm)
    rows = []
    for n in args.n:
        g = (n, n, n)
        X, Y = Slab.X.bind(g), Slab.Y.bind(g)
        gen = torch.Generator().manual_seed(rank)
        x = torch.randn(Slab.X.shape(rank, g), dtype=torch.complex128, generator=gen)
        r = redist.Redistribute(x, Slab.X, Slab.Y)
        r.plan()
        shape_y = Slab.Y.shape(rank, g)

        def execute():
            return r.execute(out=torch.empty(shape_y, dtype=x.dtype))

        def eager():
            return redist.torch.redistribute(x, X, Y)

        compiled = torch.compile(eager, fullgraph=True, backend=args.backend)
        a, b = BlockNonCyclic(ProcessGrid((P, 1, 1))).bind(g), BlockNonCyclic(ProcessGrid((1, P, 1))).bind(g)
        xp = torch.randn(a.shape(rank), dtype=torch.complex128, generator=gen, requires_grad=True)
        seed = torch.randn(b.shape(rank), dtype=torch.complex128, generator=gen)

        def fwd():
            with torch.no_grad():
                return redist.torch.redistribute(xp, a, b)

        def fwd_bwd():
            xp.grad = None
            redist.torch.redistribute(xp, a, b).backward(seed)

        variants = {"execute": execute, "eager": eager, "compiled": compiled, "fwd": fwd, "fwd+bwd": fwd_bwd}
        same = True
        if mesh is not None:
            from torch.distributed.tensor import DTensor, Shard

            dx = DTensor.from_local(x, mesh, [Shard(0)], run_check=False)

            def dtensor():
                return dx.redistribute(mesh, [Shard(1)]).to_local()

            variants["dtensor"] = dtensor
            same = torch.equal(dtensor(), eager())
        same = comm.allreduce(int(same), op=__import__("mpi4py").MPI.MIN) == 1
        ms = interleaved_medians_ms(variants, comm, iters=args.iters)
        rows.append((n, ms, same))
        r.free()
    if rank == 0:
        print(f"redist.torch, P = {P}, complex128, compile backend {args.backend}; ms per call (slowest rank, median)")
        print(f"{'n':>5} {'execute':>9} {'eager':>9} {'compiled':>9} {'c/exec':>7} {'fwd':>9} {'fwd+bwd':>9} "
              f"{'fb/f':>6} {'dtensor':>9} {'dt/redist':>9} same")
        for n, ms, same in rows:
            dt = ms.get("dtensor", float("nan"))
            print(f"{n:>5} {ms['execute']:9.3f} {ms['eager']:9.3f} {ms['compiled']:9.3f} "
                  f"{ms['compiled'] / ms['execute']:7.2f} {ms['fwd']:9.3f} {ms['fwd+bwd']:9.3f} "
                  f"{ms['fwd+bwd'] / ms['fwd']:6.2f} {dt:9.3f} {dt / ms['compiled']:9.2f} {'yes' if same else 'NO'}")
    redist.finalize()
    if mesh is not None:
        import torch.distributed as dist

        dist.destroy_process_group()


if __name__ == "__main__":
    main()
