# SPDX-License-Identifier: Apache-2.0
"""RedistributeOptions: the knobs of a :class:`redist.Redistribute`."""

from __future__ import annotations

import dataclasses
import logging
import operator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .engine.backend import HOST_METHODS, SIGNALS, TRANSPORTS, TUNE_MODES
from .engine.errors import InvalidTypeError, InvalidValueError

__all__ = ["RedistributeOptions"]


@dataclass
class RedistributeOptions:
    """Options for :class:`redist.Redistribute` (a dict with the same keys is accepted too).

    Every field but ``logger`` must be equal on every process (checked collectively).

    Attributes
    ----------
    logger : logging.Logger or None
        Where this object logs, every line starting with the process's rank (``rank 2: ...``).
        INFO: construction and planning (stage times, per-peer bytes); DEBUG: the plan's
        transfers and every ``execute()`` with its time. None: the ``"redist"`` logger
        (nvmath-python logs to the root logger).
    blocking : True or "auto"
        True: ``execute()`` returns once the result is complete. "auto" (default): host
        operands block (MPI), GPU executions return as soon as the graph is launched on the
        stream.
    execution : "auto", "cpu" or "cuda"
        Where the exchange runs. "auto" (default): host operands on the MPI host backend, GPU
        operands on the CUDA backend. "cuda" runs host operands on the GPU through an
        engine-owned device mirror (copy in, run, copy out), as nvmath-python always does.
    result_layout : "auto", "C", "F" or a permutation of the axes
        Memory order of the result. "auto" (default) follows the operands (C -> C, F -> F;
        C when every operand fits both, e.g. 1-D); "C"/"F" force it; a permutation of
        ``range(ndim)`` gives the axes from slowest- to fastest-varying in memory ("C" is
        ``(0, 1, ..., n-1)``, "F" ``(n-1, ..., 0)``): e.g. ``(0, 2, 1)`` for a 3-D result whose
        axis 1 is contiguous, as a pencil transpose before an FFT along axis 1 wants. The result
        is then a transposed view of a dense buffer, written directly (no extra copy pass).
    transport : "auto", "push" or "put"
        CUDA backend only. "push": one fused kernel writes straight into peers' results
        through NVLink/P2P pointers; "put": pack into symmetric staging, NVSHMEM put, unpack
        (works between nodes). "auto" picks push for every peer that is reachable, put
        otherwise.
    host_method : "auto", "push", "hybrid", "datatype", "pack" or "alltoallw"
        MPI host backend only: how data moves. "push": every rank's result lives in one MPI
        shared-memory window and peers store into it directly (one copy, no MPI datatype; every
        rank must be on one node). The others send MPI messages: "hybrid" per message an MPI
        derived datatype or a numpy pack through staging, whichever measured faster;
        "datatype" always MPI datatypes; "pack" always numpy pack/unpack; "alltoallw" one
        persistent MPI-4 ``Alltoallw_init`` (NotSupportedError where the MPI library lacks it).
        "auto" (default): "push" on one node (more than one rank), else "hybrid".
    result : "persistent" or "fresh"
        "persistent" (default): :meth:`~redist.Redistribute.execute` returns the same array every
        time, owned by the object and overwritten by the next execute. "fresh": nvmath-python's
        behaviour, every execute returns a new array the caller owns (on GPUs a new allocation
        on the NVSHMEM symmetric heap, freed by the caller with
        :func:`redist.free_symmetric_memory`, collectively). Costs an allocation per execute.
    signal : "epoch" or "barrier"
        CUDA backend only: how ranks order their graphs. "epoch" (default): no NVSHMEM barrier;
        each graph keeps an epoch counter on the device, receivers post credits, senders post
        arrivals (and NVSHMEM put-with-signal on the put path), each rank waits only for the
        peers it talks to. "barrier": NVSHMEM team barriers at entry and exit (the wave-1 graphs;
        unavailable when several ranks share a GPU).
    allow_overlap : bool
        False (default): the input boxes tile the global array exactly, and so do the output
        boxes. True: boxes may overlap and the output boxes need not cover the global array
        (the bounding box of the input boxes); every element of every output box must be held
        by some input box, and comes from the lowest rank holding it. This expresses allgather
        (every output box the global box), broadcast of a box, gather onto one rank, halos (each
        output box its own box grown by the halo width, clipped) and replicated inputs.
        What one rank sends another may then be several boxes (a frame around a lower rank's
        box): they travel in one message (not with ``host_method="alltoallw"``).
    tune : "estimate", "measure" or "wisdom"
        How :meth:`~redist.Redistribute.plan` picks the route (docs/tuning.md). "estimate"
        (default): the heuristic above, nothing timed. "measure": time every candidate
        collectively (host: every host method; GPU: transport x signal x kernel variant), each
        warmed up, the median of its calls' slowest rank (several calls), the fastest wins; a
        ``host_method`` or ``transport`` other than "auto" is kept, not tuned. "wisdom": the
        answer stored for this problem (:func:`redist.import_wisdom`, ``REDIST_WISDOM``) if one
        matches, else measure. Both store what they measured (:func:`redist.export_wisdom`).
    tune_budget : float
        Seconds of measuring one ``plan()`` may spend (default 10; the first candidate is
        always measured, the rest skipped once the slowest rank has spent this much; host
        candidates timed side by side share what is left after their warm-up, at least one
        call each).
    tune_out : bool
        False (default): ``tune`` times calls into the engine-owned result. True: into an
        ``out=`` (host: an array laid out like the result), as a loop calling
        ``execute(out=...)`` does; on one node push's routes into ``out=`` are candidates too.
        Part of the wisdom key.
    """

    logger: logging.Logger | None = None
    blocking: Literal[True, "auto"] = "auto"
    execution: Literal["auto", "cpu", "cuda"] = "auto"
    transport: Literal["auto", "push", "put"] = "auto"
    result_layout: Literal["auto", "C", "F"] | tuple[int, ...] = "auto"
    host_method: Literal["auto", "push", "hybrid", "datatype", "pack", "alltoallw"] = "auto"
    signal: Literal["epoch", "barrier"] = "epoch"
    result: Literal["persistent", "fresh"] = "persistent"
    allow_overlap: bool = False
    tune: Literal["estimate", "measure", "wisdom"] = "estimate"
    tune_budget: float = 10.0
    tune_out: bool = False

    def __post_init__(self) -> None:
        if self.blocking is not True and self.blocking != "auto":
            raise InvalidValueError("The value specified for 'blocking' must be either True or 'auto'.")
        if self.execution not in ("auto", "cpu", "cuda"):
            raise InvalidValueError(f"execution must be 'auto', 'cpu' or 'cuda', got {self.execution!r}")
        if self.transport not in TRANSPORTS:
            raise InvalidValueError(f"transport must be one of {TRANSPORTS}, got {self.transport!r}")
        if not isinstance(self.result_layout, str):
            try:
                if any(isinstance(a, (bool, np.bool_)) for a in self.result_layout):  # a bool axis is surely a bug
                    raise TypeError
                perm = tuple(operator.index(a) for a in self.result_layout)
            except TypeError:
                raise InvalidValueError(f"result_layout must be 'auto', 'C', 'F' or a permutation of the axes, got "
                                        f"{self.result_layout!r}") from None
            if sorted(perm) != list(range(len(perm))):
                raise InvalidValueError(f"result_layout {perm} is not a permutation of the axes 0..{len(perm) - 1}")
            self.result_layout = perm
        elif self.result_layout not in ("auto", "C", "F"):
            raise InvalidValueError(f"result_layout must be 'auto', 'C', 'F' or a permutation of the axes, got "
                                    f"{self.result_layout!r}")
        if self.host_method not in HOST_METHODS:
            raise InvalidValueError(f"host_method must be one of {HOST_METHODS}, got {self.host_method!r}")
        if self.result not in ("persistent", "fresh"):
            raise InvalidValueError(f"result must be 'persistent' or 'fresh', got {self.result!r}")
        if self.signal not in SIGNALS:
            raise InvalidValueError(f"signal must be one of {SIGNALS}, got {self.signal!r}")
        if not isinstance(self.allow_overlap, (bool, np.bool_)):
            raise InvalidTypeError(f"allow_overlap must be True or False, got {self.allow_overlap!r}")
        self.allow_overlap = bool(self.allow_overlap)
        if self.tune not in TUNE_MODES:
            raise InvalidValueError(f"tune must be one of {TUNE_MODES}, got {self.tune!r}")
        if (isinstance(self.tune_budget, (bool, np.bool_)) or not isinstance(self.tune_budget, (int, float, np.number))
                or not self.tune_budget > 0):
            raise InvalidValueError(f"tune_budget must be a number of seconds > 0, got {self.tune_budget!r}")
        self.tune_budget = float(self.tune_budget)
        if not isinstance(self.tune_out, (bool, np.bool_)):
            raise InvalidTypeError(f"tune_out must be True or False, got {self.tune_out!r}")
        self.tune_out = bool(self.tune_out)
        if self.logger is not None and not isinstance(self.logger, logging.Logger):
            raise InvalidTypeError(f"logger must be a logging.Logger, got {type(self.logger).__name__}")

    def fingerprint(self) -> str:
        """The fields every rank must agree on (everything but the logger), named: ``blocking='auto', ...``."""
        return ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.name != "logger")

    @classmethod
    def coerce(cls, options: RedistributeOptions | dict[str, Any] | None) -> RedistributeOptions:
        if options is None:
            return cls()
        if isinstance(options, RedistributeOptions):  # any flavour keeps its own fields
            return dataclasses.replace(options)
        if isinstance(options, dict):
            unknown = set(options) - {f.name for f in dataclasses.fields(cls)}
            if unknown:
                raise InvalidValueError(f"unknown Redistribute option(s) {sorted(unknown)}; valid: "
                                        f"{[f.name for f in dataclasses.fields(cls)]}")
            return cls(**options)
        raise InvalidTypeError(
            "The Redistribute options must be provided as an object of type RedistributeOptions or as a dict with "
            f"valid Redistribute options. The provided object is '{options}'."
        )


class RankLogger(logging.LoggerAdapter):
    """A logger adapter that starts every line with this process's rank: ``rank 2: plan: ...``."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return f"rank {self.extra['rank'] if self.extra else '?'}: {msg}", kwargs


def ranked_logger(logger: logging.Logger | None, rank: int) -> RankLogger:
    """``logger`` (None: the ``"redist"`` logger) with ``rank N: `` in front of every line."""
    return RankLogger(logger if logger is not None else logging.getLogger("redist"), {"rank": rank})
