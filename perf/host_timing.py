# SPDX-License-Identifier: Apache-2.0
"""The host timing loops of the perf/ scripts (variants interleaved, slowest rank, medians; one
process's median per call), and the cross-memory calls the probes time."""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Callable


def interleaved_medians_ms(variants: dict[str, Callable[[], object]], comm, *, iters: int) -> dict[str, float]:
    """Median ms per call of each variant over ``iters`` rounds (each round runs every variant once,
    in order, ranks starting together); each call's time is the slowest rank's. One warm-up call each."""
    for fn in variants.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(iters):
        for k, fn in variants.items():
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            t = time.perf_counter() - t0
            times[k].append(max(comm.allgather(t)))
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def per_call_us(fn: Callable[[], object], calls: int, *, runs: int = 5, warm: int | None = None) -> float:
    """Median µs per call of ``fn`` on this process alone: ``runs`` timed loops of ``calls`` calls,
    after ``warm`` untimed calls (default ``calls``)."""
    for _ in range(calls if warm is None else warm):
        fn()
    per = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(per)


def cross_memory_calls():
    """``(process_vm_writev, process_vm_readv)`` from libc, typed, after this process has let any
    other process of its user copy from and into it (``PR_SET_PTRACER_ANY``, as Open MPI's CMA does)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    # PR_SET_PTRACER, PR_SET_PTRACER_ANY; EINVAL where Yama is off, where no consent is needed
    libc.prctl(0x59616D61, ctypes.c_ulong(-1).value, 0, 0, 0)
    calls = libc.process_vm_writev, libc.process_vm_readv
    for call in calls:
        call.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
        call.restype = ctypes.c_ssize_t
    return calls
