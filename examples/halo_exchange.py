# SPDX-License-Identifier: Apache-2.0
"""A halo exchange: Jacobi iterations for Laplace's equation on a 2-D grid split into row slabs.

Each rank owns a slab of rows. One ``Redistribute`` with ``allow_overlap=True`` moves, every
iteration, the rank's own rows plus one ghost row from each neighbour straight into the
interior of a ghosted array (``execute(out=...)`` takes a strided view). Two buffers alternate as
the operand (``reset_operand_unchecked``). At the end rank 0 compares the gathered grid with the
same iterations done on the whole grid in one process.

    mpiexec -n 4 python examples/halo_exchange.py                # 96 x 64 grid, 50 iterations
    mpiexec -n 3 python examples/halo_exchange.py --shape 13 9 --iterations 5
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import redist
from redist import Box, Redistribute, Slab


def boundary(shape: tuple[int, int]) -> np.ndarray:
    """The global grid at iteration 0: zero inside, 1 on the top edge, 0.5 on the left edge."""
    grid = np.zeros(shape)
    grid[0, :] = 1.0
    grid[1:, 0] = 0.5
    return grid


def jacobi(ghosted: np.ndarray, rows: slice) -> np.ndarray:
    """The new values of ``ghosted[rows]`` (rows of the ghosted array, ghosts around them)."""
    up = ghosted[rows.start - 1 : rows.stop - 1]
    down = ghosted[rows.start + 1 : rows.stop + 1]
    mid = ghosted[rows]
    new = mid.copy()
    new[:, 1:-1] = 0.25 * (up[:, 1:-1] + down[:, 1:-1] + mid[:, :-2] + mid[:, 2:])
    return new


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=2, default=[96, 64])
    parser.add_argument("--iterations", type=int, default=50)
    args = parser.parse_args()
    shape = (args.shape[0], args.shape[1])

    redist.initialize()
    comm = MPI.COMM_WORLD  # the processes redist.initialize() runs on by default
    rank = comm.Get_rank()
    mine = Slab.X.box(rank, shape)
    lo, hi = mine.lower[0], mine.upper[0]  # my rows: [lo, hi)
    u = boundary(shape)[lo:hi].copy()
    u_next = u.copy()
    first, last = max(lo - 1, 0), min(hi + 1, shape[0])  # my rows and one ghost row on each side
    ghosted = np.zeros((hi - lo + 2, shape[1]))  # ghosted[1:-1] are my rows
    interior = ghosted[1 - (lo - first) : ghosted.shape[0] - 1 + (last - hi)]
    # the grid's top and bottom rows never change: only rows 1 .. shape[0]-2 are updated
    update = slice(1 + max(0, 1 - lo), 1 + (hi - lo) - max(0, hi - (shape[0] - 1)))

    halo = Redistribute(u, Slab.X, Box((first, 0), (last, shape[1])), options={"allow_overlap": True})
    with halo:
        halo.plan()
        for _ in range(args.iterations):
            halo.execute(out=interior)  # my rows and my neighbours' edge rows
            u_next[update.start - 1 : update.stop - 1] = jacobi(ghosted, update)
            u, u_next = u_next, u
            halo.reset_operand_unchecked(u)  # the other buffer: same layout, no checks

    pieces = comm.gather(u, root=0)
    if pieces is not None:  # rank 0
        reference = boundary(shape)
        for _ in range(args.iterations):
            padded = np.vstack([reference[:1], reference, reference[-1:]])  # ghost rows outside the grid
            reference[1:-1] = jacobi(padded, slice(2, shape[0]))
        error = np.abs(np.concatenate(pieces) - reference).max()
        print(
            f"halo_exchange: {comm.Get_size()} ranks, grid {shape}, {args.iterations} iterations, "
            f"max error {error:.1e}"
        )
        if error > 1e-12:
            raise SystemExit("halo_exchange: the distributed result differs from the one-process reference")


if __name__ == "__main__":
    main()
