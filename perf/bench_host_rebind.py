# SPDX-License-Identifier: Apache-2.0
"""Host hot path: execute() and a double-buffered rebind + execute, against a hand-written floor.

    mpiexec -n 2 python perf/bench_host_rebind.py [--shape 32 32 16] [--iters 20000] [--reps 7]

Slab.X -> Slab.Y of a float64 array, one run, side by side (medians of ``--reps`` repetitions
of ``--iters`` calls after warm-up, per call in µs; the slowest rank sets the pace):

* floor     -- the physical floor: persistent MPI ``Send_init``/``Recv_init`` of exactly the
               bytes redist moves, one message per peer, between dense buffers, + a dense copy
               of the bytes kept locally; ``Startall``/``Waitall``
* by hand   -- what a user writes for the same move: the same persistent requests, but the
               send reads its strided region through an MPI subarray datatype and the local
               copy is the strided numpy copy of the kept box (the work redist must do too)
* execute   -- ``Redistribute.execute()`` alone
* rebind2   -- ``reset_operand_unchecked`` to the other of 2 buffers + ``execute()``
* rebind3   -- the same over 3 buffers
* out2      -- ``execute(out=...)`` alternating between 2 out= arrays
* push      -- ``execute()`` with ``host_method="push"`` (peers store into a shared window)
* hybrid    -- ``execute()`` with ``host_method="hybrid"`` (MPI messages)
* ... cycle -- a time step as an application runs it: write new input (one copy into the
               operand; for the floor into its send and local buffers: the same bytes), the
               exchange, then read the whole result (one copy into scratch). Without it the
               floor resends an unchanged buffer that stays in the receiver's cache (MPICH's
               single-copy CMA path reads it hot), which no time step does
Prints a table and the ratios the issue asks for; ``--json FILE`` writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
from mpi4py import MPI

import redist


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", type=int, nargs="+", default=[32, 32, 16])
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", default=None)
    ap.add_argument("--breakdown", action="store_true", help="time execute's parts instead of the variants")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, P = comm.rank, comm.size
    shape = tuple(args.shape)
    ib, ob = redist.Slab.X.box(rank, shape, nranks=P), redist.Slab.Y.box(rank, shape, nranks=P)
    g = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    bufs = [np.ascontiguousarray(g[tuple(slice(l, h) for l, h in zip(*ib))]) * (k + 1) for k in range(3)]
    want = [g[tuple(slice(l, h) for l, h in zip(*ob))] * (k + 1) for k in range(3)]

    def timed_all(fns: dict) -> dict:
        """Interleaved: every repetition times every variant once, so drift hits all alike."""
        for fn in fns.values():
            for _ in range(max(100, args.iters // 20)):
                fn()
        ts = {k: [] for k in fns}
        for _ in range(args.reps):
            for k, fn in fns.items():
                comm.Barrier()
                t0 = time.perf_counter()
                for _ in range(args.iters):
                    fn()
                ts[k].append((time.perf_counter() - t0) / args.iters * 1e6)
        return {k: max(comm.allgather(statistics.median(v))) for k, v in ts.items()}

    # the floor: the same bytes, hand-written persistent point-to-point + a local copy
    r = redist.Redistribute(bufs[0], redist.Slab.X, redist.Slab.Y)
    r.plan()
    plan = r._plan
    sends = [np.empty(t.nbytes, np.uint8) for t in plan.sends]
    recvs = [np.empty(t.nbytes, np.uint8) for t in plan.recvs]
    fcomm = comm.Dup()
    reqs = [fcomm.Recv_init([b, MPI.BYTE], t.src, 7) for b, t in zip(recvs, plan.recvs)]
    reqs += [fcomm.Send_init([b, MPI.BYTE], t.dst, 7) for b, t in zip(sends, plan.sends)]
    nloc = plan.local.nbytes if plan.local is not None else 0
    loc_src, loc_dst = np.empty(nloc, np.uint8), np.empty(nloc, np.uint8)

    def floor():
        MPI.Prequest.Startall(reqs)
        np.copyto(loc_dst, loc_src)
        MPI.Request.Waitall(reqs)

    # by hand: subarray datatypes on the real operand for the sends, the strided local copy
    a0 = bufs[0]
    hand_out = np.empty(plan.out_shape)
    types, hreqs = [], [fcomm.Recv_init([b, MPI.BYTE], t.src, 8) for b, t in zip(recvs, plan.recvs)]
    for t in plan.sends:
        sub = tuple(h - l for l, h in zip(*t.box))
        start = tuple(l - o for l, o in zip(t.box[0], ib.lower))
        dt = MPI.DOUBLE.Create_subarray(a0.shape, sub, start).Commit()
        types.append(dt)
        hreqs.append(fcomm.Send_init([a0, 1, dt], t.dst, 8))
    mine = [slice(max(l, m) - o, min(h, n) - o) for l, h, m, n, o in zip(*ib, *ob, ib.lower)]
    into = [slice(max(l, m) - o, min(h, n) - o) for l, h, m, n, o in zip(*ib, *ob, ob.lower)]
    src_view, dst_view = a0[tuple(mine)], hand_out[tuple(into)]

    def by_hand():
        MPI.Prequest.Startall(hreqs)
        np.copyto(dst_view, src_view)
        MPI.Request.Waitall(hreqs)

    r_method = r._exe.method
    it = iter(range(1 << 62))
    outs = [np.empty(plan.out_shape), np.empty(plan.out_shape)]

    def rebind(nb):
        def step():
            r.reset_operand_unchecked(bufs[next(it) % nb])
            r.execute()
        return step

    def out2():
        r.reset_operand_unchecked(bufs[0])
        r.execute(out=outs[next(it) % 2])

    rp = redist.Redistribute(bufs[0], redist.Slab.X, redist.Slab.Y, options={"host_method": "push"})
    rp.plan()
    rh = redist.Redistribute(bufs[0], redist.Slab.X, redist.Slab.Y, options={"host_method": "hybrid"})
    rh.plan()
    scratch = np.empty(plan.out_shape)
    flat = scratch.reshape(-1).view(np.uint8)

    fresh = [np.asarray(b_, np.float64).copy() for b_ in bufs]  # "computed" inputs, two alternating
    fresh_bytes = [f.reshape(-1).view(np.uint8) for f in fresh]
    step_no = iter(range(1 << 62))

    def produce_floor():
        src = fresh_bytes[next(step_no) % 2]
        off = 0
        for b_ in sends + [loc_src]:
            b_[...] = src[off : off + b_.size]
            off += b_.size

    def use_floor():
        off = 0
        for b_ in recvs + [loc_dst]:
            flat[off : off + b_.size] = b_
            off += b_.size

    def floor_cycle():
        produce_floor()
        floor()
        use_floor()

    def cycle(rr):
        def step():
            np.copyto(bufs[0], fresh[next(step_no) % 2])
            np.copyto(scratch, rr.execute())
        return step

    variants = {"floor": floor, "by hand": by_hand, "execute": r.execute, "rebind2": rebind(2),
                "rebind3": rebind(3), "out2": out2, "push": rp.execute, "hybrid": rh.execute,
                "floor cycle": floor_cycle, "execute cycle": cycle(r), "push cycle": cycle(rp),
                "hybrid cycle": cycle(rh)}
    if args.breakdown:  # where execute's time goes: the floor, then one difference at a time
        exe = r._exe
        exe.execute()
        e_first, e_packs, e_reqs, e_sts, e_local = exe._first, exe._packs, exe._reqs, exe._statuses, exe._local
        ldst, lsrc = e_local if e_local is not None else (loc_dst, loc_src)

        def strided_local():  # the floor's dense messages, redist's strided local copy
            MPI.Prequest.Startall(reqs)
            np.copyto(ldst, lsrc, casting="no")
            MPI.Request.Waitall(reqs)

        def redist_mpi_only():  # redist's own requests and views: no status, no Python layers
            MPI.Prequest.Startall(e_first)
            for d, s_, q in e_packs:
                np.copyto(d, s_, casting="no")
                q.Start()
            np.copyto(ldst, lsrc, casting="no")
            MPI.Request.Waitall(e_reqs)

        def with_tags():  # + the statuses the tag check reads
            MPI.Prequest.Startall(e_first)
            for d, s_, q in e_packs:
                np.copyto(d, s_, casting="no")
                q.Start()
            np.copyto(ldst, lsrc, casting="no")
            MPI.Request.Waitall(e_reqs, e_sts)

        variants = {"floor": floor, "+ strided local copy": strided_local, "+ redist's messages": redist_mpi_only,
                    "+ statuses (tag check)": with_tags, "engine _exchange": exe._exchange,
                    "engine execute": exe.execute, "execute": r.execute}
    rows = timed_all(variants)
    # what we timed is right
    bufs[0][...] = np.ascontiguousarray(g[tuple(slice(l, h) for l, h in zip(*ib))])  # the cycles wrote it
    ok = True
    for k in range(3):
        r.reset_operand_unchecked(bufs[k])
        ok &= bool(np.array_equal(r.execute(), want[k]))
        ok &= bool(np.array_equal(r.execute(out=outs[k % 2]), want[k]))
        ok &= bool(np.array_equal(rp.execute(), want[0])) and bool(np.array_equal(rh.execute(), want[0]))
    ok = bool(comm.allreduce(int(ok), op=MPI.MIN))
    r.free()
    rp.free()
    rh.free()
    for q in reqs + hreqs:
        q.Free()
    for dt in types:
        dt.Free()
    fcomm.Free()
    if rank == 0:
        nbytes = sum(t.nbytes for t in plan.sends)
        print(f"# redist host hot path: P={P}, shape {shape} float64 Slab.X -> Slab.Y, {nbytes} B sent per rank; "
              f"median of {args.reps} interleaved x {args.iters} calls; {MPI.Get_library_version().splitlines()[0]}")
        hand = rows.get("by hand", float("nan"))
        print(f"result method: {r_method}")
        print("| variant | µs per call | / execute | / floor | / by hand |")
        print("|---|---|---|---|---|")
        for k, v in rows.items():
            print(f"| {k} | {v:.2f} | {v / rows['execute']:.2f} | {v / rows['floor']:.2f} | {v / hand:.2f} |")
        print(f"results verified: {ok}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"P": P, "shape": shape, "rows": rows, "ok": ok}, f, indent=1)


if __name__ == "__main__":
    main()
