# SPDX-License-Identifier: Apache-2.0
"""Collective agreement: try locally, agree across ranks, raise rank r's error on every rank.

This is the one place where redist turns a failure on some ranks into the same exception on
every rank. A *problem* is a small picklable pair ``(class name, message)`` (:func:`problem`);
every layer (API, backends, C ABI) encodes its local failures with it and agrees through
:func:`agree` or :class:`attempt`, and :func:`exception` turns the first rank's problem back into
an exception with :func:`redist.engine.errors.error_class` -- one table, so one failure gives one
exception class and one C status whichever layer met it.

Messages name the rank (``"rank 2: ..."``); a message that already starts with ``"rank "``
(the specs check names ranks itself) is kept as it is.

The communicator is anything with ``Get_rank()`` and ``allgather(obj)`` (mpi4py, or the thread
simulation of the tests). Nothing here imports MPI.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

import numpy as np

from . import errors

__all__ = ["CallCheck", "Problem", "agree", "attempt", "exception", "problem", "raise_first"]

#: ``(redist exception class name, message)``: what travels when ranks agree on a failure.
Problem = tuple[str, str]


def problem(exc: BaseException | Problem | None) -> Problem | None:
    """Encode an exception (or pass a problem / None through)."""
    if exc is None or isinstance(exc, tuple):
        return exc
    cls = errors.redist_class_of(exc)
    msg = str(exc)
    if cls is errors.InternalError and not isinstance(exc, errors.RedistError):
        msg = f"{type(exc).__name__}: {msg}"
    return cls.__name__, msg


def exception(p: Problem, rank: int | None = None) -> errors.RedistError:
    """The exception for problem ``p`` met on ``rank`` (the same object shape on every rank)."""
    name, msg = p
    if rank is not None and not msg.startswith("rank "):
        msg = f"rank {rank}: {msg}"
    return errors.error_class(name)(msg)


def raise_first(problems: Sequence[Problem | None], cause: BaseException | None = None) -> None:
    """Raise the first rank's problem, if any (call it with the same list on every rank)."""
    for r, p in enumerate(problems):
        if p is not None:
            raise exception(p, r) from cause


def agree(comm: Any, failure: BaseException | Problem | None = None, payload: object = None) -> list[Any]:
    """Collective: gather every rank's ``(problem, payload)``; raise the first problem on every
    rank, else return every rank's payload (in rank order)."""
    mine = problem(failure)
    every = comm.allgather((mine, payload))
    raise_first([p for p, _ in every], failure if isinstance(failure, BaseException) else None)
    return [x for _, x in every]


class attempt:
    """``with attempt(comm) as step: ...`` -- local work whose failure is raised on every rank.

    An exception inside the block is caught; on leaving the block every rank gathers
    ``(problem, step.payload)`` and raises the first rank's problem, so code after the block
    runs on every rank or on none. ``step.gathered`` then holds every rank's payload.
    ``on_failure`` (optional) runs on every rank before the agreed error is raised (rollback).
    """

    def __init__(self, comm: Any, *, on_failure: Callable[[], object] | None = None) -> None:
        self.comm: Any = comm
        self.payload: Any = None
        self.gathered: list[Any] | None = None
        self._on_failure = on_failure

    def __enter__(self) -> attempt:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if exc is not None and not isinstance(exc, Exception):
            return False  # KeyboardInterrupt, SystemExit: never swallowed
        try:
            self.gathered = agree(self.comm, exc, self.payload)
        except errors.RedistError:
            if self._on_failure is not None:
                self._on_failure()
            raise
        return True  # the local exception (if any) was agreed on; nobody failed


class CallCheck:
    """The per-call agreement of an executable: one small ``Allreduce`` when all is well.

    Every rank contributes whether it failed, a *signature* of the call (what must be equal on
    every rank: an ``out=`` heap offset, flags) and an optional flag to OR; a failure or a
    differing signature anywhere raises the same error on every rank. A persistent
    ``Allreduce_init`` is used where the MPI library has it. With ``per_rank``, each rank also
    contributes one non-negative value that every rank learns (:attr:`values`, in rank order: the
    same Allreduce, one more word per rank).
    """

    def __init__(self, comm: Any, per_rank: bool = False) -> None:
        self.comm: Any = comm
        self.nranks: int = comm.Get_size()
        self._rank = comm.Get_rank() if per_rank else 0
        n = 4 + (self.nranks if per_rank else 0)
        self._send = np.zeros(n, np.int64)
        self._recv = np.zeros(n, np.int64)
        self.values: list[int] = [0] * self.nranks  # per_rank: every rank's value of the last check
        self._req = None
        self._op = None
        if self.nranks > 1 and hasattr(comm, "Allreduce"):
            from mpi4py import MPI

            self._op = MPI.MAX
            try:
                self._req = comm.Allreduce_init(self._send, self._recv, MPI.MAX)
            except (NotImplementedError, AttributeError, MPI.Exception):
                self._req = None

    def check(self, problem: Problem | None, signature: int = 0, flag: int = 0, what: object = None,
              value: int = 0) -> int:
        """Collective: raise everywhere if any rank failed or signatures differ; return max(flag).

        ``what`` (any picklable value) describes this rank's signature in the error message;
        ``value`` is this rank's entry of :attr:`values` (``per_rank``).
        """
        if self.nranks == 1:
            if problem is not None:
                raise exception(problem, 0)
            self.values[0] = value
            return flag
        sig = int(signature) & 0x3FFFFFFFFFFFFFFF
        send, recv = self._send, self._recv
        send[0], send[1], send[2], send[3] = problem is not None, sig, -sig, flag
        if len(send) > 4:
            send[4 + self._rank] = value
        if self._req is not None:
            self._req.Start()
            self._req.Wait()
        elif self._op is not None:
            self.comm.Allreduce(send, recv, self._op)
        else:  # a communicator without buffer collectives (the tests' thread simulation)
            rows = self.comm.allgather(send.tolist())
            recv[:] = np.max(np.array(rows, np.int64), axis=0)
        if recv[0] or recv[1] != -recv[2]:
            every = agree(self.comm, problem, (sig, what))
            sigs = [s for s, _ in every]
            shown = ", ".join(f"rank {r}: {w!r}" for r, (_, w) in enumerate(every))
            raise errors.InvalidValueError(
                "the ranks called execute() with different arguments that must be equal on every rank "
                f"({'out=, ' if len(set(sigs)) > 1 else ''}sync_symmetric_memory, release_workspace, whether the stream is "
                f"capturing a CUDA graph): {shown}"
            )
        if len(recv) > 4:
            self.values = recv[4:].tolist()
        return int(recv[3])

    def free(self) -> None:
        if self._req is not None:
            try:
                self._req.Free()
            except Exception:  # noqa: BLE001 -- MPI may be finalized already
                pass
            self._req = None
