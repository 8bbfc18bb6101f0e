# SPDX-License-Identifier: Apache-2.0
"""Engine buffers: what a backend needs to know about a piece of memory, and nothing more.

A :class:`Buffer` is an address (of element ``(0, ..., 0)``), a shape, element strides (any
sign, zero allowed), the element size, the memory space ("cpu" or "cuda"), the CUDA device, a
read-only flag and an ``owner`` that keeps the memory alive. The API layer turns user arrays
(numpy, torch, cupy, raw pointers) into Buffers; backends are typed on Buffers only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Buffer", "byte_extent", "self_overlapping"]


def byte_extent(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> tuple[int, int]:
    """``(lo, hi)``: the bytes ``[ptr + lo, ptr + hi)`` that a strided array at ``ptr`` touches.

    ``(0, 0)`` for an empty array. Negative strides reach below ``ptr``.
    """
    if math.prod(shape) == 0:
        return 0, 0
    lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
    return lo * itemsize, (hi + 1) * itemsize


def self_overlapping(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """True when two different indices reach the same element (zero strides, or tangled ones)."""
    dims = sorted((abs(s), n) for n, s in zip(shape, strides) if n > 1)
    if math.prod(shape) == 0:
        return False
    span = 1
    for s, n in dims:
        if s < span:
            return True
        span = s * n
    return False


@dataclass(frozen=True)
class Buffer:
    """A strided array in memory, as the engine sees it (see the module docstring)."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    itemsize: int
    memory: str = "cpu"
    device_id: int | None = None
    readonly: bool = False
    owner: object = None

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    def address_range(self) -> tuple[int, int]:
        """``[lo, hi)`` absolute addresses of every byte the array touches (lo == hi if empty)."""
        lo, hi = byte_extent(self.shape, self.strides, self.itemsize)
        return self.ptr + lo, self.ptr + hi

    def overlaps(self, other: Buffer) -> bool:
        """True when both live in the same memory space and their address ranges intersect
        (conservative: interleaved buffers that share no byte, such as ``z.real`` and ``z.imag``,
        count as overlapping)."""
        if self.memory != other.memory or self.device_id != other.device_id:
            return False
        a0, a1 = self.address_range()
        b0, b1 = other.address_range()
        return a0 < b1 and b0 < a1 and a0 != a1 and b0 != b1

    def is_dense(self, strides: Sequence[int]) -> bool:
        """True when the array has exactly ``strides`` (element strides of extent-1 axes ignored)."""
        if self.size <= 1:
            return True
        return all(n == 1 or s == t for n, s, t in zip(self.shape, self.strides, strides))
