# SPDX-License-Identifier: Apache-2.0
"""The redist runtime: MPI process group, CUDA device and NVSHMEM, set up once per process.

``initialize()`` is collective. It is called implicitly (with defaults) by the first API call
that needs it, and ``finalize()`` runs at exit. A single process started without ``mpiexec``
works too: mpi4py gives it a one-rank ``COMM_WORLD``.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from dataclasses import dataclass, field

from .engine.backend import Context
from .engine.errors import InvalidStateError, InvalidTypeError

__all__ = ["ProcessGroup", "DistributedContext", "initialize", "finalize", "get_context", "is_initialized"]


@dataclass(frozen=True)
class ProcessGroup:
    """The processes taking part: an mpi4py communicator with its rank and size."""

    comm: object
    rank: int
    nranks: int

    def allgather(self, obj) -> list:
        """Collective: every rank's ``obj``, in rank order (pickled; for small setup data only)."""
        return self.comm.allgather(obj)

    def bcast(self, obj, root: int = 0):
        return self.comm.bcast(obj, root=root)


@dataclass(frozen=True)
class DistributedContext:
    """What :func:`get_context` returns.

    ``device_id`` is the CUDA device this process uses, or None when it runs CPU-only;
    ``cuda`` is the CUDA/NVSHMEM runtime object (None when CPU-only); ``engine`` is what the
    backends get (redist's own duplicate of the communicator, and the CUDA runtime).
    """

    process_group: ProcessGroup
    device_id: int | None
    cuda: object | None = field(default=None, repr=False)
    engine: Context | None = field(default=None, repr=False)

    @property
    def nvshmem_available(self) -> bool:
        return self.cuda is not None

    @property
    def backends(self) -> tuple[str, ...]:
        """The backends that are up: "mpi" always, "cuda" and "nvshmem" with a GPU."""
        return ("mpi",) + (("cuda", "nvshmem") if self.cuda is not None else ())


_lock = threading.RLock()
_ctx: DistributedContext | None = None
_atexit_registered = False
_live = weakref.WeakValueDictionary()  # serial -> Redistribute, freed (in creation order) by finalize
_serial = 0


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


def _start(device_id, communicator, shared_gpu=None) -> DistributedContext:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if communicator is None else communicator
    if not isinstance(comm, MPI.Intracomm):
        raise InvalidTypeError(
            f"Unrecognized communicator type ({type(comm).__name__}). Need an mpi4py intra-communicator."
        )
    if device_id is None:
        device_id = os.environ.get("REDIST_DEVICE") or None
        if isinstance(device_id, str) and device_id.lstrip("-").isdigit():
            device_id = int(device_id)
    pg = ProcessGroup(comm, comm.Get_rank(), comm.Get_size())
    own = comm.Dup()  # redist's traffic never meets the application's (one per context, freed by finalize)
    try:
        dev = None
        if device_id != "cpu":
            from .engine.cuda import runtime as cuda_runtime

            dev = cuda_runtime.resolve_device(own, device_id)
        cuda_rt = None
        if dev is not None:
            shared = _shared_gpu_default() if shared_gpu is None else bool(shared_gpu)
            cuda_rt = cuda_runtime.start(own, dev, shared_gpu=shared)
    except BaseException:
        own.Free()
        raise
    return DistributedContext(pg, dev, cuda_rt, Context(own, cuda_rt))


def initialize(device_id: int | str | None = None, communicator=None, *, shared_gpu: bool | None = None) -> None:
    """Collective: bring up redist on ``communicator`` (default ``MPI.COMM_WORLD``).

    ``device_id``: None picks "local rank modulo visible GPUs" when every rank can use a GPU
    (and CPU-only otherwise); an integer forces that CUDA device; "cpu" never touches a GPU.
    The environment variable ``REDIST_DEVICE`` ("cpu" or an integer) sets the default. With a
    GPU, NVSHMEM is initialised here (UID bootstrap over the communicator).
    ``shared_gpu``: let several ranks use one GPU (for tests and development: the processes
    time-slice it; only ``signal="epoch"`` graphs run there). None reads ``REDIST_SHARED_GPU=1``.
    It must be equal on every rank. Without it, two ranks on one GPU raise NotSupportedError.
    Raises InvalidStateError if redist is already initialised (call :func:`finalize` first).
    """
    global _ctx, _atexit_registered
    with _lock:
        if _ctx is not None:
            raise InvalidStateError("redist has already been initialized; call redist.finalize() first")
        _ctx = _start(device_id, communicator, shared_gpu)
        if not _atexit_registered:
            atexit.register(finalize)
            _atexit_registered = True


def finalize() -> None:
    """Collective: free every live Redistribute object, then shut down NVSHMEM. No-op if not initialized."""
    global _ctx
    with _lock:
        if _ctx is None:
            return
        for key in sorted(_live.keys()):  # creation order: the same on every rank
            obj = _live.get(key)
            if obj is not None:
                obj.free()
        ctx, _ctx = _ctx, None
        from mpi4py import MPI

        if not MPI.Is_finalized():
            ctx.engine.close()  # shared windows of dropped objects (collective)
        if ctx.cuda is not None:
            from .engine.cuda import runtime as cuda_runtime

            cuda_runtime.stop()
        if not MPI.Is_finalized():
            ctx.engine.comm.Free()


def get_context() -> DistributedContext:
    """The runtime context (initialising redist with defaults on first use; collective then)."""
    if _ctx is None:
        with _lock:
            if _ctx is None:
                initialize()
    return _ctx


def is_initialized() -> bool:
    """True between :func:`initialize` (or the first implicit use) and :func:`finalize`."""
    return _ctx is not None
