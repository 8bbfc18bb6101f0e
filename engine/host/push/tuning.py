# SPDX-License-Identifier: Apache-2.0
"""Push's route thresholds and switches, read when an object is planned (tests and benchmarks set
them around a plan: tests/helpers.py ``push_route``, perf/push_site)."""

from __future__ import annotations

#: calls with an out= land in shared memory (two copies) when every rank receives at most this many
#: bytes, else go as messages (MPI's transport): see perf/RESULTS.md, "Where push's out= lands"
#: (-1: never, not even where no rank receives anything)
LANDING_MAX = 1 << 20
#: larger calls with an out= store straight into it (cross-memory attach) where every pair of ranks can
#: and every run of the exchange has at least DIRECT_MIN_RUN bytes (shorter runs: one system-call
#: entry each). Read when an object is planned: None (the default) does so on Open MPI, whose messages
#: into out= measured 1.2-1.3x slower than these stores at 256^3, and sends messages on other MPIs
#: (MPICH's measured 1.0-1.2x faster); True wherever the kernel allows it; False never
DIRECT: bool | None = None
#: calls with an out= below LANDING_MAX copy straight into it with cross-memory attach (the receiver reads,
#: or the sender stores, as for larger calls) instead of landing, where every pair of ranks can and the
#: runs are long enough; on any MPI (no message carries data either way) unless DIRECT is False. Their
#: data then moves once, as into a result: perf/RESULTS.md, "A private out= read by its receiver"
DIRECT_SMALL = True
#: ... where some rank receives at least this many bytes: below it a system call per peer and the closing
#: Allreduce cost more than the landing's second copy (the VM, P = 2: 8^3 lands in 5.7 us, copies across
#: memories in 8.9; 24^3 12.9 and 12.2 us); smaller exchanges land, and plan() skips the cross-memory probe
DIRECT_SMALL_MIN = 32 << 10
DIRECT_MIN_RUN = 256
#: who makes a direct copy, decided per pair when an object is planned: None (the default) by the
#: stretch rule of _who_copies, True every receiver reads, False every sender stores
DIRECT_READ: bool | None = None
