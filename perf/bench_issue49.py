# SPDX-License-Identifier: Apache-2.0
"""What the checks of issue #49 cost, and what host symmetric memory holds.

    python perf/bench_issue49.py copies                   # one process
    mpiexec -n 2 python perf/bench_issue49.py calls --iters 31
    mpiexec -n 3 python perf/bench_issue49.py descriptors --count 1000

``copies``: a direct call (push's cross-memory route, 32 KiB - 1 MiB per rank) now copies a rank's
own part into its private out= through the kernel (``process_vm_writev`` to itself, the route's
``_DirectCopy``), so that an out= mapped read-only behind numpy's back is refused (EFAULT: one
CommunicationError on every rank) instead of killing the rank. Side by side, medians after warm-up,
per copy of the local part: numpy's ``copyto`` (before) and the kernel (now), for contiguous parts
and for parts made of 4 KiB runs; and the read of a numpy array's data pointer that each call now
makes in Python for its operand (the compiled replays compare it in C at no measurable cost).

``calls``: whole ``execute(out=)`` calls on that route (x-slabs -> y-slabs of float64, 64 KiB to 1 MiB
per rank, a private out= laid out like the result, replayed in C), objects planned with the local part
through the kernel (``push.DIRECT_LOCAL``, now) and by numpy (before), interleaved, medians of the
slowest rank.

``descriptors``: ``--count`` live allocations of ``allocate_symmetric_memory(3, numpy)`` per rank:
the descriptors each rank holds before and after (each allocation used to hold one per rank of the
node, in every rank), the mappings, and the time per allocation (slowest rank).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from host_timing import per_call_us


def copies() -> None:
    from redist.engine.host import compiled
    from redist.engine.host.push.cross_memory import _cross_memory, _DirectCopy

    writev = _cross_memory()[0]
    print(f"{'local part':>12} {'runs':>6} {'numpy us':>10} {'kernel us':>10} {'ratio':>6}")
    for kib in (16, 64, 256, 1024):
        n = kib * 1024 // 8
        for run in (n * 8, 4096):  # one contiguous run, or runs of 4 KiB every 8 KiB (a strided part)
            nruns = n * 8 // run
            src = np.random.rand(2 * n)
            dst = np.zeros(2 * n)
            offs = np.arange(nruns, dtype=np.uint64) * np.uint64(2 * run)
            copy = _DirectCopy(np.zeros(nruns, np.intp), offs, offs, np.full(nruns, run, np.uint64))
            header = np.array([dst.ctypes.data], np.uint64)
            copy.connect(writev, 0, os.getpid(), header)
            refused = np.zeros(2, np.intc)
            views = [(dst.view(np.uint8)[o:o + run], src.view(np.uint8)[o:o + run]) for o in offs.astype(int)]

            def by_numpy(views=views):
                for d, s in views:
                    np.copyto(d, s, casting="no")

            def by_kernel(copy=copy, ptrs=[src.ctypes.data], refused=refused):
                copy.move(ptrs, refused)

            reps = max(20, 20000 // kib)
            a, b = per_call_us(by_numpy, reps, runs=7), per_call_us(by_kernel, reps, runs=7)
            by_kernel()
            assert not refused[0] and np.array_equal(dst.view(np.uint8)[:run], src.view(np.uint8)[:run])
            print(f"{kib:>9} KiB {nruns:>6} {a:>10.2f} {b:>10.2f} {b / a:>6.2f}")
    a = np.zeros(10)
    print(f"data pointer of a numpy operand (Python path, per call): {per_call_us(lambda: compiled.data_pointer(a), 20000, runs=7) * 1e3:.0f} ns")


def calls(iters: int) -> None:
    import redist
    from host_timing import interleaved_medians_ms
    from redist import Redistribute, Slab
    from redist.engine.host.push import tuning as push  # push's route knobs

    redist.initialize()
    comm = redist.get_context().process_group.mpi_comm
    P, rank = comm.Get_size(), comm.Get_rank()
    for kib in (64, 256, 1024):
        shape = (8 * P, 8 * P, kib * 1024 // (64 * 8))  # kib KiB per rank
        a = np.random.rand(*Slab.X.shape(rank, shape, nranks=P))
        variants, objects = {}, []
        for name, local in (("numpy local part", False), ("kernel local part", True)):
            push.DIRECT_LOCAL = local
            r = Redistribute(a, Slab.X, Slab.Y, options={"host_method": "push"})
            r.plan()
            out = np.empty_like(r.execute())
            variants[name] = lambda r=r, out=out: r.execute(out=out)
            objects.append(r)
        if rank == 0 and "copied straight into it" not in objects[0].plan_description:
            print("not the cross-memory route:", objects[0].plan_description)
        got = interleaved_medians_ms(variants, comm, iters=iters)
        if rank == 0:
            base = got["numpy local part"]
            print(f"P={P} {kib} KiB per rank: " + ", ".join(f"{k} {v * 1e3:.1f} us ({v / base:.2f}x)"
                                                          for k, v in got.items()))
        for r in objects:
            r.free()
    redist.finalize()


def descriptors(count: int) -> None:
    import redist

    redist.initialize()
    comm = redist.get_context().process_group.mpi_comm

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def maps() -> int:
        with open("/proc/self/maps") as f:
            return sum("/dev/shm/redist-" in line for line in f)

    comm.Barrier()
    before, mapped = fds(), maps()
    t0 = time.perf_counter()
    arrays = [redist.allocate_symmetric_memory(3, np) for _ in range(count)]
    per = (time.perf_counter() - t0) / count * 1e6
    after, mapped_after = fds(), maps()
    every = comm.gather((before, after, mapped_after - mapped, per))
    redist.free_symmetric_memory(*arrays)
    if comm.Get_rank() == 0:
        for r, (b, a, m, us) in enumerate(every):
            print(f"rank {r}: {count} live allocations: descriptors {b} -> {a}, {m} mappings, {us:.0f} us per allocation")
    redist.finalize()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("copies", "calls", "descriptors"))
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--iters", type=int, default=31)
    args = ap.parse_args()
    if args.what == "copies":
        copies()
    elif args.what == "calls":
        calls(args.iters)
    else:
        descriptors(args.count)


if __name__ == "__main__":
    main()
