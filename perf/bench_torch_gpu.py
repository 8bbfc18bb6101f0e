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
* adapter    -- the eager step (``redist.torch.redistribute`` + ``y * 2``) recorded by hand in
                ``torch.cuda.graph``, replayed: the adapter in a graph without CUDA graph trees around it
* eager      -- ``redist.torch.redistribute`` + ``y * 2`` uncompiled
* copy: captured / copy: compiled -- the same step with the exchange replaced by an opaque operator
                (``redist_bench::copy``, registered as redist's is) copying the same bytes, hand-captured
                and compiled alike: what CUDA graph trees cost around such a step, redist or not;
                *c/copy* is compiled over copy: compiled

*host* is the host time per call of the compiled loop (the events' span is the larger of host and device
time). Then, at the first size, the functions where a compiled call spends its host time
(``cProfile``, 200 calls, top 20 by own time).

After the table: torch's inductor counters (``cudagraph_skips`` counts steps CUDA graph trees did not
capture; run with ``TORCH_LOGS=perf_hints`` for the reasons).

CUDA events around ``--iters`` back-to-back calls, median of ``--reps``, slowest rank. Target:
compiled <= 1.05x captured at P = 1.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time


def per_call_us(fn, iters: int, reps: int, comm) -> tuple[float, float]:
    """(µs per call between CUDA events, host µs per call of the enqueue loop), medians, slowest rank."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts, hs = [], []
    for _ in range(reps):
        comm.Barrier()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        hs.append((time.perf_counter() - t0) * 1e6 / iters)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / iters)
    return max(comm.allgather(statistics.median(ts))), max(comm.allgather(statistics.median(hs)))


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
    copy_lib = torch.library.Library("redist_bench", "DEF")  # an opaque copy, registered as redist's operator is
    copy_lib.define("copy(Tensor a) -> Tensor")
    copy_lib.impl("copy", lambda a: a.clone(), "CompositeExplicitAutograd")
    torch.library.register_fake("redist_bench::copy", lambda a: torch.empty_like(a), lib=copy_lib)
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

        def step_static(a):  # (its own function: its own compiled code and graph tree)
            return redist.torch.redistribute(a, X, Y) * 2

        compiled = torch.compile(step, fullgraph=True, mode="reduce-overhead")
        same = torch.equal(compiled(x).clone(), step(x))
        # the same with the input's address marked static: CUDA graph trees then read it in place, as the
        # hand-captured graph does, instead of copying it into the graph's own input buffer
        xs = x.clone()
        torch._dynamo.mark_static_address(xs)
        static = torch.compile(step_static, fullgraph=True, mode="reduce-overhead")
        same = same and torch.equal(static(xs).clone(), step(x))
        graph.replay()
        same = same and torch.equal(captured_out, step(x))
        # the adapter itself recorded by hand into torch.cuda.graph (what reduce-overhead records, without
        # CUDA graph trees around it)
        adapter_graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(side):
            step(x)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(adapter_graph):
            adapter_out = step(x)
        adapter_graph.replay()
        same = same and torch.equal(adapter_out, step(x))
        # the floor: the same step with an opaque operator copying the same bytes in the exchange's place
        # (inductor cannot fuse it away, as it would a clone)
        copy_graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(side):
            torch.ops.redist_bench.copy(x)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(copy_graph):
            copied = torch.ops.redist_bench.copy(x) * 2
        copy_compiled = torch.compile(lambda a: torch.ops.redist_bench.copy(a) * 2, fullgraph=True,
                                      mode="reduce-overhead")
        copy_compiled(x)
        us = {
            "captured": per_call_us(graph.replay, args.iters, args.reps, comm),
            "compiled": per_call_us(lambda: compiled(x), args.iters, args.reps, comm),
            "static": per_call_us(lambda: static(xs), args.iters, args.reps, comm),
            "eager": per_call_us(lambda: step(x), args.iters, args.reps, comm),
            "adapter captured": per_call_us(adapter_graph.replay, args.iters, args.reps, comm),
            "copy: captured": per_call_us(copy_graph.replay, args.iters, args.reps, comm),
            "copy: compiled": per_call_us(lambda: copy_compiled(x), args.iters, args.reps, comm),
        }
        del copied
        if not rows and P == 1:
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(200):
                compiled(x)
            torch.cuda.synchronize()
            profile.disable()
            print(f"cProfile of 200 compiled (reduce-overhead) calls at {n}^3 (own time):")
            pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(20)
        rows.append((n, us, comm.allreduce(int(same)) == P))
        del graph, copy_graph, adapter_graph, adapter_out
        r.free()
    if rank == 0:
        print(f"redist.torch on GPUs, P = {P}, complex64, µs per step (slowest rank, median)")
        print(f"{'n':>5} {'captured':>10} {'adapter':>8} {'compiled':>10} {'c/capt':>7} {'host':>7} {'static':>10} "
              f"{'s/capt':>7} {'eager':>10} {'copy:capt':>10} {'copy:comp':>10} {'host':>7} {'c/copy':>7} same")
        for n, us, same in rows:
            dev = {k: v[0] for k, v in us.items()}
            print(f"{n:>5} {dev['captured']:10.1f} {dev['adapter captured']:8.1f} {dev['compiled']:10.1f} "
                  f"{dev['compiled'] / dev['captured']:7.3f} "
                  f"{us['compiled'][1]:7.1f} {dev['static']:10.1f} {dev['static'] / dev['captured']:7.3f} "
                  f"{dev['eager']:10.1f} {dev['copy: captured']:10.1f} {dev['copy: compiled']:10.1f} "
                  f"{us['copy: compiled'][1]:7.1f} {dev['compiled'] / dev['copy: compiled']:7.3f} {'yes' if same else 'NO'}")
        from torch._dynamo.utils import counters

        print("inductor counters:", {k: dict(v) for k, v in counters.items() if k in ("inductor", "graph_break")})
    redist.torch.clear_cache()
    redist.finalize()


if __name__ == "__main__":
    main()
