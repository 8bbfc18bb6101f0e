# SPDX-License-Identifier: Apache-2.0
"""Push's route into host symmetric memory: a rank whose every ``out=`` lies in host symmetric memory
(engine/host/symmetric.py) laid out like its result publishes where in its header; its peers store
into their own mapping of that ``out=``, as into a result (no system call, any size, any MPI)."""

from __future__ import annotations

import numpy as np

from ...errors import InternalError
from ...strided import HostBuffer
from .._datatypes import copy_views
from ..requests import CACHE_SIZE
from ..symmetric import RESULT


class SharedRoute:
    """The host-symmetric-memory route of :class:`~.executable.PushExecutable`."""

    def _into_shared(self, send: int) -> list:
        """The peer pairs of send ``send`` straight into its destination's targets, where its header
        says every one can be stored into (its result, or host symmetric memory), cached per operand
        and header."""
        heap, dst = self._heap, self._fields[0].sends[send].dst
        if heap.generation != self._shared_generation:  # allocations were freed: views into them go
            self._forget_shared()
            self._shared_generation = heap.generation
        head = self._heads[dst]
        published, ptrs = head.published.tobytes(), tuple(self._in_ptrs)
        seen = self._seen.get(send)
        if seen is not None and seen[0][2] == published and seen[0][0] == ptrs:
            return seen[1]  # what the last call stored into (a time loop's every call)
        before = self._before.get(send)
        if before is not None and before[0][2] == published and before[0][0] == ptrs:
            self._seen[send], self._before[send] = before, seen  # a double-buffered loop's other out=
            return before[1]
        key = (ptrs, send, published)
        hit = self._shared.get(key)
        if hit is None:
            hit = []
            for f, (p, ptr) in enumerate(zip(self._fields, self._in_ptrs)):
                kind = int(head.kinds[f])
                base = (self._peer_ptr[dst] + self._offsets[dst][f] if kind == RESULT else
                        heap.peer_address(kind, dst, int(head.targets[f])))
                if base is None:  # allocations are collective: every rank has every live one
                    raise InternalError(f"redist host backend (push): rank {dst}'s out= is in host symmetric "
                                        f"allocation {kind}, which this rank does not hold")
                src, isz = HostBuffer(ptr, p.itemsize), p.itemsize
                hit += [copy_views(piece.direct, src, HostBuffer(base, isz)) for piece in p.sends[send].pieces]
            self._shared[key] = hit
            while len(self._shared) > CACHE_SIZE * max(1, len(self._send_codes)):  # per send
                self._shared.popitem(last=False)
        self._shared.move_to_end(key)
        if seen is not None:
            self._before[send] = seen
        self._seen[send] = (key, hit)  # what this call read (replay(): the peer may publish others once it returns)
        return hit

    def _forget_shared(self) -> None:
        """The store views into the peers' host symmetric memory go (freed, or the operand released)."""
        self._shared.clear()
        self._seen.clear()
        self._before.clear()


    def _store_shared(self, code: int) -> None:
        """Every rank binds an out= in host symmetric memory (every status said what mine said): store
        straight into the targets each peer published, arrive, the local part into my out=."""
        MPI, copyto = self._MPI, np.copyto
        if self._arrival_recvs:
            MPI.Prequest.Startall(self._arrival_recvs)
        if self._arrival_sends:
            for i in self._send_range:
                for d, s in self._into_shared(i):
                    copyto(d, s, casting="no")
            MPI.Prequest.Startall(self._arrival_sends)
        for d, s in self._land_pairs[0]:
            copyto(d, s, casting="no")
        MPI.Request.Waitall(self._finish[code])
