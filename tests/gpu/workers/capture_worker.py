# SPDX-License-Identifier: Apache-2.0
"""GPU worker for tests/gpu/test_capture.py: ``mpiexec -n P python capture_worker.py MODE``.

The user's own CUDA graph capture around redist: ``execute()`` on a capturing stream records the
exchange into the user's graph (a child-graph node); replays of the user's graph run it.

Modes: ``torch`` (``torch.cuda.graph`` in each capture mode: producer -> execute -> consumer,
replayed many times, bit-exact every 50th; interleaved direct executes; rebind + update_captured;
refused cases; free() while the graph holds a copy), ``cupy`` (``Stream.begin_capture`` and a raw
``int`` stream captured with the driver API; the legacy stream refused), ``step`` (an x -> y -> z
-> y -> x pencil round trip of four exchanges in one captured step, fused fields, a permuted
result, a strided symmetric out=, every transport and signal), ``readme`` (README's example). Failures are reduced across ranks;
rank 0 prints ALL OK. One rank per GPU, or several on one under REDIST_SHARED_GPU=1.
"""

from __future__ import annotations

import gc
import math
import os
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_worker import SHARED, Fails, P, agree_ok, local_device, log, rank, run_mode  # noqa: E402
from helpers import pencil_boxes  # noqa: E402

#: replays per case (several ranks on one GPU time-slice it: fewer there)
REPLAYS = 120 if SHARED and P > 1 else 1000
EVERY = 10 if SHARED and P > 1 else 50


def _setup():
    import cupy as cp
    import redist
    import torch

    dev = local_device()
    cp.cuda.Device(dev).use()
    torch.cuda.set_device(dev)
    redist.initialize(device_id=dev)
    return dev


class Case:
    """Runs named steps; a failure is recorded, agreed across ranks, and stops that step only."""

    def __init__(self, fails: Fails, mode: str):
        self.fails, self.mode = fails, mode

    def __call__(self, name, fn):
        ok = True
        try:
            fn()
        except Exception:  # noqa: BLE001
            self.fails.add(f"{self.mode} {name}: {traceback.format_exc()}")
            ok = False
        ok = agree_ok(ok)
        if rank == 0:
            log(f"{self.mode} {name} {'ok' if ok else 'FAILED'}")

    def check(self, name, got, want):
        got = np.asarray(got)
        if got.shape != want.shape or not np.array_equal(got, want):
            bad = int((got != want).sum()) if got.shape == want.shape else -1
            raise AssertionError(f"{name}: result differs ({bad} elements; shape {got.shape} vs {want.shape})")


def _slabs(g):
    from redist import Slab

    ibox, obox = Slab.X.box(rank, g, nranks=P), Slab.Y.box(rank, g, nranks=P)
    return (tuple(slice(lo, hi) for lo, hi in zip(ibox.lower, ibox.upper)),
            tuple(slice(lo, hi) for lo, hi in zip(obox.lower, obox.upper)))


# ------------------------------------------------------------------------------------------------
# torch
# ------------------------------------------------------------------------------------------------


def run_torch(fails: Fails):
    import redist
    import torch
    from redist import Slab

    dev = _setup()
    case = Case(fails, "torch")
    g = (12, 10, 8)
    glob = np.arange(math.prod(g), dtype=np.float64).reshape(g)
    isl, osl = _slabs(g)
    torch_dev = f"cuda:{dev}"
    if rank == 0:
        log(f"torch {torch.__version__}; CUDAGraph.raw_cuda_graph_exec: {hasattr(torch.cuda.CUDAGraph, 'raw_cuda_graph_exec')}")

    def replayed(mode, transport):
        """producer (a += 1) -> execute -> consumer (out = b): replays bit-exact, direct executes
        between them, then a rebind reaches the copy only through update_captured."""
        a = torch.as_tensor(glob[isl], device=torch_dev).clone()
        out = torch.empty(glob[osl].shape, dtype=torch.float64, device=torch_dev)
        with redist.Redistribute(a, Slab.X, Slab.Y, options={"transport": transport}) as r:
            r.plan()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):  # warm-up on a side stream, as torch asks before a capture
                r.execute()
            torch.cuda.current_stream().wait_stream(s)
            gr = torch.cuda.CUDAGraph(keep_graph=True)
            with torch.cuda.graph(gr, capture_error_mode=mode):
                a.add_(1.0)
                b = r.execute()
                out.copy_(b)
            gr.instantiate()
            torch.cuda.synchronize()
            base = glob[osl]
            k = 0
            for it in range(1, REPLAYS + 1):
                gr.replay()
                k += 1
                if it % EVERY == 0:
                    torch.cuda.synchronize()
                    case.check(f"{mode} {transport} replay {it}", out.cpu().numpy(), base + k)
                if it % 97 == 0:  # a direct execute of the same object, stream-ordered with the replays
                    a.add_(1.0)
                    k += 1
                    res = r.execute()
                    torch.cuda.synchronize()
                    case.check(f"{mode} {transport} direct {it}", res.cpu().numpy(), base + k)
            # rebind: the copy keeps reading `a` until update_captured
            a2 = torch.as_tensor(glob[isl] * -3.0, device=torch_dev)
            r.reset_operand_unchecked(a2)
            gr.replay()
            k += 1
            torch.cuda.synchronize()
            case.check(f"{mode} {transport} before update", out.cpu().numpy(), base + k)
            assert r.update_captured(gr) == 1
            gr.replay()  # a += 1 still runs on `a`; the copy now reads a2
            torch.cuda.synchronize()
            case.check(f"{mode} {transport} after update", out.cpu().numpy(), base * -3.0)
            del gr
            gc.collect()

    for mode in ("global", "thread_local", "relaxed"):
        case(f"replay {mode}", lambda mode=mode: replayed(mode, "auto"))
    case("replay put", lambda: replayed("global", "put"))
    if rank == 0:
        from redist.engine.cuda import captured

        log(f"update_captured rewrites kernel nodes inside the child graph: {captured._DIRECT_UPDATES[0]}")

    def refused():
        """Each refusal raises on every rank before anything is enqueued: torch ends the capture
        cleanly and the graph replays what was captured before it."""
        a = torch.as_tensor(glob[isl], device=torch_dev).clone()
        out = torch.zeros(glob[osl].shape, dtype=torch.float64, device=torch_dev)
        # the same allocation (global shape + ghosts) on every rank: out= at the same offset everywhere
        sym = redist.allocate_symmetric_memory(tuple(x + 2 for x in g), "torch", dtype=torch.float64,
                                               make_symmetric=True)
        n = glob[osl].shape
        inner = sym[1:1 + n[0], 1:1 + n[1], 1:1 + n[2]]
        with redist.Redistribute(a, Slab.X, Slab.Y, options={"transport": "put"}) as r:
            r.plan()
            r.execute()
            torch.cuda.synchronize()
            for what, kw, words in (("release_workspace", {"release_workspace": True}, "release_workspace=True"),
                                    ("first strided out=", {"out": inner}, "strides no execute() has used yet")):
                gr = torch.cuda.CUDAGraph(keep_graph=True)
                try:
                    with torch.cuda.graph(gr):
                        b = r.execute()
                        out.copy_(b)
                        r.execute(**kw)
                    raise AssertionError(f"{what} inside a capture was accepted")
                except redist.InvalidStateError as e:
                    assert words in str(e) and "capture" in str(e), str(e)
                out.zero_()
                gr.instantiate()
                for _ in range(3):
                    gr.replay()
                torch.cuda.synchronize()
                case.check(f"refused {what}: the graph replays what it holds", out.cpu().numpy(), glob[osl])
                del gr
                gc.collect()
            # host operands on a capturing stream
            h = torch.as_tensor(glob[isl])
            with redist.Redistribute(h, Slab.X, Slab.Y) as rh:
                rh.plan()
                s = torch.cuda.Stream()
                gr = torch.cuda.CUDAGraph()
                try:
                    with torch.cuda.graph(gr, stream=s):
                        rh.execute(stream=s)
                    raise AssertionError("host operands on a capturing stream were accepted")
                except redist.InvalidValueError as e:
                    assert "host operands" in str(e), str(e)
        redist.free_symmetric_memory(sym)

    case("refused cases", refused)

    def keep_graph_needed():
        a = torch.as_tensor(glob[isl], device=torch_dev)
        with redist.Redistribute(a, Slab.X, Slab.Y) as r:
            r.plan()
            r.execute()
            torch.cuda.synchronize()
            gr = torch.cuda.CUDAGraph()  # keep_graph=False: torch destroys the cudaGraph_t
            with torch.cuda.graph(gr):
                r.execute()
            try:
                r.update_captured(gr)
                raise AssertionError("update_captured of a graph torch destroyed was accepted")
            except redist.InvalidValueError as e:
                assert "keep_graph=True" in str(e), str(e)
            gr.replay()
            torch.cuda.synchronize()

    case("update needs keep_graph", keep_graph_needed)

    def free_while_captured():
        """free() while the user's graph holds a copy: the copy keeps working (its memory is retired,
        not freed); after release_captured() the next collective point frees it."""
        rt = redist.get_context().cuda
        a = torch.as_tensor(glob[isl], device=torch_dev).clone()
        out = torch.zeros(glob[osl].shape, dtype=torch.float64, device=torch_dev)
        r = redist.Redistribute(a, Slab.X, Slab.Y)
        r.plan()
        r.execute()
        torch.cuda.synchronize()
        gr = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gr):
            out.copy_(r.execute())
        key = (r._exe.serial, 0)  # its entry among the runtime's retired memory (earlier cases left theirs)
        r.free()
        assert key in rt._retired, "free() with a live copy must retire, not free"
        for _ in range(5):
            gr.replay()
        torch.cuda.synchronize()
        case.check("replay after free()", out.cpu().numpy(), glob[osl])
        del gr
        gc.collect()
        torch.cuda.synchronize()
        assert key in rt._retired, "without release_captured() the memory stays retired"
        r.release_captured()  # the graph is destroyed: what its copy used may go
        with redist.Redistribute(a, Slab.X, Slab.Y) as r2:  # plan(): a collective point that reaps
            r2.plan()
        assert key not in rt._retired, f"retired memory left after release_captured(): {list(rt._retired)}"

    case("free while captured", free_while_captured)


# ------------------------------------------------------------------------------------------------
# cupy and raw streams
# ------------------------------------------------------------------------------------------------


def run_cupy(fails: Fails):
    import cupy as cp
    import redist
    from cuda.bindings import driver
    from redist import Slab

    _setup()
    case = Case(fails, "cupy")
    g = (9, 11, 7)
    glob = np.arange(math.prod(g), dtype=np.float32).reshape(g)
    isl, osl = _slabs(g)

    def cupy_capture(mode_name):
        mode = getattr(cp.cuda.runtime, f"streamCaptureMode{mode_name}")
        a = cp.asarray(glob[isl])
        out = cp.empty(glob[osl].shape, dtype=cp.float32)
        s = cp.cuda.Stream(non_blocking=True)
        with redist.Redistribute(a, Slab.X, Slab.Y) as r:
            r.plan()
            with s:
                r.execute()
                s.synchronize()
                s.begin_capture(mode=mode)
                a += 1
                out[...] = r.execute()
                gr = s.end_capture()
            k = 0
            for it in range(1, REPLAYS + 1):
                gr.launch(stream=s)
                k += 1
                if it % EVERY == 0:
                    s.synchronize()
                    case.check(f"{mode_name} replay {it}", cp.asnumpy(out), glob[osl] + k)
            a2 = cp.asarray(glob[isl] * 2)
            cp.cuda.Device().synchronize()  # made on the legacy stream; the graph runs on s
            r.reset_operand_unchecked(a2)
            assert r.update_captured(gr) == 1
            gr.launch(stream=s)
            s.synchronize()
            case.check(f"{mode_name} after update", cp.asnumpy(out), glob[osl] * 2)

    for m in ("Global", "ThreadLocal", "Relaxed"):
        case(f"capture {m}", lambda m=m: cupy_capture(m))

    def raw_stream():
        """A raw cudaStream_t (int) captured with the driver API; the user instantiates and launches."""
        a = cp.asarray(glob[isl])
        out = cp.empty(glob[osl].shape, dtype=cp.float32)
        err, h = driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING.value)
        assert err == driver.CUresult.CUDA_SUCCESS
        hs = int(h)
        ext = cp.cuda.ExternalStream(hs)
        with redist.Redistribute(a, Slab.X, Slab.Y) as r:
            r.plan()
            r.execute(stream=hs)
            driver.cuStreamSynchronize(h)
            (err,) = driver.cuStreamBeginCapture(h, driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL)
            assert err == driver.CUresult.CUDA_SUCCESS
            with ext:
                a *= 2
                out[...] = r.execute(stream=hs)
            err, graph = driver.cuStreamEndCapture(h)
            assert err == driver.CUresult.CUDA_SUCCESS, err
            err, gexec = driver.cuGraphInstantiate(graph, 0)
            assert err == driver.CUresult.CUDA_SUCCESS, err
            for it in range(1, 21):
                driver.cuGraphLaunch(gexec, h)
            driver.cuStreamSynchronize(h)
            case.check("raw stream replays", cp.asnumpy(out), glob[osl] * 2 ** 20)
            b = cp.asarray(glob[isl])
            cp.cuda.Device().synchronize()
            r.reset_operand_unchecked(b)
            assert r.update_captured((int(graph), int(gexec))) == 1
            driver.cuGraphLaunch(gexec, h)
            driver.cuStreamSynchronize(h)
            case.check("raw stream after update", cp.asnumpy(out), glob[osl])
            driver.cuGraphExecDestroy(gexec)
            driver.cuGraphDestroy(graph)
        driver.cuStreamDestroy(h)

    case("raw int stream", raw_stream)

    def legacy_refused():
        """execute() on the legacy stream while a blocking stream captures: refused, capture intact."""
        a = cp.asarray(glob[isl])
        out = cp.zeros(glob[osl].shape, dtype=cp.float32)
        s = cp.cuda.Stream(non_blocking=False)  # a blocking stream: the legacy stream would join it
        with redist.Redistribute(a, Slab.X, Slab.Y) as r:
            r.plan()
            r.execute()
            cp.cuda.Device().synchronize()
            with s:
                s.begin_capture()
                out[...] = r.execute()
                try:
                    r.execute(stream=0)
                    raise AssertionError("execute on the legacy stream during a capture was accepted")
                except redist.InvalidValueError as e:
                    assert "legacy default stream" in str(e), str(e)
                gr = s.end_capture()
            gr.launch(stream=s)
            s.synchronize()
            case.check("legacy refused: the graph replays", cp.asnumpy(out), glob[osl])

    case("legacy stream refused", legacy_refused)


# ------------------------------------------------------------------------------------------------
# whole steps
# ------------------------------------------------------------------------------------------------


def run_step(fails: Fails):
    import cupy as cp
    import redist
    from redist import Box, Slab

    _setup()
    case = Case(fails, "step")
    ctx = redist.get_context()

    def pencils_round_trip():
        """x -> y -> z -> y -> x pencils: four exchanges, one captured step, replayed."""
        g = (10, 9, 8)
        glob = np.arange(math.prod(g), dtype=np.complex128).reshape(g) * (1 + 1j)
        xb = pencil_boxes(g, P, 1, 2)[rank]  # x pencils: axes 1 and 2 split
        yb = pencil_boxes(g, P, 0, 2)[rank]
        zb = pencil_boxes(g, P, 0, 1)[rank]
        X, Y, Z = Box(*xb), Box(*yb), Box(*zb)
        a = cp.asarray(glob[tuple(slice(lo, hi) for lo, hi in zip(*xb))])
        rs = []
        src = a
        for frm, to in ((X, Y), (Y, Z), (Z, Y), (Y, X)):
            r = redist.Redistribute(src, frm, to)
            r.plan()
            rs.append(r)
            src = r.execute()
        cp.cuda.Device().synchronize()
        out = cp.empty_like(a)
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            s.begin_capture()
            a += 1
            for r in rs:
                res = r.execute()
            out[...] = res
            gr = s.end_capture()
        for it in range(1, 51):
            gr.launch(stream=s)
            if it % 10 == 0:
                s.synchronize()
                case.check(f"pencils replay {it}", cp.asnumpy(out), np.asarray(glob[tuple(
                    slice(lo, hi) for lo, hi in zip(*xb))]) + it)
        for r in rs:
            r.free()
        del gr

    case("x-y-z-y-x pencils", pencils_round_trip)

    g = (8, 6, 10)
    isl, osl = _slabs(g)

    def fields_step():
        globs = [(np.arange(math.prod(g)).reshape(g) * (f + 1)).astype(dt)
                 for f, dt in enumerate((np.complex64, np.float32, np.float64))]
        ops = tuple(cp.asarray(G[isl]) for G in globs)
        outs = tuple(cp.empty(G[osl].shape, G.dtype) for G in globs)
        s = cp.cuda.Stream(non_blocking=True)
        with redist.Redistribute(ops, Slab.X, Slab.Y) as r:
            r.plan()
            with s:
                r.execute()
                s.begin_capture()
                for x in ops:
                    x += 1
                for o, res in zip(outs, r.execute()):
                    o[...] = res
                gr = s.end_capture()
            for it in range(1, 31):
                gr.launch(stream=s)
            s.synchronize()
            for f, G in enumerate(globs):
                case.check(f"fields field {f}", cp.asnumpy(outs[f]), G[osl] + 30)
            twice = tuple(cp.asarray(G[isl] * 2) for G in globs)
            cp.cuda.Device().synchronize()
            r.reset_operand_unchecked(twice)
            assert r.update_captured(gr) == 1
            gr.launch(stream=s)
            s.synchronize()
            for f, G in enumerate(globs):
                case.check(f"fields after update field {f}", cp.asnumpy(outs[f]), G[osl] * 2)

    case("fused fields", fields_step)

    def variants():
        """Permuted result, strided symmetric out= (used once outside first), every transport/signal."""
        glob = np.arange(math.prod(g), dtype=np.float64).reshape(g)
        signals = ("epoch",) if (ctx.cuda.shared_gpu and P > 1) else ("epoch", "barrier")
        for transport in ("push", "put"):
            for signal in signals:
                opts = {"transport": transport, "signal": signal}
                a = cp.asarray(glob[isl])
                s = cp.cuda.Stream(non_blocking=True)
                with redist.Redistribute(a, Slab.X, Slab.Y, options={**opts, "result_layout": (0, 2, 1)}) as r:
                    r.plan()
                    out = cp.empty(glob[osl].shape)
                    with s:
                        r.execute()
                        s.begin_capture()
                        out[...] = r.execute()
                        gr = s.end_capture()
                    for _ in range(10):
                        gr.launch(stream=s)
                    s.synchronize()
                    case.check(f"permuted {transport} {signal}", cp.asnumpy(out), glob[osl])
                n = glob[osl].shape
                big = redist.allocate_symmetric_memory(tuple(x + 2 for x in g), "cupy", dtype=np.float64,
                                                       make_symmetric=True)
                inner = big[1:1 + n[0], 1:1 + n[1], 1:1 + n[2]]
                with redist.Redistribute(a, Slab.X, Slab.Y, options=opts) as r:
                    r.plan()
                    with s:
                        r.execute(out=inner)  # the first out= of these strides: outside the capture
                        s.synchronize()
                        big[...] = -1
                        s.begin_capture()
                        r.execute(out=inner)
                        gr = s.end_capture()
                    for _ in range(10):
                        gr.launch(stream=s)
                    s.synchronize()
                    case.check(f"strided out= {transport} {signal}", cp.asnumpy(inner), glob[osl])
                    outside = int((cp.asnumpy(big) != -1).sum()) - inner.size
                    assert outside == 0, f"{outside} cells outside out= written"
                    del gr
                    gc.collect()
                redist.free_symmetric_memory(big)

    case("layouts, transports, signals", variants)


def run_readme(fails: Fails):
    """The README's "Capturing a whole time step" example, run as written."""
    import re

    readme = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))), "README.md")
    text = open(readme).read()
    section = text[text.index("### Capturing a whole time step"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    import cupy as cp  # the example initialises redist itself (local rank modulo the GPUs)

    cp.cuda.Device(local_device()).use()
    case = Case(fails, "readme")
    case("capture example", lambda: exec(compile(code, "README.md (capture example)", "exec"), {}))


MODES = {"torch": run_torch, "cupy": run_cupy, "step": run_step, "readme": run_readme}


if __name__ == "__main__":
    run_mode(sys.argv[1], MODES[sys.argv[1]])
