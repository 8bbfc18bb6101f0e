# SPDX-License-Identifier: Apache-2.0
"""The host exchange with and without ``out=``: the engine-owned result vs the user's own arrays.

    mpiexec -n P python perf/bench_out.py [--sizes 32 256] [--reps 15] [--methods auto hybrid]
                                          [--dtype float64] [--read] [--between poison]
                                          [--json FILE]

Slab.X -> Slab.Y of an N^3 array through the public API, per host method, side by side:

* ``result``  -- ``execute()``: the engine-owned result (push: peers store into it)
* ``out=``    -- ``execute(out=...)`` alternating between two arrays of the caller (a double-
                 buffered time loop)
* ``out= (one array)`` -- ``execute(out=...)`` into the same array every call: one destination, as
                 the result has (where two arrays no longer fit in the caches, the difference
                 between the two ``out=`` rows is the double buffer's, not the exchange's)
* ``copy``    -- the floor of a local exchange: one numpy copy of this rank's output box
* with ``--read``, also ``result, read`` and ``out=, read``: each call followed by what a time loop
  does next, reading what arrived (one numpy copy of it into a scratch array). A result stored by
  a peer is still in that peer's cache; an out= the receiver copied into is in its own.

``--methods`` takes host methods, ``push-messages``: push with the data of out= calls sent as
messages whatever the size (``LANDING_MAX`` -1 and ``DIRECT`` off while it is planned), and
``push-direct``: stored straight into ``out=`` by the peers whatever the size and MPI
(``LANDING_MAX`` -1, ``DIRECT`` on; where the kernel allows it), ``push-landing``: below
``LANDING_MAX`` every private ``out=`` lands (``DIRECT_SMALL`` off: the route before the small
cross-memory copies); any method with ``-symmetric``
appended (``push-symmetric``, ``hybrid-symmetric``): the two out= arrays are in host symmetric memory
(``redist.allocate_symmetric_memory(shape, numpy)``), where push's peers store straight into them.
``--between`` says how each call starts: ``loop`` (the default: calls back to back, one timing
for the whole run of them, caches warm), or each call timed alone between a barrier and the clock
(the mean of the slowest rank's time per call) after what each rank does untimed before it:
``nothing``, ``poison`` (write -1 into the call's destination: it is dirty in its owner's cache, as
after a solver's in-place work on it) or ``evict`` (poison, then write 32 MiB of a buffer of its
own: its private caches hold none of the exchange's data).

Every variant is checked against the expected result first. A repetition times every variant
once, interleaved (calls per timing chosen so that one timing lasts >= 20 ms; barrier before,
the slowest rank counts); the table gives the median over ``--reps`` repetitions in ms per call
and ``out=/result``. Run it with another checkout on ``PYTHONPATH`` to compare versions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
from mpi4py import MPI

import redist
from redist import Redistribute, Slab

try:
    from redist.engine.host.push import tuning as push  # push's route knobs
except ImportError:  # an older checkout: the knobs in engine/host/push.py, or no push at all
    try:
        from redist.engine.host import push
    except ImportError:
        push = None


def plan_with(r, method: str) -> None:
    """``r.plan()``; "push-messages" / "push-direct": with push's landing of out= calls turned off,
    and its direct stores off / on; "push-landing": with its small cross-memory copies off."""
    if push is None or not hasattr(push, "LANDING_MAX"):  # an older checkout: nothing to turn off
        r.plan()
        return
    landing, direct, small = push.LANDING_MAX, getattr(push, "DIRECT", None), getattr(push, "DIRECT_SMALL", None)
    if method in ("push-messages", "push-direct"):
        push.LANDING_MAX = -1  # nothing lands, not even an exchange that receives nothing
        push.DIRECT = method == "push-direct"
    if method == "push-landing":
        push.DIRECT_SMALL = False
    try:
        r.plan()
    finally:
        push.LANDING_MAX, push.DIRECT = landing, direct
        if small is not None:
            push.DIRECT_SMALL = small


def timed(fn, comm, calls: int, before=None) -> float:
    """Seconds per call of the slowest rank. Without ``before``, ``calls`` calls back to back; with it,
    each call alone after ``before()`` and a barrier, its slowest rank's time taken per call."""
    if before is None:
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return max(comm.allgather((time.perf_counter() - t0) / calls))
    each = np.empty(calls)
    for i in range(calls):
        before()
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        each[i] = time.perf_counter() - t0
    comm.Allreduce(MPI.IN_PLACE, each, op=MPI.MAX)
    return float(each.mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--methods", nargs="+", default=["auto", "hybrid"])
    ap.add_argument("--dtype", default="float64")
    ap.add_argument(
        "--read", action="store_true", help="also time each call followed by reading what arrived"
    )
    ap.add_argument(
        "--between",
        choices=("loop", "nothing", "poison", "evict"),
        default="loop",
        help="what each rank does, untimed, before every call",
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, P = comm.rank, comm.size
    rows = []
    for n in args.sizes:
        shape = (n, n, n)
        ib, ob = Slab.X.box(rank, shape, nranks=P), Slab.Y.box(rank, shape, nranks=P)
        g = np.arange(np.prod(shape), dtype=np.int64).reshape(shape).astype(args.dtype)
        a = np.ascontiguousarray(g[tuple(slice(lo, hi) for lo, hi in zip(*ib))])
        want = g[tuple(slice(lo, hi) for lo, hi in zip(*ob))]
        private = [np.empty(want.shape, args.dtype), np.empty(want.shape, args.dtype)]
        symmetric = ([redist.allocate_symmetric_memory(want.shape, np, dtype=args.dtype, make_symmetric=True)
                      for _ in range(2)] if any(m.endswith("-symmetric") for m in args.methods) else [])
        scratch, read = np.empty(want.shape, args.dtype), np.empty(want.shape, args.dtype)
        variants = {}
        destinations = {}  # per variant: the array its next call writes
        junk = np.empty(32 << 20, np.uint8) if args.between == "evict" else None
        objs = []
        for m in args.methods:
            outs = symmetric if m.endswith("-symmetric") else private
            r = Redistribute(a, Slab.X, Slab.Y, options={"host_method": m.split("-")[0]})
            plan_with(r, m.removesuffix("-symmetric"))
            objs.append(r)
            method = getattr(r._exe, "method", m)
            ok = np.array_equal(r.execute(), want) and np.array_equal(r.execute(out=outs[0]), want)
            if not comm.allreduce(ok, MPI.LAND):
                raise SystemExit(f"{m}: wrong result")
            state = {"i": 0}

            def out_call(r=r, state=state, outs=outs):
                state["i"] ^= 1
                r.execute(out=outs[state["i"]])

            last = {"result": r.execute()}

            def result_call(r=r, last=last):
                last["result"] = r.execute()

            variants[f"{m} ({method}) result"] = result_call
            variants[f"{m} ({method}) out="] = out_call
            variants[f"{m} ({method}) out= (one array)"] = lambda r=r, outs=outs: r.execute(out=outs[0])
            # the result variant's destination: what its last call returned
            destinations[f"{m} ({method}) result"] = lambda last=last: last["result"]
            destinations[f"{m} ({method}) out="] = lambda state=state, outs=outs: outs[state["i"] ^ 1]
            destinations[f"{m} ({method}) out= (one array)"] = lambda outs=outs: outs[0]
            if args.read:

                def result_read(r=r, last=last):
                    last["result"] = r.execute()
                    np.copyto(read, last["result"])

                def out_read(r=r, state=state, outs=outs):
                    state["i"] ^= 1
                    np.copyto(read, r.execute(out=outs[state["i"]]))

                variants[f"{m} ({method}) result, read"] = result_read
                variants[f"{m} ({method}) out=, read"] = out_read
                destinations[f"{m} ({method}) result, read"] = destinations[f"{m} ({method}) result"]
                destinations[f"{m} ({method}) out=, read"] = destinations[f"{m} ({method}) out="]
        variants["copy"] = lambda: np.copyto(scratch, want)
        destinations["copy"] = lambda: scratch

        def before_of(k):
            if args.between == "loop":
                return None
            if args.between == "nothing":
                return lambda: None

            def before(k=k):
                destinations[k]().fill(-1)
                if junk is not None:
                    junk.fill(7)

            return before

        calls = {}
        for k, fn in variants.items():  # calls per timing: >= 20 ms
            t = timed(fn, comm, 3, before_of(k))
            calls[k] = max(1, int(comm.bcast(0.02 / max(t, 1e-7))))
        times = {k: [] for k in variants}
        for _ in range(args.reps):
            for k, fn in variants.items():
                times[k].append(timed(fn, comm, calls[k], before_of(k)))
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        for k, v in med.items():
            base = k.replace(" out= (one array)", " result").replace(" out=", " result")
            rows.append(
                {"n": n, "P": P, "variant": k, "ms": v, "vs_result": v / med[base] if base in med else None}
            )
        for r in objs:
            r.free()
        if symmetric:
            redist.free_symmetric_memory(*symmetric)
    if rank == 0:
        print(
            f"# redist {redist.__file__}: P={P}, Slab.X -> Slab.Y {args.dtype}, median of {args.reps} interleaved "
            f"repetitions, before each call: {args.between}; {MPI.Get_library_version().replace(chr(0), '').splitlines()[0].strip()}"
        )
        print("| N | variant | ms per call | / result |")
        print("|---|---|---|---|")
        for row in rows:
            ratio = "" if row["vs_result"] is None else f"{row['vs_result']:.2f}"
            print(f"| {row['n']} | {row['variant']} | {row['ms']:.4f} | {ratio} |")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
