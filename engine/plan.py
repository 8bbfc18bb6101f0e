# SPDX-License-Identifier: Apache-2.0
"""The transfer plan: frozen, backend-free data saying who sends which elements where.

``make_plan(rank, in_boxes, out_boxes, itemsize=..., in_strides=..., out_order=...)`` looks at
every rank's input box and output box and returns, for ``rank``, the list of transfers it takes
part in. Each transfer is one global sub-box ``in_boxes[src] ∩ out_boxes[dst]``, described three
ways, all in elements:

* ``src``/``dst``: one strided copy straight from the source rank's operand into the destination
  rank's result (what a peer-writing GPU kernel or a shared-memory copy does);
* ``pack``: source operand -> a dense staging slot (what a packing backend sends);
* ``unpack``: dense staging slot -> destination result.

Every region is *simplified*: dimensions of extent 1 are dropped and neighbouring dimensions
merged wherever both sides are contiguous across them, so a slab-to-slab move of a C array is a
few long contiguous runs. Dimensions are walked in the order of the destination's strides
(largest first), which is also the element order of the staging slot: sender and receiver agree
on the packed layout without knowing each other's operand strides.

Staging slots are laid out with ``STAGING_ALIGN``-byte alignment. A rank's receive staging holds
one slot per source rank, ordered by source rank; ``remote_offsets[i]`` tells the sender where
its slot starts in the destination's staging, so one-sided puts need no handshake. Symmetric
(NVSHMEM) staging must be equally large on every rank: ``max_*_staging_bytes`` give that size.

Peers are ordered to spread traffic: at step ``k`` rank ``r`` sends to ``r+k`` and receives from
``r-k`` (mod P), so no rank is everybody's first target.
"""

from __future__ import annotations

import hashlib
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from . import geometry as geo
from .geometry import BoxT

__all__ = ["STAGING_ALIGN", "Region", "Piece", "Transfer", "Plan", "make_plan", "simplify", "plan_key"]

STAGING_ALIGN = 256
_PLAN_VERSION = 1


@dataclass(frozen=True)
class Region:
    """``shape`` elements at ``offset + sum(i_k * strides[k])`` of a buffer (all in elements)."""

    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Copy:
    """A strided copy ``dst[dst_offset + i·dst_strides] = src[src_offset + i·src_strides]``.

    ``shape`` and both stride tuples are simplified together (see :func:`simplify`).
    """

    shape: tuple[int, ...]
    src_offset: int
    src_strides: tuple[int, ...]
    dst_offset: int
    dst_strides: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def contiguous_inner(self) -> bool:
        """True when the innermost dimension is contiguous on both sides."""
        return self.src_strides[-1] == 1 and self.dst_strides[-1] == 1

    @property
    def run_length(self) -> int:
        """Elements per contiguous run (1 when the innermost dimension is strided)."""
        return self.shape[-1] if self.contiguous_inner else 1

    @property
    def runs(self) -> int:
        """Number of contiguous runs the copy is made of."""
        return self.size // self.run_length

    @property
    def src(self) -> Region:
        return Region(self.src_offset, self.shape, self.src_strides)

    @property
    def dst(self) -> Region:
        return Region(self.dst_offset, self.shape, self.dst_strides)


@dataclass(frozen=True)
class Piece:
    """One box of a transfer: ``direct`` operand -> result, ``pack`` operand -> its place in the
    staging slot, ``unpack`` staging slot -> result."""

    box: BoxT
    direct: Copy
    pack: Copy
    unpack: Copy


@dataclass(frozen=True)
class Transfer:
    """Elements of ``box`` (global coordinates) that rank ``src`` holds and rank ``dst`` needs.

    ``direct`` copies operand -> result; ``pack`` copies operand -> a dense staging slot
    (offset 0); ``unpack`` copies a dense staging slot -> result. ``nbytes`` is the payload.
    With replicated inputs a pair may move several boxes: ``more`` holds the others, packed one
    after another into the same slot; backends walk :attr:`pieces`.
    """

    src: int
    dst: int
    box: BoxT
    nbytes: int
    direct: Copy
    pack: Copy
    unpack: Copy
    more: tuple[Piece, ...] = ()

    @property
    def pieces(self) -> tuple[Piece, ...]:
        """Every box of the transfer with its copies (the first is ``box``/``direct``/``pack``/``unpack``)."""
        return (Piece(self.box, self.direct, self.pack, self.unpack),) + self.more

    @property
    def elements(self) -> int:
        return self.direct.size + sum(p.direct.size for p in self.more)

    @property
    def src_region(self) -> Region:
        return self.direct.src

    @property
    def dst_region(self) -> Region:
        return self.direct.dst


def simplify(shape: Sequence[int], *strides: Sequence[int]) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Drop unit dimensions and merge neighbours that are contiguous in every stride list.

    The dimension order given is kept (outermost first). Always returns at least one dimension.
    """
    dims = [d for d in range(len(shape)) if shape[d] != 1]
    out_shape: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for d in reversed(dims):  # innermost first
        if out_shape and all(st[d] == o[-1] * out_shape[-1] for st, o in zip(strides, out_strides)):
            out_shape[-1] *= shape[d]
            continue
        out_shape.append(shape[d])
        for st, o in zip(strides, out_strides):
            o.append(st[d])
    if not out_shape:
        return (1,), tuple((1,) for _ in strides)
    return tuple(reversed(out_shape)), tuple(tuple(reversed(o)) for o in out_strides)


def _copy(shape, src_off, src_st, dst_off, dst_st) -> Copy:
    sh, (s, d) = simplify(shape, src_st, dst_st)
    return Copy(sh, src_off, s, dst_off, d)


def order_perm(out_order: str | tuple[int, ...], ndim: int) -> list[int]:
    """Axes from slowest- to fastest-varying in a dense ``out_order`` array ("C", "F" or a permutation)."""
    return list(geo.axis_order(out_order, ndim))


def _transfer(s, d, boxes, itemsize, perm, src_lower, src_strides, dst_lower, dst_strides) -> Transfer:
    """Transfer of ``boxes`` (one or more) from rank s's operand to rank d's output, dims walked
    in ``perm`` order.

    The staging slot holds the boxes one after another, each dense in ``perm`` order, which
    depends on the plan only (never on the actual strides of either side): sender and receiver
    agree on the packed layout.
    """
    pieces, slot = [], 0
    for box in boxes:
        shape = [box[1][k] - box[0][k] for k in perm]
        s_st = [src_strides[k] for k in perm]
        d_st = [dst_strides[k] for k in perm]
        s_off = geo.region_offset(src_lower, box[0], src_strides)
        d_off = geo.region_offset(dst_lower, box[0], dst_strides)
        packed = geo.dense_strides(shape, "C")
        pieces.append(Piece(box, _copy(shape, s_off, s_st, d_off, d_st), _copy(shape, s_off, s_st, slot, packed),
                            _copy(shape, slot, packed, d_off, d_st)))
        slot += math.prod(shape)
    first = pieces[0]
    return Transfer(src=s, dst=d, box=first.box, nbytes=slot * itemsize, direct=first.direct, pack=first.pack,
                    unpack=first.unpack, more=tuple(pieces[1:]))


def plan_key(*parts: object) -> str:
    """Stable hex key of a problem description (same problem -> same key, across processes)."""
    return hashlib.sha256(repr((_PLAN_VERSION,) + parts).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Plan:
    """Everything rank ``rank`` does in one redistribution. Build it with :func:`make_plan`."""

    rank: int
    nranks: int
    ndim: int
    itemsize: int
    out_order: str | tuple[int, ...]  # "C", "F", or the axes slowest-varying first
    global_box: BoxT | None
    in_boxes: tuple[BoxT, ...]
    out_boxes: tuple[BoxT, ...]
    in_shape: tuple[int, ...]
    in_strides: tuple[int, ...]
    out_shape: tuple[int, ...]
    out_strides: tuple[int, ...]
    local: Transfer | None
    sends: tuple[Transfer, ...]
    recvs: tuple[Transfer, ...]
    send_offsets: tuple[int, ...]
    recv_offsets: tuple[int, ...]
    remote_offsets: tuple[int, ...]
    send_staging_bytes: int
    recv_staging_bytes: int
    max_send_staging_bytes: int
    max_recv_staging_bytes: int
    key: str = field(compare=False)

    @property
    def in_box(self) -> BoxT:
        return self.in_boxes[self.rank]

    @property
    def out_box(self) -> BoxT:
        return self.out_boxes[self.rank]

    @property
    def in_elements(self) -> int:
        return math.prod(self.in_shape)

    @property
    def out_elements(self) -> int:
        return math.prod(self.out_shape)

    @property
    def transfers(self) -> tuple[Transfer, ...]:
        """Local transfer (if any) then sends, in peer order."""
        return ((self.local,) if self.local is not None else ()) + self.sends

    def retarget(self, out_strides: Sequence[int]) -> Plan:
        """This plan with this rank's output at element ``out_strides`` (an ``out=`` of any strides).

        Only what this rank writes changes (its local copy and the unpacks of its receives);
        what it sends, and the staging layout, stay as they are. A receive's ``direct`` copy
        (the sender's view, which needs the sender's strides) is left as planned.
        """
        out_strides = tuple(int(v) for v in out_strides)
        if out_strides == self.out_strides:
            return self
        perm = order_perm(self.out_order, self.ndim)
        lower = self.out_box[0]

        def again(t: Transfer) -> Transfer:
            src_lower = self.in_boxes[t.src][0]
            src_strides = self.in_strides if t.src == self.rank else (1,) * self.ndim  # unused for recvs
            return _transfer(t.src, t.dst, [p.box for p in t.pieces], self.itemsize, perm, src_lower, src_strides,
                             lower, out_strides)

        def unpacks_again(t: Transfer) -> Transfer:  # the receive's unpacks only (its direct is the sender's)
            moved = again(t)
            return replace(t, unpack=moved.unpack,
                           more=tuple(replace(p, unpack=q.unpack) for p, q in zip(t.more, moved.more)))

        local = again(self.local) if self.local is not None else None
        recvs = tuple(unpacks_again(t) for t in self.recvs)
        return replace(self, out_strides=out_strides, local=local, recvs=recvs)

    def out_strides_of(self, rank: int) -> tuple[int, ...]:
        """Rank ``rank``'s planned (dense, ``out_order``) result strides."""
        return geo.dense_strides(geo.box_shape(self.out_boxes[rank]), self.out_order)

    def retarget_all(self, out_strides: Sequence[Sequence[int]]) -> Plan:
        """This plan with every rank's output at its element strides ``out_strides[r]``.

        What :meth:`retarget` does for this rank's writes, plus the direct copies of its sends
        (what a peer-writing backend stores into each destination, with that destination's strides).
        """
        mine = self.retarget(out_strides[self.rank])
        perm = order_perm(self.out_order, self.ndim)
        lower = self.in_boxes[self.rank][0]
        def directs_again(t: Transfer) -> Transfer:
            moved = _transfer(t.src, t.dst, [p.box for p in t.pieces], self.itemsize, perm, lower, self.in_strides,
                              self.out_boxes[t.dst][0], tuple(int(v) for v in out_strides[t.dst]))
            return replace(t, direct=moved.direct,
                           more=tuple(replace(p, direct=q.direct) for p, q in zip(t.more, moved.more)))

        sends = tuple(directs_again(t) for t in mine.sends)
        return replace(mine, sends=sends)

    @property
    def send_bytes(self) -> dict[int, int]:
        """Payload bytes per destination peer (remote only)."""
        return {t.dst: t.nbytes for t in self.sends}

    @property
    def recv_bytes(self) -> dict[int, int]:
        """Payload bytes per source peer (remote only)."""
        return {t.src: t.nbytes for t in self.recvs}

    def describe(self) -> str:
        """A human-readable account of the plan (one line per transfer)."""
        fmt = geo.format_box
        lines = [
            f"Plan rank {self.rank}/{self.nranks} key={self.key} ndim={self.ndim} itemsize={self.itemsize} "
            f"out_order={self.out_order}",
            f"  global {fmt(self.global_box) if self.global_box else 'empty'}",
            f"  input  {fmt(self.in_box)} shape={self.in_shape} strides={self.in_strides}",
            f"  output {fmt(self.out_box)} shape={self.out_shape} strides={self.out_strides}",
            f"  staging send={self.send_staging_bytes} B recv={self.recv_staging_bytes} B "
            f"(max over ranks: send={self.max_send_staging_bytes} B recv={self.max_recv_staging_bytes} B)",
        ]

        def one(kind, t: Transfer, extra=""):
            c = t.direct
            more = f"; and {len(t.more)} more box(es): " + ", ".join(fmt(p.box) for p in t.more) if t.more else ""
            return (
                f"  {kind:5s} {t.src}->{t.dst} {fmt(t.box)} {t.nbytes} B; {c.runs} run(s) of {c.run_length} "
                f"elem; copy shape={c.shape} src@{c.src_offset}{c.src_strides} dst@{c.dst_offset}{c.dst_strides}"
                f"{more}{extra}"
            )

        if self.local is not None:
            lines.append(one("local", self.local))
        for t, off, roff in zip(self.sends, self.send_offsets, self.remote_offsets):
            lines.append(one("send", t, f"; staging@{off} -> peer staging@{roff}"))
        for t, off in zip(self.recvs, self.recv_offsets):
            lines.append(one("recv", t, f"; staging@{off}"))
        if self.local is None and not self.sends and not self.recvs:
            lines.append("  (nothing to move)")
        return "\n".join(lines)


def make_plan(
    rank: int,
    in_boxes: Sequence[BoxT],
    out_boxes: Sequence[BoxT],
    *,
    itemsize: int,
    in_strides: Sequence[Sequence[int] | None] | None = None,
    out_order: str | Sequence[int] = "C",
) -> Plan:
    """Plan rank ``rank``'s part of moving data from ``in_boxes`` to ``out_boxes``.

    Parameters
    ----------
    rank:
        The rank to plan for, ``0 <= rank < len(in_boxes)``.
    in_boxes, out_boxes:
        One ``(lower, upper)`` box per rank, global coordinates (see :mod:`.geometry`). They
        must be validated already: exact covers of the same global box, or outputs covered by
        overlapping inputs (``allow_overlap``), each element coming from the lowest rank holding it.
    itemsize:
        Bytes per element (any positive size: 1, 12, a structured dtype...).
    in_strides:
        Per rank, the element strides of that rank's operand (positive; padded arrays allowed),
        or None for dense in ``out_order``. None altogether means dense everywhere.
    out_order:
        "C" or "F" or a permutation of the axes (slowest-varying first, e.g. ``(1, 0, 2)``):
        every rank's result is dense in this order. Copies and staging slots are walked in it,
        so a permuted result is written directly (no transpose pass).
    """
    rank, itemsize = operator.index(rank), operator.index(itemsize)  # numpy ints -> int: stable key
    nranks = len(in_boxes)
    if len(out_boxes) != nranks:
        raise ValueError(f"got {nranks} input boxes but {len(out_boxes)} output boxes")
    if not 0 <= rank < nranks:
        raise ValueError(f"rank {rank} is not in [0, {nranks})")
    if itemsize <= 0:
        raise ValueError(f"itemsize must be positive, got {itemsize}")
    in_boxes = tuple(geo.as_box(*b) for b in in_boxes)
    out_boxes = tuple(geo.as_box(*b) for b in out_boxes)
    counts, parts = geo.sources(in_boxes, out_boxes)  # replicated inputs: the lowest holder sends
    ndim = len(in_boxes[0][0])
    out_order = geo.normal_order(out_order, ndim)
    in_shapes = [geo.box_shape(b) for b in in_boxes]
    out_shapes = [geo.box_shape(b) for b in out_boxes]
    strides = [
        tuple(int(s) for s in st) if st is not None else geo.dense_strides(sh, out_order)
        for st, sh in zip(in_strides if in_strides is not None else [None] * nranks, in_shapes)
    ]
    out_strides = [geo.dense_strides(sh, out_order) for sh in out_shapes]
    perm = order_perm(out_order, ndim)

    def transfer(s: int, d: int, boxes: Sequence[BoxT]) -> Transfer:
        return _transfer(s, d, boxes, itemsize, perm, in_boxes[s][0], strides[s], out_boxes[d][0], out_strides[d])

    # Bytes between every (src, dst) pair: the staging layout of every rank depends on it.
    vol = counts * itemsize
    np.fill_diagonal(vol, 0)

    local = None
    mine = parts(rank, rank)
    if mine:
        local = transfer(rank, rank, mine)
    sends, recvs = [], []
    for k in range(1, nranks):
        d = (rank + k) % nranks
        if vol[rank, d]:
            sends.append(transfer(rank, d, parts(rank, d)))
        s = (rank - k) % nranks
        if vol[s, rank]:
            recvs.append(transfer(s, rank, parts(s, rank)))

    key = plan_key(rank, nranks, itemsize, out_order, in_boxes, out_boxes, tuple(strides))
    return Plan(
        rank=rank,
        nranks=nranks,
        ndim=ndim,
        itemsize=itemsize,
        out_order=out_order,
        global_box=geo.bounding_box(in_boxes),
        in_boxes=in_boxes,
        out_boxes=out_boxes,
        in_shape=in_shapes[rank],
        in_strides=strides[rank],
        out_shape=out_shapes[rank],
        out_strides=out_strides[rank],
        local=local,
        sends=tuple(sends),
        recvs=tuple(recvs),
        key=key,
        **_staging(_aligned(vol), rank, sends, recvs),
    )


@dataclass(frozen=True)
class FusedPlan:
    """Several *fields* (arrays of the same boxes, each with its own element size and strides)
    moved in one exchange. Build it with :func:`fuse`.

    ``fields[f]`` is field f's own :class:`Plan` (the same rank, boxes, order of axes and
    transfers for every field). The staging of the exchange is fused: a pair of ranks has one
    slot holding every field's part one after another, each part ``STAGING_ALIGN``-aligned, so a
    packing backend sends one message per peer and a GPU graph one put. ``send_parts[i][f]`` /
    ``recv_parts[i][f]`` are where field f's part of send / receive i starts in its slot (bytes;
    the same on both sides: it depends on the element counts and sizes only).
    """

    fields: tuple[Plan, ...]
    send_offsets: tuple[int, ...]
    recv_offsets: tuple[int, ...]
    remote_offsets: tuple[int, ...]
    send_parts: tuple[tuple[int, ...], ...]
    recv_parts: tuple[tuple[int, ...], ...]
    send_staging_bytes: int
    recv_staging_bytes: int
    max_send_staging_bytes: int
    max_recv_staging_bytes: int
    key: str = field(compare=False)

    @property
    def first(self) -> Plan:
        return self.fields[0]

    @property
    def nfields(self) -> int:
        return len(self.fields)

    @property
    def rank(self) -> int:
        return self.first.rank

    @property
    def nranks(self) -> int:
        return self.first.nranks

    @property
    def ndim(self) -> int:
        return self.first.ndim

    @property
    def in_boxes(self) -> tuple[BoxT, ...]:
        return self.first.in_boxes

    @property
    def out_boxes(self) -> tuple[BoxT, ...]:
        return self.first.out_boxes

    @property
    def out_box(self) -> BoxT:
        return self.first.out_box

    @property
    def itemsizes(self) -> tuple[int, ...]:
        return tuple(p.itemsize for p in self.fields)

    @property
    def send_bytes(self) -> dict[int, int]:
        """Payload bytes per destination peer, every field (remote only)."""
        return {t.dst: sum(p.sends[i].nbytes for p in self.fields) for i, t in enumerate(self.first.sends)}

    @property
    def recv_bytes(self) -> dict[int, int]:
        """Payload bytes per source peer, every field (remote only)."""
        return {t.src: sum(p.recvs[i].nbytes for p in self.fields) for i, t in enumerate(self.first.recvs)}

    def retarget(self, out_strides: Sequence[Sequence[int]]) -> FusedPlan:
        """Every field's :meth:`Plan.retarget` (``out_strides[f]``: field f's output strides)."""
        return replace(self, fields=tuple(p.retarget(st) for p, st in zip(self.fields, out_strides)))

    def retarget_all(self, out_strides: Sequence[Sequence[Sequence[int]]]) -> FusedPlan:
        """Every field's :meth:`Plan.retarget_all` (``out_strides[f][r]``: field f's strides on rank r)."""
        return replace(self, fields=tuple(p.retarget_all(st) for p, st in zip(self.fields, out_strides)))

    def describe(self) -> str:
        """The fields' plans, then the fused staging (one slot per peer, every field's part in it)."""
        lines = [f"Fused plan: {self.nfields} field(s), element sizes {list(self.itemsizes)} B, one exchange; "
                 f"staging send={self.send_staging_bytes} B recv={self.recv_staging_bytes} B (max over ranks: "
                 f"send={self.max_send_staging_bytes} B recv={self.max_recv_staging_bytes} B)"]
        for t, off, roff, parts in zip(self.first.sends, self.send_offsets, self.remote_offsets, self.send_parts):
            lines.append(f"  send {t.src}->{t.dst}: one slot @{off} -> peer @{roff}, field parts at {list(parts)}")
        for t, off, parts in zip(self.first.recvs, self.recv_offsets, self.recv_parts):
            lines.append(f"  recv {t.src}->{t.dst}: one slot @{off}, field parts at {list(parts)}")
        for f, p in enumerate(self.fields):
            lines.append(f"  field {f}: " + p.describe().replace("\n", "\n    "))
        return "\n".join(lines)


def _aligned(n) -> np.ndarray:
    return -(-n // STAGING_ALIGN) * STAGING_ALIGN


def _staging(slot: np.ndarray, rank: int, sends: Sequence[Transfer], recvs: Sequence[Transfer]) -> dict[str, object]:
    """Rank ``rank``'s staging layout from every pair's slot size ``slot[s, d]`` (bytes, aligned):
    its send slots one after another in the order of ``sends``; a rank's receive staging holds
    one slot per source, ordered by source rank, so the start of s's slot in d's is the sum of
    the earlier ones (what ``remote_offsets`` tells the sender). The fields of :class:`Plan`
    and :class:`FusedPlan` that describe it."""
    recv_starts = np.cumsum(slot, axis=0) - slot
    sizes = [int(slot[rank, t.dst]) for t in sends]
    send_totals, recv_totals = slot.sum(axis=1), slot.sum(axis=0)
    return dict(
        send_offsets=tuple(int(x) for x in np.cumsum([0] + sizes)[:-1]),
        recv_offsets=tuple(int(recv_starts[t.src, rank]) for t in recvs),
        remote_offsets=tuple(int(recv_starts[rank, t.dst]) for t in sends),
        send_staging_bytes=int(send_totals[rank]),
        recv_staging_bytes=int(recv_totals[rank]),
        max_send_staging_bytes=int(send_totals.max()) if slot.size else 0,
        max_recv_staging_bytes=int(recv_totals.max()) if slot.size else 0,
    )


def fuse(plans: Sequence[Plan]) -> FusedPlan:
    """One exchange for the fields ``plans`` (every one made by :func:`make_plan` for the same
    rank, boxes and ``out_order``; element sizes and operand strides may differ).

    A single plan fuses to its own staging layout (the same offsets), so backends may lower
    every plan as a :class:`FusedPlan`.
    """
    plans = tuple(plans)
    if not plans:
        raise ValueError("fuse() needs at least one plan")
    first = plans[0]
    for f, p in enumerate(plans[1:], 1):
        if (p.rank, p.in_boxes, p.out_boxes, p.out_order) != (first.rank, first.in_boxes, first.out_boxes,
                                                              first.out_order):
            raise ValueError(f"field {f}'s plan has other boxes, rank or order of axes than field 0's")
    counts, _ = geo.sources(first.in_boxes, first.out_boxes)
    np.fill_diagonal(counts, 0)
    parts = [_aligned(counts * p.itemsize) for p in plans]  # per field, per pair: the aligned part
    starts = np.cumsum(parts, axis=0) - parts  # per field, per pair: where its part starts in the slot
    me = first.rank
    return FusedPlan(
        fields=plans,
        send_parts=tuple(tuple(int(starts[f][me, t.dst]) for f in range(len(plans))) for t in first.sends),
        recv_parts=tuple(tuple(int(starts[f][t.src, me]) for f in range(len(plans))) for t in first.recvs),
        key=plan_key("fused", *(p.key for p in plans)),
        **_staging(sum(parts), me, first.sends, first.recvs),
    )
