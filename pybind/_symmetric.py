# SPDX-License-Identifier: Apache-2.0
"""Arrays on the NVSHMEM symmetric heap (nvmath-python compatible API), and on the host.

``allocate_symmetric_memory`` / ``free_symmetric_memory`` are collective: every process calls
them, in the same order. redist's GPU operands need **not** be symmetric (its kernels read the
operand locally); symmetric arrays are what ``execute(out=...)`` writes into, because peers
store into it directly. The result returned by the function form :func:`redist.redistribute` is
symmetric too, and is freed with :func:`free_symmetric_memory`. The heap itself is handled by
``redist.engine.cuda.symmetric``; this module makes cupy arrays and torch tensors of it.

``package=numpy`` (beyond nvmath-python) gives host symmetric memory instead: shared memory that
every rank of the node maps (``redist.engine.host.symmetric``). Any host ``out=`` works; one in
host symmetric memory is stored into straight by the peers (host method ``push``), the fastest
way into an array of your own.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np

from ._operands import Operand, _numpy_dtype, as_array, package_of
from .engine.buffer import Buffer
from .engine.errors import InvalidTypeError, InvalidValueError, NotInitializedError

__all__ = ["allocate_symmetric_memory", "free_symmetric_memory"]

_PACKAGES = ("cupy", "torch")
_HOST = "numpy"


def _package_name(package) -> str | None:
    name = package if isinstance(package, str) else getattr(package, "__name__", None)
    return name if name in _PACKAGES else None


def _shape(shape) -> tuple[int, ...]:
    """``shape`` (an int or a sequence of ints) as a tuple; refuses what is not an integer (``2.7``
    would be truncated) and negative extents."""
    items = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)) for s in items):
        raise InvalidValueError(f"shape must be an int or a sequence of ints, got {shape!r}")
    shp = tuple(int(s) for s in items)
    if any(s < 0 for s in shp):
        raise InvalidValueError(f"shape must be non-negative, got {shp}")
    return shp


def _no_gpu() -> NotInitializedError:
    return NotInitializedError(
        "symmetric memory needs redist initialised with a GPU (NVSHMEM); this run is CPU-only "
        "(see redist.initialize(device_id=...) and the [cuda] extra)")


def _cuda_runtime():
    from . import _runtime

    rt = _runtime.context().cuda
    if rt is None:
        raise _no_gpu()
    return rt


def _strides(shape: tuple[int, ...], axis_order) -> tuple[int, ...]:
    n = len(shape)
    if isinstance(axis_order, str):
        if axis_order not in ("C", "F"):
            raise InvalidValueError(
                f"axis_order must be 'C', 'F' or a permutation of the axes, got {axis_order!r}"
            )
        perm = list(range(n)) if axis_order == "C" else list(range(n - 1, -1, -1))
    else:
        perm = [int(a) for a in axis_order]
        if sorted(perm) != list(range(n)):
            raise InvalidValueError(f"axis_order {tuple(axis_order)} is not a permutation of the {n} axes")
    st = [0] * n
    acc = 1
    for ax in reversed(perm):  # perm lists the axes from slowest- to fastest-varying
        st[ax] = acc
        acc *= shape[ax]
    return tuple(st)


def allocate_symmetric_memory(
    shape: int | Sequence[int],
    package,
    *,
    dtype=None,
    axis_order="C",
    make_symmetric: bool = False,
    skip_symmetric_check: bool = False,
    logger: logging.Logger | None = None,
):
    """Collective: an array on the NVSHMEM symmetric heap of this process's GPU, or in host symmetric memory.

    Parameters
    ----------
    shape
        Local shape (int or sequence of ints).
    package
        ``cupy`` or ``torch`` (the module, or its name): GPU memory on the NVSHMEM heap;
        ``numpy``: host memory shared with the other ranks of this node (their peers store
        straight into an ``out=`` there; no GPU needed).
    dtype
        Element type; default float64 for cupy and numpy, ``torch.get_default_dtype()`` for torch.
    axis_order
        "C", "F", or a permutation listing the axes from slowest- to fastest-varying.
    make_symmetric
        Allow different sizes on different processes: on GPUs every process then allocates the
        largest (symmetric allocations must be equal everywhere); on the host each keeps its own.
    skip_symmetric_check
        Trust that every process asks for the same size (no collective size check).
    """
    from . import _runtime

    log = logger if logger is not None else logging.getLogger()
    ctx = _runtime.context()
    host = _host_package(package)
    _same_kind(ctx, host, "allocate_symmetric_memory")
    if host or ctx.cuda is None:  # CPU-only: a GPU package on some rank fails in the host agreement, on every rank
        failure = None
        if not host:
            failure = (InvalidValueError(f"The package must be one of {(*_PACKAGES, _HOST)}. Got {package}.")
                       if _package_name(package) is None else _no_gpu())
        return _allocate_host(shape, dtype, axis_order, make_symmetric, skip_symmetric_check, log, failure)
    from .engine.cuda import symmetric

    rt = _cuda_runtime()
    name = _package_name(package)
    failure, nbytes, shp, st, dt, itemsize = None, 0, (), (), None, 0
    try:
        if name is None:
            raise InvalidValueError(f"The package must be one of {(*_PACKAGES, _HOST)}. Got {package}.")
        shp = _shape(shape)
        if name == "cupy":
            dt = np.dtype("float64" if dtype is None else dtype)
            _numpy_dtype(dt)  # no pointer dtypes (object, StringDType): what operands refuse
            itemsize = dt.itemsize
        else:
            import torch

            dt = torch.get_default_dtype() if dtype is None else dtype
            if not isinstance(dt, torch.dtype):
                raise InvalidTypeError(f"dtype must be a torch.dtype for package torch, got {dtype!r}")
            itemsize = torch.empty((), dtype=dt).element_size()
        st = _strides(shp, axis_order)
        nbytes = math.prod(shp) * itemsize
    except Exception as e:  # noqa: BLE001 -- raised on every rank by symmetric.allocate
        failure = e
    ptr = symmetric.allocate(rt, nbytes, make_symmetric=make_symmetric, skip_symmetric_check=skip_symmetric_check,
                             failure=failure, logger=log, what=f"{name} {shp} {dt}")
    template = Operand(None, name, dt, str(dt), str(dt), Buffer(0, shp, st, itemsize, "cuda", rt.device_id))
    return as_array(Buffer(ptr, shp, st, itemsize, "cuda", rt.device_id), template, owner=rt)


def _same_kind(ctx, host: bool, what: str) -> None:
    """Collective where the run has a GPU (both kinds of symmetric memory exist): every rank's call is
    about the same kind (host or GPU), which take different collective paths."""
    if ctx.cuda is None:
        return
    from .engine import collective

    kinds = collective.agree(ctx.engine.comm, None, host)
    if len(set(kinds)) > 1:
        ranks = ", ".join(str(r) for r, k in enumerate(kinds) if k)
        raise InvalidValueError(f"{what}: rank(s) {ranks} pass host (numpy) memory, the other ranks GPU memory: "
                                "every rank passes the same kind")


def _host_package(package) -> bool:
    return (package if isinstance(package, str) else getattr(package, "__name__", None)) == _HOST


def _allocate_host(shape, dtype, axis_order, make_symmetric: bool, skip_symmetric_check: bool,
                   log: logging.Logger, failure: BaseException | None) -> np.ndarray:
    """Collective: a numpy array in host symmetric memory (engine/host/symmetric.py); ``failure``:
    this rank's problem met before (a GPU package on a CPU-only run), raised on every rank."""
    from . import _runtime

    heap = _runtime.context().engine.host_heap()
    nbytes, shp, st, dt = 0, (), (), np.dtype(np.float64)
    try:
        if failure is not None:
            raise failure
        shp = _shape(shape)
        try:
            dt = np.dtype("float64" if dtype is None else dtype)
        except TypeError as e:
            raise InvalidTypeError(f"dtype must be a numpy dtype for package numpy, got {dtype!r}") from e
        _numpy_dtype(dt)  # no pointer dtypes (object, StringDType, records with an object field): as operands
        st = _strides(shp, axis_order)
        nbytes = math.prod(shp) * dt.itemsize
    except Exception as e:  # noqa: BLE001 -- raised on every rank by heap.allocate
        failure = e
    strides = tuple(s * dt.itemsize for s in st)
    array = heap.allocate(nbytes, make_symmetric=make_symmetric, skip_symmetric_check=skip_symmetric_check,
                          failure=failure, typed=lambda raw: np.ndarray(shp, dtype=dt, buffer=raw, strides=strides))
    log.debug("allocate_symmetric_memory: numpy %s %s in host shared memory (%d bytes)", shp, dt, nbytes)
    return array


def _free_host(arrays) -> None:
    """Collective: free host symmetric arrays (every argument a numpy array, or a failure on every rank)."""
    from . import _runtime

    heap = _runtime.context().engine.host_heap()
    failure, starts = None, []
    for a in arrays:
        if package_of(a) != _HOST:
            failure = InvalidTypeError("free_symmetric_memory: numpy arrays (host symmetric memory) and GPU "
                                       f"arrays cannot be freed in one call, got {type(a).__name__}")
            break
        starts.append((int(a.ctypes.data), int(a.nbytes), a))
    heap.free(starts, failure=failure)


def free_symmetric_memory(*arrays) -> None:
    """Collective: free arrays made by :func:`allocate_symmetric_memory` (same order on every process).

    Waits for all work on the device first (memory in use by a running kernel is never freed).
    A numpy array (host symmetric memory) becomes ordinary memory: the other ranks forget it, and
    it stays valid for as long as it is referenced.
    """
    from . import _runtime
    from .engine.cuda import symmetric

    ctx = _runtime.context()
    host = not arrays or package_of(arrays[0]) == _HOST
    _same_kind(ctx, host, "free_symmetric_memory")
    if host or ctx.cuda is None:
        _free_host(arrays)
        return
    rt = _cuda_runtime()
    failure, ptrs = None, []
    for a in arrays:
        pkg = package_of(a)
        if (
            pkg == "numpy"
            or (pkg == "torch" and a.device.type != "cuda")
            or (pkg == "raw" and getattr(a, "memory", "cpu") != "cuda")
        ):
            failure = InvalidTypeError("free_symmetric_memory called on CPU array/tensor")
        elif pkg not in _PACKAGES:
            failure = InvalidTypeError(f"free_symmetric_memory takes cupy arrays or torch tensors, got {type(a).__name__}")
        else:
            ptrs.append(int(a.data.ptr) if pkg == "cupy" else int(a.data_ptr()))
        if failure is not None:
            break
    symmetric.free(rt, ptrs, failure=failure)  # collective: a wrong argument on one rank fails every rank
