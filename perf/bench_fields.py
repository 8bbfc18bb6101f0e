# SPDX-License-Identifier: Apache-2.0
"""Fused fields: three arrays moved in one exchange vs three separate Redistribute objects.

    mpiexec -n 2 python perf/bench_fields.py --n 16 32 64 128 --iters 15
    mpiexec -n 4 python perf/bench_fields.py --n 16 32 64 128 --iters 15 --host-method hybrid
    mpiexec -n 1 python perf/bench_fields.py --gpu --n 64 128 256 512 --iters 9

Three fields of n³ (float64 on the host, complex64 on the GPU) go Slab.X -> Slab.Y, one table,
one run, variants side by side (host: interleaved rounds, slowest rank, medians; GPU: CUDA
events around 20 back-to-back calls, median of ``--iters`` repetitions):

* fused      -- ``Redistribute((u, v, w), ...)``: one exchange for the three fields
* separate   -- three ``Redistribute`` objects, executed one after the other (what a code does today)
* one array  -- a single array holding the same bytes, (3n) x n x n, one exchange: the floor of
                the exchange itself for these bytes
* copy       -- (GPU) a device-to-device copy of the three fields' bytes on this rank: the memory floor

Targets (issue #15): host P=2/4 64³ fused <= 0.6x separate; GPU P=1 64³ <= 0.5x, 512³ <= 1.05x.
"""

from __future__ import annotations

import argparse

import numpy as np
from host_timing import interleaved_medians_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[16, 32, 64, 128])
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--host-method", default="auto")
    ap.add_argument("--gpu", action="store_true", help="cupy operands on the CUDA backend (CUDA events)")
    args = ap.parse_args()

    import redist
    from redist import Slab

    if args.gpu:
        import cupy as xp
        from cuda_timing import per_iteration_us

        redist.initialize(0)
        dtype = np.complex64
    else:
        xp = np
        redist.initialize("cpu")
        dtype = np.float64
    pg = redist.get_context().process_group
    comm, rank, P = pg.mpi_comm, pg.rank, pg.nranks
    opts = {} if args.gpu else {"host_method": args.host_method}
    rows = []
    for n in args.n:
        g = (n, n, n)
        fields = tuple(xp.full(Slab.X.shape(rank, g), f + 1, dtype=dtype) for f in range(3))
        fused = redist.Redistribute(fields, Slab.X, Slab.Y, options=opts)
        separate = [redist.Redistribute(a, Slab.X, Slab.Y, options=opts) for a in fields]
        big = xp.full(Slab.X.shape(rank, (3 * n, n, n)), 1, dtype=dtype)
        one = redist.Redistribute(big, Slab.X, Slab.Y, options=opts)
        for r in (fused, *separate, one):
            r.plan()
        res = fused.execute()
        for f, x in enumerate(res):  # the fused results are right before anything is timed
            assert bool((x == f + 1).all()), f"field {f} wrong"

        def three():
            for r in separate:
                r.execute()

        variants = {"fused": fused.execute, "separate": three, "one array": one.execute}
        if args.gpu:
            src = xp.concatenate([a.reshape(-1) for a in fields])
            dst = xp.empty_like(src)
            variants["copy"] = lambda: dst.__setitem__(slice(None), src)
            stream = xp.cuda.get_current_stream()
            med = {k: per_iteration_us(fn, stream, iters=20, reps=args.iters, warm=5, comm=comm)
                   for k, fn in variants.items()}
        else:
            med = {k: v * 1e3 for k, v in interleaved_medians_ms(variants, comm, iters=args.iters).items()}
        rows.append((n, med))
        for r in (fused, *separate, one):
            r.free()
    if rank == 0:
        where = "GPU, CUDA events, 20 calls per repetition" if args.gpu else f"host_method={args.host_method}"
        kind = np.dtype(dtype).name
        print(f"# fused fields: P={P}, 3 fields of n³ {kind}, Slab.X -> Slab.Y, median of {args.iters}, slowest rank, "
              f"{where}; {mpi_version()}")
        cols = list(rows[0][1])
        print("| n³ | " + " | ".join(f"{c} µs" for c in cols) + " | fused / separate | fused / one array |")
        print("|---|" + "---|" * (len(cols) + 2))
        for n, med in rows:
            cells = " | ".join(f"{med[c]:.1f}" for c in cols)
            print(f"| {n} | {cells} | {med['fused'] / med['separate']:.3f} | {med['fused'] / med['one array']:.3f} |")


def mpi_version() -> str:
    from mpi4py import MPI

    return MPI.Get_library_version().splitlines()[0].strip()


if __name__ == "__main__":
    main()
