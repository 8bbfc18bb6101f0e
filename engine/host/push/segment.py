# SPDX-License-Identifier: Apache-2.0
"""Push's shared-memory segments: each rank's results (and landing area) in a file of /dev/shm mapped
by its owner and its peers, the header of words behind the results, and :func:`push_problem`
(can push serve a plan here)."""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ... import collective
from ... import geometry as geo
from ...plan import FusedPlan, Plan
from ..symmetric import SHM_DIR, map_file, shm_path

if TYPE_CHECKING:
    from mpi4py import MPI

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
