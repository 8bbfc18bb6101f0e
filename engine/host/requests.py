# SPDX-License-Identifier: Apache-2.0
"""The host executable's requests per binding: for each operand (the send side) and each output
(the receive side) the persistent MPI requests, the staging and the numpy views of the pack and
unpack copies, made on first use and kept in small caches (:data:`CACHE_SIZE`
entries per side), and what ``execute`` walks for a pair of them; ``"alltoallw"``'s persistent
collective.

:class:`BindingRequests` is one part of :class:`~.executable.HostExecutable` (its state is made there).
"""

from __future__ import annotations

from collections import OrderedDict

from ..errors import InvalidStateError, NotSupportedError
from ..strided import HostBuffer
from ._datatypes import copy_views, empty_bytes
from .messages import Message, Side, align, messages

__all__ = ["CACHE_SIZE", "BindingRequests"]

#: prepared request sets kept per side (operand addresses; output address + strides)
CACHE_SIZE = 4


class BindingRequests:
    """Building and caching the requests of each binding, of :class:`~.executable.HostExecutable`."""

    def _buffer(self, ptr: int, nbytes: int):
        return self._MPI.buffer.fromaddress(ptr, nbytes)

    def _spec(self, m: Message, bases):
        """``[buffer, count, datatype]`` of a direct or datatype message (one part) on the fields' addresses ``bases``."""
        part = m.parts[0]
        ptr = bases[part.field] + part.offset * part.itemsize
        if m.mode == "direct":
            return [self._buffer(ptr, m.nbytes), m.nbytes, self._MPI.BYTE]
        return [self._buffer(ptr, part.span), 1, part.dtype]

    def _layout(self, strides):
        """(plans, receive messages, receive staging bytes) for outputs with these strides (one tuple per field)."""
        hit = self._layouts.get(strides)
        if hit is None:
            plans = [p.retarget(st) for p, st in zip(self._fields, strides)]
            msgs = [m for i in range(len(plans[0].recvs))
                    for m in messages([p.recvs[i] for p in plans], False, self.method, self._itemsizes)]
            nbytes = 0
            for m in msgs:
                m.tag = self._tag(m)
                if m.mode == "staged":
                    m.slot = nbytes
                    nbytes += align(m.nbytes)
                else:
                    self._commit_parts(m)
            hit = self._layouts[strides] = (plans, msgs, nbytes)
        return hit

    def _send_side(self, ptrs: tuple[int, ...]) -> Side:
        side = self._sides_in.get(ptrs)
        if side is not None:
            self._sides_in.move_to_end(ptrs)
            return side
        side = Side()
        srcs = [HostBuffer(ptr, isz) for ptr, isz in zip(ptrs, self._itemsizes)]
        if self._send_stage is None and self._send_stage_bytes:
            self._make_send_staging()
        after: dict = {}  # slot -> the requests that start once it is packed
        for m, req in zip(self._sends, self._staged_send_reqs):
            if m.mode == "staged":
                if m.shared:  # sent from the slot an earlier send packs: starts after that pack
                    after[m.slot].append(req)
                    continue
                base = self._send_stage.ctypes.data + m.slot
                views = [copy_views(c, srcs[part.field], HostBuffer(base + part.start, part.itemsize))
                         for part in m.parts for c in part.copies]
                for v in views[:-1]:  # the message starts once its last box is packed
                    side.copies.append(v)
                    side.staged_requests.append([])
                side.copies.append(views[-1])
                side.staged_requests.append(after.setdefault(m.slot, [req]))
            elif self.method != "alltoallw":
                side.requests.append(self._comm(m).Send_init(self._spec(m, ptrs), m.peer, m.tag))
        self._evict(self._sides_in, ptrs, side)
        return side

    def _recv_side(self, ptrs: tuple[int, ...], strides) -> Side:
        key = (ptrs, strides)
        side = self._sides_out.get(key)
        if side is not None:
            self._sides_out.move_to_end(key)
            return side
        side = Side()
        _, msgs, nbytes = self._layout(strides)
        MPI = self._MPI
        stage = self._recv_staging(strides, nbytes)
        dsts = [HostBuffer(ptr, isz) for ptr, isz in zip(ptrs, self._itemsizes)]
        for m in msgs:
            reqs = side.more_requests if m.index else side.requests
            if m.mode == "staged":
                base = stage.ctypes.data + m.slot
                side.copies.extend(copy_views(c, HostBuffer(base + part.start, part.itemsize), dsts[part.field])
                                   for part in m.parts for c in part.copies)
                reqs.append(self._comm(m).Recv_init([self._buffer(base, m.nbytes), m.nbytes, MPI.BYTE], m.peer,
                                                    m.tag))
            elif self.method != "alltoallw":
                reqs.append(self._comm(m).Recv_init(self._spec(m, ptrs), m.peer, m.tag))
        self._evict(self._sides_out, key, side)
        return side

    def _evict(self, cache: OrderedDict, key, side: Side) -> None:
        """Insert ``side``; a side pushed out of the cache is freed, with every combination using it."""
        cache[key] = side
        while len(cache) > CACHE_SIZE:
            self._forget_replays()  # their words may name the requests of the side that goes
            _, old = cache.popitem(last=False)
            old.free()
            self._combos.clear()

    def _make_send_staging(self) -> None:
        MPI = self._MPI
        self._send_stage = empty_bytes(self._send_stage_bytes)
        base = self._send_stage.ctypes.data
        self._staged_send_reqs = [
            self._comm(m).Send_init([self._buffer(base + m.slot, m.nbytes), m.nbytes, MPI.BYTE], m.peer, m.tag)
            if m.mode == "staged" else None
            for m in self._sends
        ]

    def _recv_staging(self, strides, nbytes: int):
        stage = self._recv_stage.get(strides)
        if stage is None and nbytes:
            stage = self._recv_stage[strides] = empty_bytes(nbytes)
        return stage

    def _prepare(self) -> None:
        if self._freed:
            raise InvalidStateError("this host executable was freed")
        key = (tuple(self._in_ptrs), self._out_key)
        combo = self._combos.get(key)
        if combo is None:
            combo = self._combine()
            self._combos[key] = combo
            while len(self._combos) > CACHE_SIZE * CACHE_SIZE:
                self._combos.popitem(last=False)
        self._first, self._packs, self._unpacks, self._reqs, self._local = combo
        self._ready = True

    def _combine(self) -> tuple:
        """What execute walks for the current operand and output (built from the cached sides)."""
        in_ptrs, (out_ptrs, strides) = tuple(self._in_ptrs), self._out_key
        send = self._send_side(in_ptrs)
        recv = self._recv_side(out_ptrs, strides)
        plans = self._layout(strides)[0]
        local = [  # (dst_view, src_view) per field and box of the local transfer
            copy_views(piece.direct, HostBuffer(src, p.itemsize), HostBuffer(dst, p.itemsize))
            for p, src, dst in zip(plans, in_ptrs, out_ptrs) if p.local is not None for piece in p.local.pieces
        ]
        if self.method == "alltoallw":
            return [], [], [], [], local
        first = recv.requests + recv.more_requests + send.requests
        packs = [(d, s, r) for (d, s), r in zip(send.copies, send.staged_requests)]
        reqs = first + [r for rs in send.staged_requests for r in rs]
        return first, packs, recv.copies, reqs, local

    def _make_alltoallw(self) -> None:
        """(Re)create the persistent Alltoallw (collective: every rank calls it in the same execute)."""
        MPI = self._MPI
        P = self._fields[0].nranks
        if self._a2a is not None:
            self._a2a.Free()
            self._a2a = None
        _, msgs, _ = self._layout(self._out_key[1])
        sc, sd, st = [0] * P, [0] * P, [MPI.BYTE] * P
        rc, rd, rt = [0] * P, [0] * P, [MPI.BYTE] * P
        ins, outs = self._in_ptrs[0], self._out_key[0][0]
        for ms, base, c, d, t in ((self._sends, ins, sc, sd, st), (msgs, outs, rc, rd, rt)):
            for m in ms:
                if m.mode == "staged":
                    raise NotSupportedError("host method 'alltoallw' needs positive strides on both sides")
                part = m.parts[0]  # one field: lowering refuses 'alltoallw' for several
                d[m.peer] = base + part.offset * part.itemsize
                if m.mode == "direct":
                    c[m.peer] = m.nbytes
                else:
                    c[m.peer], t[m.peer] = 1, part.dtype
        self._a2a = self.comm.Alltoallw_init([MPI.BOTTOM, sc, sd, st], [MPI.BOTTOM, rc, rd, rt])
        self._a2a_key = (tuple(self._in_ptrs), self._out_key)
