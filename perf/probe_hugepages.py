# SPDX-License-Identifier: Apache-2.0
"""Does the host exchange care whether its arrays sit on transparent huge pages? (issue #46)

    mpiexec -n 2 python perf/probe_hugepages.py 128

numpy advises ``MADV_HUGEPAGE`` for its large arrays; memory another allocator maps without that
advice (a framework's buffers, which redist.jax's handler and out= write into) sits on 4 KiB pages
on a host whose ``/sys/kernel/mm/transparent_hugepage/enabled`` says ``madvise``. Slab.X -> Slab.Y of an N^3 float64 array,
``execute(out=)`` with the operand and ``out=`` allocated with numpy's advice on and off, alternately
(two rounds); medians of 30 calls after 3, slowest rank.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
from numpy._core.multiarray import _set_madvise_hugepage

import redist
from redist import Redistribute, Slab


def main() -> None:
    redist.initialize(device_id="cpu")
    comm = redist.get_context().process_group.mpi_comm
    rank = comm.Get_rank()
    n = int(sys.argv[1])
    g = (n, n, n)
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            mode = f.read().strip()
    except OSError:
        mode = "unknown"
    lines = [f"probe_hugepages: P = {comm.Get_size()}, {n}^3 float64, transparent_hugepage: {mode}"]
    for advice in (True, False, True, False):
        _set_madvise_hugepage(advice)
        a = np.random.default_rng(rank).random(Slab.X.shape(rank, g))
        with Redistribute(a, Slab.X, Slab.Y) as r:
            r.plan()
            out = np.empty(r.output_box.box_shape)
            ts = []
            for _ in range(33):
                comm.Barrier()
                t0 = time.perf_counter()
                r.execute(out=out)
                ts.append(time.perf_counter() - t0)
        lines.append(f"  huge-page advice {'on ' if advice else 'off'}  execute(out=) "
                     f"{max(comm.allgather(statistics.median(ts[3:]))) * 1e3:.3f} ms")
    _set_madvise_hugepage(True)
    if rank == 0:
        print("\n".join(lines))
    redist.finalize()


if __name__ == "__main__":
    main()
