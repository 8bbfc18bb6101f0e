# SPDX-License-Identifier: Apache-2.0
"""Lowering a plan to the MPI host backend (collective), and which methods this MPI library has."""

from __future__ import annotations

import logging
import time

from .. import collective
from ..errors import InvalidValueError, NotSupportedError
from ..plan import Plan
from .executable import AUTO_METHOD, METHODS, HostExecutable

__all__ = ["available_methods", "lower"]


def _mpi():
    from mpi4py import MPI

    return MPI


_AVAILABLE: tuple[str, ...] | None = None


def available_methods() -> tuple[str, ...]:
    """:data:`METHODS` this MPI library supports ("alltoallw" needs MPI-4 persistent collectives)."""
    global _AVAILABLE
    if _AVAILABLE is None:
        MPI = _mpi()
        try:  # probe on COMM_SELF: mpi4py raises NotImplementedError when the library lacks it
            req = MPI.COMM_SELF.Alltoallw_init([MPI.BOTTOM, [0], [0], [MPI.BYTE]], [MPI.BOTTOM, [0], [0], [MPI.BYTE]])
            req.Free()
            _AVAILABLE = METHODS
        except (NotImplementedError, MPI.Exception):
            _AVAILABLE = tuple(m for m in METHODS if m != "alltoallw")
    return _AVAILABLE


def lower(plan: Plan, ctx, options) -> HostExecutable:
    """Collective over ``ctx.comm``: lower ``plan`` for MPI with ``options.host_method``.

    Every rank must pass the same method; a bad method or a plan for another rank raises
    InvalidValueError on every rank, and a method this MPI lacks NotSupportedError.
    """
    MPI = _mpi()
    t0 = time.perf_counter()
    comm = ctx.comm
    method = options.host_method
    chosen = AUTO_METHOD if method == "auto" else method
    tag = ctx.next_tag()
    exe = None
    with collective.attempt(comm) as step:
        if chosen not in METHODS:
            raise InvalidValueError(f"host_method must be 'auto' or one of {METHODS}, got {method!r}")
        if comm.Get_size() != plan.nranks or comm.Get_rank() != plan.rank:
            raise InvalidValueError(
                f"plan is for rank {plan.rank} of {plan.nranks} but the communicator gives rank "
                f"{comm.Get_rank()} of {comm.Get_size()}"
            )
        step.payload = chosen
        if chosen not in available_methods():  # the same library on every rank: raised everywhere
            raise NotSupportedError(
                f"host method {chosen!r} needs MPI-4 persistent collectives (MPI_Alltoallw_init), which this "
                f"MPI library ({MPI.Get_library_version().splitlines()[0].strip()}) lacks; use one of "
                f"{available_methods()}"
            )
        exe = HostExecutable(plan, comm, chosen, tag, options.logger)
        if chosen == "alltoallw" and any(m.mode == "staged" for m in exe._sends):
            raise NotSupportedError(
                f"host method 'alltoallw' moves regions as MPI datatypes, which need positive strides; rank "
                f"{plan.rank}'s operand has strides {plan.in_strides} (use host_method='auto')"
            )
    if len(set(step.gathered)) > 1:
        raise InvalidValueError(f"ranks disagree on the host method: {step.gathered}")
    logger = options.logger
    if logger is not None and logger.isEnabledFor(logging.INFO):
        nstaged = sum(m.mode == "staged" for m in exe._sends)
        logger.info(
            "redist host: rank %d/%d lowered plan %s with method=%s in %.3f ms; send bytes per peer %s; "
            "recv bytes per peer %s; local %d B; %d of %d send(s) staged",
            plan.rank, plan.nranks, plan.key, chosen, (time.perf_counter() - t0) * 1e3, plan.send_bytes,
            plan.recv_bytes, plan.local.nbytes if plan.local is not None else 0, nstaged, len(exe._sends),
        )
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s", exe.describe())
    return exe
