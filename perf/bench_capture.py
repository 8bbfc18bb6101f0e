# SPDX-License-Identifier: Apache-2.0
"""GPU benchmark: a user's time step captured whole (redist's exchange inside) vs the same step eager.

Run on one GPU (P = 1) or one rank per GPU::

    mpiexec -n 1 python perf/bench_capture.py --sizes 32 256 --out capture.md

Every figure is per iteration, the median over ``--reps`` repetitions of ``--iters`` back-to-back
iterations after warm-up (CUDA events around each repetition: perf/cuda_timing.py), n³ complex64,
cupy kernels on a non-blocking stream:

* step        -- producer (``a += 1``) -> ``Redistribute.execute()`` (Slab.X -> Slab.Y) -> consumer
                 (``out[...] = result``); eager: three launches from Python; captured: the user's
                 ``Stream.begin_capture()`` graph of the three, replayed (redist's exchange is one
                 child-graph node in it)
* step flat   -- P = 1: the same three kernels captured flat (redist's copy kernel launched straight
                 into the capture, no child-graph node): what the step's kernels cost, no launch
                 overhead at all -- the target is captured <= flat + 1 µs
* step floor  -- P = 1: the captured step with a device-to-device copy (cudaMemcpyAsync) of the
                 operand's bytes in place of the exchange (at P = 1 the exchange is such a copy)
* round trip  -- x -> y -> z -> y -> x pencils (four exchanges) + producer + consumer, eager vs
                 captured, and its floor (four copies, captured)
* update      -- host µs of ``reset_operand_unchecked(x)`` + ``update_captured(graph)`` (alternating
                 two operands), and of ``reset_operand_unchecked`` alone (median of ``--calls``)
Prints a markdown table on rank 0 and writes it (plus JSON) to ``--out`` if given.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from cuda_timing import per_iteration_us, start_gpu  # perf/cuda_timing.py (the script's folder is on sys.path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import cupy as cp

    import redist
    from redist import Box, Slab

    _, comm, rank, P, stream = start_gpu()

    def timed(fn):
        return per_iteration_us(fn, stream, iters=args.iters, reps=args.reps, warm=10, comm=comm)

    def capture(body):
        with stream:
            stream.begin_capture()
            body()
            return stream.end_capture()

    def host_us(fn, calls):
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(calls // 5):
                fn()
            ts.append((time.perf_counter() - t0) / (calls // 5) * 1e6)
        return statistics.median(ts)

    def pencils(g, a, b):
        """This rank's box of ``g`` split along axes a and b over a near-square grid."""
        from redist import BlockNonCyclic, ProcessGrid

        pa = max(d for d in range(1, P + 1) if P % d == 0 and d * d <= P)
        shape = [1, 1, 1]
        shape[a], shape[b] = pa, P // pa
        return BlockNonCyclic(ProcessGrid(tuple(shape))).box(rank, g, nranks=P)

    rows = []
    for n in args.sizes:
        g = (n, n, n)
        ibox, obox = Slab.X.box(rank, g, nranks=P), Slab.Y.box(rank, g, nranks=P)
        with stream:
            a = cp.ones(ibox.box_shape, dtype=cp.complex64)
            a2 = cp.ones(ibox.box_shape, dtype=cp.complex64)
            out = cp.empty(obox.box_shape, dtype=cp.complex64)
            tmp = cp.empty_like(a)
        r = redist.Redistribute(a, Slab.X, Slab.Y)
        r.plan()

        def step():
            with stream:
                a[...] += 1
                out[...] = r.execute()

        def floor_step():  # P = 1: the exchange is a copy of the operand's bytes
            with stream:
                a[...] += 1
                tmp.data.copy_from_device_async(a.data, a.nbytes, stream)
                out[...] = tmp

        eager = timed(step)
        graph = capture(step)
        captured = timed(lambda: graph.launch(stream=stream))
        def flat_step():  # P = 1: the launch list is one copy kernel (no NVSHMEM steps)
            with stream:
                a[...] += 1
                for kern in r._exe._kernels.values():
                    kern.launch.launch(stream.ptr)
                out[...] = r._result

        floor = flat = float("nan")
        if P == 1:
            floor_graph, flat_graph = capture(floor_step), capture(flat_step)
            floor = timed(lambda: floor_graph.launch(stream=stream))
            flat = timed(lambda: flat_graph.launch(stream=stream))
            del floor_graph, flat_graph
        alone = timed(lambda: r.execute(stream=stream))
        ops = [a, a2]
        k = [0]

        def rebind_update():
            k[0] ^= 1
            r.reset_operand_unchecked(ops[k[0]])
            r.update_captured(graph)

        def rebind():
            k[0] ^= 1
            r.reset_operand_unchecked(ops[k[0]])

        upd = host_us(rebind_update, args.calls)
        reb = host_us(rebind, args.calls)
        stream.synchronize()
        graph = None  # the user graph goes: its copy of the exchange with it

        # the pencil round trip: four exchanges in one step
        boxes = [pencils(g, 1, 2), pencils(g, 0, 2), pencils(g, 0, 1), pencils(g, 0, 2), pencils(g, 1, 2)]
        with stream:
            x = cp.ones(boxes[0].box_shape, dtype=cp.complex64)
            xo = cp.empty_like(x)
            tmps = [cp.empty(b.box_shape, dtype=cp.complex64) for b in boxes[1:]]
        rs, src = [], x
        for frm, to in zip(boxes, boxes[1:]):
            rt = redist.Redistribute(src, Box(frm.lower, frm.upper), Box(to.lower, to.upper))
            rt.plan()
            rs.append(rt)
            src = rt.execute(stream=stream)

        def trip():
            with stream:
                x[...] += 1
                for rt in rs:
                    res = rt.execute()
                xo[...] = res

        def trip_floor():
            with stream:
                x[...] += 1
                prev = x
                for t in tmps:
                    t.data.copy_from_device_async(prev.data, prev.nbytes, stream)
                    prev = t
                xo[...] = prev

        trip_eager = timed(trip)
        tg = capture(trip)
        trip_captured = timed(lambda: tg.launch(stream=stream))
        tf = capture(trip_floor) if P == 1 else None
        trip_fl = timed(lambda: tf.launch(stream=stream)) if tf is not None else float("nan")
        stream.synchronize()
        tg = tf = None
        for rt in rs:
            rt.free()
        r.free()
        row = dict(n=n, P=P, step_eager=eager, step_captured=captured, step_flat=flat, step_floor=floor,
                   exchange_alone=alone, trip_eager=trip_eager, trip_captured=trip_captured, trip_floor=trip_fl,
                   rebind_update_us=upd, rebind_us=reb)
        rows.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)

    if rank == 0:
        lines = [
            f"P = {P}, complex64 n³, per iteration (µs; median of {args.reps} x {args.iters}); host µs per call",
            "",
            "| n³ | step eager | step captured | step flat (same kernels) | captured - flat | step floor (memcpy) "
            "| execute() alone | round trip eager | round trip captured | round trip floor | rebind + update_captured "
            "| rebind alone |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for x in rows:
            lines.append(
                f"| {x['n']} | {x['step_eager']:.1f} | {x['step_captured']:.1f} | {x['step_flat']:.1f} | "
                f"{x['step_captured'] - x['step_flat']:+.1f} | {x['step_floor']:.1f} | {x['exchange_alone']:.1f} | "
                f"{x['trip_eager']:.1f} | "
                f"{x['trip_captured']:.1f} | {x['trip_floor']:.1f} | {x['rebind_update_us']:.2f} | "
                f"{x['rebind_us']:.2f} |")
        text = "\n".join(lines)
        print(text)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text + "\n\n```json\n" + json.dumps(rows, indent=1) + "\n```\n")


if __name__ == "__main__":
    main()
