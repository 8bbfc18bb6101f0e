# SPDX-License-Identifier: Apache-2.0
"""Operands: numpy, torch (CPU/CUDA), cupy arrays and raw pointers, seen through one lens.

:func:`wrap` turns a user array into an :class:`Operand` (package, memory space, device, data
pointer, shape, element strides, dtype). :class:`RawArray` is a pointer + shape + strides +
element size, used by the C ABI (``redist_create`` hands redist a ``void*``).

Result arrays are created here too, in the operand's package and the plan's order, by
:func:`empty_like_host` / :func:`from_device_pointer`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .engine import geometry as geo
from .engine.errors import InvalidTypeError, InvalidValueError, NotSupportedError

__all__ = ["RawArray", "Operand", "wrap", "package_of", "host_result", "host_view"]


class RawArray:
    """A raw buffer: ``ptr`` + ``shape`` + element ``strides`` + ``itemsize`` (C ABI operands).

    ``memory`` is "cpu" or "cuda"; ``device_id`` the CUDA device of a "cuda" buffer. The caller
    keeps the memory alive. ``owner`` may hold an object that owns it (engine-owned results).
    """

    __slots__ = ("ptr", "shape", "strides", "itemsize", "memory", "device_id", "owner", "dtype")

    def __init__(self, ptr: int, shape, strides=None, itemsize: int = 1, *, memory: str = "cpu",
                 device_id: int | None = None, owner=None, order: str = "C", dtype=None):
        self.ptr = int(ptr)
        self.shape = tuple(int(v) for v in shape)
        self.strides = tuple(int(v) for v in strides) if strides is not None else geo.dense_strides(self.shape, order)
        self.itemsize = int(itemsize)
        self.memory = memory
        self.device_id = device_id
        self.owner = owner
        self.dtype = np.dtype(dtype) if dtype is not None else np.dtype((np.void, self.itemsize))

    def __repr__(self):
        return (f"RawArray(ptr=0x{self.ptr:x}, shape={self.shape}, strides={self.strides}, "
                f"itemsize={self.itemsize}, memory={self.memory!r})")


@dataclass
class Operand:
    """What redist needs to know about one array. ``strides`` are in elements."""

    obj: object
    package: str          # "numpy" | "torch" | "cupy" | "raw"
    memory: str           # "cpu" | "cuda"
    device_id: int | None
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: object         # numpy dtype, or torch dtype for torch operands
    dtype_name: str
    itemsize: int

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def layouts(self) -> tuple[str, ...]:
        if self.size == 0:
            return ("C", "F")
        return geo.layout_candidates(self.shape, self.strides)


def package_of(obj) -> str | None:
    t = type(obj)
    mod = t.__module__.split(".")[0]
    if isinstance(obj, RawArray):
        return "raw"
    if isinstance(obj, np.ndarray):
        return "numpy"
    if mod == "torch" and t.__name__ in ("Tensor", "Parameter"):
        return "torch"
    if mod == "cupy" and t.__name__ == "ndarray":
        return "cupy"
    return None


def _element_strides(byte_strides, itemsize, shape) -> tuple[int, ...]:
    out = []
    for s, n in zip(byte_strides, shape):
        if n > 1 and s % itemsize:
            raise InvalidValueError(f"strides {tuple(byte_strides)} (bytes) are not multiples of the element size {itemsize}")
        out.append(s // itemsize)
    return tuple(out)


def _check_strides(shape, strides):
    for ax, (n, s) in enumerate(zip(shape, strides)):
        if n > 1 and s <= 0:
            raise NotSupportedError(
                f"operand has stride {s} on axis {ax} (extent {n}); only positive strides are supported "
                "(pass a copy, e.g. numpy.ascontiguousarray)"
            )
    # self-overlapping layouts (two indices, one address) cannot be a distributed box
    dims = sorted((s, n) for n, s in zip(shape, strides) if n > 1)
    span = 1
    for s, n in dims:
        if s < span:
            raise NotSupportedError(f"operand strides {tuple(strides)} make elements overlap in memory")
        span = s * n


def wrap(obj) -> Operand:
    """Describe ``obj``; raises InvalidTypeError for unsupported objects."""
    pkg = package_of(obj)
    if pkg is None:
        raise InvalidTypeError(
            f"{type(obj).__module__}.{type(obj).__name__} not supported yet. Currently must be one of "
            "['numpy', 'cupy', 'torch'] (or redist.RawArray)"
        )
    if pkg == "numpy":
        shape = tuple(obj.shape)
        st = _element_strides(obj.strides, obj.itemsize, shape)
        op = Operand(obj, "numpy", "cpu", None, obj.__array_interface__["data"][0], shape, st, obj.dtype,
                     obj.dtype.name if obj.dtype.fields is None else str(obj.dtype), obj.dtype.itemsize)
    elif pkg == "torch":
        shape = tuple(obj.shape)
        dev = obj.device
        op = Operand(obj, "torch", "cuda" if dev.type == "cuda" else "cpu", dev.index if dev.type == "cuda" else None,
                     obj.data_ptr(), shape, tuple(obj.stride()), obj.dtype, str(obj.dtype).replace("torch.", ""),
                     obj.element_size())
        if dev.type not in ("cpu", "cuda"):
            raise NotSupportedError(f"torch tensors on {dev.type!r} are not supported (cpu or cuda only)")
    elif pkg == "cupy":
        shape = tuple(obj.shape)
        st = _element_strides(obj.strides, obj.itemsize, shape)
        op = Operand(obj, "cupy", "cuda", obj.device.id, obj.data.ptr, shape, st, obj.dtype, obj.dtype.name,
                     obj.dtype.itemsize)
    else:
        op = Operand(obj, "raw", obj.memory, obj.device_id, obj.ptr, obj.shape, obj.strides, obj.dtype,
                     f"raw{obj.itemsize}", obj.itemsize)
    if op.itemsize <= 0:
        raise InvalidValueError(f"element size must be positive, got {op.itemsize}")
    if op.size == 0:  # nothing to address: numpy/torch strides of empty arrays are arbitrary
        op.strides = geo.dense_strides(op.shape, "C")
    else:
        _check_strides(op.shape, op.strides)
    return op


def host_view(op: Operand):
    """HostBuffer for a host operand (pointer to its first element)."""
    from .engine.strided import HostBuffer

    return HostBuffer(op.ptr, op.itemsize, op.obj)


def host_result(template: Operand, shape, order: str):
    """A new host array for results: same package and dtype as ``template``, dense in ``order``."""
    if template.package == "numpy":
        return np.empty(shape, dtype=template.dtype, order=order)
    if template.package == "torch":
        import torch

        if order == "C" or len(shape) < 2:
            return torch.empty(shape, dtype=template.dtype)
        return torch.empty(tuple(reversed(shape)), dtype=template.dtype).permute(*reversed(range(len(shape))))
    if template.package == "raw":
        buf = np.empty(max(1, math.prod(shape)) * template.itemsize, dtype=np.uint8)
        return RawArray(buf.ctypes.data, shape, None, template.itemsize, memory="cpu", owner=buf, order=order,
                        dtype=template.dtype)
    raise InvalidTypeError(f"cannot make a host result for package {template.package!r}")
