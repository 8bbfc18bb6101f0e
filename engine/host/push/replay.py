# SPDX-License-Identifier: Apache-2.0
"""Push's compiled replays: a call that repeats a binding, as words for cabi/redist_replay.c
(engine/host/replay.py), and :meth:`~Replays.resume`, the rest of a replayed call whose status
round heard another code."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ...errors import CommunicationError, InternalError
from ..requests import CACHE_SIZE
from ..replay import words as replay_words
from ..status import WELL
from .codes import _DIRECT, _DIRECT_STALE, _OUT, _SHARED, _SHARED_STALE, _STALE, _STALES


class Replays:
    """The compiled replays of :class:`~.executable.PushExecutable`."""

    def replay(self, forget: Callable[[], None]) -> np.ndarray | None:
        """The next execute() of this binding, as words for the C ABI's compiled replay
        (engine/host/replay.py, cabi/redist_replay.c): the status round of this rank's code and,
        where every peer says the same, the stores of :meth:`_store` (no out=), :meth:`_land` (a
        private out=, small exchanges) or, for an out= in host symmetric memory, the plain stores
        into the peers' published targets (checked: a peer that published others hands the call
        back); a peer saying anything else hands the call back to :meth:`resume`. None where the call
        takes another route (cross-memory copies, messages, more than COMPLETE_MAX ranks) or is not
        ready. ``forget()`` is called when the words stop being valid (:meth:`free`,
        :meth:`release_input`, when the inner messages are made: the codes change, and when host
        symmetric memory is freed). Local."""
        out, shared = self._has_out, self._has_out and self._out_shared
        cross = out and self._out_direct and not shared
        if (self._freed or not self._bound or not self._complete or self._pairs is None
                or out and (self._land_pairs is None or not shared and not cross and not self._landing)):
            return None
        stale = self._inner is None
        code = ((_SHARED_STALE if stale else _SHARED) if shared else (_DIRECT_STALE if stale else _DIRECT) if cross
                else WELL + out * _OUT + stale * _STALE)
        checks: tuple = ()
        sets: tuple = ()
        calls: list = []
        mode = None
        if cross:  # every peer says what I say: the copies of _store_direct, as its last call made them
            made = self._cross_calls(code)
            if made is None:
                return None
            mode, calls, checks = made
        if shared:  # the peers' targets as the last call read them (it stored there): checked by the words
            seen = [self._seen.get(i) for i in range(len(self._send_codes))]
            if self._heap.generation != self._shared_generation or any(hit is None or hit[0][0] != tuple(self._in_ptrs) for hit in seen):
                return None  # a send the last call did not store straight: no words this time
            checks = tuple((self._heads[t.dst].address + 8 * j, int(value))
                           for t, ((_, _, published), _) in zip(self._fields[0].sends, seen)  # type: ignore[misc]
                           for j, value in enumerate(np.frombuffer(published, np.uint64)))
        if shared or cross:  # mine, published again by each replayed call (a replay of another binding may run between)
            sets = tuple((self._head.address + 8 * j, int(value)) for j, value in enumerate(self._published))
        if self._operand_words is not None:  # read by my readers after my status: written by every call
            sets += tuple((self._operand_words.ctypes.data + 8 * f, ptr) for f, ptr in enumerate(self._in_ptrs))
        key = (code, self._land_key() if out else tuple(self._in_ptrs), checks)  # the land key holds the operands
        hit = self._replays.get(key)
        if hit is None:
            st = self._status
            if mode is not None:
                hit = self._replays[key] = replay_words(
                    self._MPI, st.first[code], len(st.recvs), st.base, code, mode.first, mode.arrivals,
                    mode.waits, ((), self._land_pairs[0], ()), self._in_ptrs, True, checks, sets, cross=calls,
                    reduce=self.comm)
            elif shared:
                peers = [pair for _, pairs in seen for pair in pairs]  # type: ignore[union-attr]
                local, after = self._land_pairs[0], ()
                self._heap.watch(self)
            elif out:
                (local, after), peers = self._land_pairs, self._pairs[4]
            else:
                local, peers, after = self._pairs[0], self._pairs[1], ()
            if not cross:
                # the operand addresses that peers read are published by each replay (sets): the C side may
                # rebind them without Python
                hit = self._replays[key] = replay_words(self._MPI, st.first[code], len(st.recvs), st.base, code,
                                                        self._arrival_recvs, self._arrival_sends, self._finish[code],
                                                        (peers, local, after), self._in_ptrs, True, checks, sets)
            while len(self._replays) > CACHE_SIZE:
                self._replays.popitem(last=False)
        self._replays.move_to_end(key)
        self._forget = forget
        return hit


    def _forget_replays(self) -> None:
        """The words replay() gave are no longer valid: their holder drops them."""
        if self._forget is not None:
            self._forget()
            self._forget = None

    def heap_freed(self) -> None:
        """Host symmetric memory was freed (HostHeap.watch): replays that store into it go."""
        self._drop_replays()

    def _drop_replays(self) -> None:
        """Every replay's words go (their holder drops them too). A replay may have written this
        rank's header for another binding: the next call that publishes writes it again."""
        self._forget_replays()
        self._replays.clear()
        self._written = None

    def resume(self, code: int, heard: Sequence[int]) -> None:
        """Collective: the rest of a replayed call (bound again as it was made) whose status round,
        where this rank said ``code``, found a peer saying something else (``heard``: the peers'
        codes); as :meth:`execute` goes on from there (a failed peer raises here too)."""
        # built when the replay was made (the caches may have dropped it since): it cannot fail now, and a
        # failure here could not be agreed any more (this rank's status said it is well)
        problem = self._prepare()
        if problem is not None:
            raise InternalError(f"redist host backend (push): a replayed call cannot go on: {problem[1]}")
        try:
            self._heard(code, self._has_out, code in _STALES, list(heard))
        except self._MPI.Exception as e:
            raise CommunicationError(f"redist host backend (push): MPI error in execute: {e}") from e
