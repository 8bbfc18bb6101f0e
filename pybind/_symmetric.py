# SPDX-License-Identifier: Apache-2.0
"""Arrays on the NVSHMEM symmetric heap (nvmath-python compatible API).

``allocate_symmetric_memory`` / ``free_symmetric_memory`` are collective: every process calls
them, in the same order. redist's GPU operands need **not** be symmetric (its kernels read the
operand locally); symmetric arrays are what ``execute(out=...)`` writes into, because peers
store into it directly. The result returned by the function form :func:`redist.redistribute` is
symmetric too, and is freed with :func:`free_symmetric_memory`. The heap itself is handled by
``redist.engine.cuda.symmetric``; this module makes cupy arrays and torch tensors of it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np

from ._operands import Operand, as_array, package_of
from .engine.buffer import Buffer
from .engine.errors import InvalidTypeError, InvalidValueError, NotInitializedError

__all__ = ["allocate_symmetric_memory", "free_symmetric_memory"]

_PACKAGES = ("cupy", "torch")


def _package_name(package) -> str | None:
    name = package if isinstance(package, str) else getattr(package, "__name__", None)
    return name if name in _PACKAGES else None


def _cuda_runtime():
    from . import _runtime

    rt = _runtime.context().cuda
    if rt is None:
        raise NotInitializedError(
            "symmetric memory needs redist initialised with a GPU (NVSHMEM); this run is CPU-only "
            "(see redist.initialize(device_id=...) and the [cuda] extra)"
        )
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
    from .engine.cuda import symmetric

    log = logger if logger is not None else logging.getLogger()
    rt = _cuda_runtime()
    name = _package_name(package)
    failure, nbytes, shp, st, dt, itemsize = None, 0, (), (), None, 0
    try:
        if name is None:
            raise InvalidValueError(f"The package must be one of {_PACKAGES}. Got {package}.")
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
    except Exception as e:  # noqa: BLE001 -- raised on every rank by symmetric.allocate
        failure = e
    ptr = symmetric.allocate(rt, nbytes, make_symmetric=make_symmetric, skip_symmetric_check=skip_symmetric_check,
                             failure=failure, logger=log, what=f"{name} {shp} {dt}")
    template = Operand(None, name, dt, str(dt), str(dt), Buffer(0, shp, st, itemsize, "cuda", rt.device_id))
    return as_array(Buffer(ptr, shp, st, itemsize, "cuda", rt.device_id), template, owner=rt)


def free_symmetric_memory(*arrays) -> None:
    """Collective: free arrays made by :func:`allocate_symmetric_memory` (same order on every process).

    Waits for all work on the device first (memory in use by a running kernel is never freed).
    """
    from .engine.cuda import symmetric

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
