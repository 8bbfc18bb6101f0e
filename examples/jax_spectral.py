# SPDX-License-Identifier: Apache-2.0
"""A pseudo-spectral step in JAX on slabs, jitted and differentiated through redist.jax.

Every rank holds an x-slab of a periodic field u (n^3, float64). One step of the heat equation,
exact in Fourier space:

    FFT along y, z (local) -> redistribute x-slabs to y-slabs -> FFT along x
    -> multiply by exp(-nu |k|^2 dt) -> inverse FFT along x -> redistribute back -> inverse FFT y, z

The step is jitted; the loss (the sum over ranks of sum(w * step(u)^2)) is differentiated with
jax.grad, whose backward runs the adjoint redistributions. With --check, rank 0 gathers u, w, the
stepped field and the gradient and compares them with the same step and gradient computed by one
process with jnp.fft.fftn on the whole array.

    mpiexec -n 4 python examples/jax_spectral.py --n 32 --steps 3 --check
"""

from __future__ import annotations

import argparse

# the [jax] extra (CI's wheel check type-checks the examples without JAX)
import jax  # pyright: ignore[reportMissingImports]
import jax.numpy as jnp  # pyright: ignore[reportMissingImports]
import numpy as np

import redist
import redist.jax
from redist import Slab

jax.config.update("jax_enable_x64", True)  # before any array is made


def wavenumbers(n: int) -> np.ndarray:
    return np.fft.fftfreq(n, 1.0 / n)


def make_step(n: int, rank: int, nranks: int, nu: float, dt: float):
    """The jitted step of this rank's x-slab, and the decay factor of its y-slab in Fourier space."""
    ybox = Slab.Y.box(rank, (n, n, n), nranks=nranks)
    k = wavenumbers(n)
    kx, ky, kz = np.meshgrid(k, k[ybox.lower[1] : ybox.upper[1]], k, indexing="ij")
    decay = jnp.asarray(np.exp(-nu * (kx**2 + ky**2 + kz**2) * dt))

    def step(u):
        uh = jnp.fft.fftn(u.astype(jnp.complex128), axes=(1, 2))  # x-slab: y and z are local
        uh = redist.jax.redistribute(uh, Slab.X, Slab.Y)  # y-slab: x is local
        uh = jnp.fft.ifft(jnp.fft.fft(uh, axis=0) * decay, axis=0)
        uh = redist.jax.redistribute(uh, Slab.Y, Slab.X)  # back to x-slabs
        return jnp.fft.ifftn(uh, axes=(1, 2)).real

    return jax.jit(step)


def reference(u_full, w_full, steps: int, nu: float, dt: float):
    """One process, the whole array: the stepped field and the gradient of sum(w * stepped^2)."""
    n = u_full.shape[0]
    k = wavenumbers(n)
    kx, ky, kz = np.meshgrid(k, k, k, indexing="ij")
    decay = jnp.asarray(np.exp(-nu * (kx**2 + ky**2 + kz**2) * dt))

    def run(u):
        for _ in range(steps):
            u = jnp.fft.ifftn(jnp.fft.fftn(u) * decay).real
        return u

    out = run(jnp.asarray(u_full))
    grad = jax.grad(lambda u: jnp.sum(jnp.asarray(w_full) * run(u) ** 2))(jnp.asarray(u_full))
    return np.asarray(out), np.asarray(grad)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--n", type=int, default=32, help="grid points per axis (default 32)")
    ap.add_argument("--steps", type=int, default=3, help="time steps (default 3)")
    ap.add_argument("--nu", type=float, default=0.05, help="viscosity (default 0.05)")
    ap.add_argument("--dt", type=float, default=0.01, help="time step (default 0.01)")
    ap.add_argument(
        "--check", action="store_true", help="compare with one process computing on the whole array"
    )
    args = ap.parse_args(argv)

    redist.initialize()
    ctx = redist.get_context()
    assert ctx is not None  # after redist.initialize()
    pg = ctx.process_group
    rank, nranks, n = pg.rank, pg.nranks, args.n
    xbox = Slab.X.box(rank, (n, n, n), nranks=nranks)
    mine = tuple(slice(lo, hi) for lo, hi in zip(xbox.lower, xbox.upper))
    grid = np.arange(n) * 2 * np.pi / n
    x, y, z = np.meshgrid(grid, grid, grid, indexing="ij")
    u_full = np.sin(x) * np.cos(2 * y) + 0.5 * np.cos(3 * z) * np.sin(y + x)
    w_full = 1.0 + 0.1 * np.cos(x + 2 * z)
    u, w = jnp.asarray(u_full[mine]), jnp.asarray(w_full[mine])

    step = make_step(n, rank, nranks, args.nu, args.dt)

    def advance(v):
        for _ in range(args.steps):
            v = step(v)
        return v

    out = advance(u)
    grad = jax.jit(jax.grad(lambda v: jnp.sum(w * advance(v) ** 2)))(u)
    comm = pg.mpi_comm
    assert comm is not None  # redist.initialize()'s default group is MPI's
    energy = comm.allreduce(float(jnp.sum(out**2)))
    gnorm = comm.allreduce(float(jnp.sum(grad**2))) ** 0.5
    if rank == 0:
        print(
            f"jax_spectral: {nranks} rank(s), {n}^3, {args.steps} steps: energy {energy:.12e}, |grad| {gnorm:.12e}"
        )
    if args.check:
        outs = comm.gather((xbox.lower[0], np.asarray(out), np.asarray(grad)), root=0)
        if rank == 0:
            assert outs is not None  # the root's gather
            got_out = np.concatenate([o for _, o, _ in sorted(outs, key=lambda t: t[0])])
            got_grad = np.concatenate([g for _, _, g in sorted(outs, key=lambda t: t[0])])
            want_out, want_grad = reference(u_full, w_full, args.steps, args.nu, args.dt)
            ok = np.allclose(got_out, want_out, rtol=1e-12, atol=1e-12) and np.allclose(
                got_grad, want_grad, rtol=1e-10, atol=1e-12
            )
            print("matches one process" if ok else "DIFFERS from one process")
            if not ok:
                comm.Abort(1)
    redist.finalize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
