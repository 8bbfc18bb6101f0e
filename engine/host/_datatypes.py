# SPDX-License-Identifier: Apache-2.0
"""Strided regions (from :class:`~redist.engine.plan.Copy`) as numpy views and MPI datatypes.

Everything here is built once (at lowering or when a buffer is rebound), never per execute.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from ..strided import HostBuffer

if TYPE_CHECKING:
    from mpi4py.MPI import Datatype

    from ..plan import Copy

__all__ = ["copy_views", "fused", "is_contiguous", "region_datatype", "span_bytes"]


def is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """True when a simplified region is one contiguous run (simplify merges everything it can)."""
    return len(shape) == 1 and (strides[0] == 1 or shape[0] == 1)


def span_bytes(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> int:
    """Bytes from the region's first element to the end of its last (positive strides)."""
    if math.prod(shape) == 0:
        return 0
    return (sum((n - 1) * s for n, s in zip(shape, strides)) + 1) * itemsize


def fused(
    shape: Sequence[int], src_strides: Sequence[int], dst_strides: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int]:
    """(shape, src_strides, dst_strides, run): a contiguous innermost dim folded into one item.

    Same rule as :func:`redist.engine.strided.copy_host`, so numpy moves each run with one memcpy.
    """
    if src_strides[-1] == 1 and dst_strides[-1] == 1:
        if len(shape) == 1:
            return (1,), (0,), (0,), shape[0]
        return tuple(shape[:-1]), tuple(src_strides[:-1]), tuple(dst_strides[:-1]), shape[-1]
    return tuple(shape), tuple(src_strides), tuple(dst_strides), 1


def copy_views(
    c: Copy, src: HostBuffer, dst: HostBuffer, src_base: int = 0, dst_base: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Void views ``(dst_view, src_view)`` such that ``np.copyto(dst_view, src_view)`` performs ``c``.

    ``*_base`` are extra element offsets (a staging slot). Built once; copying through them
    allocates nothing.
    """
    shape, ss, ds, run = fused(c.shape, c.src_strides, c.dst_strides)
    d = dst.view(dst_base + c.dst_offset, shape, ds, run)
    s = src.view(src_base + c.src_offset, shape, ss, run)
    return d, s


def region_datatype(
    MPI: ModuleType, shape: Sequence[int], strides: Sequence[int], itemsize: int
) -> Datatype | None:
    """A committed MPI datatype for ``shape`` elements at ``strides`` (elements), or None if contiguous.

    Built from bytes: the innermost contiguous run (or one element) is a contiguous type, each
    outer dimension an ``hvector`` with byte strides, so any itemsize (12-byte items, structured
    records) is moved bit for bit, and the type signature is just ``size*itemsize`` bytes (so
    sender and receiver need not group elements the same way).
    """
    if is_contiguous(shape, strides):
        return None
    if strides[-1] == 1:
        base = MPI.BYTE.Create_contiguous(shape[-1] * itemsize)
        dims = list(zip(shape[:-1], strides[:-1]))
    else:
        base = MPI.BYTE.Create_contiguous(itemsize)
        dims = list(zip(shape, strides))
    t = base
    for n, s in reversed(dims):
        nt = t.Create_hvector(n, 1, s * itemsize)
        t.Free()  # a derived type keeps what it needs of its parts
        t = nt
    t.Commit()
    return t


def empty_bytes(n: int) -> np.ndarray:
    """An engine-owned, page-aligned-enough byte buffer (at least 1 byte so it has an address)."""
    return np.empty(max(int(n), 1), dtype=np.uint8)
