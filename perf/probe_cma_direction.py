# SPDX-License-Identifier: Apache-2.0
"""Which rank should make a cross-memory copy: the sender (store) or the receiver (read)?

    mpiexec -n 2 python perf/probe_cma_direction.py [RUN_BYTES ...]

Each rank moves 32 MiB to its peer whose one side is contiguous and whose other side is runs of
RUN_BYTES with a gap of the same size after each: ``process_vm_writev`` by the sender with the short
runs on the remote side (the destination), ``process_vm_readv`` by the receiver with the long side
remote (the operand), and a numpy store of the same runs into shared memory (push's engine-owned
route), in calls of at most 1024 iovecs; then both calls with both sides contiguous. Medians of 12
after 3, barrier before each, the slowest rank. The kernel pins the remote side's pages once per
remote iovec: perf/history/issue22.md, "Reads by the receiver where the destination's runs are short".
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

TOTAL = 32 << 20
IOV_MAX = 1024


def main() -> None:
    comm = MPI.COMM_WORLD
    if comm.size != 2:
        raise SystemExit("run it on 2 ranks")
    writev, readv = cross_memory_calls()

    def timed(fn) -> float:
        times = []
        for _ in range(15):
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return comm.allreduce(float(np.median(times[3:])), op=MPI.MAX) * 1e3

    src = np.arange(TOTAL // 8, dtype=np.float64)
    for run in [int(a) for a in sys.argv[1:]] or [256, 1024, 4096]:
        runs = TOTAL // run
        dst = np.zeros((runs, 2 * run // 8))
        pid, peer_src, peer_dst = comm.allgather((os.getpid(), src.ctypes.data, dst.ctypes.data))[1 - comm.rank]

        def iovecs(base: int) -> np.ndarray:
            v = np.zeros((runs, 2), np.uint64)
            v[:, 0] = base + np.arange(runs, dtype=np.uint64) * np.uint64(2 * run)
            v[:, 1] = run
            return v

        def calls(call, short: np.ndarray, long_base: int, short_remote: bool) -> None:
            moved = 0
            for first in range(0, runs, IOV_MAX):
                k = min(IOV_MAX, runs - first)
                stretch = (ctypes.c_uint64 * 2)(long_base + first * run, k * run)
                part = short[first:].ctypes.data
                moved += (call(pid, stretch, 1, part, k, 0) if short_remote else call(pid, part, k, stretch, 1, 0))
            assert moved == TOTAL, moved

        their_runs, my_runs = iovecs(peer_dst), iovecs(dst.ctypes.data)
        store = timed(lambda: calls(writev, their_runs, src.ctypes.data, True))
        read = timed(lambda: calls(readv, my_runs, peer_src, False))
        shared = np.frombuffer(mmap.mmap(-1, dst.nbytes), np.float64).reshape(dst.shape)[:, : run // 8]
        numpy = timed(lambda: np.copyto(shared, src.reshape(runs, run // 8)))
        if comm.rank == 0:
            print(f"runs of {run} B: writev (short runs remote) {store:.2f} ms, readv (long side remote) "
                  f"{read:.2f} ms, numpy into shared memory {numpy:.2f} ms", flush=True)
    flat = np.zeros_like(src)
    pid, peer_src, peer_dst = comm.allgather((os.getpid(), src.ctypes.data, flat.ctypes.data))[1 - comm.rank]
    mine_src, mine_dst = (ctypes.c_uint64 * 2)(src.ctypes.data, TOTAL), (ctypes.c_uint64 * 2)(flat.ctypes.data, TOTAL)
    store = timed(lambda: writev(pid, mine_src, 1, (ctypes.c_uint64 * 2)(peer_dst, TOTAL), 1, 0))
    read = timed(lambda: readv(pid, mine_dst, 1, (ctypes.c_uint64 * 2)(peer_src, TOTAL), 1, 0))
    if comm.rank == 0:
        print(f"both sides contiguous: writev {store:.2f} ms, readv {read:.2f} ms", flush=True)


if __name__ == "__main__":
    main()
