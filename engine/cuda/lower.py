# SPDX-License-Identifier: Apache-2.0
"""Lowering a Plan to the CUDA backend: transports, the launch list, the graph, the rebind.

Two halves:

* **Pure** (no GPU, no NVSHMEM; CI tests it): :func:`build_launch_list` turns a plan plus the
  job's reachability matrix into a :class:`LaunchList` -- the exact sequence of nodes the
  graph will hold (NVSHMEM syncs/barriers/puts and our kernels, each kernel with its
  segments, block split, kernel family and widest vector), with :meth:`LaunchList.describe`.
  :func:`emulate_job` replays every rank's launch list on host memory through the kernel's
  own index maths (:func:`.kernels.emulate`).
* **GPU**: :func:`lower` (collective) allocates the engine-owned symmetric result and any
  staging, compiles and loads the kernels, uploads the segment tables, warms NVSHMEM up and
  returns a :class:`CudaExecutable` whose graph is captured on first execute and rebound by
  kernel-node updates. See DESIGN.md beside this file.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace, field

import numpy as np

from .. import geometry as geo
from ..errors import CudaError, InvalidStateError, InvalidValueError, NotSupportedError
from ..plan import Copy, Plan
from . import kernels as K

__all__ = [
    "TRANSPORTS",
    "CudaExecutable",
    "KernelStep",
    "LaunchList",
    "Segment",
    "Step",
    "build_launch_list",
    "emulate_job",
    "lower",
    "push_matrix",
    "table_rows",
    "traffic_matrix",
]

TRANSPORTS = ("auto", "push", "put")
#: Alignment assumed for engine-owned device bases (symmetric allocations are 512-aligned).
BASE_ALIGN = 256
_PIECE = 1 << 30  # how a >2 GiB contiguous run is cut


def _align_of(x: int) -> int:
    """Largest power of two <= 16 dividing x (16 for 0)."""
    x = int(x)
    if x == 0:
        return 16
    return min(x & -x, 16)


# ----------------------------------------------------------------------------------------------
# The launch list (pure)
# ----------------------------------------------------------------------------------------------


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

    @property
    def nouter(self) -> int:
        return len(self.outer)

    def max_vec(self) -> int:
        v = 16
        for q in (self.row_bytes, self.src_offset, self.dst_offset, *self.sstride, *self.dstride):
            v = min(v, _align_of(q))
        return v


@dataclass(frozen=True)
class KernelStep:
    """One launch of the copy kernel: its segments, their blocks, and the kernel family."""

    name: str  # "copy" (local + push + pack) or "unpack"
    segments: tuple[Segment, ...]
    blocks: tuple[int, ...]
    run_bytes: int  # fixed run length of the family (0: read per segment)
    nout: int  # outer dimensions of the family
    vmax: int  # widest vector every segment allows (bases and the bound pointers may lower it)
    reads_input: bool
    writes_output: bool

    @property
    def grid(self) -> int:
        return sum(self.blocks)

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.segments)

    @property
    def family(self) -> tuple[int, int]:
        return self.run_bytes, self.nout

    def kernel_names(self) -> list[str]:
        return [
            K.kernel_name(self.run_bytes, self.nout, v)
            for v in K.family_widths(self.run_bytes)
            if v <= self.vmax
        ]

    def label(self) -> str:
        roles = ",".join(
            sorted({s.role for s in self.segments}, key=["local", "push", "pack", "unpack"].index)
        )
        return f"kernel:{self.name}[{roles}]"


@dataclass(frozen=True)
class Step:
    """One node (group) of the graph, in capture order."""

    op: str  # "sync_all" | "barrier_all" | "quiet" | "put" | "kernel"
    toggle: bool = False  # sync_all only: the entry sync that sync_symmetric_memory=False disables
    kernel: KernelStep | None = None
    pe: int = -1  # put: destination PE
    src_offset: int = 0  # put: offset in this rank's send staging
    dst_offset: int = 0  # put: offset in the destination's receive staging
    nbytes: int = 0

    def label(self) -> str:
        if self.op == "kernel":
            return self.kernel.label()
        if self.op == "put":
            return f"put->{self.pe}"
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
    result_bytes: int  # engine-owned result, equal on every rank (max over ranks)
    send_staging_bytes: int  # symmetric staging sizes (0 when no rank puts)
    recv_staging_bytes: int
    transport: str = "auto"
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def kernels(self) -> list[KernelStep]:
        return [s.kernel for s in self.steps if s.op == "kernel"]

    def kernel(self, name: str) -> KernelStep | None:
        return next((k for k in self.kernels if k.name == name), None)

    def node_labels(self) -> list[str]:
        return [s.label() for s in self.steps]

    def families(self) -> set[tuple[int, int]]:
        return {k.family for k in self.kernels}

    def describe(self) -> str:
        lines = [
            f"CUDA launch list rank {self.rank}/{self.nranks} (transport={self.transport}): push to "
            f"{list(self.push_to)}, put to {list(self.put_to)}, unpack from {list(self.put_from)}; result "
            f"{self.result_bytes} B, staging send {self.send_staging_bytes} B recv {self.recv_staging_bytes} B",
            ("  graph: " + " -> ".join(self.node_labels())) if self.steps else "  graph: (empty)",
        ]
        for k in self.kernels:
            lines.append(
                f"  {k.name}: grid {k.grid}x{K.BLOCK}, {len(k.segments)} segment(s), {k.nbytes} B, family "
                f"run_bytes={k.run_bytes} nout={k.nout}, vector <= {k.vmax} B ({', '.join(k.kernel_names())})"
            )
            for s, b in zip(k.segments, k.blocks):
                lines.append(
                    f"    {s.role:6s} peer {s.peer}: {s.nbytes} B, rows of {s.row_bytes} B, outer {s.outer}, "
                    f"src {s.src_space}@{s.src_offset} {s.sstride}, dst {s.dst_space}[{s.dst_rank}]@{s.dst_offset} "
                    f"{s.dstride}, {b} block(s)"
                )
        return "\n".join(lines)


def traffic_matrix(plan: Plan) -> np.ndarray:
    """``t[s, d]``: rank s sends something to rank d (s != d)."""
    vol = geo.pairwise_overlap(plan.in_boxes, plan.out_boxes)
    np.fill_diagonal(vol, 0)
    return vol > 0


def push_matrix(reach, traffic: np.ndarray, transport: str) -> np.ndarray:
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


def _byte_copy(c: Copy, s: int) -> tuple[int, tuple, tuple, tuple]:
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
            out.append(
                Segment(
                    seg.role,
                    seg.peer,
                    seg.src_space,
                    seg.src_offset + off,
                    seg.dst_space,
                    seg.dst_rank,
                    seg.dst_offset + off,
                    n,
                    n,
                    (),
                    (),
                    (),
                )
            )
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
    )
    if seg.nouter > K.MAXD:
        raise NotSupportedError(
            f"a {role} copy of rank {peer if role == 'unpack' else dst_rank} has {seg.nouter + 1} dimensions that "
            f"cannot be merged (at most {K.MAXD + 1} are supported by the CUDA backend)"
        )
    return _split(seg, limit)


def _kernel_step(name: str, segs: list[Segment], sm_count: int, base_align: int) -> KernelStep | None:
    if not segs:
        return None
    nout = max(s.nouter for s in segs)
    rows = {s.row_bytes for s in segs}
    run = rows.pop() if (len(rows) == 1 and nout > 0) else 0
    vmax = min([base_align] + [s.max_vec() for s in segs])
    vmax = min(_align_of(vmax), 16)
    return KernelStep(
        name=name,
        segments=tuple(segs),
        blocks=tuple(K.blocks_for([s.nbytes for s in segs], sm_count)),
        run_bytes=run,
        nout=nout,
        vmax=vmax,
        reads_input=any(s.src_space == "input" for s in segs),
        writes_output=any(s.dst_space == "output" for s in segs),
    )


def build_launch_list(
    plan: Plan,
    reach=None,
    *,
    transport: str = "auto",
    sm_count: int = 132,
    base_align: int = BASE_ALIGN,
    seg_limit: int = K.SEG_LIMIT,
) -> LaunchList:
    """The graph of ``plan.rank``: pure, identical structure on every rank of the job.

    ``reach``: P x P booleans (s can load/store d's symmetric memory); None = all reachable
    (one NVLink node). Graph shapes (``*`` = toggled by ``sync_symmetric_memory``):

    * no exchange anywhere (one rank, or nothing crosses ranks): ``kernel:copy[local]``
    * push only:  ``sync_all* -> kernel:copy[local,push] -> barrier_all``
    * with puts:  ``[sync_all*] -> kernel:copy[local,push,pack] -> sync_all -> put... -> quiet ->
      barrier_all -> kernel:unpack`` (the entry sync only when some pair pushes)
    """
    p, r, s = plan.nranks, plan.rank, plan.itemsize
    traffic = traffic_matrix(plan)
    if reach is None:
        reach = np.ones((p, p), dtype=bool)
    push = push_matrix(reach, traffic, transport)
    any_push = bool((push & traffic).any())
    any_put = bool((traffic & ~push).any())
    vols = [geo.volume(b) for b in plan.out_boxes]
    result_bytes = max(1, max(vols) * s if vols else 1)

    copy_segs: list[Segment] = []
    if plan.local is not None:
        copy_segs += _segments(plan.local.direct, s, "local", r, "input", 0, "output", r, 0, seg_limit)
    puts: list[Step] = []
    push_to, put_to = [], []
    for t, soff, roff in zip(plan.sends, plan.send_offsets, plan.remote_offsets):
        if push[r, t.dst]:
            push_to.append(t.dst)
            copy_segs += _segments(t.direct, s, "push", t.dst, "input", 0, "output", t.dst, 0, seg_limit)
        else:
            put_to.append(t.dst)
            copy_segs += _segments(t.pack, s, "pack", t.dst, "input", 0, "send", r, soff, seg_limit)
            puts.append(Step("put", pe=t.dst, src_offset=soff, dst_offset=roff, nbytes=t.nbytes))
    unpack_segs: list[Segment] = []
    put_from = []
    for t, off in zip(plan.recvs, plan.recv_offsets):
        if not push[t.src, r]:
            put_from.append(t.src)
            unpack_segs += _segments(t.unpack, s, "unpack", t.src, "recv", off, "output", r, 0, seg_limit)

    k1 = _kernel_step("copy", copy_segs, sm_count, base_align)
    k2 = _kernel_step("unpack", unpack_segs, sm_count, base_align)
    steps: list[Step] = []
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
        itemsize=s,
        steps=tuple(steps),
        push_to=tuple(push_to),
        put_to=tuple(put_to),
        put_from=tuple(put_from),
        any_push=any_push,
        any_put=any_put,
        result_bytes=result_bytes,
        send_staging_bytes=max(1, plan.max_send_staging_bytes) if any_put else 0,
        recv_staging_bytes=max(1, plan.max_recv_staging_bytes) if any_put else 0,
        transport=transport,
    )


def table_rows(step: KernelStep, *, output: Callable[[int], int], send: int = 0, recv: int = 0) -> list[dict]:
    """Segment-table rows with real addresses: ``output(rank)`` = that rank's result as mapped here."""
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
            )
        )
        b0 += nb
    return rows


def emulate_job(
    plans: Sequence[Plan],
    inputs: Sequence[np.ndarray],
    *,
    reach=None,
    transport: str = "auto",
    vec: int | None = None,
    in_offsets: Sequence[int] | None = None,
    out_delta: int = 0,
    seg_limit: int = K.SEG_LIMIT,
    sm_count: int = 132,
) -> tuple[list[np.ndarray], list[LaunchList]]:
    """Run every rank's launch list on host memory through the kernel's index maths.

    ``inputs[r]``: rank r's operand as raw bytes (uint8, its whole strided span). Returns each
    rank's result bytes (``result_bytes`` long; only the out box's dense part is meaningful) and
    the launch lists. ``in_offsets`` shifts each operand inside its buffer (alignment tests);
    ``out_delta`` writes into a second "out=" region at that offset from the result.
    """
    p = len(plans)
    lls = [
        build_launch_list(pl, reach, transport=transport, seg_limit=seg_limit, sm_count=sm_count)
        for pl in plans
    ]
    # A fake address space: regions far apart.
    regions: dict[int, np.ndarray] = {}
    stride = 1 << 40
    rb = lls[0].result_bytes
    inb, outb, sendb, recvb = [], [], [], []
    for r in range(p):
        off = 0 if in_offsets is None else in_offsets[r]
        base = (4 * r + 1) * stride
        buf = np.zeros(len(inputs[r]) + off + 16, np.uint8)
        buf[off : off + len(inputs[r])] = inputs[r]
        regions[base] = buf
        inb.append(base + off)
        ob = (4 * r + 2) * stride
        regions[ob] = np.full(rb + max(out_delta, 0) + 16, 0xA5, np.uint8)
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
        tab = K.pack_table(rows)
        v = k.vmax if vec is None else min(vec, k.vmax)
        if k.reads_input:
            v = min(v, _align_of(inb[r]))
        if k.writes_output:
            v = min(v, _align_of(out_delta))
        K.emulate(
            tab,
            vec=v,
            run_bytes=k.run_bytes,
            nout=k.nout,
            grid=k.grid,
            in_base=inb[r],
            out_delta=out_delta,
            load=load,
            store=store,
        )

    # Phase order mirrors the graph: copy kernels everywhere, then puts, then unpacks.
    for r in range(p):
        k = lls[r].kernel("copy")
        if k is not None:
            run_kernel(r, k)
    for r in range(p):
        for st in lls[r].steps:
            if st.op == "put":
                src = regions[sendb[r]][st.src_offset : st.src_offset + st.nbytes]
                regions[recvb[st.pe]][st.dst_offset : st.dst_offset + st.nbytes] = src
    for r in range(p):
        k = lls[r].kernel("unpack")
        if k is not None:
            run_kernel(r, k)
    return [regions[outb[r]][out_delta : out_delta + rb].copy() for r in range(p)], lls


# ----------------------------------------------------------------------------------------------
# The executable (GPU)
# ----------------------------------------------------------------------------------------------


class _Kernel:
    """A KernelStep made real: table in device memory + KernelLaunch (args, node params, nodes)."""

    def __init__(self, step: KernelStep, launch, table_ptr: int):
        self.step = step
        self.launch = launch
        self.table_ptr = table_ptr
        self.in_align = 16
        self.out_align = 16

    def pick_vec(self) -> int:
        v = self.step.vmax
        if self.step.reads_input:
            v = min(v, self.in_align)
        if self.step.writes_output:
            v = min(v, self.out_align)
        return v


def _agree(comm, err: BaseException | None, what: str) -> None:
    """Collective: raise (on every rank) the first rank's error, if any rank has one."""
    mine = None if err is None else (type(err).__name__, str(err))
    every = comm.allgather(mine)
    for r, e in enumerate(every):
        if e is not None:
            if err is not None and r == comm.Get_rank():
                raise err
            cls = {
                c.__name__: c for c in (InvalidValueError, NotSupportedError, CudaError, InvalidStateError)
            }.get(e[0], CudaError)
            raise cls(f"rank {r}: {what}: {e[1]}")


def lower(plan: Plan, rt, *, transport: str = "auto", logger: logging.Logger | None = None) -> CudaExecutable:
    """Collective: lower ``plan`` onto the CUDA backend of runtime ``rt``.

    ``transport``: "auto" (push to every load/store-reachable peer, put to the others),
    "push" (all pushes; NotSupportedError if a pair is not reachable) or "put".
    """
    t0 = time.perf_counter()
    comm = rt.comm
    err, row = None, None
    try:
        rt.check_alive()
        if transport not in TRANSPORTS:
            raise InvalidValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
        if plan.nranks != rt.nranks or plan.rank != rt.rank:
            raise InvalidValueError(
                f"plan is for rank {plan.rank}/{plan.nranks}, runtime is rank {rt.rank}/{rt.nranks}"
            )
        row = [d == rt.rank or rt.peer_ptr(rt.anchor, d) != 0 for d in range(rt.nranks)]
    except Exception as e:  # noqa: BLE001 -- raised on every rank by _agree
        err = e
    mine = (None if err is None else (type(err).__name__, str(err)), row)
    every = comm.allgather(mine)
    for r, (e, _) in enumerate(every):
        if e is not None:
            if err is not None and r == rt.rank:
                raise err
            raise (NotSupportedError if e[0] == "NotSupportedError" else InvalidValueError)(
                f"rank {r}: {e[1]}"
            )
    reach = np.array([x[1] for x in every], dtype=bool)

    err, ll, funcs = None, None, {}
    try:
        ll = build_launch_list(plan, reach, transport=transport, sm_count=rt.sm_count)
        tc = time.perf_counter()
        for k in ll.kernels:
            funcs[k.name] = rt.functions(*k.family)
        compile_ms = (time.perf_counter() - tc) * 1e3
    except Exception as e:  # noqa: BLE001
        err = e
    _agree(comm, err, "lowering to the CUDA backend")
    exe = CudaExecutable(plan, rt, ll, funcs, logger)
    if logger is not None:
        logger.info(
            "cuda lower: %.1f ms (kernels %.1f ms); %s",
            (time.perf_counter() - t0) * 1e3,
            compile_ms,
            ll.describe().replace("\n", "\n    "),
        )
    return exe


class CudaExecutable:
    """A lowered plan: engine-owned symmetric result, optional staging, kernels, one graph.

    See engine/DESIGN.md ("CUDA backend contract") and DESIGN.md beside this file. Made by
    :func:`lower` (collective).
    """

    def __init__(self, plan: Plan, rt, ll: LaunchList, funcs: dict[str, dict[int, int]], logger=None):
        self.plan, self.rt, self.launch_list, self._logger = plan, rt, ll, logger
        self._drv = rt.driver
        self._funcs = funcs
        self._kernels: dict[str, _Kernel] = {}
        self._exec = None
        self._freed = False
        self._detached = False
        self._need_workspace = False
        self.result_ptr = 0
        self._send = self._recv = 0
        self._in_ptr = 0
        self._out_delta = 0
        self._launches = 0
        self.result_bytes = ll.result_bytes
        self.graphs = os.environ.get("REDIST_CUDA_GRAPHS", "1") != "0"
        # collective allocations: result, then staging (same sizes, same order on every rank)
        self.result_ptr = rt.sym_alloc(ll.result_bytes, owner="engine")
        err = None
        try:
            if ll.any_put:
                self._alloc_staging()
            self._peer_out = {
                d: (self.result_ptr if d == rt.rank else rt.peer_ptr(self.result_ptr, d))
                for d in range(rt.nranks)
            }
            for d in ll.push_to:
                if not self._peer_out[d]:
                    raise CudaError(f"nvshmem_ptr(result, {d}) is NULL although peer {d} was found reachable")
            self._base_align = min(
                [_align_of(a) for a in (self.result_ptr, *self._peer_out.values()) if a] or [16]
            )
            for k in ll.kernels:
                table = self._table(k)
                tptr = rt.dev_alloc(table.nbytes)
                rt.htod(tptr, table)
                from .graph import KernelLaunch

                widths = {v: f for v, f in funcs[k.name].items() if v <= k.vmax}
                launch = KernelLaunch(self._drv, widths, k.grid, K.BLOCK, tptr, len(k.segments))
                kern = _Kernel(k, launch, tptr)
                kern.out_align = _align_of(0)
                self._kernels[k.name] = kern
                launch.set_vec(self._pick(kern))
            self._copy = self._kernels.get("copy")
            self._unpack = self._kernels.get("unpack")
            self._in_kernels = [x for x in self._kernels.values() if x.step.reads_input]
            self._out_kernels = [x for x in self._kernels.values() if x.step.writes_output]
            self._puts_resolve()
            self._warm_up()
        except Exception as e:  # noqa: BLE001
            err = e
        try:
            _agree(rt.comm, err, "setting up the CUDA executable")
        except Exception:
            self.free()
            raise

    # -- set-up helpers -----------------------------------------------------------------------

    def _alloc_staging(self) -> None:
        ll = self.launch_list
        self._send = self.rt.sym_alloc(ll.send_staging_bytes, owner="engine")
        self._recv = self.rt.sym_alloc(ll.recv_staging_bytes, owner="engine")

    def _table(self, k: KernelStep) -> np.ndarray:
        rows = table_rows(k, output=lambda d: self._peer_out[d], send=self._send, recv=self._recv)
        return K.pack_table(rows)

    def _pick(self, kern: _Kernel) -> int:
        v = min(kern.pick_vec(), self._base_align)
        while v not in kern.launch.funcs:
            v //= 2
        return v

    def _puts_resolve(self) -> None:
        self._puts = [
            (self._recv + st.dst_offset, self._send + st.src_offset, st.nbytes, st.pe)
            for st in self.launch_list.steps
            if st.op == "put"
        ]

    def _warm_up(self) -> None:
        """NVSHMEM's on-stream ops run once uncaptured before any capture (lazy set-up inside)."""
        ll = self.launch_list
        if not any(st.op != "kernel" for st in ll.steps):
            return
        nb, s = self.rt.nb, self.rt.stream
        puts = iter(self._puts)
        for st in ll.steps:
            if st.op == "sync_all":
                nb.sync_all_on_stream(s)
            elif st.op == "barrier_all":
                nb.barrier_all_on_stream(s)
            elif st.op == "quiet":
                nb.quiet_on_stream(s)
            elif st.op == "put":
                dst, src, n, pe = next(puts)
                nb.putmem_nbi_on_stream(dst, src, n, pe, s)
        self._drv.call("cuStreamSynchronize", s)

    # -- binding (the hot path of reset_operand_unchecked / out=) -------------------------------

    def bind_input(self, ptr: int) -> None:
        """Point every kernel that reads the operand at ``ptr`` (kernel-node update; never re-capture)."""
        if ptr == self._in_ptr:
            return
        self._in_ptr = ptr
        self._update(self._in_kernels, "a_in", "in_align", ptr)

    def bind_output(self, ptr: int) -> None:
        """Write into the symmetric buffer ``ptr`` (same heap offset on every rank) instead of the result."""
        delta = ptr - self.result_ptr
        if delta == self._out_delta:
            return
        self._out_delta = delta
        self._update(self._out_kernels, "a_delta", "out_align", delta)

    def _update(self, kernels, arg: str, align_attr: str, value: int) -> None:
        """Set kernel argument ``arg`` to ``value`` in every node of ``kernels`` (vector width follows alignment)."""
        a = min(value & -value, 16) if value else 16
        for kern in kernels:
            launch = kern.launch
            getattr(launch, arg).value = value
            if a != getattr(kern, align_attr):
                setattr(kern, align_attr, a)
                launch.set_vec(self._pick(kern))
            launch.update()

    @property
    def output_ptr(self) -> int:
        return self.result_ptr + self._out_delta

    # -- execution ------------------------------------------------------------------------------

    def _enqueue(self, stream: int, sync: bool, cap=None) -> None:
        nb = self.rt.nb
        puts = iter(self._puts)
        for st in self.launch_list.steps:
            op = st.op
            if op == "kernel":
                kern = self._kernels[st.kernel.name]
                kern.launch.launch(stream)
                if cap is not None:
                    nodes = cap.mark()
                    if len(nodes) != 1:
                        raise CudaError(
                            f"expected one captured node for the {st.kernel.name} kernel, got {len(nodes)}"
                        )
                    self._captured_kernels.append((kern, nodes[0]))
            elif op == "sync_all":
                if st.toggle and not sync and cap is None:
                    continue
                nb.sync_all_on_stream(stream)
                if cap is not None and st.toggle:
                    self._captured_toggles.extend(cap.mark())
            elif op == "barrier_all":
                nb.barrier_all_on_stream(stream)
            elif op == "quiet":
                nb.quiet_on_stream(stream)
            elif op == "put":
                dst, src, n, pe = next(puts)
                nb.putmem_nbi_on_stream(dst, src, n, pe, stream)

    def _instantiate(self):
        from cuda.bindings import driver

        from .graph import Capture, GraphExec, check

        self._captured_kernels, self._captured_toggles = [], []
        s = self.rt.stream
        with Capture(s) as cap:
            self._enqueue(s, True, cap)
        ge = GraphExec(cap.graph, upload_stream=s)
        toggles = []
        for nd in self._captured_toggles:
            t = check(driver.cuGraphNodeGetType(nd), "cuGraphNodeGetType")
            if t != driver.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL:
                toggles = []  # cannot disable it: sync_symmetric_memory=False then still syncs
                break
            toggles.append(nd)
        ge.toggle_nodes = toggles
        for kern, nd in self._captured_kernels:
            kern.launch.nodes = [(ge.handle, int(nd))]
        self._captured_kernels = self._captured_toggles = None
        self._drv.call("cuStreamSynchronize", s)
        self._exec = ge
        if self._logger is not None:
            self._logger.info(
                "cuda graph captured: %s; nodes %s; entry sync toggle %s",
                " -> ".join(self.launch_list.node_labels()),
                ge.count_nodes(),
                "yes" if toggles else "no",
            )
        return ge

    def execute(
        self,
        stream: int = 0,
        *,
        sync_symmetric_memory: bool = True,
        blocking: bool = False,
        graph: bool | None = None,
    ) -> None:
        """Collective: run the redistribution on ``stream`` (one cuGraphLaunch; eager with graph=False).

        ``graph=None`` follows ``self.graphs`` (default True; environment REDIST_CUDA_GRAPHS=0 makes
        every execute eager: the same kernels and NVSHMEM calls, enqueued directly, for debugging).
        """
        if graph is None:
            graph = self.graphs
        if self._freed:
            raise InvalidStateError("this CUDA executable has been freed")
        if self._need_workspace:
            self._restore_workspace()
        if graph:
            ge = self._exec
            if ge is None:
                ge = self._instantiate()
            if ge.toggle_nodes and sync_symmetric_memory != ge.toggle_enabled:
                ge.set_toggle(sync_symmetric_memory)
            rc = self._drv.cuGraphLaunch(ge.handle, stream)
            if rc:
                from .graph import _err_name

                raise CudaError(f"cuGraphLaunch failed with CUresult {rc}{_err_name(rc)}")
        else:
            self._enqueue(stream, sync_symmetric_memory)
        self._launches += 1
        if blocking:
            self._drv.call("cuStreamSynchronize", stream)

    def graph(self, stream: int = 0) -> int:
        """The CUgraph (int) that execute() launches; captured now if needed.

        A parent graph that embeds it as a child node gets a copy: later rebinds don't reach it.
        """
        if self._freed:
            raise InvalidStateError("this CUDA executable has been freed")
        if self._need_workspace:
            self._restore_workspace()
        ge = self._exec or self._instantiate()
        return int(ge.graph)

    # -- workspace and lifetime -----------------------------------------------------------------

    def _destroy_exec(self) -> None:
        ge, self._exec = self._exec, None
        for kern in self._kernels.values():
            kern.launch.nodes = []
        if ge is not None:
            ge.destroy()

    def release_workspace(self) -> None:
        """Collective: free the symmetric staging (put transport); re-made by the next execute."""
        if self._freed or not (self._send or self._recv):
            return
        self.rt.synchronize()  # no in-flight graph may still use the staging
        self._destroy_exec()
        send, recv, self._send, self._recv = self._send, self._recv, 0, 0
        self.rt.sym_free(send)
        self.rt.sym_free(recv)
        self._need_workspace = True

    def _restore_workspace(self) -> None:
        self._alloc_staging()
        for name in ("copy", "unpack"):
            kern = self._kernels.get(name)
            if kern is not None and any(
                s.dst_space == "send" or s.src_space == "recv" for s in kern.step.segments
            ):
                self.rt.htod(kern.table_ptr, self._table(kern.step))
        self._puts_resolve()
        self._need_workspace = False

    @property
    def workspace_bytes(self) -> int:
        return self.launch_list.send_staging_bytes + self.launch_list.recv_staging_bytes

    def detach_result(self) -> None:
        """The caller owns the result now (function form): free() leaves it on the heap."""
        if not self._detached and self.result_ptr:
            self._detached = True
            self.rt.sym_set_owner(self.result_ptr, "user")

    def free(self) -> None:
        """Collective: wait for in-flight work, destroy the graph, free tables, staging, result."""
        if self._freed:
            return
        self._freed = True
        rt = self.rt
        if rt.stopped:
            return
        try:
            rt.synchronize()
        finally:
            self._destroy_exec()
            for kern in self._kernels.values():
                rt.dev_free(kern.table_ptr)
            self._kernels = {}
            for p in (self._send, self._recv):
                if p:
                    rt.sym_free(p)
            self._send = self._recv = 0
            if self.result_ptr and not self._detached:
                rt.sym_free(self.result_ptr)
            self.result_ptr = 0

    def describe(self) -> str:
        vecs = ", ".join(f"{n}: {k.launch.vec} B" for n, k in self._kernels.items())
        state = "captured" if self._exec is not None else "not captured yet"
        return f"{self.launch_list.describe()}\n  graph {state}; vector widths now {vecs or '-'}"

    @property
    def transports(self) -> dict[int, str]:
        ll = self.launch_list
        return {**{d: "push" for d in ll.push_to}, **{d: "put" for d in ll.put_to}}
