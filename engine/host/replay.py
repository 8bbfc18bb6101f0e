# SPDX-License-Identifier: Apache-2.0
"""Words for the C ABI's compiled replay of a host call (``cabi/redist_replay.c`` runs them).

A replay is the status round of :class:`.status.StatusRound` for one code, a check of words the
peers published, then three phases of copies with the arrival requests between them (see
:func:`words`). It holds raw addresses and
MPI request handles, so it is valid only while the executable's binding and requests are: the
executable tells its holder to forget it when they change (:meth:`.push.PushExecutable.replay`).
Built once per binding, never per call.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["VERSION", "copy_words", "words"]

#: cabi/redist_replay.c's REDIST_REPLAY_VERSION
VERSION = 4
#: cabi/redist_replay.c's REDIST_REPLAY_MAXDIM: a copy of more outer dimensions is not replayed
MAXDIM = 32
_calls: dict = {}  # the MPI module -> (Startall, Waitall, Error_string, Allreduce addresses, request width,
#                    status size, tag offset)


def _mpi_calls(MPI) -> tuple[int, ...]:
    """The addresses of MPI_Startall, MPI_Waitall, MPI_Error_string and MPI_Allreduce in the MPI
    library mpi4py uses, the width of a request handle, the size of MPI_Status and where its tag is
    (found by setting one)."""
    hit = _calls.get(MPI)
    if hit is None:
        lib = ctypes.CDLL(MPI.__file__)  # its dependencies include libmpi: dlsym searches them
        addresses = [ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0
                     for name in ("MPI_Startall", "MPI_Waitall", "MPI_Error_string", "MPI_Allreduce")]
        status, marker = MPI.Status(), 0x5A5A1234
        status.Set_source(1)
        status.Set_tag(marker)
        status.Set_error(0)
        size = MPI._sizeof(MPI.Status)
        raw = ctypes.string_at(MPI._addressof(status), size)
        offset = raw.find(marker.to_bytes(4, "little", signed=True))
        if offset < 0 or offset % 4 or raw.count(marker.to_bytes(4, "little", signed=True)) != 1:
            raise RuntimeError("cannot tell where MPI_Status keeps its tag")
        hit = _calls[MPI] = (*addresses, MPI._sizeof(MPI.Request), size, offset)
    return hit


def cross_words(calls: Sequence[tuple[bool, int, int, np.ndarray, np.ndarray]]) -> list[int]:
    """The count, then per cross-memory call ``read, into, pid, bytes, nlocal, nremote`` and its two
    iovec lists (address, length per iovec: arrays of shape (n, 2)): ``process_vm_readv`` from ``pid``
    where ``read``, else ``process_vm_writev`` into it; ``into`` is the rank whose memory it writes
    (what a refusal names)."""
    out = [len(calls)]
    for read, into, pid, local, remote in calls:
        out += [int(read), into, pid, int(local[:, 1].sum()), len(local), len(remote),
                *(int(v) for v in local.reshape(-1)), *(int(v) for v in remote.reshape(-1))]
    return out


def _handles(MPI, requests: Sequence) -> list[int]:
    """The requests' handles as words (a 4-byte handle as its unsigned value)."""
    mask = (1 << (8 * MPI._sizeof(MPI.Request))) - 1
    return [MPI._handleof(r) & mask for r in requests]


def copy_words(pairs: Sequence[tuple[np.ndarray, np.ndarray]], starts: Sequence[int] | None = None) -> list[int]:
    """The count, then per copy ``dst, src, run, ndim, shape, dst_strides, src_strides`` (bytes) of
    ``np.copyto(dst, src)`` over void views of ``run`` bytes per item, then how many of the arrival
    sends the replay starts after it (``starts``, per pair: a pack's messages go as soon as it is
    made; none by default): empty copies dropped (their starts go with the next copy made, or after
    the phase), size-1 dimensions dropped, dimensions contiguous on both sides merged (into the run
    where innermost), the outer ones ordered by the destination's strides (largest first: the stores
    go in order)."""
    out, count, pending = [], 0, 0
    for k, (d, s) in enumerate(pairs):
        pending += starts[k] if starts is not None else 0
        if d.size == 0:
            continue
        run = d.itemsize
        dims = sorted(((n, ds, ss) for n, ds, ss in zip(d.shape, d.strides, s.strides) if n != 1),
                      key=lambda dim: -abs(dim[1]))
        merged: list[list[int]] = []
        for n, ds, ss in dims:
            if merged and merged[-1][1] == n * ds and merged[-1][2] == n * ss:
                merged[-1] = [merged[-1][0] * n, ds, ss]
            else:
                merged.append([n, ds, ss])
        while merged and merged[-1][1] == run and merged[-1][2] == run:  # contiguous on both sides
            run *= merged.pop()[0]
        if len(merged) > MAXDIM:
            raise ValueError(f"a copy of {len(merged)} dimensions (the replay takes {MAXDIM})")
        count += 1
        out += [d.ctypes.data, s.ctypes.data, run, len(merged), *(m[0] for m in merged), *(m[1] for m in merged),
                *(m[2] for m in merged), pending]
        pending = 0
    return [count, *out]


def words(MPI: Any, first: Sequence[MPI.Prequest], nothers: int, tag_base: int, code: int,
          arrival_recvs: Sequence[MPI.Prequest], arrival_sends: Sequence[MPI.Prequest],
          finish: Sequence[MPI.Prequest], phases: Sequence[Sequence[tuple[np.ndarray, np.ndarray]]],
          operands: Sequence[int], lazy: bool, checks: Sequence[tuple[int, int]] = (),
          sets: Sequence[tuple[int, int]] = (), starts: Sequence[int] | None = None,
          cross: Sequence[tuple[bool, int, int, np.ndarray, np.ndarray]] = (),
          reduce: MPI.Intracomm | None = None) -> np.ndarray:
    """One call with the operands at ``operands`` (per field; the replay's key with the caller's
    out=), as cabi/redist_replay.c runs it (``lazy``: the C side may rebind the operands to those
    of another of its replays without telling Python first):

    0. each ``(address, value)`` of ``sets`` written (64 bits: what this rank publishes for its peers,
       where it wants their data);
    1. ``MPI_Startall(first)`` (the ``nothers`` status receives, then this rank's sends of ``code``),
       ``MPI_Waitall`` on the receives; unless every tag is ``tag_base + code`` and every
       ``(address, value)`` of ``checks`` holds that 64-bit value (words the peers wrote before
       their status: where they want their data), the rest of the call goes back to Python (with
       the codes heard);
    2. start ``arrival_recvs``; the copies of ``phases[0]`` (into the peers' memory, or packs), after
       the k-th of them the next ``starts[k]`` of ``arrival_sends`` (a pack's messages leave while
       the next pack is made, as :meth:`.executable.HostExecutable.exchange` sends them); the
       ``cross`` calls (cross-memory attach: :func:`cross_words`); start the rest of
       ``arrival_sends``; the copies of ``phases[1]``; ``MPI_Waitall(finish)``; the copies of
       ``phases[2]``;
    3. with ``reduce`` (a communicator): an Allreduce (MAX) of two ints after the copies (the rank
       whose memory a refused cross-memory call was to write, plus one, and its errno; else zeros):
       no rank returns before every rank that reads its operand is done, and where a call was
       refused every rank fails the call with the same message.
    """
    startall, waitall, error_string, allreduce, width, status_size, tag_offset = _mpi_calls(MPI)
    head = [VERSION, startall, waitall, error_string, width, status_size, tag_offset, tag_base, code, nothers,
            len(first), len(arrival_recvs), len(arrival_sends), len(finish), int(lazy), len(sets), len(checks),
            *operands]
    body = [*_handles(MPI, first), *_handles(MPI, arrival_recvs), *_handles(MPI, arrival_sends),
            *_handles(MPI, finish), *(w for pair in (*sets, *checks) for w in pair)]
    for k, pairs in enumerate(phases):
        body += copy_words(pairs, starts if k == 0 else None)
    body += cross_words(cross)
    # the closing Allreduce: its address and the handles of the communicator, MPI_INT and MPI_MAX as words
    body += ([allreduce, MPI._handleof(reduce), MPI._handleof(MPI.INT), MPI._handleof(MPI.MAX)] if reduce is not None
             else [0, 0, 0, 0])
    return np.array([v - (1 << 64) if v >= 1 << 63 else v for v in head + body], np.int64)
