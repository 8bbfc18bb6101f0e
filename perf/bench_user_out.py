# SPDX-License-Identifier: Apache-2.0
"""GPU out= in ordinary device memory (issue #44), side by side in one run (CUDA events, medians
after warm-up), Slab.X -> Slab.Y complex64, torch operands:

* ``owned``: execute() into the engine-owned result;
* ``out=torch``: execute(out=t), t from torch's caching allocator (one pass: peers store into t);
* ``owned+copy``: execute() then t.copy_(result) (what a user had to do before #44);
* ``captured owned`` / ``captured out=torch``: the same step captured by torch.cuda.graph, replayed;
* host costs: the first call with a new allocation (mapping it on every rank), and a cached one,
  against the engine-owned result and against an ``out=`` in redist's symmetric memory (what a
  GPU out= had to be before #44: what the user-memory route adds per call for a cached allocation).

    mpiexec -n 1 python perf/bench_user_out.py --n 32 256 512
    REDIST_SHARED_GPU=1 mpiexec -n 4 python perf/bench_user_out.py --n 32 128   # several ranks, one GPU

Prints a markdown table (ratios against ``owned``); ``--out FILE`` writes it too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_timing import per_iteration_us, start_gpu  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[32, 256, 512])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import cupy as cp
    import torch

    import redist
    from redist import Redistribute, Slab

    ctx, comm, rank, nranks, cstream = start_gpu()
    torch.cuda.set_device(ctx.device_id)
    tstream = torch.cuda.ExternalStream(cstream.ptr)
    rows = []
    for n in args.n:
        shape = (n, n, n)
        xs = Slab.X.shape(rank, shape)
        a = torch.randn(xs, dtype=torch.complex64, device="cuda")
        with Redistribute(a, Slab.X, Slab.Y) as r:  # blocking="auto" (default): GPU calls return at launch
            r.plan()
            res = r.execute(stream=tstream)
            t = torch.empty(res.shape, dtype=torch.complex64, device="cuda")
            iters = max(3, args.iters if n <= 256 else args.iters // 5)
            kw = dict(iters=iters, reps=args.reps, warm=5, comm=comm if nranks > 1 else None)
            times = {
                "owned": per_iteration_us(lambda: r.execute(stream=tstream), cstream, **kw),
                "out=torch": per_iteration_us(lambda: r.execute(out=t, stream=tstream), cstream, **kw),
            }

            def owned_copy():
                with torch.cuda.stream(tstream):
                    t.copy_(r.execute(stream=tstream))

            times["owned+copy"] = per_iteration_us(owned_copy, cstream, **kw)
            # the same step captured by torch: replay cost
            graphs = {}
            for name, out in (("captured owned", None), ("captured out=torch", t)):
                r.execute(out=out, stream=tstream)
                cstream.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, stream=tstream):
                    r.execute(out=out, stream=tstream)
                graphs[name] = g
                times[name] = per_iteration_us(g.replay, cp.cuda.get_current_stream(), **kw)
            # host cost of a new allocation (mapped on every rank that stores into it) and of a cached one
            first = []
            nbytes = t.numel() * t.element_size()
            for _ in range(5):  # a new cudaMalloc each time: exported, mapped by the peers, routed
                ptr = cp.cuda.runtime.malloc(nbytes)
                fresh = torch.as_tensor(cp.ndarray(tuple(res.shape), cp.complex64, cp.cuda.MemoryPointer(
                    cp.cuda.UnownedMemory(ptr, nbytes, None), 0)), device="cuda")
                torch.cuda.synchronize()
                comm.Barrier()
                t0 = time.perf_counter()
                r.execute(out=fresh, stream=tstream)
                first.append((time.perf_counter() - t0) * 1e6)
                r.execute(stream=tstream)  # unbound before it is freed
                torch.cuda.synchronize()
                del fresh
                cp.cuda.runtime.free(ptr)
            sym = redist.allocate_symmetric_memory(tuple(res.shape), torch, dtype=torch.complex64)
            r.execute(out=sym, stream=tstream)
            r.execute(out=t, stream=tstream)
            torch.cuda.synchronize()
            host = {}
            for name, out in (("owned", None), ("out=torch", t), ("out=symmetric", sym)):
                samples = []
                for _ in range(args.reps):
                    comm.Barrier()
                    t0 = time.perf_counter()
                    for _ in range(200):
                        r.execute(out=out, stream=tstream)
                    samples.append((time.perf_counter() - t0) * 1e6 / 200)
                    torch.cuda.synchronize()
                host[name] = max(comm.allgather(statistics.median(samples)))
            first_us = max(comm.allgather(statistics.median(first)))
            r.execute(stream=tstream)  # unbound before it is freed
            torch.cuda.synchronize()
            redist.free_symmetric_memory(sym)
            del graphs
            r.release_captured()
            route = r._exe._outputs.text
        rows.append((n, times, host, first_us, route))
    if rank != 0:
        return
    lines = [f"GPU out= in user memory (#44): {nranks} rank(s){' sharing one GPU' if redist.get_context().cuda.shared_gpu else ''}, "
             "Slab.X -> Slab.Y complex64, us per call (CUDA events, median), ratios vs owned",
             "", "| n^3 | owned | out=torch | owned+copy | captured owned | captured out=torch | host owned | host out=torch "
             "| host out=symmetric | first use of a new allocation (host) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for n, t, h, f, _ in rows:
        o = t["owned"]
        lines.append(f"| {n} | {o:.1f} | {t['out=torch']:.1f} ({t['out=torch'] / o:.3f}x) | {t['owned+copy']:.1f} "
                     f"({t['owned+copy'] / o:.3f}x) | {t['captured owned']:.1f} | {t['captured out=torch']:.1f} "
                     f"({t['captured out=torch'] / t['captured owned']:.3f}x) | {h['owned']:.2f} | {h['out=torch']:.2f} "
                     f"(+{h['out=torch'] - h['owned']:.2f}) | {h['out=symmetric']:.2f} (out=torch {h['out=torch'] - h['out=symmetric']:+.2f}) "
                     f"| {f:.0f} us |")
    lines.append("")
    lines.append(f"routes: {rows[-1][4] or 'every output is the engine-owned result or local'}")
    text = "\n".join(lines)
    print(text, flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
