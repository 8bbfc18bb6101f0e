# SPDX-License-Identifier: Apache-2.0
"""The one host timing loop of the perf/ scripts: variants interleaved, slowest rank, medians."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def interleaved_medians_ms(variants: dict[str, Callable[[], object]], comm, *, iters: int) -> dict[str, float]:
    """Median ms per call of each variant over ``iters`` rounds (each round runs every variant once,
    in order, ranks starting together); each call's time is the slowest rank's. One warm-up call each."""
    for fn in variants.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(iters):
        for k, fn in variants.items():
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            t = time.perf_counter() - t0
            times[k].append(max(comm.allgather(t)))
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}
