#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""taylor_green.py: the 3-D Taylor-Green vortex, pseudo-spectral Navier-Stokes on redist pencils.

    mpiexec -n 4 python examples/taylor_green.py                  # 32^3, nu = 0.01, 50 RK4 steps
    mpiexec -n 4 python examples/taylor_green.py --n 64 --steps 1000 --dt 0.01 --nu 0.0025 --every 10
    mpiexec -n 2 python examples/taylor_green.py --gpu            # cupy; the whole RK4 step in one CUDA graph

Incompressible Navier-Stokes in the periodic box [0, 2 pi)^3, rotational form,

    du/dt = u x omega - grad(p + |u|^2 / 2) + nu lap u,     div u = 0,

from u = (sin x cos y cos z, -cos x sin y cos z, 0). The velocity lives in Fourier space on the
spectral pencils of examples/fft3d.py (``PencilFFT``, three fields per transform: (u, v, w) and
then the vorticity move together in every redist exchange). Each right-hand side: two backward
transforms (velocity, vorticity), u x omega on the grid, one forward transform, 2/3-rule
dealiasing, the projection onto divergence-free fields, the viscous term. Classical RK4.

Printed per step: the kinetic energy E = <|u|^2>/2 and the dissipation eps = nu <|grad u|^2>
(Parseval, over every rank). At early times they follow Taylor & Green's series, derived in
``series``: E = e^(-6 nu t)/8 - (5/192) nu t^3 + ..., eps = nu (3/4 e^(-6 nu t) + (5/64) t^2 + ...)
(the t^3 / t^2 terms are the nonlinear transfer; the rest is the linear viscous decay).

All the arithmetic is array calls with ``out=`` into arrays made at start-up, the same code for
numpy and cupy. On GPUs that is what lets the whole RK4 step (4 right-hand sides: 12 transforms,
24 redist exchanges, cuFFT and the elementwise kernels) be captured once into one CUDA graph on a
cupy stream (every ``execute`` inside records the exchange into the capture), then replayed once
per step (``--eager`` runs the same calls without the graph).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np
from fft3d import PencilFFT, communicator, start
from mpi4py import MPI

__all__ = ["TaylorGreen", "max_stable_dt", "series"]

RK4_A = (1 / 6, 1 / 3, 1 / 3, 1 / 6)  # weights of the four stages in the update
RK4_B = (0.5, 0.5, 1.0)  # where stages 2, 3, 4 evaluate, as a fraction of dt
RK4_REAL = 2.785  # classical RK4 is stable for y' = -a y while a dt <= 2.785
EARLY = 0.25  # the end-of-run comparison with the series uses the last step at or before this time


def max_stable_dt(n: int, nu: float) -> float:
    """The largest dt at which RK4 keeps the viscous decay of every retained mode stable: the fastest
    is the corner of the 2/3-rule cube, |k_i| = the largest integer below n/3 on every axis. (The
    advection adds its own bound, about |u| k_max dt <= 2.8; for the Taylor-Green vortex |u| <= 1.)"""
    kmax = min(math.ceil(n / 3) - 1, n // 2)
    return math.inf if nu == 0 or kmax == 0 else RK4_REAL / (nu * 3 * kmax**2)


def series(t: float, nu: float) -> tuple[float, float]:
    """(E, eps) of the Taylor-Green vortex for small t: the exact Taylor expansion to t^3 (E) and
    t^2 (eps), with the linear viscous decay kept whole.

    With u0 the initial field (every mode |k|^2 = 3, E0 = 1/8, <|grad u0|^2> = 3/4), dE/dt = -nu D
    where D = <|grad u|^2>. The first nonlinear correction u1 = -P(u0 . grad u0) is
    (-sin 2x cos 2z, -sin 2y cos 2z, sin 2z (cos 2x + cos 2y)) / 8 (|k|^2 = 8, orthogonal to u0), so
    D'(0) = -6 nu D0 and D''(0) = 2 <|grad u1|^2> + 6 <u0 . u_tt> = 2/8 - 6/64 + 27 nu^2 = 5/32 + 27 nu^2:
    D(t) = (3/4) e^(-6 nu t) + (5/64) t^2 + O(nu t^3, t^4) (inviscid: (3/4)(1 + (5/48) t^2), Taylor &
    Green 1937), and E(t) = e^(-6 nu t)/8 - (5/192) nu t^3 + O(nu^2 t^4, nu t^5).
    """
    decay = math.exp(-6 * nu * t)
    return decay / 8 - 5 / 192 * nu * t**3, nu * (0.75 * decay + 5 / 64 * t**2)


class TaylorGreen:
    """The solver state on this rank: spectral velocity, work arrays, wavenumbers (collective set-up)."""

    def __init__(
        self, n: int, *, nu: float, dt: float, grid=None, gpu: bool = False, stream=None, layout: str = "auto"
    ):
        self.n, self.nu, self.dt = n, nu, dt
        fft = self.fft = PencilFFT((n, n, n), grid, nfields=3, gpu=gpu, stream=stream, layout=layout)
        xp = self.xp = fft.xp
        self.comm = communicator()
        lo, hi = fft.spectral_box.lower, fft.spectral_box.upper
        k = np.fft.fftfreq(n, 1.0 / n)
        kz = np.arange(n // 2 + 1, dtype=float)
        kx, ky, kz = k[lo[0] : hi[0], None, None], k[None, lo[1] : hi[1], None], kz[None, None, lo[2] : hi[2]]
        k2 = kx**2 + ky**2 + kz**2
        cut = n / 3  # 2/3 rule: keep |k_i| < n/3 on every axis
        dealias = (np.abs(kx) < cut) & (np.abs(ky) < cut) & (kz < cut)
        # Parseval over the half spectrum: the kz = 0 and Nyquist planes appear once, the others twice
        weight = np.where((kz == 0) | ((n % 2 == 0) & (kz == n // 2)), 1.0, 2.0)

        def to(a):
            return xp.asarray(np.ascontiguousarray(a))

        self.k = (to(kx), to(ky), to(kz))
        self.ik = tuple(to(1j * a) for a in (kx, ky, kz))
        self.inv_k2 = to(1.0 / np.where(k2 == 0, 1.0, k2))
        self.dealias = to(dealias.astype(float))
        self.nu_k2 = to(nu * k2)
        self.weight, self.weight_k2 = to(weight), to(weight * k2)  # Parseval weights (diagnostics)

        spectral = fft.spectral_empty
        self.U, self.U0, self.U1, self.dU, self.curl = (
            spectral(),
            spectral(),
            spectral(),
            spectral(),
            spectral(),
        )
        self.tmp_hat = spectral()[0]
        self.u, self.omega, self.nonlinear = fft.physical_empty(), fft.physical_empty(), fft.physical_empty()
        self.tmp = fft.physical_empty()[0]
        self.t, self.steps = 0.0, 0
        self._initial()

    def _initial(self):
        """u = (sin x cos y cos z, -cos x sin y cos z, 0) on this rank's physical box, transformed."""
        lo, hi = self.fft.physical_box.lower, self.fft.physical_box.upper
        x = [
            2 * np.pi * np.arange(a, b)[sl] / self.n
            for a, b, sl in zip(
                lo, hi, ((slice(None), None, None), (None, slice(None), None), (None, None, slice(None)))
            )
        ]
        u = np.sin(x[0]) * np.cos(x[1]) * np.cos(x[2])
        v = -np.cos(x[0]) * np.sin(x[1]) * np.cos(x[2])
        for f, a in enumerate((u, v, np.zeros_like(u))):
            self.u[f][...] = self.xp.asarray(np.ascontiguousarray(np.broadcast_to(a, self.u[f].shape)))
        self.fft.forward(self.u, out=self.U)
        for f in range(3):  # the transform's round-off past the cut
            self.xp.multiply(self.U[f], self.dealias, out=self.U[f])

    # --- the right-hand side and the step: array calls with out=, nothing allocated -----------

    def rhs(self, U, dU):
        """dU = P(FFT(u x omega)) dealiased - nu k^2 U, for the spectral velocity U."""
        xp, ik, tmp_hat, tmp = self.xp, self.ik, self.tmp_hat, self.tmp
        self.fft.backward(U, out=self.u)
        for f, (a, b) in enumerate(((1, 2), (2, 0), (0, 1))):  # curl_f = i k_a U_b - i k_b U_a
            xp.multiply(U[b], ik[a], out=self.curl[f])
            xp.multiply(U[a], ik[b], out=tmp_hat)
            xp.subtract(self.curl[f], tmp_hat, out=self.curl[f])
        self.fft.backward(self.curl, out=self.omega)
        u, w = self.u, self.omega
        for f, (a, b) in enumerate(((1, 2), (2, 0), (0, 1))):  # (u x omega)_f = u_a w_b - u_b w_a
            xp.multiply(u[a], w[b], out=self.nonlinear[f])
            xp.multiply(u[b], w[a], out=tmp)
            xp.subtract(self.nonlinear[f], tmp, out=self.nonlinear[f])
        self.fft.forward(self.nonlinear, out=dU)
        # projection: dU -= k (k . dU) / k^2
        xp.multiply(dU[0], self.k[0], out=tmp_hat)
        for f in (1, 2):
            xp.multiply(dU[f], self.k[f], out=self.curl[0])  # the curl is consumed: reuse it as scratch
            xp.add(tmp_hat, self.curl[0], out=tmp_hat)
        xp.multiply(tmp_hat, self.inv_k2, out=tmp_hat)
        for f in range(3):
            xp.multiply(tmp_hat, self.k[f], out=self.curl[0])
            xp.subtract(dU[f], self.curl[0], out=dU[f])
            xp.multiply(U[f], self.nu_k2, out=self.curl[0])
            xp.subtract(dU[f], self.curl[0], out=dU[f])
            # dealiased last, the viscous term included: modes past the cut stay exactly zero (their
            # explicit viscous decay alone is unstable at n = 256 with dt = 0.01, from round-off)
            xp.multiply(dU[f], self.dealias, out=dU[f])

    def step(self):
        """One classical RK4 step of dt (the calls a CUDA graph captures; ``advance`` counts time)."""
        xp, dt = self.xp, self.dt
        for f in range(3):
            xp.copyto(self.U0[f], self.U[f])
            xp.copyto(self.U1[f], self.U[f])
        for stage in range(4):
            self.rhs(self.U, self.dU)
            for f in range(3):
                if stage < 3:
                    xp.multiply(self.dU[f], RK4_B[stage] * dt, out=self.U[f])
                    xp.add(self.U[f], self.U0[f], out=self.U[f])
                xp.multiply(self.dU[f], RK4_A[stage] * dt, out=self.tmp_hat)
                xp.add(self.U1[f], self.tmp_hat, out=self.U1[f])
        for f in range(3):
            xp.copyto(self.U[f], self.U1[f])

    def advance(self):
        self.steps += 1
        self.t = self.steps * self.dt

    def diagnostics(self) -> tuple[float, float]:
        """Collective: (E, eps) of the current velocity, summed over every rank."""
        xp, norm = self.xp, float(self.n) ** 6
        power = sum(
            xp.real(self.U[f]) ** 2 + xp.imag(self.U[f]) ** 2 for f in range(3)
        )  # temporaries: not captured
        local = np.array(
            [
                0.5 * float(xp.sum(self.weight * power)) / norm,
                self.nu * float(xp.sum(self.weight_k2 * power)) / norm,
            ]
        )
        total = np.empty(2)
        self.comm.Allreduce(local, total, op=MPI.SUM)
        return float(total[0]), float(total[1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run under mpiexec: mpiexec -n P python examples/taylor_green.py [options]",
    )
    ap.add_argument("--n", type=int, default=32, help="grid points per axis (default 32)")
    ap.add_argument("--nu", type=float, default=0.01, help="kinematic viscosity (default 0.01: Re = 100)")
    ap.add_argument("--dt", type=float, default=0.01, help="time step (default 0.01)")
    ap.add_argument("--steps", type=int, default=50, help="RK4 steps (default 50)")
    ap.add_argument("--every", type=int, default=1, help="print every this many steps (default 1)")
    ap.add_argument(
        "--grid", type=int, nargs=2, metavar=("P0", "P1"), help="process grid (default: MPI.Compute_dims)"
    )
    ap.add_argument(
        "--gpu", action="store_true", help="cupy on one GPU per rank, the RK4 step in one CUDA graph"
    )
    ap.add_argument(
        "--eager", action="store_true", help="with --gpu: launch the step's calls without the graph"
    )
    ap.add_argument(
        "--layout",
        choices=["auto", "contiguous", "natural"],
        default="auto",
        help="exchange results (examples/fft3d.py): auto (default), contiguous or natural",
    )
    args = ap.parse_args(argv)
    if args.dt > max_stable_dt(args.n, args.nu):
        ap.error(
            f"--dt {args.dt:g} is past RK4's stability limit for the viscous term at --n {args.n}, "
            f"--nu {args.nu:g}: take --dt <= {max_stable_dt(args.n, args.nu):.3g}"
        )

    comm, stream = start(args.gpu)
    tg = TaylorGreen(
        args.n, nu=args.nu, dt=args.dt, grid=args.grid, gpu=args.gpu, stream=stream, layout=args.layout
    )
    sync = stream.synchronize if stream is not None else (lambda: None)
    mode = "host" if not args.gpu else ("GPU, eager" if args.eager else "GPU, one CUDA graph per RK4 step")
    if comm.rank == 0:
        print(
            f"taylor_green: {comm.size} rank(s), {args.n}^3, nu {args.nu:g}, dt {args.dt:g}, RK4, {mode}; "
            f"{tg.fft.describe()}"
        )
        print(f"{'step':>6} {'t':>8} {'energy':>24} {'dissipation':>24}")

    early = []  # (t, E, eps) of the last step where the early-time series holds (t <= EARLY)

    def report():
        e, eps = tg.diagnostics()
        if tg.t <= EARLY or not early:
            early[:] = [tg.t, e, eps]
        if comm.rank == 0 and (tg.steps % args.every == 0 or tg.steps == args.steps):
            print(f"{tg.steps:6d} {tg.t:8.4f} {e:24.16e} {eps:24.16e}", flush=True)

    report()
    graph = None
    step_times = []
    for s in range(args.steps):
        t0 = time.perf_counter()
        if graph is not None:
            graph.launch(stream=stream)
        elif args.gpu and not args.eager and s > 0:
            # step 1 ran eagerly: cuFFT plans, cupy kernels and redist's exchanges now exist. Capture the
            # next step (nothing runs while capturing), then launch the graph for it and every later one.
            assert stream is not None
            stream.begin_capture()
            tg.step()
            graph = stream.end_capture()
            graph.launch(stream=stream)
        else:
            tg.step()
        sync()
        step_times.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
        tg.advance()
        report()
    if comm.rank == 0 and len(step_times) > 2:
        timed = sorted(step_times[2:])
        print(
            f"time per step: median {timed[len(timed) // 2] * 1e3:.3f} ms (slowest rank, steps 3..{args.steps})"
        )
    t, e, eps = early
    se, seps = series(t, args.nu)
    if comm.rank == 0 and t > 0:
        print(
            f"Taylor-Green series at t = {t:g}: energy {se:.10e} (computed - series {e - se:+.3e}), "
            f"dissipation {seps:.10e} (computed - series {eps - seps:+.3e})"
        )
    if graph is not None:
        del graph  # our graph is gone: redist may free what its recorded copies used
        tg.fft.release_captured()
    tg.fft.free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
