# SPDX-License-Identifier: Apache-2.0
"""Who should copy into an ``out=`` that its owner has just written (hot in the owner's cache)?

    mpiexec -n 2 python perf/probe_hot_destination.py [--loop] [KIB ...]

Each of 2 ranks sends KIB KiB (contiguous on both sides) to the other, as in a time step: right
before every exchange each rank writes its operand (the user's compute) and its destination (the
Fortran benchmark poisons it; a solver has just transformed it in place), untimed. Then, timed
between two barriers:

* ``writev``: the sender stores into the peer's ``out=`` (``process_vm_writev``);
* ``readv``: the receiver reads the peer's operand into its own ``out=`` (``process_vm_readv``);
* ``landing``: the sender stores into a shared slot of the receiver (numpy), barrier, the
  receiver copies the slot into its ``out=`` (push's route below ``LANDING_MAX``);
* ``owned``: the sender stores into the receiver's shared result (numpy; push's engine-owned
  result, no ``out=``).

Per route two columns: ``bare``, and ``+use``, which adds the owner's first pass over its
destination after the exchange (a sum: what the next step of the user's loop does first). The
destination of ``owned`` is the rank's shared result, written (poisoned) by its owner like the
others. Medians of 40 after 5, the slowest rank, microseconds.

``--loop``: nothing is written between the exchanges, and ``bare`` times 45 exchanges with no use
between them (a tight loop of exchanges, as ``perf/bench_out.py`` times them by default), ``+use``
45 more, each followed by its use: ``owned``'s stores then find the peer's result lines
still in the sender's own cache, where the previous exchange left them, and no line crosses cores;
every route into private memory must bring its lines over. This gives the floor of the ratio
``out=`` / engine-owned result in such a loop, before any library cost.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import time

import numpy as np
from host_timing import cross_memory_calls
from mpi4py import MPI


def main() -> None:
    comm = MPI.COMM_WORLD
    if comm.size != 2:
        raise SystemExit("run it on 2 ranks")
    writev, readv = cross_memory_calls()
    peer = 1 - comm.rank
    loop = "--loop" in sys.argv[1:]
    sizes = [int(a) for a in sys.argv[1:] if a != "--loop"] or [64, 256, 512, 1024, 2048, 8192]
    if comm.rank == 0:
        print(
            "a tight loop: nothing written between exchanges"
            if loop
            else "the owner writes its operand and destination before each exchange",
            flush=True,
        )
        print("KiB  " + "  ".join(f"{m:>14}" for m in ("writev", "readv", "landing", "owned")), flush=True)
        print("     " + "  ".join(f"{'bare':>6} {'+use':>7}" for _ in range(4)), flush=True)
    for kib in sizes:
        nbytes = kib << 10
        src = np.zeros(nbytes // 8)
        dst = np.zeros(nbytes // 8)
        # one shared file per rank, mapped by both: its result (owned) and its landing slot
        name = f"/dev/shm/probe-hot-{os.getpid()}"
        with open(name, "wb+") as f:
            f.truncate(2 * nbytes)
        comm.Barrier()
        names = comm.allgather(name)
        pid, peer_src, peer_dst = comm.allgather((os.getpid(), src.ctypes.data, dst.ctypes.data))[peer]
        maps = []
        for n in names:
            with open(n, "rb+") as f:
                maps.append(mmap.mmap(f.fileno(), 2 * nbytes))
        comm.Barrier()
        os.unlink(name)
        mine = np.frombuffer(maps[comm.rank], np.float64)
        theirs = np.frombuffer(maps[peer], np.float64)
        my_slot, their_result, their_slot = mine[nbytes // 8 :], theirs[: nbytes // 8], theirs[nbytes // 8 :]
        local_src = (ctypes.c_uint64 * 2)(src.ctypes.data, nbytes)
        local_dst = (ctypes.c_uint64 * 2)(dst.ctypes.data, nbytes)
        remote_dst = (ctypes.c_uint64 * 2)(peer_dst, nbytes)
        remote_src = (ctypes.c_uint64 * 2)(peer_src, nbytes)

        def do_writev() -> None:
            if writev(pid, local_src, 1, remote_dst, 1, 0) != nbytes:
                raise OSError(ctypes.get_errno(), "process_vm_writev")

        def do_readv() -> None:
            if readv(pid, local_dst, 1, remote_src, 1, 0) != nbytes:
                raise OSError(ctypes.get_errno(), "process_vm_readv")

        def do_landing() -> None:
            np.copyto(their_slot, src)
            comm.Barrier()
            np.copyto(dst, my_slot)

        def do_owned() -> None:
            np.copyto(their_result, src)

        my_result = mine[: nbytes // 8]
        row = []
        for fn in (do_writev, do_readv, do_landing, do_owned):
            into = my_result if fn is do_owned else dst  # where this rank's data arrives
            bare, used = [], []
            for rep in range(90 if loop else 45):
                use = not loop or rep >= 45  # a tight loop: 45 exchanges alone, then 45 each with its use
                if not loop or rep in (0, 45):
                    src[:] = rep  # the user's compute writes its operand
                    into[:] = -1.0  # and its destination
                comm.Barrier()
                t0 = time.perf_counter()
                fn()
                comm.Barrier()
                t1 = time.perf_counter()
                if use:
                    into.sum()
                t2 = time.perf_counter()
                if not loop or not use:
                    bare.append(t1 - t0)
                if use:
                    used.append(t2 - t0)
            row.append(tuple(comm.allreduce(float(np.median(x[5:])) * 1e6, op=MPI.MAX) for x in (bare, used)))
        if comm.rank == 0:
            print(f"{kib:<5}" + "  ".join(f"{b:6.0f} {u:7.0f}" for b, u in row), flush=True)


if __name__ == "__main__":
    main()
