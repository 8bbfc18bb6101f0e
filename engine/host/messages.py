# SPDX-License-Identifier: Apache-2.0
"""Messages of the host backend: how each remote transfer moves, seen from one rank.

A :class:`Message` is one send or receive of a plan: its peer, its bytes, the strided region it
reads (send) or writes (receive), and its *mode*: ``"direct"`` (one contiguous run, in place),
``"datatype"`` (an MPI derived datatype straight on the buffer) or ``"staged"`` (numpy pack or
unpack through engine-owned staging). A :class:`Side` holds the persistent requests and views of
one binding (an operand address, or an output address + strides).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..plan import STAGING_ALIGN, Copy, Transfer
from ._datatypes import is_contiguous, span_bytes

if TYPE_CHECKING:
    import numpy as np
    from mpi4py.MPI import Datatype, Prequest

__all__ = ["Message", "Side", "align", "datatype_pays"]


def align(n: int) -> int:
    """``n`` rounded up to the staging alignment."""
    return -(-n // STAGING_ALIGN) * STAGING_ALIGN


# "hybrid" moves a strided region as an MPI datatype where that measured faster than numpy pack +
# contiguous send in a whole exchange (perf/RESULTS.md "hybrid thresholds", MPICH 5.0 shared memory,
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


class Message:
    """One remote transfer seen from this rank (a send or a receive) and how it moves."""

    __slots__ = ("copies", "dtype", "mode", "nbytes", "offset", "peer", "shape", "shared", "slot", "span", "strides")

    copies: tuple[Copy, ...]
    dtype: Datatype | None
    mode: str
    nbytes: int
    offset: int
    peer: int
    shape: tuple[int, ...]
    shared: bool
    slot: int
    span: int
    strides: tuple[int, ...]

    def __init__(self, t: Transfer, send: bool, method: str, itemsize: int) -> None:
        self.copies = tuple(p.pack if send else p.unpack for p in t.pieces)  # one per box, into one slot
        c = self.copies[0]
        self.peer = t.dst if send else t.src
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
        self.slot = -1  # byte offset in this rank's staging when mode == "staged"
        self.shared = False  # staged, and an earlier send packs the same elements into the same slot

    @property
    def runs(self) -> tuple[int, int]:
        """(number of contiguous runs, elements per run) of this rank's side of the message."""
        run = self.shape[-1] if self.strides[-1] == 1 else 1
        return math.prod(self.shape) // run, run


class Side:
    """The requests and views of one binding (an operand address, or an output address + strides)."""

    __slots__ = ("copies", "requests", "staged_requests")

    def __init__(self) -> None:
        self.requests: list[Prequest] = []  # persistent requests straight on the bound buffer
        # (dst_view, src_view) pack or unpack pairs through staging
        self.copies: list[tuple[np.ndarray, np.ndarray]] = []
        # per entry of ``copies`` (sends only): the staging requests that start once it is packed
        self.staged_requests: list[list[Prequest]] = []

    def free(self) -> None:
        for r in self.requests:
            r.Free()
        self.requests, self.copies, self.staged_requests = [], [], []
