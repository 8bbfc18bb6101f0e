# SPDX-License-Identifier: Apache-2.0
"""redist.jax on CPU: a new XLA result buffer copied into, or written as out= (issue #46).

    mpiexec -n P python perf/probe_jax_outs.py N [N ...]

Slab.X -> Slab.Y of an N^3 float64 array, jitted. The handler's two ways into a result buffer XLA
hands over for the first time, interleaved in blocks of four calls, 27 blocks each after three:

* ``copy``: the engine-owned result (its calls replay in C) copied into XLA's buffer (the rule below
  ``redist.jax._COPY_BELOW``);
* ``out=``: the exchange writes XLA's buffer as out=, through Python where the buffer is new (the
  rule from ``_COPY_BELOW`` on).

Prints, per size, the median of the jitted call (slowest rank) and of the handler alone (this rank:
``_Entry.run`` timed inside the call), and how many distinct result buffers XLA handed over.
"""

from __future__ import annotations

import statistics
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import redist  # noqa: E402
import redist.jax  # noqa: E402
from redist import Slab  # noqa: E402


def main() -> None:
    redist.initialize()
    comm = redist.get_context().process_group.mpi_comm
    rank, nranks = comm.Get_rank(), comm.Get_size()
    entry_run, inside, buffers = redist.jax._Entry.run, [], set()

    def timed_run(self, src, dst, stream):
        buffers.add(dst)
        t0 = time.perf_counter()
        entry_run(self, src, dst, stream)
        inside.append(time.perf_counter() - t0)

    redist.jax._Entry.run = timed_run
    lines = [f"probe_jax_outs: P = {nranks}, float64, jax {jax.__version__}"]
    saved = redist.jax._COPY_BELOW
    for n in map(int, sys.argv[1:]):
        x = jax.numpy.asarray(np.random.default_rng(rank).random(Slab.X.shape(rank, (n, n, n))))
        exchange = jax.jit(lambda a: redist.jax.redistribute(a, Slab.X, Slab.Y))
        rules = {"copy": 1 << 62, "out=": 0}
        calls: dict[str, list[float]] = {k: [] for k in rules}
        handler: dict[str, list[float]] = {k: [] for k in rules}
        buffers.clear()
        for block in range(30):
            for name, below in rules.items():
                redist.jax._COPY_BELOW = below
                for _ in range(4):
                    comm.Barrier()
                    t0 = time.perf_counter()
                    exchange(x).block_until_ready()
                    took = max(comm.allgather(time.perf_counter() - t0))
                    if block >= 3:
                        calls[name].append(took)
                        handler[name].append(inside[-1])
        redist.jax._COPY_BELOW = saved
        seen = comm.allgather(len(buffers))
        lines.append(f"  {n}^3: " + " | ".join(
            f"{k}: call {statistics.median(calls[k]) * 1e3:.3f} ms, handler {statistics.median(handler[k]) * 1e3:.3f} ms"
            for k in rules) + f"; result buffers per rank {seen}")
    redist.jax._Entry.run = entry_run
    if rank == 0:
        print("\n".join(lines))
    redist.finalize()


if __name__ == "__main__":
    main()
