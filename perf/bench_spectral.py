# SPDX-License-Identifier: Apache-2.0
"""examples/fft3d.py (redist exchanges + numpy.fft lines) against mpi4py-fft's PFFT, host, same MPI.

    mpiexec -n 2 python perf/bench_spectral.py --n 64 128 256 --iters 9 --json perf/data/bench_spectral_p2.json
    mpiexec -n 4 python perf/bench_spectral.py --n 64 128 256 --iters 9 --json perf/data/bench_spectral_p4.json

mpi4py-fft (``pip install mpi4py-fft``, built against FFTW; a benchmark-only dependency) runs the
same transforms with its own code: FFTW (FFTW_MEASURE plans) for the lines and one
``Alltoallw`` of subarray datatypes per transpose over its sub-communicators. Every variant is one
forward rfftn plus one backward irfftn of a float64 N^3 array on the same process grid (default
``MPI.Compute_dims(P, 2)``: 2 x 1 slabs at P = 2, 2 x 2 pencils at P = 4), checked first against
the other library (the gathered spectra and round trips must agree to 1e-12).

Variants, interleaved rounds, slowest rank, medians (perf/host_timing.py):

* redist fft3d, numpy.fft, contiguous -- PencilFFT.forward + backward, layout="contiguous" (result_layout:
                             every FFT on contiguous lines)
* redist fft3d, numpy.fft, natural    -- layout="natural" (C-order results, strided lines; the host default)
* redist fft3d, FFTW, ...  -- the same with FFTW lines (pyFFTW, FFTW_MEASURE: the library mpi4py-fft uses)
* mpi4py-fft PFFT         -- forward(normalize=False) + backward(normalize=False): no scaling pass
                             (its backward then differs from irfftn by N^3; the cheapest way it runs)
* mpi4py-fft PFFT, slab collapse -- at grids (P, 1) also ``grid=(-1,), collapse=True``: one 2-D FFTW
                             plan over the two local axes, its best slab configuration
* parts: each library's lines alone (redist: numpy.fft; mpi4py-fft: its FFTW objects) and its
  exchanges alone (redist: the four Redistribute.execute; mpi4py-fft: its Transfer calls), to show
  where the time goes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
from host_timing import interleaved_medians_ms

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))


def gathered(comm, local, slices, shape):
    """The global array on rank 0 from every rank's ``local`` at ``slices``."""
    parts = comm.gather((slices, np.ascontiguousarray(local)), root=0)
    if comm.rank:
        return None
    full = np.empty(shape, dtype=local.dtype)
    for sl, piece in parts:
        full[sl] = piece
    return full


def box_slices(box):
    return tuple(slice(a, b) for a, b in zip(box.lower, box.upper))


class Mpi4pyFFT:
    """mpi4py-fft's PFFT on ``grid`` with its arrays, and its parts (FFTW objects, Transfer calls)."""

    def __init__(self, comm, n, grid, *, slab_collapse=False):
        from mpi4py_fft import PFFT, newDistArray

        kw = {"grid": (-1,), "collapse": True} if slab_collapse else {"grid": grid}
        self.fft = PFFT(comm, (n, n, n), axes=(0, 1, 2), dtype=np.float64, **kw)
        self.u = newDistArray(self.fft, False)
        self.u_hat = newDistArray(self.fft, True)
        self.back = newDistArray(self.fft, False)
        self.in_slices = self.fft.local_slice(False)
        self.out_slices = self.fft.local_slice(True)

    def pair(self):
        self.fft.forward(self.u, self.u_hat, normalize=False)
        self.fft.backward(self.u_hat, self.back, normalize=False)

    def lines(self):
        for t in (self.fft.forward, self.fft.backward):
            for x in t._xfftn:
                x(normalize=False)

    def transfers(self):
        for t in (self.fft.forward, self.fft.backward):
            for i, tr in enumerate(t._transfer):
                tr(t._xfftn[i].output_array, t._xfftn[i + 1].input_array)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--iters", type=int, default=9)
    ap.add_argument("--grid", type=int, nargs=2, metavar=("P0", "P1"))
    ap.add_argument("--json", help="also write the medians here (rank 0)")
    args = ap.parse_args()

    import redist
    from fft3d import PencilFFT, default_grid
    from mpi4py import MPI

    redist.initialize(device_id="cpu")
    comm = redist.get_context().process_group.mpi_comm
    grid = tuple(args.grid) if args.grid else default_grid(comm.size)
    rows = []
    if comm.rank == 0:
        import mpi4py_fft

        print(f"# fft3d vs mpi4py-fft {mpi4py_fft.__version__}: P={comm.size}, grid {grid[0]}x{grid[1]}, float64 N^3, "
              f"forward + backward, median of {args.iters} interleaved rounds, slowest rank; "
              f"{MPI.Get_library_version().splitlines()[0].strip()}; numpy {np.__version__}; "
              f"{os.cpu_count()} CPU(s); load average {os.getloadavg()[0]:.2f}")
        print(f"{'N':>5} {'variant':<52} {'median ms':>10} {'speedup':>10}   (speedup: mpi4py-fft's best / this)")
    for n in args.n:
        rng = np.random.default_rng(n)
        glob = rng.standard_normal((n, n, n)) if comm.rank == 0 else None
        glob = comm.bcast(glob, root=0)
        ours = PencilFFT((n, n, n), grid, layout="contiguous")
        mine = {"redist fft3d, numpy.fft, contiguous": ours,
                "redist fft3d, numpy.fft, natural": PencilFFT((n, n, n), grid, layout="natural"),
                "redist fft3d, FFTW, contiguous": PencilFFT((n, n, n), grid, layout="contiguous", host_fft="fftw"),
                "redist fft3d, FFTW, natural": PencilFFT((n, n, n), grid, layout="natural", host_fft="fftw"),
                "redist fft3d, numpy.fft, planes": PencilFFT((n, n, n), grid, layout="planes"),
                "redist fft3d, FFTW, planes": PencilFFT((n, n, n), grid, layout="planes", host_fft="fftw")}
        u = ours.physical_empty()[0]
        u[...] = glob[box_slices(ours.physical_box)]
        u_hat, back = ours.spectral_empty()[0], ours.physical_empty()[0]
        peers = {"mpi4py-fft PFFT": Mpi4pyFFT(comm, n, grid)}
        if grid[1] == 1:
            peers["mpi4py-fft PFFT, slab collapse"] = Mpi4pyFFT(comm, n, grid, slab_collapse=True)

        # the same numbers: every variant's spectrum equals the first's, every round trip the field
        # (mpi4py-fft's unnormalised backward divided by N^3)
        ours.forward(u, out=u_hat)
        spec = gathered(comm, u_hat, box_slices(ours.spectral_box), ours.spectral_shape)
        results = {}
        for name, fft in mine.items():
            fft.forward(u, out=u_hat)
            fft.backward(u_hat, out=back)
            results[name] = (gathered(comm, u_hat, box_slices(fft.spectral_box), fft.spectral_shape),
                             gathered(comm, back, box_slices(fft.physical_box), fft.shape))
        for name, p in peers.items():
            p.u[...] = glob[p.in_slices]
            p.pair()
            results[name] = (gathered(comm, p.u_hat, p.out_slices, ours.spectral_shape),
                             gathered(comm, p.back / n**3, p.in_slices, ours.shape))
        bad = []
        if comm.rank == 0:
            for name, (theirs, trip) in results.items():
                err = max(np.max(np.abs(theirs - spec)) / np.max(np.abs(spec)), np.max(np.abs(trip - glob)))
                if not err < 1e-12:
                    bad.append(f"{name}: {err:.2e}")
        del results
        bad = comm.bcast(bad, root=0)
        if bad:
            raise SystemExit(f"results differ at N={n}: {bad}")

        def pair(fft, u=u, u_hat=u_hat, back=back):
            return lambda: (fft.forward(u, out=u_hat), fft.backward(u_hat, out=back))

        def exchanges(fft):
            return lambda: [r.execute() for r in fft._exchanges]

        def lines_only(fft, u=u, u_hat=u_hat, back=back):
            def run():
                keep, fft._exchange = fft._exchange, lambda r: None
                try:
                    fft.forward(u, out=u_hat)
                    fft.backward(u_hat, out=back)
                finally:
                    fft._exchange = keep
            return run

        variants = {name: pair(fft) for name, fft in mine.items()}
        variants.update({name: p.pair for name, p in peers.items()})
        for name, fft in mine.items():  # the lines of each, the exchanges of each layout
            variants[f"  part: {name}: lines"] = lines_only(fft)
            if "numpy" in name:
                variants[f"  part: redist {name.split(', ')[-1]} layout: exchanges"] = exchanges(fft)
        for name, p in peers.items():
            variants[f"  part: {name}: FFTW lines"] = p.lines
            variants[f"  part: {name}: transfers"] = p.transfers
        medians = interleaved_medians_ms(variants, comm, iters=args.iters)
        best_peer = min(medians[name] for name in peers)
        if comm.rank == 0:
            for name, ms in medians.items():
                speedup = f"{best_peer / ms:9.2f}x" if name in mine else ""
                print(f"{n:5d} {name:<52} {ms:10.3f} {speedup:>10}", flush=True)
            rows.append({"n": n, "nranks": comm.size, "grid": list(grid), "medians_ms": medians})
        for fft in mine.values():
            fft.free()
    if comm.rank == 0:
        print(f"results verified (redist == mpi4py-fft to 1e-12); load average after: {os.getloadavg()[0]:.2f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
