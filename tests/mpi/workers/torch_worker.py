# SPDX-License-Identifier: Apache-2.0
"""redist.torch under mpiexec: ``mpiexec -n P python torch_worker.py [--gpu] WHAT...`` (WHAT: grad, compile, bad).

grad: values (element = global index) and the gradient of every case: gradcheck and gradgradcheck
at P = 1; at P > 1 the distributed check -- the central difference of the global loss (every
rank's loss, summed), all ranks perturbed together along random directions, against the
allreduced <grad, direction> -- for the gradient and for double backward. Also no_grad,
autocast, requires_grad on some fields only, vmap and torch.func's grad/jvp and forward-mode AD refused (on one
rank only too), conj/neg/non-contiguous tensors.
compile: torch.compile(fullgraph=True) of a forward + backward step, torch._dynamo.explain with
zero graph breaks, the same values and gradients as eager, the plan cache hit on later steps.
bad: one rank wrong at a time; every rank raises the same redist error (the caller's timeout is
the watchdog), and the next good call works. ``--gpu``: the tensors on this rank's GPU
(tests/gpu/test_torch_gpu.py); compile then uses mode="reduce-overhead" (CUDA graphs) with inductor.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402
from helpers import Report, global_values, overlap_boxes, random_boxes, sl  # noqa: E402

import redist  # noqa: E402
import redist.torch as rt  # noqa: E402
from redist import BlockNonCyclic, Box, ProcessGrid, Slab  # noqa: E402
from redist.engine import geometry as geo  # noqa: E402

GPU = "--gpu" in sys.argv
redist.initialize()
DEVICE = torch.device("cuda", redist.get_context().device_id) if GPU else torch.device("cpu")
comm = redist.get_context().process_group.mpi_comm
rank, nranks = comm.Get_rank(), comm.Get_size()
report = Report(comm)


def piece(g, box, requires_grad=True):
    t = torch.from_numpy(np.ascontiguousarray(g[sl(box)])).clone().to(DEVICE)
    return t.requires_grad_(requires_grad and (t.is_floating_point() or t.is_complex()))


def cases():
    """(label, global shape, in boxes, out boxes, options, the distributions this rank passes)."""
    rng = np.random.default_rng(45 + nranks)
    g = (7, 6, 5)
    grid = ProcessGrid((nranks, 1, 1)), ProcessGrid((1, nranks, 1))
    yield "slabs", g, Slab.X, Slab.Y, {}, {"global_shape": g}
    yield "slabs inferred", g, Slab.X, Slab.Z, {}, {}
    yield (
        "pencils permuted",
        g,
        BlockNonCyclic(grid[0]),
        BlockNonCyclic(grid[1]),
        {"result_layout": (0, 2, 1)},
        {"global_shape": g},
    )
    # unbound grids whose rank order is not row-major, without global_shape (resolved by the call)
    col = ProcessGrid((2, 2, 1) if nranks == 4 else (1, nranks, 1), ProcessGrid.Layout.COL_MAJOR)
    yield "blocks col-major inferred", g, Slab.X, BlockNonCyclic(col), {}, {}
    reversed_ranks = np.arange(nranks)[::-1].reshape((2, 1, 2) if nranks == 4 else (nranks, 1, 1))
    backwards = BlockNonCyclic(ProcessGrid(process_array=reversed_ranks))
    yield "blocks rank array inferred", g, backwards, Slab.Z, {}, {}
    ins, outs = random_boxes(g, nranks, rng), random_boxes(g, nranks, rng)
    yield "random boxes (uneven, empty)", g, Box(*ins[rank]), Box(*outs[rank]), {"result_layout": "F"}, {}
    for _ in range(3):
        label, ins, outs = overlap_boxes(g, nranks, rng)
        yield f"overlap {label}", g, Box(*ins[rank]), Box(*outs[rank]), {"allow_overlap": True}, {}
    full = ((0, 0, 0), g)
    yield "allgather", g, Slab.X, Box(*full), {"allow_overlap": True}, {"global_shape": g}


def global_loss(ys, ws):
    """Every rank's loss, summed (one allreduce): quadratic, so central differences are exact."""
    mine = sum((w * (y.abs() ** 2 if y.is_complex() else y * y)).sum() for y, w in zip(ys, ws))
    return comm.allreduce(float(mine))


def distributed_check(label, fn, xs, ws, eps=1e-3):
    """Central difference of the global loss along random directions (all ranks at once) against
    the allreduced <grad, direction>; then the same for double backward (<grad, v> as the loss)."""
    ys = fn(*xs)
    loss = sum((w * (y.abs() ** 2 if y.is_complex() else y * y)).sum() for y, w in zip(ys, ws))
    grads = torch.autograd.grad(loss, [x for x in xs if x.requires_grad], create_graph=True)
    gen = torch.Generator().manual_seed(rank)
    dirs = [torch.randn(x.shape, dtype=x.dtype, generator=gen).to(DEVICE) for x in xs if x.requires_grad]
    predicted = comm.allreduce(
        float(sum(torch.real(torch.vdot(g.flatten(), d.flatten())) for g, d in zip(grads, dirs)).detach())
    )

    def at(sign):
        with torch.no_grad():
            moved, it = [], iter(dirs)
            for x in xs:
                moved.append(x + sign * eps * next(it) if x.requires_grad else x)
            return global_loss(fn(*moved), ws)

    fd = (at(1) - at(-1)) / (2 * eps)
    report.check(
        abs(fd - predicted) <= 1e-7 * max(1.0, abs(fd)), f"{label}: gradient {predicted} vs difference {fd}"
    )
    # double backward: h(x) = <grad L(x), v> summed over ranks; its gradient along d, against differences
    vs = [torch.randn(g.shape, dtype=g.dtype, generator=gen).to(DEVICE) for g in grads]
    h = sum(torch.real(torch.vdot(g.flatten(), v.flatten())) for g, v in zip(grads, vs))
    hgrads = torch.autograd.grad(h, [x for x in xs if x.requires_grad], allow_unused=True)
    predicted2 = comm.allreduce(
        float(
            sum(
                torch.real(torch.vdot(g.flatten(), d.flatten()))
                for g, d in zip(hgrads, dirs)
                if g is not None
            )
        )
    )

    def h_at(sign):
        moved, it = [], iter(dirs)
        for x in xs:
            moved.append((x.detach() + sign * eps * next(it)).requires_grad_() if x.requires_grad else x)
        ys = fn(*moved)
        loss = sum((w * (y.abs() ** 2 if y.is_complex() else y * y)).sum() for y, w in zip(ys, ws))
        gs = torch.autograd.grad(loss, [m for m in moved if m.requires_grad])
        return comm.allreduce(
            float(sum(torch.real(torch.vdot(g.flatten(), v.flatten())) for g, v in zip(gs, vs)))
        )

    fd2 = (h_at(1) - h_at(-1)) / (2 * eps)
    report.check(
        abs(fd2 - predicted2) <= 1e-7 * max(1.0, abs(fd2)), f"{label}: double backward {predicted2} vs {fd2}"
    )


def grad_cases():
    for label, g, din, dout, opts, kw in cases():
        for dtype in (np.float64, np.complex128):
            G = global_values(g, dtype)
            ib = din.box(rank, g, nranks=nranks).as_tuple() if not isinstance(din, Box) else din.as_tuple()
            ob = dout.box(rank, g, nranks=nranks).as_tuple() if not isinstance(dout, Box) else dout.as_tuple()
            x = piece(G, ib)
            try:
                y = rt.redistribute(x, din, dout, options=opts, **kw)
                want = G[sl(ob)] if not geo.is_empty(ob) else np.zeros(geo.box_shape(ob), dtype)
                report.check(
                    np.array_equal(y.detach().cpu().numpy(), want), f"{label} {dtype.__name__}: values"
                )
                if opts.get("result_layout") not in (None, "C"):
                    order = geo.axis_order(opts["result_layout"], 3)
                    report.check(
                        y.permute(order).is_contiguous(), f"{label}: result layout {opts['result_layout']}"
                    )
                fn = lambda a: [rt.redistribute(a, din, dout, options=opts, **kw)]  # noqa: E731
                w = torch.rand(
                    tuple(y.shape), dtype=torch.float64, generator=torch.Generator().manual_seed(rank)
                ).to(DEVICE)
                if nranks == 1:
                    report.check(
                        torch.autograd.gradcheck(lambda a: fn(a)[0], (x,), fast_mode=True),
                        f"{label}: gradcheck",
                    )
                    report.check(
                        torch.autograd.gradgradcheck(lambda a: fn(a)[0], (x,), fast_mode=True),
                        f"{label}: gradgradcheck",
                    )
                distributed_check(f"{label} {dtype.__name__}", fn, [x], [w])
            except Exception:  # noqa: BLE001
                report.exception(f"{label} {dtype.__name__}")


def fields_and_modes():
    g = (5, 4, 6)
    ib, ob = Slab.Y.box(rank, g, nranks=nranks).as_tuple(), Slab.Z.box(rank, g, nranks=nranks).as_tuple()
    u = piece(global_values(g, np.float64), ib)
    v = piece(
        global_values(g, np.float64, salt=3), ib, requires_grad=False
    )  # requires_grad on some fields only
    p = piece(global_values(g, np.complex128), ib)
    uy, vy, py = rt.redistribute((u, v, p), Slab.Y, Slab.Z, global_shape=g)
    report.check(
        np.array_equal(vy.detach().cpu().numpy(), global_values(g, np.float64, salt=3)[sl(ob)]),
        "fields: values",
    )
    report.check(uy.requires_grad and py.requires_grad, "fields: requires_grad")
    ws = [
        torch.rand(tuple(uy.shape), dtype=torch.float64, generator=torch.Generator().manual_seed(rank)).to(
            DEVICE
        )
    ] * 3
    distributed_check(
        "several fields, grad on some",
        lambda a, b, c: rt.redistribute((a, b, c), Slab.Y, Slab.Z, global_shape=g),
        [u, v, p],
        ws,
    )
    with torch.no_grad():
        y = rt.redistribute(u, Slab.Y, Slab.Z, global_shape=g)
    report.check(y.grad_fn is None and not y.requires_grad, "no_grad: no graph")
    with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
        y = rt.redistribute(u, Slab.Y, Slab.Z, global_shape=g)
    report.check(y.dtype == torch.float64, f"autocast keeps the dtype: {y.dtype}")
    # an eager call without gradient skips torch's dispatcher, except where torch would see the operator: a
    # dispatch mode (on rank 0 only: the ranks' calls meet all the same), the profiler
    class Recorder(torch.utils._python_dispatch.TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    plain_y = rt.redistribute(u.detach(), Slab.Y, Slab.Z, global_shape=g)
    recorder = Recorder()
    if rank == 0:
        with recorder:
            y = rt.redistribute(u.detach(), Slab.Y, Slab.Z, global_shape=g)
    else:
        y = rt.redistribute(u.detach(), Slab.Y, Slab.Z, global_shape=g)
    report.check(torch.equal(y, plain_y), "a dispatch mode on rank 0 only: the same values")
    report.check(rank != 0 or any(op.startswith("redist.redistribute") for op in recorder.ops),
                 f"a dispatch mode sees the operator: {recorder.ops}")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        y = rt.redistribute(u.detach(), Slab.Y, Slab.Z, global_shape=g)
    names = {e.key for e in prof.key_averages()}
    report.check(torch.equal(y, plain_y) and "redist::redistribute" in names,
                 f"the profiler sees the operator: {sorted(n for n in names if 'redist' in n)}")
    base = piece(global_values(g, np.complex128), ib, requires_grad=False)
    for what, t in (
        ("conj", base.conj()),
        ("neg", torch._neg_view(base)),
        ("non-contiguous", base.mT.contiguous().mT),
    ):
        y = rt.redistribute(t, Slab.Y, Slab.Z, global_shape=g)
        ref = rt.redistribute(t.resolve_conj().resolve_neg().contiguous(), Slab.Y, Slab.Z, global_shape=g)
        report.check(torch.equal(y, ref), f"{what} tensor: resolved values")
    report.expect_error(
        lambda: torch.func.vmap(lambda a: rt.redistribute(a, Slab.Y, Slab.Z, global_shape=g))(
            u.detach().unsqueeze(0)
        ),
        redist.NotSupportedError,
        "vmap",
        "vmap refused",
    )
    plain = u.detach()

    def on_rank0(transform):  # rank 0 under a transform, the others call plainly: refused on every rank
        def call():
            if rank == 0:
                return transform(lambda a: rt.redistribute(a, Slab.Y, Slab.Z, global_shape=g), plain)
            return rt.redistribute(plain, Slab.Y, Slab.Z, global_shape=g)

        return call

    def dual(fn, a):  # forward-mode AD: the tangent would be dropped
        with torch.autograd.forward_ad.dual_level():
            return fn(torch.autograd.forward_ad.make_dual(a, torch.ones_like(a)))

    for label, transform, pattern in (
        ("torch.func.jvp", lambda fn, a: torch.func.jvp(fn, (a,), (torch.ones_like(a),)), "torch.func.grad, vjp, jvp"),
        ("torch.func.grad", lambda fn, a: torch.func.grad(lambda b: fn(b).sum())(a), "torch.func.grad, vjp, jvp"),
        ("forward_ad dual tensor", dual, "forward-mode"),
        ("vmap", lambda fn, a: torch.func.vmap(fn)(a.unsqueeze(0)), "vmap"),
    ):
        report.expect_error(on_rank0(transform), redist.NotSupportedError, f"rank 0: .*{pattern}",
                            f"{label} on rank 0 only: refused on every rank")


def compiled():
    g = (8, 6, 4)
    ib = Slab.X.box(rank, g, nranks=nranks).as_tuple()
    x = piece(global_values(g, np.float64), ib)
    weight = torch.linspace(0.5, 1.5, 4, dtype=torch.float64, device=DEVICE)
    X, Y, Z = Slab.X.bind(g), Slab.Y.bind(g), Slab.Z.bind(g)

    def step(a):
        y = rt.redistribute(a, X, Y)
        z = rt.redistribute(torch.sin(y) * weight, Y, Z, options={"result_layout": (2, 0, 1)})
        return (z * z).sum()

    explain = torch._dynamo.explain(step)(x)
    report.check(
        explain.graph_break_count == 0 and explain.graph_count == 1,
        f"explain: {explain.graph_count} graphs, breaks {explain.break_reasons}",
    )
    eager = step(x)
    (ge,) = torch.autograd.grad(eager, x)
    fast = (
        torch.compile(step, fullgraph=True, mode="reduce-overhead")
        if GPU
        else torch.compile(step, fullgraph=True, backend="aot_eager")
    )
    for _ in range(3):
        loss = fast(x)
        (gc,) = torch.autograd.grad(loss, x)
        report.check(
            torch.allclose(loss, eager, rtol=1e-13) and torch.allclose(gc, ge, rtol=1e-13),
            "compiled step: the loss and gradient of eager",
        )
    info = rt.cache_info()
    report.check(info["hits"] > 0 and info["size"] <= info["maxsize"], f"cache: {info}")

    # boxes and a RedistributeOptions object: one graph too (torch 2.11's Dynamo folds no user objects,
    # so they reach the planning as plain data), and an options object changed in place recompiles
    opts = redist.RedistributeOptions(result_layout="F")
    xb, yb = Slab.X.box(rank, g, nranks=nranks), Slab.Y.box(rank, g, nranks=nranks)

    def boxes(a):
        return rt.redistribute(a, xb, yb, options=opts)

    explain = torch._dynamo.explain(boxes)(x)
    report.check(
        explain.graph_break_count == 0 and explain.graph_count == 1,
        f"boxes, options object: {explain.graph_count} graphs, breaks {explain.break_reasons}",
    )
    fast = torch.compile(boxes, fullgraph=True, backend="aot_eager")
    for layout in ("F", "C"):
        opts.result_layout = layout
        got, want = fast(x.detach()), boxes(x.detach())
        report.check(
            torch.equal(got, want) and got.stride() == want.stride(),
            f"compiled with result_layout={layout!r} set in place: eager's values and strides",
        )
    sizes_change()
    if not GPU:
        marked_dynamic()


def marked_dynamic():
    """An axis marked dynamic stays symbolic through the backward: the operators' integers are
    SymInt (an int[] input_shape of the adjoint pinned it: ConstraintViolationError)."""

    def loss(a, shape):
        y = rt.redistribute(a, Slab.X, Slab.Y, global_shape=shape)
        return (y * y).sum()

    fast = torch.compile(loss, fullgraph=True, backend="aot_eager")
    for g in ((8, 6, 4), (11, 7, 5)):
        x = piece(global_values(g, np.float64), Slab.X.box(rank, g, nranks=nranks).as_tuple())
        torch._dynamo.mark_dynamic(x, 2)
        try:
            (grad,) = torch.autograd.grad(fast(x, g), x)
            (grad_eager,) = torch.autograd.grad(loss(x, g), x)
        except Exception as e:  # noqa: BLE001
            report.fail(f"mark_dynamic, {g}: {type(e).__name__}: {str(e)[:300]}")
            continue
        report.check(torch.equal(grad, grad_eager), f"mark_dynamic, {g}: eager's gradient")


def sizes_change():
    """One compiled function called with other global sizes (distributions bound anew, boxes, a
    global_shape argument): a graph per size with the values and gradients of eager (Dynamo makes the
    ints it saw change symbolic on recompiling; the planning must still get them as constants)."""
    backend = {"mode": "reduce-overhead"} if GPU else {"backend": "aot_eager"}

    def bound(a, i, o):
        return rt.redistribute(a, i, o)

    def shaped(a, shape):
        return rt.redistribute(a, Slab.X, Slab.Y, global_shape=shape)

    fast_bound = torch.compile(bound, fullgraph=True, **backend)
    fast_shaped = torch.compile(shaped, fullgraph=True, **backend)
    for g in ((8, 6, 4), (11, 7, 5), (6, 9, 3)):
        x = piece(global_values(g, np.float64), Slab.X.box(rank, g, nranks=nranks).as_tuple())
        boxes = Slab.X.box(rank, g, nranks=nranks), Slab.Z.box(rank, g, nranks=nranks)
        calls = {
            "bound": (fast_bound, bound, (Slab.X.bind(g), Slab.Y.bind(g)), Slab.Y),
            "boxes": (fast_bound, bound, boxes, Slab.Z),
            "global_shape": (fast_shaped, shaped, (g,), Slab.Y),
        }
        for label, (fast, eager, args, out) in calls.items():
            want = torch.from_numpy(global_values(g, np.float64)[sl(out.box(rank, g, nranks=nranks).as_tuple())])
            try:
                got = fast(x, *args)
                (grad,) = torch.autograd.grad((got * got).sum(), x)
                (grad_eager,) = torch.autograd.grad((eager(x, *args) ** 2).sum(), x)
            except Exception as e:  # noqa: BLE001
                report.fail(f"sizes change, {label}, {g}: {type(e).__name__}: {str(e)[:300]}")
                continue
            report.check(
                torch.equal(got.detach().cpu(), want) and torch.equal(grad, grad_eager),
                f"sizes change, {label}, {g}: eager's values and gradient",
            )


def bad():
    g = (6, 5, 4)
    ib = Slab.X.box(rank, g, nranks=nranks).as_tuple()
    good = piece(global_values(g, np.float64), ib)
    one = nranks - 1  # the rank that is wrong

    def call(t, **kw):
        return rt.redistribute(t, Slab.X, Slab.Y, **{"global_shape": g, **kw})

    E = redist.RedistError
    report.expect_error(
        lambda: call(good.float() if rank == one else good), E, f"rank {one}.*float32|dtype", "mixed dtypes"
    )
    report.expect_error(
        lambda: call(good[:, :-1] if rank == one else good), E, f"rank {one}", "shape not its box"
    )
    report.expect_error(
        lambda: call("x" if rank == one else good),
        redist.InvalidTypeError,
        f"rank {one}: .*Tensor",
        "not a tensor",
    )
    report.expect_error(
        lambda: call(good, global_shape=(6, 5) if rank == one else g),
        redist.InvalidValueError,
        f"rank {one}: .*global_shape",
        "bad global_shape",
    )
    report.expect_error(
        lambda: call(good, options={"bogus": 1} if rank == one else None),
        redist.InvalidValueError,
        f"rank {one}: .*bogus",
        "unknown option",
    )
    report.expect_error(
        lambda: call(good.detach() if rank == one else good),
        redist.InvalidValueError,
        f"rank {one} needs the gradient",
        "requires_grad on some ranks",
    )
    report.expect_error(
        lambda: call(good.detach().long() if rank == one else good),
        E,
        f"rank {one}",
        "an integer tensor beside tensors that need gradients",
    )
    if GPU:
        report.expect_error(
            lambda: call(good.cpu() if rank == one else good), E, f"rank {one}", "mixed devices"
        )
    before = good.detach().clone()
    report.check(torch.equal(good.detach(), before), "a refused call changed the input")
    if nranks > 1:  # the last rank recomputes the forward (a checkpoint) where the others run its backward
        def loss(t):
            return (call(t * 1.0) ** 2).sum()

        def checkpointed_on_one_rank():
            x = good.detach().clone().requires_grad_(True)
            (checkpoint(loss, x, use_reentrant=False) if rank == one else loss(x)).backward()

        report.expect_error(
            checkpointed_on_one_rank,
            redist.InvalidStateError,
            f"rank {one} runs redistribute inside a backward where rank 0 runs the backward of redistribute",
            "torch.utils.checkpoint on one rank only",
        )

        def double_backward_on_one_rank():  # its forward inside the backward meets the others' next forward
            x = good.detach().clone().requires_grad_(True)
            loss = (call(x) ** 2).sum()
            if rank == one:
                (g,) = torch.autograd.grad(loss, x, create_graph=True)
                (g**2).sum().backward()
            else:
                torch.autograd.grad(loss, x)
                (call(good.detach().clone().requires_grad_(True)) ** 3).sum().backward()

        report.expect_error(
            double_backward_on_one_rank,
            redist.InvalidStateError,
            f"rank {one} runs redistribute inside a backward where rank 0 runs redistribute",
            "a double backward on one rank only",
        )

        def vmap_of_a_backward_on_one_rank():  # the adjoint operator's vmap rule refuses it
            x = good.detach().clone().requires_grad_(True)
            y = call(x)
            seeds = torch.ones((2, *y.shape), dtype=y.dtype, device=y.device)
            if rank == one:
                torch.func.vmap(lambda v: torch.autograd.grad(y, x, v)[0])(seeds)
            else:
                torch.autograd.grad(y, x, seeds[0])

        report.expect_error(
            vmap_of_a_backward_on_one_rank,
            redist.NotSupportedError,
            f"rank {one}: .*vmap",
            "torch.func.vmap of a backward on one rank only",
        )

        def batched_backward_on_one_rank(forward=call, cached=False, **kw):
            x = good.detach().clone().requires_grad_(True)
            y = forward(x)
            seeds = torch.ones((2, *y.shape), dtype=y.dtype, device=y.device)
            if cached:  # a plain backward first: the adjoint's plan is cached
                torch.autograd.grad(y, x, seeds[0], retain_graph=True)
            batched = rank == one
            torch.autograd.grad(y, x, seeds if batched else seeds[0], is_grads_batched=batched, **kw)

        compiled = torch.compile(lambda t: call(t) * 2, backend="aot_eager")  # its backward calls the operator itself
        for label, kw in (
            ("a batched backward (is_grads_batched) on one rank only", {"cached": True}),
            ("a batched backward with create_graph=True on one rank only", {"create_graph": True}),
            ("a batched backward of a compiled forward on one rank only", {"forward": compiled}),
        ):
            report.expect_error(
                lambda kw=kw: batched_backward_on_one_rank(**kw),
                redist.NotSupportedError,
                f"rank {one}: .*is_grads_batched",
                label,
            )

        def transformed_backward_on_one_rank():  # torch refused its own autograd Function there, on that rank only
            x = good.detach().clone().requires_grad_(True)
            y = call(x)
            seed = torch.ones_like(y)
            if rank == one:
                torch.func.grad(lambda v: torch.autograd.grad(y, x, v, create_graph=True)[0].sum())(seed)
            else:
                torch.autograd.grad(y, x, seed)

        report.expect_error(
            transformed_backward_on_one_rank,
            redist.NotSupportedError,
            f"rank {one}: .*torch.func.grad",
            "torch.func.grad over a backward on one rank only",
        )
    if nranks > 1:  # a diverged cache: refused everywhere, then recovered by a collective clear
        call(good)
        if rank == one:
            rt._cache._entries.clear()
            rt._cache._history = 1
        report.expect_error(
            lambda: call(good), redist.InvalidStateError, f"rank {one}'s plan cache", "diverged cache"
        )
        rt.clear_cache()
    y = call(good)
    report.check(
        np.array_equal(y.detach().cpu().numpy(), global_values(g, np.float64)[sl(Slab.Y.box(rank, g))]),
        "a good call after the refusals",
    )
    rt.set_cache_size(2)
    for dtype in (
        torch.float64,
        torch.float32,
        torch.complex128,
        torch.complex64,
    ):  # 4 plans: 2 evicted, collectively
        call(good.detach().to(dtype))
    report.check(rt.cache_info()["size"] == 2, f"bounded: {rt.cache_info()}")


def main() -> int:
    for what in [a for a in sys.argv[1:] if a != "--gpu"]:
        try:
            {"grad": lambda: (grad_cases(), fields_and_modes()), "compile": compiled, "bad": bad}[what]()
        except Exception:  # noqa: BLE001
            report.exception(what)
    code = report.finish()
    redist.finalize()
    return code


if __name__ == "__main__":
    sys.exit(main())
