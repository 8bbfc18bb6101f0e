# SPDX-License-Identifier: Apache-2.0
"""Host push: on one node, each rank stores its part straight into its peers' results.

The engine-owned result of every rank lives in one MPI shared-memory window
(``MPI_Win_allocate_shared``), so a sender copies (numpy, one pass, no MPI datatype, no staging)
from its operand into the destination's result, like the GPU push kernel does over NVLink. One
copy per element instead of MPI's two for strided regions, and no rendezvous.

One execute, on every rank:

1. start the *status* messages: a zero-byte message to every other rank (tag: well or failed)
   and receives from every other rank (``ANY_TAG``); copy the local part into the own result;
2. wait for every status: now every rank is in this execute (so it is done reading its previous
   result: the status is also the credit) and every rank knows whether any rank failed. If one
   did, every rank raises the same error and nobody has written into another rank's memory;
3. store into each destination's result, ``Win_sync``, send it a zero-byte *arrival*;
4. wait for the arrivals of every source, ``Win_sync``: the result is complete.

Jobs of more than :data:`~.executable.COMPLETE_MAX` ranks replace the status messages by one
small Allreduce (the same agreement, the same credit). An ``out=`` is filled by one local copy
from the result after step 4 (peers only ever write results). Windows are collective objects:
a window is freed at the context's next collective point once every rank has released it (its
result array included: a result the user still holds stays valid).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import collective
from .. import geometry as geo
from ..buffer import Buffer
from ..errors import CommunicationError, InvalidValueError, NotSupportedError
from ..plan import Copy, FusedPlan, Plan, fuse, simplify
from ..strided import HostBuffer
from ._datatypes import copy_views
from .executable import CACHE_SIZE, COMPLETE_MAX, out_problem, tag_ub

if TYPE_CHECKING:
    from mpi4py import MPI

    from ..backend import Context, Logger

__all__ = ["PushExecutable"]


class PushExecutable:
    """A plan on one node: peers store into each other's results (see the module docstring).

    Several fields (a :class:`~..plan.FusedPlan`) share the window (each field's result at its
    own offset) and one round of status and arrival messages.
    """

    backend = "host"
    method = "push"
    plan: Plan | FusedPlan
    comm: MPI.Intracomm
    result: Buffer
    results: tuple[Buffer, ...]

    def __init__(self, plan: Plan | FusedPlan, ctx: Context, tag: int, logger: Logger | None) -> None:
        from mpi4py import MPI

        self._MPI = MPI
        self.plan = plan
        self._fields = fields = (plan if isinstance(plan, FusedPlan) else fuse([plan])).fields
        self.nfields: int = len(fields)
        plan = fields[0]
        self.comm = ctx.comm
        self._ctx = ctx
        self._serial = tag
        self._logger = logger
        P, me = plan.nranks, plan.rank
        span = max(1, (tag_ub(self.comm) + 1) // 4)
        base_tag = 4 * (tag % span)
        self._ok_tag, self._err_tag, self._arrival_tag = base_tag, base_tag + 1, base_tag + 2
        # every field's result in the window, each at its own offset (a rank's offsets follow its
        # output box, which every rank knows)
        self._offsets = {r: _field_offsets(fields, r) for r in range(P)}
        nbytes = max(self._offsets[me][-1], 1)
        self._win = MPI.Win.Allocate_shared(nbytes, 1, comm=self.comm)
        self._win.Lock_all()
        mem, _ = self._win.Shared_query(me)
        self._base = np.frombuffer(mem, np.uint8)
        self._peer_ptr = {}
        for t in plan.sends:
            m, _ = self._win.Shared_query(t.dst)
            self._peer_ptr[t.dst] = MPI.Get_address(m)
        # the window lives until every rank has released it and its result (see _release)
        ctx.retire_later(self._base, tag, self._win)
        start = self._base.ctypes.data
        self.results = tuple(Buffer(start + off, p.out_shape, p.out_strides, p.itemsize, "cpu", owner=self._base)
                             for p, off in zip(fields, self._offsets[me]))
        self.result = self.results[0]
        self._complete = P <= COMPLETE_MAX
        self._check = None if self._complete else collective.CallCheck(self.comm)
        z = self._zero = np.zeros(1, np.uint8)
        zero = [z, 0, MPI.BYTE]
        others = [r for r in range(P) if r != me]
        self._status_recvs = [self.comm.Recv_init(zero, r, MPI.ANY_TAG) for r in others] if self._complete else []
        self._status_sends = [self.comm.Send_init(zero, r, self._ok_tag) for r in others] if self._complete else []
        self._status_first = self._status_recvs + self._status_sends
        self._statuses = [MPI.Status() for _ in self._status_recvs]
        self._arrival_recvs = [self.comm.Recv_init(zero, t.src, self._arrival_tag) for t in plan.recvs]
        self._arrival_sends = [self.comm.Send_init(zero, t.dst, self._arrival_tag) for t in plan.sends]
        self._finish = self._arrival_recvs + self._arrival_sends + self._status_sends
        self._others = others
        self._in_ptrs = [0] * self.nfields
        self._in_owners: list = [None] * self.nfields
        self._bound = False
        self._copies: OrderedDict = OrderedDict()  # operand addresses -> (local pairs, [peer pairs])
        self._pairs = None
        self._out: list = [None] * self.nfields  # per field: (dst_view, src_view) result -> out=, or None
        self._outs: OrderedDict = OrderedDict()  # (field, address, strides) -> that pair
        self._freed = False

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
            self._pairs = None

    def rebind_inputs(self, ptrs: Sequence[int], owners: Sequence[object]) -> None:
        for f, (ptr, owner) in enumerate(zip(ptrs, owners)):
            self.rebind_input(ptr, owner, f)

    def bind_output(self, buf: Buffer | None, field: int = 0) -> None:
        result, plan = self.results[field], self._fields[field]
        if buf is None or buf.ptr == result.ptr and buf.strides == result.strides:
            self._out[field] = None
            return
        key = (field, buf.ptr, buf.strides)
        pair = self._outs.get(key)
        if pair is None:
            shape, (src, dst) = simplify(plan.out_shape, result.strides, buf.strides)
            whole = Copy(shape, 0, src, 0, dst)  # result -> out=, runs merged where both allow
            pair = self._outs[key] = copy_views(whole, HostBuffer(result.ptr, plan.itemsize),
                                                HostBuffer(buf.ptr, plan.itemsize))
            while len(self._outs) > CACHE_SIZE * self.nfields:
                self._outs.popitem(last=False)
        self._out[field] = pair if plan.out_elements else None

    def out_problem(self, buf: Buffer, field: int = 0) -> str | None:
        return out_problem(self._fields[field], buf)

    def out_signature(self, buf: Buffer | None, field: int = 0) -> None:
        return None

    def release_input(self) -> None:
        self._in_owners = [None] * self.nfields
        self._in_ptrs = [0] * self.nfields
        self._bound = False
        self._copies.clear()
        self._pairs = None

    def _views(self):
        """(local pairs, peer pairs) for the bound operand addresses, cached per addresses."""
        key = tuple(self._in_ptrs)
        hit = self._copies.get(key)
        if hit is None:
            local, peers = [], []
            for f, (p, ptr, result) in enumerate(zip(self._fields, key, self.results)):
                src, isz = HostBuffer(ptr, p.itemsize), p.itemsize
                if p.local:
                    local += [copy_views(piece.direct, src, HostBuffer(result.ptr, isz)) for piece in p.local.pieces]
                peers += [copy_views(piece.direct, src, HostBuffer(self._peer_ptr[t.dst] + self._offsets[t.dst][f], isz))
                          for t in p.sends for piece in t.pieces]
            hit = self._copies[key] = (local, peers)
            while len(self._copies) > CACHE_SIZE:
                self._copies.popitem(last=False)
        self._copies.move_to_end(key)
        return hit

    # -- the hot path -----------------------------------------------------------------------

    def execute(self, stream: int = 0, sync: bool = True, release_workspace: bool = False,
                problem: collective.Problem | None = None) -> None:
        """Collective, blocking: agree (status messages: also the credit), store, arrive."""
        MPI, copyto = self._MPI, np.copyto
        if problem is None:
            if self._freed:
                problem = ("InvalidStateError", "this host executable was freed")
            elif not self._bound:
                problem = ("InvalidStateError", "no operand is bound (it was released): call reset_operand() first")
        try:
            if problem is not None:
                self._fail(problem)
            pairs = self._pairs
            if pairs is None:
                pairs = self._pairs = self._views()
            local, peers = pairs
            if self._complete:
                MPI.Prequest.Startall(self._status_first)
                for d, s in local:
                    copyto(d, s, casting="no")
                MPI.Request.Waitall(self._status_recvs, self._statuses)
                ok = self._ok_tag
                for st in self._statuses:
                    if st.Get_tag() != ok:
                        MPI.Request.Waitall(self._status_sends)
                        collective.agree(self.comm, None)  # a peer failed: raise its problem here too
            else:
                self._check.check(None)
                for d, s in local:
                    copyto(d, s, casting="no")
            if self._arrival_recvs:
                MPI.Prequest.Startall(self._arrival_recvs)
            if peers:
                for d, s in peers:
                    copyto(d, s, casting="no")
                self._win.Sync()
                MPI.Prequest.Startall(self._arrival_sends)
            MPI.Request.Waitall(self._finish)
            self._win.Sync()
            for pair in self._out:
                if pair is not None:
                    copyto(pair[0], pair[1], casting="no")
        except MPI.Exception as e:
            raise CommunicationError(f"redist host backend (push): MPI error in execute: {e}") from e

    def _fail(self, problem) -> None:
        """This rank cannot take part: every peer learns it from the status messages; raise."""
        MPI = self._MPI
        if self._complete:
            z = self._zero
            reqs = [self.comm.Irecv([z, 0, MPI.BYTE], r, MPI.ANY_TAG) for r in self._others]
            reqs += [self.comm.Isend([z, 0, MPI.BYTE], r, self._err_tag) for r in self._others]
            MPI.Request.Waitall(reqs)
            collective.agree(self.comm, problem)
        else:
            self._check.check(problem)

    def graph(self, stream: int = 0) -> int:
        raise NotSupportedError("graph() is only available for CUDA execution (this is the MPI host backend)")

    def update_captured(self, graph: int, graph_exec: int) -> int:
        raise NotSupportedError("update_captured() is only available for CUDA execution: host exchanges run on MPI "
                                "and are never recorded into a CUDA graph")

    def release_captured(self) -> None:
        """Nothing to release: host exchanges are never recorded into a CUDA graph."""

    # -- lifetime -----------------------------------------------------------------------------

    def release_workspace(self) -> None:
        """Nothing to release: push has no staging."""

    def detach_result(self) -> None:
        """The result (a view of the shared window) stays valid while the caller holds it."""

    def free(self) -> None:
        """Free the requests (local, idempotent); the window goes once its result is dropped too."""
        if self._freed:
            return
        self._freed = True
        if not self._MPI.Is_finalized():
            for r in self._status_first + self._arrival_recvs + self._arrival_sends:
                r.Free()
            if self._check is not None:
                self._check.free()
        self._status_first = self._status_recvs = self._status_sends = []
        self._arrival_recvs = self._arrival_sends = self._finish = []
        self._copies.clear()
        self._outs.clear()
        self._pairs = None
        self._out = [None] * self.nfields
        self._in_owners = [None] * self.nfields
        self._base = None
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
            f"other's results in an MPI shared window; agreement and credit: {agreement}; arrival messages)",
            f"  plan key={self.plan.key} itemsize={'/'.join(str(q.itemsize) for q in self._fields)} "
            f"out_order={p.out_order}{'' if self.nfields == 1 else f', {self.nfields} fields in one round'} "
            f"stores {sum(t.nbytes for q in self._fields for t in q.sends)} B into {len(p.sends)} peer(s), "
            f"receives {sum(t.nbytes for q in self._fields for t in q.recvs)} B from {len(p.recvs)} peer(s)",
        ]
        if p.local is not None:
            c = p.local.direct
            lines.append(f"  local {p.rank}->{p.rank}: {p.local.nbytes} B, {c.runs} run(s) of {c.run_length} elem")
        for t in p.sends:
            c = t.direct
            lines.append(f"  store ->{t.dst}: {t.nbytes} B, {c.runs} run(s) of {c.run_length} elem")
        if p.local is None and not p.sends and not p.recvs:
            lines.append("  (nothing to move)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        p = self._fields[0]
        return f"<PushExecutable rank={p.rank}/{p.nranks} fields={self.nfields}>"


SHM_DIR = "/dev/shm"
SHM_MARGIN = 64 << 20  # what MPI and others keep in /dev/shm beside the windows


def _field_offsets(fields, rank: int) -> list[int]:
    """Where each field's result starts in rank ``rank``'s window (64-byte aligned), then its size."""
    offsets, off = [], 0
    n = geo.volume(fields[0].out_boxes[rank])
    for p in fields:
        offsets.append(off)
        off += -(-(n * p.itemsize) // 64) * 64
    return offsets + [off]


def push_problem(comm: MPI.Intracomm, plan: Plan | FusedPlan) -> str | None:
    """Collective: why "push" cannot serve ``plan`` on ``comm`` (None when it can).

    Every rank must share memory with every other (one node), and the node's shared-memory
    file system must hold every rank's result (a window larger than /dev/shm would crash the
    first store with SIGBUS). Decided from data gathered from every rank.
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
