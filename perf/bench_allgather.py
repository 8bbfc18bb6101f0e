# SPDX-License-Identifier: Apache-2.0
"""Allgather through ``allow_overlap`` on the host, against ``MPI_Allgatherv`` on the same bytes.

    mpiexec -n 4 python perf/bench_allgather.py --mbytes 64 --iters 9

A global float64 array of ``--mbytes`` MB (rows x 4096) is split by rows (Slab.X, uneven when
the rows do not divide); every rank's output box is the whole array. One run, variants
interleaved, medians over ``--iters`` rounds of the slowest rank:

* redist <method>  -- ``Redistribute(a, Slab.X, whole, options={"allow_overlap": True, ...})``
                      for each host method given (``--methods``; "auto" is the shared-memory push
                      on one node)
* Allgatherv       -- ``comm.Allgatherv`` of the same rows into a preallocated array (the floor
                      MPI offers; what a hand-written code calls)

Target (issue #14): redist >= 0.9x the speed of Allgatherv (time ratio <= 1/0.9 = 1.11).
"""

from __future__ import annotations

import argparse

import numpy as np
from host_timing import interleaved_medians_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mbytes", type=int, nargs="+", default=[64])
    ap.add_argument("--iters", type=int, default=9)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--methods", nargs="+", default=["auto", "hybrid", "datatype"])
    ap.add_argument("--padded", action="store_true",
                    help="operands are the interior of an array with one ghost cell per side (strided rows)")
    args = ap.parse_args()

    import redist
    from mpi4py import MPI
    from redist import Slab

    redist.initialize("cpu")
    pg = redist.get_context().process_group
    comm, rank, P = pg.mpi_comm, pg.rank, pg.nranks
    rows_out = []
    for mb in args.mbytes:
        nrows = mb * 2**20 // (8 * args.cols)
        g = (nrows, args.cols)
        box = Slab.X.box(rank, g, nranks=P)
        a = np.arange(box.lower[0] * args.cols, box.upper[0] * args.cols, dtype=np.float64).reshape(
            box.upper[0] - box.lower[0], args.cols)
        if args.padded:
            ghosted = np.zeros((a.shape[0] + 2, a.shape[1] + 2))
            ghosted[1:-1, 1:-1] = a
            a = ghosted[1:-1, 1:-1]
        whole = redist.Box((0, 0), g)
        objs = {m: redist.Redistribute(a, Slab.X, whole, options={"allow_overlap": True, "host_method": m})
                for m in args.methods}
        for r in objs.values():
            r.plan()
        counts = [(Slab.X.box(q, g, nranks=P).upper[0] - Slab.X.box(q, g, nranks=P).lower[0]) * args.cols
                  for q in range(P)]
        displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
        gathered = np.empty(g)

        def allgatherv():  # a padded operand is packed first, as a hand-written code would
            comm.Allgatherv(np.ascontiguousarray(a) if args.padded else a, [gathered, counts, displs, MPI.DOUBLE])
            return gathered

        variants = {f"redist {m}": objs[m].execute for m in args.methods} | {"Allgatherv": allgatherv}
        want = np.arange(nrows * args.cols, dtype=np.float64).reshape(g)
        correct = [bool(np.array_equal(fn(), want)) for fn in variants.values()]  # every result checked once
        ok = all(comm.allgather(all(correct)))
        med = interleaved_medians_ms(variants, comm, iters=args.iters)
        rows_out.append((mb, med, ok))
        for r in objs.values():
            r.free()
    if rank == 0:
        print(f"# allgather: P={P}, float64 rows x {args.cols} split by rows (Slab.X) -> every rank the whole array"
              f"{', padded operands (strided rows)' if args.padded else ''}, "
              f"median of {args.iters} interleaved rounds, slowest rank; "
              f"{MPI.Get_library_version().splitlines()[0].strip()}")
        names = list(rows_out[0][1])
        print("| MB | " + " | ".join(f"{k} ms" for k in names) + " | "
              + " | ".join(f"{k} / Allgatherv" for k in names if k != "Allgatherv") + " | all correct |")
        print("|---" * (2 * len(names)) + "|---|")
        for mb, med, ok in rows_out:
            base = med["Allgatherv"]
            print(f"| {mb} | " + " | ".join(f"{med[k]:.2f}" for k in names) + " | "
                  + " | ".join(f"{med[k] / base:.3f}" for k in names if k != "Allgatherv") + f" | {ok} |")


if __name__ == "__main__":
    main()
