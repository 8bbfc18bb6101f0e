# SPDX-License-Identifier: Apache-2.0
"""Benchmark: a jitted redist.jax.redistribute against Redistribute.execute() of the same plan, and
against the same transpose written with mpi4jax.alltoall plus its packing (issue #46's targets).

    mpiexec -n 2 python perf/bench_jax.py [--sizes 64 128 256] [--iters 20] [--warmup 3]

A float64 N^3 array goes Slab.X -> Slab.Y. Rows, per size (one run, the same MPI):

* ``execute()``: ``Redistribute.execute()`` from Python, the engine-owned result (the plan the
  adapter uses; its repeated calls replay in C);
* ``execute()+copy``: the same, then the result copied into another array: what the adapter's
  handler does on CPU into a result buffer XLA hands over for the first time;
* ``execute(out=same)``: the same into one numpy array every call (replayed in C): what the handler
  does into a buffer XLA handed over before (the jitted row below gets the same buffer back);
* ``jax.jit redistribute``: ``jax.jit(lambda a: redist.jax.redistribute(a, Slab.X, Slab.Y))``,
  ``block_until_ready()`` per call;
* ``jax.jit copy (floor)``: a jitted copy of the same bytes into a fresh array (what any jitted
  function that returns this rank's y-slab costs JAX: dispatch, and XLA's fresh output, whose
  pages a large one faults in on every call);
* ``mpi4jax alltoall+pack``: jitted: pad the x-slab to equal blocks, split along y into P blocks
  (reshape/transpose: the packing), ``mpi4jax.alltoall``, unpack (concatenate along x, unpad)
  -- only for sizes P divides, and only where mpi4jax imports (else the row says why).

With ``--step`` (the GPU target, P = 1, or several ranks sharing a GPU): a jitted pseudo-spectral
step (FFT along y and z, redistribute to y-slabs, FFT along x, multiply, inverse FFT along x) against
the same step with the exchange replaced by a device copy of the same bytes (``jnp.copy`` behind
``lax.optimization_barrier``, so XLA keeps it); rows ``step: redistribute`` and ``step: copy``,
``/execute()`` then being the ratio to the copy step. On whatever device JAX uses. A last line gives
the host time the adapter's handler takes per call (``redist.jax._Entry.run``, median): XLA runs a
custom call on its host thread, so time spent there beyond the GPU work queued before it idles the GPU.
At P = 1 a third row, ``step: unordered (P=1)``, calls the same handler without the ordered effect
(a fresh token per call): what keeping the ranks' exchanges in program order costs JAX's dispatch.
It is a probe only: with several ranks, calls without the effect could run in different orders.

Each variant is checked against the expected values first. Iterations interleave the variants;
``comm.Barrier()`` before each call, ``MPI.Wtime()`` around it; an iteration's time is the max over
ranks; the table shows the median after the warm-up, and ``/execute()``: the variant's median over
``execute()``'s. Take figures on a quiet machine (perf/RESULTS.md).
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import redist  # noqa: E402
import redist.jax  # noqa: E402
from jax._src.core import abstract_token  # noqa: E402
from jax._src.lib.mlir.dialects import hlo  # noqa: E402
from jax.extend.core import Primitive  # noqa: E402
from jax.interpreters import mlir  # noqa: E402
from redist import Redistribute, Slab  # noqa: E402

# the probe row's primitive: redist.jax's custom call, no effect (a fresh token per call)
_unordered_p = Primitive("bench_redist_unordered")
_unordered_p.def_abstract_eval(lambda x, *, entry, shape: jax.core.ShapedArray(shape, x.dtype))


def _unordered_lowering(ctx, x, *, entry: int, shape: tuple[int, ...]):
    with_token = ctx.replace(avals_in=(*ctx.avals_in, abstract_token), avals_out=(*ctx.avals_out, abstract_token))
    call = jax.ffi.ffi_lowering(redist.jax._TARGET, has_side_effect=True)
    return list(call(with_token, x, hlo.create_token(), entry=np.int64(entry)))[:-1]


mlir.register_lowering(_unordered_p, _unordered_lowering)


def unordered_redistribute(v):
    """P = 1 only: redist.jax.redistribute's exchange without its ordered effect."""
    entry = redist.jax._lookup(v.shape, v.dtype, Slab.X, Slab.Y, redist.jax._coerce_options(None), None)
    return _unordered_p.bind(v, entry=entry.number, shape=entry.out_shape)


def values(box, shape) -> np.ndarray:
    """Element value = global linear index, for the elements of ``box``."""
    idx = np.indices(tuple(h - lo for lo, h in zip(box.lower, box.upper)), dtype=np.int64)
    lin = np.zeros(idx.shape[1:], np.int64)
    for d, n in enumerate(shape):
        lin = lin * n + idx[d] + box.lower[d]
    return lin.astype(np.float64)


def mpi4jax_variant(n: int, rank: int, nranks: int, comm):
    """The jitted alltoall transpose, or the reason there is none."""
    try:
        import mpi4jax
    except ImportError as e:
        return None, f"mpi4jax not importable ({e})"
    if n % nranks:
        return None, f"{n} is not a multiple of P = {nranks} (mpi4jax.alltoall needs equal blocks)"
    b = n // nranks

    def transpose(a):  # a: (b, n, n) x-slab -> (n, b, n) y-slab
        blocks = a.reshape(b, nranks, b, n).transpose(1, 0, 2, 3)  # pack: block q = my x rows, q's y columns
        got = mpi4jax.alltoall(blocks, comm=comm)
        got = got[0] if isinstance(got, tuple) else got
        return got.reshape(n, b, n)  # unpack: block p holds p's x rows of my y columns, in rank order

    return jax.jit(transpose), None


def copy_of_output(rank: int, nranks: int, shape):
    """The exchange replaced by a copy of the same bytes (this rank's y-slab's), which XLA keeps."""
    out_shape = Slab.Y.box(rank, shape, nranks=nranks).box_shape

    def copy(a):
        if nranks > 1:
            a = a.reshape(-1)[: int(np.prod(out_shape))].reshape(out_shape)
        return jax.lax.optimization_barrier(jnp.copy(a))

    return copy


def timed(comm, fn) -> float:
    comm.Barrier()
    t0 = MPI.Wtime()
    fn()
    return comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)


def step_rows(n: int, rank: int, nranks: int, comm, args) -> None:
    """The jitted spectral step with the exchange, and with a device copy in its place (--step)."""
    shape = (n, n, n)
    xb = Slab.X.box(rank, shape, nranks=nranks)
    x = jnp.asarray(values(xb, shape)).astype(jnp.complex128)

    def step(a, move):
        a = jnp.fft.fftn(a, axes=(1, 2))
        a = move(a)
        return jnp.fft.ifft(jnp.fft.fft(a, axis=0) * 0.5, axis=0)

    variants = {"step: redistribute": jax.jit(lambda a: step(a, lambda v: redist.jax.redistribute(v, Slab.X, Slab.Y))),
                "step: copy": jax.jit(lambda a: step(a, copy_of_output(rank, nranks, shape)))}
    if nranks == 1:
        variants["step: unordered (P=1)"] = jax.jit(lambda a: step(a, unordered_redistribute))
    first = {name: np.asarray(f(x)) for name, f in variants.items()}
    if nranks == 1:  # the exchange is then the identity: every variant computes the same step
        for name, got in first.items():
            np.testing.assert_array_equal(got, first["step: copy"], err_msg=name)
    times: dict[str, list[float]] = {k: [] for k in variants}
    entry_run, inside = redist.jax._Entry.run, []

    def timed_run(self, src, dst, stream):
        t0 = time.perf_counter()
        entry_run(self, src, dst, stream)
        inside.append(time.perf_counter() - t0)

    redist.jax._Entry.run = timed_run
    try:
        for it in range(args.warmup + args.iters):
            for name, f in variants.items():
                t = timed(comm, lambda f=f: f(x).block_until_ready())
                if it >= args.warmup:
                    times[name].append(t)
    finally:
        redist.jax._Entry.run = entry_run
    base = float(np.median(times["step: copy"]))
    handler = comm.allreduce(float(np.median(inside[args.warmup :])), op=MPI.MAX)
    if rank == 0:
        for name, ts in times.items():
            med = float(np.median(ts))
            print(f"{n:>5} {name:<24} {med * 1e3:>10.3f} {min(ts) * 1e3:>9.3f} {med / base:>11.2f}  ({jax.devices()[0]})")
        print(f"{n:>5} {'  handler (host, median)':<24} {handler * 1e3:>10.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--step", action="store_true", help="the pseudo-spectral step, redistribute vs a device copy")
    args = ap.parse_args()
    redist.initialize()
    pg = redist.get_context().process_group
    rank, nranks, comm = pg.rank, pg.nranks, MPI.COMM_WORLD
    if rank == 0:
        print(f"bench_jax: P = {nranks}, {'the complex128 step' if args.step else 'float64'}, Slab.X -> Slab.Y, {args.iters} iterations after {args.warmup} "
              f"warm-up, jax {jax.__version__}; {MPI.Get_library_version().splitlines()[0]}")
        print(f"{'N':>5} {'variant':<24} {'median ms':>10} {'min ms':>9} {'/execute()':>11}")
    if args.step:
        for n in args.sizes:
            step_rows(n, rank, nranks, comm, args)
        redist.finalize()
        return
    for n in args.sizes:
        shape = (n, n, n)
        xb, yb = Slab.X.box(rank, shape, nranks=nranks), Slab.Y.box(rank, shape, nranks=nranks)
        a = values(xb, shape)
        want = values(yb, shape)
        x = jnp.asarray(a)
        r = Redistribute(a, Slab.X, Slab.Y)
        r.plan()
        out = np.empty(want.shape)
        f = jax.jit(lambda v: redist.jax.redistribute(v, Slab.X, Slab.Y))
        floor = jax.jit(copy_of_output(rank, nranks, shape))
        variants = {
            "execute()": lambda: r.execute(),
            "execute()+copy": lambda: np.copyto(out, r.execute()),
            "execute(out=same)": lambda: r.execute(out=out),
            "jax.jit redistribute": lambda: f(x).block_until_ready(),
            "jax.jit copy (floor)": lambda: floor(x).block_until_ready(),
        }
        m4j, why = mpi4jax_variant(n, rank, nranks, comm)
        if m4j is not None:
            variants["mpi4jax alltoall+pack"] = lambda: m4j(x).block_until_ready()
        checks = {"execute()": r.execute(), "execute(out=same)": r.execute(out=out), "jax.jit redistribute": f(x)}
        if m4j is not None:
            checks["mpi4jax alltoall+pack"] = m4j(x)
        for name, got in checks.items():
            ok = comm.allreduce(int(np.array_equal(np.asarray(got), want)), op=MPI.MIN)
            if not ok:
                raise SystemExit(f"{name} gave wrong values at N = {n}")
        times: dict[str, list[float]] = {k: [] for k in variants}
        for it in range(args.warmup + args.iters):
            for name, fn in variants.items():
                t = timed(comm, fn)
                if it >= args.warmup:
                    times[name].append(t)
        base = float(np.median(times["execute()"]))
        if rank == 0:
            for name, ts in times.items():
                med = float(np.median(ts))
                print(f"{n:>5} {name:<24} {med * 1e3:>10.3f} {min(ts) * 1e3:>9.3f} {med / base:>11.2f}")
            if m4j is None:
                print(f"{n:>5} {'mpi4jax alltoall+pack':<24} skipped: {why}")
        r.free()
        time.sleep(0)
    redist.finalize()


if __name__ == "__main__":
    main()
