# SPDX-License-Identifier: Apache-2.0
"""GPU benchmark: redist vs PyTorch+NCCL vs raw NVSHMEM put vs a local copy, one table, one run.

Run one rank per GPU, e.g. on 2 GPUs::

    mpiexec -n 2 python perf/bench_cuda.py --sizes 32 64 128 256 512
    mpiexec -n 1 python perf/bench_cuda.py --sizes 32 64 128 256 512

Slab.X -> Slab.Y of an n³ complex64 array. Every figure is the median over ``--reps`` timed
repetitions of ``--iters`` back-to-back iterations (CUDA events around the repetition, after
warm-up), i.e. per-iteration time in a non-blocking loop:

* redist        -- ``Redistribute.execute()`` (persistent result, one graph launch each)
* torch eager   -- pack (one strided copy) + ``dist.all_to_all_single`` over NCCL; for this
                   move the received buffer already is the result, so unpack is free
* torch graph   -- the same, captured once with ``torch.cuda.graph`` and replayed
* nvshmem put   -- ``putmem_on_stream`` of the bytes each rank sends (+ quiet + barrier)
* local copy    -- a device-to-device copy of the bytes one rank holds
Also the host cost of ``execute()`` and ``reset_operand_unchecked()`` in µs.
Prints a markdown table on rank 0 and writes it (plus JSON) to ``--out`` if given.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from cuda_timing import per_iteration_us, start_gpu  # perf/cuda_timing.py (the script's folder is on sys.path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[32, 64, 128, 256, 512])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--transport", default="auto")
    ap.add_argument("--signal", default=None, help='"epoch" or "barrier" (default: the library default)')
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--case", choices=["slab", "pencil"], default="slab",
                    help="slab: Slab.X -> Slab.Y; pencil: X-pencils ProcessGrid(1,p1,p2) -> Y-pencils (p1,1,p2)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import cupy as cp

    import redist

    ctx, comm, rank, P, stream = start_gpu()
    dev = ctx.device_id

    def timed(fn, iters=args.iters, reps=args.reps, warm=5):
        return per_iteration_us(fn, stream, iters=iters, reps=reps, warm=warm, comm=comm)

    torch = dist = None
    if not args.no_torch and P > 1:
        import torch
        import torch.distributed as dist

        port = comm.bcast(29500 + (os.getpid() % 1000) if rank == 0 else None)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=P,
                                device_id=torch.device("cuda", dev))
        tstream = torch.cuda.ExternalStream(stream.ptr)

    if args.case == "slab":
        din, dout = redist.Slab.X, redist.Slab.Y
    else:
        p1 = max(d for d in range(1, int(P ** 0.5) + 1) if P % d == 0)
        p1, p2 = P // p1, p1
        din = redist.BlockNonCyclic(redist.ProcessGrid((1, p1, p2)))
        dout = redist.BlockNonCyclic(redist.ProcessGrid((p1, 1, p2)))
        args.no_torch = True  # the NCCL baseline below is written for slabs
    rows = []
    for n in args.sizes:
        shape = (n, n, n)
        ib, ob = din.box(rank, shape), dout.box(rank, shape)
        with stream:
            a = (cp.random.random(ib.box_shape, dtype=cp.float32)
                 + 1j * cp.random.random(ib.box_shape, dtype=cp.float32)).astype(cp.complex64)
            a2 = a * 2
        stream.synchronize()
        row = {"case": args.case, "n": n, "P": P, "MB": n ** 3 * 8 / 1e6}
        opts = dict(transport=args.transport, **({"signal": args.signal} if args.signal else {}))
        r = redist.Redistribute(a, din, dout, options=opts, stream=stream)
        r.plan(stream=stream)
        row["redist_us"] = timed(lambda: r.execute(stream=stream))
        # host cost: calls only (the GPU queue absorbs them), then drain
        stream.synchronize()
        comm.Barrier()
        k = 200
        t0 = time.perf_counter()
        for _ in range(k):
            r.execute(stream=stream)
        t1 = time.perf_counter()
        stream.synchronize()
        row["execute_host_us"] = max(comm.allgather((t1 - t0) / k * 1e6))
        t0 = time.perf_counter()
        for i in range(k):
            r.reset_operand_unchecked(a2 if i % 2 == 0 else a, stream=stream)
        t1 = time.perf_counter()
        row["rebind_host_us"] = max(comm.allgather((t1 - t0) / k * 1e6))
        r.reset_operand_unchecked(a, stream=stream)
        res = r.execute(stream=stream)
        stream.synchronize()
        # correctness of what we timed: gather the global array on every rank and compare
        if n <= 256:  # gather the global array on every rank and compare (skipped for huge sizes)
            g = np.empty(shape, np.complex64)
            for bx, piece in comm.allgather((ib, cp.asnumpy(a))):
                g[tuple(slice(l, h) for l, h in zip(bx.lower, bx.upper))] = piece
            ok = np.array_equal(cp.asnumpy(res), g[tuple(slice(l, h) for l, h in zip(ob.lower, ob.upper))])
            row["ok"] = bool(comm.allreduce(int(ok), op=__import__("mpi4py").MPI.MIN))
        else:
            row["ok"] = "unchecked"
        r.free()

        # local copy of the bytes this rank holds
        b = cp.empty_like(a)
        row["d2d_copy_us"] = timed(lambda: b.data.copy_from_device_async(a.data, a.nbytes, stream))

        if P > 1:
            # raw NVSHMEM put of what each rank sends (P-1 peers), + quiet + barrier, on the stream
            import nvshmem.bindings as nb
            import nvshmem.core as nvs

            nbytes_peer = a.nbytes // P
            src = nvs.buffer(max(a.nbytes, 1))
            dst = nvs.buffer(max(a.nbytes, 1))
            sptr, dptr = int(src.handle), int(dst.handle)

            def put():
                for k2 in range(1, P):
                    pe = (rank + k2) % P
                    nb.putmem_on_stream(dptr + rank * nbytes_peer, sptr + pe * nbytes_peer, nbytes_peer, pe, stream.ptr)
                nb.quiet_on_stream(stream.ptr)
                nb.barrier_all_on_stream(stream.ptr)

            row["nvshmem_put_us"] = timed(put)
            stream.synchronize()
            comm.Barrier()
            nvs.free(src)
            nvs.free(dst)

        if torch is not None and not args.no_torch:
            with torch.cuda.stream(tstream):
                x = torch.as_tensor(a, device=f"cuda:{dev}")
                m = n // P if n % P == 0 else None
                if m is not None:
                    send = torch.empty((P, n // P, m, n), dtype=torch.complex64, device=x.device)
                    recv = torch.empty_like(send)
                    sview, rview = send.view(torch.float32), recv.view(torch.float32)

                    def torch_step():
                        send.copy_(x.view(x.shape[0], P, m, n).transpose(0, 1))  # pack
                        dist.all_to_all_single(rview, sview)  # recv.view(n, m, n) is the Slab.Y result

                    row["torch_eager_us"] = timed(torch_step)
                    g_ = torch.cuda.CUDAGraph()
                    torch_step()
                    torch.cuda.synchronize()
                    with torch.cuda.graph(g_, stream=tstream):
                        torch_step()
                    row["torch_graph_us"] = timed(g_.replay)
                    del g_
        rows.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)

    if rank == 0:
        cols = [("case", "case"), ("n", "n³"), ("P", "P"), ("MB", "MB"), ("redist_us", "redist µs"),
                ("torch_eager_us", "torch eager µs"), ("torch_graph_us", "torch graph µs"),
                ("nvshmem_put_us", "nvshmem put µs"), ("d2d_copy_us", "d2d copy µs"),
                ("execute_host_us", "execute() host µs"), ("rebind_host_us", "rebind host µs"), ("ok", "ok")]
        lines = ["| " + " | ".join(c[1] for c in cols) + " |", "|" + "---|" * len(cols)]
        for row in rows:
            cells = []
            for key, _ in cols:
                v = row.get(key, "")
                cells.append(f"{v:.1f}" if isinstance(v, float) else str(v))
            lines.append("| " + " | ".join(cells) + " |")
        table = "\n".join(lines)
        print(table, flush=True)
        if args.out:
            with open(args.out, "w") as f:
                f.write(table + "\n\n")
                json.dump(rows, f, indent=1)
    if dist is not None:
        dist.destroy_process_group()
    redist.finalize()


if __name__ == "__main__":
    main()
