# SPDX-License-Identifier: Apache-2.0
"""Push's store route: no rank binds an ``out=``, so every rank stores its parts straight into its
peers' results (shared segments), arrives, and copies its local part (the time loop's call)."""

from __future__ import annotations

import numpy as np

from ...strided import HostBuffer
from .._datatypes import copy_views
from ..requests import CACHE_SIZE


class StoreRoute:
    """The store route of :class:`~.executable.PushExecutable`: the copy views of a binding, and the
    stores into the peers' results."""

    def _views(self):
        """(local pairs, peer pairs, {destinations' out= bits: peer pairs}) for the bound operand
        addresses, cached per addresses. Peer pairs store into the destinations' results; with
        landing, a destination whose bit is set gets its slots in its landing area instead."""
        key = tuple(self._in_ptrs)
        hit = self._copies.get(key)
        if hit is None:
            local, peers, fused = [], [], self._fused
            by_dst = [([], []) for _ in self._fields[0].sends]  # per send: (into the result, into the landing)
            for f, (p, ptr, result) in enumerate(zip(self._fields, key, self.results)):
                src, isz = HostBuffer(ptr, p.itemsize), p.itemsize
                if p.local:
                    local += [copy_views(piece.direct, src, HostBuffer(result.ptr, isz)) for piece in p.local.pieces]
                for i, t in enumerate(p.sends):
                    peer = self._peer_ptr[t.dst]
                    into = by_dst[i][0]
                    into += [copy_views(piece.direct, src, HostBuffer(peer + self._offsets[t.dst][f], isz))
                             for piece in t.pieces]
                    peers += into[len(into) - len(t.pieces):]
                    if self._landing:
                        slot = HostBuffer(peer + self._land_off[t.dst] + fused.remote_offsets[i] + fused.send_parts[i][f],
                                          isz)
                        by_dst[i][1].extend(copy_views(piece.pack, src, slot) for piece in t.pieces)
            landed = [pair for _, landing in by_dst for pair in landing]  # every destination binds an out=
            hit = self._copies[key] = (local, peers, by_dst, {}, landed)
            while len(self._copies) > CACHE_SIZE:
                self._copies.popitem(last=False)
        self._copies.move_to_end(key)
        return hit


    def _store(self, code: int) -> None:
        """Every rank writes into results: store into the peers', arrive, copy the local part."""
        MPI, copyto = self._MPI, np.copyto
        local, peers = self._pairs[0], self._pairs[1]
        if self._arrival_recvs:
            MPI.Prequest.Startall(self._arrival_recvs)
        if peers:
            for d, s in peers:
                copyto(d, s, casting="no")
            MPI.Prequest.Startall(self._arrival_sends)
        for d, s in local:  # after the agreement (a failed call writes nothing), while the peers store
            copyto(d, s, casting="no")
        MPI.Request.Waitall(self._finish[code])
