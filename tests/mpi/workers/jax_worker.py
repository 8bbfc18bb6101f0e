# SPDX-License-Identifier: Apache-2.0
"""Multi-rank checks of redist.jax (run under mpiexec by tests/mpi/test_jax.py on CPU, tests/gpu/test_jax_gpu.py on GPU).

Usage: jax_worker.py {forward|forward-out|grad|errors}
forward: eager and jit results (slabs, pencils, random boxes with empty ranks, allgather; float32/64,
complex64/128, int32), repeated jitted calls, vmap. forward-out: on CPU, every result written as out=
(the rule for large results), new buffers and buffers seen before. grad: jax.grad of the global loss (the sum of
every rank's loss) against central differences along random directions, every rank perturbed
together (float64), for a partition and for replicated outputs, eager and jitted. errors: bad
input on one rank; every rank raises the same redist error. Failures are gathered before deciding;
rank 0 prints ALL OK.
"""

from __future__ import annotations

import os
import re
import sys
import traceback

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)
# tests/gpu/test_jax_gpu.py runs the same checks with JAX on the GPU (REDIST_JAX_PLATFORM=cuda)
jax.config.update("jax_platforms", os.environ.get("REDIST_JAX_PLATFORM", "cpu"))

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import helpers  # noqa: E402

import redist  # noqa: E402
import redist.jax as rjax  # noqa: E402
from redist import BlockNonCyclic, Box, ProcessGrid, Slab  # noqa: E402

redist.initialize()
ctx = redist.get_context()
comm = ctx.process_group.mpi_comm
rank, P = ctx.process_group.rank, ctx.process_group.nranks
failures: list[str] = []
jnp = jax.numpy


def check(cond, what):
    if not cond:
        failures.append(f"rank {rank}: {what}")


def boxes_of(dist, shape):
    if isinstance(dist, list):
        return [tuple(map(tuple, b)) for b in dist]
    return helpers.dist_boxes(dist, shape, P)


def mine(dist):
    return Box(*dist[rank]) if isinstance(dist, list) else dist


def problems():
    rng = np.random.default_rng(7)
    pa = max(d for d in range(1, P + 1) if P % d == 0 and d * d <= P)
    grid = ProcessGrid((P // pa, pa, 1))
    return [
        ("slab x->y", (9, 7, 5), Slab.X, Slab.Y, {}),
        ("slab y->z", (6, 11, 5), Slab.Y, Slab.Z, {}),
        ("pencils", (8, 6, 7), BlockNonCyclic(grid), Slab.Z, {}),
        (
            "random boxes",
            (7, 5, 6),
            helpers.random_boxes((7, 5, 6), P, rng),
            helpers.random_boxes((7, 5, 6), P, rng),
            {},
        ),
        ("allgather", (5, 9), Slab.X, [((0, 0), (5, 9))] * P, {"allow_overlap": True}),
    ]


def forward():
    for i, (label, shape, din, dout, opts) in enumerate(problems()):
        ib, ob = boxes_of(din, shape), boxes_of(dout, shape)
        for dtype in (
            (np.float64, np.float32, np.complex128, np.complex64, np.int32) if i == 0 else (np.complex128,)
        ):
            g = helpers.global_values(shape, dtype)
            x = jnp.asarray(g[helpers.sl(ib[rank])])
            want = g[helpers.sl(ob[rank])]
            y = rjax.redistribute(x, mine(din), mine(dout), options=opts)
            check(
                y.dtype == want.dtype and np.array_equal(np.asarray(y), want),
                f"{label} {dtype.__name__} eager",
            )
            f = jax.jit(
                lambda a, din=din, dout=dout, opts=opts: (
                    rjax.redistribute(a * 3, mine(din), mine(dout), options=opts) - 1
                )
            )
            for step in range(5 if i == 0 else 2):  # again: XLA hands over new buffers or earlier ones (out=)
                y = f(x)
                check(
                    np.array_equal(np.asarray(y), want * 3 - 1), f"{label} {dtype.__name__} jit call {step}"
                )
        # two exchanges in one compiled function, there and back again: program order on every rank
        g = helpers.global_values(shape, np.float64)
        x = jnp.asarray(g[helpers.sl(ib[rank])])
        if not opts:
            back = jax.jit(
                lambda a, din=din, dout=dout: rjax.redistribute(
                    rjax.redistribute(a, mine(din), mine(dout)) + 1, mine(dout), mine(din)
                )
            )(x)
            check(np.array_equal(np.asarray(back), np.asarray(x) + 1), f"{label} there and back")
        if not opts and i == 0:
            # two independent exchanges in one compiled function: their tokens keep program order
            def two(a, din=din, dout=dout):
                return rjax.redistribute(a, mine(din), mine(dout)), rjax.redistribute(
                    2 * a, mine(din), mine(dout)
                )

            y1, y2 = jax.jit(two)(x)
            want = g[helpers.sl(ob[rank])]
            check(
                np.array_equal(np.asarray(y1), want) and np.array_equal(np.asarray(y2), 2 * want),
                "two at once",
            )

            # inside a compiled loop (lax.fori_loop): the effect is allowed in control flow
            def loop(a, din=din, dout=dout):
                def body(k, v):
                    there = rjax.redistribute(v, mine(din), mine(dout))
                    return rjax.redistribute(there, mine(dout), mine(din)) + 1

                return jax.lax.fori_loop(0, 3, body, a)

            check(np.array_equal(np.asarray(jax.jit(loop)(x)), np.asarray(x) + 3), "fori_loop")
        # vmap: the batch moves in one exchange, as a new leading axis of every box
        batch = jnp.stack([x, 2 * x, -x])
        yb = jax.jit(
            jax.vmap(
                lambda a, din=din, dout=dout, opts=opts: rjax.redistribute(
                    a, mine(din), mine(dout), options=opts
                )
            )
        )(batch)
        want = g[helpers.sl(ob[rank])]
        check(np.array_equal(np.asarray(yb), np.stack([want, 2 * want, -want])), f"{label} vmap")
        if i > 0:
            continue
        yb = jax.vmap(
            lambda a, din=din, dout=dout, opts=opts: rjax.redistribute(
                a, mine(din), mine(dout), options=opts
            ),
            in_axes=1,
            out_axes=1,
        )(jnp.moveaxis(batch, 0, 1))
        check(
            np.array_equal(np.asarray(yb), np.moveaxis(np.stack([want, 2 * want, -want]), 0, 1)),
            f"{label} vmap in_axes=1 (eager)",
        )


def forward_out():
    """CPU: every result written by the exchange as out= (the rule for large results,
    rjax._COPY_BELOW = 0 here), into buffers XLA hands over for the first time and again, while
    some earlier results stay alive; no call gets the engine-owned result copied in."""
    if jax.default_backend() != "cpu":
        return
    saved, copied = rjax._COPY_BELOW, []
    rjax._COPY_BELOW = 0
    try:
        for label, shape, din, dout, opts in problems():
            ib, ob = boxes_of(din, shape), boxes_of(dout, shape)
            g = helpers.global_values(shape, np.float64)
            x = jnp.asarray(g[helpers.sl(ib[rank])])
            want = g[helpers.sl(ob[rank])]
            f = jax.jit(
                lambda a, din=din, dout=dout, opts=opts: rjax.redistribute(
                    a, mine(din), mine(dout), options=opts
                )
            )
            alive = []
            for step in range(9):
                y = f(x + step)
                if step == 0:  # the planned object of this call: count its calls without out=
                    for entry in rjax._entries.values():
                        if "execute" not in vars(entry.r):
                            entry.r.execute = counted(entry.r.execute, copied, label)
                check(np.array_equal(np.asarray(y), want + step), f"{label} out= call {step}")
                if step % 3 == 1:
                    alive.append(y)  # XLA hands over other buffers while these live
    finally:
        rjax._COPY_BELOW = saved
    check(not copied, f"{len(copied)} calls without out= (the result copied in): {sorted(set(copied))}")


def counted(execute, copied, label):
    def call(*args, **kwargs):
        if kwargs.get("out") is None:
            copied.append(label)
        return execute(*args, **kwargs)

    return call


def allsum(v: float) -> float:
    return float(comm.allreduce(float(v)))


def grad():
    rng = np.random.default_rng(100 + rank)
    for i, (label, shape, din, dout, opts) in enumerate(problems()):
        if label == "pencils":
            continue
        ib, ob = boxes_of(din, shape), boxes_of(dout, shape)
        x = jnp.asarray(rng.standard_normal(tuple(h - l for l, h in zip(*ib[rank]))))
        w = jnp.asarray(rng.standard_normal(tuple(h - l for l, h in zip(*ob[rank]))))

        def loss(a, din=din, dout=dout, opts=opts, w=w):
            y = rjax.redistribute(a, mine(din), mine(dout), options=opts)
            return jnp.sum(w * jnp.sin(y) * y)

        jitted = jax.jit(loss)
        ways = (("eager", jax.grad(loss)),) if i == 0 else ()
        for how, fn in (*ways, ("jit", jax.jit(jax.grad(loss)))):
            gx = fn(x)
            for trial in range(2):
                d = jnp.asarray(rng.standard_normal(x.shape))
                eps = 1e-6
                fd = (allsum(jitted(x + eps * d)) - allsum(jitted(x - eps * d))) / (2 * eps)
                an = allsum(jnp.vdot(gx, d))
                check(
                    abs(fd - an) <= 1e-6 * max(1.0, abs(an)),
                    f"{label} grad {how} trial {trial}: fd {fd} vs {an}",
                )

    # per-example gradients (vmap of grad: the backward's exchanges batched) and a complex vjp
    shape = (6, 5, 4)
    x = jnp.asarray(rng.standard_normal(Slab.X.shape(rank, shape, nranks=P)))

    def sin_loss(a):
        return jnp.sum(jnp.sin(rjax.redistribute(a, Slab.X, Slab.Y)))

    gb = jax.jit(jax.vmap(jax.grad(sin_loss)))(jnp.stack([x, 2 * x]))
    check(np.allclose(np.asarray(gb), np.cos(np.stack([x, 2 * x]))), "vmap(grad)")
    z = x * (1 + 2j)
    y, vjp = jax.vjp(lambda a: rjax.redistribute(a, Slab.X, Slab.Y), z)
    (back,) = vjp(y * 1j)
    check(np.array_equal(np.asarray(back), np.asarray(z * 1j)), "complex vjp: the adjoint of a permutation")


def expect_error(fn, cls_name, pattern, label):
    """fn must raise on every rank the same exception (class name) with a message matching pattern."""
    got = None
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        got = (type(e).__name__, str(e))
    every = comm.allgather(got)
    if got is None:
        failures.append(f"rank {rank}: {label}: no exception")
        return
    if got[0] != cls_name and cls_name not in got[1]:
        failures.append(f"rank {rank}: {label}: {got[0]} is not {cls_name}: {got[1]}")
    if not re.search(pattern, got[1]):
        failures.append(f"rank {rank}: {label}: message {got[1]!r} does not match {pattern!r}")
    if any(e != every[0] for e in every):
        failures.append(f"rank {rank}: {label}: ranks raised different errors: {every}")


def errors():
    shape = (8, 6, 4)
    g = helpers.global_values(shape, np.float64)
    box = Slab.X.box(rank, shape, nranks=P)
    a = jnp.asarray(g[helpers.sl(box.as_tuple())])
    bad = P - 1  # the rank that is wrong

    def wrong_shape(jit):
        x = a[:, :-1] if rank == bad else a

        def fn(v):
            return rjax.redistribute(v, Slab.X, Slab.Y)

        (jax.jit(fn) if jit else fn)(x)

    for jit in (False, True):
        expect_error(
            lambda: wrong_shape(jit),
            "InvalidValueError",
            rf"rank {bad} operand shape .* axis 1|axis 1, .*rank {bad} has 5",
            f"shape on one rank, jit={jit}",
        )

    def wrong_box():
        b = Box(box.lower, (box.upper[0], 5, 4)) if rank == bad else box
        rjax.redistribute(a if rank != bad else a[:, :5], b, Slab.Y)

    expect_error(wrong_box, "InvalidValueError", r"tile|outside|element", "box leaves a gap on one rank")

    def wrong_dtype():
        x = a.astype(jnp.float32) if rank == bad else a
        jax.jit(lambda v: rjax.redistribute(v, Slab.X, Slab.Y))(x)

    expect_error(
        wrong_dtype,
        "InvalidValueError",
        rf"inconsistent dtype .*rank {bad}|rank {bad}.*dtype",
        "dtype on one rank",
    )

    def x64_off():
        jax.config.update("jax_enable_x64", rank != bad)
        try:
            rjax.redistribute(np.asarray(a), Slab.X, Slab.Y)
        finally:
            jax.config.update("jax_enable_x64", True)

    expect_error(x64_off, "InvalidValueError", rf"rank {bad}: .*jax_enable_x64", "x64 off on one rank")

    def layout():
        rjax.redistribute(a, Slab.X, Slab.Y, options={"result_layout": "F"} if rank == bad else None)

    expect_error(layout, "NotSupportedError", rf"rank {bad}: .*result_layout", "result_layout F on one rank")

    def traced_on_some_ranks():
        # rank `bad` traces a call of its own before the program every rank runs: its lookup meets the
        # others' lookup of the program's call, and the planning refuses both on every rank
        if rank == bad:
            jax.jit(lambda v: rjax.redistribute(v.astype(jnp.float32), Slab.X, Slab.Y))(a)
        jax.jit(lambda v: rjax.redistribute(v, Slab.X, Slab.Y) * 2)(a)

    expect_error(traced_on_some_ranks, "InvalidValueError", r"dtype", "a call traced on one rank only")

    # a failure inside the handler of an eager call (simulated: the exchange raises the same agreed error on
    # every rank) comes back as the redist class itself, not as JAX's runtime error
    rjax.redistribute(a, Slab.X, Slab.Y)
    entry = next(
        e for e in rjax._entries.values() if e.in_shape == tuple(a.shape) and e.out_shape != e.in_shape
    )

    def refused(*args, **kwargs):
        raise redist.InvalidValueError("rank 0: simulated failure of the exchange")

    entry.r.execute = refused
    try:
        expect_error(
            lambda: rjax.redistribute(a, Slab.X, Slab.Y),
            "InvalidValueError",
            r"^rank 0: simulated",
            "an eager call's handler failure",
        )
    finally:
        del entry.r.execute

    # a compiled function whose plan was evicted: the handler's error, raised by JAX on every rank
    rjax.set_cache_size(1)
    f = jax.jit(lambda v: rjax.redistribute(v, Slab.X, Slab.Y))
    f(a)
    rjax.redistribute(a, Slab.X, Slab.Z)  # evicts f's plan

    expect_error(
        lambda: f(a).block_until_ready(),
        "InvalidStateError",
        r"freed .*trace it again",
        "a compiled call of an evicted plan",
    )
    rjax.set_cache_size(rjax.CACHE_SIZE)
    jax.clear_caches()
    y = jax.jit(lambda v: rjax.redistribute(v, Slab.X, Slab.Y))(a)  # traced again: planned again, runs
    check(
        np.array_equal(np.asarray(y), g[helpers.sl(Slab.Y.box(rank, shape, nranks=P).as_tuple())]),
        "after the eviction, traced again",
    )


def main():
    what = sys.argv[1:]
    try:
        for w in what:
            {"forward": forward, "forward-out": forward_out, "grad": grad, "errors": errors}[w]()
    except Exception:  # noqa: BLE001 -- recorded, reduced across ranks
        failures.append(f"rank {rank}: uncaught: {traceback.format_exc()}")
    every = comm.allgather(failures)
    if rank == 0:
        flat = [f for fs in every for f in fs]
        if flat:
            print(f"{len(flat)} FAILURE(S):")
            for f in flat[:40]:
                print("  " + f)
            sys.exit(1)
        print("ALL OK", flush=True)
    redist.finalize()


if __name__ == "__main__":
    main()
