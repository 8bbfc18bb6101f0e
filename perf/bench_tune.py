# SPDX-License-Identifier: Apache-2.0
"""Benchmark (#47): does tune="measure" pick the fastest host method, what does it cost, and how fast
is a wisdom hit?

    mpiexec -n 2 python perf/bench_tune.py [--sizes 32 64 128 256] [--layouts slab pencil]
                                           [--dtypes float64 complex128] [--iters 30] [--out]
                                           [--json out.json]

For each case (global N^3, slabs X -> Y or pencils X -> Y on a 2-D grid, float64 or complex128):

* every fixed ``host_method`` this job can run, and ``auto`` (the heuristic), timed side by side in
  one interleaved loop (perf/host_timing.py: each call's time is the slowest rank's, medians after a
  warm-up), every object planned once before the loop;
* ``tune="measure"``: what it chose, and its pick's time from the same loop, as a ratio to the best
  fixed method (target: within 3 %) and to ``auto`` (where ``auto`` is wrong, target ≥ 10 % faster);
* what measuring costs: ``plan()`` with ``tune="measure"`` over ``plan()`` with the heuristic
  (target at 64³: ≤ 30 plans' time), and ``plan()`` with a matching wisdom entry minus ``plan()``
  of the method it names, medians of :data:`REPEATS` (target ≤ 1 ms for loading the entry).

``--out``: every call goes into an ``out=`` (a numpy array per object) and ``tune_out=True``: push's
routes into ``out=`` (``push/land``, ``push/no-landing``) are rows and candidates too.

Rank 0 prints one Markdown table (paste into perf/RESULTS.md, with the machine, the MPI library
and the date); ``--json`` writes the rows too. Figures taken on a loaded machine say so.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_timing import interleaved_medians_ms  # noqa: E402

import redist  # noqa: E402
from redist import BlockNonCyclic, ProcessGrid, Redistribute, Slab  # noqa: E402
from redist.engine.host import available_methods  # noqa: E402
from redist.engine.host.push import tuning  # noqa: E402
from redist.engine.host.lowering import LAND_ALWAYS  # noqa: E402


REPEATS = 5


@contextlib.contextmanager
def landing_max(value):
    """Objects planned inside use push's landing threshold ``value`` (None: the default)."""
    saved = tuning.LANDING_MAX
    if value is not None:
        tuning.LANDING_MAX = value
    try:
        yield
    finally:
        tuning.LANDING_MAX = saved


def distributions(layout: str, P: int):
    if layout == "slab":
        return Slab.X, Slab.Y
    a = int(math.isqrt(P))
    while P % a:
        a -= 1
    return BlockNonCyclic(ProcessGrid((1, a, P // a))), BlockNonCyclic(ProcessGrid((a, 1, P // a)))


def planned(a, src, dst, options):
    """(object, plan() seconds as the slowest rank saw it)."""
    comm = redist.get_context().process_group.mpi_comm
    r = Redistribute(a, src, dst, options=options)
    comm.Barrier()
    t0 = time.perf_counter()
    r.plan()
    return r, max(comm.allgather(time.perf_counter() - t0))


def case(n: int, layout: str, dtype: str, iters: int, into_out: bool) -> dict:
    ctx = redist.get_context()
    rank, P = ctx.process_group.rank, ctx.process_group.nranks
    comm = ctx.process_group.mpi_comm
    src, dst = distributions(layout, P)
    a = np.ones(src.shape(rank, (n, n, n)), dtype=dtype)
    methods = (["push"] if P > 1 else []) + list(available_methods())
    variants = {m: {"host_method": m} for m in ["auto"] + methods}
    if into_out and P > 1:  # push's routes into out=, as tune_out's candidates name them
        variants["push/land"] = {"host_method": "push", "push_landing_max": LAND_ALWAYS}
        variants["push/no-landing"] = {"host_method": "push", "push_landing_max": -1}
    objects, plans = {}, {}
    for m, options in variants.items():
        landing = options.pop("push_landing_max", None)
        try:
            with landing_max(landing):
                objects[m], plans[m] = planned(a, src, dst, options)
        except (redist.NotSupportedError, redist.InvalidValueError):  # raised on every rank alike
            pass
    redist.forget_wisdom()
    tuned, t_measure = planned(a, src, dst, {"tune": "measure", "tune_budget": 60.0, "tune_out": into_out})
    chosen = tuned.tuning.chosen
    tuned.free()
    t_fixed, t_wisdom = [], []  # a wisdom hit against planning the chosen method directly, REPEATS times each
    for _ in range(REPEATS):
        for options, into in (({"host_method": chosen.split("/")[0]}, t_fixed),
                              ({"tune": "wisdom", "tune_out": into_out}, t_wisdom)):
            r, t = planned(a, src, dst, options)
            into.append(t)
            r.free()
    outs = {m: np.empty_like(r.execute()) for m, r in objects.items()} if into_out else {}
    calls = {m: (lambda r=r, o=outs.get(m): r.execute(out=o)) for m, r in objects.items()}
    times = interleaved_medians_ms(calls, comm, iters=iters)
    for r in objects.values():
        r.free()
    fixed = {m: t for m, t in times.items() if m != "auto"}
    best = min(fixed, key=fixed.get)
    return {"N": n, "layout": layout, "dtype": dtype, "P": P, "times_ms": times,
            "chosen": chosen, "best": best, "chosen_over_best": times[chosen] / fixed[best],
            "auto_over_chosen": times["auto"] / times[chosen], "measure_plans": t_measure / plans["auto"],
            "wisdom_ms": (statistics.median(t_wisdom) - statistics.median(t_fixed)) * 1e3,
            "plan_ms": plans["auto"] * 1e3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[32, 64, 128, 256])
    ap.add_argument("--layouts", nargs="+", default=["slab", "pencil"], choices=["slab", "pencil"])
    ap.add_argument("--dtypes", nargs="+", default=["float64", "complex128"])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--out", action="store_true", help="calls into out= (and tune_out=True)")
    ap.add_argument("--json", help="also write the rows here (rank 0)")
    args = ap.parse_args()
    redist.initialize(device_id="cpu")
    rank = redist.get_context().process_group.rank
    rows = [case(n, layout, dtype, args.iters, args.out) for n in args.sizes for layout in args.layouts for dtype in args.dtypes]
    if rank == 0:
        from mpi4py import MPI

        methods = sorted({m for row in rows for m in row["times_ms"]}, key=lambda m: (m != "auto", m))
        print(f"MPI: {MPI.Get_library_version().replace(chr(0), '').splitlines()[0].strip()}; P = {rows[0]['P']}; ms per call "
              "(median of the slowest rank)")
        print("| N | layout | dtype | " + " | ".join(methods) + " | chosen | chosen/best | auto/chosen | "
              "measure (plans) | wisdom hit (ms) |")
        print("|" + " --- |" * (len(methods) + 8))
        for row in rows:
            cells = [f"{row['times_ms'][m]:.3f}" if m in row["times_ms"] else "-" for m in methods]
            print(f"| {row['N']}³ | {row['layout']} | {row['dtype']} | " + " | ".join(cells)
                  + f" | {row['chosen']} | {row['chosen_over_best']:.3f} | {row['auto_over_chosen']:.3f} | "
                  f"{row['measure_plans']:.1f} | {row['wisdom_ms']:.3f} |")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
    redist.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
