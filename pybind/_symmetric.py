# SPDX-License-Identifier: Apache-2.0
"""Arrays on the NVSHMEM symmetric heap (nvmath-python compatible API).

``allocate_symmetric_memory`` / ``free_symmetric_memory`` are collective: every process calls
them, in the same order. redist's GPU operands need **not** be symmetric (its kernels read the
operand locally); symmetric arrays are what ``execute(out=...)`` writes into, because peers
store into it directly. The result returned by the function form :func:`redist.redistribute` is
symmetric too, and is freed with :func:`free_symmetric_memory`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np

from ._operands import package_of
from .engine.errors import InvalidTypeError, InvalidValueError, NotInitializedError

__all__ = ["allocate_symmetric_memory", "free_symmetric_memory"]

_PACKAGES = ("cupy", "torch")


def _package_name(package) -> str | None:
    name = package if isinstance(package, str) else getattr(package, "__name__", None)
    return name if name in _PACKAGES else None


def _cuda_runtime():
    from . import _runtime

    ctx = _runtime.get_context()
    rt = getattr(ctx, "cuda", None)
    if rt is None:
        raise NotInitializedError(
            "symmetric memory needs redist initialised with a GPU (NVSHMEM); this run is CPU-only "
            "(see redist.initialize(device_id=...) and the [cuda] extra)"
        )
    return ctx, rt


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


class _CudaArrayInterface:
    """A plain uint8 device buffer, for torch.as_tensor (zero copy)."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 3,
            "strides": None,
        }


def wrap_device(ptr: int, nbytes_alloc: int, shape, strides, dtype, package: str, device_id: int, owner=None):
    """A cupy array / torch tensor over device memory at ``ptr`` (element ``strides``)."""
    shape = tuple(int(s) for s in shape)
    if package == "cupy":
        import cupy as cp

        dt = np.dtype(dtype)
        mem = cp.cuda.UnownedMemory(ptr, max(nbytes_alloc, 1), owner, device_id=device_id)
        return cp.ndarray(
            shape,
            dtype=dt,
            memptr=cp.cuda.MemoryPointer(mem, 0),
            strides=tuple(s * dt.itemsize for s in strides),
        )
    import torch

    t8 = torch.as_tensor(_CudaArrayInterface(ptr, max(nbytes_alloc, 1)), device=f"cuda:{device_id}")
    itemsize = torch.empty((), dtype=dtype).element_size()
    n = math.prod(shape) if shape else 1
    span = (sum((e - 1) * s for e, s in zip(shape, strides)) + 1) if n else 0
    flat = t8[: span * itemsize].view(dtype)
    return flat.as_strided(shape, tuple(strides), 0)


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
    """Collective: an array on the NVSHMEM symmetric heap of this process's GPU.

    Parameters
    ----------
    shape
        Local shape (int or sequence of ints).
    package
        ``cupy`` or ``torch`` (the module, or its name).
    dtype
        Element type; default float64 for cupy, ``torch.get_default_dtype()`` for torch.
    axis_order
        "C", "F", or a permutation listing the axes from slowest- to fastest-varying.
    make_symmetric
        Allow different sizes on different processes: every process then allocates the
        largest (symmetric allocations must be equal everywhere).
    skip_symmetric_check
        Trust that every process asks for the same size (no collective size check).
    """
    name = _package_name(package)
    if name is None:
        raise InvalidValueError(f"The package must be one of {_PACKAGES}. Got {package}.")
    log = logger if logger is not None else logging.getLogger()
    ctx, rt = _cuda_runtime()
    err, nbytes, shp, st, dt, itemsize = None, 0, (), (), None, 0
    try:
        shp = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        if any(s < 0 for s in shp):
            raise InvalidValueError(f"shape must be non-negative, got {shp}")
        if name == "cupy":
            dt = np.dtype("float64" if dtype is None else dtype)
            itemsize = dt.itemsize
        else:
            import torch

            dt = torch.get_default_dtype() if dtype is None else dtype
            if not isinstance(dt, torch.dtype):
                raise InvalidTypeError(f"dtype must be a torch.dtype for package torch, got {dtype!r}")
            itemsize = torch.empty((), dtype=dt).element_size()
        st = _strides(shp, axis_order)
        nbytes = math.prod(shp) * itemsize
    except Exception as e:  # noqa: BLE001 -- raised on every rank below
        err = e
    comm = ctx.process_group.comm
    if skip_symmetric_check:
        if err is not None:
            raise err
        alloc = nbytes
    else:
        every = comm.allgather((None if err is None else (type(err).__name__, str(err)), nbytes))
        _raise_first(err, [e for e, _ in every], comm.Get_rank())
        sizes = [n for _, n in every]
        if len(set(sizes)) > 1 and not make_symmetric:
            raise InvalidValueError(
                f"symmetric allocations must have the same size on every process, got {sizes} bytes; pass "
                "make_symmetric=True to pad every process to the largest"
            )
        alloc = max(sizes)
    ptr = rt.sym_alloc(alloc, owner="user")
    arr = wrap_device(ptr, alloc, shp, st, dt, name, rt.device_id, owner=rt)
    log.debug(
        "allocate_symmetric_memory: %s %s %s at heap offset %d (%d bytes)",
        name,
        shp,
        dt,
        rt.heap_offset(ptr),
        alloc,
    )
    return arr


def _raise_first(err, every, me) -> None:
    from .engine import errors as E

    for r, e in enumerate(every):
        if e is None:
            continue
        if r == me and err is not None:
            raise err
        cls = getattr(E, e[0], None)
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            cls = {"TypeError": TypeError, "ValueError": ValueError}.get(e[0], InvalidValueError)
        raise cls(f"rank {r}: {e[1]}")


def _device_ptr(a, pkg: str) -> int:
    return int(a.data.ptr) if pkg == "cupy" else int(a.data_ptr())


def free_symmetric_memory(*arrays) -> None:
    """Collective: free arrays made by :func:`allocate_symmetric_memory` (same order on every process).

    Waits for all work on the device first (memory in use by a running kernel is never freed).
    """
    pkgs = []
    for a in arrays:
        pkg = package_of(a)
        if (
            pkg == "numpy"
            or (pkg == "torch" and a.device.type != "cuda")
            or (pkg == "raw" and getattr(a, "memory", "cpu") != "cuda")
        ):
            raise TypeError("free_symmetric_memory called on CPU array/tensor")
        if pkg not in _PACKAGES:
            raise InvalidTypeError(
                f"free_symmetric_memory takes cupy arrays or torch tensors, got {type(a).__name__}"
            )
        pkgs.append(pkg)
    ctx, rt = _cuda_runtime()
    err, ptrs = None, []
    try:
        for a, pkg in zip(arrays, pkgs):
            ptr = _device_ptr(a, pkg)
            ent = rt.sym_lookup(ptr)
            if ent is None:
                if rt.was_freed(ptr):
                    raise InvalidValueError(
                        f"double free: the symmetric array at 0x{ptr:x} was already freed by free_symmetric_memory"
                    )
                raise InvalidValueError(
                    f"the {pkg} array at 0x{ptr:x} is not on the symmetric heap (it was not allocated by "
                    "redist.allocate_symmetric_memory)"
                )
            base, _, owner = ent
            if base != ptr:
                raise InvalidValueError(
                    "pass the array returned by allocate_symmetric_memory, not a view into it"
                )
            if owner == "engine":
                raise InvalidValueError(
                    "this array is the persistent result of a live Redistribute object; Redistribute.free() frees it"
                )
            if owner != "user":
                raise InvalidValueError("this symmetric allocation belongs to the redist runtime")
            if ptr in ptrs:
                raise InvalidValueError("the same array is passed twice")
            ptrs.append(ptr)
    except Exception as e:  # noqa: BLE001 -- raised on every rank below
        err = e
    comm = ctx.process_group.comm
    every = comm.allgather(None if err is None else (type(err).__name__, str(err)))
    _raise_first(err, every, comm.Get_rank())
    rt.synchronize()
    for p in ptrs:
        rt.sym_free(p)
