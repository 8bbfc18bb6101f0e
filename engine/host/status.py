# SPDX-License-Identifier: Apache-2.0
"""The status round: how the ranks of a host execute agree before any byte moves.

Every rank sends one zero-byte message to every other rank, and receives one from every other
rank (``ANY_TAG``); the tag is what the sender says about this call: a small code, one of which
means "I failed" (:data:`FAILED`). Once a rank has heard every peer it knows whether any rank
failed -- then every rank raises the same error and nothing has been written anywhere -- and
what the others said (push: whether a peer wants its ``out=``). The round is also a credit: a
peer that heard from me knows I have entered this call, so I am done reading my previous result.

Persistent requests: the receives, and one send per peer per code, started together. MPI's
ordering per (source, communicator) keeps the round apart from the data messages that follow
it: a peer sends its data only after its own status message, which my status receive matches
first. Up to :data:`~.executable.COMPLETE_MAX` ranks; larger jobs agree with one Allreduce.

The C ABI's compiled replays (engine/host/replay.py, cabi/redist_replay.c) start and wait for the
same persistent requests from C, and hand every round whose codes differ back to Python.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import collective

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["FAILED", "WELL", "StatusRound"]

#: the code of a rank that cannot take part in this call
FAILED = 0
#: the code of a rank that can (push adds codes of its own, see engine/host/push/codes.py)
WELL = 1


class StatusRound:
    """Zero-byte messages between every pair of ranks, tags ``base + code`` (codes ``0..ncodes-1``)."""

    def __init__(self, comm: MPI.Intracomm, me: int, nranks: int, base: int, ncodes: int) -> None:
        from mpi4py import MPI

        self._MPI = MPI
        self.comm = comm
        self.base = base
        self._zero = np.zeros(1, np.uint8)
        zero = [self._zero, 0, MPI.BYTE]
        self.others: list[int] = [r for r in range(nranks) if r != me]
        self.recvs: list[MPI.Prequest] = [comm.Recv_init(zero, r, MPI.ANY_TAG) for r in self.others]
        self.sends: list[list[MPI.Prequest]] = [[comm.Send_init(zero, r, base + code) for r in self.others]
                                                for code in range(ncodes)]
        self.first: list[list[MPI.Prequest]] = [self.recvs + s for s in self.sends]  # what start(code) starts
        self.statuses: list[MPI.Status] = [MPI.Status() for _ in self.others]

    def start(self, code: int) -> None:
        """Post every receive and send ``code`` to every peer."""
        self._MPI.Prequest.Startall(self.first[code])

    def heard(self) -> list[int]:
        """Wait for every peer's status; their codes, in the order of :attr:`others`."""
        self._MPI.Request.Waitall(self.recvs, self.statuses)
        base = self.base
        return [st.Get_tag() - base for st in self.statuses]

    def fail(self, problem: collective.Problem) -> None:
        """This rank cannot take part: say so to every peer, hear them, and raise (on every rank)."""
        self.start(FAILED)
        self._MPI.Request.Waitall(self.first[FAILED])
        collective.agree(self.comm, problem)

    def raise_peers(self, code: int) -> None:
        """A peer failed (this rank sent ``code``): finish the round and raise its problem here too."""
        self._MPI.Request.Waitall(self.sends[code])
        collective.agree(self.comm, None)

    def free(self) -> None:
        """Free the persistent requests (local)."""
        for r in self.recvs + [r for s in self.sends for r in s]:
            r.Free()
        self.recvs, self.sends, self.first = [], [], []
