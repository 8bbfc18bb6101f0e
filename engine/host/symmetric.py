# SPDX-License-Identifier: Apache-2.0
"""Host symmetric memory: arrays in shared memory that every rank of the node has mapped.

``redist.allocate_symmetric_memory(shape, numpy)`` (collective) gives each rank an array in a
shared-memory file of its own (``/dev/shm``), which every other rank of the same node maps
before the file is unlinked: nothing is left in ``/dev/shm`` once the call returns. The host
``push`` method stores straight into such an array when it is a rank's ``out=``: the peers store
their parts into their mapping of it, one copy per element, as into the engine-owned result
(engine/host/push/shared.py). Every other ``out=`` is private memory, which no peer can store into.

Each allocation has an id, the same on every rank (allocations are collective and counted in
order); a rank's push segment publishes the id and the address of its ``out=``, and a peer
translates that address into its own mapping (:meth:`HostHeap.peer_address`).

**Lifetimes.** ``free_symmetric_memory`` (collective) makes the arrays ordinary memory: the
peers drop their mappings, the owner's array stays valid while it is referenced (its memory goes
back to the system when the last reference is dropped). ``redist.finalize()`` does the same for
every allocation still live. Ids are never reused.
"""

from __future__ import annotations

import itertools
import mmap
import os
import secrets
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from .. import collective
from ..errors import InvalidValueError, NotSupportedError

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["RESULT", "SHM_DIR", "HostHeap", "map_file", "shm_path"]

SHM_DIR = "/dev/shm"
#: the kind word of a field whose target is its engine-owned result (push's header; 0: private memory)
RESULT = 1
_names = itertools.count()


def shm_path() -> str:
    """A new name in :data:`SHM_DIR`, unique to this process."""
    return os.path.join(SHM_DIR, f"redist-{os.getpid()}-{next(_names)}-{secrets.token_hex(4)}")


def map_file(path: str, nbytes: int, create: bool, what: str = "host method 'push'") -> mmap.mmap:
    """Map ``path`` (created with ``nbytes`` of reserved memory, or an existing one), close the file."""
    flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if create:
            try:
                os.posix_fallocate(fd, 0, nbytes)  # reserved now: a full /dev/shm fails here, never as SIGBUS later
            except OSError as e:
                raise NotSupportedError(
                    f"{what} could not reserve {nbytes} bytes of shared memory in {SHM_DIR} ({e}); "
                    "enlarge it (docker: --shm-size) or use host_method='hybrid'") from None
        return mmap.mmap(fd, 0 if not create else nbytes)
    finally:
        os.close(fd)


class Watcher(Protocol):
    """What :meth:`HostHeap.watch` tells when allocations are freed."""

    def heap_freed(self) -> None: ...


@dataclass
class _Allocation:
    """One collective allocation: this rank's mapping, every rank's address of its own part, and
    this rank's mappings of the parts of the other ranks of its node (their start addresses)."""

    ident: int
    own: np.ndarray  # uint8 over this rank's mapping (the user's array is a view of it)
    bases: list[int]  # per rank: where its part starts in its own address space
    nbytes: int  # what this rank asked for (the array returned)
    peers: dict[int, int] = field(default_factory=dict)  # rank -> where its part starts in mine
    maps: list[mmap.mmap] = field(default_factory=list)  # kept mapped while the allocation is live

    def __post_init__(self) -> None:
        self.start: int = self.own.ctypes.data
        self.end: int = self.start + self.own.size


class HostHeap:
    """The host symmetric allocations of one context (its communicator); see the module docstring."""

    def __init__(self, comm: MPI.Intracomm) -> None:
        self.comm = comm
        self._ids = itertools.count(RESULT + 1)  # 0 and RESULT mean something else in push's header
        self._live: dict[int, _Allocation] = {}
        self._freed: set[int] = set()  # start addresses of freed own parts (double-free messages)
        self._node: list[bool] | None = None  # per rank: does it share this rank's node
        #: changes when allocations are freed: what caches views into the peers' parts checks
        self.generation: int = 0
        #: counts allocations made: a private address classified before may lie in a new one
        self.allocations: int = 0
        self._watchers: weakref.WeakSet[Watcher] = weakref.WeakSet()  # told when allocations are freed (heap_freed())

    def allocate(self, nbytes: int, *, make_symmetric: bool = False, skip_symmetric_check: bool = False,
                 failure: BaseException | None = None) -> np.ndarray:
        """Collective: this rank's part of a new allocation of ``nbytes`` (a uint8 array, zeroed).

        ``failure``: this rank's problem met before (a bad shape or dtype), raised on every rank.
        Sizes must be equal on every rank unless ``make_symmetric`` (then each rank keeps its own
        size: host parts need not be equal) or ``skip_symmetric_check``.
        """
        comm = self.comm
        if self._node is None:  # once per heap, before anything can fail on one rank only
            from mpi4py import MPI

            node = comm.Split_type(MPI.COMM_TYPE_SHARED)
            try:
                mine = node.Get_group().Translate_ranks(list(range(node.Get_size())), comm.Get_group())
            finally:
                node.Free()
            flags = [False] * comm.Get_size()
            for r in mine:
                flags[r] = True
            self._node = flags
        asked = collective.agree(comm, failure, (int(nbytes), bool(make_symmetric or skip_symmetric_check)))
        sizes = [n for n, _ in asked]
        if not all(free for _, free in asked) and len(set(sizes)) > 1:  # decided from every rank's flags
            raise InvalidValueError(
                f"symmetric allocations must have the same size on every process, got {sizes} bytes; pass "
                "make_symmetric=True to allow different sizes")
        me, path = comm.Get_rank(), None
        try:
            with collective.attempt(comm) as step:
                path = shm_path()
                own_map = map_file(path, max(int(nbytes), 1), create=True, what="allocate_symmetric_memory")
                own = np.frombuffer(own_map, np.uint8)
                step.payload = (path, own.ctypes.data)
            paths = step.gathered
            alloc = _Allocation(next(self._ids), own, [base for _, base in paths], int(nbytes))
            with collective.attempt(comm):
                for r, (other, _) in enumerate(paths):
                    if r != me and self._node[r]:
                        m = map_file(other, 0, create=False)
                        alloc.maps.append(m)
                        alloc.peers[r] = np.frombuffer(m, np.uint8).ctypes.data
        finally:
            if path is not None:
                try:
                    os.unlink(path)
                except FileNotFoundError:  # never created (this rank failed first)
                    pass
        self._live[alloc.ident] = alloc
        self.allocations += 1
        return own[:nbytes] if nbytes else own[:0]

    def find(self, lo: int, hi: int) -> int:
        """The id of this rank's live allocation holding the bytes ``[lo, hi)`` (0 where none does). Local."""
        for alloc in self._live.values():
            if alloc.start <= lo and hi <= alloc.end:
                return alloc.ident
        return 0

    def peer_address(self, ident: int, rank: int, address: int) -> int | None:
        """Where ``address`` of rank ``rank``'s part of allocation ``ident`` is in this process
        (None where that allocation is not live here or that rank is not on this node). Local."""
        alloc = self._live.get(ident)
        if alloc is None:
            return None
        start = alloc.peers.get(rank)
        return None if start is None else start + (address - alloc.bases[rank])

    def free(self, arrays: list[tuple[int, int]], failure: BaseException | None = None) -> None:
        """Collective: free the allocations returned as the arrays ``arrays`` (start address, bytes;
        the same allocations, in the same order, on every rank); nothing is freed anywhere if any
        rank is wrong."""
        idents: list[int] = []
        starts = [start for start, _ in arrays]
        if failure is None:
            try:
                idents = [self._ident_of(start, nbytes) for start, nbytes in arrays]
                if len(set(idents)) != len(idents):
                    raise InvalidValueError("the same array is passed twice")
            except InvalidValueError as e:
                failure = e
        every = collective.agree(self.comm, failure, idents)
        if any(other != every[0] for other in every):
            first = next(r for r, other in enumerate(every) if other != every[0])
            raise InvalidValueError(
                "free_symmetric_memory must free the same allocations in the same order on every process: "
                f"rank 0 frees allocation(s) {every[0]}, rank {first} {every[first]}")
        for ident, start in zip(idents, starts):
            del self._live[ident]
            self._freed.add(start)
        if idents:
            self._changed()

    def watch(self, holder: Watcher) -> None:
        """Call ``holder.heap_freed()`` whenever allocations are freed (while ``holder`` lives): it
        holds compiled stores into them (push's replays). Local."""
        self._watchers.add(holder)

    def _changed(self) -> None:
        self.generation += 1
        for holder in list(self._watchers):
            holder.heap_freed()
        self._watchers.clear()

    def _ident_of(self, start: int, nbytes: int) -> int:
        for alloc in self._live.values():
            if alloc.start == start and alloc.nbytes == nbytes:
                return alloc.ident
        if self.find(start, start + 1):  # inside a live one (a freed one's address may be reused)
            raise InvalidValueError("pass the array returned by allocate_symmetric_memory, not a view into it")
        if start in self._freed:
            raise InvalidValueError(f"double free: the symmetric array at 0x{start:x} was already freed by "
                                    "free_symmetric_memory")
        raise InvalidValueError(f"the array at 0x{start:x} is not in host symmetric memory (it was not allocated by "
                                "redist.allocate_symmetric_memory(..., numpy))")

    def close(self) -> None:
        """Forget every allocation (local, redist.finalize): the owners' arrays stay valid while referenced."""
        self._live.clear()
        self._changed()
