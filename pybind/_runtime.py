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

from .engine.errors import InvalidStateError, InvalidTypeError, InvalidValueError, NotSupportedError

__all__ = ["ProcessGroup", "DistributedContext", "initialize", "finalize", "get_context"]


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
    ``cuda`` is the CUDA/NVSHMEM runtime object (None when CPU-only).
    """

    process_group: ProcessGroup
    device_id: int | None
    cuda: object | None = field(default=None, repr=False)

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


def _visible_gpus() -> tuple[int, str | None]:
    """(number of CUDA devices, why not usable) without touching any device."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return 0, "cuda-python is not installed (pip install 'redist[cuda]')"
    try:
        err, = driver.cuInit(0)
    except Exception as e:  # noqa: BLE001 -- no driver library on this machine
        return 0, f"no CUDA driver ({type(e).__name__})"
    if err != driver.CUresult.CUDA_SUCCESS:
        return 0, f"cuInit failed ({err.name})"
    err, n = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or n == 0:
        return 0, "no CUDA device is visible"
    try:
        import nvshmem.core  # noqa: F401
    except ImportError:
        return 0, "nvshmem4py is not installed (pip install 'redist[cuda]')"
    return n, None


def _resolve_device(device_id, comm) -> int | None:
    """Pick this rank's device. Collective: either every rank gets a GPU or none does."""
    if device_id is None:
        device_id = os.environ.get("REDIST_DEVICE") or None
        if isinstance(device_id, str) and device_id.lstrip("-").isdigit():
            device_id = int(device_id)
    explicit = device_id is not None and device_id != "cpu"
    bad = None
    if device_id == "cpu":
        ngpus, why = 0, "device_id='cpu'"
    elif device_id is not None and (isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0):
        ngpus, why, bad = 0, "invalid device_id", f"device_id must be None, 'cpu' or an integer >= 0, got {device_id!r}"
    else:
        ngpus, why = _visible_gpus()
        if explicit and ngpus and device_id >= ngpus:
            why, ngpus = f"device_id {device_id} but only {ngpus} device(s) are visible", 0
    answers = comm.allgather((ngpus, why, bad))  # decided on gathered data: every rank raises alike
    for r, (_, _, b) in enumerate(answers):
        if b is not None:
            raise InvalidValueError(f"rank {r}: {b}")
    answers = [(n, w) for n, w, _ in answers]
    if any(n == 0 for n, _ in answers):
        if explicit:
            r, (_, w) = next((r, a) for r, a in enumerate(answers) if a[0] == 0)
            raise NotSupportedError(f"cannot use CUDA device {device_id}: on rank {r}, {w}")
        return None
    if explicit:
        return device_id
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    local = node.Get_rank()
    node.Free()
    return local % ngpus


def _start(device_id, communicator) -> DistributedContext:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if communicator is None else communicator
    if not isinstance(comm, MPI.Intracomm):
        raise InvalidTypeError(
            f"Unrecognized communicator type ({type(comm).__name__}). Need an mpi4py intra-communicator."
        )
    pg = ProcessGroup(comm, comm.Get_rank(), comm.Get_size())
    dev = _resolve_device(device_id, comm)
    cuda_rt = None
    if dev is not None:
        from .engine.cuda import runtime as cuda_runtime

        cuda_rt = cuda_runtime.start(comm, dev)
    return DistributedContext(pg, dev, cuda_rt)


def initialize(device_id: int | str | None = None, communicator=None) -> None:
    """Collective: bring up redist on ``communicator`` (default ``MPI.COMM_WORLD``).

    ``device_id``: None picks "local rank modulo visible GPUs" when every rank can use a GPU
    (and CPU-only otherwise); an integer forces that CUDA device; "cpu" never touches a GPU.
    The environment variable ``REDIST_DEVICE`` ("cpu" or an integer) sets the default. With a
    GPU, NVSHMEM is initialised here (UID bootstrap over the communicator).
    Raises InvalidStateError if redist is already initialised (call :func:`finalize` first).
    """
    global _ctx, _atexit_registered
    with _lock:
        if _ctx is not None:
            raise InvalidStateError("redist has already been initialized; call redist.finalize() first")
        _ctx = _start(device_id, communicator)
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
        if ctx.cuda is not None:
            from .engine.cuda import runtime as cuda_runtime

            cuda_runtime.stop()


def get_context() -> DistributedContext:
    """The runtime context (initialising redist with defaults on first use; collective then)."""
    if _ctx is None:
        with _lock:
            if _ctx is None:
                initialize()
    return _ctx


def is_initialized() -> bool:
    return _ctx is not None
