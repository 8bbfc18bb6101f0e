# SPDX-License-Identifier: Apache-2.0
"""Reference executor: carry out every rank's plan inside one process, with numpy.

Test infrastructure, not a backend. ``mode="direct"`` copies operand -> result with each
transfer's ``direct`` copy; ``mode="staged"`` packs into per-rank send staging, "puts" every slot
into the destination's receive staging at ``remote_offsets``, and unpacks, exercising exactly
the layout a one-sided (NVSHMEM put) backend relies on.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .buffer import byte_extent
from .plan import Plan
from .strided import HostBuffer, copy_host

__all__ = ["execute_reference", "empty_output"]


def empty_output(plan: Plan, dtype: npt.DTypeLike) -> np.ndarray:
    """A result array for ``plan``'s rank at ``plan.out_strides`` (dense in ``plan.out_order``, or
    positive padded strides of a retargeted plan), filled with 0xA5 bytes."""
    dtype = np.dtype(dtype)
    _, span = byte_extent(plan.out_shape, plan.out_strides, dtype.itemsize)
    buf = np.full(max(1, plan.out_elements * dtype.itemsize, span), 0xA5, dtype=np.uint8)
    return np.ndarray(plan.out_shape, dtype=dtype, buffer=buf,
                      strides=tuple(s * dtype.itemsize for s in plan.out_strides))


def execute_reference(plans: Sequence[Plan], inputs: Sequence[np.ndarray], *, mode: str = "direct") -> list[np.ndarray]:
    """Run all ranks' plans; ``inputs[r]`` is rank r's operand (any positive strides)."""
    nranks = len(plans)
    for r, p in enumerate(plans):
        if p.rank != r or p.nranks != nranks:
            raise ValueError(f"plans[{r}] is for rank {p.rank}/{p.nranks}")
        a = inputs[r]
        if tuple(a.shape) != p.in_shape:
            raise ValueError(f"rank {r}: operand shape {a.shape} != planned {p.in_shape}")
        if tuple(s // a.itemsize for s in a.strides) != p.in_strides and a.size > 1:
            raise ValueError(f"rank {r}: operand strides {a.strides} != planned {p.in_strides} elements")
    dtype = inputs[0].dtype
    outputs = [empty_output(p, dtype) for p in plans]
    src = [HostBuffer.of(a) for a in inputs]
    dst = [HostBuffer.of(o) for o in outputs]
    if mode == "direct":
        for p in plans:
            for t in p.transfers:
                for piece in t.pieces:
                    copy_host(piece.direct, src[t.src], dst[t.dst])
        return outputs
    if mode != "staged":
        raise ValueError(f"mode must be 'direct' or 'staged', got {mode!r}")
    itemsize = plans[0].itemsize
    # Byte buffers sized like symmetric allocations: the same (max) size on every rank.
    send = [np.zeros(max(p.max_send_staging_bytes, 1), np.uint8) for p in plans]
    recv = [np.full(max(p.max_recv_staging_bytes, 1), 0x5A, np.uint8) for p in plans]
    for p in plans:
        sbuf = send[p.rank]
        for t, off, roff in zip(p.sends, p.send_offsets, p.remote_offsets):
            for piece in t.pieces:
                copy_host(piece.pack, src[p.rank], HostBuffer(sbuf.ctypes.data + off, itemsize, sbuf))
            recv[t.dst][roff : roff + t.nbytes] = send[p.rank][off : off + t.nbytes]  # the "put"
        if p.local is not None:
            for piece in p.local.pieces:
                copy_host(piece.direct, src[p.rank], dst[p.rank])
    for p in plans:
        rb = recv[p.rank]
        for t, off in zip(p.recvs, p.recv_offsets):
            slot = HostBuffer(rb.ctypes.data + off, itemsize, rb)
            for piece in t.pieces:
                copy_host(piece.unpack, slot, dst[p.rank])
    return outputs
