# SPDX-License-Identifier: Apache-2.0
"""Can the ranks of this node read each other's memory with Linux cross-memory attach?

    mpiexec -n 2 python perf/probe_cma.py [--mib 8]

Each of two ranks reads the other's private numpy array with one ``process_vm_readv`` call (a
single copy, no shared memory, no MPI transport) and prints the time and whether the data
arrived. A feasibility probe for push's ``out=`` (perf/history/issue22.md, "Where push's out= lands"):
it fails with EPERM under Yama ``ptrace_scope`` >= 1 or a seccomp filter that blocks the call.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import time

import numpy as np
from mpi4py import MPI


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=8, help="bytes to read, in MiB (default 8)")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    if comm.size != 2:
        raise SystemExit("run it on 2 ranks")
    libc = ctypes.CDLL(None, use_errno=True)
    nbytes = args.mib << 20
    mine = np.full(nbytes // 8, float(comm.rank + 1))
    pid, addr = comm.allgather((os.getpid(), mine.ctypes.data))[1 - comm.rank]
    dst = np.empty_like(mine)  # not touched before the first read
    for attempt in ("first (destination untouched)", "second"):
        local, remote = IoVec(dst.ctypes.data, nbytes), IoVec(addr, nbytes)
        comm.Barrier()
        t0 = time.perf_counter()
        got = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        elapsed = time.perf_counter() - t0
        err = ctypes.get_errno() if got < 0 else 0
        right = got == nbytes and bool((dst == float(2 - comm.rank)).all())
        print(f"rank {comm.rank}: {attempt}: process_vm_readv {got} B in {elapsed * 1e3:.3f} ms"
              f"{', ' + os.strerror(err) if err else ''}; data {'right' if right else 'WRONG'}", flush=True)


if __name__ == "__main__":
    main()
