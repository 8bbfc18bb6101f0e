# SPDX-License-Identifier: Apache-2.0
"""Lowering a plan to the CUDA backend (collective): transports, kernels, the executable.

:func:`lower` agrees on the job-wide reachability matrix (which pairs can load/store each
other's symmetric memory), builds this rank's launch list (:mod:`.launch_list`, pure), compiles
and loads its kernel families, and returns a :class:`~.executable.CudaExecutable` whose graph
is captured on the first execute. Every step that can fail on some ranks only is agreed
(:mod:`redist.engine.collective`) before the next collective one, so every rank raises the same
error and none is left waiting in an NVSHMEM allocation or barrier.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from .. import collective
from ..backend import SIGNALS, VECTOR_BYTES
from ..errors import InvalidValueError, NotInitializedError, NotSupportedError
from ..plan import FusedPlan, Plan
from ..tune import Candidate
from .executable import CudaExecutable
from .launch_list import BASE_ALIGN, TRANSPORTS, build_launch_list

if TYPE_CHECKING:
    from ..backend import Context, LowerOptions

__all__ = ["candidates", "lower"]


def candidates(plan: Plan | FusedPlan, ctx: Context, options: LowerOptions) -> list[Candidate]:
    """The routes ``tune`` times (engine/tune.py): transport x signal x kernel variant (the widest
    vector the copy kernels use), the heuristic's pick (``options``' transport and signal, 16-byte
    vectors) first. Transports: "auto" (push where reachable) and "put", or only the one given;
    "barrier" only where it can run (not with several ranks on one GPU). The same on every rank."""
    transports = ["auto", "put"] if options.transport == "auto" else [options.transport]
    rt = ctx.cuda
    shared = rt is not None and rt.shared_gpu and rt.nranks > 1
    signals = [options.signal] + [s for s in SIGNALS if s != options.signal and not (shared and s == "barrier")]
    return [Candidate(f"{t}/{s}/v{v}", (("transport", t), ("signal", s), ("vector_bytes", v)))
            for t in transports for s in signals for v in VECTOR_BYTES]


def lower(plan: Plan | FusedPlan, ctx: Context, options: LowerOptions) -> CudaExecutable:
    """Collective: lower ``plan`` onto the CUDA runtime of ``ctx`` (``ctx.cuda``).

    ``options.transport``: "auto" (push to every load/store-reachable peer, put to the others),
    "push" (all pushes; NotSupportedError if a pair is not reachable) or "put".
    """
    rt = ctx.cuda
    if rt is None:
        raise NotInitializedError(
            "NVSHMEM is not initialised: call redist.initialize() with a GPU (redist.engine.cuda.runtime.start)"
        )
    t0 = time.perf_counter()
    comm = rt.comm
    rt.reap()
    transport = options.transport
    with collective.attempt(comm) as step:
        rt.check_alive()
        if transport not in TRANSPORTS:
            raise InvalidValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
        if options.signal == "barrier" and rt.shared_gpu and rt.nranks > 1:
            raise NotSupportedError(
                'signal="barrier" cannot run with several ranks on one GPU (REDIST_SHARED_GPU=1): NVSHMEM turns '
                'its on-stream barriers into CPU spins there, which a CUDA graph cannot capture; use signal="epoch"'
            )
        if plan.nranks != rt.nranks or plan.rank != rt.rank:
            raise InvalidValueError(f"plan is for rank {plan.rank}/{plan.nranks}, runtime is rank {rt.rank}/{rt.nranks}")
        step.payload = [d == rt.rank or rt.peer_ptr(rt.anchor, d) != 0 for d in range(rt.nranks)]
    reach = np.array(step.gathered, dtype=bool)
    funcs = {}
    with collective.attempt(comm):
        ll = build_launch_list(plan, reach, transport=transport, signal=options.signal, sm_count=rt.sm_count,
                               base_align=min(BASE_ALIGN, options.vector_bytes))
        tc = time.perf_counter()
        for k in ll.kernels:
            funcs[k.name] = rt.functions(*k.family, k.kind)
        compile_ms = (time.perf_counter() - tc) * 1e3
    exe = CudaExecutable(plan, rt, ll, funcs, serial=ctx.next_tag(), blocking=options.blocking, logger=options.logger,
                         relower=(reach, transport, options.signal, min(BASE_ALIGN, options.vector_bytes)))
    if options.logger is not None:
        options.logger.info(
            "cuda lower: %.1f ms (kernels %.1f ms); %s",
            (time.perf_counter() - t0) * 1e3,
            compile_ms,
            ll.describe().replace("\n", "\n    "),
        )
    return exe
