# SPDX-License-Identifier: Apache-2.0
"""The MPI host backend: a :class:`~redist.engine.plan.Plan` lowered to persistent MPI requests.

``lower(plan, ctx, options)`` (collective) turns every remote transfer into a *message* seen
from this rank: its peer, its bytes, and the strided region it reads from the operand (a send,
from ``transfer.pack``) or writes into the output (a receive, from ``transfer.unpack``). Both
regions walk the elements in the same order, the one of the dense staging slot, so sender and
receiver agree on the byte stream without knowing each other's strides. A region that is one
contiguous run is always sent or received in place. The others depend on the method:

``"hybrid"`` (what ``"auto"`` picks)
    persistent ``Send_init``/``Recv_init``; each strided message goes as an MPI derived datatype
    when that measured faster (big messages of few long runs, see :func:`datatype_pays`),
    otherwise through numpy pack/unpack and engine-owned staging, as in ``"pack"``.
``"datatype"``
    persistent ``Send_init``/``Recv_init`` whose non-contiguous regions are all MPI derived
    datatypes (nested ``hvector`` over bytes), so MPI packs straight from the operand into its
    transport and unpacks straight into the output: no user-level pack, no staging.
``"pack"``
    persistent ``Send_init``/``Recv_init`` on engine-owned staging for the non-contiguous
    regions: numpy packs them (one memcpy per contiguous run) into a send slot, and unpacks
    receive slots after the wait.
``"alltoallw"``
    one persistent ``Alltoallw_init`` (MPI-4 persistent collective) over ``MPI.BOTTOM`` with the
    same derived datatypes at absolute addresses, re-created (collectively) after a rebind.

Regions with a negative or zero stride (``a[::-1]``, broadcast views) always go through numpy.

**Buffers and caches.** The executable owns its result (dense in ``plan.out_order``) and binds
the operand and the output by address. Requests, datatype buffers and numpy views are made per
address and kept in small caches (:data:`.requests.CACHE_SIZE` entries per side), so a time loop that
alternates between a few buffers rebinds with a dictionary lookup. Cached entries hold no
reference to user memory (only the current binding does).

**Agreement before any byte moves.** ``execute(problem=...)`` must make every rank raise if any
rank has a local problem, and a call that raises must change nothing a user can see on any rank:
no byte of any rank's ``out=`` or result. So the ranks agree first and move data only once every
rank is well: with ``P <= COMPLETE_MAX`` one round of zero-byte status messages between every
pair of ranks (:class:`.status.StatusRound`; the tag says whether the sender is well), larger
jobs and ``"alltoallw"`` one small ``Allreduce``. A failed round raises the first rank's problem
on every rank (gathered through :mod:`..collective`); no data message is ever sent for that call.

Everything is local except :func:`lower` (collective) and ``execute``; ``free`` is local: the
communicator belongs to the context, not to the executable, so a dropped executable releases
all it holds when garbage-collected.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import collective
from ..buffer import Buffer, self_overlapping
from ..errors import CommunicationError, InternalError, InvalidValueError, NotSupportedError
from ..plan import FusedPlan, Plan, fuse
from ._datatypes import empty_bytes, region_datatype
from .messages import Message, align, messages
from .requests import CACHE_SIZE, BindingRequests
from .replay import words as replay_words
from .status import FAILED, WELL, StatusRound

if TYPE_CHECKING:
    from mpi4py import MPI

    from ..backend import Logger

__all__ = ["AUTO_METHOD", "COMPLETE_MAX", "METHODS", "HostExecutable", "out_problem", "tag_ub"]

#: the message methods (engine/host/push/ adds "push": stores into a shared window)
METHODS = ("hybrid", "datatype", "pack", "alltoallw")
AUTO_METHOD = "hybrid"
_METHOD_TEXT = {
    "hybrid": "persistent Send_init/Recv_init; per strided message an MPI derived datatype or a numpy "
              "pack/unpack through engine-owned staging, whichever measured faster for its size and runs",
    "datatype": "persistent Send_init/Recv_init, MPI derived datatypes (no user-level pack)",
    "pack": "persistent Send_init/Recv_init, numpy pack/unpack through engine-owned staging",
    "alltoallw": "persistent Alltoallw_init over MPI.BOTTOM with MPI derived datatypes",
}
#: up to this many ranks, execute agrees through message tags (zero-byte messages fill the gaps)
COMPLETE_MAX = 16


#: the standard's lower bound for MPI_TAG_UB: what any MPI allows
MIN_TAG_UB = 32767


def tag_ub(comm: MPI.Intracomm) -> int:
    """The largest message tag on ``comm`` (MPI_TAG_UB), the same on every rank.

    Open MPI and Intel MPI attach the predefined attributes to ``MPI.COMM_WORLD`` only: on a
    split communicator or a duplicate ``Get_attr(TAG_UB)`` is None there (MPICH copies it). Then
    COMM_WORLD's value holds, else the standard's minimum.
    """
    from mpi4py import MPI

    for c in (comm, MPI.COMM_WORLD):
        value = c.Get_attr(MPI.TAG_UB)
        if value is not None:
            return int(value)
    return MIN_TAG_UB


def out_problem(plan: Plan, buf: Buffer) -> str | None:
    """Why ``buf`` cannot be a host ``out=`` of ``plan`` (any strides that do not self-overlap)."""
    if buf.memory != "cpu":
        return f"out= must be in host memory like the operand, got memory {buf.memory!r}"
    if buf.itemsize != plan.itemsize:
        return f"out= has {buf.itemsize}-byte elements, expected {plan.itemsize}"
    if buf.shape != plan.out_shape:
        return f"out= has shape {buf.shape}, expected {plan.out_shape} (the output box {plan.out_box})"
    if buf.readonly:
        return "out= is read-only"
    if self_overlapping(buf.shape, buf.strides):
        return f"out= has strides {buf.strides} (elements) that make elements overlap in memory"
    if buf.size and not buf.ptr:
        return "out= has a NULL address"
    return None


class HostExecutable(BindingRequests):
    """A plan bound to MPI: see the module docstring. Made by :func:`lower`.

    A :class:`~..plan.FusedPlan` of several fields moves them in one exchange (one round, one
    agreement): per peer one packed message carries every field's small part, a large part goes
    as its own message in its own mode (:func:`.messages.messages`; a pair's further messages go
    over ``second``, the context's second communicator, with exact tags: no ANY_TAG receive of a
    first message can match them); operands and outputs are bound by field index.
    """

    backend = "host"
    plan: Plan | FusedPlan
    method: str
    comm: MPI.Intracomm
    result: Buffer
    results: tuple[Buffer, ...]

    def __init__(
        self, plan: Plan | FusedPlan, comm: MPI.Intracomm, method: str, tag: int, logger: Logger | None,
        second: MPI.Intracomm | None = None, data_tags: tuple[int, ...] = (), results: Sequence[Buffer] | None = None,
        agreed: bool = False,
    ) -> None:
        from mpi4py import MPI

        self._MPI = MPI
        self.plan = plan
        fused = plan if isinstance(plan, FusedPlan) else fuse([plan])
        self._fields = fields = fused.fields
        plan = fields[0]  # what every field shares: ranks, boxes, peers
        self.nfields: int = len(fields)
        nf = self.nfields
        self.method = method
        self.comm = comm  # the context's communicator (not owned)
        self._logger = logger
        self._itemsizes = isz = fused.itemsizes
        span = max(1, (tag_ub(comm) + 1) // 2)  # executable k: tags 2k (failed), 2k + 1 (well)
        self._status_base = 2 * (tag % span)
        self._ok_tag = self._status_base + WELL  # a well rank's status, and the tag of its data
        self._second = second  # the communicator of a pair's messages 1, 2, ... (several fields; not owned)
        self._data_tags = [2 * (t % span) for t in data_tags]  # and their tags
        self._complete = method != "alltoallw" and 1 < plan.nranks <= COMPLETE_MAX
        self._single = plan.nranks == 1
        self._p2p = method != "alltoallw" and not self._single  # execute's usual path
        self._sends = [m for i in range(len(plan.sends)) for m in messages([p.sends[i] for p in fields], True, method, isz)]
        for m in self._sends:
            m.tag = self._tag(m)
        self._send_stage_bytes = 0
        self._staged_send_reqs: list = [None] * len(self._sends)
        packed: dict = {}  # pack copies -> slot: the same elements to several peers are packed once
        for m in self._sends:
            if m.mode == "staged":
                if m.key in packed:
                    m.slot, m.shared = packed[m.key], True
                    continue
                m.slot = packed[m.key] = self._send_stage_bytes
                self._send_stage_bytes += align(m.nbytes)
            else:
                self._commit_parts(m)
        # the engine-owned results (one per field), dense in plan.out_order; given: someone else's (push's)
        if results is None:
            self._result_bytes = [empty_bytes(p.out_elements * p.itemsize) for p in fields]
            results = [Buffer(b.ctypes.data, p.out_shape, p.out_strides, p.itemsize, "cpu", owner=b)
                       for b, p in zip(self._result_bytes, fields)]
        self.results = tuple(results)
        self.result = self.results[0]
        # receive layouts per output strides (one tuple per field): {strides: (plans, [msgs], recv staging bytes)}
        self._layouts: dict = {}
        self._send_stage = None
        self._recv_stage: dict = {}  # strides -> staging bytes
        self._in_ptrs = [0] * nf  # the bound operands: addresses and the objects keeping them alive
        self._in_owners: list = [None] * nf
        self._bound = False
        self._outs: list[Buffer] = list(self.results)
        self._out_key = (tuple(b.ptr for b in self.results), tuple(b.strides for b in self.results))
        self._result_strides = self._out_key[1]
        self._sides_in: OrderedDict = OrderedDict()  # operand addresses -> Side
        self._sides_out: OrderedDict = OrderedDict()  # (addresses, strides) -> Side
        self._combos: OrderedDict = OrderedDict()  # (in addresses, out key) -> what execute walks
        # agreed: another executable (push) agrees for this one and calls prepare() and exchange() itself
        self._status = (StatusRound(comm, plan.rank, plan.nranks, self._status_base, 2)
                        if self._complete and not agreed else None)
        self._ready = False  # the fields below match the current binding
        self._first: list = []  # receives + in-place sends, started together
        self._packs: list = []  # (dst_view, src_view, [requests]) of staged sends
        self._unpacks: list = []  # (dst_view, src_view) of staged receives
        self._reqs: list = []  # every p2p request, receives first, for Waitall
        self._local: list = []  # (dst_view, src_view) per box of the local copy
        self._a2a = None
        self._a2a_key = None
        self._flag = np.zeros(2, dtype=np.int64)
        self._flag_any = np.zeros(2, dtype=np.int64)
        self._replays: OrderedDict = OrderedDict()  # binding -> the words of replay()
        self._forget: Callable[[], None] | None = None  # what replay()'s holder drops its words with
        self._freed = False

    # -- binding ------------------------------------------------------------------------------

    def _tag(self, m: Message) -> int:
        """The tag a message is sent / received with: the pair's first message this executable's,
        the others (over the second communicator) tags of their own."""
        return self._data_tags[m.index - 1] if m.index else self._ok_tag

    def _comm(self, m: Message) -> MPI.Intracomm:
        return self._second if m.index else self.comm

    def _commit_parts(self, m: Message) -> None:
        for part in m.parts:
            if part.mode == "datatype":
                part.dtype = region_datatype(self._MPI, part.shape, part.strides, part.itemsize)

    def bind_input(self, buf: Buffer, field: int = 0) -> None:
        """Read field ``field``'s operand from ``buf`` from the next execute on."""
        if buf.itemsize != self._itemsizes[field]:
            raise InvalidValueError(f"operand itemsize {buf.itemsize} != planned {self._itemsizes[field]}")
        self.rebind_input(buf.ptr, buf.owner, field)

    def rebind_input(self, ptr: int, owner: object = None, field: int = 0) -> None:
        """A new operand address (same layout), nothing checked: reset_operand_unchecked."""
        self._in_owners[field] = owner
        if ptr != self._in_ptrs[field] or not self._bound:
            self._in_ptrs[field] = ptr
            self._bound = True
            self._ready = False

    def rebind_inputs(self, ptrs: Sequence[int], owners: Sequence[object]) -> None:
        """Every field's operand at once (the fields' order)."""
        for f, (ptr, owner) in enumerate(zip(ptrs, owners)):
            self.rebind_input(ptr, owner, f)

    def bind_output(self, buf: Buffer | None, field: int = 0) -> None:
        """Write field ``field`` into ``buf`` (any strides; None: the engine-owned result) from the next execute on."""
        buf = self.results[field] if buf is None else buf
        self._outs[field] = buf
        if self.nfields == 1:  # the double-buffered out= of a time loop: no generator per call
            key = ((buf.ptr,), (buf.strides,))
        else:
            key = (tuple(b.ptr for b in self._outs), tuple(b.strides for b in self._outs))
        if key != self._out_key:
            self._out_key = key
            self._ready = False

    def out_problem(self, buf: Buffer, field: int = 0) -> str | None:
        problem = out_problem(self._fields[field], buf)
        if problem is None and self.method == "alltoallw" and any(
                s <= 0 for n, s in zip(buf.shape, buf.strides) if n > 1):
            return f"out= has strides {buf.strides}; host method 'alltoallw' needs positive strides"
        return problem

    def out_signature(self, buf: Buffer | None, field: int = 0) -> int | None:
        return None  # host outputs are private to each rank: nothing to agree on

    def release_input(self) -> None:
        """Drop every reference to the operands; bind_input() again before execute()."""
        self._in_owners = [None] * self.nfields
        self._in_ptrs = [0] * self.nfields
        self._bound = False
        self._forget_replays()  # before the requests their words name go
        for side in self._sides_in.values():
            side.free()
        self._sides_in.clear()
        self._combos.clear()
        self._local = []
        self._packs = []
        self._ready = False

    # -- the hot path -----------------------------------------------------------------------

    def execute(self, stream: int = 0, sync: bool = True, release_workspace: bool = False,
                problem: collective.Problem | None = None) -> None:
        """Collective, blocking: agree on the call (see the module docstring), then exchange."""
        if problem is None and not self._bound:
            problem = ("InvalidStateError", "no operand is bound (it was released): call reset_operand() first")
        if problem is None:
            problem = self.prepare()
        try:
            if self._p2p:
                self._agree(problem)
                self.exchange()
            elif self.method == "alltoallw":
                self._execute_alltoallw(problem)
            else:  # one rank
                if problem is not None:
                    raise collective.exception(problem, self._fields[0].rank)
                self.exchange()
        except self._MPI.Exception as e:
            raise CommunicationError(f"redist host backend ({self.method}): MPI error in execute: {e}") from e
        if release_workspace:
            self.release_workspace()

    @property
    def ready(self) -> bool:
        """True when :meth:`exchange` can run for the current binding without :meth:`prepare`."""
        return self._ready

    def prepare(self) -> collective.Problem | None:
        """Build what :meth:`exchange` walks for the current binding (local); the failure, if any."""
        if self._ready:
            return None
        try:
            self._prepare()
        except Exception as e:  # noqa: BLE001 -- becomes this rank's problem, agreed by the caller
            return collective.problem(e)
        return None

    def exchange(self) -> None:
        """The data of one execute, once every rank has agreed and is :meth:`prepare`-d (collective
        over the point-to-point methods; push runs it after its own agreement)."""
        MPI, copyto = self._MPI, np.copyto
        if self._first:
            MPI.Prequest.Startall(self._first)
        for d, s, reqs in self._packs:
            copyto(d, s, casting="no")
            MPI.Prequest.Startall(reqs)
        for d, s in self._local:
            copyto(d, s, casting="no")
        if self._reqs:
            MPI.Request.Waitall(self._reqs)
        for d, s in self._unpacks:
            copyto(d, s, casting="no")

    def _agree(self, problem) -> None:
        """Collective, before any data moves: raise on every rank if any rank has a problem."""
        st = self._status
        if st is None:
            self._agree_allreduce(problem)
        elif problem is not None:
            st.fail(problem)
        else:
            st.start(WELL)
            if FAILED in st.heard():
                st.raise_peers(WELL)
            self._MPI.Request.Waitall(st.sends[WELL])

    def _agree_allreduce(self, problem) -> None:
        """The agreement of large jobs: one small Allreduce; raise everywhere if any rank failed."""
        self._flag[0] = 0 if problem is None else 1
        self.comm.Allreduce(self._flag, self._flag_any, self._MPI.MAX)
        if self._flag_any[0]:
            collective.agree(self.comm, problem)

    def _execute_alltoallw(self, problem) -> None:
        key = (tuple(self._in_ptrs), self._out_key)
        self._flag[0] = 0 if problem is None else 1
        self._flag[1] = int(key != self._a2a_key)
        self.comm.Allreduce(self._flag, self._flag_any, self._MPI.MAX)
        if self._flag_any[0]:
            collective.agree(self.comm, problem)
        if self._flag_any[1] or self._a2a is None:
            self._make_alltoallw()
        self._a2a.Start()
        for d, src in self._local:
            np.copyto(d, src, casting="no")
        self._a2a.Wait()

    def graph(self, stream: int = 0) -> int:
        raise NotSupportedError("graph() is only available for CUDA execution (this is the MPI host backend)")

    def update_captured(self, graph: int, graph_exec: int) -> int:
        raise NotSupportedError("update_captured() is only available for CUDA execution: host exchanges run on MPI "
                                "and are never recorded into a CUDA graph")

    def release_captured(self) -> None:
        """Nothing to release: host exchanges are never recorded into a CUDA graph."""

    def replay(self, forget: Callable[[], None]) -> np.ndarray | None:
        """The next execute() of this binding, as words for the C ABI's compiled replay
        (engine/host/replay.py, cabi/redist_replay.c): the status round of a well call (none on one
        rank), then the exchange as :meth:`exchange` runs it, each pack's staged sends started right
        after it. A peer saying anything else hands the call back to :meth:`resume`. None for
        "alltoallw", the Allreduce agreement of more than COMPLETE_MAX ranks, the messages push
        runs (it agrees for them), or where this binding is not built. ``forget()`` is called when
        the words stop being valid: when a request they name is freed (a side leaving its cache,
        :meth:`release_input`, :meth:`release_workspace`, :meth:`free`). No peer reads this rank's
        operand addresses: the C side may rebind them without Python. Local."""
        st = self._status
        if (self._freed or not self._bound or not self._ready or self.method == "alltoallw"
                or st is None and not self._single):
            return None
        key = (tuple(self._in_ptrs), self._out_key)
        hit = self._replays.get(key)
        if hit is None:
            first, nothers, base, sends = (([], 0, 0, []) if st is None else
                                           (st.first[WELL], len(st.recvs), st.base, st.sends[WELL]))
            packs, staged, starts = [], [], []
            for d, s, reqs in self._packs:
                packs.append((d, s))
                staged += reqs
                starts.append(len(reqs))
            hit = self._replays[key] = replay_words(
                self._MPI, first, nothers, base, WELL, self._first, staged, self._reqs + sends,
                (packs, self._local, self._unpacks), self._in_ptrs, True, starts=starts)
            while len(self._replays) > CACHE_SIZE:
                self._replays.popitem(last=False)
        self._replays.move_to_end(key)
        self._forget = forget
        return hit

    def resume(self, code: int, heard: Sequence[int]) -> None:
        """Collective: the rest of a replayed call (bound again as it was made) whose status round
        heard a peer say something else than ``code`` (``heard``: the peers' codes): a failed peer
        raises here on every rank, as :meth:`execute` does."""
        problem = self.prepare()  # built when the replay was made: it cannot fail now
        if problem is not None:
            raise InternalError(f"redist host backend ({self.method}): a replayed call cannot go on: {problem[1]}")
        st = self._status
        try:
            if st is not None and FAILED in heard:
                st.raise_peers(code)
            if st is not None:
                self._MPI.Request.Waitall(st.sends[code])
            self.exchange()
        except self._MPI.Exception as e:
            raise CommunicationError(f"redist host backend ({self.method}): MPI error in execute: {e}") from e

    def _forget_replays(self) -> None:
        """The words replay() gave are no longer valid: their holder drops them."""
        self._replays.clear()
        if self._forget is not None:
            self._forget()
            self._forget = None

    # -- workspace and lifetime ------------------------------------------------------------

    def release_workspace(self) -> None:
        """Drop the staging buffers (and what is built on them); re-made by the next execute."""
        if self._send_stage is None and not self._recv_stage:
            return
        self._clear_sides()
        for r in self._staged_send_reqs:
            if r is not None:
                r.Free()
        self._staged_send_reqs = [None] * len(self._sends)
        self._send_stage = None
        self._recv_stage = {}

    def _clear_sides(self) -> None:
        self._forget_replays()
        for cache in (self._sides_in, self._sides_out):
            for side in cache.values():
                side.free()
            cache.clear()
        self._combos.clear()
        self._first, self._packs, self._unpacks, self._reqs = [], [], [], []
        self._local = []
        self._ready = False

    def detach_result(self) -> None:
        """The result's memory is a numpy buffer: whoever holds ``result.owner`` keeps it."""

    def _free_local(self) -> None:
        MPI = self._MPI
        if MPI.Is_finalized():
            return
        self._clear_sides()
        for r in self._staged_send_reqs:
            if r is not None:
                r.Free()
        self._staged_send_reqs = [None] * len(self._sends)
        if self._status is not None:
            self._status.free()
            self._status = None
        for m in self._sends + [m for _, msgs, _ in self._layouts.values() for m in msgs]:
            for part in m.parts:
                if part.dtype is not None:
                    part.dtype.Free()
                    part.dtype = None
        self._layouts = {}
        if self._a2a is not None:
            self._a2a.Free()
            self._a2a = None
        self._send_stage = None
        self._recv_stage = {}

    def free(self) -> None:
        """Free every request and datatype (local, idempotent); the communicator is the context's."""
        if self._freed:
            return
        self._freed = True
        self._forget_replays()  # before the requests their words name go
        self._free_local()
        self._in_owners = [None] * self.nfields
        self._bound = False
        self._outs = list(self.results)

    def __del__(self) -> None:
        try:
            if not getattr(self, "_freed", True):
                self.free()
        except Exception:  # noqa: BLE001, S110 -- never raise from a finalizer
            pass

    # -- reporting --------------------------------------------------------------------------

    @property
    def staging_bytes(self) -> tuple[int, int]:
        """(send, receive) bytes of host staging for the engine-owned result (0, 0 for "datatype")."""
        return self._send_stage_bytes, self._layout(self._result_strides)[2]

    def describe(self) -> str:
        p = self._fields[0]
        send_stage, recv_stage = self.staging_bytes
        _, recvs, _ = self._layout(self._out_key[1])
        agreement = ("zero-byte status messages between every pair, before any data" if self._complete
                     else "one Allreduce per execute, before any data" if p.nranks > 1 else "none (one rank)")
        lines = [
            f"redist host executable rank {p.rank}/{p.nranks} method={self.method} ({_METHOD_TEXT[self.method]})",
            (f"  plan key={self.plan.key} itemsize={'/'.join(map(str, self._itemsizes))} out_order={p.out_order} "
             f"{'' if self.nfields == 1 else f'{self.nfields} fields in one exchange, '}"
             f"send={sum(m.nbytes for m in self._sends)} B to {len({m.peer for m in self._sends})} peer(s), "
             f"recv={sum(m.nbytes for m in recvs)} B from {len({m.peer for m in recvs})} peer(s); agreement: {agreement}"),
            (f"  staging: send {send_stage} B, recv {recv_stage} B "
             f"({'allocated' if self._send_stage is not None or self._recv_stage else 'not allocated'})"),
        ]
        if p.local is not None:
            c = p.local.direct
            boxes = f" in {len(p.local.pieces)} boxes" if p.local.more else ""
            fields = "" if self.nfields == 1 else f" for {self.nfields} fields"
            nbytes = sum(q.local.nbytes for q in self._fields)
            lines.append(f"  local {p.rank}->{p.rank}: {nbytes} B numpy copy{boxes}{fields}, {c.runs} run(s) "
                         f"of {c.run_length} elem")
        how = {
            "direct": "direct ({} in place, one contiguous run)",
            "datatype": "MPI derived datatype ({} {} run(s) of {} elem, no pack)",
            "staged": "{} via staging@{} ({} run(s) of {} elem)",
        }
        for kind, arrow, msgs, side in (("send", "->", self._sends, "from operand"), ("recv", "<-", recvs, "into output")):
            for m in msgs:
                runs, run = m.parts[0].runs
                if m.mode == "direct":
                    text = how["direct"].format(side)
                elif m.mode == "datatype":
                    text = how["datatype"].format(side, runs, run)
                elif m.shared:
                    text = f"from staging@{m.slot}, packed once for an earlier peer (the same elements)"
                else:
                    text = how["staged"].format("pack" if kind == "send" else "unpack", m.slot, runs, run)
                which = "" if self.nfields == 1 else f"field(s) {[q.field for q in m.parts]}: "
                lines.append(f"  {kind} {arrow}{m.peer}: {which}{m.nbytes} B {text}")
        if p.local is None and not self._sends and not recvs:
            lines.append("  (nothing to move)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        p = self._fields[0]
        return f"<HostExecutable rank={p.rank}/{p.nranks} method={self.method} fields={self.nfields}>"


