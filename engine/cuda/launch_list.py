# SPDX-License-Identifier: Apache-2.0
"""The launch list: a plan as the exact sequence of graph nodes the CUDA backend captures (pure).

:func:`build_launch_list` turns a plan plus the job's reachability matrix into a
:class:`LaunchList` -- NVSHMEM syncs/barriers/puts and our kernels, each kernel with its
segments, block split, kernel family and widest vector -- with :meth:`LaunchList.describe`.
No GPU, no NVSHMEM: CI tests it, and every rank computes the same structure from the same
job-wide matrices. :func:`table_rows` gives a kernel's segment table with real addresses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import geometry as geo
from ..errors import InvalidValueError, NotSupportedError
from ..plan import STAGING_ALIGN, Copy, FusedPlan, Plan, fuse
from . import kernels

__all__ = [
    "BASE_ALIGN",
    "TRANSPORTS",
    "KernelStep",
    "LaunchList",
    "Segment",
    "Step",
    "align_of",
    "build_launch_list",
    "protocol_rows",
    "push_matrix",
    "table_rows",
    "traffic_matrix",
]

TRANSPORTS = ("auto", "push", "put")
#: Alignment assumed for engine-owned device bases (symmetric allocations are 512-aligned).
BASE_ALIGN = 256
_PIECE = 1 << 30  # how a >2 GiB contiguous run is cut


def align_of(x: int) -> int:
    """Largest power of two <= 16 dividing x (16 for 0)."""
    x = int(x)
    if x == 0:
        return 16
    return min(x & -x, 16)


@dataclass(frozen=True)
class Segment:
    """One strided copy inside a kernel launch, in bytes.

    ``role``: "local" (own result), "push" (a peer's result, through its peer pointer), "pack"
    (own send staging) or "unpack" (own receive staging -> own result). ``src_space`` is "input"
    (offset from the bound operand) or "recv" (receive staging); ``dst_space`` is "output" (the
    result of ``dst_rank``, plus the out= delta) or "send" (send staging).
    """

    role: str
    peer: int
    src_space: str
    src_offset: int
    dst_space: str
    dst_rank: int
    dst_offset: int
    nbytes: int
    row_bytes: int
    outer: tuple[int, ...]
    sstride: tuple[int, ...]
    dstride: tuple[int, ...]
    tile_a: int | None = None  # a transpose: the outer dimension contiguous on the source side
    field: int = 0  # which field (its operand and output bases: the kernel's Bases argument)

    @property
    def nouter(self) -> int:
        return len(self.outer)

    def max_vec(self) -> int:
        if self.tile_a is not None and self.row_bytes in kernels.GROUP_ROWS:  # transposed 4-/8-byte elements: 16-byte groups
            rest = [s for k, s in enumerate(self.sstride) if k != self.tile_a] + list(self.dstride[:-1])
            v = min([16] + [align_of(q) for q in (self.src_offset, self.dst_offset, *rest)])
            return 16 if v == 16 else min(v, self.row_bytes)  # else element by element (or narrower)
        v = 16
        for q in (self.row_bytes, self.src_offset, self.dst_offset, *self.sstride, *self.dstride):
            v = min(v, align_of(q))
        return v


@dataclass(frozen=True)
class KernelStep:
    """One launch of the copy kernel: its segments, their blocks, the kernel family and kind.

    ``kind`` is "plain" (the copy alone) or one of the epoch protocol's kernels, "epoch" (the
    copy kernel: posts credits to ``credit_to``, arrivals to ``arrive_to``, waits for the
    arrivals of ``wait_for``) and "epoch_unpack" (waits for each source's put signal); ``bump``:
    this kernel ends the protocol round (the last of the graph) and bumps the epoch.
    """

    name: str  # "copy" (local + push + pack) or "unpack"
    segments: tuple[Segment, ...]
    blocks: tuple[int, ...]
    run_bytes: int  # fixed run length of the family (0: read per segment)
    nout: int  # outer dimensions of the family
    vmax: int  # widest vector every segment allows (bases and the bound pointers may lower it)
    reads_input: bool
    writes_output: bool
    kind: str = "plain"
    credit_to: tuple[int, ...] = ()
    arrive_to: tuple[int, ...] = ()
    wait_for: tuple[int, ...] = ()
    bump: bool = False

    @property
    def grid(self) -> int:
        return sum(self.blocks)

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.segments)

    def width(self, align: int) -> int:
        """The vector width the launch runs at when its bound pointers are ``align``-aligned (the
        one rule of the executable and the emulator): at most ``vmax``; below 16 no wider than any
        segment's element size allows (a transposing segment of 4-byte elements runs in 16-byte
        quads or element by element, never at 8: copy.cu has no routine for that); then the widest
        width the family is compiled for."""
        v = min(self.vmax, align)
        if v < 16:
            v = min([v] + [align_of(s.row_bytes) for s in self.segments])
        while v not in kernels.family_widths(self.run_bytes):
            v //= 2
        return v

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory of the launch: the tile buffer when some segment transposes."""
        return kernels.TILE_SHARED_BYTES if any(s.tile_a is not None for s in self.segments) else 0

    @property
    def family(self) -> tuple[int, int]:
        return self.run_bytes, self.nout

    def kernel_names(self) -> list[str]:
        return [
            kernels.kernel_name(self.run_bytes, self.nout, v, self.kind)
            for v in kernels.family_widths(self.run_bytes)
            if v <= self.vmax
        ]

    def label(self) -> str:
        roles = ",".join(
            sorted({s.role for s in self.segments}, key=["local", "push", "pack", "unpack"].index)
        )
        mark = "" if self.kind == "plain" else "(epoch)"
        return f"kernel:{self.name}[{roles}]{mark}"


@dataclass(frozen=True)
class Step:
    """One node (group) of the graph, in capture order."""

    op: str  # "sync_all" | "barrier_all" | "quiet" | "put" | "credit" | "kernel"
    toggle: bool = False  # sync_all only: the entry sync that sync_symmetric_memory=False disables
    kernel: KernelStep | None = None
    pe: int = -1  # put / credit: the other PE
    src_offset: int = 0  # put: offset in this rank's send staging
    dst_offset: int = 0  # put: offset in the destination's receive staging
    nbytes: int = 0
    signal: bool = False  # put: with a signal (+1 into the destination's signal slot of this rank)

    def label(self) -> str:
        if self.op == "kernel":
            return self.kernel.label()
        if self.op == "put":
            return f"put{'+signal' if self.signal else ''}->{self.pe}"
        if self.op == "credit":
            return f"credit->{self.pe}"
        return self.op + ("*" if self.toggle else "")


@dataclass(frozen=True)
class LaunchList:
    """Everything one rank's graph holds, decided at plan time (see DESIGN.md)."""

    rank: int
    nranks: int
    itemsize: int
    steps: tuple[Step, ...]
    push_to: tuple[int, ...]  # peers this rank writes directly
    put_to: tuple[int, ...]  # peers this rank puts to
    put_from: tuple[int, ...]  # peers whose puts this rank unpacks
    any_push: bool  # anywhere in the job
    any_put: bool
    result_bytes: int  # engine-owned results of every field, equal on every rank (max over ranks)
    send_staging_bytes: int  # symmetric staging sizes (0 when no rank puts)
    recv_staging_bytes: int
    transport: str = "auto"
    signal: str = "barrier"
    field_offsets: tuple[int, ...] = (0,)  # where each field's result starts in the result allocation
    push_from: tuple[int, ...] = ()  # peers that store into this rank's output directly

    @property
    def kernels(self) -> list[KernelStep]:
        return [s.kernel for s in self.steps if s.op == "kernel"]

    def kernel(self, name: str) -> KernelStep | None:
        return next((k for k in self.kernels if k.name == name), None)

    def node_labels(self) -> list[str]:
        return [s.label() for s in self.steps]

    def families(self) -> set[tuple[int, int, str]]:
        """(run_bytes, nout, kind) of every kernel: what lowering compiles."""
        return {(*k.family, k.kind) for k in self.kernels}

    def describe(self) -> str:
        lines = [
            f"CUDA launch list rank {self.rank}/{self.nranks} (transport={self.transport}, "
            f"signal={self.signal}): push to "
            f"{list(self.push_to)}, put to {list(self.put_to)}, unpack from {list(self.put_from)}; result "
            f"{self.result_bytes} B, staging send {self.send_staging_bytes} B recv {self.recv_staging_bytes} B"
            + (f"; {len(self.field_offsets)} fields, results at {list(self.field_offsets)}"
               if len(self.field_offsets) > 1 else ""),
            ("  graph: " + " -> ".join(self.node_labels())) if self.steps else "  graph: (empty)",
        ]
        for k in self.kernels:
            lines.append(
                f"  {k.name}: grid {k.grid}x{kernels.BLOCK}, {len(k.segments)} segment(s), {k.nbytes} B, family "
                f"run_bytes={k.run_bytes} nout={k.nout}, vector <= {k.vmax} B ({', '.join(k.kernel_names())})"
            )
            if k.kind != "plain":
                lines.append(f"    protocol: credits to {list(k.credit_to)}, arrivals to {list(k.arrive_to)}, waits "
                             f"for {list(k.wait_for)}{', bumps the epoch' if k.bump else ''}")
            for s, b in zip(k.segments, k.blocks):
                lines.append(
                    f"    {s.role:6s} {f'field {s.field} ' if len(self.field_offsets) > 1 else ''}peer {s.peer}: "
                    f"{s.nbytes} B, rows of {s.row_bytes} B, outer {s.outer}, "
                    f"src {s.src_space}@{s.src_offset} {s.sstride}, dst {s.dst_space}[{s.dst_rank}]@{s.dst_offset} "
                    f"{s.dstride}, {b} block(s)"
                    + (f", transposed in tiles of {kernels.tile_edge(s.row_bytes)}² over outer dimension {s.tile_a}"
                       if s.tile_a is not None else "")
                )
        return "\n".join(lines)


def traffic_matrix(plan: Plan | FusedPlan) -> np.ndarray:
    """``t[s, d]``: rank s sends something to rank d (s != d); with replicated inputs only the
    lowest holder of an element sends it (:func:`..geometry.sources`, as the plan does)."""
    vol, _ = geo.sources(plan.in_boxes, plan.out_boxes)
    np.fill_diagonal(vol, 0)
    return vol > 0


def push_matrix(reach: npt.ArrayLike, traffic: np.ndarray, transport: str) -> np.ndarray:
    """``push[s, d]`` for every pair with traffic: True = s writes d's result directly.

    ``reach[s][d]``: s can load/store d's symmetric memory (nvshmem_ptr != 0).
    """
    if transport not in TRANSPORTS:
        raise InvalidValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
    p = traffic.shape[0]
    reach = np.asarray(reach, dtype=bool).reshape(p, p)
    if transport == "put":
        return np.zeros((p, p), dtype=bool)
    if transport == "push":
        bad = np.argwhere(traffic & ~reach)
        if len(bad):
            s, d = (int(x) for x in bad[0])
            raise NotSupportedError(
                f"transport='push' needs every pair that exchanges data to be load/store reachable (NVLink/P2P), "
                f"but rank {s} cannot map rank {d}'s memory (nvshmem_ptr is NULL); use transport='auto' or 'put'"
            )
    return traffic & reach


def _byte_copy(c: Copy, s: int) -> tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(row_bytes, outer extents, src byte strides, dst byte strides) of an element copy."""
    if c.contiguous_inner:
        return (
            c.shape[-1] * s,
            tuple(c.shape[:-1]),
            tuple(x * s for x in c.src_strides[:-1]),
            tuple(x * s for x in c.dst_strides[:-1]),
        )
    return s, tuple(c.shape), tuple(x * s for x in c.src_strides), tuple(x * s for x in c.dst_strides)


def _split(seg: Segment, limit: int) -> list[Segment]:
    """Cut a segment so that each piece stays below ``limit`` bytes (kernel index range)."""
    if seg.nbytes <= limit:
        return [seg]
    if seg.nouter == 0:  # one long contiguous run: cut it into pieces
        piece = min(_PIECE, limit - limit % 16)
        out, off = [], 0
        while off < seg.nbytes:
            n = min(piece, seg.nbytes - off)
            out.append(replace(seg, src_offset=seg.src_offset + off, dst_offset=seg.dst_offset + off, nbytes=n,
                               row_bytes=n))
            off += n
        return out
    sub = seg.nbytes // seg.outer[0]  # bytes of one index of the outermost dimension
    s0, d0 = seg.sstride[0], seg.dstride[0]
    out = []
    if sub <= limit:
        c = max(1, limit // sub)
        for i in range(0, seg.outer[0], c):
            n = min(c, seg.outer[0] - i)
            out.append(replace(seg, src_offset=seg.src_offset + i * s0, dst_offset=seg.dst_offset + i * d0,
                               nbytes=n * sub, outer=(n,) + seg.outer[1:]))
        return out
    for i in range(seg.outer[0]):
        out += _split(
            replace(seg, src_offset=seg.src_offset + i * s0, dst_offset=seg.dst_offset + i * d0, nbytes=sub,
                    outer=seg.outer[1:], sstride=seg.sstride[1:], dstride=seg.dstride[1:]),
            limit,
        )
    return out


def _segments(
    c: Copy,
    itemsize: int,
    role: str,
    peer: int,
    src_space: str,
    src_base: int,
    dst_space: str,
    dst_rank: int,
    dst_base: int,
    limit: int,
    field: int = 0,
) -> list[Segment]:
    row, outer, ss, ds = _byte_copy(c, itemsize)
    seg = Segment(
        role,
        peer,
        src_space,
        src_base + c.src_offset * itemsize,
        dst_space,
        dst_rank,
        dst_base + c.dst_offset * itemsize,
        c.size * itemsize,
        row,
        outer,
        ss,
        ds,
        field=field,
    )
    if seg.nouter > kernels.MAXD:
        raise NotSupportedError(
            f"a {role} copy of rank {peer if role == 'unpack' else dst_rank} has {seg.nouter + 1} dimensions that "
            f"cannot be merged (at most {kernels.MAXD + 1} are supported by the CUDA backend)"
        )
    return [replace(s, tile_a=kernels.tile_axis(s.row_bytes, s.outer, s.sstride, s.dstride)) for s in _split(seg, limit)]


def _work_bytes(seg: Segment) -> int:
    """What the block split weighs a segment by: its bytes, or for a transpose one chunk per tile."""
    if seg.tile_a is None:
        return seg.nbytes
    return kernels.tile_count(seg.outer, seg.tile_a, seg.row_bytes) * kernels.BLOCK * kernels.ILP * 16


def _kernel_step(name: str, segs: list[Segment], sm_count: int, base_align: int, *, protocol: bool = False,
                 **kw: Any) -> KernelStep | None:
    """The launch of ``segs`` (None when there are none, unless the protocol needs the kernel)."""
    if not segs and not protocol:
        return None
    nout = max((s.nouter for s in segs), default=0)
    rows = {s.row_bytes for s in segs}
    run = rows.pop() if (len(rows) == 1 and nout > 0) else 0
    vmax = min([base_align] + [s.max_vec() for s in segs])
    vmax = min(align_of(vmax), 16)
    return KernelStep(
        name=name,
        segments=tuple(segs),
        blocks=tuple(kernels.blocks_for([_work_bytes(s) for s in segs], sm_count)) if segs else (1,),
        run_bytes=run,
        nout=nout,
        vmax=vmax,
        reads_input=any(s.src_space == "input" for s in segs),
        writes_output=any(s.dst_space == "output" for s in segs),
        **kw,
    )


def result_offsets(plan: FusedPlan) -> tuple[tuple[int, ...], int]:
    """Where each field's result starts in the one symmetric result allocation, and its size:
    the same on every rank (each field's part is its largest output box, ``STAGING_ALIGN``-aligned)."""
    vol = max([geo.volume(b) for b in plan.out_boxes] or [0])
    offsets, off = [], 0
    for p in plan.fields:
        offsets.append(off)
        off += -(-max(vol * p.itemsize, 1) // STAGING_ALIGN) * STAGING_ALIGN
    return tuple(offsets), off


def build_launch_list(
    plan: Plan | FusedPlan,
    reach: np.ndarray | None = None,
    *,
    transport: str = "auto",
    signal: str = "epoch",
    sm_count: int = 132,
    base_align: int = BASE_ALIGN,
    seg_limit: int = kernels.SEG_LIMIT,
) -> LaunchList:
    """The graph of ``plan.rank``: pure; the same collective structure on every rank of the job.

    ``reach``: P x P booleans (s can load/store d's symmetric memory); None = all reachable
    (one NVLink node). ``signal``: "epoch" (barrier-free, the default) or "barrier". Graph shapes
    (``*`` = toggled by ``sync_symmetric_memory``):

    * no exchange anywhere (one rank, or nothing crosses ranks): ``kernel:copy[local]``
    * epoch, push only: ``kernel:copy[local,push](epoch)`` (credits, stores, arrivals: one kernel)
    * epoch, with puts: ``[credit...] -> kernel:copy[local,push,pack](epoch) -> put+signal... ->
      kernel:unpack(epoch) -> quiet`` (credits as NVSHMEM signals only to sources that cannot be
      stored into; the unpack of a source starts once its signal says its put landed)
    * barrier, push only:  ``sync_all* -> kernel:copy[local,push] -> barrier_all``
    * barrier, with puts:  ``[sync_all*] -> kernel:copy[local,push,pack] -> sync_all -> put... ->
      quiet -> barrier_all -> kernel:unpack`` (the entry sync only when some pair pushes)
    """
    if signal not in ("epoch", "barrier"):
        raise InvalidValueError(f"signal must be 'epoch' or 'barrier', got {signal!r}")
    fused = plan if isinstance(plan, FusedPlan) else fuse([plan])
    if fused.nfields > kernels.MAXF:
        raise NotSupportedError(f"the CUDA backend moves at most {kernels.MAXF} fields in one exchange, got {fused.nfields}")
    fields, plan = fused.fields, fused.first
    p, r = plan.nranks, plan.rank
    traffic = traffic_matrix(plan)
    if reach is None:
        reach = np.ones((p, p), dtype=bool)
    push = push_matrix(reach, traffic, transport)
    any_push = bool((push & traffic).any())
    any_put = bool((traffic & ~push).any())
    offsets, result_bytes = result_offsets(fused)

    copy_segs: list[Segment] = []
    for f, (fp, base) in enumerate(zip(fields, offsets)):
        if fp.local is not None:
            for piece in fp.local.pieces:
                copy_segs += _segments(piece.direct, fp.itemsize, "local", r, "input", 0, "output", r, base, seg_limit,
                                       f)
    puts: list[Step] = []
    push_to, put_to = [], []
    for i, (t, soff, roff) in enumerate(zip(plan.sends, fused.send_offsets, fused.remote_offsets)):
        if push[r, t.dst]:
            push_to.append(t.dst)
            for f, (fp, base) in enumerate(zip(fields, offsets)):
                for piece in fp.sends[i].pieces:
                    copy_segs += _segments(piece.direct, fp.itemsize, "push", t.dst, "input", 0, "output", t.dst, base,
                                           seg_limit, f)
        else:
            put_to.append(t.dst)
            for f, (fp, part) in enumerate(zip(fields, fused.send_parts[i])):
                for piece in fp.sends[i].pieces:
                    copy_segs += _segments(piece.pack, fp.itemsize, "pack", t.dst, "input", 0, "send", r, soff + part,
                                           seg_limit, f)
            nbytes = fused.send_parts[i][-1] + fields[-1].sends[i].nbytes  # every field's part, one put
            puts.append(Step("put", pe=t.dst, src_offset=soff, dst_offset=roff, nbytes=nbytes))
    unpack_segs: list[Segment] = []
    put_from = []
    for i, (t, off) in enumerate(zip(plan.recvs, fused.recv_offsets)):
        if not push[t.src, r]:
            put_from.append(t.src)
            for f, (fp, part, base) in enumerate(zip(fields, fused.recv_parts[i], offsets)):
                for piece in fp.recvs[i].pieces:
                    unpack_segs += _segments(piece.unpack, fp.itemsize, "unpack", t.src, "recv", off + part, "output",
                                             r, base, seg_limit, f)

    steps: list[Step] = []
    if signal == "epoch" and (any_push or any_put):
        sources = [t.src for t in plan.recvs]
        push_from = [t.src for t in plan.recvs if push[t.src, r]]
        stored = [src for src in sources if reach[r, src]]  # credits stored through peer pointers
        k1 = _kernel_step("copy", copy_segs, sm_count, base_align, protocol=True, kind="epoch",
                          credit_to=tuple(stored), arrive_to=tuple(push_to), wait_for=tuple(push_from),
                          bump=not put_from)
        k2 = _kernel_step("unpack", unpack_segs, sm_count, base_align, kind="epoch_unpack", bump=True)
        steps += [Step("credit", pe=src) for src in sources if not reach[r, src]]  # NVSHMEM signal +1
        steps.append(Step("kernel", kernel=k1))
        steps += [replace(st, signal=True) for st in puts]
        if k2 is not None:
            steps.append(Step("kernel", kernel=k2))
        if puts:
            steps.append(Step("quiet"))  # my puts are complete (joins NVSHMEM's internal streams)
    else:
        k1 = _kernel_step("copy", copy_segs, sm_count, base_align)
        k2 = _kernel_step("unpack", unpack_segs, sm_count, base_align)
        if any_push:
            steps.append(Step("sync_all", toggle=True))
        if k1 is not None:
            steps.append(Step("kernel", kernel=k1))
        if any_put:
            steps.append(Step("sync_all"))  # receivers are done with their staging (previous unpack)
            steps += puts
            if puts:
                steps.append(Step("quiet"))
            steps.append(Step("barrier_all"))  # every put (and push) has landed
            if k2 is not None:
                steps.append(Step("kernel", kernel=k2))
        elif any_push:
            steps.append(Step("barrier_all"))  # peers' writes into our result are complete
    return LaunchList(
        rank=r,
        nranks=p,
        itemsize=plan.itemsize,
        steps=tuple(steps),
        push_to=tuple(push_to),
        put_to=tuple(put_to),
        push_from=tuple(t.src for t in plan.recvs if push[t.src, r]),
        put_from=tuple(put_from),
        any_push=any_push,
        any_put=any_put,
        result_bytes=result_bytes,
        send_staging_bytes=max(1, fused.max_send_staging_bytes) if any_put else 0,
        recv_staging_bytes=max(1, fused.max_recv_staging_bytes) if any_put else 0,
        transport=transport,
        signal=signal if (any_push or any_put) else "none",
        field_offsets=offsets,
    )


def table_rows(
    step: KernelStep, *, output: Callable[[int], int], send: int = 0, recv: int = 0,
    slot: Callable[[int, int], int] | None = None,
) -> list[dict[str, Any]]:
    """Segment-table rows with real addresses: ``output(rank)`` = that rank's result as mapped here;
    ``slot(field, rank)`` = the Bases output slot of that field's output on that rank (default: the
    field: one out= offset for every rank)."""
    rows, b0 = [], 0
    for seg, nb in zip(step.segments, step.blocks):
        src_rel = seg.src_space == "input"
        src = seg.src_offset if src_rel else recv + seg.src_offset
        if seg.dst_space == "output":
            dst = output(seg.dst_rank) + seg.dst_offset
        else:
            dst = send + seg.dst_offset
        rows.append(
            dict(
                src=src,
                dst=dst,
                src_rel=src_rel,
                dst_rel=seg.dst_space == "output",
                bytes=seg.nbytes,
                row_bytes=seg.row_bytes,
                outer=seg.outer,
                sstride=seg.sstride,
                dstride=seg.dstride,
                blk_begin=b0,
                blk_count=nb,
                peer=kernels.NO_PEER if seg.role == "local" else seg.peer,
                tile_a=seg.tile_a,
                field=seg.field,
                slot=seg.field if slot is None or seg.dst_space != "output" else slot(seg.field, seg.dst_rank),
            )
        )
        b0 += nb
    return rows


def protocol_rows(step: KernelStep, *, ctl: Callable[[int], int], me: int, nranks: int) -> np.ndarray:
    """The epoch kernel's ``proto`` array: the addresses of this rank's credit slot in each source's
    control block, of its arrival slot in each push destination's, then the ranks waited for.

    ``ctl(rank)`` = that rank's control block as mapped here (a peer pointer).
    """
    credit = [ctl(src) + 8 * (kernels.CTL_PEERS + me) for src in step.credit_to]
    arrive = [ctl(dst) + 8 * (kernels.CTL_PEERS + nranks + me) for dst in step.arrive_to]
    words = credit + arrive + list(step.wait_for)
    return np.array([w & kernels.ALL_ONES for w in words] or [0], dtype=np.uint64)
