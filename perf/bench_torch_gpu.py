# SPDX-License-Identifier: Apache-2.0
"""redist.torch on a GPU (issue #45): a ``torch.compile(mode="reduce-overhead")`` step holding
``redist.torch.redistribute`` against the same step hand-captured with ``Redistribute.execute()``
in ``torch.cuda.graph``.

    mpiexec -n 1 python perf/bench_torch_gpu.py --n 64 128 256 --iters 50 --reps 9   # perf/device_run.sh torch

The step is Slab.X -> Slab.Y of an n³ complex64 array, then ``y * 2``. Variants:

* captured   -- ``Redistribute.execute()`` + ``y * 2`` recorded once in ``torch.cuda.graph``, replayed
* compiled   -- ``torch.compile(step, fullgraph=True, mode="reduce-overhead")`` (CUDA graph trees: the
                input is copied into the graph's static buffer; at P = 1 the exchange writes the
                adapter's fresh output as out=, #44; with several ranks inside the capture, one copy of
                the engine-owned result)
* static     -- compiled, with the input marked ``torch._dynamo.mark_static_address`` (read in place,
                as the hand-captured graph reads it)
* eager      -- ``redist.torch.redistribute`` + ``y * 2`` uncompiled

After the table: torch's inductor counters (``cudagraph_skips`` counts steps CUDA graph trees did not
capture; run with ``TORCH_LOGS=perf_hints`` for the reasons).

CUDA events around ``--iters`` back-to-back calls, median of ``--reps``, slowest rank. Target:
compiled <= 1.05x captured at P = 1.
"""

from __future__ import annotations

import argparse
import statistics


def per_call_us(fn, iters: int, reps: int, comm) -> float:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        comm.Barrier()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / iters)
    return max(comm.allgather(statistics.median(ts)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()

    import torch

    import redist
    import redist.torch
    from redist import Slab

    redist.initialize()
    ctx = redist.get_context()
    comm, rank, P = ctx.process_group.mpi_comm, ctx.process_group.rank, ctx.process_group.nranks
    device = torch.device("cuda", ctx.device_id)
    torch.cuda.set_device(device)
    rows = []
    for n in args.n:
        g = (n, n, n)
        X, Y = Slab.X.bind(g), Slab.Y.bind(g)
        x = torch.randn(Slab.X.shape(rank, g), dtype=torch.complex64, device=device)
        r = redist.Redistribute(x, Slab.X, Slab.Y)
        r.plan()
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            r.execute()
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            captured_out = r.execute() * 2

        def step(a):
            return redist.torch.redistribute(a, X, Y) * 2

        compiled = torch.compile(step, fullgraph=True, mode="reduce-overhead")
        same = torch.equal(compiled(x).clone(), step(x))
        # the same with the input's address marked static: CUDA graph trees then read it in place, as the
        # hand-captured graph does, instead of copying it into the graph's own input buffer
        xs = x.clone()
        torch._dynamo.mark_static_address(xs)
        static = torch.compile(step, fullgraph=True, mode="reduce-overhead")
        same = same and torch.equal(static(xs).clone(), step(x))
        graph.replay()
        same = same and torch.equal(captured_out, step(x))
        us = {
            "captured": per_call_us(graph.replay, args.iters, args.reps, comm),
            "compiled": per_call_us(lambda: compiled(x), args.iters, args.reps, comm),
            "static": per_call_us(lambda: static(xs), args.iters, args.reps, comm),
            "eager": per_call_us(lambda: step(x), args.iters, args.reps, comm),
        }
        rows.append((n, us, comm.allreduce(int(same)) == P))
        del graph
        r.free()
    if rank == 0:
        print(f"redist.torch on GPUs, P = {P}, complex64, µs per step (slowest rank, median)")
        print(f"{'n':>5} {'captured':>10} {'compiled':>10} {'c/capt':>7} {'static':>10} {'s/capt':>7} {'eager':>10} same")
        for n, us, same in rows:
            print(f"{n:>5} {us['captured']:10.1f} {us['compiled']:10.1f} {us['compiled'] / us['captured']:7.3f} "
                  f"{us['static']:10.1f} {us['static'] / us['captured']:7.3f} {us['eager']:10.1f} {'yes' if same else 'NO'}")
        from torch._dynamo.utils import counters

        print("inductor counters:", {k: dict(v) for k, v in counters.items() if k in ("inductor", "graph_break")})
    redist.torch.clear_cache()
    redist.finalize()


if __name__ == "__main__":
    main()
