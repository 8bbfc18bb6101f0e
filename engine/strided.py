# SPDX-License-Identifier: Apache-2.0
"""Bit-exact strided views of host memory, for any element size.

Elements are viewed as opaque ``numpy.void`` items of ``itemsize`` bytes, so copies move bytes
(NaN payloads, structured records, 12-byte items all survive). When a copy's innermost dimension
is contiguous on both sides, the whole run becomes one void item, and numpy moves it with one
``memcpy`` instead of an element loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .plan import Copy

__all__ = ["HostBuffer", "copy_host"]


class _Interface:
    __slots__ = ("__array_interface__", "_keep")


class HostBuffer:
    """A raw host address + the object keeping it alive; makes strided void views of it."""

    __slots__ = ("ptr", "itemsize", "owner")

    ptr: int
    itemsize: int
    owner: object

    def __init__(self, ptr: int, itemsize: int, owner: object = None):
        self.ptr = int(ptr)
        self.itemsize = int(itemsize)
        self.owner = owner

    @classmethod
    def of(cls, arr: np.ndarray) -> HostBuffer:
        """The buffer whose element 0 is ``arr``'s first element."""
        return cls(arr.__array_interface__["data"][0], arr.dtype.itemsize, arr)

    def view(self, offset: int, shape: Sequence[int], strides: Sequence[int], run: int = 1) -> np.ndarray:
        """Void view: ``shape``/``strides`` in elements; the last ``run`` elements fused per item."""
        it = _Interface()
        it._keep = self.owner
        it.__array_interface__ = {
            "version": 3,
            "data": (self.ptr + offset * self.itemsize, False),
            "shape": tuple(shape),
            "strides": tuple(s * self.itemsize for s in strides),
            "typestr": f"|V{self.itemsize * run}",
        }
        return np.asarray(it)


def _fused(c: Copy) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int]:
    """(shape, src_strides, dst_strides, run) with a contiguous innermost dim folded into the item."""
    if c.contiguous_inner:
        if len(c.shape) == 1:
            return (1,), (0,), (0,), c.shape[0]
        return c.shape[:-1], c.src_strides[:-1], c.dst_strides[:-1], c.shape[-1]
    return c.shape, c.src_strides, c.dst_strides, 1


def copy_host(c: Copy, src: HostBuffer, dst: HostBuffer, src_base: int = 0, dst_base: int = 0) -> None:
    """Carry out ``c`` from ``src`` to ``dst``; ``*_base`` add element offsets (staging slots)."""
    if c.size == 0:
        return
    shape, ss, ds, run = _fused(c)
    d = dst.view(dst_base + c.dst_offset, shape, ds, run)
    s = src.view(src_base + c.src_offset, shape, ss, run)
    np.copyto(d, s, casting="no")
