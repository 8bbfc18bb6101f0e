# SPDX-License-Identifier: Apache-2.0
"""Push's cross-memory route: calls with an ``out=`` laid out like its result copy straight into it with
Linux cross-memory attach (``process_vm_writev`` by the sender, or ``process_vm_readv`` by the
receiver where the sender's side has the longer stretches), decided per pair when the object is
planned (:func:`_direct_setup`); every such call ends with one small Allreduce."""

from __future__ import annotations

import ctypes
import math
import os
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ... import collective
from ...errors import CommunicationError
from .._datatypes import fused as fused_dims
from . import tuning
from .codes import _CROSS, _DIRECTS, _SHAREDS, _WITH_OUT

if TYPE_CHECKING:
    from .executable import PushExecutable


IOV_MAX = 1024  # iovecs per process_vm_writev call (Linux's UIO_MAXIOV)
CALL_BYTES = 1 << 30  # bytes per call (Linux moves at most MAX_RW_COUNT, 2 GiB - 4 KiB, in one)
_RUNS_MAX = 1 << 22  # runs of one send past which direct stores are not considered (plan-time memory)
_PR_SET_PTRACER, _PR_SET_PTRACER_ANY = 0x59616D61, ctypes.c_ulong(-1).value



class CrossMemoryRoute:
    """The cross-memory route of :class:`~.executable.PushExecutable`."""

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


def _direct_wanted(MPI) -> bool:
    """:data:`.tuning.DIRECT`, its default decided by the MPI library (the same on every rank of a job)."""
    if tuning.DIRECT is not None:
        return tuning.DIRECT
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
    where every send's stretches average at least :data:`.tuning.DIRECT_MIN_RUN` bytes on both sides; the
    receiver reads where the destination's side has more stretches than the operand's (the remote
    side should be the one with fewer iovecs)."""
    sides = [(_stretches(f, src, n), _stretches(f, dst, n)) for f, src, dst, n in runs]
    fit = all(int(r[3].sum()) >= tuning.DIRECT_MIN_RUN * max(side) for r, side in zip(runs, sides))
    if tuning.DIRECT_READ is not None:
        return fit, [tuning.DIRECT_READ] * len(sides)
    return fit, [theirs > mine for mine, theirs in sides]


def _direct_setup(exe: PushExecutable) -> bool:
    """Collective: can every pair of ranks copy between their memories with cross-memory attach (the
    kernel allows it, every exchange's stretches are long enough)? Decides per send who copies: the
    sender stores (``process_vm_writev``), or the receiver reads from the operand (``process_vm_readv``)
    where the sender's side has fewer stretches (the kernel pins the remote side's pages per iovec:
    the side with the long stretches should be the remote one), unless :data:`.tuning.DIRECT_READ` forces
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
