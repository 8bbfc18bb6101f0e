# SPDX-License-Identifier: Apache-2.0
"""Where a jitted redist.jax.redistribute call's time goes on the host (issue #46).

    mpiexec -n P python perf/probe_jax_call.py N

Slab.X -> Slab.Y of an N^3 float64 array; medians of 30 calls after warm-up (slowest rank):

* the jitted exchange against a jitted ``a * 2`` of this rank's input: ms per call and minor page
  faults per call (a fresh output XLA maps anew faults in one per 4 KiB page);
* the adapter's handler alone, timed inside the call (``_Entry.run``), and how many of the calls
  wrote XLA's buffer as out= (the others copied the engine-owned result in) and how many ran in Python;
* at P = 1, where a call's Python time goes (cProfile, the top functions by own time).
"""

from __future__ import annotations

import cProfile
import collections
import pstats
import resource
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
    n = int(sys.argv[1])
    g = (n, n, n)
    x = jax.numpy.asarray(np.random.default_rng(rank).random(Slab.X.shape(rank, g)))
    exchange = jax.jit(lambda a: redist.jax.redistribute(a, Slab.X, Slab.Y))
    doubled = jax.jit(lambda a: a * 2.0)
    entry_run = redist.jax._Entry.run
    seen, inside = collections.Counter(), []

    def counted(execute):  # the planned object's calls: as out=, or the engine-owned result copied in
        def call(*args, **kwargs):
            seen["copy" if kwargs.get("out") is None else "out"] += 1
            return execute(*args, **kwargs)

        return call

    def timed_run(self, src, dst, stream):
        if "execute" not in vars(self.r):
            self.r.execute = counted(self.r.execute)
        t0 = time.perf_counter()
        entry_run(self, src, dst, stream)
        inside.append(time.perf_counter() - t0)

    def faults() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    lines = [f"probe_jax_call: P = {nranks}, {n}^3 float64, jax {jax.__version__}"]
    for name, fn in (("jit redistribute", exchange), ("jit a * 2", doubled)):
        for _ in range(3):
            fn(x).block_until_ready()
        ms, flt = [], []
        for _ in range(30):
            comm.Barrier()
            f0, t0 = faults(), time.perf_counter()
            fn(x).block_until_ready()
            ms.append(max(comm.allgather(time.perf_counter() - t0)))
            flt.append(faults() - f0)
        lines.append(f"  {name:<18} {statistics.median(ms) * 1e3:8.3f} ms, {statistics.median(flt):7.0f} minor faults "
                     f"per call ({x.nbytes // 4096} pages of input)")
    redist.jax._Entry.run = timed_run
    (entry,) = redist.jax._entries.values()
    python_calls = entry.r._python_calls
    for _ in range(30):
        exchange(x).block_until_ready()
    redist.jax._Entry.run = entry_run
    vars(entry.r).pop("execute", None)
    python_calls = entry.r._python_calls - python_calls
    # the same planned object from Python (its calls replay in C): on numpy arrays of the same shapes
    # (huge pages: numpy advises them), then on views of XLA's own buffers (x, and a result of the exchange)
    kept = exchange(x)
    kept.block_until_ready()
    pairs = {"numpy arrays": (np.asarray(x).copy(), np.empty(entry.out_shape)),
             "XLA's buffers": (entry._view(x.unsafe_buffer_pointer(), entry.in_shape, entry.in_bytes, False),
                               entry._view(kept.unsafe_buffer_pointer(), entry.out_shape, entry.out_bytes, True))}
    direct = {}
    for name, (operand, out) in pairs.items():
        entry.r.reset_operand_unchecked(operand)
        ts = []
        for _ in range(33):
            comm.Barrier()
            t0 = time.perf_counter()
            entry.r.execute(out=out)
            ts.append(time.perf_counter() - t0)
        direct[name] = statistics.median(ts[3:])
    every = comm.allgather((statistics.median(inside), seen["out"], seen["copy"], python_calls, direct))
    for r, (med, out, copied, slow, plain) in enumerate(every):
        lines.append(f"  rank {r}: handler {med * 1e3:.3f} ms (median); {out} of {out + copied} calls wrote XLA's "
                     f"buffer as out=, {slow} through Python; execute(out=) of the same object from Python: "
                     + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in plain.items()))
    if nranks == 1:
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(300):
            exchange(x).block_until_ready()
        profile.disable()
        stats = pstats.Stats(profile)
        total = stats.total_tt / 300  # type: ignore[attr-defined]
        lines.append(f"  Python time per call under cProfile: {total * 1e3:.3f} ms; by own time:")
        rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:6]  # type: ignore[attr-defined]
        lines += [f"    {own / 300 * 1e6:7.1f} us  {func[2]} ({func[0].rsplit('/', 1)[-1]}:{func[1]})"
                  for func, (_, _, own, _, _) in rows]
    if rank == 0:
        print("\n".join(lines))
    redist.finalize()


if __name__ == "__main__":
    main()
