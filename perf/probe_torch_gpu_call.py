# SPDX-License-Identifier: Apache-2.0
"""Where an eager redist.torch call's host time goes on a GPU (issue #45).

    mpiexec -n 1 python perf/probe_torch_gpu_call.py [N]

Slab.X -> Slab.Y of an N^3 complex64 array (default 64) at P = 1, host µs per call (200 calls,
then one synchronize; median of 5 such runs):

* ``execute()``: the engine-owned result;
* ``execute(out=t)``: one tensor every call;
* ``+ fresh t``: a fresh ``torch.empty`` every call (the caching allocator gives the same block back);
* ``+ rebind operand``: that, with ``reset_operand_unchecked(x)`` first;
* ``+ unbind, release``: that, then ``_unbind_outs()`` and ``release_operand()`` (the adapter's
  whole sequence on GPUs until 2026-12-07);
* ``_execute_fresh, release``: the sequence now (``_execute_into``: the fresh tensor bound without
  ``out=``'s checks, and not unbound);
* ``kernel``: the operator's Python kernel (the plan cache's lookup and the sequence);
* ``torch.ops.redist.redistribute``: the kernel through torch's dispatcher;
* ``redist.torch.redistribute``: the adapter, eager, no gradient;
* the two ways of reading torch's current stream (``execute()`` reads it every call: the raw one now).

Then the functions where the adapter's calls spend their host time (``cProfile``, 500 calls, the
top 25 by own time): what the rows above do not split; and the same for ``execute(out=t)`` (#44:
what a repeated out= adds to ``execute()``).
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import sys
import time

import torch

import redist
import redist.torch
from redist import Slab


def host_us(fn, calls: int = 200, runs: int = 5) -> float:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        per.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(per)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    redist.initialize()
    ctx = redist.get_context()
    device = torch.device("cuda", ctx.device_id)
    torch.cuda.set_device(device)
    g = (n, n, n)
    X, Y = Slab.X.bind(g), Slab.Y.bind(g)
    x = torch.randn(Slab.X.shape(0, g), dtype=torch.complex64, device=device)
    r = redist.Redistribute(x, Slab.X, Slab.Y)
    r.plan()
    shape = r.output_box.box_shape
    t = torch.empty(shape, dtype=torch.complex64, device=device)
    redist.torch.redistribute(x, X, Y)  # the operator's arguments, as redistribute() makes them
    codes = redist.torch._resolve(redist.torch._plain(X), redist.torch._plain(Y), None, redist.torch._plain_options(None), 3)

    def fresh():
        r.execute(out=torch.empty(shape, dtype=torch.complex64, device=device))

    def rebound():
        r.reset_operand_unchecked(x)
        fresh()

    def old_sequence():  # what redist.torch did on GPUs until 2026-12-07
        r.reset_operand_unchecked(x)
        try:
            fresh()
        finally:
            r._unbind_outs()
            r.release_operand()

    def adapter_sequence():  # what it does now (_execute_into): the fresh tensor bound without out='s checks
        r.reset_operand_unchecked(x)
        try:
            r._execute_fresh([torch.empty(shape, dtype=torch.complex64, device=device)])
        finally:
            r.release_operand()

    def kernel():  # the operator's Python kernel, without torch's dispatcher
        redist.torch._redistribute_kernel([x], list(codes[0]), list(codes[1]), codes[2], False)

    rows = {
        "execute()": lambda: r.execute(),
        "execute(out=t)": lambda: r.execute(out=t),
        "+ fresh t": fresh,
        "+ rebind operand": rebound,
        "+ unbind, release": old_sequence,
        "_execute_fresh, release": adapter_sequence,
        "kernel": kernel,
        "torch.ops.redist.redistribute": lambda: torch.ops.redist.redistribute([x], list(codes[0]), list(codes[1]), codes[2], False),
        "redist.torch.redistribute": lambda: redist.torch.redistribute(x, X, Y),
        "current_stream().cuda_stream": lambda: torch.cuda.current_stream(ctx.device_id).cuda_stream,
        "_cuda_getCurrentRawStream": lambda: torch._C._cuda_getCurrentRawStream(ctx.device_id),
    }
    print(f"probe_torch_gpu_call: P = 1, {n}^3 complex64, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for name, fn in rows.items():
        print(f"  {name:<28} {host_us(fn):8.1f} us per call (host)")
    for name, calls, top in (("redist.torch.redistribute", 500, 25), ("+ rebind operand", 500, 20), ("execute(out=t)", 2000, 15)):
        fn = rows[name]
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        profile.disable()
        print(f"cProfile of {calls} calls of {name} (own time):")
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(top)
    r.free()
    redist.torch.clear_cache()
    redist.finalize()


if __name__ == "__main__":
    main()
