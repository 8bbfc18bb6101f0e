# SPDX-License-Identifier: Apache-2.0
"""Operands: numpy, torch (CPU/CUDA), cupy arrays and raw pointers, seen through one lens.

:func:`wrap` turns a user array into an :class:`Operand`: its package, its dtype (with a *key*
that tells byte orders, field names and units apart) and the engine :class:`Buffer` the
backends work on. :class:`RawArray` is a pointer + shape + strides + element size, used by the
C ABI. :func:`as_array` makes a result array of the operand's package over an engine buffer.
Strides of any sign are accepted (``a[::-1]``); dtypes that hold pointers (``object``, numpy's
``StringDType``) are refused: copying pointers between processes would crash.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .engine import geometry as geo
from .engine.buffer import Buffer, byte_extent
from .engine.errors import InvalidTypeError, InvalidValueError, NotSupportedError

__all__ = ["RawArray", "Operand", "SIGNATURES", "as_array", "data_pointer", "layout_signature", "pointer_of",
           "package_of", "wrap"]


class RawArray:
    """A raw buffer: ``ptr`` + ``shape`` + element ``strides`` + ``itemsize`` (C ABI operands).

    ``memory`` is "cpu" or "cuda"; ``device_id`` the CUDA device of a "cuda" buffer. The caller
    keeps the memory alive. ``owner`` may hold an object that owns it (engine-owned results).
    ``readonly`` marks memory redist must never write (an ``out=`` is refused).
    """

    __slots__ = ("ptr", "shape", "strides", "itemsize", "memory", "device_id", "owner", "dtype", "readonly",
                 "__weakref__")

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    itemsize: int
    memory: str
    device_id: int | None
    owner: object
    dtype: np.dtype
    readonly: bool

    def __init__(self, ptr: int, shape: Sequence[int], strides: Sequence[int] | None = None, itemsize: int = 1, *,
                 memory: str = "cpu", device_id: int | None = None, owner: object = None, order: str = "C",
                 dtype: npt.DTypeLike | None = None, readonly: bool = False) -> None:
        self.ptr = int(ptr)
        self.shape = tuple(int(v) for v in shape)
        self.strides = tuple(int(v) for v in strides) if strides is not None else geo.dense_strides(self.shape, order)
        self.itemsize = int(itemsize)
        self.memory = memory
        self.device_id = device_id
        self.owner = owner
        self.dtype = np.dtype(dtype) if dtype is not None else np.dtype((np.void, self.itemsize))
        self.readonly = bool(readonly)

    def __repr__(self) -> str:
        return (f"RawArray(ptr=0x{self.ptr:x}, shape={self.shape}, strides={self.strides}, "
                f"itemsize={self.itemsize}, memory={self.memory!r})")


@dataclass
class Operand:
    """What redist needs to know about one user array."""

    obj: object
    package: str          # "numpy" | "torch" | "cupy" | "raw"
    dtype: object         # numpy dtype, or torch dtype for torch operands
    dtype_name: str       # for messages, e.g. "float64", ">f8", "[('a', '<i4')]"
    dtype_key: str        # equal iff the element types are the same (byte order, fields, units)
    buffer: Buffer

    # the Buffer's fields, for messages and checks
    memory = property(lambda self: self.buffer.memory)
    device_id = property(lambda self: self.buffer.device_id)
    ptr = property(lambda self: self.buffer.ptr)
    shape = property(lambda self: self.buffer.shape)
    strides = property(lambda self: self.buffer.strides)
    itemsize = property(lambda self: self.buffer.itemsize)
    size = property(lambda self: self.buffer.size)

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


def _numpy_dtype(dt: np.dtype) -> tuple[str, str]:
    """(name for messages, key) of a numpy dtype; refuses dtypes that hold pointers."""
    if dt.hasobject:
        raise InvalidTypeError(
            f"dtype {dt} holds Python object pointers, which cannot be copied between processes; use a "
            "dtype of plain values (numbers, fixed-size strings or records of them)"
        )
    simple = dt.fields is None and dt.subdtype is None
    key = dt.str if simple else str(dt)
    return (dt.name if simple and dt.isnative else key), key


def _element_strides(byte_strides, itemsize, shape) -> tuple[int, ...]:
    out = []
    for s, n in zip(byte_strides, shape):
        if n > 1 and s % itemsize:
            raise InvalidValueError(
                f"strides {tuple(byte_strides)} (bytes) are not multiples of the element size {itemsize}")
        out.append(s // itemsize if n > 1 else 0)
    return tuple(out)


def wrap(obj) -> Operand:
    """Describe ``obj``; raises InvalidTypeError for unsupported objects and pointer dtypes."""
    pkg = package_of(obj)
    if pkg is None:
        raise InvalidTypeError(
            f"{type(obj).__module__}.{type(obj).__name__} not supported yet. Currently must be one of "
            "['numpy', 'cupy', 'torch'] (or redist.RawArray)"
        )
    if pkg == "numpy":
        name, key = _numpy_dtype(obj.dtype)
        shape = tuple(obj.shape)
        buf = Buffer(obj.__array_interface__["data"][0], shape, _element_strides(obj.strides, obj.itemsize, shape),
                     obj.dtype.itemsize, "cpu", None, not obj.flags.writeable, obj)
        op = Operand(obj, "numpy", obj.dtype, name, key, buf)
    elif pkg == "torch":
        dev = obj.device
        if dev.type not in ("cpu", "cuda"):
            raise NotSupportedError(f"torch tensors on {dev.type!r} are not supported (cpu or cuda only)")
        if obj.is_conj() or obj.is_neg():  # a lazy flag over the memory, which redist moves as it is
            flag, query = ("conjugate", "conj") if obj.is_conj() else ("negation", "neg")
            raise InvalidValueError(
                f"the torch tensor carries a lazy {flag} (is_{query}() is True): its memory does not hold "
                f"the values it shows, and redist moves memory; pass t.resolve_{query}() (a copy with the values)")
        shape = tuple(obj.shape)
        cuda = dev.type == "cuda"
        name = str(obj.dtype).replace("torch.", "")
        strides = tuple(s if n > 1 else 0 for n, s in zip(shape, obj.stride()))
        _check_torch_storage(obj, shape, strides)
        buf = Buffer(obj.data_ptr(), shape, strides, obj.element_size(), "cuda" if cuda else "cpu",
                     dev.index if cuda else None, False, obj)
        op = Operand(obj, "torch", obj.dtype, name, "torch." + name, buf)
    elif pkg == "cupy":
        name, key = _numpy_dtype(obj.dtype)
        shape = tuple(obj.shape)
        buf = Buffer(obj.data.ptr, shape, _element_strides(obj.strides, obj.itemsize, shape), obj.dtype.itemsize,
                     "cuda", obj.device.id, False, obj)
        op = Operand(obj, "cupy", obj.dtype, name, key, buf)
    else:
        if obj.itemsize <= 0:
            raise InvalidValueError(f"element size must be positive, got {obj.itemsize}")
        buf = Buffer(obj.ptr, obj.shape, tuple(s if n > 1 else 0 for n, s in zip(obj.shape, obj.strides)),
                     obj.itemsize, obj.memory, obj.device_id, obj.readonly, obj)
        op = Operand(obj, "raw", obj.dtype, f"raw{obj.itemsize}", f"raw{obj.itemsize}", buf)
    if op.itemsize <= 0:
        raise InvalidValueError(f"element size must be positive, got {op.itemsize}")
    if op.size == 0:  # nothing to address: strides of empty arrays are arbitrary
        b = op.buffer
        op.buffer = Buffer(b.ptr, b.shape, geo.dense_strides(b.shape, "C"), b.itemsize, b.memory, b.device_id,
                           b.readonly, b.owner)
    return op


def _check_torch_storage(obj, shape: tuple[int, ...], strides: tuple[int, ...]) -> None:
    """Refuse a torch tensor that reaches outside its storage (one whose storage was shrunk in place,
    ``untyped_storage().resize_()``: torch itself refuses to use it; redist would read or write past it)."""
    if not math.prod(shape):
        return
    itemsize = obj.element_size()
    lo, hi = byte_extent(shape, strides, itemsize)
    start = obj.storage_offset() * itemsize
    nbytes = obj.untyped_storage().nbytes()
    if start + lo < 0 or start + hi > nbytes:
        raise InvalidValueError(
            f"the torch tensor spans bytes [{start + lo}, {start + hi}) of its storage, which holds {nbytes} bytes "
            "(was the storage resized in place?)")


_data_reader = None  # the engine's reader (engine/host/compiled.py), imported at the first use


def data_pointer(array: np.ndarray) -> int:
    """The address of element 0 of the numpy ``array``, read anew (numpy's ``__setstate__`` moves an
    array's data in place): one C call where the compiled replays are built. Their module is imported
    at the first call, so that ``import redist`` imports no backend."""
    global _data_reader
    if _data_reader is None:
        from .engine.host.compiled import data_pointer as reader

        _data_reader = reader
    return _data_reader(array)


def _numpy_signature(obj) -> tuple:  # its data too (__setstate__ moves it), and a record's names (settable)
    return data_pointer(obj), obj.shape, obj.strides, obj.dtype, obj.dtype.names


def _raw_signature(obj) -> tuple:
    return obj.ptr, obj.shape, obj.strides, obj.itemsize, obj.memory, obj.device_id, obj.dtype, obj.readonly


def _torch_signature(obj) -> tuple:
    # What can change under the same tensor object, with or without a new version (``.data =``,
    # torch.autograd._unsafe_preserve_version_counter keep it): its address, layout, dtype, device, place in its storage
    # and the storage's size (shrunk in place: untyped_storage().resize_()), the conjugate and negative bits (wrap()
    # refuses them; ``.data = z.conj().imag`` sets one). Not its version: inference tensors have none, and nothing
    # that bumps it changes what a check reads without changing one of these.
    return (obj.data_ptr(), obj.shape, obj.stride(), obj.dtype, obj.device, obj.untyped_storage().nbytes(),
            obj.storage_offset(), obj.is_conj(), obj.is_neg())


def _cupy_signature(obj) -> tuple:
    return obj.data.ptr, obj.shape, obj.strides, obj.dtype


#: :func:`layout_signature` per package (:func:`package_of`'s names), without its dispatch: the hot
#: path of an out= taken again, whose package was checked when its signature was first taken
SIGNATURES = {"numpy": _numpy_signature, "raw": _raw_signature, "torch": _torch_signature,
              "cupy": _cupy_signature}

def layout_signature(obj) -> tuple:
    """What of ``obj`` can change in place without changing the object (numpy: shape, strides and
    dtype are settable, so are a record dtype's names, ``__setstate__`` moves the data; torch:
    ``resize_``/``set_`` also move the data; RawArray: every field):
    equal signatures of one object mean :func:`wrap` would describe it the same way."""
    if isinstance(obj, np.ndarray):
        return _numpy_signature(obj)
    if isinstance(obj, RawArray):
        return _raw_signature(obj)
    if package_of(obj) == "torch":
        return _torch_signature(obj)
    return _cupy_signature(obj)


def pointer_of(obj, package: str) -> int:
    """The address of element 0 of ``obj`` (the hot path of reset_operand_unchecked)."""
    if package == "numpy":
        return obj.__array_interface__["data"][0]
    if package == "torch":
        return obj.data_ptr()
    if package == "cupy":
        return obj.data.ptr
    return obj.ptr


class _CudaArrayInterface:
    """A plain uint8 device buffer, for torch.as_tensor (zero copy)."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3,
                                         "strides": None}


def _span(shape, strides) -> int:
    if math.prod(shape) == 0:
        return 0
    return sum((n - 1) * s for n, s in zip(shape, strides)) + 1


def _empty(shape, template: Operand, buf: Buffer):
    """An empty array of ``template``'s package and dtype, where ``buf`` lives."""
    if template.package == "numpy":
        return np.empty(shape, dtype=template.dtype)
    if template.package == "cupy":
        import cupy as cp

        with cp.cuda.Device(buf.device_id):
            return cp.empty(shape, dtype=template.dtype)
    import torch

    device = "cpu" if buf.memory == "cpu" else f"cuda:{buf.device_id}"
    return torch.empty(shape, dtype=template.dtype, device=device)


def as_array(buf: Buffer, template: Operand, owner=None):
    """An array of ``template``'s package and dtype over ``buf`` (zero copy; positive strides).

    ``owner`` keeps the memory alive (stored on the array where the package allows).
    """
    shape, strides, isz = buf.shape, buf.strides, buf.itemsize
    nbytes = max(_span(shape, strides) * isz, 1)
    pkg = template.package
    if pkg == "raw":
        return RawArray(buf.ptr, shape, strides, isz, memory=buf.memory, device_id=buf.device_id,
                        owner=owner if owner is not None else buf.owner, dtype=template.dtype)
    if math.prod(shape) == 0:  # no bytes to view (a byte view of fewer bytes than one element cannot be typed)
        return _empty(shape, template, buf)
    if buf.memory == "cpu":
        base = buf.owner if isinstance(buf.owner, np.ndarray) else None
        if base is None:
            import ctypes

            base = np.frombuffer((ctypes.c_char * nbytes).from_address(buf.ptr), np.uint8)
        start = buf.ptr - base.ctypes.data  # the owner may hold several results (one per field)
        raw = base if base.ndim == 1 and base.dtype == np.uint8 else base.reshape(-1).view(np.uint8)
        flat = raw[start:start + nbytes]
        if pkg == "numpy":
            return np.ndarray(shape, dtype=template.dtype, buffer=flat, strides=tuple(s * isz for s in strides))
        import torch

        t8 = torch.from_numpy(flat)
        return t8.view(template.dtype).as_strided(shape, strides) if shape else t8.view(template.dtype)[:1].reshape(())
    if pkg == "cupy":
        import cupy as cp

        mem = cp.cuda.UnownedMemory(buf.ptr, nbytes, owner if owner is not None else buf.owner,
                                    device_id=buf.device_id)
        return cp.ndarray(shape, dtype=template.dtype, memptr=cp.cuda.MemoryPointer(mem, 0),
                          strides=tuple(s * isz for s in strides))
    import torch

    t8 = torch.as_tensor(_CudaArrayInterface(buf.ptr, nbytes), device=f"cuda:{buf.device_id}")
    return t8.view(template.dtype).as_strided(shape, strides)
