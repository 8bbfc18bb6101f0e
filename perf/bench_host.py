# SPDX-License-Identifier: Apache-2.0
"""Benchmark: redist's MPI host backend vs a hand-written mpi4py Alltoallw (what mpi4py-fft does).

    mpiexec -n 2 python perf/bench_host.py [--sizes 128 256] [--iters 40] [--warmup 5]
                                           [--directions XY YX] [--no-lowercase]

For each cube size N, a complex128 N^3 array goes Slab.X -> Slab.Y (and back with YX). Rows:

* ``redist <method>``: ``redist.engine.host`` executables (plan once, then ``execute()``), one per
  method (``datatype`` is what ``auto`` picks);
* ``baseline Alltoallw+subarray``: one ``comm.Alltoallw`` call with per-peer
  ``Create_subarray`` datatypes, counts 1, displacements 0 (mpi4py-fft's ``Pencil.transfer``);
* ``mpi4py lowercase alltoall``: the pickle-based lowercase call on packed copies (for scale).

Every variant is checked against the expected result first. Timing: iterations interleave the
variants; before each one ``comm.Barrier()``, then ``MPI.Wtime()`` around the call; the time of an
iteration is the max over ranks; the table shows the median (and min) over iterations. ``speedup``
is baseline median / variant median (>= 1.0: at least as fast as the baseline).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys

import numpy as np
from mpi4py import MPI
from redist import Slab
from redist._operands import wrap
from redist.engine.backend import Context, LowerOptions
from redist.engine.host import available_methods, lower
from redist.engine.plan import make_plan

METHODS = available_methods()  # "alltoallw" needs MPI-4 persistent collectives


def slab_box(axis, rank, shape, P):
    return Slab(axis).box(rank, shape, nranks=P).as_tuple()


def sl(box):
    return tuple(slice(l, h) for l, h in zip(*box))


def local_values(box, gshape, dtype):
    """Element value = global linear index, for the elements of ``box``."""
    lo, hi = box
    idx = np.zeros(tuple(h - l for l, h in zip(lo, hi)), dtype=np.int64)
    stride = 1
    for d in range(len(gshape) - 1, -1, -1):
        shp = [1] * len(gshape)
        shp[d] = hi[d] - lo[d]
        idx += (np.arange(lo[d], hi[d], dtype=np.int64) * stride).reshape(shp)
        stride *= gshape[d]
    return idx.astype(dtype)


def subarray_types(comm, base_dtype, local_shape, axis, boxes_other, my_box):
    """One subarray datatype per peer over ``local_shape`` (mpi4py-fft style)."""
    types = []
    for b in boxes_other:
        lo = [max(a, c) for a, c in zip(b[0], my_box[0])]
        hi = [min(a, c) for a, c in zip(b[1], my_box[1])]
        sizes = [max(0, h - l) for l, h in zip(lo, hi)]
        starts = [l - m for l, m in zip(lo, my_box[0])]
        if any(s == 0 for s in sizes):
            types.append(base_dtype.Create_contiguous(0).Commit())
        else:
            types.append(base_dtype.Create_subarray(list(local_shape), sizes, starts).Commit())
    return types


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--directions", nargs="+", default=["XY", "YX"], choices=["XY", "YX"])
    ap.add_argument("--no-lowercase", action="store_true", help="skip the (slow) pickle-based lowercase alltoall row")
    args = ap.parse_args()

    comm = MPI.COMM_WORLD
    ctx = Context(comm.Dup())
    rank, P = comm.rank, comm.size
    dtype = np.complex128
    T = MPI.DOUBLE_COMPLEX
    if rank == 0:
        print(f"# redist host backend benchmark: {P} rank(s), complex128, median of {args.iters} iterations "
              f"after {args.warmup} warm-up")
        print(f"# {MPI.Get_library_version().splitlines()[0].strip()}; mpi4py {sys.modules['mpi4py'].__version__}; "
              f"numpy {np.__version__}; python {platform.python_version()}; {os.cpu_count()} CPU(s) "
              f"{platform.machine()}")
        print(f"{'N':>5} {'dir':>4} {'variant':<30} {'median ms':>10} {'min ms':>9} {'GB/s':>7} {'speedup':>8}")
    all_ok = True
    axes = {"X": 0, "Y": 1}
    for N in args.sizes:
        g = (N, N, N)
        for direction in args.directions:
            a_in, a_out = axes[direction[0]], axes[direction[1]]
            ib = [slab_box(a_in, r, g, P) for r in range(P)]
            ob = [slab_box(a_out, r, g, P) for r in range(P)]
            a = local_values(ib[rank], g, dtype)
            expect = local_values(ob[rank], g, dtype)
            plan = make_plan(rank, ib, ob, itemsize=16)
            variants = []  # (name, callable, output array or None)
            exes = []
            for m in METHODS:
                out = np.empty(plan.out_shape, dtype)
                exe = lower(plan, ctx, LowerOptions(host_method=m))
                exe.bind_input(wrap(a).buffer)
                exe.bind_output(wrap(out).buffer)
                exes.append(exe)
                variants.append((f"redist {m}" + (" (auto)" if m == METHODS[0] else ""), exe.execute, out))
            # hand-written baseline: one Alltoallw with subarray types (counts 1, displacements 0)
            bout = np.empty(plan.out_shape, dtype)
            stypes = subarray_types(comm, T, a.shape, a_out, ob, ib[rank])
            rtypes = subarray_types(comm, T, bout.shape, a_in, ib, ob[rank])
            ones, zeros = [1] * P, [0] * P

            def baseline(a=a, bout=bout, stypes=stypes, rtypes=rtypes, ones=ones, zeros=zeros):
                comm.Alltoallw([a, ones, zeros, stypes], [bout, ones, zeros, rtypes])

            variants.append(("baseline Alltoallw+subarray", baseline, bout))
            if not args.no_lowercase:
                lout = np.empty(plan.out_shape, dtype)

                def lowercase(a=a, lout=lout, ib=ib, ob=ob):
                    parts = [np.ascontiguousarray(a[sl(_rel(ob[p], ib[rank]))]) for p in range(P)]
                    got = comm.alltoall(parts)
                    for p in range(P):
                        lout[sl(_rel(ib[p], ob[rank]))] = got[p]

                variants.append(("mpi4py lowercase alltoall", lowercase, lout))
            # correctness first
            ok = True
            for name, fn, out in variants:
                out[...] = 0
                fn()
                if not np.array_equal(out, expect):
                    ok = False
                    print(f"rank {rank}: {name} gives a wrong result for N={N} {direction}", flush=True)
            ok = comm.allreduce(ok, op=MPI.LAND)
            all_ok &= ok
            times = np.zeros((len(variants), args.iters))
            lowercase_iters = max(3, args.iters // 8)
            for it in range(-args.warmup, args.iters):
                for k, (name, fn, _) in enumerate(variants):
                    if name.startswith("mpi4py lowercase") and it >= lowercase_iters:
                        continue
                    comm.Barrier()
                    t0 = MPI.Wtime()
                    fn()
                    t = MPI.Wtime() - t0
                    if it >= 0:
                        times[k, it] = t
            comm.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)
            med = []
            for k, (name, _, _) in enumerate(variants):
                n = lowercase_iters if name.startswith("mpi4py lowercase") else args.iters
                med.append((float(np.median(times[k, :n])), float(np.min(times[k, :n]))))
            base = med[len(METHODS)][0]
            if rank == 0:
                gbytes = math.prod(g) * 16 / 1e9
                for (name, _, _), (m, mn) in zip(variants, med):
                    print(f"{N:>5} {direction:>4} {name:<30} {m * 1e3:>10.3f} {mn * 1e3:>9.3f} {gbytes / m:>7.2f} "
                          f"{base / m:>7.2f}x", flush=True)
            for e in exes:
                e.free()
            for t in stypes + rtypes:
                t.Free()
            del variants, a, expect
    if rank == 0:
        print("results verified" if all_ok else "SOME RESULTS WRONG")
        if all_ok:
            print("ALL OK")
    sys.exit(0 if all_ok else 1)


def _rel(box, mine):
    """``box ∩ mine`` in coordinates relative to ``mine``'s lower corner (empty -> zero slices)."""
    lo = [max(a, c) for a, c in zip(box[0], mine[0])]
    hi = [max(l, min(a, c)) for l, a, c in zip(lo, box[1], mine[1])]
    return (tuple(l - m for l, m in zip(lo, mine[0])), tuple(h - m for h, m in zip(hi, mine[0])))


if __name__ == "__main__":
    main()
