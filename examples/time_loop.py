# SPDX-License-Identifier: Apache-2.0
"""A time loop on the host: smooth a 3-D field along every axis, one axis-local pass at a time.

Each rank holds an X-slab (axes 1 and 2 whole), smooths along Y and Z there, moves the field to
Y-slabs (axis 0 whole) with one ``execute()``, smooths along X, and moves it back. Both
``Redistribute`` objects are planned once before the loop; inside it only ``execute()`` and
``reset_operand_unchecked()`` run (no checks, no allocation). At the end rank 0 compares the
gathered field with the same steps done on the whole array in one process.

    mpiexec -n 4 python examples/time_loop.py                # 64^3, 10 steps
    mpiexec -n 3 python examples/time_loop.py --shape 20 18 16 --steps 3
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import redist
from redist import Redistribute, Slab


def smooth(u: np.ndarray, axis: int) -> np.ndarray:
    """One periodic three-point smoothing pass along ``axis`` (the axis must be whole here)."""
    return 0.5 * u + 0.25 * (np.roll(u, 1, axis) + np.roll(u, -1, axis))


def initial(shape: tuple[int, ...]) -> np.ndarray:
    """The global initial field (every rank can compute it; each keeps its slab)."""
    grids = np.meshgrid(*(np.linspace(0, 2 * np.pi, n, endpoint=False) for n in shape), indexing="ij")
    return np.sin(grids[0]) * np.cos(2 * grids[1]) + 0.1 * grids[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=3, default=[64, 64, 64])
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    shape = tuple(args.shape)

    redist.initialize()  # collective: starts MPI (and the GPU, if any)
    comm = MPI.COMM_WORLD  # the processes redist.initialize() runs on by default
    rank = comm.Get_rank()
    x_box = Slab.X.box(rank, shape)
    u = np.ascontiguousarray(initial(shape)[x_box.lower[0] : x_box.upper[0]])  # my X-slab

    with Redistribute(u, Slab.X, Slab.Y) as to_y:  # collective; validated on every rank
        to_y.plan()  # collective; the plan is built once
        with Redistribute(to_y.execute(), Slab.Y, Slab.X) as to_x:  # any Y-slab array sets the layout
            to_x.plan()
            for _ in range(args.steps):
                u = smooth(smooth(u, 1), 2)  # axes 1 and 2 are whole on an X-slab
                to_y.reset_operand_unchecked(u)  # a new array, same layout: no checks, no communication
                v = smooth(to_y.execute(), 0)  # axis 0 is whole on a Y-slab
                to_x.reset_operand_unchecked(v)
                u = to_x.execute().copy()  # the result is persistent: copy what you keep

    pieces = comm.gather(u, root=0)
    if pieces is not None:  # rank 0
        reference = initial(shape)
        for _ in range(args.steps):
            reference = smooth(smooth(smooth(reference, 1), 2), 0)
        error = np.abs(np.concatenate(pieces) - reference).max()
        print(
            f"time_loop: {comm.Get_size()} ranks, global {shape}, {args.steps} steps, max error {error:.1e}"
        )
        if error > 1e-12:
            raise SystemExit("time_loop: the distributed result differs from the one-process reference")


if __name__ == "__main__":
    main()
