# SPDX-License-Identifier: Apache-2.0
"""Tuning run for the P=1 copy kernel and the execute() hot path (one GPU, one rank).

    python perf/tune_copy.py [--out FILE]

Part 1 -- bandwidth: an n³ complex64 Slab.X -> Slab.Y at P=1 is one contiguous copy. The real
lowering (engine, one graph) and kernel variants are timed -- vectors in flight per thread
(REDIST_ILP) x blocks per SM -- next to the floor, a bare cuMemcpyDtoDAsync of the same bytes.
Variants are made by editing the kernel source and ``blocks_for`` in this process only.

Part 2 -- latency at 32³: per-iteration time of ``Redistribute.execute()``, of the engine's
``execute``, of a bare ctypes ``cuGraphLaunch`` of the same graph, and of a bare memcpy, so the
host cost of each layer shows. Medians over repetitions, CUDA events.
"""

from __future__ import annotations

import argparse
import re

from cuda_timing import per_iteration_us  # perf/cuda_timing.py (the script's folder is on sys.path)


LOAD = "v[i] = *reinterpret_cast<const T*>(src0 + (u64)so + (u64)u * V);"
STORE = "if (d[i]) *d[i] = v[i];"
HINTS = {
    "plain": (LOAD, STORE),
    "cs": ("v[i] = __ldcs(reinterpret_cast<const T*>(src0 + (u64)so + (u64)u * V));", "if (d[i]) __stcs(d[i], v[i]);"),
    "ldg_cs": ("v[i] = __ldg(reinterpret_cast<const T*>(src0 + (u64)so + (u64)u * V));", "if (d[i]) __stcs(d[i], v[i]);"),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--ilp", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--per-sm", type=int, nargs="+", default=[8, 32, 1024])
    ap.add_argument("--hints", nargs="+", default=["plain"], choices=sorted(HINTS),
                    help="cache hints of the copy's loads/stores: plain, cs (__ldcs/__stcs), ldg_cs (__ldg/__stcs)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import cupy as cp

    import redist
    from redist.engine.backend import LowerOptions, lower
    from redist.engine.cuda import kernels
    from redist.engine.plan import make_plan

    redist.initialize()
    ctx = redist.get_context()
    rt = ctx.cuda
    assert rt is not None and ctx.process_group.nranks == 1, "one rank with a GPU"
    drv = rt.driver
    stream = cp.cuda.Stream(non_blocking=True)
    sp = stream.ptr

    def timed(fn, iters, reps=9, warm=3):
        return per_iteration_us(fn, stream, iters=iters, reps=reps, warm=warm)

    from cuda.bindings import driver

    def memcpy(dst, src, nbytes):
        return lambda: driver.cuMemcpyDtoDAsync(dst, src, nbytes, sp)

    lines = ["| case | variant | µs per iteration | vs floor |", "|---|---|---|---|"]
    n = args.n
    shape = (n, n, n)
    a = cp.zeros(shape, dtype=cp.complex64)
    b = cp.zeros_like(a)
    floor = timed(memcpy(int(b.data.ptr), int(a.data.ptr), a.nbytes), 20)
    lines.append(f"| {n}³ | cuMemcpyDtoDAsync (floor) | {floor:.1f} | 1.00 |")
    box = ((0, 0, 0), shape)
    plan = make_plan(0, [box], [box], itemsize=8)
    exe = lower(plan, ctx.engine, LowerOptions(backend="cuda"))
    exe.rebind_input(int(a.data.ptr))
    t = timed(lambda: exe.execute(sp), 20)
    lines.append(f"| {n}³ | redist as lowered ({' -> '.join(exe.launch_list.node_labels())}) | {t:.1f} | "
                 f"{t / floor:.3f} |")
    exe.free()
    src = kernels._template()
    orig_blocks_for, orig_ilp = kernels.blocks_for, kernels.ILP
    assert LOAD in src and STORE in src, "copy.cu changed: update the hint patterns"
    for hint, ilp, per_sm in [(h, i, p) for h in args.hints for i in args.ilp for p in args.per_sm]:
        text = re.sub(r"#define REDIST_ILP \d+", f"#define REDIST_ILP {ilp}", src)
        text = text.replace(LOAD, HINTS[hint][0]).replace(STORE, HINTS[hint][1])
        kernels._template = lambda text=text: text  # noqa: E731 -- this process only
        kernels.ILP = ilp

        def blocks_for(nbytes, sm_count, per_sm=per_sm, ilp=ilp):
            chunk = kernels.BLOCK * ilp * 16
            want = [max(1, kernels.ceil_div(x, chunk)) for x in nbytes]
            cap = max(sm_count * per_sm, len(nbytes))
            total = sum(want)
            return want if total <= cap else [max(1, int(w * cap / total)) for w in want]

        kernels.blocks_for = blocks_for
        rt._functions.clear()
        plan = make_plan(0, [box], [box], itemsize=8)
        exe = lower(plan, ctx.engine, LowerOptions(backend="cuda"))
        exe.rebind_input(int(a.data.ptr))
        t = timed(lambda exe=exe: exe.execute(sp), 20)
        lines.append(f"| {n}³ | kernel {hint}, ILP {ilp}, {per_sm} blocks/SM | {t:.1f} | {t / floor:.3f} |")
        print(lines[-1], flush=True)
        exe.free()
    kernels.blocks_for, kernels.ILP = orig_blocks_for, orig_ilp
    kernels._template = lambda: src
    rt._functions.clear()

    # part 2: latency layers at 32³
    m = 32
    g = (m, m, m)
    x = cp.zeros(g, dtype=cp.complex64)
    y = cp.zeros_like(x)
    r = redist.Redistribute(x, redist.Slab.X, redist.Slab.Y, stream=stream)
    r.plan(stream=stream)
    api = timed(lambda: r.execute(stream=stream), 200)
    exe = r._exe
    eng = timed(lambda: exe.execute(sp), 200)
    handle = exe._exec.handle
    launch = drv.cuGraphLaunch
    bare = timed(lambda: launch(handle, sp), 200)
    cpy = timed(memcpy(int(y.data.ptr), int(x.data.ptr), x.nbytes), 200)
    for name, t in (("Redistribute.execute()", api), ("engine execute()", eng), ("bare ctypes cuGraphLaunch", bare),
                    ("cuMemcpyDtoDAsync (cuda.bindings)", cpy)):
        lines.append(f"| {m}³ | {name} | {t:.2f} | {t / bare:.2f}× bare launch |")
    r.free()
    text = "\n".join(lines)
    print(text, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
