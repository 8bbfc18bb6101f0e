# SPDX-License-Identifier: Apache-2.0
"""GPU worker for tests/gpu/test_cuda.py: ``mpiexec -n P python cuda_worker.py MODE [options]``.

Modes: ``engine`` (redist.engine.cuda at the plan level: layouts, dimensions, item sizes,
transports, alignment, eager vs graph), ``replay`` (1000 launches with a rebind of input and
out= every iteration, bit-exact), ``api`` (redist.Redistribute / redistribute / symmetric memory
with cupy, torch, numpy-on-GPU and RawArray), ``bench`` (timings). Failures are reduced across
ranks; rank 0 prints ALL OK when every rank passed. One rank per GPU (device = local rank), or several on one under REDIST_SHARED_GPU=1.
"""

from __future__ import annotations

import gc
import math
import os
import sys
import time
import traceback
import weakref

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from helpers import (  # noqa: E402
    expected_bytes, global_bytes, operand_bytes, overlap_boxes, pencil_boxes, random_boxes, slab_boxes, strided_operand)

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
SHARED = os.environ.get("REDIST_SHARED_GPU", "") == "1"  # several ranks on one GPU
# NVSHMEM barriers cannot be captured with several ranks per GPU; at P=1 both give the same graph
SIGNALS = ("epoch",) if SHARED or P == 1 else ("epoch", "barrier")


def slab(gshape, axis):
    return slab_boxes(gshape, P, axis)


def pencils(gshape, a, b):
    return pencil_boxes(gshape, P, a, b)


def log(*a):
    print(f"[rank {rank}]", *a, flush=True)


def local_device() -> int:
    import cupy as cp

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    lr = node.Get_rank()
    node.Free()
    return lr % cp.cuda.runtime.getDeviceCount()


# ------------------------------------------------------------------------------------------------
# global patterns and boxes (identical on every rank)
# ------------------------------------------------------------------------------------------------


def engine_lower(rt):
    """``lower(plan, transport=...)`` on the CUDA backend of runtime ``rt`` (engine level)."""
    from redist.engine.backend import Context, LowerOptions, lower

    ctx = Context(rt.comm, rt)
    return lambda plan, transport="auto", signal="epoch": lower(
        plan, ctx, LowerOptions(backend="cuda", transport=transport, signal=signal))


class Fails:
    def __init__(self):
        self.items = []

    def add(self, what):
        self.items.append(what)
        log("FAIL", what)


def agree_ok(ok: bool) -> bool:
    return bool(comm.allreduce(int(ok), op=MPI.MIN))


# ------------------------------------------------------------------------------------------------
# engine mode
# ------------------------------------------------------------------------------------------------


def cupy_bytes(ptr, nbytes):
    """Device bytes at ptr (synchronous copy to host)."""
    import cupy as cp

    if nbytes == 0:
        return np.zeros(0, np.uint8)
    mem = cp.cuda.UnownedMemory(ptr, nbytes, None, device_id=cp.cuda.Device().id)
    a = cp.ndarray((nbytes,), dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(mem, 0))
    return cp.asnumpy(a)


def engine_cases():
    rng = np.random.default_rng(1234)
    cases = []
    g3 = (12, 10, 8)
    for t in ("auto", "put"):
        for a, b in ((0, 1), (1, 0), (0, 2), (2, 1), (1, 2)):
            cases.append(dict(name=f"slab{a}{b}-{t}", g=g3, ib=slab(g3, a), ob=slab(g3, b), it=8, t=t))
    cases.append(
        dict(name="pencils-xy-yz", g=g3, ib=pencils(g3, 0, 1), ob=pencils(g3, 1, 2), it=16, t="auto")
    )
    cases.append(dict(name="pencils-put", g=g3, ib=pencils(g3, 0, 1), ob=pencils(g3, 1, 2), it=4, t="put"))
    for it in (1, 2, 3, 4, 8, 12, 16):
        cases.append(
            dict(
                name=f"itemsize{it}",
                g=(7, 9, 5),
                ib=slab((7, 9, 5), 0),
                ob=slab((7, 9, 5), 1),
                it=it,
                t="auto" if it % 2 else "put",
            )
        )
    for nd, g in ((1, (37,)), (2, (9, 11)), (4, (4, 5, 3, 6)), (5, (3, 4, 2, 5, 3))):
        cases.append(dict(name=f"{nd}d", g=g, ib=slab(g, 0), ob=slab(g, nd - 1), it=4, t="auto"))
        cases.append(dict(name=f"{nd}d-F", g=g, ib=slab(g, 0), ob=slab(g, nd - 1), it=8, t="put", order="F"))
    cases.append(
        dict(name="uneven-empty", g=(1, 5, 3), ib=slab((1, 5, 3), 0), ob=slab((1, 5, 3), 1), it=8, t="auto")
    )
    for k in range(6):
        g = tuple(int(x) for x in rng.integers(2, 9, int(rng.integers(2, 5))))
        cases.append(
            dict(
                name=f"random{k}",
                g=g,
                ib=random_boxes(g, P, rng),
                ob=random_boxes(g, P, rng),
                it=int(rng.choice([1, 2, 4, 8, 16])),
                t=["auto", "put"][k % 2],
                order="CF"[k % 2],
            )
        )
    cases.append(dict(name="padded", g=g3, ib=slab(g3, 0), ob=slab(g3, 1), it=8, t="auto", pad=True))
    cases.append(dict(name="padded-put", g=g3, ib=slab(g3, 0), ob=slab(g3, 2), it=4, t="put", pad=True))
    cases.append(
        dict(name="transposed", g=g3, ib=slab(g3, 0), ob=slab(g3, 1), it=8, t="auto", transposed=True)
    )
    cases.append(dict(name="reversed", g=g3, ib=slab(g3, 0), ob=slab(g3, 1), it=8, t="auto", reversed=True))
    cases.append(
        dict(name="reversed-put", g=g3, ib=slab(g3, 0), ob=slab(g3, 2), it=4, t="put", reversed=True)
    )
    # permuted results: the kernels write the transposed layout directly
    cases.append(dict(name="permuted-021", g=g3, ib=slab(g3, 0), ob=slab(g3, 1), it=8, t="auto", order=(0, 2, 1)))
    cases.append(dict(name="permuted-201-put", g=g3, ib=slab(g3, 1), ob=slab(g3, 0), it=4, t="put", order=(2, 0, 1)))
    cases.append(dict(name="pencils-permuted", g=g3, ib=pencils(g3, 0, 1), ob=pencils(g3, 1, 2), it=8, t="auto",
                      order=(1, 0, 2)))
    # overlapping boxes (allow_overlap): allgather, halos, replicated input, random mixes
    full = ((0, 0, 0), g3)
    cases.append(dict(name="allgather", g=g3, ib=slab(g3, 0), ob=[full] * P, it=8, t="auto"))
    cases.append(dict(name="allgather-put", g=g3, ib=slab(g3, 1), ob=[full] * P, it=4, t="put"))
    halo = [((lo[0], max(0, lo[1] - 1), lo[2]), (hi[0], min(g3[1], hi[1] + 1), hi[2])) if lo[1] < hi[1] else (lo, hi)
            for lo, hi in slab(g3, 1)]
    cases.append(dict(name="halo", g=g3, ib=slab(g3, 0), ob=halo, it=8, t="auto"))
    cases.append(dict(name="replicated", g=g3, ib=[full] * P, ob=slab(g3, 2), it=8, t="auto"))
    nest = [((1, 1, 1), (5, 6, 4)), ((6, 0, 2), (11, 4, 8)), ((0, 7, 0), (3, 10, 3))][: P - 1] + [full]
    for t in ("auto", "put"):  # the last rank sends several boxes per peer (around the others' boxes)
        cases.append(dict(name=f"several-boxes-{t}", g=g3, ib=nest, ob=[full] * P, it=8, t=t))
    for k in range(4):
        g = tuple(int(x) for x in rng.integers(2, 8, int(rng.integers(1, 5))))
        label, ib, ob = overlap_boxes(g, P, rng)
        cases.append(dict(name=f"overlap{k} {label}", g=g, ib=ib, ob=ob, it=int(rng.choice([1, 4, 8, 16])),
                          t=["auto", "put"][k % 2], order="CF"[k % 2]))
    cases.append(dict(name="misaligned", g=g3, ib=slab(g3, 0), ob=slab(g3, 1), it=16, t="auto", offset=4))
    cases.append(dict(name="misaligned-put", g=g3, ib=slab(g3, 0), ob=slab(g3, 1), it=8, t="put", offset=2))
    return cases


def run_engine(fails: Fails):
    import cupy as cp
    from redist.engine import geometry as geo
    from redist.engine.cuda import runtime
    from redist.engine.plan import make_plan

    dev = local_device()
    cp.cuda.Device(dev).use()
    t0 = time.perf_counter()
    rt = runtime.start(comm, dev, shared_gpu=SHARED)
    lower = engine_lower(rt)
    log(f"runtime up in {time.perf_counter() - t0:.2f} s: {rt!r}, sm_count {rt.sm_count}")
    stream = cp.cuda.Stream(non_blocking=True)
    try:
        cases = [dict(c, sig=sig) for sig in SIGNALS for c in engine_cases() if sig == "epoch" or c["t"] != "push"]
        for c in cases:
            name, g, ib, ob, it = c["name"] + ("" if c["sig"] == "epoch" else "/barrier"), c["g"], c["ib"], c["ob"], c["it"]
            order = c.get("order", "C")
            shapes = [geo.box_shape(b) for b in ib]
            strides = [geo.dense_strides(s, order) for s in shapes]
            if c.get("pad"):
                strides = [(s[1] * (s[2] + 3) + 5, s[2] + 3, 1) for s in shapes]
            if c.get("transposed"):
                strides = [(1, s[0], s[0] * s[1]) for s in shapes]
            if c.get("reversed"):  # a[::-1, :, ::-1] of a C array: negative strides
                strides = [(-s[1] * s[2], s[2], -1) for s in shapes]
            ok = True
            exe = None
            try:
                plan = make_plan(rank, ib, ob, itemsize=it, in_strides=strides, out_order=order)
                exe = lower(plan, transport=c["t"], signal=c["sig"])
                if name.startswith("slab01"):
                    log(f"{name}: {exe.describe()}")
                outs = []
                for k, seed in enumerate((11, 22)):
                    G = global_bytes(g, it, seed)
                    a, origin = strided_operand(G, ib[rank], strides[rank], it)
                    off = c.get("offset", 0) + (it if k == 1 and it < 16 else 0)
                    buf = cp.empty(len(a) + off + 64, dtype=cp.uint8)
                    buf[off : off + len(a)].set(a)
                    cp.cuda.Device().synchronize()  # the copy ran on the legacy stream, execute on ours
                    exe.rebind_input(int(buf.data.ptr) + off + origin)
                    want = expected_bytes(G, ob[rank], order)
                    for mode in ("graph", "eager", "graph"):
                        exe.execute(stream.ptr, graph=(mode == "graph"))
                        stream.synchronize()
                        if k == 0 and mode == "graph" and name.startswith("slab01"):
                            log(f"{name}: captured graph nodes {exe._exec.count_nodes()}")
                        got = cupy_bytes(exe.output_ptr, len(want))
                        if not np.array_equal(got, want):
                            bad = np.flatnonzero(got != want)
                            fails.add(
                                f"engine {name} ({c['t']}, operand {k}, {mode}): {len(bad)} bytes differ, "
                                f"first at {bad[0]}; vector widths {[x.launch.vec for x in exe._kernels.values()]}"
                            )
                            ok = False
                        comm.Barrier()  # nobody writes the next execute into a result still being read
                    outs.append(buf)
            except Exception:  # noqa: BLE001
                fails.add(f"engine {name}: {traceback.format_exc()}")
                ok = False
            if exe is not None:
                exe.free()
            if not agree_ok(ok):
                log(f"engine: stopping after case {name}")
                break
            if rank == 0:
                log(f"engine case {name} ok")
    finally:
        runtime.stop()


# ------------------------------------------------------------------------------------------------
# replay mode: 1000 launches, rebind of input and out= every iteration
# ------------------------------------------------------------------------------------------------


def run_replay(fails: Fails, iters=1000):
    import cupy as cp
    from redist.engine import geometry as geo
    from redist.engine.buffer import Buffer
    from redist.engine.cuda import runtime
    from redist.engine.plan import make_plan

    dev = local_device()
    cp.cuda.Device(dev).use()
    rt = runtime.start(comm, dev, shared_gpu=SHARED)
    lower = engine_lower(rt)
    stream = cp.cuda.Stream(non_blocking=True)
    g, it = (40, 24, 16), 8
    ib, ob = slab(g, 0), slab(g, 1)
    try:
        for transport, signal in [(t, sig) for sig in SIGNALS for t in ("auto", "put")]:
            plan = make_plan(rank, ib, ob, itemsize=it)
            exe = lower(plan, transport=transport, signal=signal)
            nb = plan.out_elements * it
            ins, wants, in_ptrs = [], [], []
            for k, seed in enumerate((3, 4)):
                G = global_bytes(g, it, seed)
                a = operand_bytes(G, ib[rank], geo.dense_strides(plan.in_shape), it)
                # the second operand is 8-byte aligned only: the vector width switches every iteration
                off = 8 * k
                buf = cp.empty(len(a) + 16, dtype=cp.uint8)
                buf[off : off + len(a)].set(a)
                ins.append(buf)
                in_ptrs.append(int(buf.data.ptr) + off)
                wants.append(cp.asarray(expected_bytes(G, ob[rank], "C")))
            outs = [
                exe.result_ptr,
                rt.sym_alloc(exe.result_bytes, owner="user"),
                rt.sym_alloc(exe.result_bytes, owner="user"),
            ]
            out_bufs = [None] + [Buffer(p, plan.out_shape, plan.out_strides, it, "cuda", dev) for p in outs[1:]]
            views = [
                cp.ndarray(
                    (nb,),
                    cp.uint8,
                    cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(p, max(nb, 1), None, device_id=dev), 0),
                )
                for p in outs
            ]
            errs = cp.zeros((), dtype=cp.int64)
            cp.cuda.Device().synchronize()
            comm.Barrier()
            t0 = time.perf_counter()
            with stream:
                for i in range(iters):
                    k, o = i % 2, i % 3
                    exe.rebind_input(in_ptrs[k])
                    exe.bind_output(out_bufs[o])
                    eager = i % 97 == 50
                    exe.execute(stream.ptr, sync=(i % 4 != 3), graph=not eager)
                    if nb:
                        errs += cp.count_nonzero(views[o] != wants[k])
            stream.synchronize()
            dt = time.perf_counter() - t0
            n = int(errs)
            if n:
                fails.add(f"replay {transport}/{signal}: {n} wrong bytes over {iters} iterations")
            log(f"replay {transport}/{signal}: {iters} iterations in {dt:.3f} s, {n} wrong bytes; {exe.describe()}")
            comm.Barrier()
            exe.free()
            rt.sym_free(outs[1])
            rt.sym_free(outs[2])
    finally:
        runtime.stop()


# ------------------------------------------------------------------------------------------------
# api mode: redist.Redistribute on GPUs
# ------------------------------------------------------------------------------------------------


def run_api(fails: Fails):
    import cupy as cp
    import redist
    import torch
    from redist import Slab

    dev = local_device()
    cp.cuda.Device(dev).use()
    torch.cuda.set_device(dev)
    redist.initialize(device_id=dev)
    ctx = redist.get_context()
    assert ctx.cuda is not None, "no CUDA runtime in the context"

    def check(name, got, want):
        got = np.asarray(got)
        if got.shape != want.shape or not np.array_equal(got, want):
            fails.add(f"api {name}: result differs (shape {got.shape} vs {want.shape})")
            return False
        return True

    def step(name, fn):
        ok = True
        try:
            fn()
        except Exception:  # noqa: BLE001
            fails.add(f"api {name}: {traceback.format_exc()}")
            ok = False
        if not agree_ok(ok):
            raise RuntimeError(f"api: a rank failed in {name}")
        if rank == 0:
            log(f"api {name} ok")

    g = (8, 6, 10)
    glob = np.arange(math.prod(g), dtype=np.float64).reshape(g)
    ibox, obox = Slab.X.box(rank, g, nranks=P), Slab.Y.box(rank, g, nranks=P)
    isl = tuple(slice(lo, hi) for lo, hi in zip(ibox.lower, ibox.upper))
    osl = tuple(slice(lo, hi) for lo, hi in zip(obox.lower, obox.upper))

    def cupy_basic():
        for dtype, order, transport in (
            ("complex64", "C", "auto"),
            ("float32", "F", "put"),
            ("int16", "C", "push"),
        ):
            a = cp.asarray(np.asarray(glob[isl], dtype=dtype), order=order)
            with redist.Redistribute(a, Slab.X, Slab.Y, options={"transport": transport}) as r:
                r.plan()
                res = r.execute()
                cp.cuda.get_current_stream().synchronize()
                want = np.asarray(glob[osl], dtype=dtype)
                check(f"cupy {dtype} {order} {transport}", cp.asnumpy(res), want)
                assert isinstance(res, cp.ndarray) and res.dtype == np.dtype(dtype)
                assert (order == "F") == res.flags.f_contiguous or res.ndim < 2 or res.size <= 1
                res2 = r.execute()
                assert res2.data.ptr == res.data.ptr, "the result must be persistent"
                # reset_operand (checked) and unchecked with a new array
                b = (a * 2).copy(order=order)  # same layout: reset_operand_unchecked does no checks
                assert b.strides == a.strides
                r.reset_operand_unchecked(b)
                res = r.execute()
                cp.cuda.get_current_stream().synchronize()
                check(f"cupy {dtype} unchecked", cp.asnumpy(res), (want * 2).astype(dtype))
                r.reset_operand(a)
                check(f"cupy {dtype} reset", cp.asnumpy(r.execute(release_workspace=True)), want)
                check(
                    f"cupy {dtype} after release_workspace",
                    cp.asnumpy(r.execute(sync_symmetric_memory=False)),
                    want,
                )
                assert r.graph() != 0

    def signals():
        """signal="epoch" and "barrier" give the same result; "barrier" is refused, on every rank,
        where ranks share a GPU (NVSHMEM barriers cannot be captured there)."""
        a = cp.asarray(glob[isl])
        for signal in ("epoch", "barrier"):
            for transport in ("push", "put"):
                with redist.Redistribute(a, Slab.X, Slab.Y, options={"signal": signal, "transport": transport}) as r:
                    if signal == "barrier" and ctx.cuda.shared_gpu and P > 1:
                        try:
                            r.plan()
                        except redist.NotSupportedError as e:
                            assert "several ranks on one GPU" in str(e), str(e)
                            continue
                        raise AssertionError("signal='barrier' with a shared GPU must raise NotSupportedError")
                    r.plan()
                    for _ in range(3):
                        res = r.execute()
                    cp.cuda.get_current_stream().synchronize()
                    check(f"signal {signal} {transport}", cp.asnumpy(res), glob[osl])

    def permuted_and_overlap():
        """result_layout as a permutation, allow_overlap (allgather, halo, replicated input), cupy operands."""
        a = cp.asarray(glob[isl])
        with redist.Redistribute(a, Slab.X, Slab.Y, options={"result_layout": (0, 2, 1)}) as r:
            r.plan()
            res = r.execute()
            cp.cuda.get_current_stream().synchronize()
            check("permuted (0, 2, 1)", cp.asnumpy(res), glob[osl])
            assert res.strides[1] == res.itemsize, f"axis 1 not contiguous: strides {res.strides}"
        whole = redist.Box((0, 0, 0), g)
        halo = redist.Box((0, max(0, obox.lower[1] - 1), 0), (g[0], min(g[1], obox.upper[1] + 1), g[2]))
        if obox.lower[1] == obox.upper[1]:
            halo = obox
        hsl = tuple(slice(lo, hi) for lo, hi in zip(halo.lower, halo.upper))
        for name, src, din, dout, want in (
            ("allgather", a, Slab.X, whole, glob),
            ("halo", a, Slab.X, halo, glob[hsl]),
            ("replicated input", cp.asarray(glob), whole, Slab.Y, glob[osl]),
        ):
            for transport in ("auto", "put"):
                with redist.Redistribute(src, din, dout, options={"allow_overlap": True, "transport": transport}) as r:
                    r.plan()
                    for _ in range(2):
                        res = r.execute()
                    cp.cuda.get_current_stream().synchronize()
                    check(f"{name} {transport}", cp.asnumpy(res), want)

    def strided_out():
        """out= of other strides on GPUs: the interior of a ghosted symmetric array (the same offset on
        every rank) and a reversed view; alternating with the engine-owned result (cached variants)."""
        a = cp.asarray(glob[isl])
        n = obox.box_shape
        for transport in ("auto", "put"):
            big = redist.allocate_symmetric_memory(tuple(x + 2 for x in g), "cupy", dtype=np.float64,
                                                   make_symmetric=True)
            with redist.Redistribute(a, Slab.X, Slab.Y, options={"transport": transport}) as r:
                r.plan()
                for k in range(2):
                    big[...] = -1.0
                    cp.cuda.Device().synchronize()
                    inner = big[1:1 + n[0], 1:1 + n[1], 1:1 + n[2]]
                    got = r.execute(out=inner)
                    cp.cuda.get_current_stream().synchronize()
                    assert got is inner
                    check(f"ghosted interior {transport} #{k}", cp.asnumpy(inner), glob[osl])
                    outside = int((cp.asnumpy(big) != -1.0).sum()) - inner.size
                    assert outside == 0, f"{outside} ghost cells written"
                    rev = big[g[0] - 1::-1, :n[1], :n[2]]  # axis 0 reversed (Slab.Y: every rank holds all of it)
                    r.execute(out=rev)
                    cp.cuda.get_current_stream().synchronize()
                    check(f"reversed {transport} #{k}", cp.asnumpy(rev), glob[osl])
                    check(f"engine-owned after strided {transport} #{k}", cp.asnumpy(r.execute()), glob[osl])
                # more stride patterns than the executable keeps (LRU: the oldest is freed, collectively)
                other = redist.allocate_symmetric_memory(tuple(x + 4 for x in g), "cupy", dtype=np.float64,
                                                         make_symmetric=True)
                views = [big[1:1 + n[0], 1:1 + n[1], 1:1 + n[2]], big[g[0]:0:-1, 1:1 + n[1], 1:1 + n[2]],
                         big[1:1 + n[0], 1:1 + n[1], g[2]:0:-1], big[g[0]:0:-1, 1:1 + n[1], g[2]:0:-1],
                         other[2:2 + n[0], 2:2 + n[1], 2:2 + n[2]]]
                for rep in range(2):
                    for i, view in enumerate(views):
                        r.execute(out=view)
                        cp.cuda.get_current_stream().synchronize()
                        check(f"layout {i} {transport} round {rep}", cp.asnumpy(view), glob[osl])
                # release_operand drops every reference to the operand, in every layout variant
                b = cp.asarray(glob[isl])
                ref = weakref.ref(b)
                r.reset_operand(b)
                r.execute(out=views[0])
                r.release_operand()
                del b
                gc.collect()
                assert ref() is None, "the released operand is still referenced"
                r.reset_operand(a)
            redist.free_symmetric_memory(other)
            redist.free_symmetric_memory(big)

    def torch_basic():
        for dtype in (torch.float32, torch.bfloat16, torch.complex128):
            a = torch.as_tensor(glob[isl], device=f"cuda:{dev}").to(dtype)
            torch.cuda.synchronize()
            s = torch.cuda.Stream()
            with redist.Redistribute(a, Slab.X, Slab.Y, stream=s) as r:
                r.plan(stream=s)
                res = r.execute(stream=s)
                s.synchronize()
                assert isinstance(res, torch.Tensor) and res.dtype == dtype and res.is_cuda
                want = torch.as_tensor(glob[osl]).to(dtype)
                if not torch.equal(res.cpu(), want):
                    fails.add(f"api torch {dtype}: result differs")
                res = r.execute()  # current torch stream
                torch.cuda.current_stream().synchronize()
                if not torch.equal(res.cpu(), want):
                    fails.add(f"api torch {dtype} (current stream): result differs")

    def host_on_gpu():
        a = np.ascontiguousarray(glob[isl].astype(np.float32))
        with redist.Redistribute(a, Slab.X, Slab.Y, options={"execution": "cuda"}) as r:
            r.plan()
            res = r.execute()
            assert isinstance(res, np.ndarray)
            check("numpy on GPU", res, glob[osl].astype(np.float32))
            r.reset_operand(a * 3)
            check("numpy on GPU reset", r.execute(), glob[osl].astype(np.float32) * 3)
        t = torch.as_tensor(glob[isl].astype(np.float32))
        with redist.Redistribute(t, Slab.X, Slab.Y, options={"execution": "cuda", "transport": "put"}) as r:
            r.plan()
            res = r.execute()
            assert isinstance(res, torch.Tensor) and not res.is_cuda
            check("torch CPU on GPU", res.numpy(), glob[osl].astype(np.float32))

    def raw_and_streams():
        from cuda.core import Device

        a = cp.asarray(glob[isl])
        raw = redist.RawArray(
            int(a.data.ptr), a.shape, None, 8, memory="cuda", device_id=dev, dtype=np.float64
        )
        with redist.Redistribute(raw, Slab.X, Slab.Y) as r:
            r.plan()
            res = r.execute(stream=0)
            cp.cuda.Device(dev).synchronize()
            got = (
                cupy_bytes(res.ptr, res.shape and math.prod(res.shape) * 8)
                .view(np.float64)
                .reshape(res.shape)
            )
            check("RawArray", got, glob[osl])
        cs = cp.cuda.Stream(non_blocking=True)
        cp.cuda.Device(dev).synchronize()
        core = Device(dev).create_stream()
        with redist.Redistribute(a, Slab.X, Slab.Y) as r:
            r.plan(stream=cs)
            for s in (cs, cs.ptr, core, None):
                res = r.execute(stream=s)
                cp.cuda.Device(dev).synchronize()
                check(f"stream {type(s).__name__}", cp.asnumpy(res), glob[osl])
        core.close()

    def out_and_function_form():
        a = cp.asarray(glob[isl])
        o1 = redist.allocate_symmetric_memory(obox.box_shape, cp, dtype=np.float64, make_symmetric=True)
        o2 = redist.allocate_symmetric_memory(obox.box_shape, "cupy", dtype="float64", make_symmetric=True)
        with redist.Redistribute(a, Slab.X, Slab.Y, options={"blocking": True}) as r:
            r.plan()
            for i in range(6):
                o = (o1, o2, None)[i % 3]
                res = r.execute(out=o)
                if o is not None:
                    assert res is o
                check(f"out= {i}", cp.asnumpy(res), glob[osl])
                comm.Barrier()
        res = redist.redistribute(a, Slab.X, Slab.Y)
        cp.cuda.get_current_stream().synchronize()
        check("function form", cp.asnumpy(res), glob[osl])
        redist.free_symmetric_memory(res, o1, o2)
        for bad, exc, msg in (
            (lambda: redist.free_symmetric_memory(o1), ValueError, "double free"),
            (lambda: redist.allocate_symmetric_memory((2, 2), "jax"), ValueError, "The package must be one of"),
            # numpy is host symmetric memory's package: an array not allocated there is refused by name
            (lambda: redist.free_symmetric_memory(np.zeros(3)), ValueError, "not in host symmetric memory"),
            (lambda: redist.free_symmetric_memory(cp.zeros(3)), ValueError, "symmetric heap"),
        ):
            try:
                bad()
                fails.add(f"api symmetric errors: expected {exc.__name__} '{msg}'")
            except exc as e:
                if msg not in str(e):
                    fails.add(f"api symmetric errors: {exc.__name__} without '{msg}': {e}")
        t = redist.allocate_symmetric_memory((3, 4), torch, dtype=torch.float32, axis_order="F")
        assert t.is_cuda and t.shape == (3, 4) and t.stride() == (1, 3)
        t.fill_(1.5)
        redist.free_symmetric_memory(t)

    def wrong_device():
        # rank 0 hands in an array on the other GPU: every rank must raise the same error
        if cp.cuda.runtime.getDeviceCount() < 2:
            return
        other = (dev + 1) % cp.cuda.runtime.getDeviceCount()
        with cp.cuda.Device(other if rank == 0 else dev):
            a = cp.asarray(glob[isl])
        got = None
        try:
            redist.Redistribute(a, Slab.X, Slab.Y)
        except ValueError as e:
            got = str(e)
        every = comm.allgather(got)
        if got is None or "rank 0" not in got or "device" not in got or len(set(every)) != 1:
            fails.add(f"api wrong device: expected the same error naming rank 0 on every rank, got {every}")

    def negative_strides():
        a = cp.asarray(glob[isl])[::-1].copy()[::-1]  # the same values, memory reversed
        assert a.strides[0] < 0
        with redist.Redistribute(a, Slab.X, Slab.Y) as r:
            r.plan()
            res = r.execute()
            cp.cuda.get_current_stream().synchronize()
            check("cupy a[::-1]", cp.asnumpy(res), glob[osl])

    def dropped_objects():
        import gc

        rt = ctx.cuda
        gc.collect()
        before = len(rt._sym)
        r = redist.Redistribute(cp.asarray(glob[isl]), Slab.X, Slab.Y)
        r.plan()
        own = len(rt._sym) - before  # what one live object holds (result, control block)
        r.free()
        if len(rt._sym) != before:
            fails.add(f"api free(): {len(rt._sym) - before} symmetric allocations left behind")
        for _ in range(20):
            r = redist.Redistribute(cp.asarray(glob[isl]), Slab.X, Slab.Y)
            r.plan()
            r.execute()
            del r  # never freed: its graph goes now, its symmetric memory at the next collective point
        gc.collect()
        r = redist.Redistribute(cp.asarray(glob[isl]), Slab.X, Slab.Y)
        r.plan()  # a collective point: what every rank dropped is freed
        after = len(rt._sym)
        if after != before + own:
            fails.add(f"api dropped objects: {before} symmetric allocations before, {after} after 20 dropped "
                      f"objects and one live one (which holds {own})")
        check("after dropped objects", cp.asnumpy(r.execute()), glob[osl])
        r.free()

    try:
        step("negative strides", negative_strides)
        step("dropped objects", dropped_objects)
        step("wrong device", wrong_device)
        step("cupy", cupy_basic)
        step("signals", signals)
        step("permuted and overlap", permuted_and_overlap)
        step("strided out=", strided_out)
        step("torch", torch_basic)
        step("host on GPU", host_on_gpu)
        step("raw and streams", raw_and_streams)
        step("out= and function form", out_and_function_form)
    except RuntimeError as e:
        log(str(e))
    redist.finalize()


# ------------------------------------------------------------------------------------------------
# bench mode
# ------------------------------------------------------------------------------------------------


def run_bench(fails: Fails, sizes=(32, 64, 128, 256, 512), transports=("auto",)):
    import statistics

    import cupy as cp
    import redist
    from redist import Slab

    dev = local_device()
    cp.cuda.Device(dev).use()
    redist.initialize(device_id=dev)
    stream = cp.cuda.Stream(non_blocking=True)

    def timed(fn, iters, reps=7, warm=5):
        for _ in range(warm):
            fn()
        stream.synchronize()
        ts = []
        for _ in range(reps):
            comm.Barrier()
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(stream)
            for _ in range(iters):
                fn()
            e1.record(stream)
            e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3 / iters)
        return max(comm.allgather(statistics.median(ts)))

    rows = []
    for transport in transports:
        for n in sizes:
            g = (n, n, n)
            ib = Slab.X.box(rank, g, nranks=P)
            with stream:
                a = (
                    cp.random.random(ib.box_shape, dtype=cp.float32)
                    + 1j * cp.random.random(ib.box_shape, dtype=cp.float32)
                ).astype(cp.complex64)
                a2 = a * 2
            stream.synchronize()
            iters = 200 if n <= 128 else (50 if n == 256 else 10)
            r = redist.Redistribute(a, Slab.X, Slab.Y, options={"transport": transport}, stream=stream)
            r.plan(stream=stream)
            row = dict(n=n, P=P, transport=transport, MB=round(n**3 * 8 / 1e6, 1))
            row["redist_us"] = timed(lambda r=r: r.execute(stream=stream), iters)
            exe = r._exe
            if rank == 0 and n == sizes[0]:
                log(f"graph nodes {exe._exec.count_nodes()}\n{exe.describe()}")
            row["engine_us"] = timed(lambda exe=exe: exe.execute(stream.ptr), iters)
            stream.synchronize()
            comm.Barrier()
            k = 300 if n <= 128 else 40
            t0 = time.perf_counter()
            for _ in range(k):
                r.execute(stream=stream)
            row["execute_host_us"] = max(comm.allgather((time.perf_counter() - t0) / k * 1e6))
            stream.synchronize()
            comm.Barrier()
            t0 = time.perf_counter()
            for i in range(k):
                r.reset_operand_unchecked(a2 if i % 2 == 0 else a, stream=stream)
            row["rebind_host_us"] = max(comm.allgather((time.perf_counter() - t0) / k * 1e6))
            p1, p2 = int(a.data.ptr), int(a2.data.ptr)
            t0 = time.perf_counter()
            for i in range(k):
                exe.rebind_input(p2 if i % 2 == 0 else p1)
            row["engine_rebind_us"] = max(comm.allgather((time.perf_counter() - t0) / k * 1e6))
            r.reset_operand_unchecked(a, stream=stream)
            stream.synchronize()
            b = cp.empty_like(a)
            row["d2d_copy_us"] = timed(
                lambda a=a, b=b: b.data.copy_from_device_async(a.data, a.nbytes, stream), iters
            )
            r.free()
            a = a2 = b = None
            cp.get_default_memory_pool().free_all_blocks()
            rows.append(row)
            if rank == 0:
                log(row)
    if rank == 0:
        keys = [
            "n",
            "P",
            "transport",
            "MB",
            "redist_us",
            "engine_us",
            "d2d_copy_us",
            "execute_host_us",
            "rebind_host_us",
            "engine_rebind_us",
        ]
        print("| " + " | ".join(keys) + " |")
        for row in rows:
            print(
                "| "
                + " | ".join(f"{row[k]:.1f}" if isinstance(row[k], float) else str(row[k]) for k in keys)
                + " |"
            )
        out = os.environ.get("REDIST_BENCH_OUT")
        if out:
            import json

            with open(out, "w") as f:
                json.dump(rows, f, indent=1)
    redist.finalize()


def run_heap(fails: Fails):
    """With a small heap (NVSHMEM_SYMMETRIC_SIZE set by the caller), a too-large allocation fails
    cleanly on every rank, names the size to set, and the runtime keeps working."""
    import cupy as cp
    from redist.engine.cuda import runtime
    from redist.engine.errors import InvalidValueError

    dev = local_device()
    cp.cuda.Device(dev).use()
    rt = runtime.start(comm, dev, shared_gpu=SHARED)
    try:
        try:
            rt.sym_alloc(8 << 30)
            fails.add("heap: an 8 GiB symmetric allocation did not fail")
        except InvalidValueError as e:
            if "NVSHMEM_SYMMETRIC_SIZE" not in str(e) or "NVSHMEM_MAX_MEMORY_PER_GPU" not in str(e):
                fails.add(f"heap: message does not name the settings: {e}")
            if rank == 0:
                log(f"heap error: {e}")
        p = rt.sym_alloc(1 << 20)
        rt.sym_free(p)
    finally:
        runtime.stop()


def run_fields(fails: Fails):
    """Several fields in one exchange (a tuple of cupy arrays): every transport, rebinds of every
    field and of one, out= tuples (symmetric, one of them a ghosted interior), a bad out= on the last
    rank only, release_workspace; the graph is one launch for all of them."""
    import cupy as cp
    import redist
    from redist import Slab

    dev = local_device()
    cp.cuda.Device(dev).use()
    redist.initialize(device_id=dev)

    def check(name, got, want):
        got = cp.asnumpy(got)
        if got.shape != want.shape or not np.array_equal(got, want):
            fails.add(f"fields {name}: result differs (shape {got.shape} vs {want.shape})")

    g = (8, 6, 10)
    ibox, obox = Slab.X.box(rank, g, nranks=P), Slab.Y.box(rank, g, nranks=P)
    isl = tuple(slice(lo, hi) for lo, hi in zip(ibox.lower, ibox.upper))
    osl = tuple(slice(lo, hi) for lo, hi in zip(obox.lower, obox.upper))
    dtypes = (np.complex64, np.float32, np.float64)
    globs = [(np.arange(math.prod(g)).reshape(g) * (f + 1)).astype(dt) for f, dt in enumerate(dtypes)]
    n = obox.box_shape
    for transport in ("auto", "put"):
        ops = tuple(cp.asarray(G[isl]) for G in globs)
        twice = tuple(a * 2 for a in ops)
        with redist.Redistribute(ops, Slab.X, Slab.Y, options={"transport": transport}) as r:
            r.plan()
            for it in range(3):
                res = r.execute()
            cp.cuda.get_current_stream().synchronize()
            assert isinstance(res, tuple) and len(res) == 3
            for f, G in enumerate(globs):
                check(f"{transport} field {f}", res[f], G[osl])
                assert res[f].dtype == dtypes[f]
            again = r.execute()
            assert all(x.data.ptr == y.data.ptr for x, y in zip(res, again)), "results must be persistent"
            r.reset_operand_unchecked(twice)
            res = r.execute()
            cp.cuda.get_current_stream().synchronize()
            for f, G in enumerate(globs):
                check(f"{transport} unchecked field {f}", res[f], G[osl] * 2)
            r.reset_operand_unchecked(ops[1], field=1)
            res = r.execute()
            cp.cuda.get_current_stream().synchronize()
            for f, G in enumerate(globs):
                check(f"{transport} unchecked field=1, field {f}", res[f], G[osl] * (1 if f == 1 else 2))
            r.reset_operand(ops)
            outs = [redist.allocate_symmetric_memory(n, "cupy", dtype=dt, make_symmetric=True) for dt in dtypes]
            big = redist.allocate_symmetric_memory(tuple(x + 2 for x in g), "cupy", dtype=dtypes[2],
                                                   make_symmetric=True)
            big[...] = -1
            inner = big[1:1 + n[0], 1:1 + n[1], 1:1 + n[2]]
            for k in range(2):
                got = r.execute(out=(outs[0], None, inner))
                cp.cuda.get_current_stream().synchronize()
                assert got[0] is outs[0] and got[2] is inner
                for f, G in enumerate(globs):
                    check(f"{transport} out= #{k} field {f}", got[f], G[osl])
                outside = int((cp.asnumpy(big) != -1).sum()) - inner.size
                assert outside == 0, f"{outside} ghost cells written"
                res = r.execute(release_workspace=k == 1)
                cp.cuda.get_current_stream().synchronize()
                for f, G in enumerate(globs):
                    check(f"{transport} after out= #{k} field {f}", res[f], G[osl])
            bad = np.empty(n, dtype=dtypes[1])  # a host array: refused on every rank, naming the field
            try:
                r.execute(out=(None, bad if rank == P - 1 else None, None))
                fails.add("fields: a host out= for field 1 on the last rank was accepted")
            except redist.InvalidValueError as e:
                assert f"rank {P - 1}" in str(e) and "field 1" in str(e), str(e)
            res = r.execute()
            cp.cuda.get_current_stream().synchronize()
            for f, G in enumerate(globs):
                check(f"{transport} after a refused out= field {f}", res[f], G[osl])
            assert r.graph() != 0
        for x in outs + [big]:  # the Redistribute is freed: no graph may use them any more
            redist.free_symmetric_memory(x)
        try:  # the function form would hand over results that share one allocation
            redist.redistribute(ops, Slab.X, Slab.Y)
            fails.add("fields: redistribute() of several GPU fields was accepted")
        except redist.NotSupportedError as e:
            assert "several fields on GPUs" in str(e), str(e)
        if rank == 0:
            log(f"fields {transport} ok")


MODES = {"engine": run_engine, "replay": run_replay, "api": run_api, "bench": run_bench, "heap": run_heap, "fields": run_fields}


def run_mode(mode: str, fn) -> None:
    """Run one worker mode ``fn(fails)``; failures are reduced across ranks, rank 0 prints ALL OK."""
    fails = Fails()
    try:
        fn(fails)
    except Exception:  # noqa: BLE001
        fails.add(f"{mode}: {traceback.format_exc()}")
    total = comm.allreduce(len(fails.items))
    if rank == 0:
        print("ALL OK" if total == 0 else f"{total} FAILURE(S)", flush=True)


def main():
    mode = sys.argv[1]
    if mode == "bench" and len(sys.argv) > 2:
        run_mode(mode, lambda fails: run_bench(
            fails, sizes=tuple(int(x) for x in sys.argv[2].split(",")),
            transports=tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 else ("auto",)))
    else:
        run_mode(mode, MODES[mode])


if __name__ == "__main__":
    main()
