# SPDX-License-Identifier: Apache-2.0
"""Host push: on one node, each rank stores its part straight into its peers' results.

The engine-owned result of every rank lives in a shared-memory segment of its own (a file in
``/dev/shm``, mapped by its owner and by every rank that sends to it, unlinked as soon as they
all have), so a sender copies (numpy, one pass, no MPI datatype, no staging) from its operand
into the destination's result, like the GPU push kernel does over NVLink. One copy per element
instead of MPI's two for strided regions, and no rendezvous.

One execute, on every rank (:class:`.status.StatusRound`):

1. send a zero-byte *status* to every other rank, its tag what this rank says about the call:
   it failed, or it is well and whether it writes into an ``out=`` of its own; receive every
   other rank's. Now every rank is in this execute (so it is done reading its previous result:
   the status is also the credit) and knows whether any rank failed. If one did, every rank
   raises the same error and nobody has written a byte anywhere: a failed call changes no
   result and no ``out=``, on any rank;
2. no rank has an ``out=``: store into each destination's result, send it a zero-byte
   *arrival*, copy the local part, wait for the arrivals of every source: the result is
   complete. MPI's messages order the stores: a sender stores, then sends; the receiver reads
   after the receive (the release/acquire of MPI's own shared-memory queues);
3. some rank has an ``out=``: a peer cannot store into private memory, and the engine-owned
   result must stay as it was (``execute(out=...)`` never touches it), so

   * small exchanges (every rank's receive staging at most :data:`LANDING_MAX` bytes): the
     peers store into a *landing* area behind the results in its segment (the plan's receive
     staging, a slot per source) instead, and the rank copies its slots into ``out=`` after
     the arrivals; its local part goes straight into ``out=``. Two copies of the remote part,
     but no rendezvous: cheaper than any message while latency dominates. Where no rank
     receives anything (at any number of ranks up to COMPLETE_MAX) this is just the local
     copies into ``out=``;
     Exchanges where some rank receives at least :data:`DIRECT_SMALL_MIN` copy across memories
     instead, as below, on any MPI (:data:`DIRECT_SMALL`); a rank whose ``out=`` cannot be copied
     into (strided) still lands, in the same call;
   * larger ones, on Open MPI (:data:`DIRECT`: there its messages into ``out=`` are the slower
     route; on MPICH they are the faster one, perf/RESULTS.md), where every pair of ranks can use
     Linux cross-memory attach (checked once, when the object is planned) and every run of the
     exchange is at least :data:`DIRECT_MIN_RUN` bytes: a rank whose every ``out=`` is laid out like its result
     writes the ``out=`` addresses into its segment and says so in its status (*direct*); the
     peers store their parts straight into that ``out=`` with ``process_vm_writev`` (one copy,
     by the sender, as into a result), and into the results of the ranks without an ``out=``;
     arrivals as above. Where a pair's runs make fewer stretches in the sender's operand than in
     the destination (the kernel pins the remote side's pages per iovec), the destination reads
     them instead, with ``process_vm_readv`` from the operand addresses the sender keeps in its
     segment, written by every call (decided per pair when planned). Every direct call ends with one small Allreduce,
     which each rank enters after its copies: it tells every rank whether a copy failed, and a
     sender returns (and may change its operand) only once every reader is done. Each element
     moves once and no message carries data;
   * wherever a rank's every ``out=`` lies in host symmetric memory (engine/host/symmetric.py:
     ``redist.allocate_symmetric_memory(shape, numpy)``, mapped by every rank of the node) and is
     laid out like its result, it says *shared*, with the allocation's id beside each address in
     its segment; its peers store into their own mapping of that ``out=``, as into a result. One
     copy per element and no system call, at any size and on any MPI (the Allreduce of direct
     calls only where some rank said *direct*);
   * otherwise: the call moves its data as MPI messages straight into every ``out=`` (and
     into the results of the ranks that have none) -- the message methods' exchange, run by an
     inner :class:`~.executable.HostExecutable` (``hybrid``) over the same buffers; the local
     part is copied straight into ``out=``. Each element moves once. A rank whose inner
     executable must first be built for its binding says so in its status; then the ranks
     agree once more (a build can fail) before any data moves.

Cross-memory attach needs the ranks to be allowed to copy from and into each other (the same user; Yama
``ptrace_scope`` 0, or 1 with the target's consent, which each rank gives at plan time with
``prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)`` as Open MPI's CMA transport does; no seccomp filter
blocking ``process_vm_writev`` or ``process_vm_readv``). Where one pair cannot, every rank uses the messages.

Jobs of more than :data:`~.executable.COMPLETE_MAX` ranks replace the status messages by one
small Allreduce (the same agreement, the same credit); their calls with an ``out=`` never copy
directly (the Allreduce carries no per-rank codes).

**Lifetimes are local.** A segment is plain shared memory, not an MPI object: nothing about it
is collective after lowering. The executable holds its own segment and its mappings of its
peers'; the result arrays hold the own segment too, so a result the user keeps past ``free()``
or ``redist.finalize()`` stays a valid array with the last execute's data, and the memory goes
back to the system when the last of them is dropped. ``free()`` and garbage collection release
everything else at once, on any rank, in any order.
"""

from __future__ import annotations

import ctypes
import math
import mmap
import os
import secrets
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import collective
from .. import geometry as geo
from ..buffer import Buffer
from ..errors import CommunicationError, InternalError, InvalidValueError, NotSupportedError
from ..plan import FusedPlan, Plan, fuse
from ..strided import HostBuffer
from ._datatypes import copy_views
from ._datatypes import fused as fused_dims
from .replay import words as replay_words
from .executable import AUTO_METHOD, CACHE_SIZE, COMPLETE_MAX, HostExecutable, out_problem, tag_ub
from .status import FAILED, WELL, StatusRound
from .symmetric import RESULT, SHM_DIR, map_file, shm_path

if TYPE_CHECKING:
    from mpi4py import MPI

    from ..backend import Context, Logger

__all__ = ["PushExecutable"]

#: status codes (engine/host/status.py): WELL plus these bits, and the direct codes
_OUT, _STALE = 1, 2
_DIRECT = WELL + _OUT + _STALE + 1  # my every out= can be stored into directly: its addresses are in my segment
_DIRECT_STALE = _DIRECT + 1  # the same, and my messages are not built
_SHARED = _DIRECT_STALE + 1  # my every out= is in host symmetric memory: plain stores, no cross-memory copy
_SHARED_STALE = _SHARED + 1  # the same, and my messages are not built
_CODES = _SHARED_STALE + 1  # with the arrival tag, 16 tags per object
_WITH_OUT = (WELL + _OUT, WELL + _OUT + _STALE)  # the codes of a rank with an out= that peers cannot store into
_DIRECTS = (_DIRECT, _DIRECT_STALE, _SHARED, _SHARED_STALE)  # the peers store straight into my out=
_SHAREDS = (_SHARED, _SHARED_STALE)
_CROSS = (_DIRECT, _DIRECT_STALE)  # my out= is copied into across memories (cross-memory attach)
_NO_OUT = (False, False, (), None)  # _classify_outs's verdict where no field binds an out=
_STALES = (WELL + _STALE, WELL + _OUT + _STALE, _DIRECT_STALE, _SHARED_STALE)
#: calls with an out= land in shared memory (two copies) when every rank receives at most this many
#: bytes, else go as messages (MPI's transport): see perf/RESULTS.md, "Where push's out= lands"
#: (-1: never, not even where no rank receives anything)
LANDING_MAX = 1 << 20
#: larger calls with an out= store straight into it (cross-memory attach) where every pair of ranks can
#: and every run of the exchange has at least DIRECT_MIN_RUN bytes (shorter runs: one system-call
#: entry each). Read when an object is planned: None (the default) does so on Open MPI, whose messages
#: into out= measured 1.2-1.3x slower than these stores at 256^3, and sends messages on other MPIs
#: (MPICH's measured 1.0-1.2x faster); True wherever the kernel allows it; False never
DIRECT: bool | None = None
#: calls with an out= below LANDING_MAX copy straight into it with cross-memory attach (the receiver reads,
#: or the sender stores, as for larger calls) instead of landing, where every pair of ranks can and the
#: runs are long enough; on any MPI (no message carries data either way) unless DIRECT is False. Their
#: data then moves once, as into a result: perf/RESULTS.md, "A private out= read by its receiver"
DIRECT_SMALL = True
#: ... where some rank receives at least this many bytes: below it a system call per peer and the closing
#: Allreduce cost more than the landing's second copy (the VM, P = 2: 8^3 lands in 5.7 us, copies across
#: memories in 8.9; 24^3 12.9 and 12.2 us); smaller exchanges land, and plan() skips the cross-memory probe
DIRECT_SMALL_MIN = 32 << 10
DIRECT_MIN_RUN = 256
#: who makes a direct copy, decided per pair when an object is planned: None (the default) by the
#: stretch rule of _who_copies, True every receiver reads, False every sender stores
DIRECT_READ: bool | None = None


class PushExecutable:
    """A plan on one node: peers store into each other's results (see the module docstring).

    Several fields (a :class:`~..plan.FusedPlan`) share the segment (each field's result at its
    own offset) and one round of status and arrival messages.
    """

    backend = "host"
    method = "push"
    plan: Plan | FusedPlan
    comm: MPI.Intracomm
    result: Buffer
    results: tuple[Buffer, ...]

    def __init__(self, plan: Plan | FusedPlan, ctx: Context, tag: int, logger: Logger | None,
                 second: MPI.Intracomm | None = None, data_tags: tuple[int, ...] = (), messages_tag: int = 0,
                 landing_max: int | None = None) -> None:
        from mpi4py import MPI

        self._MPI = MPI
        self.plan = plan
        self._fused = fused = plan if isinstance(plan, FusedPlan) else fuse([plan])
        self._fields = fields = fused.fields
        self.nfields: int = len(fields)
        plan = fields[0]
        self.comm = ctx.comm
        self._logger = logger
        self._inner_args = (messages_tag, second, data_tags)
        P, me = plan.nranks, plan.rank
        span = max(1, (tag_ub(self.comm) + 1) // 16)
        base_tag = 16 * (tag % span)
        self._arrival_tag = base_tag + _CODES
        # every field's result in the segment, each at its own offset (a rank's offsets follow its
        # output box, which every rank knows)
        self._offsets = {r: _field_offsets(fields, r) for r in range(P)}
        # calls with an out= land behind the results (the plan's receive staging), small exchanges only:
        # decided from data every rank has (the largest receive staging of any rank). Where nothing
        # crosses ranks (any P) nothing lands: the local part goes straight into out=
        landing_max = LANDING_MAX if landing_max is None else landing_max  # tune= (engine/tune.py) sets it
        self._landing = fused.max_recv_staging_bytes <= landing_max and P <= COMPLETE_MAX
        # a header behind the results (_Header), then the landing area
        self._head_off = {r: self._offsets[r][-1] for r in range(P)}  # 64-byte aligned (_field_offsets)
        head = -(-_Header.words(self.nfields, P) * 8 // 64) * 64
        self._land_off = {r: off + head for r, off in self._head_off.items()}
        size = self._land_off[me] + (fused.recv_staging_bytes if self._landing else 0)
        self._segment, peers = _share(self.comm, max(size, 1),
                                      sorted({t.dst for t in plan.sends} | {t.src for t in plan.recvs}))
        self._base = np.frombuffer(self._segment, np.uint8)
        self._peer_ptr = {dst: np.frombuffer(m, np.uint8).ctypes.data for dst, m in peers.items()}
        self._peer_segments = peers
        start = self._base.ctypes.data
        self.results = tuple(Buffer(start + off, p.out_shape, p.out_strides, p.itemsize, "cpu", owner=self._base)
                             for p, off in zip(fields, self._offsets[me]))
        self.result = self.results[0]
        self._complete = P <= COMPLETE_MAX
        self._status = StatusRound(self.comm, me, P, base_tag, _CODES) if self._complete else None
        self._check = None if self._complete else collective.CallCheck(self.comm)
        z = self._zero = np.zeros(1, np.uint8)
        zero = [z, 0, MPI.BYTE]
        others = [r for r in range(P) if r != me]
        self._send_codes = [others.index(t.dst) for t in plan.sends]  # where each destination's status is heard
        self._send_range = range(len(plan.sends))
        self._arrival_recvs = [self.comm.Recv_init(zero, t.src, self._arrival_tag) for t in plan.recvs]
        self._arrival_sends = [self.comm.Send_init(zero, t.dst, self._arrival_tag) for t in plan.sends]
        arrivals = self._arrival_recvs + self._arrival_sends
        # what the stores wait for, per status code sent (its status sends complete there too)
        self._finish = [arrivals + (self._status.sends[c] if self._status else []) for c in range(_CODES)]
        self._in_ptrs = [0] * self.nfields
        self._in_owners: list = [None] * self.nfields
        self._bound = False
        self._copies: OrderedDict = OrderedDict()  # operand addresses -> (local pairs, [peer pairs])
        self._pairs = None
        self._outs: list[Buffer | None] = [None] * self.nfields  # per field: the out= bound (None: the result)
        self._has_out = False
        self._landed: OrderedDict = OrderedDict()  # (operands, outs) -> (local, unpack) pairs into out= (landing)
        self._land_pairs = None
        self._inner: HostExecutable | None = None  # the messages of calls with an out= (made at the first)
        self._replays: OrderedDict = OrderedDict()  # (code, binding) -> the words of replay()
        self._forget: Callable[[], None] | None = None  # what replay()'s holder drops its words with
        self._freed = False
        self._head = _Header(self._segment, self._head_off[me], self.nfields, P)
        self._heads = {r: _Header(m, self._head_off[r], self.nfields, P) for r, m in peers.items()}
        self._heap = ctx.host_heap()
        self._out_shared = False  # every bound out= is in host symmetric memory, laid out like its result
        self._kinds_generation = -1  # the heap's generation when the out= were last classified
        self._published = np.zeros(0, np.uint64)  # direct calls: my header's targets and kinds
        self._written = None  # the _published last written into my header by a call here
        self._classes: OrderedDict = OrderedDict()  # (outs, heap state) -> _classify_outs's verdict
        self._shared: OrderedDict = OrderedDict()  # (operands, destination, its header) -> peer pairs into it
        self._seen: dict = {}  # send -> (key, pairs) of _shared that the last call used
        self._before: dict = {}  # send -> what _seen held before it (a double-buffered loop's other out=)
        self._shared_generation = self._heap.generation
        # direct copies (cross-memory attach) of calls with an out=: decided here, collectively
        self._operand_words = self._head.operands
        self._targets: list[int] = []  # direct calls: where my every field lands (its out=, or its result)
        self._writes: list[_DirectCopy | None] = []  # per send, when direct: None where the peer reads
        self._reads: list[_DirectCopy | None] = []  # per receive, when direct: None where the peer stores
        self._modes: dict = {}  # direct calls: (status code, which peers are direct) -> _DirectMode
        self._out_direct = False  # every bound out= can be copied into directly
        # direct calls, reduced by their Allreduce (MAX): the rank a refused copy was to write, plus one, and its errno
        self._refused = np.zeros(2, np.intc)
        # decided from data every rank has (the largest receive staging of any rank, the module's knobs)
        crosses = (DIRECT_SMALL and DIRECT is not False and fused.max_recv_staging_bytes >= max(DIRECT_SMALL_MIN, 1)
                   if self._landing else _direct_wanted(MPI))
        self._direct = crosses and 1 < P <= COMPLETE_MAX and _direct_setup(self)
        if not (self._direct and None in self._writes):  # no peer reads my operand: no call publishes it
            self._operand_words = None

    # -- binding ------------------------------------------------------------------------------

    def bind_input(self, buf: Buffer, field: int = 0) -> None:
        isz = self._fields[field].itemsize
        if buf.itemsize != isz:
            raise InvalidValueError(f"operand itemsize {buf.itemsize} != planned {isz}")
        self.rebind_input(buf.ptr, buf.owner, field)

    def rebind_input(self, ptr: int, owner: object = None, field: int = 0) -> None:
        self._in_owners[field] = owner
        if ptr != self._in_ptrs[field] or not self._bound:
            self._in_ptrs[field] = ptr
            self._bound = True
            self._pairs = self._land_pairs = None
        if self._inner is not None:
            self._inner.rebind_input(ptr, owner, field)

    def rebind_inputs(self, ptrs: Sequence[int], owners: Sequence[object]) -> None:
        for f, (ptr, owner) in enumerate(zip(ptrs, owners)):
            self.rebind_input(ptr, owner, f)

    def bind_output(self, buf: Buffer | None, field: int = 0) -> None:
        result = self.results[field]
        if buf is not None and buf.ptr == result.ptr and buf.strides == result.strides:
            buf = None  # the result itself
        outs = self._outs
        outs[field] = buf
        self._has_out = buf is not None or self.nfields > 1 and any(b is not None for b in outs)
        inner = self._inner
        self._classify_outs()  # makes the inner messages where they are needed
        if self._landing or self._out_direct:
            self._land_pairs = self._landed.get(self._land_key())  # None: built by the next execute
        if inner is not None:
            inner.bind_output(buf, field)

    def _classify_outs(self) -> None:
        """Can the peers store straight into my out= (and how: header)? Where every out= is in host
        symmetric memory and laid out like its result, or, with cross-memory attach, laid out like
        it. Again at a call after host symmetric memory was freed (the API binds an out= once).
        Cached per binding and state of the heap (a loop alternates between a few out= arrays)."""
        out, heap, outs = self._has_out, self._heap, self._outs
        hit = _NO_OUT
        if out:  # with one field, _has_out means outs[0] is bound
            ends = (outs[0].ptr, outs[0].strides, outs[0].shape) if self.nfields == 1 else tuple(
                None if b is None else (b.ptr, b.strides, b.shape) for b in outs)
            key = (ends, heap.generation, heap.allocations)
            hit = self._classes.get(key)
        if hit is None:
            # what each field's target is (the header's kinds): peers store into a result or host symmetric memory
            kinds = [RESULT if b is None or b.size == 0 else heap.find(*b.address_range()) if _same_layout(b, r)
                     else 0 for b, r in zip(self._outs, self.results)] if self._complete else []
            shared = self._complete and all(kinds)
            direct = shared or self._direct and all(b is None or _same_layout(b, r)
                                                    for b, r in zip(self._outs, self.results))
            targets = [(r if b is None else b).ptr for b, r in zip(self._outs, self.results)] if direct else []
            hit = self._classes[key] = (shared, direct, targets, np.array(targets + kinds, np.uint64))
            while len(self._classes) > CACHE_SIZE:
                self._classes.popitem(last=False)
        self._kinds_generation = heap.generation
        self._out_shared, self._out_direct, targets, published = hit
        if self._out_direct:  # read by the peers once my status says direct (no call of mine is running)
            self._targets, self._published = targets, published
        if not self._landing and out and self._inner is None and not self._out_direct:
            self._inner = self._make_inner()  # bound to every out=

    def _make_inner(self) -> HostExecutable:
        """The message exchange of calls with an ``out=`` (local: lowering reserved its tags). This
        rank's status codes change with it: replays made before are forgotten."""
        self._forget_replays()
        tag, second, data_tags = self._inner_args
        inner = HostExecutable(self.plan, self.comm, AUTO_METHOD, tag, self._logger, second, data_tags,
                               results=self.results, agreed=True)
        if self._bound:
            inner.rebind_inputs(self._in_ptrs, self._in_owners)
        for f, buf in enumerate(self._outs):
            inner.bind_output(buf, f)
        return inner

    def out_problem(self, buf: Buffer, field: int = 0) -> str | None:
        return out_problem(self._fields[field], buf)

    def out_signature(self, buf: Buffer | None, field: int = 0) -> None:
        return None

    def release_input(self) -> None:
        self._in_owners = [None] * self.nfields
        self._in_ptrs = [0] * self.nfields
        self._bound = False
        self._drop_replays()
        self._copies.clear()
        self._landed.clear()
        self._forget_shared()
        self._pairs = self._land_pairs = None
        for copy in self._writes:
            if copy is not None:
                copy.forget_mine()
        if self._inner is not None:
            self._inner.release_input()

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

    # -- the hot path -----------------------------------------------------------------------

    def execute(self, stream: int = 0, sync: bool = True, release_workspace: bool = False,
                problem: collective.Problem | None = None) -> None:
        """Collective, blocking: agree (status messages: also the credit), then store or send."""
        MPI = self._MPI
        if problem is None:
            if self._freed:
                problem = ("InvalidStateError", "this host executable was freed")
            elif not self._bound:
                problem = ("InvalidStateError", "no operand is bound (it was released): call reset_operand() first")
        out = self._has_out
        if self._out_shared and self._heap.generation != self._kinds_generation:  # freed since bound?
            self._classify_outs()
            self._land_pairs = self._landed.get(self._land_key()) if self._landing or self._out_direct else None
        direct = out and self._out_direct
        # published again where a compiled replay of another binding may have run since (only this
        # executable's calls and replays write its header)
        if direct and (self._written is not self._published or self._replays):
            self._head.published[:] = self._published
            self._written = self._published
        words = self._operand_words  # read by the peers that read my operand, after my status
        if words is not None and self._bound and words.tolist() != self._in_ptrs:
            words[:] = self._in_ptrs
        stale = self._inner is None  # a rank without its messages builds them after the round: agreed again
        if problem is None:
            problem = self._prepare()
        try:
            if self._complete:
                st = self._status
                if problem is not None:
                    st.fail(problem)
                code = (((_SHARED_STALE if stale else _SHARED) if self._out_shared else
                         (_DIRECT_STALE if stale else _DIRECT)) if direct else WELL + out * _OUT + stale * _STALE)
                MPI.Prequest.Startall(st.first[code])
                MPI.Request.Waitall(st.recvs, st.statuses)
                mine = st.base + code
                for status in st.statuses:
                    if status.Get_tag() != mine:  # someone said something else: read every status
                        self._heard(code, out, stale, [s.Get_tag() - st.base for s in st.statuses])
                        return
                if not out:  # the time loop's call: every rank stores into results
                    self._store(code)
                elif self._landing:  # every rank binds an out= (they all said what I said)
                    if not direct:
                        self._land(code, True, None)
                    elif self._out_shared:  # every one in host symmetric memory
                        self._store_shared(code)
                    else:  # every one copied into across memories
                        self._store_direct(code, True, None)
                elif direct:  # every rank's out= can be stored into
                    self._store_direct(code, True, None)
                else:
                    self._heard(code, out, stale, [code] * len(st.statuses))
            else:
                messages = self._check.check(problem, flag=int(out))
                if messages:
                    self._send_messages(True)  # the Allreduce carries one flag: agree on every build
                else:
                    self._store(0)
        except MPI.Exception as e:
            raise CommunicationError(f"redist host backend (push): MPI error in execute: {e}") from e

    def _prepare(self) -> collective.Problem | None:
        """Build what this binding's call uses where it is not built yet (cached per binding); this
        rank's problem if that fails."""
        out, inner = self._has_out, self._inner
        try:
            if self._pairs is None:
                self._pairs = self._views()
            if out and (self._landing or self._out_direct) and self._land_pairs is None:
                self._land_pairs = self._landed_pairs()
            if inner is not None and not inner.ready:
                return inner.prepare()  # the messages this binding needs if this call sends any
        except Exception as e:  # noqa: BLE001 -- this rank's problem, agreed by the caller
            return collective.problem(e)
        return None

    def _heard(self, code: int, out: bool, stale: bool, heard: list[int]) -> None:
        """The rest of a call once every status is in (``heard``: the peers' codes)."""
        st = self._status
        if FAILED in heard:
            st.raise_peers(code)
        messages = (out and code not in _DIRECTS) or any(c in _WITH_OUT for c in heard)  # an out= only they reach
        if not (messages or out or any(c in _DIRECTS for c in heard)):
            self._store(code)
        elif self._landing:  # some rank's out= is copied into across memories: the others land or store
            if code in _CROSS or any(c in _CROSS for c in heard):
                self._store_direct(code, out, heard)
            else:
                self._land(code, out, heard)
        elif not messages:
            self._store_direct(code, out, heard)
        else:
            self._MPI.Request.Waitall(st.sends[code])
            self._send_messages(stale or any(c in _STALES for c in heard))

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

    def _mode(self, code: int, out: bool, heard: list[int] | None) -> _DirectMode:
        """The :class:`_DirectMode` of a direct call where this rank said ``code`` and its peers ``heard``
        (None: what it said), cached per code where every peer said it, else per kind of each peer."""
        codes = [code] * len(self._send_codes) if heard is None else [heard[k] for k in self._send_codes]
        # a destination in host symmetric memory gets plain stores (its header, written before its status, says
        # where); below LANDING_MAX one with a private out= that cannot be copied into gets its landing
        key = (code, tuple(c in _SHAREDS for c in codes), tuple(c in _DIRECTS for c in codes),
               tuple(self._landing and c in _WITH_OUT for c in codes))
        mode = self._modes.get(key)
        if mode is None:
            mode = self._modes[key] = _DirectMode(self, code, out, key[2], key[1], key[3])
        if heard is None:
            self._modes[code] = mode
        return mode

    def _cross_calls(self, code: int):
        """(the mode, the cross-memory calls, the checks) of a replayed direct call where every peer says
        ``code``: each copy's iovecs as its last call re-based them, and the peer words they were based on
        (checked by the replay: a peer that published others hands the call back); None where a copy was
        last based for another binding."""
        mode = self._modes.get(code) or self._mode(code, True, None)
        calls, checks = [], []
        for copy, mine in [(c, self._in_ptrs) for _, c, _, _ in mode.writes] + [(c, self._targets) for c in mode.reads]:
            made = None if copy is None else copy.replayed(mine)
            if made is None:
                return None
            calls += made[0]
            checks += made[1]
        return mode, calls, tuple(checks)

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

    def _store_direct(self, code: int, out: bool, heard: list[int] | None) -> None:
        """Some rank writes into an out=, and every such out= can be copied into: copy straight into
        them (cross-memory attach: stores into the peers, or reads from their operands where the peer's
        side of a pair has the longer stretches) and store into the other peers' results; arrive; the
        local part; then one Allreduce, entered after my copies: did any fail (every rank raises), and
        no sender returns before every rank that reads its operand is done."""
        MPI, copyto = self._MPI, np.copyto
        local, unpack = self._land_pairs if out else (self._pairs[0], ())
        if code in _DIRECTS:  # the peers store or I read straight into my out=: nothing lands
            unpack = ()
        mode = self._modes.get(code) if heard is None else None  # every peer said my code: a time loop's call
        if mode is None:
            mode = self._mode(code, out, heard)
        if mode.first:
            MPI.Prequest.Startall(mode.first)
        refused = self._refused
        refused[:] = 0
        if mode.writes:
            by_dst = self._pairs[2]
            for i, copy, shared, land in mode.writes:
                if copy is not None:
                    copy.move(self._in_ptrs, refused)  # every destination gets its data
                else:
                    for d, s in (self._into_shared(i) if shared else by_dst[i][land]):
                        copyto(d, s, casting="no")
            MPI.Prequest.Startall(mode.arrivals)
        for copy in mode.reads:
            copy.move(self._targets, refused)
        for d, s in local:
            copyto(d, s, casting="no")
        MPI.Request.Waitall(mode.waits)
        for d, s in unpack:  # a private out= that could not be copied into (below LANDING_MAX): my landing
            copyto(d, s, casting="no")
        if not self._direct or (code not in _CROSS and (heard is None or not any(
                c in _CROSS for c in heard))):  # no rank copies across memories: plain stores
            return
        # after my copies: the kernel refused one it took at plan time (every rank raises: a receiver cannot
        # tell), and a sender whose operand is read returns only after every rank is done
        # (a compiled replay of the call makes the same Allreduce: a rank may replay while its peers run here)
        self.comm.Allreduce(MPI.IN_PLACE, refused, op=MPI.MAX)
        if refused[0]:
            raise CommunicationError(refused_message(int(refused[0]) - 1, int(refused[1])))

    def _send_messages(self, rebuild: bool) -> None:
        """Some rank writes into an out=: the inner message exchange (agreed already)."""
        if rebuild:  # some rank builds its messages now (after the round): that can fail, so agree once more
            problem = None
            try:
                if self._inner is None:
                    self._inner = self._make_inner()
                problem = self._inner.prepare()
            except Exception as e:  # noqa: BLE001
                problem = collective.problem(e)
            collective.agree(self.comm, problem)
        self._inner.exchange()

    def graph(self, stream: int = 0) -> int:
        raise NotSupportedError("graph() is only available for CUDA execution (this is the MPI host backend)")

    def update_captured(self, graph: int, graph_exec: int) -> int:
        raise NotSupportedError("update_captured() is only available for CUDA execution: host exchanges run on MPI "
                                "and are never recorded into a CUDA graph")

    def release_captured(self) -> None:
        """Nothing to release: host exchanges are never recorded into a CUDA graph."""

    # -- lifetime -----------------------------------------------------------------------------

    def release_workspace(self) -> None:
        """Push has no staging; the messages of out= calls drop theirs."""
        if self._inner is not None:
            self._inner.release_workspace()

    def detach_result(self) -> None:
        """The result (a view of the own segment) stays valid while the caller holds it."""

    def free(self) -> None:
        """Release everything (local, idempotent): requests, the inner messages, the mappings of
        the peers' segments; the own segment goes once the last result array over it is dropped."""
        if self._freed:
            return
        self._freed = True
        self._drop_replays()  # before the requests their words name go
        if not self._MPI.Is_finalized():
            for r in self._arrival_recvs + self._arrival_sends:
                r.Free()
            if self._status is not None:
                self._status.free()
            if self._check is not None:
                self._check.free()
        if self._inner is not None:
            self._inner.free()
            self._inner = None
        self._arrival_recvs = self._arrival_sends = []
        self._finish = []
        self._modes.clear()
        self._copies.clear()
        self._landed.clear()
        self._pairs = self._land_pairs = None
        self._writes, self._reads, self._targets = [], [], []
        self._head, self._heads, self._operand_words = None, {}, None
        self._forget_shared()
        self._outs = [None] * self.nfields
        self._in_owners = [None] * self.nfields
        self._peer_ptr, self._peer_segments = {}, {}
        self._base = self._segment = None
        self.result = None  # type: ignore[assignment]  # freed: nothing to read any more
        self.results = ()

    def __del__(self) -> None:
        try:
            if not getattr(self, "_freed", True):
                self.free()
        except Exception:  # noqa: BLE001, S110 -- never raise from a finalizer
            pass

    def describe(self) -> str:
        p = self._fields[0]
        agreement = "status messages to every rank" if self._complete else "one Allreduce"
        lines = [
            f"redist host executable rank {p.rank}/{p.nranks} method=push (one node: peers store into each "
            f"other's results in shared memory; agreement and credit: {agreement}; arrival messages; calls with "
            f"an out= {_out_route(self)})",
            f"  plan key={self.plan.key} itemsize={'/'.join(str(q.itemsize) for q in self._fields)} "
            f"out_order={p.out_order}{'' if self.nfields == 1 else f', {self.nfields} fields in one round'} "
            f"stores {sum(t.nbytes for q in self._fields for t in q.sends)} B into {len(p.sends)} peer(s), "
            f"receives {sum(t.nbytes for q in self._fields for t in q.recvs)} B from {len(p.recvs)} peer(s)",
        ]
        if p.local is not None:
            c = p.local.direct
            lines.append(f"  local {p.rank}->{p.rank}: {p.local.nbytes} B, {c.runs} run(s) of {c.run_length} elem")
        reader = [c is None for c in self._writes] if self._direct else [False] * len(p.sends)
        for i, (t, read) in enumerate(zip(p.sends, reader)):
            c = t.direct
            lines.append(f"  store ->{t.dst}: {sum(q.sends[i].nbytes for q in self._fields)} B, {c.runs} run(s) of "
                         f"{c.run_length} elem"
                         f"{' (into its out=: it reads them, process_vm_readv)' if read else ''}")
        for j, (t, copy) in enumerate(zip(p.recvs, self._reads if self._direct else ())):
            if copy is not None:
                lines.append(f"  read <-{t.src}: {sum(q.recvs[j].nbytes for q in self._fields)} B, in calls with an "
                             "out= (process_vm_readv)")
        if p.local is None and not p.sends and not p.recvs:
            lines.append("  (nothing to move)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        p = self._fields[0]
        return f"<PushExecutable rank={p.rank}/{p.nranks} fields={self.nfields}>"


class _Header:
    """The words behind a rank's results in its segment. The rank writes them between its calls;
    its peers read them after its status (MPI's ordering): per field the address its calls with an
    out= write into (its out= or its result) and what that memory is (0: private; RESULT; else the
    id of the host symmetric allocation holding it, engine/host/symmetric.py), a probe word per rank
    (the plan-time check of the direct copies), and per field its operand's address (read by the
    peers that copy from it)."""

    @staticmethod
    def words(nfields: int, nranks: int) -> int:
        return 3 * nfields + nranks

    def __init__(self, segment: mmap.mmap, offset: int, nfields: int, nranks: int) -> None:
        words = np.frombuffer(segment, np.uint64, self.words(nfields, nranks), offset)
        self.address: int = words.ctypes.data
        self.targets, self.kinds = words[:nfields], words[nfields:2 * nfields]
        self.published = words[:2 * nfields]  # both: what a call into an out= publishes and its peers read
        self.probes, self.operands = words[2 * nfields:2 * nfields + nranks], words[2 * nfields + nranks:]


def _share(comm: MPI.Intracomm, nbytes: int, peers: Sequence[int]) -> tuple[mmap.mmap, dict[int, mmap.mmap]]:
    """Collective: this rank's shared segment of ``nbytes`` (zeroed), and its mappings of the
    segments of ``peers``. Each rank creates a file in /dev/shm, every rank maps the files it
    needs, then each unlinks its own: no name outlives this call, and the memory goes back to the
    system when the last mapping of it is dropped. Any failure raises on every rank."""
    path = None
    try:
        with collective.attempt(comm) as step:
            path = shm_path()
            own = map_file(path, nbytes, create=True)
            step.payload = path
        paths = step.gathered
        mapped = {}
        with collective.attempt(comm):
            for r in peers:
                mapped[r] = map_file(paths[r], nbytes=0, create=False)
        return own, mapped
    finally:
        if path is not None:
            try:
                os.unlink(path)
            except FileNotFoundError:  # never created (this rank failed first)
                pass


SHM_MARGIN = 64 << 20  # what MPI and others keep in /dev/shm beside the segments


def _field_offsets(fields, rank: int) -> list[int]:
    """Where each field's result starts in rank ``rank``'s segment (64-byte aligned), then its size."""
    offsets, off = [], 0
    n = geo.volume(fields[0].out_boxes[rank])
    for p in fields:
        offsets.append(off)
        off += -(-(n * p.itemsize) // 64) * 64
    return offsets + [off]


def push_problem(comm: MPI.Intracomm, plan: Plan | FusedPlan) -> str | None:
    """Collective: why "push" cannot serve ``plan`` on ``comm`` (None when it can).

    Every rank must share memory with every other (one node), and the node's shared-memory
    file system must hold every rank's result. Decided from data gathered from every rank.
    """
    import os

    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    one_node = node.Get_size() == comm.Get_size()
    node.Free()
    try:
        st = os.statvfs(SHM_DIR)
        free = st.f_bavail * st.f_frsize
    except OSError:
        free = -1
    frees = collective.agree(comm, None, free)
    if not one_node:
        return "host method 'push' needs every rank on one node (MPI shared memory); use 'auto' or 'hybrid'"
    itemsizes = plan.itemsizes if isinstance(plan, FusedPlan) else (plan.itemsize,)
    need = sum(geo.volume(b) for b in plan.out_boxes) * sum(itemsizes) + SHM_MARGIN
    if min(frees) < need:
        return (f"host method 'push' needs {need} bytes of shared memory in {SHM_DIR} for the results, but "
                f"{min(frees)} are free there (rank {frees.index(min(frees))}); enlarge it (docker: --shm-size) "
                "or use host_method='hybrid'")
    return None


# -- direct stores: Linux cross-memory attach ----------------------------------------------------

IOV_MAX = 1024  # iovecs per process_vm_writev call (Linux's UIO_MAXIOV)
CALL_BYTES = 1 << 30  # bytes per call (Linux moves at most MAX_RW_COUNT, 2 GiB - 4 KiB, in one)
_RUNS_MAX = 1 << 22  # runs of one send past which direct stores are not considered (plan-time memory)
_PR_SET_PTRACER, _PR_SET_PTRACER_ANY = 0x59616D61, ctypes.c_ulong(-1).value


def _same_layout(buf: Buffer, result: Buffer) -> bool:
    """``buf`` lays its elements out like ``result`` (strides of length-1 axes do not matter)."""
    return all(x == y for x, y, n in zip(buf.strides, result.strides, result.shape) if n > 1)


def _direct_wanted(MPI) -> bool:
    """:data:`DIRECT`, its default decided by the MPI library (the same on every rank of a job)."""
    if DIRECT is not None:
        return DIRECT
    return MPI.Get_library_version().lstrip().startswith("Open MPI")


def _cross_memory():
    """libc's ``(process_vm_writev, process_vm_readv)`` (None where there are none), having let this
    process's peers copy from and into it under Yama ``ptrace_scope`` 1 (``PR_SET_PTRACER_ANY``;
    EINVAL without Yama: ignored)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        calls = libc.process_vm_writev, libc.process_vm_readv
    except (OSError, AttributeError):
        return None
    for call in calls:
        call.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
        call.restype = ctypes.c_ssize_t
    libc.prctl(_PR_SET_PTRACER, ctypes.c_ulong(_PR_SET_PTRACER_ANY), 0, 0, 0)
    return calls


def _runs(fields, send: int) -> tuple[np.ndarray, ...] | None:
    """(field, source byte offset, destination byte offset, bytes) of every contiguous run of send
    ``send`` of every field in element order, runs contiguous on both sides merged; None past
    :data:`_RUNS_MAX` runs. Offsets are from the field's operand and its destination's result."""
    columns, count = [], 0
    for f, p in enumerate(fields):
        isz = p.itemsize
        for piece in p.sends[send].pieces:
            c = piece.direct
            shape, ss, ds, run = fused_dims(c.shape, c.src_strides, c.dst_strides)
            count += math.prod(shape)
            if count > _RUNS_MAX:
                return None
            index = np.indices(shape).reshape(len(shape), -1)
            columns.append((np.full(index.shape[1], f, np.intp),
                            ((c.src_offset + np.asarray(ss) @ index) * isz).astype(np.uint64),
                            ((c.dst_offset + np.asarray(ds) @ index) * isz).astype(np.uint64),
                            np.full(index.shape[1], run * isz, np.uint64)))
    field, src, dst, length = (np.concatenate(col) for col in zip(*columns))
    starts = np.flatnonzero(_starts(field, src, length) | _starts(field, dst, length))
    return field[starts], src[starts], dst[starts], np.add.reduceat(length, starts)


def _starts(field: np.ndarray, offset: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Where a new contiguous stretch begins, run by run (a run not right after the previous one)."""
    new = np.ones(len(length), bool)
    new[1:] = (field[1:] != field[:-1]) | (offset[1:] != offset[:-1] + length[:-1])
    return new


def _stretches(field: np.ndarray, offset: np.ndarray, length: np.ndarray) -> int:
    """How many contiguous stretches one side of a send's runs makes (its iovecs)."""
    return int(_starts(field, offset, length).sum())


def _who_copies(runs: Sequence[tuple[np.ndarray, ...]]) -> tuple[bool, list[bool]]:
    """(are direct copies worth it for these sends, per send: does its receiver read it). Worth it
    where every send's stretches average at least :data:`DIRECT_MIN_RUN` bytes on both sides; the
    receiver reads where the destination's side has more stretches than the operand's (the remote
    side should be the one with fewer iovecs)."""
    sides = [(_stretches(f, src, n), _stretches(f, dst, n)) for f, src, dst, n in runs]
    fit = all(int(r[3].sum()) >= DIRECT_MIN_RUN * max(side) for r, side in zip(runs, sides))
    if DIRECT_READ is not None:
        return fit, [DIRECT_READ] * len(sides)
    return fit, [theirs > mine for mine, theirs in sides]


def _direct_setup(exe: PushExecutable) -> bool:
    """Collective: can every pair of ranks copy between their memories with cross-memory attach (the
    kernel allows it, every exchange's stretches are long enough)? Decides per send who copies: the
    sender stores (``process_vm_writev``), or the receiver reads from the operand (``process_vm_readv``)
    where the sender's side has fewer stretches (the kernel pins the remote side's pages per iovec:
    the side with the long stretches should be the remote one), unless :data:`DIRECT_READ` forces
    the direction. The receiver gets the runs of the
    sends it reads. Tried with one word per pair, each way it will copy; decided from what every rank
    found. Builds ``exe._writes`` and ``exe._reads`` when so."""
    plan, comm = exe._fields[0], exe.comm
    calls = _cross_memory()
    runs = None
    if calls is not None:
        try:
            runs = [_runs(exe._fields, i) for i in range(len(plan.sends))]
            if any(r is None for r in runs):
                runs = None
        except Exception:  # noqa: BLE001 -- then this rank cannot: agreed below
            runs = None
    fit, read = _who_copies(runs) if runs is not None else (False, [])
    token = secrets.randbits(63) | 1  # what this rank writes into its destinations' probe words
    slots = exe._head.probes
    slots[plan.rank] = token  # what the ranks that read from me read back
    infos = collective.agree(comm, None, (os.getpid(), exe._head.address, fit, token))
    if not all(ok for _, _, ok, _ in infos):
        return False
    outgoing: list = [None] * plan.nranks
    for t, r, rd in zip(plan.sends, runs, read):  # type: ignore[arg-type]  # runs: every rank fits
        if rd:
            outgoing[t.dst] = r
    incoming = comm.alltoall(outgoing)
    writev, readv = calls  # type: ignore[misc]  # every rank fits
    works = True
    try:
        writes = [None if rd else _DirectCopy(*r) for r, rd in zip(runs, read)]  # type: ignore[arg-type]
        reads = [None if incoming[t.src] is None else _DirectCopy(incoming[t.src][0], incoming[t.src][2],
                                                                   incoming[t.src][1], incoming[t.src][3])
                 for t in plan.recvs]
    except Exception:  # noqa: BLE001 -- agreed below
        writes, reads, works = [], [], False
    word = np.array([token], np.uint64)
    mine = (ctypes.c_uint64 * 2)(word.ctypes.data, 8)
    for t, copy in zip(plan.sends, writes):  # into my slot of each destination I store into
        if works and copy is not None:
            pid, theirs = infos[t.dst][0], infos[t.dst][1]
            works = writev(pid, mine, 1, (ctypes.c_uint64 * 2)(theirs + 8 * (2 * exe.nfields + plan.rank), 8), 1, 0) == 8
    for t, copy in zip(plan.recvs, reads):  # each source I read from: its own slot, its token
        if works and copy is not None:
            pid, theirs = infos[t.src][0], infos[t.src][1]
            word[0] = 0
            works = (readv(pid, mine, 1, (ctypes.c_uint64 * 2)(theirs + 8 * (2 * exe.nfields + t.src), 8), 1, 0) == 8
                     and int(word[0]) == infos[t.src][3])
    collective.agree(comm, None)  # every probe written (or refused)
    # each storing source's token arrived here: its pid named this process (not another one of a namespace)
    works = works and all(int(slots[t.src]) == infos[t.src][3] for t, copy in zip(plan.recvs, reads) if copy is None)
    if not all(collective.agree(comm, None, works)):
        return False
    for copy, t in zip(writes, plan.sends):
        if copy is not None:
            copy.connect(writev, t.dst, infos[t.dst][0], exe._heads[t.dst].targets)
    for copy, t in zip(reads, plan.recvs):
        if copy is not None:
            copy.connect(readv, plan.rank, infos[t.src][0], exe._heads[t.src].operands, read=True)
    exe._writes, exe._reads = writes, reads
    return True


def refused_message(into: int, errno: int) -> str:
    """What every rank raises when the kernel refused a cross-memory copy into rank ``into`` (errno
    ``errno``; 0: a short copy) somewhere: cabi/redist_replay.c writes the same."""
    why = os.strerror(errno) if errno > 0 else "a short copy"
    return f"redist host backend (push): cross-memory copies into rank(s) {into} failed ({why}); their out= may be incomplete"


def _split_long(field, src, dst, length):
    """The runs with every run longer than :data:`CALL_BYTES` cut into pieces of at most that."""
    pieces = (length + np.uint64(CALL_BYTES - 1)) // np.uint64(CALL_BYTES)
    if (pieces <= 1).all():
        return field, src, dst, length
    which = np.repeat(np.arange(len(length)), pieces.astype(np.intp))
    first = np.cumsum(pieces) - pieces  # where each run's pieces begin
    step = (np.arange(len(which)) - first[which].astype(np.intp)).astype(np.uint64) * np.uint64(CALL_BYTES)
    return field[which], src[which] + step, dst[which] + step, np.minimum(length[which] - step, np.uint64(CALL_BYTES))


class _DirectCopy:
    """One pair of direct calls, on the rank that copies: its runs as two iovec lists, *mine* (the
    operand of a store, the out= of a read) and *theirs* (the peer's out=, the peer's operand), each
    side's contiguous stretches merged on its own (the kernel pins the remote side's pages per iovec:
    fewer is faster), cut into calls of at most IOV_MAX iovecs a side; re-based when my addresses or
    the peer's published ones change."""

    def __init__(self, field: np.ndarray, mine: np.ndarray, theirs: np.ndarray, length: np.ndarray) -> None:
        field, mine, theirs, length = _split_long(field, mine, theirs, length)
        new_local, new_remote = _starts(field, mine, length), _starts(field, theirs, length)
        group_local, group_remote = np.cumsum(new_local) - 1, np.cumsum(new_remote) - 1
        ends = np.cumsum(length)  # bytes up to the end of each run
        local, remote, chunks = [], [], []
        start, n = 0, len(length)
        while start < n:  # a call: as many runs as keep both sides within IOV_MAX iovecs and CALL_BYTES
            before = int(ends[start - 1]) if start else 0
            end = max(start + 1, min(int(np.searchsorted(group_local, group_local[start] + IOV_MAX)),
                                     int(np.searchsorted(group_remote, group_remote[start] + IOV_MAX)),
                                     int(np.searchsorted(ends, before + CALL_BYTES, side="right"))))
            sides = []
            for new, offset, out in ((new_local, mine, local), (new_remote, theirs, remote)):
                first = new[start:end].copy()
                first[0] = True  # a stretch cut by the previous call starts again here
                at = np.flatnonzero(first) + start
                out.append((field[at], offset[at], np.add.reduceat(length[start:end], at - start)))
                sides.append(len(at))
            chunks.append((sum(len(part[0]) for part in local) - sides[0], sides[0],
                           sum(len(part[0]) for part in remote) - sides[1], sides[1], int(length[start:end].sum())))
            start = end
        self._lfield, self._mine, llen = (np.concatenate(col) for col in zip(*local))
        self._rfield, self._theirs, rlen = (np.concatenate(col) for col in zip(*remote))
        self._local = np.zeros((len(llen), 2), np.uint64)
        self._local[:, 1] = llen
        self._remote = np.zeros((len(rlen), 2), np.uint64)
        self._remote[:, 1] = rlen
        self._local_at, self._remote_at = self._local.ctypes.data, self._remote.ctypes.data  # (re-based in place)
        self._chunks = chunks
        self._call = self._into = self._pid = self._header = None
        self._read = False
        self._ptrs: tuple[int, ...] | None = None
        self._bases: bytes | None = None

    def connect(self, call, into: int, pid: int, header: np.ndarray, read: bool = False) -> None:
        """``call`` (process_vm_writev, or process_vm_readv where ``read``), the rank whose memory it
        writes, the peer's process, its published addresses (a view of its segment)."""
        self._call, self._into, self._pid, self._header, self._read = call, into, pid, header, read

    def forget_mine(self) -> None:
        self._ptrs = None

    def replayed(self, ptrs: Sequence[int]) -> tuple[list, list] | None:
        """For a compiled replay of the calls :meth:`move` made last with ``ptrs``: its calls as
        :func:`.replay.cross_words` takes them, and the checks (address, value) of the peer's words
        their iovecs were based on; None where they were last based for other addresses of mine."""
        if self._ptrs != tuple(ptrs) or self._bases is None:
            return None
        calls = [(self._read, self._into, self._pid, self._local[lstart:lstart + lcount],
                  self._remote[rstart:rstart + rcount]) for lstart, lcount, rstart, rcount, _ in self._chunks]
        base = self._header.ctypes.data
        return calls, [(base + 8 * j, int(v)) for j, v in enumerate(np.frombuffer(self._bases, np.uint64))]

    def move(self, ptrs: Sequence[int], refused: np.ndarray) -> None:
        """Copy every run (``ptrs``: my side's address per field); where the kernel refuses a call and
        ``refused`` holds no refusal yet: the rank it writes into, plus one, and the errno go there."""
        key = tuple(ptrs)
        if key != self._ptrs:
            self._local[:, 0] = np.asarray(key, np.uint64)[self._lfield] + self._mine
            self._ptrs = key
        header = self._header
        bases = header.tobytes()  # the peer wrote them before its status
        if bases != self._bases:
            self._remote[:, 0] = header[self._rfield] + self._theirs
            self._bases = bases
        local, remote, call, pid = self._local_at, self._remote_at, self._call, self._pid
        for lstart, lcount, rstart, rcount, nbytes in self._chunks:
            ctypes.set_errno(0)
            got = call(pid, local + 16 * lstart, lcount, remote + 16 * rstart, rcount, 0)
            if got != nbytes:
                if not refused[0]:
                    refused[:] = self._into + 1, ctypes.get_errno() if got < 0 else 0
                return


class _DirectMode:
    """What a direct call does for one status code, one set of direct peers, which of them are in
    host symmetric memory and which land (below LANDING_MAX, a private out= that cannot be copied
    into): the arrivals to receive, the sends to copy (a :class:`_DirectCopy`) or store (plain
    stores: into the peer's result, its landing, or its targets where ``shared``) and their arrivals
    (none where the peer reads), the receives to read, and every request to wait for."""

    def __init__(self, exe: PushExecutable, code: int, out: bool, direct: tuple[bool, ...],
                 shared: tuple[bool, ...], land: tuple[bool, ...]) -> None:
        plan = exe._fields[0]
        copies = exe._writes or [None] * len(plan.sends)  # none without cross-memory attach (host symmetric only)
        reads = exe._reads or [None] * len(plan.recvs)
        cross = [d and not sh for d, sh in zip(direct, shared)]  # destinations copied into by cross-memory attach
        read_by_peer = [c and w is None for c, w in zip(cross, copies)]
        read_by_me = [out and code in _CROSS and c is not None for c in reads]
        self.first = [r for r, mine in zip(exe._arrival_recvs, read_by_me) if not mine]
        self.writes = [(i, copies[i] if c else None, sh, int(la))
                       for i, (c, sh, la, theirs) in enumerate(zip(cross, shared, land, read_by_peer)) if not theirs]
        self.arrivals = [exe._arrival_sends[i] for i, *_ in self.writes]
        self.reads = [c for c, mine in zip(reads, read_by_me) if mine]
        self.waits = self.first + self.arrivals + (
            exe._status.sends[code] if exe._status else [])


def _out_route(exe: PushExecutable) -> str:
    """How calls with an out= move their data (describe())."""
    shared = ("the peers store straight into an out= in host symmetric memory laid out like its result; other "
              "out= " if exe._complete and exe._fields[0].nranks > 1 else "")
    if exe._landing:
        if not exe._fused.max_recv_staging_bytes:
            return shared + "are copied straight into it"
        return shared + ("are copied straight into it when laid out like its result (cross-memory attach: the "
                         "peers store, or the rank reads their operands where their side has the longer "
                         "stretches), else land in shared memory, then copy" if exe._direct else
                         "land in shared memory, then copy")
    if exe._direct:
        return shared + ("are copied straight into it (cross-memory attach: the peers store, or the rank reads "
                         "their operands where their side has the longer stretches) when every out= is laid out "
                         "like its result, else sent as MPI messages straight into it")
    return shared + "send MPI messages straight into it"
