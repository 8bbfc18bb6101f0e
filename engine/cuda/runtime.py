# SPDX-License-Identifier: Apache-2.0
"""CUDA device + NVSHMEM bring-up, symmetric memory, and the per-process kernel cache.

``start(comm, device_id)`` is collective over the mpi4py communicator: it makes ``device_id``
current (primary context), initialises NVSHMEM once per process with the UID bootstrap (rank 0
makes the unique id, ``comm.Bcast`` carries it, ``initializer_method="uid"``), and returns the
:class:`Runtime` (also kept as :func:`current`). ``stop()`` (collective) frees what the runtime
still holds; NVSHMEM itself stays up until interpreter exit (``finalize`` then runs from an
atexit hook registered by ``start`` when redist initialised it), so ``start`` can be called
again after ``stop``.

nvshmem4py is imported only here, and only by ``start``.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import collective
from ..errors import CudaError, InvalidStateError, InvalidValueError, NotInitializedError, NotSupportedError
from .graph import Driver, check, driver_api

if TYPE_CHECKING:
    import numpy.typing as npt
    from mpi4py import MPI

    from .user_memory import DriverMemory

__all__ = ["Runtime", "current", "is_started", "resolve_device", "start", "stop", "visible_devices"]

_log = logging.getLogger("redist.cuda")
_lock = threading.RLock()
_rt: Runtime | None = None
_nvshmem_ours = False  # redist called nvshmem init (so it finalizes at exit)
_atexit_done = False

SYM_ALIGN = 512
_STATUS_IS_INITIALIZED = 2  # NVSHMEM_STATUS_IS_INITIALIZED


_HEAP_RESERVE = 64 << 20  # NVSHMEM's own use of the heap (team sync arrays, reduction scratch), with margin
_HEAP_GROWTH_SLACK = 512 << 20  # NVSHMEM_CUMEM_GRANULARITY: the heap grows in such steps


def _env_bool(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "y", "yes", "t", "true", "on")


def _env_size(name: str, default: int) -> int:
    """An NVSHMEM size variable: bytes, or a number with a k/m/g/t suffix (powers of 1024)."""
    v = os.environ.get(name, "").strip()
    if not v:
        return default
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    num, suf = v, 1
    for i, ch in enumerate(v):
        if ch.lower() in mult:
            num, suf = v[:i], mult[ch.lower()]
            break
    try:
        return int(float(num or "0") * suf + 0.999999)
    except ValueError:
        return default


class Runtime:
    """What the CUDA backend needs from the process: device, NVSHMEM, heap, kernels, streams."""

    comm: MPI.Intracomm
    rank: int
    nranks: int
    device_id: int
    device: Any  # cuda.core.Device
    arch: str
    sm_count: int
    driver: Driver
    nb: Any  # the nvshmem.bindings module (set by start())
    stream: int
    anchor: int
    stopped: bool
    shared_gpu: bool

    def __init__(self, comm: MPI.Intracomm, device_id: int) -> None:
        from cuda.bindings import driver
        from cuda.core import Device

        self.comm = comm
        self.rank = comm.Get_rank()
        self.nranks = comm.Get_size()
        self.device_id = int(device_id)
        self.device = Device(self.device_id)
        self.device.set_current()
        self.arch = str(self.device.arch)
        try:
            self.sm_count = int(self.device.properties.multiprocessor_count)
        except Exception:  # noqa: BLE001
            self.sm_count = int(
                check(
                    driver.cuDeviceGetAttribute(
                        driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self.device_id
                    ),
                    "cuDeviceGetAttribute",
                )
            )
        self.driver = driver_api()
        self._sym: dict[int, list] = {}  # base pointer -> [nbytes, owner ("engine" | "user")]
        # (serial, n) -> (symmetric, device, pending) memory of dropped objects; pending(): a user's graph still holds it
        self._retired: dict[tuple[int, int], tuple[list, list, Callable[[], bool] | None]] = {}
        self._retired_lock = threading.Lock()
        self._freed: set[int] = set()
        self._sym_bytes = 0
        self._functions: dict[tuple, tuple[dict[int, int], list]] = {}
        self.stream = 0
        self.anchor = 0
        self.stopped = False
        self.shared_gpu = False  # several ranks on this GPU (set by start())
        self.memory_api: DriverMemory | None = None  # user_memory.DriverMemory (out= in any device memory), made on first use

    # -- bring-up (collective) -------------------------------------------------------------------

    def _bring_up(self) -> None:
        global _nvshmem_ours, _atexit_done
        import numpy as np
        import nvshmem.bindings as nb
        import nvshmem.core as nvs
        from cuda.bindings import driver
        from cuda.pathfinder import load_nvidia_dynamic_lib

        load_nvidia_dynamic_lib("nvshmem_host")
        self.nb = nb
        status = int(nb.init_status())
        err = None
        if status >= _STATUS_IS_INITIALIZED:
            if nb.n_pes() != self.nranks or nb.my_pe() != self.rank:
                err = (
                    f"NVSHMEM is already initialised with PE {nb.my_pe()} of {nb.n_pes()}, but this is rank "
                    f"{self.rank} of {self.nranks} of the communicator"
                )
        else:
            uid = nvs.get_unique_id(empty=(self.rank != 0))
            self.comm.Bcast(uid._data.view(np.int8), root=0)
            try:
                nvs.init(
                    device=self.device, uid=uid, rank=self.rank, nranks=self.nranks, initializer_method="uid"
                )
                _nvshmem_ours = True
            except Exception as e:  # noqa: BLE001 -- reported on every rank below
                err = f"NVSHMEM initialisation (UID bootstrap) failed: {e}"
        collective.agree(self.comm, None if err is None else CudaError(err))
        if _nvshmem_ours and not _atexit_done:
            atexit.register(_finalize_nvshmem)
            _atexit_done = True
        self.stream = int(
            check(driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING.value), "cuStreamCreate")
        )
        # A small symmetric block allocated first: heap offsets (out= signatures) are measured from it.
        self.anchor = self.sym_alloc(SYM_ALIGN, owner="runtime")

    # -- symmetric memory ------------------------------------------------------------------------

    def _heap_problem(self, n: int) -> str | None:
        """Why an ``n``-byte symmetric allocation would not fit (checked *before* nvshmem_malloc:
        NVSHMEM 3.4 does not survive a failed heap growth -- the process dies)."""
        from cuda.bindings import driver

        need = self._sym_bytes + n + _HEAP_RESERVE
        vmm = not _env_bool("NVSHMEM_DISABLE_CUDA_VMM")
        if vmm:
            limit = _env_size("NVSHMEM_MAX_MEMORY_PER_GPU", 128 << 30)
            setting = (
                "NVSHMEM_MAX_MEMORY_PER_GPU (the most the heap may grow to with CUDA VMM, NVSHMEM's default)"
            )
        else:
            limit = _env_size("NVSHMEM_SYMMETRIC_SIZE", 1 << 30)
            setting = "NVSHMEM_SYMMETRIC_SIZE (the heap's fixed size, as NVSHMEM_DISABLE_CUDA_VMM is set)"
        suggest = -(-int(need * 1.25) // (1 << 20))
        if need > limit:
            return (
                f"the NVSHMEM symmetric heap is too small: redist needs {n} more bytes on every GPU "
                f"({self._sym_bytes} already held, plus {_HEAP_RESERVE >> 20} MiB kept for NVSHMEM), but "
                f"{setting} is {limit} bytes. Set NVSHMEM_SYMMETRIC_SIZE (and, with CUDA VMM, "
                f"NVSHMEM_MAX_MEMORY_PER_GPU) to at least {suggest}M before redist.initialize()"
            )
        if vmm:
            try:
                free = int(check(driver.cuMemGetInfo(), "cuMemGetInfo")[0])
            except Exception:  # noqa: BLE001
                return None
            if n + _HEAP_GROWTH_SLACK > free:
                return (
                    f"not enough free memory on GPU {self.device_id} for a {n}-byte symmetric allocation "
                    f"({free} bytes free; the NVSHMEM heap grows in 512 MiB steps). NVSHMEM_SYMMETRIC_SIZE="
                    f"{suggest}M set before redist.initialize() reserves the heap up front"
                )
        return None

    def sym_alloc(self, nbytes: int, *, owner: str = "engine") -> int:
        """Collective: ``nbytes`` (>= 1) on the symmetric heap, same size on every rank.

        The size is checked against the heap limit on every rank first (InvalidValueError on all
        ranks), because a failed nvshmem_malloc is fatal in NVSHMEM 3.4.
        """
        self.check_alive()
        n = max(int(nbytes), 1)
        problem = self._heap_problem(n)
        collective.agree(self.comm, None if problem is None else InvalidValueError(problem))
        ptr = int(self.nb.align(SYM_ALIGN, n))
        failed = None if ptr else InvalidValueError(
            f"nvshmem_malloc of {n} bytes failed; the symmetric heap holds {self._sym_bytes} bytes of redist's. "
            "Raise NVSHMEM_SYMMETRIC_SIZE / NVSHMEM_MAX_MEMORY_PER_GPU")
        collective.agree(self.comm, failed)
        self._sym[ptr] = [n, owner]
        self._freed.discard(ptr)
        self._sym_bytes += n
        return ptr

    def sym_free(self, ptr: int) -> None:
        """Collective (every rank frees the same allocations in the same order). No in-flight use!"""
        ent = self._sym.pop(ptr, None)
        if ent is None:
            raise InvalidValueError(f"0x{ptr:x} is not a live symmetric allocation of redist")
        self._sym_bytes -= ent[0]
        self._freed.add(ptr)
        self.nb.free(ptr)

    def retire(self, key: tuple[int, int], symmetric: list[int], device: list[int],
               pending: Callable[[], bool] | None = None) -> None:
        """Memory of an object that no longer uses it (local: called from a finalizer, or from a
        free() that copies in the user's graphs outlive).

        Freed by :meth:`reap`, at the next collective point, once every rank has retired ``key``
        and ``pending()`` (a user's graph may still run a copy that uses it) is False on every rank;
        at the latest by stop().
        """
        with self._retired_lock:
            self._retired[key] = (list(symmetric), list(device), pending)

    def reap(self) -> None:
        """Collective: free what every rank has retired and no longer holds (in key order, after the GPU is idle)."""
        with self._retired_lock:
            mine = sorted(k for k, (_, _, pending) in self._retired.items() if pending is None or not pending())
        every = collective.agree(self.comm, None, mine)
        common = sorted(set(every[0]).intersection(*every[1:])) if every else []
        if not common:
            return
        self.synchronize()
        for key in common:
            with self._retired_lock:
                sym, dev, _ = self._retired.pop(key)
            for p in dev:
                self.dev_free(p)
            for p in sym:
                self.sym_free(p)

    def sym_lookup(self, ptr: int) -> tuple[int, int, str] | None:
        """(base, nbytes, owner) of the live allocation containing ``ptr``, or None."""
        ent = self._sym.get(ptr)
        if ent is not None:
            return ptr, ent[0], ent[1]
        for base, (n, owner) in self._sym.items():
            if base <= ptr < base + n:
                return base, n, owner
        return None

    def sym_set_owner(self, ptr: int, owner: str) -> None:
        self._sym[ptr][1] = owner

    def was_freed(self, ptr: int) -> bool:
        return ptr in self._freed

    def is_symmetric(self, ptr: int) -> bool:
        return bool(ptr) and int(self.nb.ptr(ptr, self.rank)) != 0

    def peer_ptr(self, ptr: int, pe: int) -> int:
        """``nvshmem_ptr``: ``ptr`` (symmetric) as mapped for load/store to PE ``pe``; 0 if unreachable."""
        return int(self.nb.ptr(ptr, pe))

    def heap_offset(self, ptr: int) -> int:
        """Offset of a symmetric address from the runtime's first allocation (equal on all ranks iff symmetric)."""
        return int(ptr) - self.anchor

    # -- plain device memory ---------------------------------------------------------------------

    def dev_alloc(self, nbytes: int) -> int:
        from cuda.bindings import driver

        return int(check(driver.cuMemAlloc(max(int(nbytes), 1)), "cuMemAlloc"))

    def dev_free(self, ptr: int) -> None:
        from cuda.bindings import driver

        if ptr:
            check(driver.cuMemFree(driver.CUdeviceptr(ptr)), "cuMemFree")

    def htod(self, dst: int, arr: npt.ArrayLike) -> None:
        """Blocking host -> device copy of a numpy array's bytes."""
        import numpy as np
        from cuda.bindings import driver

        a = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        if a.nbytes:
            check(driver.cuMemcpyHtoD(driver.CUdeviceptr(dst), a, a.nbytes), "cuMemcpyHtoD")

    def synchronize(self) -> None:
        from cuda.bindings import driver

        check(driver.cuCtxSynchronize(), "cuCtxSynchronize")

    # -- kernels ---------------------------------------------------------------------------------

    def functions(self, run_bytes: int, nout: int, kind: str = "plain") -> dict[int, int]:
        """{vector width: CUfunction} of one kernel family, compiled (NVRTC, cubin) and loaded once."""
        key = (run_bytes, nout, kind)
        hit = self._functions.get(key)
        if hit is not None:
            return hit[0]
        from cuda.bindings import driver

        from . import kernels

        obj = kernels.compile_family(run_bytes, nout, self.arch, kind)
        funcs, keep = {}, []
        for v in kernels.family_widths(run_bytes):
            name = kernels.kernel_name(run_bytes, nout, v, kind)
            try:
                k = obj.get_kernel(name)
                keep.append(k)
                funcs[v] = int(check(driver.cuKernelGetFunction(k.handle), "cuKernelGetFunction"))
            except Exception:  # noqa: BLE001 -- fall back to a plain module load of the cubin
                mod = check(driver.cuModuleLoadData(bytes(obj.code)), "cuModuleLoadData")
                keep.append(mod)
                funcs[v] = int(check(driver.cuModuleGetFunction(mod, name.encode()), "cuModuleGetFunction"))
        self._functions[key] = (funcs, keep)
        return funcs

    # -- lifetime --------------------------------------------------------------------------------

    def check_alive(self) -> None:
        if self.stopped:
            raise NotInitializedError(
                "the redist CUDA runtime has been stopped (redist.finalize() was called)"
            )

    def _shutdown(self) -> None:
        from cuda.bindings import driver

        if self.stopped:
            return
        self.synchronize()
        with self._retired_lock:
            retired, self._retired = self._retired, {}
        for _, dev, _ in retired.values():
            for p in dev:
                self.dev_free(p)
        if self.memory_api is not None:  # peers' out= still mapped (copies in the user's graphs)
            self.memory_api.close_all()
        # leftover allocations (user arrays never freed, detached results, memory of dropped
        # objects): same order on every rank
        left = sorted((p for p, (_, o) in self._sym.items() if o != "runtime"), key=self.heap_offset)
        if left:
            _log.warning("redist: freeing %d symmetric allocation(s) still live at finalize", len(left))
        for p in left:
            self.sym_free(p)
        if self.anchor:
            self.sym_free(self.anchor)
            self.anchor = 0
        if self.stream:
            driver.cuStreamDestroy(driver.CUstream(self.stream))
            self.stream = 0
        self.stopped = True

    def __repr__(self) -> str:
        return (
            f"<redist.engine.cuda.Runtime rank {self.rank}/{self.nranks} device {self.device_id} sm_{self.arch} "
            f"symmetric {self._sym_bytes} B>"
        )


def _set_env_defaults(comm: MPI.Intracomm) -> None:
    """Single-node jobs: bootstrap over loopback, skip the remote transport. NVLS stays off."""
    os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")
    try:
        from mpi4py import MPI

        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        single = node.Get_size() == comm.Get_size()
        node.Free()
    except Exception:  # noqa: BLE001
        single = comm.Get_size() == 1
    if single:
        os.environ.setdefault("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo")
        os.environ.setdefault("NVSHMEM_REMOTE_TRANSPORT", "none")


def _check_gpu_sharing(comm: MPI.Intracomm, device_id: int, allow_shared: bool) -> bool:
    """Collective: True when some ranks share a GPU (then only if every rank allowed it).

    Several NVSHMEM PEs on one GPU ("limited MPG") turn on-stream team barriers into CPU spins
    that cannot be captured, so only the barrier-free graphs (signal="epoch") run there. It is
    opt-in (``REDIST_SHARED_GPU=1`` or ``initialize(shared_gpu=True)``), for tests and development.
    """
    import socket

    where = None
    try:
        from cuda.bindings import driver

        driver.cuInit(0)
        err, dev = driver.cuDeviceGet(device_id)
        if err == driver.CUresult.CUDA_SUCCESS:
            err, bus = driver.cuDeviceGetPCIBusId(32, dev)
            if err == driver.CUresult.CUDA_SUCCESS:
                where = bus.split(b"\0", 1)[0].decode() if isinstance(bus, bytes) else str(bus)
    except Exception:  # noqa: BLE001 -- no answer: skip the check rather than fail start-up
        where = None
    answers = collective.agree(comm, None, (bool(allow_shared), None if where is None else (socket.gethostname(), where)))
    allowed = [a for a, _ in answers]
    if len(set(allowed)) > 1:
        r = allowed.index(not allowed[0])
        raise InvalidValueError(
            f"shared_gpu (REDIST_SHARED_GPU) differs between ranks: rank 0 has {allowed[0]}, rank {r} has {allowed[r]}; "
            "it must be equal on every rank"
        )
    seen: dict = {}
    shared = False
    for r, (_, k) in enumerate(answers):
        if k is None:
            continue
        if k in seen:
            if not allowed[0]:
                raise NotSupportedError(
                    f"ranks {seen[k]} and {r} both use the GPU at PCI {k[1]} on host {k[0]}: redist runs one process "
                    "per GPU (pass redist.initialize(device_id=...) or set CUDA_VISIBLE_DEVICES per rank); for tests "
                    "and development set REDIST_SHARED_GPU=1 to share a GPU between ranks"
                )
            shared = True
        seen.setdefault(k, r)
    return shared


def visible_devices() -> tuple[int, str | None]:
    """(number of CUDA devices this process can use, why none when 0) without touching a device."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return 0, "cuda-python is not installed (pip install 'redist[cuda]')"
    try:
        (err,) = driver.cuInit(0)
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


def resolve_device(comm: MPI.Intracomm, device_id: int | str | None, *, required: bool = False) -> int | None:
    """Collective: this rank's CUDA device, or None for a CPU-only run (then on every rank).

    ``device_id``: None = "local rank modulo visible devices" when every rank has one (else
    CPU-only, unless ``required``), an integer >= 0 forces that device (NotSupportedError on
    every rank if some rank cannot use it), "cpu" never touches a GPU.
    """
    explicit = device_id is not None and device_id != "cpu"
    bad = None
    if device_id == "cpu":
        ngpus, why = 0, "device_id='cpu'"
    elif device_id is not None and (isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0):
        ngpus, why = 0, "invalid device_id"
        bad = InvalidValueError(f"device_id must be None, 'cpu' or an integer >= 0, got {device_id!r}")
    else:
        ngpus, why = visible_devices()
        if explicit and ngpus and device_id >= ngpus:
            why, ngpus = f"device_id {device_id} but only {ngpus} device(s) are visible", 0
    answers = collective.agree(comm, bad, (ngpus, why))
    if any(n == 0 for n, _ in answers):
        if explicit or required:
            r, (_, w) = next((r, a) for r, a in enumerate(answers) if a[0] == 0)
            which = f"CUDA device {device_id}" if explicit else "a GPU (backends=['nvshmem'])"
            raise NotSupportedError(f"cannot use {which}: on rank {r}, {w}")
        return None
    if explicit:
        return device_id
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    local = node.Get_rank()
    node.Free()
    return local % ngpus


def start(comm: MPI.Intracomm, device_id: int, *, shared_gpu: bool = False) -> Runtime:
    """Collective: CUDA device ``device_id`` + NVSHMEM (UID bootstrap over ``comm``). Returns the Runtime.

    ``shared_gpu``: allow several ranks on one GPU (see :func:`_check_gpu_sharing`).
    """
    global _rt
    with _lock:
        if _rt is not None and not _rt.stopped:
            if (
                _rt.device_id == int(device_id)
                and _rt.nranks == comm.Get_size()
                and _rt.rank == comm.Get_rank()
            ):
                return _rt
            raise InvalidStateError(f"the redist CUDA runtime is already started ({_rt!r}); stop() it first")
        shared = _check_gpu_sharing(comm, int(device_id), shared_gpu)
        if shared and comm.Get_rank() == 0:
            warnings.warn(
                "redist: several ranks share one GPU (REDIST_SHARED_GPU=1): for tests and development only; the "
                "processes time-slice the GPU, so timings mean nothing", RuntimeWarning, stacklevel=3)
        _set_env_defaults(comm)
        rt = Runtime(comm, device_id)
        rt.shared_gpu = shared
        rt._bring_up()
        _rt = rt
        return rt


def stop(finalize_nvshmem: bool = False) -> None:
    """Collective: free what the runtime holds (waits for the GPU first). NVSHMEM stays up unless asked."""
    global _rt
    with _lock:
        rt, _rt = _rt, None
        if rt is not None:
            rt._shutdown()
        if finalize_nvshmem:
            _finalize_nvshmem()


def current() -> Runtime:
    """The started runtime of this process (raises NotInitializedError when none is)."""
    rt = _rt
    if rt is None or rt.stopped:
        raise NotInitializedError(
            "NVSHMEM is not initialised: call redist.initialize() with a GPU (redist.engine.cuda.runtime.start)"
        )
    return rt


def is_started() -> bool:
    return _rt is not None and not _rt.stopped


def _finalize_nvshmem() -> None:
    global _nvshmem_ours
    if not _nvshmem_ours:
        return
    _nvshmem_ours = False
    try:
        import nvshmem.core as nvs

        nvs.finalize()
    except Exception as e:  # noqa: BLE001 -- at exit: report, don't raise
        _log.warning("redist: nvshmem finalize failed: %s", e)
