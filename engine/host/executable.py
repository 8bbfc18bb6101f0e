# SPDX-License-Identifier: Apache-2.0
"""The MPI host backend: a :class:`~redist.engine.plan.Plan` lowered to persistent MPI requests.

``lower(plan, comm, method=...)`` (collective) duplicates ``comm`` (so tags never collide with
other executables or with the caller's traffic), and turns every remote transfer into a
*message* seen from this rank: its peer, its bytes, and the strided region it reads from the
operand (a send, from ``transfer.pack``) or writes into the result (a receive, from
``transfer.unpack``). Both regions walk the elements in the same order, the one of the dense
staging slot, so sender and receiver agree on the byte stream without knowing each other's
strides. A region that is one contiguous run is always sent or received in place. The others
depend on the method:

``"hybrid"`` (what ``"auto"`` picks)
    persistent ``Send_init``/``Recv_init``; each strided message goes as an MPI derived datatype
    when that measured faster (big messages of few long runs, see :func:`_datatype_pays`),
    otherwise through numpy pack/unpack and engine-owned staging, as in ``"pack"``.
``"datatype"``
    persistent ``Send_init``/``Recv_init`` whose non-contiguous regions are all MPI derived
    datatypes (nested ``hvector`` over bytes), so MPI packs straight from the operand into its
    transport and unpacks straight into the result: no user-level pack, no staging.
``"pack"``
    persistent ``Send_init``/``Recv_init`` on engine-owned staging for the non-contiguous
    regions: numpy packs them (one memcpy per contiguous run) into a send slot, and unpacks
    receive slots after the wait.
``"alltoallw"``
    one persistent ``Alltoallw_init`` (MPI-4 persistent collective) over ``MPI.BOTTOM`` with the
    same derived datatypes at absolute addresses. A persistent collective is tied to its buffers
    and can only be re-created collectively, so every execute first agrees (one tiny
    ``Allreduce``) on whether any rank rebound a buffer, and if so all ranks re-create it.

``execute()`` = start receives and in-place sends → pack + start staged sends → local copy
(numpy, fused runs) → wait → unpack. Every numpy view, request and datatype is made when a buffer
is bound or staging is (re)created, never per call.

Measured on 2 ranks (perf/RESULTS.md): a datatype send of long runs beats pack + send (MPI packs
straight into its shared-memory transport, saving one full copy), but MPICH's datatype engine is
slow on short runs (element-strided or Z-slab regions: up to 7x slower than numpy), hence
``"hybrid"``. ``"alltoallw"`` is as fast as ``"datatype"`` but makes rebinding collective, so it is
never picked automatically.
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np

from ..errors import CommunicationError, InvalidStateError, InvalidValueError, NotSupportedError
from ..plan import STAGING_ALIGN, Plan, Transfer
from ..strided import HostBuffer
from ._datatypes import copy_views, empty_bytes, is_contiguous, region_datatype, span_bytes

__all__ = ["AUTO_METHOD", "METHODS", "HostExecutable", "available_methods", "lower"]

METHODS = ("hybrid", "datatype", "pack", "alltoallw")
AUTO_METHOD = "hybrid"
_METHOD_TEXT = {
    "hybrid": "persistent Send_init/Recv_init; per strided message an MPI derived datatype or a numpy "
              "pack/unpack through engine-owned staging, whichever measured faster for its size and runs",
    "datatype": "persistent Send_init/Recv_init, MPI derived datatypes (no user-level pack)",
    "pack": "persistent Send_init/Recv_init, numpy pack/unpack through engine-owned staging",
    "alltoallw": "persistent Alltoallw_init over MPI.BOTTOM with MPI derived datatypes",
}
_TAG = 0x5D  # every executable has its own communicator, so one tag is enough


# "hybrid" sends a strided region as an MPI datatype only where that measured faster than numpy
# pack + contiguous send (perf/RESULTS.md, MPICH 5.0 shared memory, 2 ranks): big messages made of
# few long runs. MPICH's datatype engine pays per run on the sending side (a send of 8 MiB in 4 KiB
# runs is 1.7x slower than pack + send, in 64 KiB runs 1.4x faster); receiving into runs of 1 KiB
# or more beats unpacking; below ~64 KiB the datatype set-up costs more than the copy it saves.
HYBRID_MIN_BYTES = 64 << 10
HYBRID_SEND_MIN_RUN_BYTES = 4 << 10
HYBRID_SEND_MAX_RUNS = 512
HYBRID_RECV_MIN_RUN_BYTES = 1 << 10


def _datatype_pays(send: bool, nbytes: int, runs: int, run_bytes: int) -> bool:
    """Whether "hybrid" moves a strided message with an MPI datatype (else numpy pack/unpack)."""
    if nbytes < HYBRID_MIN_BYTES:
        return False
    if send:
        return run_bytes >= HYBRID_SEND_MIN_RUN_BYTES and runs <= HYBRID_SEND_MAX_RUNS
    return run_bytes >= HYBRID_RECV_MIN_RUN_BYTES


def _mpi():
    from mpi4py import MPI

    return MPI


def _align(n: int) -> int:
    return -(-n // STAGING_ALIGN) * STAGING_ALIGN


class _Msg:
    """One remote transfer seen from this rank (a send or a receive)."""

    __slots__ = (
        "dtype",
        "mode",
        "nbytes",
        "offset",
        "pair",
        "peer",
        "req",
        "shape",
        "slot",
        "span",
        "strides",
        "transfer",
    )

    def __init__(self, t: Transfer, send: bool, method: str, itemsize: int):
        c = t.pack if send else t.unpack
        self.transfer = t
        self.peer = t.dst if send else t.src
        self.nbytes = t.nbytes
        if send:
            self.offset, self.shape, self.strides = c.src_offset, c.shape, c.src_strides
        else:
            self.offset, self.shape, self.strides = c.dst_offset, c.shape, c.dst_strides
        self.span = span_bytes(self.shape, self.strides, itemsize)
        if is_contiguous(self.shape, self.strides):
            self.mode = "direct"
        elif method == "pack":
            self.mode = "staged"
        elif method == "hybrid":
            runs, run = self.runs
            self.mode = "datatype" if _datatype_pays(send, self.nbytes, runs, run * itemsize) else "staged"
        else:
            self.mode = "datatype"
        self.dtype = None  # committed MPI datatype when mode == "datatype"
        self.slot = -1  # byte offset in this rank's staging when mode == "staged"
        self.req = None  # persistent request (p2p methods)
        self.pair = None  # (dst_view, src_view) of the pack / unpack copy when staged

    @property
    def runs(self) -> tuple[int, int]:
        """(number of contiguous runs, elements per run) of this rank's side of the message."""
        run = self.shape[-1] if self.strides[-1] == 1 else 1
        return math.prod(self.shape) // run, run


class HostExecutable:
    """A plan bound to MPI: see the module docstring. Made by :func:`lower`."""

    def __init__(self, plan: Plan, comm, method: str, logger: logging.Logger | None):
        MPI = _mpi()
        self._MPI = MPI
        self.plan = plan
        self.method = method
        self.comm = comm  # the executable's own duplicate
        self._logger = logger
        self._itemsize = plan.itemsize
        isz = plan.itemsize
        self._sends = [_Msg(t, True, method, isz) for t in plan.sends]
        self._recvs = [_Msg(t, False, method, isz) for t in plan.recvs]
        self._msgs = self._sends + self._recvs
        for m in self._msgs:
            if m.mode == "datatype":
                m.dtype = region_datatype(MPI, m.shape, m.strides, isz)
        # compact host staging: only the staged messages get a slot (host staging needn't be symmetric)
        self._send_stage_bytes = self._recv_stage_bytes = 0
        for m in self._sends:
            if m.mode == "staged":
                m.slot = self._send_stage_bytes
                self._send_stage_bytes += _align(m.nbytes)
        for m in self._recvs:
            if m.mode == "staged":
                m.slot = self._recv_stage_bytes
                self._recv_stage_bytes += _align(m.nbytes)
        self._needs_staging = any(m.mode == "staged" for m in self._msgs)
        self._send_stage = self._recv_stage = None
        self._in: HostBuffer | None = None
        self._out: HostBuffer | None = None
        self._in_dirty = self._out_dirty = True
        self._dirty = True  # anything at all to (re)build before the next execute
        self._local = None  # (dst_view, src_view) of the local copy
        # what execute walks (rebuilt by _prepare, never per call)
        self._first: list = []  # receives + in-place sends, started together
        self._packs: list = []  # (dst_view, src_view, request) of staged sends
        self._unpacks: list = []  # (dst_view, src_view) of staged receives
        self._reqs: list = []  # every p2p request, for Waitall
        # alltoallw
        self._a2a = None
        self._a2a_dirty = True
        self._flag = np.zeros(1, dtype=np.int32)
        self._flag_any = np.zeros(1, dtype=np.int32)
        self._freed = False

    # -- binding (cheap: the real work is deferred to the next execute) ---------------------

    def bind_input(self, buf: HostBuffer) -> None:
        """Read the operand from ``buf`` (element 0 at ``buf.ptr``) from the next execute on."""
        if buf.itemsize != self._itemsize:
            raise InvalidValueError(f"operand itemsize {buf.itemsize} != planned {self._itemsize}")
        old, self._in = self._in, buf
        if old is None or old.ptr != buf.ptr:
            self._in_dirty = self._dirty = True

    def bind_output(self, buf: HostBuffer) -> None:
        """Write the result into ``buf`` (dense in ``plan.out_order``) from the next execute on."""
        if buf.itemsize != self._itemsize:
            raise InvalidValueError(f"result itemsize {buf.itemsize} != planned {self._itemsize}")
        old, self._out = self._out, buf
        if old is None or old.ptr != buf.ptr:
            self._out_dirty = self._dirty = True

    def release_input(self) -> None:
        """Drop every reference to the operand (views, buffer); bind_input() again before execute()."""
        self._in = None
        self._local = None
        for m in self._sends:
            m.pair = None
        self._packs = []
        self._in_dirty = self._dirty = True

    # -- building -------------------------------------------------------------------------

    def _buffer(self, ptr: int, nbytes: int):
        return self._MPI.buffer.fromaddress(ptr, nbytes)

    def _message_spec(self, m: _Msg, base: HostBuffer):
        """``[buffer, count, datatype]`` of a direct or datatype message on ``base``."""
        MPI = self._MPI
        ptr = base.ptr + m.offset * self._itemsize
        if m.mode == "direct":
            return [self._buffer(ptr, m.nbytes), m.nbytes, MPI.BYTE]
        return [self._buffer(ptr, m.span), 1, m.dtype]

    def _prepare(self) -> None:
        if self._freed:
            raise InvalidStateError("this host executable was freed")
        if self._in is None or self._out is None:
            raise InvalidStateError("bind_input() and bind_output() must be called before execute()")
        comm, isz = self.comm, self._itemsize
        in_d, out_d = self._in_dirty, self._out_dirty
        ws_new = False
        if self._needs_staging and self._send_stage is None:
            self._send_stage = empty_bytes(self._send_stage_bytes)
            self._recv_stage = empty_bytes(self._recv_stage_bytes)
            ws_new = True
        if self._needs_staging:
            send_base = self._send_stage.ctypes.data
            recv_base = self._recv_stage.ctypes.data
        p2p = self.method != "alltoallw"
        for m in self._sends:
            if m.mode == "staged":
                slot = HostBuffer(send_base + m.slot, isz, self._send_stage)
                if ws_new:
                    if m.req is not None:
                        m.req.Free()
                    m.req = comm.Send_init([self._buffer(slot.ptr, m.nbytes), m.nbytes, self._MPI.BYTE], m.peer, _TAG)
                if ws_new or in_d:
                    m.pair = copy_views(m.transfer.pack, self._in, slot)
            elif in_d and p2p:
                if m.req is not None:
                    m.req.Free()
                m.req = comm.Send_init(self._message_spec(m, self._in), m.peer, _TAG)
        for m in self._recvs:
            if m.mode == "staged":
                slot = HostBuffer(recv_base + m.slot, isz, self._recv_stage)
                if ws_new:
                    if m.req is not None:
                        m.req.Free()
                    m.req = comm.Recv_init([self._buffer(slot.ptr, m.nbytes), m.nbytes, self._MPI.BYTE], m.peer, _TAG)
                if ws_new or out_d:
                    m.pair = copy_views(m.transfer.unpack, slot, self._out)
            elif out_d and p2p:
                if m.req is not None:
                    m.req.Free()
                m.req = comm.Recv_init(self._message_spec(m, self._out), m.peer, _TAG)
        if (in_d or out_d) and self.plan.local is not None:
            self._local = copy_views(self.plan.local.direct, self._in, self._out)
        if in_d or out_d:
            self._a2a_dirty = True
        if p2p:
            self._first = [m.req for m in self._recvs] + [m.req for m in self._sends if m.mode != "staged"]
            self._packs = [(m.pair[0], m.pair[1], m.req) for m in self._sends if m.mode == "staged"]
            self._unpacks = [m.pair for m in self._recvs if m.mode == "staged"]
            self._reqs = [m.req for m in self._recvs] + [m.req for m in self._sends]
        self._in_dirty = self._out_dirty = self._dirty = False

    def _make_alltoallw(self) -> None:
        """(Re)create the persistent Alltoallw (collective: every rank calls it in the same execute)."""
        MPI = self._MPI
        P, isz = self.plan.nranks, self._itemsize
        if self._a2a is not None:
            self._a2a.Free()
            self._a2a = None
        sc, sd, st = [0] * P, [0] * P, [MPI.BYTE] * P
        rc, rd, rt = [0] * P, [0] * P, [MPI.BYTE] * P
        for msgs, base, c, d, t in ((self._sends, self._in, sc, sd, st), (self._recvs, self._out, rc, rd, rt)):
            for m in msgs:
                d[m.peer] = base.ptr + m.offset * isz
                if m.mode == "direct":
                    c[m.peer] = m.nbytes
                else:
                    c[m.peer], t[m.peer] = 1, m.dtype
        self._a2a = self.comm.Alltoallw_init([MPI.BOTTOM, sc, sd, st], [MPI.BOTTOM, rc, rd, rt])
        self._a2a_dirty = False

    # -- the hot path -----------------------------------------------------------------------

    def execute(self) -> None:
        """Carry out the plan once (collective, blocking)."""
        if self._dirty:
            self._prepare()
        copyto = np.copyto
        try:
            if self.method == "alltoallw":
                self._flag[0] = self._a2a_dirty
                self.comm.Allreduce(self._flag, self._flag_any, self._MPI.MAX)
                if self._flag_any[0]:
                    self._make_alltoallw()
                self._a2a.Start()
                if self._local is not None:
                    copyto(self._local[0], self._local[1], casting="no")
                self._a2a.Wait()
                return
            if self._first:
                self._MPI.Prequest.Startall(self._first)
            for d, s, req in self._packs:
                copyto(d, s, casting="no")
                req.Start()
            if self._local is not None:
                copyto(self._local[0], self._local[1], casting="no")
            if self._reqs:
                self._MPI.Request.Waitall(self._reqs)
            for d, s in self._unpacks:
                copyto(d, s, casting="no")
        except self._MPI.Exception as e:
            raise CommunicationError(f"redist host backend ({self.method}): MPI error in execute: {e}") from e

    # -- workspace and lifetime ------------------------------------------------------------

    def release_workspace(self) -> None:
        """Drop the staging buffers (and the requests on them); re-created by the next execute."""
        if self._send_stage is None:
            return
        for m in self._msgs:
            if m.mode == "staged":
                if m.req is not None:
                    m.req.Free()
                m.req = None
                m.pair = None
        self._send_stage = self._recv_stage = None
        self._packs, self._unpacks, self._first, self._reqs = [], [], [], []
        self._dirty = True

    def _free_local(self) -> None:
        MPI = self._MPI
        if MPI.Is_finalized():
            return
        for m in self._msgs:
            if m.req is not None:
                m.req.Free()
                m.req = None
            if m.dtype is not None:
                m.dtype.Free()
                m.dtype = None
            m.pair = None
        if self._a2a is not None:
            self._a2a.Free()
            self._a2a = None
        self._first, self._packs, self._unpacks, self._reqs = [], [], [], []
        self._local = None
        self._send_stage = self._recv_stage = None

    def free(self) -> None:
        """Free every request, datatype and the duplicated communicator (idempotent).

        Frees a communicator, so call it on every rank (as MPI_Comm_free is collective).
        """
        if self._freed:
            return
        self._freed = True
        self._free_local()
        self._in = self._out = None
        MPI = self._MPI
        if self.comm is not None and not MPI.Is_finalized():
            self.comm.Free()
        self.comm = None

    def __del__(self):
        # requests and datatypes are local objects: give them back if the owner forgot free();
        # the communicator is left alone (freeing it is collective).
        try:
            if not getattr(self, "_freed", True):
                self._free_local()
        except Exception:  # noqa: BLE001, S110 -- never raise from a finalizer
            pass

    # -- reporting --------------------------------------------------------------------------

    @property
    def staging_bytes(self) -> tuple[int, int]:
        """(send, receive) bytes of host staging this executable allocates (0, 0 for "datatype")."""
        return self._send_stage_bytes, self._recv_stage_bytes

    def describe(self) -> str:
        p = self.plan
        lines = [
            f"redist host executable rank {p.rank}/{p.nranks} method={self.method} ({_METHOD_TEXT[self.method]})",
            (f"  plan key={p.key} itemsize={p.itemsize} out_order={p.out_order} "
            f"send={sum(m.nbytes for m in self._sends)} B to {len(self._sends)} peer(s), "
            f"recv={sum(m.nbytes for m in self._recvs)} B from {len(self._recvs)} peer(s)"),
            (f"  staging: send {self._send_stage_bytes} B, recv {self._recv_stage_bytes} B "
            f"({'allocated' if self._send_stage is not None else 'not allocated'})"),
        ]
        if p.local is not None:
            c = p.local.direct
            lines.append(f"  local {p.rank}->{p.rank}: {p.local.nbytes} B numpy copy, {c.runs} run(s) of {c.run_length} elem")
        how = {
            "direct": "direct ({} in place, one contiguous run)",
            "datatype": "MPI derived datatype ({} {} run(s) of {} elem, no pack)",
            "staged": "{} via staging@{} ({} run(s) of {} elem)",
        }
        for kind, arrow, msgs, side in (("send", "->", self._sends, "from operand"), ("recv", "<-", self._recvs, "into result")):
            for m in msgs:
                runs, run = m.runs
                if m.mode == "direct":
                    text = how["direct"].format(side)
                elif m.mode == "datatype":
                    text = how["datatype"].format(side, runs, run)
                else:
                    text = how["staged"].format("pack" if kind == "send" else "unpack", m.slot, runs, run)
                lines.append(f"  {kind} {arrow}{m.peer}: {m.nbytes} B {text}")
        if p.local is None and not self._msgs:
            lines.append("  (nothing to move)")
        return "\n".join(lines)

    def __repr__(self):
        return f"<HostExecutable rank={self.plan.rank}/{self.plan.nranks} method={self.method}>"


_AVAILABLE: tuple[str, ...] | None = None


def available_methods() -> tuple[str, ...]:
    """:data:`METHODS` this MPI library supports ("alltoallw" needs MPI-4 persistent collectives)."""
    global _AVAILABLE
    if _AVAILABLE is None:
        MPI = _mpi()
        try:  # probe on COMM_SELF: mpi4py raises NotImplementedError when the library lacks it
            req = MPI.COMM_SELF.Alltoallw_init([MPI.BOTTOM, [0], [0], [MPI.BYTE]], [MPI.BOTTOM, [0], [0], [MPI.BYTE]])
            req.Free()
            _AVAILABLE = METHODS
        except (NotImplementedError, MPI.Exception):
            _AVAILABLE = tuple(m for m in METHODS if m != "alltoallw")
    return _AVAILABLE


def lower(plan: Plan, comm, *, logger: logging.Logger | None = None, method: str = "auto") -> HostExecutable:
    """Lower ``plan`` for MPI on ``comm`` (collective over ``comm``).

    ``method`` is "auto" (= :data:`AUTO_METHOD`) or one of :data:`METHODS`; every rank must pass
    the same. Buffers are bound later with ``bind_input`` / ``bind_output``.
    """
    MPI = _mpi()
    t0 = time.perf_counter()
    chosen = AUTO_METHOD if method == "auto" else method
    bad = 0
    if chosen not in METHODS:
        bad = 1
    elif comm.Get_size() != plan.nranks or comm.Get_rank() != plan.rank:
        bad = 2
    code = METHODS.index(chosen) if chosen in METHODS else 0
    # agree before anything else collective, so a bad argument on one rank raises everywhere
    agree = np.array([code, -code, bad], dtype=np.int64)
    ta = time.perf_counter()
    comm.Allreduce(MPI.IN_PLACE, agree, op=MPI.MAX)
    agree_s = time.perf_counter() - ta
    if agree[2]:
        if bad == 1:
            raise InvalidValueError(f"method must be 'auto' or one of {METHODS}, got {method!r}")
        if bad == 2:
            raise InvalidValueError(
                f"plan is for rank {plan.rank} of {plan.nranks} but the communicator gives rank "
                f"{comm.Get_rank()} of {comm.Get_size()}"
            )
        raise InvalidValueError("lowering failed on another rank (bad method or communicator)")
    if agree[0] != -agree[1]:
        raise InvalidValueError(f"ranks disagree on the host method (this rank: {chosen!r})")
    if chosen not in available_methods():  # the same library on every rank: raised everywhere
        raise NotSupportedError(
            f"host method {chosen!r} needs MPI-4 persistent collectives (MPI_Alltoallw_init), which this MPI "
            f"library ({MPI.Get_library_version().splitlines()[0].strip()}) lacks; use one of {available_methods()}"
        )
    t1 = time.perf_counter()
    dup = comm.Dup()
    t2 = time.perf_counter()
    exe = HostExecutable(plan, dup, chosen, logger)
    if logger is not None:
        t3 = time.perf_counter()
        ms = (t3 - t0) * 1e3
        wait_ms = (t2 - t1) * 1e3 + agree_s * 1e3
        if logger.isEnabledFor(logging.INFO):
            nstaged = sum(m.mode == "staged" for m in exe._msgs)
            ndt = sum(m.mode == "datatype" for m in exe._msgs)
            logger.info(
                "redist host: rank %d/%d lowered plan %s with method=%s in %.3f ms (%.3f ms of it in "
                "collectives: method agreement + Comm.Dup); send bytes per peer %s; recv bytes per peer %s; "
                "local %d B; %d staged, %d datatype, %d direct message(s)",
                plan.rank, plan.nranks, plan.key, chosen, ms, wait_ms, plan.send_bytes, plan.recv_bytes,
                plan.local.nbytes if plan.local is not None else 0, nstaged, ndt, len(exe._msgs) - nstaged - ndt,
            )
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s", exe.describe())
    return exe
