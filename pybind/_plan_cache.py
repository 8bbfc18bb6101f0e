# SPDX-License-Identifier: Apache-2.0
"""The collective plan cache of the framework adapters (``redist.torch``, ``redist.jax``).

A framework call ``redistribute(x, input_distribution, output_distribution)`` has no object to
plan once: the adapter keeps the planned objects in a :class:`PlanCache`, a bounded LRU keyed by
what makes a plan (this rank's shape, strides, dtype, device, boxes, options). Planning and
freeing are collective, so every rank must hit or miss alike, and evict alike:

* each lookup gathers one 64-bit digest of every rank's key, and a digest of the cache's history
  (one ``Allgather`` of five integers per rank: with them whether the lookup was refused on this
  rank, how many entries it retired and which call it is, such as a forward or its backward).
  The entry's key is this rank's key *and* every rank's digest, so a change on one rank only (its
  box, its dtype) is a miss on every rank, and the new object's (collective) validation says what
  is wrong, the same on every rank;
* the history digest is the same on every rank as long as every rank has looked up the same
  keys in the same order since the last collective :meth:`PlanCache.clear`; where it differs
  (a rank that cleared alone, a call made on some ranks only that raised there), every rank
  raises the same :class:`~redist.InvalidStateError` before anything collective runs; so does
  a lookup that is another call on some ranks (``call``: a backward on some ranks where the others
  run a forward, as ``torch.utils.checkpoint`` on some ranks only makes them);
* a miss builds the entry (collective) and evicts the least recently used one when the cache
  holds ``maxsize`` entries; evictions are collective and the same on every rank.

Entries are anything with a ``free()`` (a planned :class:`~redist.Redistribute`, or an adapter's
bundle of them); an entry whose ``pinned`` attribute is true (recorded into a CUDA graph) is never
evicted, only cleared. :meth:`PlanCache.clear` makes no collective call, so a rank that clears
alone is caught by the next lookup as above: it frees at once the entries whose ``free()`` is
local (host plans) and *retires* those whose ``collective_free`` attribute is true (GPU plans: their
free agrees across ranks). Retired entries are freed at the next lookup that every rank agrees on,
or at :func:`redist.finalize` (a runtime hook clears every cache and frees what it retired), the
same ones on every rank in rank 0's order; one that not every rank retired is dropped unfreed
(its ``drop()`` is called where it has one). Nothing here imports a framework.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from . import _runtime
from .engine import collective
from .engine.errors import InvalidStateError, InvalidValueError

__all__ = ["DEFAULT_MAXSIZE", "PlanCache", "digest"]

#: entries a cache holds by default (each a planned object: its plan, its engine-owned buffers)
DEFAULT_MAXSIZE = 32


def digest(key: Hashable) -> int:
    """A 63-bit digest of ``key`` that is the same in every process (``hash()`` of a string is not):
    ``key`` must be made of ints, strings, bools, None and tuples of them."""
    raw = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return int.from_bytes(raw, "little") >> 1


class PlanCache:
    """Collective, bounded LRU of planned objects (see the module docstring).

    ``name`` appears in errors (``"redist.torch"``). Calls into one cache must be made in the same
    order on every rank; a cache may be used from one thread at a time (a lock serialises them).
    """

    def __init__(self, name: str, maxsize: int = DEFAULT_MAXSIZE, settle: Callable[[], None] | None = None,
                 calls: tuple[str, ...] = ("redistribute",)) -> None:
        self.name = name
        self._settle = settle  # called before redist.finalize() clears the cache (exchanges still in flight)
        self._retired: list[tuple[int, Any]] = []  # (identity, entry) cleared but not yet freed (collective_free)
        self._maxsize = self._checked_size(maxsize)
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._history = 0  # the digest of every lookup since the last clear (equal on every rank)
        self._digests: dict[Hashable, int] = {}  # local key -> digest (bounded with the entries)
        self._kinds = {c: digest(c) for c in calls}  # the kinds of call get() takes (every rank names them alike)
        self._calls = {d: c for c, d in self._kinds.items()}
        self._lock = threading.RLock()
        self._used = False  # looked up at least once (collective: on every rank alike); never reset
        self.hits = self.misses = 0
        _runtime.add_runtime_hooks(on_finalize=self._finalize)

    @staticmethod
    def _checked_size(maxsize: int) -> int:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise InvalidValueError(f"a plan cache's maxsize must be an integer >= 1, got {maxsize!r}")
        return maxsize

    @property
    def maxsize(self) -> int:
        """How many planned objects the cache holds at most."""
        return self._maxsize

    def resize(self, maxsize: int) -> None:
        """Collective: hold at most ``maxsize`` entries from now on (the least recently used go)."""
        with self._lock:
            self._maxsize = self._checked_size(maxsize)
            self._evict()

    def __len__(self) -> int:
        return len(self._entries)

    def _evict(self) -> None:
        """The least recently used entries go, but *pinned* ones (an entry whose ``pinned`` is true:
        its exchange was recorded into a CUDA graph that may still replay) stay until :meth:`clear`."""
        movable = [k for k, e in self._entries.items() if not getattr(e, "pinned", False)]
        for key in movable[: max(0, len(self._entries) - self._maxsize)]:
            self._entries.pop(key).free()

    def clear(self) -> None:
        """Collective by contract, but no collective call: every entry leaves the cache and a new
        history starts. An entry whose free is local is freed now; one whose ``collective_free`` is
        true is retired, and freed at the next lookup every rank agrees on (or at finalize())."""
        with self._lock:
            entries, self._entries = self._entries, OrderedDict()
            self._digests.clear()
            self._history = 0
            if not _runtime.is_initialized():
                return  # finalize() freed what the runtime held
            for (_, everyone), entry in entries.items():
                if getattr(entry, "collective_free", False):
                    retire = getattr(entry, "retire", None)
                    if retire is not None:
                        retire()
                    self._retired.append((digest(everyone), entry))
                else:
                    entry.free()

    def _release(self, comm) -> None:
        """Collective: free the entries every rank retired, in rank 0's order; drop the others."""
        mine = dict(self._retired)
        self._retired = []
        every = [list(mine)] if comm.Get_size() == 1 else comm.allgather(list(mine))
        common = set(every[0]).intersection(*every[1:])
        dropped = [entry for ident, entry in mine.items() if ident not in common]
        if dropped:
            logging.getLogger("redist").warning(
                "%s: %d cleared plan(s) that not every rank held are dropped without their collective free() "
                "(the caches had diverged)", self.name, len(dropped))
            for entry in dropped:
                drop = getattr(entry, "drop", None)
                if drop is not None:
                    drop()
        for ident in every[0]:
            if ident in common:
                mine[ident].free()

    def _finalize(self) -> None:
        """redist.finalize()'s hook (collective): clear, then free what every rank retired."""
        if self._settle is not None and self._used:
            self._settle()
        self.clear()
        if self._used and _runtime.is_initialized():
            with self._lock:
                self._release(_runtime.context().engine.comm)

    def _gather(self, comm, mine: int, failed: bool, call: int) -> list[list[int]]:
        """Collective: every rank's ``[key digest, history digest, failed, retired, call digest]`` (one row
        per rank)."""
        if comm.Get_size() == 1:
            return [[mine, self._history, int(failed), len(self._retired), call]]
        send = np.array([mine, self._history, failed, len(self._retired), call], np.int64)
        recv = np.empty((comm.Get_size(), 5), np.int64)
        comm.Allgather(send, recv)
        return recv.tolist()

    def get(self, key: Hashable, build: Callable[[], Any], problem: collective.Problem | None = None,
            call: str = "redistribute") -> Any:
        """Collective: the entry for this rank's ``key`` and every other rank's key; built with
        ``build()`` (collective) on a miss, which is a miss on every rank.

        ``problem`` (see :func:`redist.engine.collective.problem`): what this rank found wrong with
        its call before the lookup; the first rank's problem is raised on every rank, the cache
        untouched. ``call`` (one of the cache's ``calls``) names the kind of call: the same on every rank,
        or every rank raises."""
        with self._lock:
            comm = _runtime.context().engine.comm
            self._used = True
            mine = 0
            if problem is None:
                mine = self._digests.get(key)
                if mine is None:
                    mine = digest(key)
                    if len(self._digests) > 4 * self._maxsize:
                        self._digests.clear()
                    self._digests[key] = mine
            kind = self._kinds.get(call) or digest(call)  # (no hash of the name per lookup)
            every = self._gather(comm, mine, problem is not None, kind)
            if any(row[2] for row in every):
                collective.agree(comm, problem)
            other = next((r for r, row in enumerate(every) if row[4] != every[0][4]), None)
            if other is not None:
                theirs, first = (self._calls.get(every[r][4], "another call") for r in (other, 0))  # the same everywhere
                raise InvalidStateError(
                    f"{self.name}: rank {other} runs {theirs} where rank 0 runs {first} (a backward or a double backward "
                    "on some ranks only, or torch.utils.checkpoint recomputing the forward on some ranks only?): every "
                    "rank must make the same collective calls in the same order; this call is refused on every rank")
            bad = next((r for r, row in enumerate(every) if row[1] != every[0][1]), None)
            if bad is not None:
                raise InvalidStateError(
                    f"{self.name}: rank {bad}'s plan cache has seen other calls than rank 0's (every rank must make "
                    "the same collective calls in the same order, and clear the cache together); this call is refused "
                    "on every rank: call clear_cache() on every rank to start again")
            if any(row[3] for row in every):  # the ranks agree now: free what they retired at clear()
                self._release(comm)
            everyone = tuple(row[0] for row in every)
            full = (key, everyone)
            self._history = digest((self._history, everyone))
            entry = self._entries.get(full)
            if entry is not None:
                self._entries.move_to_end(full)
                self.hits += 1
                return entry
            self.misses += 1
            entry = build()
            self._entries[full] = entry
            self._evict()
            return entry
