# SPDX-License-Identifier: Apache-2.0
"""Push's landing route: small calls with a private ``out=`` (every rank's receive staging at most
:data:`.tuning.LANDING_MAX` bytes): the peers store into a landing area behind the results in the
rank's segment, which copies its slots into ``out=`` after the arrivals."""

from __future__ import annotations

import numpy as np

from ...strided import HostBuffer
from .._datatypes import copy_views
from ..requests import CACHE_SIZE
from .codes import _DIRECTS, _WITH_OUT


class LandRoute:
    """The landing route of :class:`~.executable.PushExecutable`."""

    def _stores(self, heard: list[int]) -> list:
        """The peer pairs of a landing call: into each destination's landing if it binds a private
        out=, straight into its targets if it said direct (host symmetric memory), else its result."""
        _, _, by_dst, modes, _ = self._pairs
        if any(heard[k] in _DIRECTS for k in self._send_codes):
            return [pair for i, k in enumerate(self._send_codes)
                    for pair in (self._into_shared(i) if heard[k] in _DIRECTS else by_dst[i][heard[k] in _WITH_OUT])]
        bits = tuple(heard[k] in _WITH_OUT for k in self._send_codes)
        pairs = modes.get(bits)
        if pairs is None:
            pairs = modes[bits] = [pair for (result, landing), b in zip(by_dst, bits) for pair in (landing if b else
                                                                                                   result)]
        return pairs


    def _land_key(self) -> tuple:
        if self.nfields == 1:
            b = self._outs[0]
            return self._in_ptrs[0], None if b is None else (b.ptr, b.strides)
        return tuple(self._in_ptrs), tuple(None if b is None else (b.ptr, b.strides) for b in self._outs)

    def _landed_pairs(self):
        """(local pairs into the targets, unpack pairs from the landing into the targets) for this
        rank's binding: every field's out=, or its result where it has none. Cached per binding.
        Direct calls use the local pairs (the peers store straight into the targets)."""
        key = self._land_key()
        hit = self._landed.get(key)
        if hit is None:
            fused = self._fused
            land = self._base.ctypes.data + self._land_off[self._fields[0].rank]
            local, unpack = [], []
            for f, (p, ptr, result, out) in enumerate(zip(self._fields, self._in_ptrs, self.results, self._outs)):
                target = result if out is None else out
                q = p if out is None else p.retarget(out.strides)
                dst, isz = HostBuffer(target.ptr, p.itemsize), p.itemsize
                if q.local:
                    local += [copy_views(piece.direct, HostBuffer(ptr, isz), dst) for piece in q.local.pieces]
                for i, t in enumerate(q.recvs if self._landing else ()):  # direct calls: the peers store
                    slot = HostBuffer(land + fused.recv_offsets[i] + fused.recv_parts[i][f], isz)
                    unpack += [copy_views(piece.unpack, slot, dst) for piece in t.pieces]
            hit = self._landed[key] = (local, unpack)
            while len(self._landed) > CACHE_SIZE:
                self._landed.popitem(last=False)
        self._landed.move_to_end(key)
        return hit


    def _land(self, code: int, out: bool, heard: list[int]) -> None:
        """Some rank writes into an out= (small exchange): store into the peers' results, or landings
        where they bind an out=; arrive; the local part, then my slots, into my out=."""
        MPI, copyto = self._MPI, np.copyto
        local, unpack = self._land_pairs if out else (self._pairs[0], ())
        if code in _DIRECTS:  # my out= is in host symmetric memory: the peers store straight into it
            unpack = ()
        if self._arrival_recvs:
            MPI.Prequest.Startall(self._arrival_recvs)
        peers = self._pairs[4] if heard is None else self._stores(heard)  # None: every rank binds a private out=
        if peers:
            for d, s in peers:
                copyto(d, s, casting="no")
            MPI.Prequest.Startall(self._arrival_sends)
        for d, s in local:
            copyto(d, s, casting="no")
        MPI.Request.Waitall(self._finish[code])
        for d, s in unpack:
            copyto(d, s, casting="no")
