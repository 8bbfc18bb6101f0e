# SPDX-License-Identifier: Apache-2.0
"""The backend boundary: one :class:`Executable` protocol, one :func:`lower` entry, a registry.

``lower(plan, ctx, options)`` (collective) turns a pure :class:`~redist.engine.plan.Plan` into
an :class:`Executable` of the backend :func:`select_backend` picked. The API layer holds that
executable and talks to it only through the protocol below, in engine terms
(:class:`~redist.engine.buffer.Buffer`, integer stream handles); it never makes a backend
decision, never reaches into a backend, and never agrees across ranks itself.

Backends (lazily imported, so importing this module touches no MPI or CUDA):

=============== ======================================================================
``host``        host memory over MPI (engine/host)
``cuda``        GPU memory, NVSHMEM + one CUDA graph (engine/cuda)
``cuda-mirror`` host memory run on the GPU through an engine-owned device mirror
=============== ======================================================================
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from .buffer import Buffer
from .collective import Problem
from .errors import InvalidValueError, NotInitializedError, NotSupportedError
from .plan import FusedPlan, Plan

if TYPE_CHECKING:
    import numpy as np
    from mpi4py import MPI

    from .cuda.runtime import Runtime
    from .host.compiled import Replays
    from .host.symmetric import HostHeap

#: where planning is logged: a logger, or the API's adapter that puts the rank in front of each line
Logger: TypeAlias = "logging.Logger | logging.LoggerAdapter[logging.Logger]"

__all__ = [
    "BACKENDS",
    "Context",
    "Executable",
    "HOST_METHODS",
    "LowerOptions",
    "SIGNALS",
    "TRANSPORTS",
    "TUNE_MODES",
    "lower",
    "replays",
    "select_backend",
]

TRANSPORTS = ("auto", "push", "put")
HOST_METHODS = ("auto", "push", "hybrid", "datatype", "pack", "alltoallw")
SIGNALS = ("epoch", "barrier")
TUNE_MODES = ("estimate", "measure", "wisdom")
VECTOR_BYTES = (16, 8, 4)

#: backend name -> module whose ``lower(plan, ctx, options)`` makes its Executable
BACKENDS = {"host": "redist.engine.host", "cuda": "redist.engine.cuda", "cuda-mirror": "redist.engine.cuda.mirror"}


@dataclass
class Context:
    """What backends need from the process: the communicator and, with a GPU, the CUDA runtime.

    ``comm`` is redist's own duplicate of the user's communicator (one per context, never one
    per executable: nothing collective is left to free when an executable is dropped). ``cuda``
    is the :class:`redist.engine.cuda.runtime.Runtime` or None.
    """

    comm: Any
    cuda: Runtime | None = None
    _tags: int = field(default=0, repr=False)
    _second: Any = field(default=None, repr=False)
    _heap: Any = field(default=None, repr=False)
    #: what wisdom keys hold of this job (engine/wisdom.py ``environment``: gathered once)
    tune_environment: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def rank(self) -> int:
        return self.comm.Get_rank()

    @property
    def nranks(self) -> int:
        return self.comm.Get_size()

    def second_comm(self) -> MPI.Intracomm:
        """Collective the first time: a second duplicate of the communicator, for the messages of
        a pair beyond its first (several fields), which must never match the receives of the
        first (posted with ANY_TAG: the tag carries the call's agreement)."""
        if self._second is None:
            self._second = self.comm.Dup()
        return self._second

    def host_heap(self) -> HostHeap:
        """The host symmetric allocations of this context (engine/host/symmetric.py; made on first use, local)."""
        if self._heap is None:
            from .host.symmetric import HostHeap

            self._heap = HostHeap(self.comm)
        return self._heap

    def next_tag(self) -> int:
        """A tag base for a new executable: the same on every rank (lowering is collective)."""
        self._tags += 1
        return self._tags

    def close(self) -> None:
        """Collective (redist.finalize): free the second communicator (the first is the caller's) and
        forget the host symmetric allocations (their owners' arrays stay valid while referenced)."""
        if self._heap is not None:
            self._heap.close()
        from .host import compiled

        compiled.drop_all()  # none should be left (each executable's free() drops its own)
        if self._second is not None:
            self._second.Free()
            self._second = None


@dataclass(frozen=True)
class LowerOptions:
    """How to lower a plan (the engine's view of :class:`redist.RedistributeOptions`)."""

    backend: str = "host"
    transport: str = "auto"
    host_method: str = "auto"
    signal: str = "epoch"
    blocking: bool = False
    logger: Logger | None = None
    #: "estimate" (the heuristic), "measure" or "wisdom": engine/tune.py
    tune: str = "estimate"
    tune_budget: float = 10.0
    #: tune: what the wisdom key holds beyond the plan (dtypes, every rank's strides, options)
    signature: str = ""
    #: tune: the operands to time the candidates with, one per field (none: engine-owned scratch on host)
    inputs: tuple[Buffer, ...] = ()
    #: CUDA: the widest vector (bytes) the copy kernels use (16, 8 or 4): the kernel variant
    vector_bytes: int = 16
    #: tune: time calls into an out= (host: a private array per field) instead of the engine-owned result
    tune_out: bool = False
    #: host push: calls with an out= land in shared memory up to this many bytes received (None: push.LANDING_MAX)
    push_landing_max: int | None = None

    def __post_init__(self) -> None:
        if self.tune not in TUNE_MODES:
            raise InvalidValueError(f"tune must be one of {TUNE_MODES}, got {self.tune!r}")
        if self.vector_bytes not in VECTOR_BYTES:
            raise InvalidValueError(f"vector_bytes must be one of {VECTOR_BYTES}, got {self.vector_bytes!r}")
        if self.backend not in BACKENDS:
            raise InvalidValueError(f"backend must be one of {tuple(BACKENDS)}, got {self.backend!r}")
        if self.transport not in TRANSPORTS:
            raise InvalidValueError(f"transport must be one of {TRANSPORTS}, got {self.transport!r}")
        if self.host_method not in HOST_METHODS:
            raise InvalidValueError(f"host_method must be one of {HOST_METHODS}, got {self.host_method!r}")
        if self.signal not in SIGNALS:
            raise InvalidValueError(f"signal must be one of {SIGNALS}, got {self.signal!r}")


@runtime_checkable
class Executable(Protocol):
    """A lowered plan, bound to memory. Methods marked collective must be called on every rank.

    Buffers: ``bind_input`` takes the operand (element 0 at ``buf.ptr``, the plan's strides);
    ``bind_output(None)`` selects the engine-owned :attr:`result`, ``bind_output(buf)`` the
    caller's ``out=`` (checked first with :meth:`out_problem`).

    Fields: an executable lowered from a :class:`~.plan.FusedPlan` moves several arrays of the
    same boxes in one exchange; ``field`` picks which one a binding is for (0 for a plain plan),
    :attr:`results` holds one engine-owned result per field and :meth:`rebind_inputs` rebinds
    every field at once (on CUDA one node update per kernel).

    Capture: :meth:`execute` on a stream the user is capturing records the exchange into that
    capture (CUDA backend) instead of running it; :meth:`update_captured` later rebinds such copies.

    Agreement: :meth:`execute` is where ranks agree on the call. Each rank passes its local
    ``problem`` (None when it has none); if any rank has one, or the ranks' call signatures
    differ (bound output's :meth:`out_signature`, ``sync``, ``release_workspace``), every rank
    raises the same error and no rank writes into memory it was told not to.
    """

    plan: Plan | FusedPlan
    backend: str
    nfields: int
    result: Buffer
    results: tuple[Buffer, ...]

    def bind_input(self, buf: Buffer, field: int = 0) -> None:
        """Read field ``field``'s operand from ``buf`` from the next execute on (local; never
        fails for a buffer of the planned shape and strides)."""

    def rebind_input(self, ptr: int, owner: object = None, field: int = 0) -> None:
        """The hot path of ``reset_operand_unchecked``: a new address, nothing checked."""

    def rebind_inputs(self, ptrs: Sequence[int], owners: Sequence[object]) -> None:
        """Every field's new address at once (sequences over the fields), nothing checked."""

    def bind_output(self, buf: Buffer | None, field: int = 0) -> None:
        """Write field ``field`` into ``buf`` (None: its engine-owned result) from the next execute on."""

    def out_problem(self, buf: Buffer, field: int = 0) -> str | None:
        """Why ``buf`` cannot be this rank's ``out=`` of field ``field`` (None when it can). Local."""

    def out_signature(self, buf: Buffer | None, field: int = 0) -> int | None:
        """What must be equal on every rank for ``buf`` to be ``out=`` (None: nothing)."""

    def execute(self, stream: int = 0, sync: bool = True, release_workspace: bool = False,
                problem: Problem | None = None) -> None:
        """Collective: agree on the call (see above), then run the exchange once."""

    def graph(self, stream: int = 0) -> int:
        """The CUDA graph execute() launches (CUgraph as int); NotSupportedError on host."""

    def update_captured(self, graph: int, graph_exec: int) -> int:
        """Push the bindings of now into the copies of this exchange that execute() recorded into the
        user's ``graph`` (captured while execute() ran on a capturing stream), inside ``graph_exec``
        (instantiated from ``graph``); how many copies. Local. NotSupportedError on host."""

    def release_captured(self) -> None:
        """The caller's graphs holding copies of this exchange will not be launched again (local):
        free() and release_workspace may then reclaim what the copies use. A no-op on host."""

    def replay(self, forget: Callable[[], None]) -> np.ndarray | None:
        """The next execute() of this binding as words the C ABI runs without Python (see
        engine/host/replay.py), or None where it cannot; ``forget()`` is called when they stop
        being valid. Local."""

    def resume(self, code: int, heard: Sequence[int]) -> None:
        """Collective: finish a replayed call (bound as it was made) whose status round, where this
        rank said ``code``, heard ``heard`` (the peers' codes) instead (only where :meth:`replay`
        gave words)."""

    def release_input(self) -> None:
        """Drop every reference to the operand (bind_input again before the next execute)."""

    def release_workspace(self) -> None:
        """Free staging memory; re-made by the next execute (collective on GPUs)."""

    def detach_result(self) -> None:
        """The caller owns :attr:`result` from now on: :meth:`free` leaves it alone."""

    def free(self) -> None:
        """Release everything (collective for symmetric memory; idempotent)."""

    def describe(self) -> str:
        """A human-readable account of the lowered plan."""


def select_backend(memory: str, execution: str, cuda_available: bool) -> str:
    """Which backend serves operands in ``memory`` ("cpu"/"cuda") under ``execution``.

    ``execution``: "auto" (host operands on the host, GPU operands on the GPU), "cpu" or "cuda"
    (host operands through a device mirror). Raises when the choice cannot be served.
    """
    if execution not in ("auto", "cpu", "cuda"):
        raise InvalidValueError(f"execution must be 'auto', 'cpu' or 'cuda', got {execution!r}")
    if memory == "cuda" and execution == "cpu":
        raise NotSupportedError("execution='cpu' needs host operands; these operands are in GPU memory")
    name = "host"
    if memory == "cuda":
        name = "cuda"
    elif execution == "cuda":
        name = "cuda-mirror"
    if name != "host" and not cuda_available:
        raise NotInitializedError(
            "CUDA execution needs redist initialised with a GPU (NVSHMEM); this run is CPU-only: "
            "check redist.get_context().device_id and the [cuda] extra"
        )
    return name


def lower(plan: Plan | FusedPlan, ctx: Context, options: LowerOptions) -> Executable:
    """Collective: lower ``plan`` (one field, or several fused) on ``ctx`` with the backend ``options.backend``;
    ``options.tune`` "measure" or "wisdom" picks the backend's route by timing its candidates
    (engine/tune.py: the executable's ``tuning`` then records what was measured and chosen)."""
    module = importlib.import_module(BACKENDS[options.backend])
    if options.tune != "estimate":
        from . import tune

        return tune.lower(plan, ctx, options, module)
    return module.lower(plan, ctx, options)


def replays(serial: int, fields: bool, nfields: int, nranks: int) -> Replays | None:
    """Where an object's repeated calls run the words of :meth:`Executable.replay` in C
    (engine/host/compiled.py): its :class:`~redist.engine.host.compiled.Replays`, keyed by
    ``serial``; None where the extension is not built or ``REDIST_COMPILED_REPLAY=0``. Local."""
    from .host import compiled

    if not compiled.available():
        return None
    return compiled.Replays(serial, fields, nfields, nranks)
