# SPDX-License-Identifier: Apache-2.0
"""Messages of the host backend: how each remote transfer moves, seen from one rank.

A :class:`Message` is one send or receive of a plan: its peer, its bytes, and per field a
:class:`Part`: the strided region it reads (send) or writes (receive). Its *mode*: ``"direct"``
(one contiguous run, in place), ``"datatype"`` (an MPI derived datatype straight on the buffer),
or ``"staged"`` (numpy pack or unpack through engine-owned staging; several fields' small parts
go packed together). A :class:`Side` holds the persistent requests and views of
one binding (an operand address, or an output address + strides).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..plan import STAGING_ALIGN, Copy, Transfer
from ._datatypes import is_contiguous, span_bytes

if TYPE_CHECKING:
    import numpy as np
    from mpi4py.MPI import Datatype, Prequest

__all__ = ["FUSE_MAX_BYTES", "Message", "Part", "Side", "align", "datatype_pays", "messages"]


def align(n: int) -> int:
    """``n`` rounded up to the staging alignment."""
    return -(-n // STAGING_ALIGN) * STAGING_ALIGN


# "hybrid" moves a strided region as an MPI datatype where that measured faster than numpy pack +
# contiguous send in a whole exchange (perf/history/issue10.md "Hybrid thresholds", MPICH 5.0 shared memory,
# 2 ranks): runs of 512 B or more, on either side, from 4 KiB messages up (a user-level pack sits on
# the critical path of both ranks: 32 KiB in 16 runs of 2 KiB costs 18.5 us packed, 13 us as a
# datatype). MPICH's datatype engine pays per run on the sending side, so short runs (64 B: 4x
# slower) and very many runs (8 MiB in 4 KiB runs: 1.7x slower) stay packed.
HYBRID_MIN_BYTES = 4 << 10
HYBRID_SEND_MIN_RUN_BYTES = 512
HYBRID_SEND_MAX_RUNS = 512
HYBRID_RECV_MIN_RUN_BYTES = 512


def datatype_pays(send: bool, nbytes: int, runs: int, run_bytes: int) -> bool:
    """Whether "hybrid" moves a strided message with an MPI datatype (else numpy pack/unpack)."""
    if nbytes < HYBRID_MIN_BYTES:
        return False
    if send:
        return run_bytes >= HYBRID_SEND_MIN_RUN_BYTES and runs <= HYBRID_SEND_MAX_RUNS
    return run_bytes >= HYBRID_RECV_MIN_RUN_BYTES


class Part:
    """One field's share of a message: the copies of its boxes, its region on this rank, and how
    it would move on its own (``"direct"``, ``"datatype"`` or ``"staged"``)."""

    __slots__ = ("copies", "dtype", "field", "itemsize", "mode", "nbytes", "offset", "shape", "span", "start",
                 "strides")

    copies: tuple[Copy, ...]
    dtype: Datatype | None
    field: int
    itemsize: int
    mode: str
    nbytes: int
    offset: int
    shape: tuple[int, ...]
    span: int
    start: int
    strides: tuple[int, ...]

    def __init__(self, field: int, t: Transfer, send: bool, method: str, itemsize: int, start: int) -> None:
        self.field, self.itemsize, self.start = field, itemsize, start
        self.copies = tuple(p.pack if send else p.unpack for p in t.pieces)  # one per box, into one slot
        c = self.copies[0]
        self.nbytes = t.nbytes
        if send:
            self.offset, self.shape, self.strides = c.src_offset, c.shape, c.src_strides
        else:
            self.offset, self.shape, self.strides = c.dst_offset, c.shape, c.dst_strides
        positive = all(s > 0 for s in self.strides)
        self.span = span_bytes(self.shape, self.strides, itemsize) if positive else 0
        if len(self.copies) > 1:  # several boxes (replicated inputs): packed into one slot, one message
            self.mode = "staged"
        elif is_contiguous(self.shape, self.strides):
            self.mode = "direct"
        elif method == "pack" or not positive:
            self.mode = "staged"
        elif method == "hybrid":
            runs, run = self.runs
            self.mode = "datatype" if datatype_pays(send, self.nbytes, runs, run * itemsize) else "staged"
        else:
            self.mode = "datatype"
        self.dtype = None  # committed MPI datatype when mode == "datatype"

    @property
    def runs(self) -> tuple[int, int]:
        """(number of contiguous runs, elements per run) of this rank's side of the part."""
        run = self.shape[-1] if self.strides[-1] == 1 else 1
        return math.prod(self.shape) // run, run


#: several fields: a field's part of at least this many bytes goes as its own message (in its own
#: mode: in place, an MPI datatype or packed, whatever it would be alone), the smaller parts are
#: packed into one message together (perf/history/issue15.md "Fused fields": one packed message of three
#: 8 KiB parts costs 0.6-0.7x three messages; at 64 KiB parts, packing them costs 1.4x the
#: messages, which MPI moves in place).
FUSE_MAX_BYTES = 32 << 10


class Message:
    """One remote exchange with a peer seen from this rank (a send or a receive): one or more
    fields' parts, one after another in the message's bytes, and how the message moves.

    With one part the mode is the part's; several parts (small ones, see :func:`messages`) are
    packed into one staging slot (``"staged"``). ``index`` is the message's place among those of
    its pair (0: the first, which also carries the call's agreement in its tag).
    """

    __slots__ = ("index", "mode", "nbytes", "parts", "peer", "shared", "slot", "tag")

    index: int
    mode: str
    nbytes: int
    parts: tuple[Part, ...]
    peer: int
    shared: bool
    slot: int
    tag: int

    def __init__(self, parts: Sequence[Part], peer: int, index: int = 0) -> None:
        start = 0
        for part in parts:
            part.start = start
            start += part.nbytes
        self.parts = tuple(parts)
        self.nbytes = start
        self.peer, self.index = peer, index
        self.mode = parts[0].mode if len(parts) == 1 else "staged"
        self.slot = -1  # byte offset in this rank's staging when mode == "staged"
        self.shared = False  # staged, and an earlier send packs the same elements into the same slot
        self.tag = -1  # set by the executable (the first message: the agreement tags; the others: their own)

    @property
    def key(self) -> tuple[tuple[int, tuple[Copy, ...]], ...]:
        """What the message packs: equal keys pack the same bytes."""
        return tuple((p.field, p.copies) for p in self.parts)


def messages(transfers: Sequence[Transfer], send: bool, method: str, itemsizes: Sequence[int]) -> list[Message]:
    """The messages of one pair of ranks, one transfer per field (this rank's side).

    One field: one message. Several: every part of :data:`FUSE_MAX_BYTES` or more alone, the
    smaller ones packed together first. Decided from the part sizes only, which both sides know
    (never from a side's mode: a receiver's changes with its out= strides).
    """
    t = transfers[0]
    peer = t.dst if send else t.src
    parts = [Part(f, tr, send, method, isz, 0) for f, (tr, isz) in enumerate(zip(transfers, itemsizes))]
    if len(parts) == 1:
        return [Message(parts, peer)]
    small = [p for p in parts if p.nbytes < FUSE_MAX_BYTES]
    groups = ([small] if small else []) + [[p] for p in parts if p.nbytes >= FUSE_MAX_BYTES]
    return [Message(g, peer, j) for j, g in enumerate(groups)]


class Side:
    """The requests and views of one binding (an operand address, or an output address + strides)."""

    __slots__ = ("copies", "more_requests", "requests", "staged_requests")

    def __init__(self) -> None:
        self.requests: list[Prequest] = []  # receives: of each pair's first message (their tags are checked)
        self.more_requests: list[Prequest] = []  # receives of a pair's further messages (several fields)  # persistent requests straight on the bound buffer
        # (dst_view, src_view) pack or unpack pairs through staging
        self.copies: list[tuple[np.ndarray, np.ndarray]] = []
        # per entry of ``copies`` (sends only): the staging requests that start once it is packed
        self.staged_requests: list[list[Prequest]] = []

    def free(self) -> None:
        for r in self.requests + self.more_requests:
            r.Free()
        self.requests, self.more_requests, self.copies, self.staged_requests = [], [], [], []
