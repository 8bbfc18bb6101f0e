# SPDX-License-Identifier: Apache-2.0
"""Lowering a plan to the MPI host backend (collective), and which methods this MPI library has."""

from __future__ import annotations

import logging
import time
from types import ModuleType
from typing import TYPE_CHECKING

from .. import collective
from ..errors import InvalidValueError, NotSupportedError
from ..plan import FusedPlan, Plan
from ..tune import Candidate
from .executable import AUTO_METHOD, METHODS, HostExecutable
from .push import PushExecutable, push_problem

if TYPE_CHECKING:
    from ..backend import Context, LowerOptions

__all__ = ["available_methods", "candidates", "lower"]

#: push_landing_max of the ``push/land`` candidate: every call with an out= lands (any size)
LAND_ALWAYS = 1 << 62


def _mpi() -> ModuleType:
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


def candidates(plan: Plan | FusedPlan, ctx: Context, options: LowerOptions) -> list[Candidate]:
    """Collective: the host methods ``tune`` times (engine/tune.py), the heuristic's pick first: "push"
    where every rank is on one node (more than one), then every message method this MPI library has;
    only the method given where ``options.host_method`` is not "auto". Timed with an ``out=``
    (``options.tune_out``), push's routes into it are candidates too: ``push/land`` (every call lands
    in shared memory then copies, or copies across memories: push's small-exchange routes at any size)
    and ``push/no-landing`` (its large-exchange routes at any size: messages, or cross-memory copies
    where push takes them), beside ``push`` (its threshold, ``push.LANDING_MAX``)."""
    if options.host_method not in ("auto", "push"):
        return [Candidate(options.host_method, (("host_method", options.host_method),))]
    if options.host_method == "push":
        methods = ["push"]
    else:
        push = push_problem(ctx.comm, plan) is None and plan.nranks > 1  # collective
        methods = (["push"] if push else []) + [AUTO_METHOD] + [m for m in available_methods() if m != AUTO_METHOD]
    routes = [Candidate(m, (("host_method", m),)) for m in methods]
    if options.tune_out and "push" in methods:
        routes[1:1] = [Candidate("push/land", (("host_method", "push"), ("push_landing_max", LAND_ALWAYS))),
                       Candidate("push/no-landing", (("host_method", "push"), ("push_landing_max", -1)))]
    return routes


def lower(plan: Plan | FusedPlan, ctx: Context, options: LowerOptions) -> HostExecutable | PushExecutable:
    """Collective over ``ctx.comm``: lower ``plan`` for MPI with ``options.host_method``.

    "auto": "push" (stores into a shared window) when every rank is on one node and there is
    more than one, else "hybrid" (messages). Every rank must pass the same method; a bad method
    or a plan for another rank raises InvalidValueError on every rank, a method this MPI or this
    job cannot serve NotSupportedError. A :class:`FusedPlan` (several fields) moves every field in
    one exchange ("alltoallw" cannot: NotSupportedError).
    """
    MPI = _mpi()
    t0 = time.perf_counter()
    comm = ctx.comm
    method = options.host_method
    why_not_push = push_problem(comm, plan)  # collective, decided from every rank's data
    if method == "auto":
        chosen = "push" if why_not_push is None and plan.nranks > 1 else AUTO_METHOD
    else:
        chosen = method
    tag = ctx.next_tag()
    nfields = plan.nfields if isinstance(plan, FusedPlan) else 1
    second = ctx.second_comm() if nfields > 1 else None  # a pair's further messages (several fields) ...
    data_tags = tuple(ctx.next_tag() for _ in range(nfields - 1))  # ... with tags no other executable uses
    messages_tag = ctx.next_tag()  # push: the messages of calls with an out=
    exe = None
    with collective.attempt(comm) as step:
        if chosen not in METHODS + ("push",):
            raise InvalidValueError(f"host_method must be 'auto', 'push' or one of {METHODS}, got {method!r}")
        if comm.Get_size() != plan.nranks or comm.Get_rank() != plan.rank:
            raise InvalidValueError(
                f"plan is for rank {plan.rank} of {plan.nranks} but the communicator gives rank "
                f"{comm.Get_rank()} of {comm.Get_size()}"
            )
        step.payload = chosen
        if chosen == "push" and why_not_push is not None:
            raise NotSupportedError(why_not_push)
        if chosen not in available_methods() + ("push",):  # the same library on every rank
            raise NotSupportedError(
                f"host method {chosen!r} needs MPI-4 persistent collectives (MPI_Alltoallw_init), which this "
                f"MPI library ({MPI.Get_library_version().splitlines()[0].strip()}) lacks; use one of "
                f"{available_methods()}"
            )
        first = plan.first if isinstance(plan, FusedPlan) else plan
        if chosen == "alltoallw" and isinstance(plan, FusedPlan) and plan.nfields > 1:
            raise NotSupportedError(
                f"host method 'alltoallw' moves one field; these {plan.nfields} fields need host_method 'auto', 'push', "
                "'hybrid', 'datatype' or 'pack' (one exchange for every field)"
            )
        if chosen != "push":
            exe = HostExecutable(plan, comm, chosen, tag, options.logger, second, data_tags)
            if chosen == "alltoallw" and any(t.more for t in first.sends + first.recvs):
                raise NotSupportedError(
                    f"host method 'alltoallw' sends one MPI datatype per pair of ranks, but rank {plan.rank} exchanges "
                    "several boxes with a peer (replicated inputs, allow_overlap): use host_method='auto'"
                )
            if chosen == "alltoallw" and any(m.mode == "staged" for m in exe._sends):
                raise NotSupportedError(
                    f"host method 'alltoallw' moves regions as MPI datatypes, which need positive strides; rank "
                    f"{plan.rank}'s operand has strides {first.in_strides} (use host_method='auto')"
                )
    if len(set(step.gathered)) > 1:
        raise InvalidValueError(f"ranks disagree on the host method: {step.gathered}")
    if chosen == "push":
        try:
            exe = PushExecutable(plan, ctx, tag, options.logger, second, data_tags, messages_tag,  # collective
                                 landing_max=options.push_landing_max)
        except NotSupportedError:  # the shared memory could not be reserved (raised on every rank)
            if method != "auto":
                raise
            chosen = AUTO_METHOD
            exe = HostExecutable(plan, comm, chosen, tag, options.logger, second, data_tags)
    logger = options.logger
    if logger is not None and logger.isEnabledFor(logging.INFO):
        logger.info(
            "redist host: rank %d/%d lowered plan %s with method=%s in %.3f ms; send bytes per peer %s; "
            "recv bytes per peer %s; local %d B",
            plan.rank, plan.nranks, plan.key, chosen, (time.perf_counter() - t0) * 1e3, plan.send_bytes,
            plan.recv_bytes, sum(p.local.nbytes for p in (plan.fields if isinstance(plan, FusedPlan) else (plan,))
                                 if p.local is not None),
        )
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s", exe.describe())
    return exe
