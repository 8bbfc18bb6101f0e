# SPDX-License-Identifier: Apache-2.0
"""The adapters' collective plan cache (pybind/_plan_cache.py) with entries whose free() is
collective, as a GPU plan's is (its free agrees across ranks).

    mpiexec -n P python plan_cache_worker.py {diverged|lone-clear}

diverged: three entries looked up alike on every rank; then the last rank's cache diverges (it
forgets its least recently used entry). A lookup is refused on every rank; clear() on every rank
retires the entries, and the next lookup frees the two every rank held, collectively and in the
same order, and drops the third on the ranks that held it, unfreed; the next collective call lines
up on every rank, and finalize's hook frees what a last clear() retired. A cache never looked up
(an adapter imported on one rank only) clears and finalizes without any collective call.
lone-clear: the last rank clears alone (no collective call); the next lookup is refused on every
rank; clear() on every rank, then a lookup frees every entry on every rank.
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
    """A planned object stand-in whose free() is collective (every rank must free the same one), as a
    GPU plan's is: the cache retires it at clear() and frees it at the next agreed lookup."""

    collective_free = True

    def __init__(self, report, name: int) -> None:
        self.report, self.name = report, name
        self.freed = self.retired = self.dropped = False

    def retire(self) -> None:
        self.retired = True

    def drop(self) -> None:
        self.dropped = True

    def free(self) -> None:
        names = comm.allgather(("free", self.name))
        self.report.check(len(set(names)) == 1, f"entry {self.name}: ranks freed different entries: {names}")
        self.freed = True


def aligned(report, label: str) -> None:
    """Collective: the next collective call lines up on every rank."""
    got = comm.allgather((label, rank))
    report.check(got == [(label, r) for r in range(nranks)], f"{label}: {got}")


def three(report, cache):
    return [cache.get(("entry", k, rank), lambda k=k: Entry(report, k)) for k in range(3)]


def refused(report, cache, label: str) -> None:
    report.expect_error(lambda: cache.get(("entry", 1, rank), lambda: Entry(report, 1)), redist.InvalidStateError,
                        f"rank {nranks - 1}'s plan cache", label)


def diverged(report) -> None:
    cache = PlanCache("plan_cache_worker", 8)
    made = three(report, cache)
    if rank == nranks - 1:
        cache._entries.popitem(last=False)  # entry 0 forgotten here only
        cache._history = 1
    refused(report, cache, "a lookup after the caches diverged")
    cache.clear()
    report.check(not any(e.freed for e in made), "clear() freed an entry whose free is collective")
    again = cache.get(("entry", 1, rank), lambda: Entry(report, 1))  # agreed: frees what every rank retired
    report.check([e.freed for e in made] == [False, True, True], f"freed: {[e.freed for e in made]}")
    report.check(made[0].dropped == (rank != nranks - 1), f"entry 0 dropped here: {made[0].dropped}")
    aligned(report, "after the first agreed lookup")
    report.check(len(cache) == 1 and cache.misses == 4, f"after clear: {len(cache)} entries, {cache.misses} misses")
    cache.clear()
    cache._finalize()  # what redist.finalize() runs: frees what clear() retired
    report.check(again.freed, "the entry made after clear() was freed at finalize")
    if rank == 0:  # a cache made and cleared on one rank only, never looked up: nothing collective
        unused = PlanCache("plan_cache_worker unused", 2)
        unused.clear()
        unused._finalize()
    aligned(report, "after an unused cache's clear on rank 0")


def lone_clear(report) -> None:
    cache = PlanCache("plan_cache_worker lone", 8)
    made = three(report, cache)
    if rank == nranks - 1:
        cache.clear()  # alone: no collective call, caught by the next lookup
    refused(report, cache, "a lookup after a rank cleared alone")
    report.check(not any(e.freed for e in made), "a refused lookup freed an entry")
    cache.clear()  # now on every rank
    report.check(all(e.retired for e in made), "clear() retired every entry")
    cache.get(("entry", 5, rank), lambda: Entry(report, 5))
    report.check(all(e.freed and not e.dropped for e in made), f"freed: {[e.freed for e in made]}")
    aligned(report, "after the lone clear was recovered")
    cache._finalize()


if __name__ == "__main__":
    code = run_report_mode(comm, {"diverged": diverged, "lone-clear": lone_clear})
    redist.finalize()
    sys.exit(code)
