# SPDX-License-Identifier: Apache-2.0
"""The adapters' collective plan cache (pybind/_plan_cache.py) with entries whose free() is
collective, as a GPU plan's is (its free agrees across ranks).

    mpiexec -n P python plan_cache_worker.py diverged

diverged: three entries looked up alike on every rank; then the last rank's cache diverges (it
forgets its least recently used entry, as a rank that cleared alone). A lookup is refused on every
rank; clear() frees the two entries every rank holds, collectively and in the same order, and drops
the third on the ranks that still hold it, unfreed; the next collective call lines up on every rank,
and the cache works again. A cache never looked up (an adapter imported on one rank only) clears
without any collective call.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from helpers import run_report_mode  # noqa: E402

import redist  # noqa: E402
from redist._plan_cache import PlanCache  # noqa: E402

redist.initialize()
comm = redist.get_context().engine.comm
rank, nranks = comm.Get_rank(), comm.Get_size()


class Entry:
    """A planned object stand-in whose free() is collective: every rank must free the same one."""

    def __init__(self, report, name: int) -> None:
        self.report, self.name, self.freed = report, name, False

    def free(self) -> None:
        names = comm.allgather(("free", self.name))
        self.report.check(len(set(names)) == 1, f"entry {self.name}: ranks freed different entries: {names}")
        self.freed = True


def diverged(report) -> None:
    cache = PlanCache("plan_cache_worker", 8)
    made = [cache.get(("entry", k, rank), lambda k=k: Entry(report, k)) for k in range(3)]
    if rank == nranks - 1:
        cache._entries.popitem(last=False)  # entry 0 forgotten here only
        cache._history = 1
    report.expect_error(lambda: cache.get(("entry", 1, rank), lambda: Entry(report, 1)), redist.InvalidStateError,
                        f"rank {nranks - 1}'s plan cache", "a lookup after the caches diverged")
    cache.clear()
    report.check([e.freed for e in made] == [False, True, True], f"freed: {[e.freed for e in made]}")
    after = comm.allgather(("after clear", rank))
    report.check(after == [("after clear", r) for r in range(nranks)], f"the next collective call: {after}")
    again = cache.get(("entry", 1, rank), lambda: Entry(report, 1))
    report.check(len(cache) == 1 and cache.misses == 4, f"after clear: {len(cache)} entries, {cache.misses} misses")
    cache.clear()
    report.check(again.freed, "the entry made after clear() was freed by the next clear()")
    if rank == 0:  # a cache made and cleared on one rank only, never looked up: nothing collective
        PlanCache("plan_cache_worker unused", 2).clear()
    last = comm.allgather(("last", rank))
    report.check(last == [("last", r) for r in range(nranks)], f"after an unused cache's clear on rank 0: {last}")


if __name__ == "__main__":
    code = run_report_mode(comm, {"diverged": diverged})
    redist.finalize()
    sys.exit(code)
