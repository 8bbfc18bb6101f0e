# SPDX-License-Identifier: Apache-2.0
"""The redist runtime: MPI process group, CUDA device and NVSHMEM, set up once per process.

``initialize()`` is collective. It is called implicitly (with defaults) by the first API call
that needs it, and ``finalize()`` runs at exit. A single process started without ``mpiexec``
works too: mpi4py gives it a one-rank ``COMM_WORLD``.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .engine.backend import Context
from .engine.errors import InvalidStateError, InvalidTypeError, InvalidValueError, NotSupportedError
from .process_group import MPIProcessGroup, ProcessGroup

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["DistributedContext", "initialize", "finalize", "get_context", "context", "is_initialized"]

#: what ``initialize(backends=...)`` may name (nvmath-python's set); redist uses NVSHMEM only
BACKENDS = ("nvshmem", "nccl")


@dataclass(frozen=True)
class DistributedContext:
    """What :func:`get_context` returns (nvmath-python's fields, plus redist's).

    ``device_id`` is the CUDA device this process uses, or None when it runs CPU-only;
    ``process_group`` the :class:`~redist.process_group.ProcessGroup` given to
    :func:`initialize` (an :class:`~redist.process_group.MPIProcessGroup` of ``MPI.COMM_WORLD``
    by default); ``nvshmem_available`` whether NVSHMEM is up; ``nccl_comm`` is always None
    (redist does not use NCCL). ``cuda`` is the CUDA/NVSHMEM runtime object (None when
    CPU-only); ``engine`` is what the backends get (redist's own duplicate of the communicator,
    and the CUDA runtime).
    """

    device_id: int | None
    process_group: ProcessGroup
    nvshmem_available: bool = False
    nccl_comm: None = None
    cuda: object | None = field(default=None, repr=False)
    engine: Context | None = field(default=None, repr=False)

    @property
    def backends(self) -> tuple[str, ...]:
        """The backends that are up: "mpi" always, "cuda" and "nvshmem" with a GPU."""
        return ("mpi",) + (("cuda", "nvshmem") if self.cuda is not None else ())


_lock = threading.RLock()
_ctx: DistributedContext | None = None
_atexit_registered = False
_live = weakref.WeakValueDictionary()  # serial -> Redistribute, freed (in creation order) by finalize
_serial = 0


_initialize_hooks: list = []  # callables run (in registration order) at the end of initialize()
_finalize_hooks: list = []  # callables run (in registration order) first in finalize()


def add_runtime_hooks(*, on_initialize=None, on_finalize=None) -> None:
    """Run ``on_initialize()`` after every :func:`initialize` and ``on_finalize()`` first in every
    :func:`finalize` (while MPI and the context are still up). For redist's own modules (the plan
    caches of the framework adapters, wisdom): every rank must register the same hooks in the same
    order, since a hook may be collective. Registering the same callable twice is a no-op."""
    with _lock:
        for hooks, hook in ((_initialize_hooks, on_initialize), (_finalize_hooks, on_finalize)):
            if hook is not None and hook not in hooks:
                hooks.append(hook)


def _register(obj) -> int:
    global _serial
    with _lock:
        _serial += 1
        _live[_serial] = obj
        return _serial


def _unregister(serial: int) -> None:
    _live.pop(serial, None)


def _shared_gpu_default() -> bool:
    return os.environ.get("REDIST_SHARED_GPU", "").strip().lower() in ("1", "true", "yes", "on")


def _mpi_comm_of(process_group):
    """(ProcessGroup, mpi4py communicator under it) for what initialize() was given."""
    from mpi4py import MPI

    if process_group is None:
        return MPIProcessGroup(MPI.COMM_WORLD), MPI.COMM_WORLD
    if isinstance(process_group, MPI.Comm):
        if not isinstance(process_group, MPI.Intracomm):
            raise InvalidTypeError(
                f"Unrecognized process group type ({type(process_group).__name__}): an inter-communicator; redist "
                "needs an mpi4py intra-communicator or a redist.ProcessGroup")
        return MPIProcessGroup(process_group), process_group
    if not isinstance(process_group, ProcessGroup):
        raise InvalidTypeError(
            f"Unrecognized process group type ({type(process_group).__name__}). Need redist.ProcessGroup (e.g. "
            "MPIProcessGroup, TorchProcessGroup) or mpi4py communicator.")
    comm = process_group.mpi_comm
    if comm is not None:
        return process_group, comm
    # not backed by MPI (e.g. torch.distributed): redist moves data over MPI, so the same processes
    # must form MPI.COMM_WORLD in the same order (started by mpiexec); checked through the group itself
    world = MPI.COMM_WORLD
    mapping = process_group.allgather((world.Get_rank(), world.Get_size()))
    if any(m != (r, process_group.nranks) for r, m in enumerate(mapping)):
        bad = next(r for r, m in enumerate(mapping) if m != (r, process_group.nranks))
        raise NotSupportedError(
            f"{type(process_group).__name__} rank {bad} is MPI.COMM_WORLD rank {mapping[bad][0]} of "
            f"{mapping[bad][1]}: redist moves data over MPI and NVSHMEM bootstrapped over MPI, so a process "
            "group that is not an MPI communicator must have the same processes in the same order as "
            "MPI.COMM_WORLD (start the job with mpiexec)")
    return process_group, world


def _check_backends(backends, device_id):
    """None, or nvmath-python's list: "nvshmem" (needs a GPU) is what redist's GPU path uses."""
    if backends is None:
        return None
    if isinstance(backends, str):
        backends = [backends]
    backends = list(backends)
    for b in backends:
        if b not in BACKENDS:
            raise InvalidValueError(f"backend must be one of {BACKENDS}, got {b}")
    if not backends:
        raise InvalidValueError(f"Need to specify at least one of {BACKENDS} communication backends")
    if "nvshmem" not in backends:
        raise NotSupportedError(
            f"backends={backends}: redist moves GPU data with NVSHMEM and host data with MPI, and does not use "
            "NCCL; pass backends=['nvshmem'] (or None) to run on GPUs, or device_id='cpu' for host memory only")
    if device_id == "cpu":
        raise InvalidValueError("backends=['nvshmem'] needs a GPU, but device_id is 'cpu'")
    return backends


def _start(device_id, process_group, backends, shared_gpu, already: bool) -> DistributedContext:
    """Collective. Problems with the arguments on any rank are raised on every rank."""
    from mpi4py import MPI

    from .engine import collective

    comm = MPI.COMM_WORLD if not isinstance(process_group, MPI.Intracomm) else process_group
    with collective.attempt(comm):
        if already:
            raise InvalidStateError("redist has already been initialized; call redist.finalize() first")
        if device_id is None:
            device_id = os.environ.get("REDIST_DEVICE") or None
            if isinstance(device_id, str) and device_id.lstrip("-").isdigit():
                device_id = int(device_id)
        if device_id is not None and device_id != "cpu" and (
                isinstance(device_id, bool) or not isinstance(device_id, int)):
            raise InvalidTypeError(
                "The device ID used to initialize the redist module must be an integer. The provided device ID is "
                f"{device_id}. (redist also accepts 'cpu', and None for one GPU per local rank.)")
        backends = _check_backends(backends, device_id)
        if process_group is not None and not isinstance(process_group, (MPI.Comm, ProcessGroup)):
            raise InvalidTypeError(
                f"Unrecognized process group type ({process_group}). Need redist.ProcessGroup or mpi4py "
                f"communicator. (It is a {type(process_group).__name__}; ProcessGroups: MPIProcessGroup, "
                "TorchProcessGroup.)")
    pg, comm = _mpi_comm_of(process_group)
    own = comm.Dup()  # redist's traffic never meets the application's (one per context, freed by finalize)
    try:
        dev = None
        if device_id != "cpu":
            from .engine.cuda import runtime as cuda_runtime

            # backends=["nvshmem"]: a GPU on every rank, or an error on every rank
            dev = cuda_runtime.resolve_device(own, device_id, required=backends is not None)
        cuda_rt = None
        if dev is not None:
            shared = _shared_gpu_default() if shared_gpu is None else bool(shared_gpu)
            cuda_rt = cuda_runtime.start(own, dev, shared_gpu=shared)
    except BaseException:
        if not MPI.Is_finalized():
            own.Free()
        raise
    return DistributedContext(dev, pg, cuda_rt is not None, None, cuda_rt, Context(own, cuda_rt))


def initialize(device_id: int | str | None = None, process_group: ProcessGroup | MPI.Intracomm | None = None,
               backends: Sequence[str] | str | None = None, *, shared_gpu: bool | None = None) -> None:
    """Collective: bring up redist on ``process_group`` (default ``MPI.COMM_WORLD``).

    The signature is nvmath-python's ``initialize(device_id, process_group, backends)``, with
    defaults. ``device_id``: None picks "local rank modulo visible GPUs" when every rank can use
    a GPU (and CPU-only otherwise); an integer forces that CUDA device; "cpu" never touches a
    GPU. The environment variable ``REDIST_DEVICE`` ("cpu" or an integer) sets the default.
    ``process_group``: an mpi4py intra-communicator or a :class:`~redist.ProcessGroup`
    (:class:`~redist.MPIProcessGroup`, :class:`~redist.TorchProcessGroup` under ``mpiexec``).
    ``backends``: None (redist decides), or nvmath's list: it must contain "nvshmem" (then every
    rank needs a GPU); "nccl" is accepted next to it but unused (redist does not use NCCL).
    With a GPU, NVSHMEM is initialised here (UID bootstrap over the communicator).
    ``shared_gpu``: let several ranks use one GPU (for tests and development: the processes
    time-slice it; only ``signal="epoch"`` graphs run there). None reads ``REDIST_SHARED_GPU=1``.
    It must be equal on every rank. Without it, two ranks on one GPU raise NotSupportedError.
    Raises InvalidStateError if redist is already initialised (call :func:`finalize` first).
    Any problem on any rank is raised on every rank.
    """
    global _ctx, _atexit_registered
    with _lock:
        ctx = _start(device_id, process_group, backends, shared_gpu, _ctx is not None)
        _ctx = ctx
        if not _atexit_registered:
            atexit.register(finalize)
            _atexit_registered = True
        for hook in list(_initialize_hooks):
            hook()


def finalize() -> None:
    """Collective: free every live Redistribute object, then shut down NVSHMEM. No-op if not initialized."""
    global _ctx
    with _lock:
        if _ctx is None:
            return
        for hook in list(_finalize_hooks):
            hook()
        for key in sorted(_live.keys()):  # creation order: the same on every rank
            obj = _live.get(key)
            if obj is not None:
                obj.free()
        ctx, _ctx = _ctx, None
        from mpi4py import MPI

        if not MPI.Is_finalized():
            ctx.engine.close()  # its second communicator (collective)
        if ctx.cuda is not None:
            from .engine.cuda import runtime as cuda_runtime

            cuda_runtime.stop()
        if not MPI.Is_finalized():
            ctx.engine.comm.Free()


def get_context() -> DistributedContext | None:
    """The runtime context, or None before :func:`initialize` (as nvmath-python's).

    redist also initialises itself with defaults at the first call that needs the runtime
    (constructing a :class:`~redist.Redistribute`, the function form); after that this returns
    that context. Distributions never do: asked for a shape without ``nranks`` before
    :func:`initialize`, they raise NotInitializedError.
    """
    pkg = sys.modules.get("redist")
    injected = None if pkg is None else pkg.__dict__.get("_ctx")  # a context set as redist._ctx (nvmath's tests)
    return injected if injected is not None else _ctx


def context() -> DistributedContext:
    """The runtime context, initialising redist with defaults on first use (collective then)."""
    ctx = get_context()
    if ctx is None:
        with _lock:
            if _ctx is None:
                initialize()
            ctx = _ctx
    return ctx  # type: ignore[return-value]


def is_initialized() -> bool:
    """True between :func:`initialize` (or the first implicit use) and :func:`finalize`."""
    return _ctx is not None
