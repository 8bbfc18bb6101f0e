# SPDX-License-Identifier: Apache-2.0
"""Permuted results on the host: a pencil transpose that leaves the new axis contiguous.

    mpiexec -n 4 python perf/bench_permuted.py --n 128 256 --iters 7

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
import statistics
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--host-method", default="auto")
    args = ap.parse_args()

    import redist
    from redist import BlockNonCyclic, ProcessGrid

    redist.initialize("cpu")
    pg = redist.get_context().process_group
    comm, rank, P = pg.mpi_comm, pg.rank, pg.nranks
    a_ = max(d for d in range(1, int(P ** 0.5) + 1) if P % d == 0)
    b_ = P // a_
    din, dout = BlockNonCyclic(ProcessGrid((1, a_, b_))), BlockNonCyclic(ProcessGrid((a_, 1, b_)))
    rows = []
    for n in args.n:
        g = (n, n, n)
        a = np.ones(din.shape(rank, g), dtype=np.complex64)
        dense = redist.Redistribute(a, din, dout, options={"host_method": args.host_method})
        perm = redist.Redistribute(a, din, dout, options={"host_method": args.host_method,
                                                          "result_layout": (0, 2, 1)})
        dense.plan()
        perm.plan()
        variants = {
            "dense": dense.execute,
            "permuted": perm.execute,
            "dense+copy": lambda: np.ascontiguousarray(dense.execute().transpose(0, 2, 1)),
        }
        for fn in variants.values():  # warm-up
            fn()
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.iters):
            for k, fn in variants.items():
                comm.Barrier()
                t0 = time.perf_counter()
                fn()
                t = time.perf_counter() - t0
                times[k].append(max(comm.allgather(t)))
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        b = perm.execute()
        ok = b.strides[1] == b.itemsize  # axis 1 contiguous
        rows.append((n, med["dense"], med["permuted"], med["dense+copy"], ok))
        dense.free()
        perm.free()
    if rank == 0:
        print(f"# permuted results: P={P}, X-pencils (1,{a_},{b_}) -> Y-pencils ({a_},1,{b_}), complex64, "
              f"median of {args.iters} interleaved rounds, slowest rank, host_method={args.host_method}; "
              f"{mpi_version()}")
        print("| n³ | dense ms | permuted ms | dense+copy ms | permuted / dense | dense+copy / dense | axis 1 contiguous |")
        print("|---|---|---|---|---|---|---|")
        for n, d, p, c, ok in rows:
            print(f"| {n} | {d:.2f} | {p:.2f} | {c:.2f} | {p / d:.3f} | {c / d:.3f} | {ok} |")


def mpi_version() -> str:
    from mpi4py import MPI

    return MPI.Get_library_version().splitlines()[0].strip()


if __name__ == "__main__":
    main()
