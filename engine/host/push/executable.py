# SPDX-License-Identifier: Apache-2.0
"""The push executable: its set-up (the segments, the status and arrival requests, the direct
copies' probe), the binding of operands and ``out=``, the status round of ``execute`` that picks a
route, and its lifetime. The routes are its parts (see the package docstring)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ... import collective
from ...buffer import Buffer
from ...errors import CommunicationError, InvalidValueError, NotSupportedError
from ...plan import FusedPlan, Plan, fuse
from ..executable import COMPLETE_MAX, HostExecutable, out_problem, tag_ub
from ..requests import CACHE_SIZE
from ..status import FAILED, WELL, StatusRound
from ..symmetric import RESULT
from . import tuning
from .codes import (_CODES, _CROSS, _DIRECT, _DIRECT_STALE, _DIRECTS, _OUT, _SHARED, _SHARED_STALE, _STALE,
                    _STALES, _WITH_OUT)
from .cross_memory import CrossMemoryRoute, _direct_setup, _direct_wanted
from .land import LandRoute
from .messages import MessageRoute
from .replay import Replays
from .segment import _field_offsets, _Header, _share
from .shared import SharedRoute
from .store import StoreRoute

if TYPE_CHECKING:
    from mpi4py import MPI

    from ...backend import Context, Logger
    from .cross_memory import _DirectCopy

__all__ = ["PushExecutable"]

_NO_OUT = (False, False, (), None)  # _classify_outs's verdict where no field binds an out=


class PushExecutable(StoreRoute, LandRoute, SharedRoute, CrossMemoryRoute, MessageRoute, Replays):
    """A plan on one node: peers store into each other's results (see the package docstring).

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
                 second: MPI.Intracomm | None = None, data_tags: tuple[int, ...] = (), messages_tag: int = 0) -> None:
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
        self._landing = fused.max_recv_staging_bytes <= tuning.LANDING_MAX and P <= COMPLETE_MAX
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
        crosses = (tuning.DIRECT_SMALL and tuning.DIRECT is not False
                   and fused.max_recv_staging_bytes >= max(tuning.DIRECT_SMALL_MIN, 1)
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



def _same_layout(buf: Buffer, result: Buffer) -> bool:
    """``buf`` lays its elements out like ``result`` (strides of length-1 axes do not matter)."""
    return all(x == y for x, y, n in zip(buf.strides, result.strides, result.shape) if n > 1)


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
