# SPDX-License-Identifier: Apache-2.0
"""The CUDA backend on host memory: every rank's launch list replayed through the kernel's maths.

:func:`emulate_job` runs a whole job (all ranks) in one process: operands, results and staging
live in a fake address space, each kernel launch goes through :func:`.kernels.emulate` (the
kernel's own index maths, magic divisions and vector alignment checks), puts are byte copies.
It is the oracle CI checks lowering against, without a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..plan import FusedPlan, Plan
from . import kernels
from .launch_list import KernelStep, LaunchList, align_of, build_launch_list, table_rows

__all__ = ["emulate_job"]


def emulate_job(
    plans: Sequence[Plan | FusedPlan],
    inputs: Sequence[np.ndarray | Sequence[np.ndarray]],
    *,
    reach: np.ndarray | None = None,
    transport: str = "auto",
    vec: int | None = None,
    in_offsets: Sequence[int] | None = None,
    in_origins: Sequence[int] | None = None,
    out_delta: int = 0,
    seg_limit: int = kernels.SEG_LIMIT,
    sm_count: int = 132,
    signal: str = "epoch",
    epochs: int = 2,
    out_bytes: int | None = None,
) -> tuple[list[np.ndarray], list[LaunchList]]:
    """Run every rank's launch list on host memory through the kernel's index maths.

    ``inputs[r]``: rank r's operand as raw bytes (uint8, its whole strided span). Returns each
    rank's result bytes (``result_bytes`` long; only the out box's dense part is meaningful) and
    the launch lists. ``in_offsets`` shifts each operand inside its buffer (alignment tests);
    ``in_origins`` is where element (0, ..., 0) sits in each operand's bytes (negative strides
    reach below it); ``out_delta`` writes into a second "out=" region at that offset from the result;
    ``out_bytes`` sizes each result region (default ``result_bytes``; larger for strided outputs),
    and then the whole region is returned (offsets from its start, ``out_delta`` included).

    Fused plans (several fields): ``inputs[r]`` is one byte array per field, each field's output
    is at ``out_delta`` from its own result (``launch_list.field_offsets``), and the whole result
    allocation of every field is returned.
    """
    p = len(plans)
    lls = [
        build_launch_list(pl, reach, transport=transport, signal=signal, seg_limit=seg_limit, sm_count=sm_count)
        for pl in plans
    ]
    # A fake address space: regions far apart.
    regions: dict[int, np.ndarray] = {}
    stride = 1 << 40
    rb = lls[0].result_bytes
    inb, outb, sendb, recvb = [], [], [], []
    nfields = len(lls[0].field_offsets)
    for r in range(p):
        off = 0 if in_offsets is None else in_offsets[r]
        fields = [inputs[r]] if nfields == 1 and isinstance(inputs[r], np.ndarray) else list(inputs[r])
        bases = []
        for f, data in enumerate(fields):
            base = (8 * p + 8 * r + f + 1) * stride if f else (4 * r + 1) * stride
            buf = np.zeros(len(data) + off + 16, np.uint8)
            buf[off : off + len(data)] = data
            regions[base] = buf
            bases.append(base + off + (0 if in_origins is None else in_origins[r]))
        inb.append(bases)
        ob = (4 * r + 2) * stride
        regions[ob] = np.full(max(rb, out_bytes or 0) + max(out_delta, 0) + 16, 0xA5, np.uint8)
        outb.append(ob)
        sendb.append((4 * r + 3) * stride)
        regions[sendb[-1]] = np.full(max(lls[0].send_staging_bytes, 1), 0x11, np.uint8)
        recvb.append((4 * r + 4) * stride)
        regions[recvb[-1]] = np.full(max(lls[0].recv_staging_bytes, 1), 0x22, np.uint8)

    def locate(addr: np.ndarray):
        base = (addr // np.uint64(stride)) * np.uint64(stride)
        assert len(np.unique(base)) == 1, "one vector spans two regions"
        b = int(base[0])
        return regions[b], (addr - np.uint64(b)).astype(np.int64)

    def load(addr, v):
        buf, off = locate(addr)
        assert off.min() >= 0 and off.max() + v <= len(buf), "load out of bounds"
        return buf[off[:, None] + np.arange(v)[None, :]]

    def store(addr, data):
        buf, off = locate(addr)
        v = data.shape[1]
        assert off.min() >= 0 and off.max() + v <= len(buf), "store out of bounds"
        buf[off[:, None] + np.arange(v)[None, :]] = data

    def run_kernel(r: int, k: KernelStep):
        rows = table_rows(k, output=lambda d: outb[d], send=sendb[r], recv=recvb[r])
        tab = kernels.pack_table(rows)
        align = 16 if vec is None else vec
        if k.reads_input:
            align = min([align] + [align_of(b) for b in inb[r]])
        if k.writes_output:
            align = min(align, align_of(out_delta))
        v = k.width(align)
        kernels.emulate(
            tab,
            vec=v,
            run_bytes=k.run_bytes,
            nout=k.nout,
            grid=k.grid,
            in_base=inb[r],
            out_delta=[out_delta] * nfields,
            load=load,
            store=store,
        )

    # The epoch protocol's flags, per rank, as the control block holds them.
    epoch = [0] * p
    credit = np.zeros((p, p), np.int64)  # credit[r, d]: d let r write epoch credit[r, d]
    arrive = np.zeros((p, p), np.int64)  # arrive[r, s]: s finished writing into r for that epoch
    signal = np.zeros((p, p), np.int64)  # signal[r, s]: puts of s landed in r (+1 each)

    def check_waits(r: int, k: KernelStep, e: int) -> None:
        """What rank r's epoch kernel waits for must have been posted (else it would hang)."""
        for seg in k.segments:
            if seg.role in ("push", "pack"):
                assert credit[r, seg.peer] >= e, f"rank {r} would wait forever for the credit of {seg.peer}"
            elif seg.role == "unpack":
                assert signal[r, seg.peer] >= e, f"rank {r} would wait forever for the put signal of {seg.peer}"

    for _ in range(epochs):
        e_of = [epoch[r] + 1 for r in range(p)]
        # Phase order mirrors the graph: credits, copy kernels everywhere, then puts, then unpacks.
        for r in range(p):
            k = lls[r].kernel("copy")
            if k is not None and k.kind == "epoch":
                for src in k.credit_to:
                    credit[src, r] = e_of[r]
            for st in lls[r].steps:
                if st.op == "credit":
                    credit[st.pe, r] += 1
        for r in range(p):
            k = lls[r].kernel("copy")
            if k is not None:
                if k.kind == "epoch":
                    check_waits(r, k, e_of[r])
                if k.segments:
                    run_kernel(r, k)
                for dst in k.arrive_to:
                    arrive[dst, r] = e_of[r]
        for r in range(p):
            k = lls[r].kernel("copy")
            for src in (k.wait_for if k is not None else ()):
                assert arrive[r, src] >= e_of[r], f"rank {r} would wait forever for the arrival of {src}"
            for st in lls[r].steps:
                if st.op == "put":
                    src = regions[sendb[r]][st.src_offset : st.src_offset + st.nbytes]
                    regions[recvb[st.pe]][st.dst_offset : st.dst_offset + st.nbytes] = src
                    signal[st.pe, r] += int(st.signal)
        for r in range(p):
            k = lls[r].kernel("unpack")
            if k is not None:
                if k.kind == "epoch_unpack":
                    check_waits(r, k, e_of[r])
                run_kernel(r, k)
        for r in range(p):
            if any(k.bump for k in lls[r].kernels):
                epoch[r] = e_of[r]
        assert all(epoch[r] == epoch[0] for r in range(p) if lls[r].signal == "epoch"), epoch
    if out_bytes is not None or nfields > 1:  # the whole region: a strided output may reach below out_delta
        return [regions[outb[r]].copy() for r in range(p)], lls
    return [regions[outb[r]][out_delta : out_delta + rb].copy() for r in range(p)], lls
