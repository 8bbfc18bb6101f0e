# SPDX-License-Identifier: Apache-2.0
"""Permuted results on the host: a pencil transpose that leaves the new axis contiguous.

    mpiexec -n 4 python perf/bench_permuted.py --n 128 256 --iters 7
    mpiexec -n 1 python perf/bench_permuted.py --gpu --n 128 256 512 --iters 9

X-pencils -> Y-pencils of an n³ complex64 array on P ranks (grids (1, a, b) -> (a, 1, b)), one
table, one run, variants interleaved (medians over ``--iters`` rounds, slowest rank):

* dense      -- ``execute()`` with the default C-ordered result
* permuted   -- ``result_layout=(0, 2, 1)``: axis 1 (Y) contiguous, written directly
* dense+copy -- the dense result, then ``np.ascontiguousarray(b.transpose(0, 2, 1))`` (what a
                code does without permuted results)

Target (issue #14): permuted <= 1.1x dense.
"""

from __future__ import annotations

import argparse

import numpy as np
from host_timing import interleaved_medians_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--host-method", default="auto")
    ap.add_argument("--gpu", action="store_true", help="cupy operands on the CUDA backend (CUDA events)")
    args = ap.parse_args()

    import redist
    from redist import BlockNonCyclic, ProcessGrid

    if args.gpu:
        import cupy as xp
        from cuda_timing import per_iteration_us

        redist.initialize(0)
    else:
        xp = np
        redist.initialize("cpu")
    pg = redist.get_context().process_group
    comm, rank, P = pg.mpi_comm, pg.rank, pg.nranks
    a_ = max(d for d in range(1, int(P ** 0.5) + 1) if P % d == 0)
    b_ = P // a_
    din, dout = BlockNonCyclic(ProcessGrid((1, a_, b_))), BlockNonCyclic(ProcessGrid((a_, 1, b_)))
    opts = {} if args.gpu else {"host_method": args.host_method}
    rows = []
    for n in args.n:
        g = (n, n, n)
        a = xp.ones(din.shape(rank, g), dtype=np.complex64)
        dense = redist.Redistribute(a, din, dout, options=opts)
        perm = redist.Redistribute(a, din, dout, options=opts | {"result_layout": (0, 2, 1)})
        dense.plan()
        perm.plan()
        variants = {
            "dense": dense.execute,
            "permuted": perm.execute,
            "dense+copy": lambda: xp.ascontiguousarray(dense.execute().transpose(0, 2, 1)),
        }
        if args.gpu:
            stream = xp.cuda.get_current_stream()
            med = {k: per_iteration_us(fn, stream, iters=20, reps=args.iters, warm=5, comm=comm) / 1e3
                   for k, fn in variants.items()}
        else:
            med = interleaved_medians_ms(variants, comm, iters=args.iters)
        b = perm.execute()
        ok = b.strides[1] == b.itemsize  # axis 1 contiguous
        rows.append((n, med["dense"], med["permuted"], med["dense+copy"], ok))
        dense.free()
        perm.free()
    if rank == 0:
        where = "GPU (CUDA events, 20 calls per rep)" if args.gpu else f"host_method={args.host_method}"
        print(f"# permuted results: P={P}, X-pencils (1,{a_},{b_}) -> Y-pencils ({a_},1,{b_}), complex64, "
              f"median of {args.iters} rounds, slowest rank, {where}; {mpi_version()}")
        print("| n³ | dense ms | permuted ms | dense+copy ms | permuted / dense | dense+copy / dense | axis 1 contiguous |")
        print("|---|---|---|---|---|---|---|")
        for n, d, p, c, ok in rows:
            print(f"| {n} | {d:.3f} | {p:.3f} | {c:.3f} | {p / d:.3f} | {c / d:.3f} | {ok} |")


def mpi_version() -> str:
    from mpi4py import MPI

    return MPI.Get_library_version().splitlines()[0].strip()


if __name__ == "__main__":
    main()
